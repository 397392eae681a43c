//! Matrix kernels of the packed encoder: `y = x·W + b` with `W` packed once, at load, into
//! column panels in the layout the micro-kernel reads, in two precisions:
//!
//! - fp32: panels of [`F32_NR`] columns, `k` rows each (`[panel][k][32]`); an AVX-512F
//!   micro-kernel of up to 12 rows × 32 columns (24 accumulators, one broadcast per row and k).
//! - int8: weights quantised symmetrically per output column (scale `max|w| / 127`); panels of
//!   [`I8_NR`] columns in groups of four k (`[panel][k / 4][64][4]`), the layout `vpdpbusd`
//!   multiplies; activations are quantised per row to u8 with a zero point
//!   ([`quantize_rows`]); an AVX-512 VNNI micro-kernel of up to 6 rows × 64 columns. The i32
//!   accumulator is turned back into f32 as `(acc − zp·Σw) · s_row · s_col + b`.
//!
//! Every kernel has a portable version over the same packed layout; [`KernelPath`] picks one
//! at run time ([`KernelPath::detect`]) and tests force each to check they agree. Work is
//! split over (row block, panel) tasks, shared with the forward's team (`team.rs`) when it
//! has one, else run on the current rayon pool.

use rayon::prelude::*;

/// Columns per fp32 panel (two 16-lane registers).
pub const F32_NR: usize = 32;
/// Most rows of one fp32 micro-tile.
const F32_MR: usize = 12;
/// Columns per int8 panel (four 16-lane i32 registers).
pub const I8_NR: usize = 64;
/// Most rows of one int8 micro-tile.
const I8_MR: usize = 6;
/// Rows per parallel task (a multiple of both tile heights).
const ROW_BLOCK: usize = 96;

/// Which instruction set the kernels use. Chosen once at load ([`KernelPath::detect`]); tests
/// force each available one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelPath {
    /// AVX-512F (fp32) and AVX-512 VNNI (`vpdpbusd`, int8), with AVX-512BW and FMA.
    Avx512Vnni,
    /// Plain Rust over the same packed layouts (the compiler's baseline vectorisation).
    Portable,
}

impl KernelPath {
    /// The fastest path this CPU runs, unless `KINDRED_KERNELS=portable` forces the portable
    /// one (for comparisons and for CPUs whose vector units misbehave).
    pub fn detect() -> Self {
        if std::env::var("KINDRED_KERNELS").is_ok_and(|v| v.eq_ignore_ascii_case("portable")) {
            return KernelPath::Portable;
        }
        if KernelPath::Avx512Vnni.available() {
            KernelPath::Avx512Vnni
        } else {
            KernelPath::Portable
        }
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
            #[cfg(not(target_arch = "x86_64"))]
            KernelPath::Avx512Vnni => false,
        }
    }

    /// Every path this CPU can run, fastest first (tests force each).
    pub fn available_paths() -> Vec<KernelPath> {
        [KernelPath::Avx512Vnni, KernelPath::Portable]
            .into_iter()
            .filter(|p| p.available())
            .collect()
    }

    /// Name for logs and benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Avx512Vnni => "avx512-vnni",
            KernelPath::Portable => "portable",
        }
    }
}

/// What the kernel does to each output tile after `x·W + b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epilogue {
    /// Nothing more.
    Bias,
    /// GELU.
    Gelu {
        /// The tanh approximation instead of the erf form.
        tanh: bool,
    },
}

/// A raw pointer the parallel tasks write disjoint parts through.
#[derive(Clone, Copy)]
struct SendPtr<T>(*mut T);
// SAFETY: every task writes a disjoint set of output elements (its row block × its panel).
unsafe impl<T> Send for SendPtr<T> {}
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The pointer (a method, so closures capture the wrapper, not the raw field).
    fn get(self) -> *mut T {
        self.0
    }
}

/// A linear layer with fp32 weights packed for the fp32 kernel.
#[derive(Debug, Clone)]
pub struct PackedF32 {
    k: usize,
    n: usize,
    /// `[panel][k][F32_NR]`, columns past `n` zero.
    data: Vec<f32>,
    bias: Vec<f32>,
}

