//! Inputs other than the recorded ones, for a differential check: code that reproduces the
//! recording may still be wrong on every other input (the recorded output baked in, a branch
//! on the recorded size that writes constants). The recorded floating-point inputs are
//! changed deterministically, the original code is run on them for the reference, and a
//! candidate must give what the original gives (exactly, or within the tolerance).
//!
//! Only buffers that a `float*` or `double*` parameter points into are changed (the kernel's
//! demangled name says which): integers are left alone, as they may be indices, sizes or
//! offsets that must stay in range. Each float becomes `f(x) = c·x + d·m·x/(m + |x|)`, with
//! `m` the buffer's median magnitude and `c`, `d` drawn from the seed (`c + d < 1`). `f` is odd
//! and strictly increasing, and shrinks every magnitude: signs, zeros, NaNs, infinities, the
//! order of values and equal values stay as they were (a sorted array stays sorted, a
//! symmetric matrix symmetric, a float used as an index stays in range), while every other
//! value changes, and not by a common factor (which code normalizing its input would not see).

use crate::store::records::{LaunchRecord, RegionData, Snapshot};
use crate::validate::Dtype;

/// The seed evolve's judge perturbs with: fixed, so that a verdict can be reproduced.
pub const SEED: u64 = 0x7265_6474_6561_6d31;

/// The recorded inputs with the float buffers changed, and which regions were.
#[derive(Debug, Clone)]
pub struct Perturbed {
    pub inputs: Snapshot,
    /// (region, element type) of each changed buffer.
    pub changed: Vec<(usize, Dtype)>,
}

/// The element type of each parameter's buffer: F32/F64 for pointers to float/double.
fn float_buffers(launch: &LaunchRecord, prologue: &Snapshot) -> Vec<(usize, Dtype)> {
    let demangled = crate::kernel::demangle(&launch.kernel);
    let Some(types) =
        crate::outputs::param_types(&demangled).filter(|t| t.len() == launch.params.len())
    else {
        return Vec::new();
    };
    let pointed = crate::outputs::pointed_regions(launch, prologue, &types);
    let mut out: Vec<(usize, Dtype)> = Vec::new();
    let mut mixed: Vec<usize> = Vec::new();
    for (t, r) in types.iter().zip(pointed) {
        let Some(r) = r else { continue };
        let dtype = match t.pointee.as_str() {
            "float" => Some(Dtype::F32),
            "double" => Some(Dtype::F64),
            _ => None,
        };
        match (dtype, out.iter().find(|(i, _)| *i == r)) {
            (Some(d), None) => out.push((r, d)),
            (Some(d), Some((_, was))) if *was == d => {}
            // One allocation seen as floats and as something else: its layout is not known.
            _ => mixed.push(r),
        }
    }
    out.retain(|(r, _)| !mixed.contains(r));
    out
}

