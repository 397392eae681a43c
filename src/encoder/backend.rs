//! The only file that names a burn backend: which device the encoder runs on.

use std::fmt;
use std::str::FromStr;

use burn::tensor::Device;

use crate::error::{Error, Result, UserError};

/// Where the encoder runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceKind {
    /// burn's pure-Rust `flex` CPU backend (the default).
    #[default]
    Cpu,
    /// burn-cuda on the GPU with this index (needs the `cuda` feature).
    Cuda(usize),
}

impl DeviceKind {
    /// The burn device.
    pub fn device(self) -> Result<Device> {
        match self {
            DeviceKind::Cpu => Ok(Device::flex()),
            #[cfg(feature = "cuda")]
            DeviceKind::Cuda(i) => {
                cuda_probe(i).map_err(|problem| UserError::DeviceUnavailable {
                    requested: self.to_string(),
                    fix: format!("{problem}; use --device cpu on this machine"),
                })?;
                Ok(Device::cuda(i))
            }
            #[cfg(not(feature = "cuda"))]
            DeviceKind::Cuda(_) => Err(UserError::DeviceUnavailable {
                requested: self.to_string(),
                fix: "this kindred was built without GPU support; rebuild with \
                      `cargo build --release --features cuda`, or use --device cpu"
                    .into(),
            }
            .into()),
        }
    }
}

/// Checks that GPU `index` can be used before burn-cuda is asked for it: burn-cuda panics on a
/// device thread when the NVIDIA driver library is missing or the GPU does not exist, and the
/// process then aborts. Loads the driver (`libcuda.so.1`) as burn-cuda would, initialises it
/// and counts the GPUs; says what is wrong when that fails.
#[cfg(all(feature = "cuda", target_os = "linux"))]
fn cuda_probe(index: usize) -> std::result::Result<(), String> {
    use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
    type CuInit = unsafe extern "C" fn(c_uint) -> c_int;
    type CuDeviceGetCount = unsafe extern "C" fn(*mut c_int) -> c_int;
    let names: [&CStr; 2] = [c"libcuda.so.1", c"libcuda.so"];
    // SAFETY: dlopen/dlsym/dlclose with NUL-terminated names; the symbols are the CUDA driver
    // API's cuInit and cuDeviceGetCount, called with the signatures the driver API documents,
    // before the library is closed.
    unsafe {
        let lib: *mut c_void = names
            .iter()
            .map(|n| libc::dlopen(n.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL))
            .find(|h| !h.is_null())
            .ok_or(
                "no NVIDIA driver here: libcuda.so.1 could not be loaded (install the \
                    NVIDIA driver, or add its folder to LD_LIBRARY_PATH)",
            )?;
        let sym = |name: &CStr| libc::dlsym(lib, name.as_ptr() as *const c_char);
        let (init, count) = (sym(c"cuInit"), sym(c"cuDeviceGetCount"));
        let outcome = if init.is_null() || count.is_null() {
            Err("the NVIDIA driver library lacks cuInit or cuDeviceGetCount".to_string())
        } else {
            let init: CuInit = std::mem::transmute(init);
            let count: CuDeviceGetCount = std::mem::transmute(count);
            let mut n: c_int = 0;
            match init(0) {
                0 => match count(&mut n) {
                    0 if usize::try_from(n).is_ok_and(|n| index < n) => Ok(()),
                    0 => Err(format!(
                        "this machine has {n} GPU(s), so there is no cuda:{index}"
                    )),
                    e => Err(format!(
                        "the NVIDIA driver could not count the GPUs (CUDA error {e})"
                    )),
                },
                e => Err(format!(
                    "the NVIDIA driver did not start (cuInit: CUDA error {e}; 100 means no GPU)"
                )),
            }
        };
        libc::dlclose(lib);
        outcome
    }
}

/// Elsewhere burn-cuda's own checks are the only ones.
#[cfg(all(feature = "cuda", not(target_os = "linux")))]
fn cuda_probe(_index: usize) -> std::result::Result<(), String> {
    Ok(())
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceKind::Cpu => write!(f, "cpu"),
            DeviceKind::Cuda(i) => write!(f, "cuda:{i}"),
        }
    }
}

impl FromStr for DeviceKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || UserError::InvalidArgument {
            name: "device",
            reason: format!("{s:?}; use cpu, cuda or cuda:N"),
        };
        match s {
            "cpu" => Ok(DeviceKind::Cpu),
            "cuda" => Ok(DeviceKind::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|i| i.parse().ok())
                .map(DeviceKind::Cuda)
                .ok_or_else(|| bad().into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_devices_and_explains_bad_ones() {
        assert_eq!("cpu".parse::<DeviceKind>().expect("cpu"), DeviceKind::Cpu);
        assert_eq!(
            "cuda".parse::<DeviceKind>().expect("cuda"),
            DeviceKind::Cuda(0)
        );
        assert_eq!(
            "cuda:3".parse::<DeviceKind>().expect("cuda:3"),
            DeviceKind::Cuda(3)
        );
        let err = "gpu"
            .parse::<DeviceKind>()
            .expect_err("unknown")
            .to_string();
        assert!(err.contains("use cpu, cuda or cuda:N"), "{err}");
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_says_how_to_rebuild() {
        let err = DeviceKind::Cuda(0)
            .device()
            .expect_err("no cuda")
            .to_string();
        assert!(err.contains("--features cuda"), "{err}");
    }

    /// No machine has this GPU, with or without a driver: refused with a reason, where
    /// burn-cuda's panic on its device thread used to abort the process.
    #[cfg(all(feature = "cuda", target_os = "linux"))]
    #[test]
    fn a_gpu_that_cannot_exist_is_refused_with_a_reason() {
        let err = DeviceKind::Cuda(usize::MAX)
            .device()
            .expect_err("no such GPU")
            .to_string();
        assert!(
            err.contains("is not available") && err.contains("--device cpu"),
            "{err}"
        );
    }
}
