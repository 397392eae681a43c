//! The packed encoder's element-wise and per-row operations: GELU with a vectorisable erf,
//! (residual +) LayerNorm, per-row activation quantisation, and attention over one text's
//! rows. Each is written once as plain Rust the compiler vectorises, and compiled twice
//! ([`multiversion!`]): with AVX-512 enabled for [`KernelPath::Avx512Vnni`] and
//! [`KernelPath::Amx`], and for the
//! baseline target for [`KernelPath::Portable`].
//!
//! Sums run over 16 independent lanes so they vectorise (and so differ from a sequential f32
//! sum in the last bits, as any SIMD implementation does).

use super::path::KernelPath;

/// Defines `pub fn NAME(path, args…)` running the body compiled for `path`.
macro_rules! multiversion {
    ($(#[$meta:meta])* pub fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        pub fn $name(path: KernelPath, $($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma")]
            unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                body($($arg),*)
            }
            match path {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the path is only chosen when the CPU has these features.
                KernelPath::Avx512Vnni | KernelPath::Amx => unsafe { avx512($($arg),*) },
                _ => body($($arg),*),
            }
        }
    };
}

/// Lanes of the vectorised sums.
const LANES: usize = 16;

/// The smaller of two values, as one `vminps` (f32::min's NaN rules keep it scalar).
#[inline(always)]
fn fmin(a: f32, b: f32) -> f32 {
    if a < b {
        a
    } else {
        b
    }
}

/// The larger of two values, as one `vmaxps`.
#[inline(always)]
fn fmax(a: f32, b: f32) -> f32 {
    if a > b {
        a
    } else {
        b
    }
}

/// Σ x over 16 lanes.
#[inline(always)]
fn sum(x: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for l in 0..LANES {
            acc[l] += c[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// The largest of `x` (−∞ for none) over 16 lanes: a sequential fold is one chain of
/// dependent scalar `vmaxss`, which was a quarter of attention's time on 256-wordpiece texts.
#[inline(always)]
fn max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| fmax(m, v));
    for c in chunks {
        for l in 0..LANES {
            acc[l] = fmax(acc[l], c[l]);
        }
    }
    acc.iter().fold(tail, |m, &v| fmax(m, v))
}

/// erf(x) by Abramowitz & Stegun 7.1.26: `1 − t·P(t)·e^{−x²}` with `t = 1 / (1 + p|x|)`
/// and a degree-5 P; absolute error ≤ 1.5e-7, 4.6e-7 with f32 rounding (measured in the
/// test below). Branch-free, so it vectorises.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / 0.327_591_1f32.mul_add(a, 1.0);
    let mut p = t.mul_add(1.061_405_4, -1.453_152);
    p = t.mul_add(p, 1.421_413_8);
    p = t.mul_add(p, -0.284_496_74);
    p = t.mul_add(p, 0.254_829_6);
    let y = 1.0 - t * p * exp_neg(-a * a);
    y.copysign(x)
}

/// e^x for x ≤ 0 (softmax after subtracting the maximum): 2^n · p(r) with a degree-6
/// polynomial on |r| ≤ ln2/2; relative error ≈ 2e-7; underflows to 0 below −87.
#[inline(always)]
fn exp_neg(x: f32) -> f32 {
    // fmax(NaN, −87) is −87, so n below is always a small finite integer.
    let x = fmin(fmax(x, -87.0), 0.0);
    let n = (x * std::f32::consts::LOG2_E + 0.5).floor();
    let r = n.mul_add(-0.693_145_75, x);
    let r = n.mul_add(-1.428_606_8e-6, r);
    let mut p = r.mul_add(1.0 / 720.0, 1.0 / 120.0);
    p = r.mul_add(p, 1.0 / 24.0);
    p = r.mul_add(p, 1.0 / 6.0);
    p = r.mul_add(p, 0.5);
    p = r.mul_add(p, 1.0);
    p = r.mul_add(p, 1.0);
    // SAFETY: n is finite and in −126..=0 (x was clamped above).
    let n = unsafe { n.to_int_unchecked::<i32>() };
    let scale = f32::from_bits(((n + 127) as u32) << 23);
    p * scale
}

/// tanh(x) = 1 − 2 / (e^{2x} + 1), through [`exp_neg`] on −2|x|.
#[inline(always)]
fn tanh(x: f32) -> f32 {
    let e = exp_neg(-2.0 * x.abs());
    let t = (1.0 - e) / (1.0 + e);
    t.copysign(x)
}