impl PackedF32 {
    /// Packs `w` (`k × n`, row-major, as burn's `Linear` stores it) and `bias` (`n`).
    pub fn new(w: &[f32], bias: &[f32], k: usize, n: usize) -> Self {
        assert_eq!(w.len(), k * n, "weight shape");
        assert_eq!(bias.len(), n, "bias shape");
        let panels = n.div_ceil(F32_NR);
        let mut data = vec![0f32; panels * k * F32_NR];
        for p in 0..panels {
            for kk in 0..k {
                for c in 0..F32_NR {
                    let col = p * F32_NR + c;
                    if col < n {
                        data[(p * k + kk) * F32_NR + c] = w[kk * n + col];
                    }
                }
            }
        }
        let mut padded = bias.to_vec();
        padded.resize(panels * F32_NR, 0.0);
        PackedF32 {
            k,
            n,
            data,
            bias: padded,
        }
    }

    /// Output width.
    pub fn n(&self) -> usize {
        self.n
    }

    /// `out = x·W + b` then `epilogue`, for `x` of `m × k` and `out` of `m × n`.
    pub fn apply(&self, path: KernelPath, x: &[f32], m: usize, out: &mut [f32], ep: Epilogue) {
        let (k, n) = (self.k, self.n);
        assert!(x.len() >= m * k && out.len() >= m * n, "buffer sizes");
        let panels = n.div_ceil(F32_NR);
        let blocks = m.div_ceil(ROW_BLOCK);
        let out_ptr = SendPtr(out.as_mut_ptr());
        let task = |t: usize| {
            let (b, p) = (t / panels, t % panels);
            let ncols = F32_NR.min(n - p * F32_NR);
            let w = &self.data[p * k * F32_NR..(p + 1) * k * F32_NR];
            let bias = &self.bias[p * F32_NR..(p + 1) * F32_NR];
            let mut r = b * ROW_BLOCK;
            let end = m.min(r + ROW_BLOCK);
            while r < end {
                let rows = F32_MR.min(end - r);
                let a = &x[r * k..(r + rows) * k];
                // SAFETY: rows r..r+rows, columns of panel p: written by this task alone.
                let o = unsafe { out_ptr.get().add(r * n + p * F32_NR) };
                unsafe { f32_tile(path, a, rows, k, w, bias, o, n, ncols, ep) };
                r += rows;
            }
        };
        run_tasks(
            blocks * panels,
            product_split(m * k * n, F32_PARALLEL_MACS),
            task,
        );
    }
}

/// Multiply-adds below which an fp32 product runs on the calling thread: waking a second
/// thread costs more than it saves (measured at batch 1: splitting every product still
/// paid, 188 → 293 texts/s on 2 cores).
const F32_PARALLEL_MACS: usize = 1 << 20;
/// The same for int8, whose multiply-adds are about four times cheaper (measured at batch
/// 1 on 2 cores: 442 texts/s on one thread, 376 with every product split).
const I8_PARALLEL_MACS: usize = 1 << 24;

/// Multiply-adds from which a product is shared with the forward's team helpers
/// ([`super::team`]): a handover costs well under a microsecond.
const TEAM_PARALLEL_MACS: usize = 1 << 18;

/// How a product's tasks may be spread, by its number of multiply-adds.
fn product_split(macs: usize, rayon_from: usize) -> Split {
    Split {
        team: macs >= TEAM_PARALLEL_MACS,
        rayon: macs >= rayon_from,
    }
}

/// Whether some work is worth spreading over the forward's team, and over rayon workers.
#[derive(Clone, Copy)]
struct Split {
    team: bool,
    rayon: bool,
}

/// Runs `task(0..count)`: with the forward's team when it has one and `split.team`, else on
/// the current rayon pool when `split.rayon`, else inline.
fn run_tasks(count: usize, split: Split, task: impl Fn(usize) + Sync + Send) {
    if super::team::leading() {
        if split.team {
            super::team::run(count, &task);
        } else {
            (0..count).for_each(task);
        }
    } else if !split.rayon || count == 1 || rayon::current_num_threads() == 1 {
        (0..count).for_each(task);
    } else {
        (0..count).into_par_iter().for_each(task);
    }
}