/// The recorded inputs with every float buffer changed by the seed's `f`; None where the
/// kernel reads no float buffer (nothing to change that is safe to change).
pub fn perturb(launch: &LaunchRecord, prologue: &Snapshot, seed: u64) -> Option<Perturbed> {
    let mut inputs = prologue.copy_leaving_zeros();
    let mut changed = Vec::new();
    for (r, dtype) in float_buffers(launch, prologue) {
        let RegionData::Full(bytes) = &mut inputs.regions[r].data else {
            continue;
        };
        let mut rng = SplitMix(seed ^ (r as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let c = 0.55 + 0.15 * rng.unit();
        let d = 0.15 + 0.10 * rng.unit();
        let any = match dtype {
            Dtype::F32 => shrink::<4>(
                bytes,
                c,
                d,
                |b| f32::from_le_bytes(b) as f64,
                |x| (x as f32).to_le_bytes(),
            ),
            Dtype::F64 => shrink::<8>(bytes, c, d, f64::from_le_bytes, f64::to_le_bytes),
        };
        if any {
            changed.push((r, dtype));
        }
    }
    (!changed.is_empty()).then_some(Perturbed { inputs, changed })
}

/// Applies `f` to each whole element of `bytes`; whether any element changed.
fn shrink<const N: usize>(
    bytes: &mut [u8],
    c: f64,
    d: f64,
    read: impl Fn([u8; N]) -> f64,
    write: impl Fn(f64) -> [u8; N],
) -> bool {
    let mut mags: Vec<f64> = bytes
        .chunks_exact(N)
        .map(|e| read(e.try_into().expect("N bytes")).abs())
        .filter(|m| m.is_finite() && *m > 0.0)
        .collect();
    if mags.is_empty() {
        return false;
    }
    let mid = mags.len() / 2;
    let m = *mags.select_nth_unstable_by(mid, f64::total_cmp).1;
    let mut any = false;
    for e in bytes.chunks_exact_mut(N) {
        let x = read(e.try_into().expect("N bytes"));
        let y = f(x, c, d, m);
        let now = write(y);
        any |= now[..] != e[..];
        e.copy_from_slice(&now);
    }
    any
}

/// The perturbation: odd, strictly increasing, |f(x)| < |x| for finite x ≠ 0; NaN, ±inf and
/// ±0 stay.
pub fn f(x: f64, c: f64, d: f64, m: f64) -> f64 {
    if !x.is_finite() || x == 0.0 {
        return x;
    }
    c * x + d * m * x / (m + x.abs())
}

/// A seeded stream that stays the same across versions of any library: a seed names one
/// perturbation for good (SplitMix64).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The regions in which `after` differs from `before` (both complete): what a run wrote.
pub fn written(before: &Snapshot, after: &Snapshot) -> Vec<usize> {
    before
        .regions
        .iter()
        .zip(&after.regions)
        .enumerate()
        .filter(|(_, (b, a))| b.data != a.data)
        .map(|(i, _)| i)
        .collect()
}

/// A candidate's result on the perturbed inputs against the original's: Ok, or why not in
/// words that say what the check was.
pub fn verdict(
    inputs: &Perturbed,
    reference: &Snapshot,
    observed: &Snapshot,
    unordered: &[crate::validate::Unordered],
    tol: Option<&crate::validate::Tolerance>,
    seed: u64,
) -> Result<(), String> {
    let wrote = written(&inputs.inputs, reference);
    crate::validate::compare(reference, observed, &wrote, unordered, tol).map_err(|why| {
        format!(
            "on other inputs than the recorded ones ({} float buffer(s) changed, seed {seed:#x}) it gives another result than the original: {why}; it matches the recording only, as code that bakes in the recorded output or tests for the recorded sizes does",
            inputs.changed.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::records::{ParamSlot, Region};

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn to_f32s(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn bytes_of(s: &Snapshot, i: usize) -> &[u8] {
        match &s.regions[i].data {
            RegionData::Full(b) => b,
            _ => panic!("full"),
        }
    }

    fn snap(regions: Vec<Vec<u8>>) -> Snapshot {
        Snapshot {
            regions: regions
                .into_iter()
                .enumerate()
                .map(|(i, b)| Region::allocation(0x1000 * (i as u64 + 1), b))
                .collect(),
        }
    }

    /// axpy(int n, float a, float const* x, float const* y, float* z, int const* idx)
    fn launch(n: u32) -> LaunchRecord {
        let mut args = Vec::new();
        args.extend(n.to_le_bytes());
        args.extend(2.0f32.to_le_bytes());
        for p in [0x1000u64, 0x2000, 0x3000, 0x4000] {
            args.extend(p.to_le_bytes());
        }
        let slot = |offset, size| ParamSlot { offset, size };
        let params = vec![
            slot(0, 4),
            slot(4, 4),
            slot(8, 8),
            slot(16, 8),
            slot(24, 8),
            slot(32, 8),
        ];
        LaunchRecord {
            regions: 4,
            ..LaunchRecord::by_hand("_Z4axpyifPKfS0_PfPKi", params, &args)
        }
    }

    /// The kernel on the CPU: z[idx[i]] = a * x[i] + y[i].
    fn axpy(s: &Snapshot) -> Snapshot {
        let (x, y) = (to_f32s(bytes_of(s, 0)), to_f32s(bytes_of(s, 1)));
        let idx: Vec<u32> = bytes_of(s, 3)
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let mut z = to_f32s(bytes_of(s, 2));
        for i in 0..x.len() {
            z[idx[i] as usize] = 2.0f32.mul_add(x[i], y[i]);
        }
        let mut out = s.clone();
        out.regions[2].data = RegionData::Full(f32s(&z));
        out
    }

    fn recorded() -> Snapshot {
        let idx: Vec<u8> = [3u32, 2, 1, 0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        snap(vec![
            f32s(&[0.5, 1.0, -1.5, 0.0]),
            f32s(&[0.25, 0.25, 4.0, f32::NAN]),
            f32s(&[0.0; 4]),
            idx,
        ])
    }

    #[test]
    fn only_float_buffers_change_and_keep_sign_order_zero_and_nan() {
        let pro = recorded();
        let p = perturb(&launch(4), &pro, SEED).unwrap();
        let kinds: Vec<_> = p.changed.iter().map(|(r, _)| *r).collect();
        // x and y change; z holds zeros (which stay zeros), idx integers (left alone).
        assert_eq!(kinds, [0, 1]);
        assert_eq!(bytes_of(&p.inputs, 3), bytes_of(&pro, 3));
        let (was, now) = (to_f32s(bytes_of(&pro, 0)), to_f32s(bytes_of(&p.inputs, 0)));
        for (a, b) in was.iter().zip(&now) {
            assert_eq!(a.signum(), b.signum());
            assert!(b.abs() <= a.abs());
            assert!(*a == 0.0 || a != b, "{a} -> {b}");
        }
        assert!(now[0] < now[1] && now[2] < now[3], "order kept");
        assert!(to_f32s(bytes_of(&p.inputs, 1))[3].is_nan());
        // The same seed, the same inputs; another seed, others.
        let again = perturb(&launch(4), &pro, SEED).unwrap();
        assert_eq!(again.inputs, p.inputs);
        let other = perturb(&launch(4), &pro, SEED + 1).unwrap();
        assert_ne!(other.inputs, p.inputs);
    }

    #[test]
    fn f_is_odd_increasing_and_shrinking() {
        let (c, d, m) = (0.6, 0.2, 3.0);
        let xs = [-1e30, -7.0, -1.0, -1e-30, 1e-30, 0.5, 3.0, 1e30];
        for w in xs.windows(2) {
            assert!(f(w[0], c, d, m) < f(w[1], c, d, m));
        }
        for x in xs {
            assert_eq!(f(-x, c, d, m), -f(x, c, d, m));
            assert!(f(x, c, d, m).abs() < x.abs());
        }
        assert!(f(f64::NAN, c, d, m).is_nan());
        assert_eq!(f(f64::INFINITY, c, d, m), f64::INFINITY);
        assert!(f(-0.0, c, d, m).is_sign_negative());
        // Not a common factor: the ratio differs between small and large values.
        assert!((f(0.1, c, d, m) / 0.1 - f(100.0, c, d, m) / 100.0).abs() > 0.1);
    }

    #[test]
    fn baked_output_passes_the_recording_and_fails_on_other_inputs() {
        let pro = recorded();
        let expected = axpy(&pro);
        let p = perturb(&launch(4), &pro, SEED).unwrap();
        let reference = axpy(&p.inputs);
        // The honest code: the same as the original on the changed inputs.
        assert!(verdict(&p, &reference, &axpy(&p.inputs), &[], None, SEED).is_ok());
        // The cheat writes the recorded output whatever the inputs are.
        let mut baked = p.inputs.clone();
        baked.regions[2].data = expected.regions[2].data.clone();
        let why = verdict(&p, &reference, &baked, &[], None, SEED).unwrap_err();
        assert!(
            why.contains("on other inputs than the recorded ones"),
            "{why}"
        );
        assert!(why.contains("allocation 0x3000"), "{why}");
        // Copying an input to the output is caught the same way (and by the recording).
        let mut copy = p.inputs.clone();
        copy.regions[2].data = p.inputs.regions[1].data.clone();
        assert!(verdict(&p, &reference, &copy, &[], None, SEED).is_err());
    }

    #[test]
    fn kernels_without_float_buffers_are_not_perturbed() {
        let mut l = launch(4);
        // hist(int, int, int*, int*, int*, int const*): integers only, left alone.
        l.kernel = "_Z4histiiPiS_S_PKi".into();
        assert!(perturb(&l, &recorded(), SEED).is_none());
        // No types to tell floats by: nothing changes.
        l.kernel = "plain_c_name".into();
        assert!(perturb(&l, &recorded(), SEED).is_none());
    }
}