multiversion! {
    /// GELU in place: `x·Φ(x)` with erf, or the tanh approximation when `tanh_form`.
    pub fn gelu(x: &mut [f32], tanh_form: bool) {
        if tanh_form {
            const C: f32 = 0.797_884_6; // √(2/π)
            for v in x.iter_mut() {
                let u = C * (*v + 0.044_715 * *v * *v * *v);
                *v = 0.5 * *v * (1.0 + tanh(u));
            }
        } else {
            for v in x.iter_mut() {
                *v = 0.5 * *v * (1.0 + erf(*v * std::f32::consts::FRAC_1_SQRT_2));
            }
        }
    }
}

multiversion! {
    /// Each `d`-wide row of `x` becomes LayerNorm(row + the same row of `residual`, when given).
    pub fn layer_norm(
        x: &mut [f32],
        residual: Option<&[f32]>,
        gamma: &[f32],
        beta: &[f32],
        eps: f32,
    ) {
        let d = gamma.len();
        for (r, row) in x.chunks_exact_mut(d).enumerate() {
            if let Some(res) = residual {
                for (v, &s) in row.iter_mut().zip(&res[r * d..(r + 1) * d]) {
                    *v += s;
                }
            }
            let mean = sum(row) / d as f32;
            for v in row.iter_mut() {
                *v -= mean;
            }
            let var = crate::math::dot_fused(row, row) / d as f32;
            let inv = 1.0 / (var + eps).sqrt();
            for ((v, &g), &b) in row.iter_mut().zip(gamma).zip(beta) {
                *v = (*v * inv).mul_add(g, b);
            }
        }
    }
}

multiversion! {
    /// Quantises one row to u8 with a zero point; returns (scale, zero point). `q` may be
    /// longer than `x` (padding stays 0).
    pub fn quantize_row(x: &[f32], q: &mut [u8]) -> (f32, i32) {
        let mut lo = [0f32; LANES];
        let mut hi = [0f32; LANES];
        let chunks = x.chunks_exact(LANES);
        let (mut tlo, mut thi) = (0f32, 0f32);
        for &v in chunks.remainder() {
            tlo = tlo.min(v);
            thi = thi.max(v);
        }
        for c in chunks {
            for l in 0..LANES {
                lo[l] = fmin(lo[l], c[l]);
                hi[l] = fmax(hi[l], c[l]);
            }
        }
        let min = lo.iter().fold(tlo, |a, &b| a.min(b));
        let max = hi.iter().fold(thi, |a, &b| a.max(b));
        // min ≤ 0 ≤ max, so 0 is exactly representable and the zero point is in 0..=255.
        let scale = if max > min { (max - min) / 255.0 } else { 1.0 };
        let inv = 1.0 / scale;
        let zp = (-min * inv + 0.5).floor().clamp(0.0, 255.0);
        let bias = zp + 0.5;
        for (o, &v) in q.iter_mut().zip(x) {
            // fmax/fmin (not clamp) map NaN to 0, so the value is always in 0..=255.
            let t = fmin(fmax(v.mul_add(inv, bias), 0.0), 255.0);
            // SAFETY: t is finite and in 0..=255; truncation of t = round(v/scale) + zp.
            *o = unsafe { t.to_int_unchecked::<i32>() } as u8;
        }
        (scale, zp as i32)
    }
}

/// Query rows attended together.
const QROWS: usize = 4;

/// The [`LANES`] values of `x` from `at`.
#[inline(always)]
fn lanes(x: &[f32], at: usize) -> &[f32; LANES] {
    x[at..at + LANES].try_into().expect("LANES values")
}