/// One fp32 tile: `rows` (≤ 12) rows of `a` (`rows × k`) times a packed panel plus `bias`
/// (32, padded), then the epilogue, into `out` (row stride `ldo`, `ncols` ≤ 32 valid columns).
///
/// # Safety
/// `out` must be valid for `rows` rows of `ldo` and `ncols` columns.
#[allow(clippy::too_many_arguments)]
unsafe fn f32_tile(
    path: KernelPath,
    a: &[f32],
    rows: usize,
    k: usize,
    w: &[f32],
    bias: &[f32],
    out: *mut f32,
    ldo: usize,
    ncols: usize,
    ep: Epilogue,
) {
    match path {
        #[cfg(target_arch = "x86_64")]
        KernelPath::Avx512Vnni => {
            let t = x86::Tile { out, ldo, ncols };
            macro_rules! tile {
                ($($mr:literal)*) => {
                    match rows {
                        $($mr => x86::f32_tile::<$mr>(a.as_ptr(), k, w.as_ptr(), bias.as_ptr(), t),)*
                        _ => unreachable!("tile rows"),
                    }
                };
            }
            tile!(1 2 3 4 5 6 7 8 9 10 11 12);
        }
        _ => {
            let mut acc = [[0f32; F32_NR]; F32_MR];
            portable_f32_tile(a, rows, k, w, &mut acc);
            for (r, row) in acc[..rows].iter().enumerate() {
                // SAFETY: the caller guarantees `ncols` valid columns on each of the rows.
                let o = unsafe { std::slice::from_raw_parts_mut(out.add(r * ldo), ncols) };
                for c in 0..ncols {
                    o[c] = row[c] + bias[c];
                }
            }
        }
    }
    epilogue(path, rows, out, ldo, ncols, ep);
}

/// Portable fp32 tile: `acc[r][c] = Σ_k a[r][k] · w[k][c]`.
fn portable_f32_tile(a: &[f32], rows: usize, k: usize, w: &[f32], acc: &mut [[f32; F32_NR]]) {
    for (r, acc) in acc.iter_mut().enumerate().take(rows) {
        let a = &a[r * k..(r + 1) * k];
        for (kk, &av) in a.iter().enumerate() {
            let wrow = &w[kk * F32_NR..(kk + 1) * F32_NR];
            for c in 0..F32_NR {
                acc[c] += av * wrow[c];
            }
        }
    }
}

/// Applies the epilogue to a stored tile.
///
/// # Safety
/// As [`f32_tile`].
unsafe fn epilogue(
    path: KernelPath,
    rows: usize,
    out: *mut f32,
    ldo: usize,
    ncols: usize,
    ep: Epilogue,
) {
    if let Epilogue::Gelu { tanh } = ep {
        for r in 0..rows {
            // SAFETY: the caller guarantees `ncols` valid columns on each of the tile's rows.
            let o = unsafe { std::slice::from_raw_parts_mut(out.add(r * ldo), ncols) };
            super::ops::gelu(path, o, tanh);
        }
    }
}

/// A linear layer with int8 weights (per output column) packed for the int8 kernel.
#[derive(Debug, Clone)]
pub struct PackedI8 {
    k: usize,
    /// `k` rounded up to a multiple of 4.
    kp: usize,
    n: usize,
    /// `[panel][kp / 4][I8_NR][4]`, padding zero.
    data: Vec<i8>,
    /// Per column (padded to whole panels): `max|w| / 127`.
    scale: Vec<f32>,
    /// Per column (padded): Σ_k of the quantised weights (for the activations' zero point).
    colsum: Vec<i32>,
    /// Per column (padded).
    bias: Vec<f32>,
}

/// Activations quantised per row: `x ≈ (q − zp) · scale`, rows padded to `kp` with zeros.
#[derive(Debug, Default)]
pub struct QuantRows {
    q: Vec<u8>,
    scale: Vec<f32>,
    zp: Vec<i32>,
    kp: usize,
}

