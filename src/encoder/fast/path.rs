//! Which instruction set the packed encoder's kernels and operations run on ([`KernelPath`]),
//! chosen once at load from what the CPU offers: the one thing `kernels` and `ops` both
//! need, so neither has to use the other for it.

#[cfg(target_arch = "x86_64")]
use std::sync::OnceLock;

/// Which instruction set the kernels use. Chosen once at load ([`KernelPath::detect`]); tests
/// force each available one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelPath {
    /// As [`KernelPath::Avx512Vnni`], with int8 products on AMX tiles (`tdpbusd`).
    Amx,
    /// AVX-512F (fp32) and AVX-512 VNNI (`vpdpbusd`, int8), with AVX-512BW and FMA.
    Avx512Vnni,
    /// Plain Rust over the same packed layouts (the compiler's baseline vectorisation).
    Portable,
}

impl KernelPath {
    /// The fastest path this CPU runs.
    pub fn detect() -> Self {
        KernelPath::available_paths()[0]
    }

    /// The path called `name` (`portable`, `avx512-vnni`, `amx`; any case) if this CPU runs
    /// it; else logged, and None (the fastest is used).
    pub fn named(name: &str) -> Option<Self> {
        let paths = KernelPath::available_paths();
        let found = paths
            .iter()
            .find(|p| p.name().eq_ignore_ascii_case(name.trim()))
            .copied();
        if found.is_none() {
            let names: Vec<_> = paths.iter().map(|p| p.name()).collect();
            tracing::warn!(
                "kernels {name:?} is not a path this CPU runs ({}); using {}",
                names.join(", "),
                names[0]
            );
        }
        found
    }

    /// True when this CPU can run the path.
    pub fn available(self) -> bool {
        match self {
            KernelPath::Portable => true,
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512Vnni => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
                    && std::arch::is_x86_feature_detected!("avx512vnni")
                    && std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "x86_64")]
            KernelPath::Amx => KernelPath::Avx512Vnni.available() && amx_available(),
            #[cfg(not(target_arch = "x86_64"))]
            KernelPath::Avx512Vnni | KernelPath::Amx => false,
        }
    }

    /// Every path this CPU can run, fastest first (tests force each).
    pub fn available_paths() -> Vec<KernelPath> {
        [
            KernelPath::Amx,
            KernelPath::Avx512Vnni,
            KernelPath::Portable,
        ]
        .into_iter()
        .filter(|p| p.available())
        .collect()
    }

    /// Name for logs and benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Amx => "amx-int8",
            KernelPath::Avx512Vnni => "avx512-vnni",
            KernelPath::Portable => "portable",
        }
    }
}

#[cfg(target_arch = "x86_64")]
/// True when the CPU has AMX-TILE and AMX-INT8 and the kernel lets this process use
/// the tile registers (Linux asks each process to request them once; asked here).
fn amx_available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(|| {
        // CPUID leaf 7, sub-leaf 0, EDX: bit 24 AMX-TILE, bit 25 AMX-INT8.
        let edx = std::arch::x86_64::__cpuid_count(7, 0).edx;
        edx & (1 << 24) != 0 && edx & (1 << 25) != 0 && os_grants_tiles()
    })
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn os_grants_tiles() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl with these arguments only changes this process's permissions.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(all(target_arch = "x86_64", not(target_os = "linux")))]
fn os_grants_tiles() -> bool {
    false
}