/// Scores of the [`QROWS`] queries `q` against keys `jb·LANES..(jb + B)·LANES` (B = 1 or 2),
/// read from the transposed keys `kt` (`dh × lp`), times `scale`, into `scores` (`QROWS × lp`).
///
/// Two blocks give `QROWS × 2` independent FMA chains, enough to hide the FMA latency on two
/// FMA pipes (four chains ran attention at half the pipes' rate: 40% of a 256-wordpiece
/// encode). They are two loops of the same shape, each short enough for the compiler to unroll
/// into registers (one loop over both blocks was not unrolled: its accumulators went to memory).
#[inline(always)]
fn score_blocks<const B: usize>(
    q: &[&[f32]; QROWS],
    kt: &[f32],
    (lp, jb, scale): (usize, usize, f32),
    scores: &mut [f32],
) {
    let mut acc0 = [[0f32; LANES]; QROWS];
    let mut acc1 = [[0f32; LANES]; QROWS];
    for (c, k) in kt.chunks_exact(lp).enumerate() {
        let k0 = lanes(k, jb * LANES);
        for r in 0..QROWS {
            let qc = q[r][c];
            for l in 0..LANES {
                acc0[r][l] = qc.mul_add(k0[l], acc0[r][l]);
            }
        }
        if B == 2 {
            let k1 = lanes(k, (jb + 1) * LANES);
            for r in 0..QROWS {
                let qc = q[r][c];
                for l in 0..LANES {
                    acc1[r][l] = qc.mul_add(k1[l], acc1[r][l]);
                }
            }
        }
    }
    for (b, acc) in [acc0, acc1].iter().enumerate().take(B) {
        for (r, acc) in acc.iter().enumerate() {
            let out = &mut scores[r * lp + (jb + b) * LANES..r * lp + (jb + b + 1) * LANES];
            for l in 0..LANES {
                out[l] = acc[l] * scale;
            }
        }
    }
}

/// `Σ_j p_rj · v_j` over the `len` rows of `qkv` (row stride `stride`) for value columns
/// `col..col + B·LANES` (B = 1 or 2) and the [`QROWS`] weight rows of `scores` (row stride
/// `lp`); the blocks as in [`score_blocks`]. Only the first `B` of the returned blocks are
/// computed.
#[inline(always)]
fn weigh_blocks<const B: usize>(
    scores: &[f32],
    qkv: &[f32],
    (len, lp, stride, col): (usize, usize, usize, usize),
) -> [[[f32; LANES]; QROWS]; 2] {
    let mut acc0 = [[0f32; LANES]; QROWS];
    let mut acc1 = [[0f32; LANES]; QROWS];
    for j in 0..len {
        let v0 = lanes(qkv, j * stride + col);
        for r in 0..QROWS {
            let p = scores[r * lp + j];
            for l in 0..LANES {
                acc0[r][l] = p.mul_add(v0[l], acc0[r][l]);
            }
        }
        if B == 2 {
            let v1 = lanes(qkv, j * stride + col + LANES);
            for r in 0..QROWS {
                let p = scores[r * lp + j];
                for l in 0..LANES {
                    acc1[r][l] = p.mul_add(v1[l], acc1[r][l]);
                }
            }
        }
    }
    [acc0, acc1]
}