/// Quantises the `m` rows of `x` (`m × k`) into `into` (asymmetric u8 per row, the zero
/// point chosen so that the row's minimum and maximum are represented; a constant row gets
/// scale 1).
pub fn quantize_rows(path: KernelPath, x: &[f32], m: usize, k: usize, into: &mut QuantRows) {
    let kp = k.next_multiple_of(4);
    into.kp = kp;
    into.q.clear();
    into.q.resize(m * kp, 0);
    into.scale.clear();
    into.scale.resize(m, 0.0);
    into.zp.clear();
    into.zp.resize(m, 0);
    let rows_per_task = 32;
    let tasks = m.div_ceil(rows_per_task);
    let (q, scale, zp) = (
        SendPtr(into.q.as_mut_ptr()),
        SendPtr(into.scale.as_mut_ptr()),
        SendPtr(into.zp.as_mut_ptr()),
    );
    let split = Split {
        team: tasks > 1,
        rayon: tasks > 1,
    };
    run_tasks(tasks, split, |t| {
        for r in t * rows_per_task..m.min((t + 1) * rows_per_task) {
            // SAFETY: row r of q, scale and zp (sized for m rows above) is this task's alone.
            let row = unsafe { std::slice::from_raw_parts_mut(q.get().add(r * kp), kp) };
            let (s, z) = super::ops::quantize_row(path, &x[r * k..(r + 1) * k], row);
            unsafe {
                *scale.get().add(r) = s;
                *zp.get().add(r) = z;
            }
        }
    });
}

impl PackedI8 {
    /// Quantises (per output column) and packs `w` (`k × n`, row-major) with `bias` (`n`).
    pub fn new(w: &[f32], bias: &[f32], k: usize, n: usize) -> Self {
        assert_eq!(w.len(), k * n, "weight shape");
        assert_eq!(bias.len(), n, "bias shape");
        let kp = k.next_multiple_of(4);
        let panels = n.div_ceil(I8_NR);
        let mut scale = vec![1f32; n];
        for (c, s) in scale.iter_mut().enumerate() {
            let max = (0..k).map(|kk| w[kk * n + c].abs()).fold(0f32, f32::max);
            if max > 0.0 {
                *s = max / 127.0;
            }
        }
        let mut data = vec![0i8; panels * kp * I8_NR];
        let mut colsum = vec![0i32; n];
        for p in 0..panels {
            for kk in 0..k {
                let (g, j) = (kk / 4, kk % 4);
                for c in 0..I8_NR {
                    let col = p * I8_NR + c;
                    if col < n {
                        let q = (w[kk * n + col] / scale[col]).round().clamp(-127.0, 127.0) as i8;
                        data[((p * kp / 4 + g) * I8_NR + c) * 4 + j] = q;
                        colsum[col] += i32::from(q);
                    }
                }
            }
        }
        let np = panels * I8_NR;
        scale.resize(np, 0.0);
        colsum.resize(np, 0);
        let mut bias = bias.to_vec();
        bias.resize(np, 0.0);
        PackedI8 {
            k,
            kp,
            n,
            data,
            scale,
            colsum,
            bias,
        }
    }

    /// Output width.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input width.
    pub fn k(&self) -> usize {
        self.k
    }

