//! Matrix kernels of the packed encoder: `y = x·W + b` with `W` packed once, at load, into
//! column panels in the layout the micro-kernel reads, in two precisions:
//!
//! - fp32: panels of [`F32_NR`] columns, `k` rows each (`[panel][k][32]`); an AVX-512F
//!   micro-kernel of up to 12 rows × 32 columns (24 accumulators, one broadcast per row and k).
//! - int8: weights quantised symmetrically per output column (scale `max|w| / 127`); panels of
//!   [`I8_NR`] columns in groups of four k (`[panel][k / 4][64][4]`), the layout `vpdpbusd`
//!   multiplies; activations are quantised per row to u8 with a zero point
//!   ([`quantize_rows`]); an AVX-512 VNNI micro-kernel of up to 6 rows × 64 columns. The i32
//!   accumulator is turned back into f32 as `(acc − zp·Σw) · s_row · s_col + b`. On CPUs
//!   with AMX-INT8 the same panels feed `tdpbusd` tiles instead (16 rows × 64 columns per
//!   call, the B tiles loaded straight from the panel with a 256-byte row stride).
//!
//! Every kernel has a portable version over the same packed layout; [`KernelPath`] picks one
//! at run time ([`KernelPath::detect`]) and tests force each to check they agree. Work is
//! split over (row block, panel) tasks, shared with the forward's team (`team.rs`) when it
//! has one, else run on the current rayon pool.

use rayon::prelude::*;

pub use super::path::KernelPath;