multiversion! {
    /// Self-attention of one text and one head: `qkv` holds the text's `len` rows of
    /// `[q | k | v]` (each `d` wide, row stride `3d`); writes the head's `dh` values of each
    /// row to `ctx` (row `i` at `i·ldc`: `ldc = d` with `ctx` starting at column `head·dh` of
    /// a `len × d` matrix, or `ldc = dh` for a head of its own). `scratch` is reused between
    /// calls.
    ///
    /// The head's keys are first copied transposed (`dh × len`, padded to 16 columns), so
    /// scores are multiply-adds across 16 keys at a time rather than one horizontal sum per
    /// key; four query rows go together, each against two blocks of 16 keys (or of 16 value
    /// columns), so eight accumulator chains hide the FMA latency.
    #[allow(clippy::too_many_arguments)]
    pub fn attend(
        qkv: &[f32],
        len: usize,
        d: usize,
        head: usize,
        dh: usize,
        ctx: &mut [f32],
        ldc: usize,
        scratch: &mut Vec<f32>,
    ) {
        let stride = 3 * d;
        let scale = 1.0 / (dh as f32).sqrt();
        let (qo, ko, vo) = (head * dh, d + head * dh, 2 * d + head * dh);
        let lp = len.next_multiple_of(LANES);
        scratch.clear();
        scratch.resize(dh * lp + QROWS * lp, 0.0);
        let (kt, scores) = scratch.split_at_mut(dh * lp);
        for j in 0..len {
            let k = &qkv[j * stride + ko..j * stride + ko + dh];
            for (c, &v) in k.iter().enumerate() {
                kt[c * lp + j] = v;
            }
        }
        let whole = dh - dh % LANES;
        let (key_blocks, col_blocks) = (lp / LANES, whole / LANES);
        for i0 in (0..len).step_by(QROWS) {
            // Rows past the end repeat the last row; their results are dropped.
            let rows: [usize; QROWS] = std::array::from_fn(|r| (i0 + r).min(len - 1));
            let q: [&[f32]; QROWS] =
                rows.map(|i| &qkv[i * stride + qo..i * stride + qo + dh]);
            // Blocks in pairs; an odd count ends with one alone.
            for jb in (0..key_blocks).step_by(2) {
                match jb + 1 < key_blocks {
                    true => score_blocks::<2>(&q, kt, (lp, jb, scale), scores),
                    false => score_blocks::<1>(&q, kt, (lp, jb, scale), scores),
                }
            }
            let mut inv = [0f32; QROWS];
            for (r, inv) in inv.iter_mut().enumerate() {
                let live = &mut scores[r * lp..r * lp + len];
                let max = max(live);
                for s in live.iter_mut() {
                    *s = exp_neg(*s - max);
                }
                *inv = 1.0 / sum(live);
            }
            let live_rows = QROWS.min(len - i0);
            let mut put = |c0: usize, acc: &[[[f32; LANES]; QROWS]]| {
                for (b, acc) in acc.iter().enumerate() {
                    for (r, acc) in acc.iter().enumerate().take(live_rows) {
                        let i = i0 + r;
                        let out = &mut ctx[i * ldc + c0 + b * LANES..][..LANES];
                        for l in 0..LANES {
                            out[l] = acc[l] * inv[r];
                        }
                    }
                }
            };
            for cb in (0..col_blocks).step_by(2) {
                let c0 = cb * LANES;
                let at = (len, lp, stride, vo + c0);
                match cb + 1 < col_blocks {
                    true => put(c0, &weigh_blocks::<2>(scores, qkv, at)),
                    false => put(c0, &weigh_blocks::<1>(scores, qkv, at)[..1]),
                }
            }
            for r in 0..live_rows {
                let i = i0 + r;
                for c in whole..dh {
                    let mut acc = 0f32;
                    for j in 0..len {
                        acc = scores[r * lp + j].mul_add(qkv[j * stride + vo + c], acc);
                    }
                    ctx[i * ldc + c] = acc * inv[r];
                }
            }
        }
    }
}