    /// `out = dequant(q·Wq) + b` then `epilogue`, for `q` quantised from `m × k` activations.
    pub fn apply(&self, path: KernelPath, q: &QuantRows, m: usize, out: &mut [f32], ep: Epilogue) {
        let (kp, n) = (self.kp, self.n);
        assert_eq!(q.kp, kp, "activations quantised for another width");
        assert!(q.q.len() >= m * kp && out.len() >= m * n, "buffer sizes");
        let panels = n.div_ceil(I8_NR);
        let blocks = m.div_ceil(ROW_BLOCK);
        let out_ptr = SendPtr(out.as_mut_ptr());
        let panel_len = kp * I8_NR;
        let task = |t: usize| {
            let (b, p) = (t / panels, t % panels);
            let c0 = p * I8_NR;
            let ncols = I8_NR.min(n - c0);
            let w = &self.data[p * panel_len..(p + 1) * panel_len];
            let cols = c0..c0 + I8_NR;
            let (colsum, scale, bias) = (
                &self.colsum[cols.clone()],
                &self.scale[cols.clone()],
                &self.bias[cols],
            );
            let mut r = b * ROW_BLOCK;
            let end = m.min(r + ROW_BLOCK);
            while r < end {
                let rows = I8_MR.min(end - r);
                let a = &q.q[r * kp..(r + rows) * kp];
                let (zp, sa) = (&q.zp[r..r + rows], &q.scale[r..r + rows]);
                // SAFETY: rows r..r+rows, columns of panel p: written by this task alone.
                let o = unsafe { out_ptr.get().add(r * n + c0) };
                match path {
                    #[cfg(target_arch = "x86_64")]
                    KernelPath::Avx512Vnni => unsafe {
                        let t = x86::Tile {
                            out: o,
                            ldo: n,
                            ncols,
                        };
                        let cols = x86::I8Cols {
                            colsum: colsum.as_ptr(),
                            scale: scale.as_ptr(),
                            bias: bias.as_ptr(),
                        };
                        macro_rules! tile {
                            ($($mr:literal)*) => {
                                match rows {
                                    $($mr => x86::i8_tile::<$mr>(a.as_ptr(), kp, w.as_ptr(), zp.as_ptr(), sa.as_ptr(), cols, t),)*
                                    _ => unreachable!("tile rows"),
                                }
                            };
                        }
                        tile!(1 2 3 4 5 6);
                    },
                    _ => {
                        let mut acc = [[0i32; I8_NR]; I8_MR];
                        portable_i8_tile(a, rows, kp, w, &mut acc);
                        for i in 0..rows {
                            // SAFETY: as above.
                            let o = unsafe { std::slice::from_raw_parts_mut(o.add(i * n), ncols) };
                            for c in 0..ncols {
                                let v = acc[i][c] - zp[i] * colsum[c];
                                o[c] = (v as f32).mul_add(sa[i] * scale[c], bias[c]);
                            }
                        }
                    }
                }
                unsafe { epilogue(path, rows, o, n, ncols, ep) };
                r += rows;
            }
        };
        run_tasks(
            blocks * panels,
            product_split(m * kp * n, I8_PARALLEL_MACS),
            task,
        );
    }
}

