//! What apply refuses to build, whatever a winners file or the store says.
//!
//! A winners file is meant to be committed and merged by people, so nothing in it is taken on
//! trust where a mistake would ship wrong code. The guard a variant runs behind is derived from
//! its candidate (what the code folds and bounds), never read from the file: a file guard that
//! disagrees is refused, naming the field. The generic code runs at every launch, so it may
//! neither fold values nor change the block size, and bounds launches only where the build opts
//! in (`R3_APPLY_LAUNCH_BOUNDS=1`). Folded values must be exactly the bytes of a scalar
//! parameter of the kernel as this compile sees it: the runtime compares them byte for byte.
//!
//! A refusal costs only its own entry: the kernel keeps clang's code for it (or the other
//! entries that pass), and the build says why.

use crate::candidate::{Candidate, Specialize};
use crate::kernel::KernelSignature;
use crate::store::winner::Policy;
use crate::winners::{Guard, Variant, Winner, WinnersFile};

/// The most variants r3's runtime keeps for one kernel (r3rt.c's `R3_MAX_VARIANTS`): apply
/// builds no more, so that its note counts only what a launch can take.
pub const MAX_VARIANTS: usize = crate::dispatch::MAX_VARIANTS_PER_KERNEL;

/// The longest folded value the runtime compares: a scalar.
const MAX_FOLDED_BYTES: u64 = crate::dispatch::MAX_FOLDED_BYTES as u64;

/// What a winners file would build, entry by entry, checked without building (`r3 export
/// --check`): each entry as apply checks it, against the kernel's signature where `signatures`
/// knows its hash (a store's kernels), else everything but the parameters' sizes.
pub fn verify_file(
    f: &WinnersFile,
    signatures: &dyn Fn(&str) -> Option<KernelSignature>,
    policy: &Policy,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashMap::new();
    for (i, w) in f.kernels.iter().enumerate() {
        *seen.entry(w.hash.as_str()).or_insert(0) += 1;
        let sig = signatures(w.hash.as_str());
        let why = generic(w, sig.as_ref(), policy);
        out.push(Finding::of("kernels", i, w, why, sig.is_some()));
    }
    for f in out.iter_mut() {
        let n = seen.get(f.hash.as_str()).copied().unwrap_or(0);
        if n > 1 && f.refused.is_none() {
            f.refused = Some(format!(
                "the file has {n} entries for this kernel under `kernels`; fix: keep one"
            ));
        }
    }
    for (i, v) in f.variants.iter().enumerate() {
        let sig = signatures(v.winner.hash.as_str());
        let why = variant(v, sig.as_ref()).err();
        out.push(Finding::of("variants", i, &v.winner, why, sig.is_some()));
    }
    for u in &f.unreadable {
        out.push(Finding {
            list: u.list,
            index: u.index,
            hash: u.hash.clone().unwrap_or_default(),
            demangled: String::new(),
            refused: Some(u.why.clone()),
            signature_known: false,
        });
    }
    out
}

/// One entry of a winners file as `verify_file` found it.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub list: &'static str,
    pub index: usize,
    pub hash: String,
    pub demangled: String,
    /// Why apply would not build it; None: it builds (where its PTX is the measured one).
    pub refused: Option<String>,
    /// Whether its folded values were checked against the kernel's parameters.
    pub signature_known: bool,
}

impl Finding {
    fn of(
        list: &'static str,
        index: usize,
        w: &Winner,
        refused: Option<String>,
        signature_known: bool,
    ) -> Finding {
        Finding {
            list,
            index,
            hash: w.hash.as_str().to_owned(),
            demangled: w.demangled.clone(),
            refused,
            signature_known,
        }
    }
}

/// One entry apply did not build, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// "generic code" or "variant N" (from 1, in the file's order for this kernel).
    pub entry: String,
    pub why: String,
}