/// erf in f64 to ~1e-10 for tests: its Maclaurin series for |x| ≤ 5, ±1 beyond.
#[cfg(test)]
pub(crate) fn erf_reference(x: f64) -> f64 {
    if x.abs() > 5.0 {
        return x.signum();
    }
    let (mut term, mut total) = (x, x);
    for n in 1..200 {
        term *= -x * x / n as f64;
        total += term / (2 * n + 1) as f64;
    }
    total * 2.0 / std::f64::consts::PI.sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths() -> Vec<KernelPath> {
        KernelPath::available_paths()
    }

    #[test]
    fn erf_is_within_5e7_of_the_series_everywhere() {
        let mut worst = 0f64;
        for i in -80_000..=80_000 {
            let x = i as f32 / 10_000.0;
            worst = worst.max((f64::from(erf(x)) - erf_reference(f64::from(x))).abs());
        }
        assert!(worst < 5e-7, "max error {worst}");
    }

    #[test]
    fn exp_and_tanh_match_libm() {
        for i in 0..=100_000 {
            let x = -(i as f32) / 1_000.0;
            let (got, want) = (exp_neg(x), x.exp());
            assert!(
                (got - want).abs() <= 3e-7 * want.max(1e-30),
                "exp({x}) = {got}, {want}"
            );
        }
        for i in -20_000..=20_000 {
            let x = i as f32 / 1_000.0;
            assert!((tanh(x) - x.tanh()).abs() < 3e-7, "tanh({x})");
        }
    }

    #[test]
    fn gelu_and_layer_norm_agree_across_paths_and_with_the_formula() {
        let xs: Vec<f32> = (0..700).map(|i| (i as f32 - 350.0) / 50.0).collect();
        for path in paths() {
            let mut g = xs.clone();
            gelu(path, &mut g, false);
            for (&x, &y) in xs.iter().zip(&g) {
                let want = 0.5 * f64::from(x) * (1.0 + erf_reference(f64::from(x) / 2f64.sqrt()));
                assert!((f64::from(y) - want).abs() < 2e-6, "{path:?} gelu({x})");
            }
            let mut t = xs.clone();
            gelu(path, &mut t, true);
            for (&x, &y) in xs.iter().zip(&t) {
                let u = 0.797_884_6 * (x + 0.044_715 * x * x * x);
                let want = 0.5 * x * (1.0 + u.tanh());
                assert!((y - want).abs() < 2e-6, "{path:?} gelu_tanh({x})");
            }
            let (d, gamma, beta) = (70, vec![1.5f32; 70], vec![0.25f32; 70]);
            let mut x = xs[..700].to_vec();
            let res: Vec<f32> = (0..700).map(|i| (i % 7) as f32).collect();
            layer_norm(path, &mut x, Some(&res), &gamma, &beta, 1e-12);
            for (r, row) in x.chunks_exact(d).enumerate() {
                let v: Vec<f64> = (0..d)
                    .map(|c| f64::from(xs[r * d + c] + res[r * d + c]))
                    .collect();
                let mean = v.iter().sum::<f64>() / d as f64;
                let var = v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / d as f64;
                for (c, &y) in row.iter().enumerate() {
                    let want = (v[c] - mean) / (var + 1e-12).sqrt() * 1.5 + 0.25;
                    assert!((f64::from(y) - want).abs() < 1e-5, "{path:?} ln[{r}][{c}]");
                }
            }
        }
    }

    #[test]
    fn quantized_rows_round_trip_within_half_a_step() {
        let x: Vec<f32> = (0..100)
            .map(|i| ((i * 37) % 101) as f32 / 7.0 - 3.0)
            .collect();
        for path in paths() {
            let mut q = vec![0u8; 104];
            let (scale, zp) = quantize_row(path, &x, &mut q);
            for (&v, &b) in x.iter().zip(&q) {
                let back = (i32::from(b) - zp) as f32 * scale;
                assert!(
                    (back - v).abs() <= 0.5 * scale + 1e-6,
                    "{path:?} {v} -> {back}"
                );
            }
            assert_eq!(&q[100..], &[0; 4], "padding untouched");
        }
    }

    #[test]
    fn attention_matches_a_plain_softmax_average() {
        // (len, d, dh): a head narrower than a vector; the model's 32-wide heads over a short
        // and a long text (key blocks in pairs and one left over); 48-wide heads (value
        // column blocks in a pair and one left over).
        for (len, d, dh) in [(21, 8, 4), (5, 64, 32), (70, 64, 32), (37, 96, 48)] {
            check_attention(len, d, dh);
        }
    }

    fn check_attention(len: usize, d: usize, dh: usize) {
        let qkv: Vec<f32> = (0..len * 3 * d)
            .map(|i| ((i * 13) % 17) as f32 / 9.0 - 1.0)
            .collect();
        let scale = 1.0 / (dh as f64).sqrt();
        for path in paths() {
            let mut ctx = vec![0f32; len * d];
            let mut scratch = Vec::new();
            for h in 0..d / dh {
                attend(
                    path,
                    &qkv,
                    len,
                    d,
                    h,
                    dh,
                    &mut ctx[h * dh..],
                    d,
                    &mut scratch,
                );
                // A head written to a buffer of its own holds the same bits.
                let mut own = vec![0f32; len * dh];
                attend(path, &qkv, len, d, h, dh, &mut own, dh, &mut scratch);
                for i in 0..len {
                    assert_eq!(own[i * dh..][..dh], ctx[i * d + h * dh..][..dh]);
                }
            }
            for h in 0..d / dh {
                for i in 0..len {
                    let q = &qkv[i * 3 * d + h * dh..][..dh];
                    let s: Vec<f64> = (0..len)
                        .map(|j| {
                            let k = &qkv[j * 3 * d + d + h * dh..][..dh];
                            q.iter().zip(k).map(|(a, b)| f64::from(a * b)).sum::<f64>() * scale
                        })
                        .collect();
                    let m = s.iter().cloned().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = s.iter().map(|v| (v - m).exp()).collect();
                    let z: f64 = e.iter().sum();
                    for c in 0..dh {
                        let want: f64 = (0..len)
                            .map(|j| e[j] / z * f64::from(qkv[j * 3 * d + 2 * d + h * dh + c]))
                            .sum();
                        let got = f64::from(ctx[i * d + h * dh + c]);
                        assert!(
                            (got - want).abs() < 1e-5,
                            "{path:?} len {len} dh {dh} head {h} row {i} col {c}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