/// Portable int8 tile: `acc[r][c] = Σ_k a[r][k] · w[k][c]` (u8 × i8 → i32).
fn portable_i8_tile(a: &[u8], rows: usize, kp: usize, w: &[i8], acc: &mut [[i32; I8_NR]]) {
    for (r, acc) in acc.iter_mut().enumerate().take(rows) {
        acc.fill(0);
        let a = &a[r * kp..(r + 1) * kp];
        for (g, a4) in a.chunks_exact(4).enumerate() {
            let wg = &w[g * I8_NR * 4..(g + 1) * I8_NR * 4];
            for c in 0..I8_NR {
                let wc = &wg[c * 4..c * 4 + 4];
                acc[c] += i32::from(a4[0]) * i32::from(wc[0])
                    + i32::from(a4[1]) * i32::from(wc[1])
                    + i32::from(a4[2]) * i32::from(wc[2])
                    + i32::from(a4[3]) * i32::from(wc[3]);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    //! The AVX-512 micro-kernels: accumulate in registers, finish (bias, dequantisation) in
    //! registers, store the valid columns with a mask.
    // Register arrays indexed by row and column group read clearer as index loops.
    #![allow(clippy::needless_range_loop)]
    use std::arch::x86_64::*;

    use super::{F32_NR, I8_NR};

    /// Where a tile goes: `out` with row stride `ldo`, `ncols` valid columns.
    #[derive(Clone, Copy)]
    pub struct Tile {
        pub out: *mut f32,
        pub ldo: usize,
        pub ncols: usize,
    }

    /// A panel's per-column dequantisation data (64 each, padded).
    #[derive(Clone, Copy)]
    pub struct I8Cols {
        pub colsum: *const i32,
        pub scale: *const f32,
        pub bias: *const f32,
    }

    /// The store mask of 16-column group `q` of a tile with `ncols` valid columns.
    #[inline(always)]
    fn mask(ncols: usize, q: usize) -> __mmask16 {
        let valid = ncols.saturating_sub(q * 16).min(16);
        ((1u32 << valid) - 1) as __mmask16
    }

    /// `MR` rows × 32 columns of `a·w + bias`: `a` row-major with stride `k`, `w` a packed
    /// panel, `bias` 32 values.
    ///
    /// # Safety
    /// AVX-512F must be available; `a` holds `MR × k` values, `w` `k × 32`, and `t` is valid
    /// for `MR` rows.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn f32_tile<const MR: usize>(
        a: *const f32,
        k: usize,
        w: *const f32,
        bias: *const f32,
        t: Tile,
    ) {
        let mut c0 = [_mm512_setzero_ps(); MR];
        let mut c1 = [_mm512_setzero_ps(); MR];
        for kk in 0..k {
            let wp = w.add(kk * F32_NR);
            let w0 = _mm512_loadu_ps(wp);
            let w1 = _mm512_loadu_ps(wp.add(16));
            for r in 0..MR {
                let av = _mm512_set1_ps(*a.add(r * k + kk));
                c0[r] = _mm512_fmadd_ps(av, w0, c0[r]);
                c1[r] = _mm512_fmadd_ps(av, w1, c1[r]);
            }
        }
        let (b0, b1) = (_mm512_loadu_ps(bias), _mm512_loadu_ps(bias.add(16)));
        let (m0, m1) = (mask(t.ncols, 0), mask(t.ncols, 1));
        for r in 0..MR {
            let o = t.out.add(r * t.ldo);
            _mm512_mask_storeu_ps(o, m0, _mm512_add_ps(c0[r], b0));
            _mm512_mask_storeu_ps(o.add(16), m1, _mm512_add_ps(c1[r], b1));
        }
    }

    /// `MR` rows × 64 columns of u8 `a` (stride `kp`) times an i8 packed panel, dequantised:
    /// `(acc − zp[r]·colsum) · sa[r] · scale + bias`.
    ///
    /// # Safety
    /// AVX-512F/BW and VNNI must be available; `a` holds `MR × kp` bytes, `w` `kp × 64`,
    /// `zp` and `sa` `MR` values, `cols` 64 each, and `t` is valid for `MR` rows.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn i8_tile<const MR: usize>(
        a: *const u8,
        kp: usize,
        w: *const i8,
        zp: *const i32,
        sa: *const f32,
        cols: I8Cols,
        t: Tile,
    ) {
        let mut c = [[_mm512_setzero_si512(); 4]; MR];
        for g in 0..kp / 4 {
            let wp = w.add(g * I8_NR * 4) as *const __m512i;
            let w0 = _mm512_loadu_si512(wp);
            let w1 = _mm512_loadu_si512(wp.add(1));
            let w2 = _mm512_loadu_si512(wp.add(2));
            let w3 = _mm512_loadu_si512(wp.add(3));
            for r in 0..MR {
                let four = (a.add(r * kp + g * 4) as *const i32).read_unaligned();
                let av = _mm512_set1_epi32(four);
                c[r][0] = _mm512_dpbusd_epi32(c[r][0], av, w0);
                c[r][1] = _mm512_dpbusd_epi32(c[r][1], av, w1);
                c[r][2] = _mm512_dpbusd_epi32(c[r][2], av, w2);
                c[r][3] = _mm512_dpbusd_epi32(c[r][3], av, w3);
            }
        }
        for q in 0..4 {
            let colsum = _mm512_loadu_si512(cols.colsum.add(q * 16) as *const __m512i);
            let scale = _mm512_loadu_ps(cols.scale.add(q * 16));
            let bias = _mm512_loadu_ps(cols.bias.add(q * 16));
            let m = mask(t.ncols, q);
            for r in 0..MR {
                let v = _mm512_sub_epi32(
                    c[r][q],
                    _mm512_mullo_epi32(_mm512_set1_epi32(*zp.add(r)), colsum),
                );
                let s = _mm512_mul_ps(_mm512_set1_ps(*sa.add(r)), scale);
                let y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), s, bias);
                _mm512_mask_storeu_ps(t.out.add(r * t.ldo + q * 16), m, y);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> Vec<KernelPath> {
        KernelPath::available_paths()
    }

    /// Deterministic values in [-1, 1).
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn reference(x: &[f32], w: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        let mut out = vec![0f32; m * n];
        for r in 0..m {
            for c in 0..n {
                let dot: f64 = (0..k)
                    .map(|kk| f64::from(x[r * k + kk]) * f64::from(w[kk * n + c]))
                    .sum();
                out[r * n + c] = dot as f32 + b[c];
            }
        }
        out
    }

    /// Shapes with partial panels, partial tiles and k not a multiple of 4.
    const SHAPES: [(usize, usize, usize); 4] =
        [(1, 7, 5), (13, 38, 70), (100, 64, 64), (200, 130, 97)];

    #[test]
    fn fp32_kernels_match_a_plain_matmul_on_every_path() {
        for (m, k, n) in SHAPES {
            let (x, w, b) = (values(m * k, 1), values(k * n, 2), values(n, 3));
            let want = reference(&x, &w, &b, m, k, n);
            let packed = PackedF32::new(&w, &b, k, n);
            for path in paths() {
                let mut out = vec![f32::NAN; m * n];
                packed.apply(path, &x, m, &mut out, Epilogue::Bias);
                let worst = want
                    .iter()
                    .zip(&out)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(worst < 1e-4, "{path:?} {m}x{k}x{n}: max error {worst}");
            }
        }
    }

    #[test]
    fn int8_kernels_agree_exactly_across_paths_and_approximate_the_matmul() {
        for (m, k, n) in SHAPES {
            let (x, w, b) = (values(m * k, 4), values(k * n, 5), values(n, 6));
            let want = reference(&x, &w, &b, m, k, n);
            let packed = PackedI8::new(&w, &b, k, n);
            let mut outs = Vec::new();
            for path in paths() {
                let mut q = QuantRows::default();
                quantize_rows(path, &x, m, k, &mut q);
                let mut out = vec![f32::NAN; m * n];
                packed.apply(path, &q, m, &mut out, Epilogue::Bias);
                // Error of two 8-bit roundings, relative to the dot products' scale √k.
                let worst = want
                    .iter()
                    .zip(&out)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                assert!(
                    worst < 0.02 * (k as f32).sqrt(),
                    "{path:?} {m}x{k}x{n}: {worst}"
                );
                outs.push(out);
            }
            // Integer accumulation: every path gives the same bits.
            for o in &outs[1..] {
                assert_eq!(o, &outs[0], "{m}x{k}x{n}");
            }
        }
    }

    #[test]
    fn products_shared_with_a_team_helper_give_the_same_bits() {
        // Batch-1-sized products, above the team's threshold, in a pool with a free worker.
        let (m, k, n) = (15, 384, 1536);
        let (x, w, b) = (values(m * k, 10), values(k * n, 11), values(n, 12));
        let (f, i) = (PackedF32::new(&w, &b, k, n), PackedI8::new(&w, &b, k, n));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for path in paths() {
            let run = |team: bool| {
                let work = || {
                    let mut a = vec![f32::NAN; m * n];
                    f.apply(path, &x, m, &mut a, Epilogue::Gelu { tanh: false });
                    let mut q = QuantRows::default();
                    quantize_rows(path, &x, m, k, &mut q);
                    let mut c = vec![f32::NAN; m * n];
                    i.apply(path, &q, m, &mut c, Epilogue::Bias);
                    (a, c, super::super::team::leading())
                };
                if team {
                    pool.install(|| super::super::team::lead(work))
                } else {
                    work()
                }
            };
            let (alone, shared) = (run(false), run(true));
            assert!(!alone.2 && shared.2, "the second run leads a team");
            assert_eq!(alone.0, shared.0, "{path:?} fp32");
            assert_eq!(alone.1, shared.1, "{path:?} int8");
        }
    }

    #[test]
    fn the_gelu_epilogue_is_applied_to_every_output() {
        let (m, k, n) = (17, 20, 40);
        let (x, w, b) = (values(m * k, 7), values(k * n, 8), values(n, 9));
        let want = reference(&x, &w, &b, m, k, n);
        let packed = PackedF32::new(&w, &b, k, n);
        for path in paths() {
            let mut out = vec![0f32; m * n];
            packed.apply(path, &x, m, &mut out, Epilogue::Gelu { tanh: false });
            for (y, v) in out.iter().zip(&want) {
                let exact = 0.5 * v * (1.0 + libm_erf(v / std::f32::consts::SQRT_2));
                assert!(
                    (y - exact).abs() < 1e-5,
                    "{path:?}: gelu({v}) = {y}, want {exact}"
                );
            }
        }
    }

    fn libm_erf(x: f32) -> f32 {
        super::super::ops::erf_reference(f64::from(x)) as f32
    }
}