/// Why the generic entry of a kernel cannot run at every launch, if it cannot.
pub fn generic(w: &Winner, sig: Option<&KernelSignature>, policy: &Policy) -> Option<String> {
    let c = &w.candidate;
    if let Some(why) = code(w) {
        return Some(why);
    }
    if c.specialize.is_some() {
        return Some(
            "it folds launch values (`candidate.specialize`), right only for the launches a guard \
             admits; fix: list it under `variants` with its guard (`r3 export` writes it so)"
                .into(),
        );
    }
    if let Some(bx) = c.block_x {
        return Some(format!(
            "it changes the block size (`candidate.block_x` {bx}), which only a variant's guard may \
             do; fix: list it under `variants`"
        ));
    }
    if (c.max_threads.is_some() || c.min_blocks_per_sm.is_some()) && !policy.launch_bounds {
        return Some(format!(
            "it bounds launches (`candidate.max_threads` {}) without a guard; fix: list it under \
             `variants`, or build with R3_APPLY_LAUNCH_BOUNDS=1 if no launch has more threads",
            c.max_threads.map_or("unset".into(), |n| n.to_string())
        ));
    }
    folded(c, sig).err()
}

/// The guard a variant runs behind (derived from its candidate; a rewrite's may admit fewer
/// launches), or why it cannot ship.
pub fn variant(v: &Variant, sig: Option<&KernelSignature>) -> Result<Guard, String> {
    let c = &v.winner.candidate;
    if c.is_nvcc() {
        return Err(
            "it is nvcc's code, which ships as the generic code only; fix: list it under \
             `kernels`"
                .into(),
        );
    }
    if let Some(why) = code(&v.winner) {
        return Err(why);
    }
    if v.winner.rewrite.is_some() {
        return rewrite_variant(v, sig);
    }
    if !c.guarded() {
        return Err(
            "its candidate neither folds values nor bounds launches, so it needs no guard; fix: \
             list it under `kernels`"
                .into(),
        );
    }
    let derived = Guard::of(c);
    let differs = guard_differences(&v.guard, &derived);
    if !differs.is_empty() {
        return Err(format!(
            "its guard disagrees with its candidate in {} (the guard must state what the code \
             folds and bounds); fix: `r3 export` the winners again",
            differs.join(", ")
        ));
    }
    folded(c, sig)?;
    Ok(derived)
}

/// A source rewrite's guard: what its code folds and bounds, as any variant's, and it may
/// admit fewer launches than that (the launches its judge checked it on: `plan::rewrite_guard`),
/// never more.
fn rewrite_variant(v: &Variant, sig: Option<&KernelSignature>) -> Result<Guard, String> {
    let c = &v.winner.candidate;
    let derived = Guard::of(c);
    let narrower = match (&v.guard.values, &derived.values) {
        (_, None) => true,
        (Some(g), Some(d)) => g == d,
        (None, Some(_)) => false,
    };
    if v.guard.max_threads != derived.max_threads || v.guard.block_x != derived.block_x || !narrower
    {
        return Err(
            "its guard admits launches its code was not built for (it must state what the code \
             folds and bounds); fix: `r3 export` the winners again"
                .into(),
        );
    }
    if v.guard.values.is_none() && !c.guarded() {
        return Err(
            "a rewrite with no guard runs at every launch; fix: list it under `kernels`".into(),
        );
    }
    // Its guard's values are checked as folded values are: each a scalar parameter's bytes.
    let guarded_as = crate::candidate::Candidate {
        specialize: v.guard.values.clone(),
        ..c.clone()
    };
    folded(&guarded_as, sig)?;
    Ok(v.guard.clone())
}

/// Why an entry's code cannot be what it says: nvcc's code carried, or none but nvcc's.
fn code(w: &Winner) -> Option<String> {
    let carried = w.candidate.is_nvcc() || w.rewrite.is_some();
    match (carried, &w.code) {
        (true, None) if w.candidate.is_nvcc() => Some(
            "it is nvcc's code (`candidate.compiler`) but carries none (`code`); fix: `r3 export` \
             it from a store whose search measured it"
                .into(),
        ),
        (true, None) => Some(
            "it is a source rewrite's code (`rewrite`) but carries none (`code`); fix: `r3 \
             export` it from the store with R3_APPLY_REWRITES=1"
                .into(),
        ),
        (false, Some(_)) => Some(
            "it carries code (`code`) but its candidate is lowered by LLVM from this kernel; fix: \
             remove `code`"
                .into(),
        ),
        _ => None,
    }
}