/// Columns per fp32 panel (two 16-lane registers).
pub const F32_NR: usize = 32;
/// Most rows of one fp32 micro-tile.
const F32_MR: usize = 12;
/// Columns per int8 panel (four 16-lane i32 registers).
pub const I8_NR: usize = 64;
/// Most rows of one int8 micro-tile.
const I8_MR: usize = 6;
/// Rows of one AMX int8 tile.
const AMX_MR: usize = 16;
/// Rows per parallel task (a multiple of both tile heights).
const ROW_BLOCK: usize = 96;

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
        KernelPath::Avx512Vnni | KernelPath::Amx => {
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
            let tile_rows = if path == KernelPath::Amx {
                AMX_MR
            } else {
                I8_MR
            };
            // The AMX tiles' stored accumulators, once per task: each call overwrites the rows
            // it uses.
            #[cfg(target_arch = "x86_64")]
            let mut amx_acc = if path == KernelPath::Amx {
                Some(AmxAcc([[0i32; I8_NR]; AMX_MR]))
            } else {
                None
            };
            while r < end {
                let rows = tile_rows.min(end - r);
                let a = &q.q[r * kp..(r + rows) * kp];
                let (zp, sa) = (&q.zp[r..r + rows], &q.scale[r..r + rows]);
                // SAFETY: rows r..r+rows, columns of panel p: written by this task alone.
                let o = unsafe { out_ptr.get().add(r * n + c0) };
                #[cfg(target_arch = "x86_64")]
                let (t, cols) = (
                    x86::Tile {
                        out: o,
                        ldo: n,
                        ncols,
                    },
                    x86::I8Cols {
                        colsum: colsum.as_ptr(),
                        scale: scale.as_ptr(),
                        bias: bias.as_ptr(),
                    },
                );
                match path {
                    #[cfg(target_arch = "x86_64")]
                    KernelPath::Amx => unsafe {
                        let acc = amx_acc.as_mut().expect("made for the AMX path");
                        amx::i8_acc(a.as_ptr(), rows, kp, w.as_ptr(), &mut acc.0);
                        x86::finish_i8(&acc.0[..rows], zp.as_ptr(), sa.as_ptr(), cols, t);
                    },
                    #[cfg(target_arch = "x86_64")]
                    KernelPath::Avx512Vnni => unsafe {
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

/// An AMX tile's i32 accumulators as stored (`tilestored` wants 64-byte alignment to be fast).
#[repr(C, align(64))]
struct AmxAcc([[i32; I8_NR]; AMX_MR]);

/// Portable int8 tile: `acc[r][c] = Σ_k a[r][k] · w[k][c]` (u8 × i8 → i32).
fn portable_i8_tile(a: &[u8], rows: usize, kp: usize, w: &[i8], acc: &mut [[i32; I8_NR]]) {
    for (r, acc) in acc.iter_mut().enumerate().take(rows) {
        acc.fill(0);
        add_i8_groups(&a[r * kp..(r + 1) * kp], w, acc);
    }
}

/// `acc[c] += Σ_g Σ_j a[4g + j] · w[g][c][j]`: one row of u8 activations against the packed
/// i8 panel's groups of 4 k (`[g][64][4]`), group for group, as far as `a` reaches.
fn add_i8_groups(a: &[u8], w: &[i8], acc: &mut [i32; I8_NR]) {
    for (a4, wg) in a.chunks_exact(4).zip(w.chunks_exact(I8_NR * 4)) {
        for (c, wc) in wg.chunks_exact(4).enumerate() {
            acc[c] += i32::from(a4[0]) * i32::from(wc[0])
                + i32::from(a4[1]) * i32::from(wc[1])
                + i32::from(a4[2]) * i32::from(wc[2])
                + i32::from(a4[3]) * i32::from(wc[3]);
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
        finish_regs(&c, zp, sa, cols, t);
    }

    /// Dequantises `acc` (one row of 64 i32 per tile row) into the tile, as [`i8_tile`] does.
    ///
    /// # Safety
    /// AVX-512F must be available; `zp` and `sa` hold `acc.len()` values, `cols` 64 each, and
    /// `t` is valid for `acc.len()` rows.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn finish_i8(
        acc: &[[i32; I8_NR]],
        zp: *const i32,
        sa: *const f32,
        cols: I8Cols,
        t: Tile,
    ) {
        for (r, row) in acc.iter().enumerate() {
            let regs = [std::array::from_fn::<_, 4, _>(|q| {
                _mm512_loadu_si512(row.as_ptr().add(q * 16) as *const __m512i)
            })];
            let row_t = Tile {
                out: t.out.add(r * t.ldo),
                ..t
            };
            finish_regs(&regs, zp.add(r), sa.add(r), cols, row_t);
        }
    }

    /// `(acc − zp[r]·colsum) · sa[r] · scale + bias` for `MR` rows of accumulator registers,
    /// stored with the tile's column mask.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn finish_regs<const MR: usize>(
        c: &[[__m512i; 4]; MR],
        zp: *const i32,
        sa: *const f32,
        cols: I8Cols,
        t: Tile,
    ) {
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

#[cfg(target_arch = "x86_64")]
mod amx {
    //! AMX-INT8: `tdpbusd` on tiles of 16 rows. Tiles 0–3 accumulate the 4 × 16 columns of a
    //! panel; tile 4 holds 16 rows × 64 bytes of activations, tiles 5 and 6 (in turn) 16
    //! groups of 4 k of 16 columns, read from the packed panel (`[k / 4][64][4]`) with a
    //! 256-byte stride. `k` past the last whole 64 is added in plain Rust.
    use std::arch::asm;

    use super::I8_NR;

    /// The 64-byte tile configuration `ldtilecfg` reads (palette 1).
    #[repr(C, align(64))]
    struct Config {
        palette: u8,
        start_row: u8,
        reserved: [u8; 14],
        colsb: [u16; 16],
        rows: [u8; 16],
    }

    /// `acc[r][c] = Σ_k a[r][k] · w[k][c]` for `rows` (≤ 16) rows of u8 `a` (stride `kp`) and
    /// a packed i8 panel `w` (`kp / 4` groups of 64 columns × 4). Rows `0..rows` of `acc` are
    /// overwritten, whatever they held; the others are left alone.
    ///
    /// # Safety
    /// [`available`] must be true; `a` holds `rows × kp` bytes, `w` `kp × 64`.
    pub unsafe fn i8_acc(
        a: *const u8,
        rows: usize,
        kp: usize,
        w: *const i8,
        acc: &mut [[i32; I8_NR]; 16],
    ) {
        debug_assert!((1..=16).contains(&rows) && kp.is_multiple_of(4));
        let full = kp / 64 * 64;
        if full > 0 {
            let mut cfg = Config {
                palette: 1,
                start_row: 0,
                reserved: [0; 14],
                colsb: [0; 16],
                rows: [0; 16],
            };
            for t in 0..5 {
                cfg.rows[t] = rows as u8;
                cfg.colsb[t] = 64;
            }
            for t in 5..7 {
                cfg.rows[t] = 16;
                cfg.colsb[t] = 64;
            }
            asm!(
                "ldtilecfg [{cfg}]",
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                cfg = in(reg) &cfg,
                options(nostack, readonly),
            );
            for k0 in (0..full).step_by(64) {
                // 16 k-groups of the panel from group k0 / 4: 64 columns × 4 bytes a row.
                let b = w.add(k0 / 4 * I8_NR * 4);
                asm!(
                    "tileloadd tmm4, [{a} + {lda} * 1]",
                    "tileloadd tmm5, [{b} + {ldb} * 1]",
                    "tdpbusd tmm0, tmm4, tmm5",
                    "tileloadd tmm6, [{b} + {ldb} * 1 + 64]",
                    "tdpbusd tmm1, tmm4, tmm6",
                    "tileloadd tmm5, [{b} + {ldb} * 1 + 128]",
                    "tdpbusd tmm2, tmm4, tmm5",
                    "tileloadd tmm6, [{b} + {ldb} * 1 + 192]",
                    "tdpbusd tmm3, tmm4, tmm6",
                    a = in(reg) a.add(k0),
                    lda = in(reg) kp,
                    b = in(reg) b,
                    ldb = in(reg) I8_NR * 4,
                    options(nostack, readonly),
                );
            }
            let out = acc.as_mut_ptr() as *mut u8;
            asm!(
                "tilestored [{o} + {ldo} * 1], tmm0",
                "tilestored [{o} + {ldo} * 1 + 64], tmm1",
                "tilestored [{o} + {ldo} * 1 + 128], tmm2",
                "tilestored [{o} + {ldo} * 1 + 192], tmm3",
                "tilerelease",
                o = in(reg) out,
                ldo = in(reg) I8_NR * 4,
                options(nostack),
            );
        } else {
            for row in acc.iter_mut().take(rows) {
                row.fill(0);
            }
        }
        // The last kp % 64 bytes.
        if full < kp {
            let w_tail =
                std::slice::from_raw_parts(w.add(full / 4 * I8_NR * 4), (kp - full) * I8_NR);
            for (r, row) in acc.iter_mut().enumerate().take(rows) {
                let a_tail = std::slice::from_raw_parts(a.add(r * kp + full), kp - full);
                super::add_i8_groups(a_tail, w_tail, row);
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
    const SHAPES: [(usize, usize, usize); 5] = [
        (1, 7, 5),
        (13, 38, 70),
        (100, 64, 64),
        (200, 130, 97),
        (37, 384, 130),
    ];

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

    #[test]
    fn every_path_the_cpu_lists_is_used() {
        // Where /proc/cpuinfo lists AMX-INT8 (or AVX-512 VNNI), the path must be detected, so
        // that the agreement tests above run it; on other CPUs this checks nothing more.
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            return;
        };
        let flags: std::collections::HashSet<&str> = info
            .lines()
            .find(|l| l.starts_with("flags"))
            .map(|l| l.split_whitespace().collect())
            .unwrap_or_default();
        if flags.contains("avx512_vnni") && flags.contains("avx512bw") {
            assert!(KernelPath::Avx512Vnni.available());
        }
        if flags.contains("amx_int8") && flags.contains("avx512_vnni") {
            assert!(KernelPath::Amx.available(), "the CPU lists amx_int8");
            assert_eq!(KernelPath::detect(), KernelPath::Amx);
        }
        eprintln!("kernel paths here: {:?}", paths());
    }

    fn libm_erf(x: f32) -> f32 {
        super::super::ops::erf_reference(f64::from(x)) as f32
    }
}