/// The guard fields whose value in the file is not the candidate's.
fn guard_differences(file: &Guard, derived: &Guard) -> Vec<&'static str> {
    let (f, d) = (file.values.as_ref(), derived.values.as_ref());
    let mut out = Vec::new();
    if file.max_threads != derived.max_threads {
        out.push("max_threads");
    }
    if file.block_x != derived.block_x {
        out.push("block_x");
    }
    if f.map(|s| &s.args) != d.map(|s| &s.args) {
        out.push("values.args");
    }
    if f.and_then(|s| s.block) != d.and_then(|s| s.block) {
        out.push("values.block");
    }
    if f.and_then(|s| s.grid) != d.and_then(|s| s.grid) {
        out.push("values.grid");
    }
    out
}

/// Whether the values a candidate folds are ones the runtime can compare exactly: each a
/// scalar parameter of the kernel, once, in order, given as lowercase hex of exactly its size;
/// folded dimensions are positive. Without the kernel's signature, all but the parameters.
pub fn folded(c: &Candidate, sig: Option<&KernelSignature>) -> Result<(), String> {
    let Some(s) = &c.specialize else {
        return Ok(());
    };
    dims(s)?;
    let mut last = None;
    for a in &s.args {
        if last.is_some_and(|l| a.index <= l) {
            return Err(format!(
                "it folds parameter {} out of order or twice",
                a.index
            ));
        }
        last = Some(a.index);
        let size = match sig {
            Some(sig) => foldable_size(sig, a.index)?,
            // Without the kernel, any whole scalar: 1 to 8 bytes.
            None => (a.hex.len() as u64 / 2).clamp(1, MAX_FOLDED_BYTES),
        };
        hex(&a.hex, size).map_err(|e| format!("parameter {}'s value {e}", a.index))?;
    }
    Ok(())
}

/// The size of the kernel's parameter `index`, where it is one the search may fold (so that
/// apply accepts nothing it would not); why not otherwise.
fn foldable_size(sig: &KernelSignature, index: u32) -> Result<u64, String> {
    let Some(p) = usize::try_from(index).ok().and_then(|i| sig.params.get(i)) else {
        return Err(format!(
            "it folds parameter {index}, and the kernel has {} parameters",
            sig.params.len()
        ));
    };
    let foldable = crate::lower::specialize::foldable(sig);
    if !foldable.contains(&index) || p.size > MAX_FOLDED_BYTES {
        return Err(format!(
            "it folds parameter {index} ({}, {} bytes), which is not a scalar r3 folds",
            p.llvm_type, p.size
        ));
    }
    Ok(p.size)
}

fn dims(s: &Specialize) -> Result<(), String> {
    for (what, d) in [("block", s.block), ("grid", s.grid)] {
        if d.is_some_and(|d| d.contains(&0)) {
            return Err(format!("it folds a {what} with a zero dimension"));
        }
    }
    Ok(())
}

/// Lowercase hex of exactly `size` bytes, and nothing else (no sign, no space, no newline).
fn hex(text: &str, size: u64) -> Result<(), String> {
    let ok_chars = text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !ok_chars {
        return Err(format!("{text:?} is not lowercase hex"));
    }
    if text.len() as u64 != 2 * size {
        return Err(format!(
            "{text:?} has {} hex digits, and the parameter has {size} bytes ({} digits)",
            text.len(),
            2 * size
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidate::FoldedArg;
    use crate::kernel::Param;

    fn param(index: u32, llvm_type: &str, size: u64, pointer: bool) -> Param {
        Param {
            index,
            llvm_type: llvm_type.into(),
            size,
            align: size.max(1),
            pointer,
            address_space: pointer.then_some(1),
            byval: None,
        }
    }

    /// `axpy(float a, float *x, int n)`.
    fn sig() -> KernelSignature {
        let mut s: KernelSignature = serde_json::from_value(serde_json::json!({
            "name": "_Z4axpyfPfi", "demangled": "axpy(float, float*, int)", "arch": "sm_90",
            "params": []
        }))
        .expect("a signature with defaults");
        s.params = vec![
            param(0, "float", 4, false),
            param(1, "ptr", 8, true),
            param(2, "i32", 4, false),
        ];
        s
    }

    fn specialized(args: Vec<FoldedArg>) -> Candidate {
        Candidate {
            specialize: Some(Specialize {
                args,
                block: Some([256, 1, 1]),
                grid: None,
            }),
            ..Candidate::baseline()
        }
    }

    fn arg(index: u32, hex: &str) -> FoldedArg {
        FoldedArg {
            index,
            hex: hex.into(),
        }
    }

    #[test]
    fn folded_values_are_whole_scalars_of_the_kernel() {
        let s = sig();
        assert_eq!(
            folded(&specialized(vec![arg(2, "00020000")]), Some(&s)),
            Ok(())
        );
        let refused = |args| folded(&specialized(args), Some(&s)).unwrap_err();
        assert!(refused(vec![arg(99, "00020000")]).contains("has 3 parameters"));
        assert!(refused(vec![arg(u32::MAX, "00020000")]).contains("has 3 parameters"));
        // "00" would match every n whose low byte is 0.
        assert!(refused(vec![arg(2, "00")]).contains("4 bytes (8 digits)"));
        assert!(refused(vec![arg(2, "00000000000000000000")]).contains("4 bytes"));
        assert!(refused(vec![arg(2, "0002\n000")]).contains("not lowercase hex"));
        assert!(refused(vec![arg(2, "0002 000")]).contains("not lowercase hex"));
        assert!(refused(vec![arg(1, "0000000000000000")]).contains("not a scalar r3 folds"));
        assert!(refused(vec![arg(2, "00020000"), arg(2, "00020000")]).contains("twice"));
        let zero_block = Candidate {
            specialize: Some(Specialize {
                args: vec![],
                block: Some([0, 1, 1]),
                grid: None,
            }),
            ..Candidate::baseline()
        };
        // Without the kernel (`r3 export --check` of one the store lacks): order and whole
        // scalars of 1 to 8 bytes, not the parameters.
        assert_eq!(folded(&specialized(vec![arg(7, "00")]), None), Ok(()));
        let alone = |args| folded(&specialized(args), None).unwrap_err();
        assert!(alone(vec![arg(2, "00000000000000000000")]).contains("8 bytes"));
        assert!(alone(vec![arg(2, "000")]).contains("3 hex digits"));
        assert!(alone(vec![arg(3, "00"), arg(1, "00")]).contains("out of order"));
        assert!(folded(&zero_block, Some(&s))
            .unwrap_err()
            .contains("zero dimension"));
    }

    fn winner(c: Candidate) -> Winner {
        serde_json::from_value(serde_json::json!({
            "hash": "0123456789abcdef", "name": "_Z4axpyfPfi", "demangled": "axpy",
            "arch": "sm_90", "gpu": "g", "driver": "d",
            "candidate": c, "ptx_isa": null, "ptx_hash": "p", "trial": 1, "speedup": 1.5,
            "confirmed_speedup": null, "r3_version": "0"
        }))
        .expect("a winner")
    }

    #[test]
    fn a_guard_is_the_candidates_or_the_variant_is_refused() {
        let c = specialized(vec![arg(2, "00020000")]);
        let v = |guard: Guard| Variant {
            winner: winner(c.clone()),
            guard,
        };
        assert_eq!(variant(&v(Guard::of(&c)), Some(&sig())), Ok(Guard::of(&c)));
        let empty = Guard {
            max_threads: None,
            block_x: None,
            values: None,
        };
        let e = variant(&v(empty), Some(&sig())).unwrap_err();
        assert!(e.contains("values.args, values.block"), "{e}");
        let mut other = Guard::of(&c);
        other.values.as_mut().unwrap().args[0].hex = "00040000".into();
        let e = variant(&v(other), Some(&sig())).unwrap_err();
        assert!(e.contains("in values.args"), "{e}");
        let plain = Variant {
            winner: winner(Candidate::baseline()),
            guard: Guard::of(&Candidate::baseline()),
        };
        assert!(variant(&plain, Some(&sig()))
            .unwrap_err()
            .contains("needs no guard"));
    }

    #[test]
    fn nvcc_code_ships_as_generic_code_with_its_text_and_only_then() {
        let policy = Policy::default();
        let nvcc = Winner {
            code: Some(".version 9.0".into()),
            ..winner(Candidate::nvcc())
        };
        assert_eq!(generic(&nvcc, Some(&sig()), &policy), None);
        let without = winner(Candidate::nvcc());
        assert!(generic(&without, Some(&sig()), &policy)
            .unwrap()
            .contains("carries none"));
        let llvm_with_code = Winner {
            code: Some(".version 9.0".into()),
            ..winner(Candidate::baseline())
        };
        assert!(generic(&llvm_with_code, Some(&sig()), &policy)
            .unwrap()
            .contains("lowered by LLVM"));
        let as_variant = Variant {
            winner: nvcc,
            guard: Guard::of(&Candidate::nvcc()),
        };
        assert!(variant(&as_variant, Some(&sig()))
            .unwrap_err()
            .contains("list it under `kernels`"));
        // A rewrite's code likewise carried; as a variant, behind a guard (below).
        let rewrite = Winner {
            rewrite: Some(crate::winners::RewriteOf {
                variant: "fedcba9876543210".into(),
                attempt: 3,
            }),
            ..winner(Candidate::baseline())
        };
        assert!(generic(&rewrite, Some(&sig()), &policy)
            .unwrap()
            .contains("a source rewrite's code"));
        let carried = Winner {
            code: Some(".version 9.0".into()),
            ..rewrite
        };
        assert_eq!(generic(&carried, Some(&sig()), &policy), None);
        let as_variant = Variant {
            winner: carried,
            guard: Guard::of(&Candidate::baseline()),
        };
        assert!(variant(&as_variant, Some(&sig()))
            .unwrap_err()
            .contains("runs at every launch"));
    }

    /// A rewrite checked on one launch shape runs behind a guard of that launch's values,
    /// though its code folds none: it may admit fewer launches than its code was built for,
    /// never more, and its values are checked as folded values are.
    #[test]
    fn a_rewrites_guard_may_admit_fewer_launches_than_its_code_never_more() {
        let rewrite = |c: Candidate, guard: Guard| Variant {
            winner: Winner {
                code: Some(".version 9.0".into()),
                rewrite: Some(crate::winners::RewriteOf {
                    variant: "fedcba9876543210".into(),
                    attempt: 3,
                }),
                ..winner(c)
            },
            guard,
        };
        let one_launch = Guard {
            values: specialized(vec![arg(2, "00020000")]).specialize,
            ..Guard::of(&Candidate::baseline())
        };
        let plain = rewrite(Candidate::baseline(), one_launch.clone());
        assert_eq!(variant(&plain, Some(&sig())), Ok(one_launch.clone()));
        // Its code folds values: its guard states them.
        let folding = specialized(vec![arg(2, "00020000")]);
        let same = rewrite(folding.clone(), Guard::of(&folding));
        assert_eq!(variant(&same, Some(&sig())), Ok(Guard::of(&folding)));
        let wider = rewrite(folding.clone(), Guard::of(&Candidate::baseline()));
        assert!(variant(&wider, Some(&sig()))
            .unwrap_err()
            .contains("not built for"));
        let other = specialized(vec![arg(2, "00040000")]);
        let elsewhere = rewrite(folding, Guard::of(&other));
        assert!(variant(&elsewhere, Some(&sig())).is_err());
        // A value of a pointer parameter is no scalar's.
        let pointer = Guard {
            values: specialized(vec![arg(1, "0000000000000000")]).specialize,
            ..Guard::of(&Candidate::baseline())
        };
        assert!(variant(&rewrite(Candidate::baseline(), pointer), Some(&sig())).is_err());
    }

    #[test]
    fn the_generic_code_neither_folds_nor_bounds_unless_the_build_opts_in() {
        let policy = Policy::default();
        assert_eq!(
            generic(&winner(Candidate::baseline()), Some(&sig()), &policy),
            None
        );
        let c = specialized(vec![arg(2, "00020000")]);
        assert!(generic(&winner(c), Some(&sig()), &policy)
            .unwrap()
            .contains("folds launch values"));
        let bounded = Candidate {
            max_threads: Some(256),
            ..Candidate::baseline()
        };
        assert!(generic(&winner(bounded.clone()), Some(&sig()), &policy)
            .unwrap()
            .contains("R3_APPLY_LAUNCH_BOUNDS=1"));
        let opted = Policy {
            launch_bounds: true,
            ..Policy::default()
        };
        assert_eq!(generic(&winner(bounded), Some(&sig()), &opted), None);
        let wider = Candidate {
            block_x: Some(512),
            ..Candidate::baseline()
        };
        assert!(generic(&winner(wider), Some(&sig()), &opted)
            .unwrap()
            .contains("block size"));
    }
}
