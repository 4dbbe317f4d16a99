//! What apply builds with: each kernel's winner (by content hash), chosen from the store's
//! trials or read from an exported winners file (`r3 export`, schema in docs/export-schema.md).
//!
//! A kernel's plan is what `store::winner::shipment` decides: the generic code, right for
//! every launch (a winner, or clang's code), and guarded variants (launch bounds, folded
//! values), each taken by r3's runtime only at launches its [`Guard`] admits. Candidates that
//! change the block size never ship; a best that did not hold up on re-measurement keeps
//! clang's code.

use crate::check;
pub use crate::check::Refusal;
use crate::kernel::{SourceLoc, TrialsKey};
use crate::store::trials::{Confirmation, TrialRecord};
use crate::store::winner::{self, chosen_search, Policy};
use crate::store::{KernelRecord, Store, StoreError};
pub use crate::winners::{
    Guard, Rewrite, Unreadable, Variant, Winner, WinnersFile, SCHEMA, SCHEMA_VERSION,
};
use std::path::{Path, PathBuf};

/// One kernel's plan: the generic code (None: clang's) and the variants, first match taken;
/// and the entries [`crate::check`] refused, which are not built.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Planned {
    pub generic: Option<Winner>,
    pub variants: Vec<Variant>,
    pub refused: Vec<Refusal>,
    /// Why entries the source holds for the kernel are not built under this policy (a
    /// simulated winner without `R3_APPLY_SIMULATED=1`, one no faster than clang's code).
    pub withheld: Vec<String>,
}

impl Planned {
    pub fn is_empty(&self) -> bool {
        self.generic.is_none() && self.variants.is_empty()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{path}: {msg}; fix: write it with `r3 export`")]
    File { path: PathBuf, msg: String },
}

/// Where winners come from.
pub enum Source {
    Store(Store),
    File(WinnersFile),
}

impl Source {
    pub fn file(path: &Path) -> Result<Source, PlanError> {
        let text = std::fs::read(path).map_err(|e| PlanError::File {
            path: path.to_owned(),
            msg: e.to_string(),
        })?;
        Source::file_text(path, &text)
    }

    /// A winners file already read (`path` names it in errors): the driver reads a file once,
    /// so that a pipe or process substitution (`--r3-apply=<(...)`) applies as a file does.
    pub fn file_text(path: &Path, text: &[u8]) -> Result<Source, PlanError> {
        let err = |msg: String| PlanError::File {
            path: path.to_owned(),
            msg,
        };
        let f = WinnersFile::parse(text).map_err(err)?;
        if f.schema != SCHEMA || f.schema_version != SCHEMA_VERSION {
            return Err(err(format!(
                "schema {} version {}, this r3 reads {SCHEMA} version {SCHEMA_VERSION}",
                f.schema, f.schema_version
            )));
        }
        Ok(Source::File(f))
    }

    /// What ships for a kernel (by content hash). A winners file is taken as written (its
    /// export applied a policy; a build from it must be reproducible whatever the
    /// environment), except that simulated winners need asking for and `R3_APPLY_DISPATCH=0`
    /// leaves its variants out.
    ///
    /// Whatever the source, every entry passes [`crate::check`] against the kernel as this
    /// compile sees it, and a variant runs behind the guard its candidate implies, never one
    /// read from the file; what fails is in `refused`, not built.
    pub fn plan(&self, k: &KernelRecord, policy: &Policy) -> Result<Planned, PlanError> {
        let mut plan = match self {
            Source::File(f) => plan_in_file(f, k, policy),
            Source::Store(s) => plan_in_store(s, k, policy)?,
        };
        let why_not = |w: &Winner| {
            if w.simulated && !policy.simulated {
                Some("its winner is simulated (trials of `r3 tune --simulate` measured nothing; R3_APPLY_SIMULATED=1 builds them, for tests)")
            } else if w.speedup <= 1.0 {
                Some("its winner is no faster than clang's code")
            } else {
                None
            }
        };
        let mut withheld: Vec<String> = Vec::new();
        let mut keep = |w: &Winner| match why_not(w) {
            None => true,
            Some(why) => {
                if !withheld.iter().any(|x| x == why) {
                    withheld.push(why.to_owned());
                }
                false
            }
        };
        plan.generic = plan.generic.filter(&mut keep);
        plan.variants.retain(|v| keep(&v.winner));
        plan.withheld = withheld;
        Ok(checked(plan, &k.signature, policy))
    }

    /// The generic winner alone (what every launch may run), if there is one.
    pub fn winner(&self, k: &KernelRecord, policy: &Policy) -> Result<Option<Winner>, PlanError> {
        Ok(self.plan(k, policy)?.generic)
    }

    /// Whether another version of this kernel (same name and source file, another hash) has a
    /// winner: then this one was edited since it was tuned.
    pub fn tuned_before(&self, k: &KernelRecord, others: &[KernelRecord]) -> bool {
        let file = |src: Option<&SourceLoc>| {
            src.map(|s| std::fs::canonicalize(&s.file).unwrap_or_else(|_| PathBuf::from(&s.file)))
        };
        let same = |name: &str, src: Option<&SourceLoc>| {
            name == k.signature.name && file(src) == file(k.signature.source.as_ref())
        };
        // A winners file is often built from in another checkout than the one it was exported
        // from: there the source file is the one of the same name.
        let base = |src: Option<&SourceLoc>| {
            src.and_then(|s| Path::new(&s.file).file_name().map(|n| n.to_owned()))
        };
        let same_elsewhere = |name: &str, src: Option<&SourceLoc>| {
            name == k.signature.name
                && base(src).is_some()
                && base(src) == base(k.signature.source.as_ref())
        };
        match self {
            Source::File(f) => f
                .kernels
                .iter()
                .chain(f.variants.iter().map(|v| &v.winner))
                .any(|w| {
                    w.hash != k.hash
                        && (same(&w.name, w.source.as_ref())
                            || same_elsewhere(&w.name, w.source.as_ref()))
                }),
            Source::Store(s) => others.iter().any(|o| {
                o.hash != k.hash
                    && same(&o.signature.name, o.signature.source.as_ref())
                    && s.has_trials(&TrialsKey::of_kernel(&o.hash))
                        .unwrap_or(false)
            }),
        }
    }
}

/// A kernel's entries in a winners file as written; several generic entries of one kernel
/// (a bad merge) are refused together, since nothing says which one was meant.
fn plan_in_file(f: &WinnersFile, k: &KernelRecord, policy: &Policy) -> Planned {
    let mut plan = Planned::default();
    for u in f
        .unreadable
        .iter()
        .filter(|u| u.hash.as_deref() == Some(k.hash.as_str()))
    {
        plan.refused.push(Refusal {
            entry: format!("`{}` entry {}", u.list, u.index),
            why: u.why.clone(),
        });
    }
    let generic: Vec<&Winner> = f.kernels.iter().filter(|w| w.hash == k.hash).collect();
    match generic.as_slice() {
        [] => {}
        [w] => plan.generic = Some((*w).clone()),
        many => plan.refused.push(Refusal {
            entry: "generic code".into(),
            why: format!(
                "the winners file has {} entries for it under `kernels`; fix: keep one",
                many.len()
            ),
        }),
    }
    if policy.dispatch {
        plan.variants = f
            .variants
            .iter()
            .filter(|v| v.winner.hash == k.hash)
            .cloned()
            .collect();
    }
    plan
}

/// The plan less what [`crate::check`] refuses, each variant behind its candidate's guard, and
/// no more variants than the runtime takes.
fn checked(plan: Planned, sig: &crate::kernel::KernelSignature, policy: &Policy) -> Planned {
    let mut refused = plan.refused;
    let generic = plan
        .generic
        .and_then(|w| match check::generic(&w, Some(sig), policy) {
            None => Some(w),
            Some(why) => {
                refused.push(Refusal {
                    entry: "generic code".into(),
                    why,
                });
                None
            }
        });
    let mut variants = Vec::new();
    for (n, v) in plan.variants.into_iter().enumerate() {
        let entry = format!("variant {}", n + 1);
        match check::variant(&v, Some(sig)) {
            Ok(_) if variants.len() == check::MAX_VARIANTS => refused.push(Refusal {
                entry,
                why: format!(
                    "r3's runtime takes at most {} variants of a kernel",
                    check::MAX_VARIANTS
                ),
            }),
            Ok(guard) => variants.push(Variant {
                winner: v.winner,
                guard,
            }),
            Err(why) => refused.push(Refusal { entry, why }),
        }
    }
    Planned {
        generic,
        variants,
        refused,
        withheld: plan.withheld,
    }
}

fn plan_in_store(store: &Store, k: &KernelRecord, policy: &Policy) -> Result<Planned, StoreError> {
    let own = plan_own_search(store, k, policy)?;
    if !policy.rewrites {
        return Ok(own);
    }
    Ok(with_rewrite(store, k, policy, own))
}

/// `own` (the kernel's plan from its own search), or its best source rewrite where the rewrite
/// beat the kernel's best compiler-only configuration by the least speedup worth shipping and
/// lowers to the PTX its judge measured. A rewrite checked on launches of two shapes or more,
/// whose code folds nothing, ships as the generic code alone (the variants were the original
/// code's); any other ships behind a guard ([`rewrite_guard`]) in front of `own`.
fn with_rewrite(store: &Store, k: &KernelRecord, policy: &Policy, own: Planned) -> Planned {
    let Some(r) = crate::store::attempts::shippable_rewrite(store, &k.hash, policy.simulated)
    else {
        return own;
    };
    let own_best = chosen_search(store, &TrialsKey::of_kernel(&k.hash), policy)
        .ok()
        .flatten()
        .and_then(|(_, recs)| winner::pick_best(&recs, &[]).and_then(TrialRecord::ratio))
        .map_or(1.0, |ratio| 1.0 / ratio);
    if !r.beats(own_best, policy.min_speedup) {
        return own;
    }
    let Some(code) = lower_rewrite(store, &r) else {
        return own;
    };
    let winner = Winner {
        speedup: r.over_o3(own_best),
        confirmed_speedup: None,
        code: Some(code),
        rewrite: Some(crate::winners::RewriteOf {
            variant: r.variant.clone(),
            attempt: r.attempt,
        }),
        ..winner_of(k, &r.trial, &[])
    };
    let withheld = |mut own: Planned, why: String| {
        own.withheld
            .push(format!("its source rewrite {}: {why}", r.attempt));
        own
    };
    match rewrite_guard(store, k, &r) {
        Guarding::Every => Planned {
            generic: Some(winner),
            variants: Vec::new(),
            refused: own.refused,
            withheld: own.withheld,
        },
        Guarding::Behind(_) if !policy.dispatch => withheld(
            own,
            "it runs only behind a guard, which R3_APPLY_DISPATCH=0 leaves out".into(),
        ),
        Guarding::Behind(guard) => {
            let floor = own
                .generic
                .as_ref()
                .map_or(1.0, |w| w.confirmed_speedup.unwrap_or(w.speedup));
            let admitted_ms = store
                .run_ms(&k.hash)
                .map(|ms| ms * admitted_share(store, k, &guard).unwrap_or(1.0));
            if !winner::saves_its_load(admitted_ms, floor, winner.speedup) {
                return withheld(
                    own,
                    "behind its guard it would save less than its first load costs".into(),
                );
            }
            // First: a launch it was checked on runs it; any other, the kernel's own code.
            let mut variants = vec![Variant { winner, guard }];
            variants.extend(own.variants);
            Planned { variants, ..own }
        }
        Guarding::Unchecked(why) => withheld(own, why),
    }
}

/// Where a source rewrite may run.
#[derive(Debug, Clone, PartialEq)]
enum Guarding {
    /// At every launch.
    Every,
    /// Only at launches this guard admits.
    Behind(Guard),
    /// Nowhere: why.
    Unchecked(String),
}

/// Where rewrite `r` may run: [`guarding`] over the recorded launches its judge checked it on,
/// as its verdict names them; for a verdict of an earlier r3 that does not, the store's
/// recordings of the original now. A recording made after the judge was never checked: taken
/// for one, a second shape would have let a rewrite checked on one shape run everywhere.
fn rewrite_guard(
    store: &Store,
    k: &KernelRecord,
    r: &crate::store::attempts::ShippableRewrite,
) -> Guarding {
    let launches = if r.checked.is_empty() {
        store
            .launches_of(&k.hash)
            .unwrap_or_default()
            .iter()
            .filter_map(|rec| rec.launch.values())
            .collect()
    } else {
        r.checked.clone()
    };
    guarding(&launches, k, &r.trial.candidate)
}

/// Of kernel `k`'s time in the program run that runs it longest, the share that source
/// rewrite `r` runs: all where it runs at every launch, what its guard admits
/// ([`crate::store::Store::admitted_share`]) where it runs behind one, none where no launch
/// shows where it was checked (apply withholds it); None where not known (no census counted
/// the kernel's recordings).
pub fn rewrite_share(
    store: &Store,
    k: &KernelRecord,
    r: &crate::store::attempts::ShippableRewrite,
) -> Option<f64> {
    match rewrite_guard(store, k, r) {
        Guarding::Every => Some(1.0),
        Guarding::Behind(guard) => admitted_share(store, k, &guard),
        Guarding::Unchecked(_) => Some(0.0),
    }
}

/// The share of `k`'s time the launches `guard` admits take, at least.
fn admitted_share(store: &Store, k: &KernelRecord, guard: &Guard) -> Option<f64> {
    let recordings = store.launches_of(&k.hash).ok()?;
    let folded: Vec<u32> = guard
        .values
        .iter()
        .flat_map(|v| v.args.iter().map(|a| a.index))
        .collect();
    store.admitted_share(&k.hash, &recordings, &|l| guard.admits(l), &folded)
}

/// Where a rewrite judged with candidate `c` and checked on `launches` (the original's recorded
/// launches) may run: where those have two shapes (grid and block) or more and its code folds
/// and bounds nothing, every launch may run it; otherwise it runs behind the guard a
/// specialized variant of it would have: what its code folds and bounds and, where the
/// launches show one shape only, that shape and the scalar arguments every checked launch
/// passed alike (a rewrite may assume a size, a tile that divides it, a block of that shape,
/// which nothing but those launches showed true).
fn guarding(
    launches: &[crate::candidate::LaunchValues],
    k: &KernelRecord,
    c: &crate::candidate::Candidate,
) -> Guarding {
    let Some(first) = launches.first() else {
        return Guarding::Unchecked(
            "no recorded launch of the kernel shows where it was checked".into(),
        );
    };
    let mut shapes: Vec<([u32; 3], [u32; 3])> =
        launches.iter().map(|l| (l.grid, l.block)).collect();
    shapes.sort_unstable();
    shapes.dedup();
    let mut guard = Guard::of(c);
    if shapes.len() >= 2 || guard.values.is_some() {
        return if c.guarded() {
            Guarding::Behind(guard)
        } else {
            Guarding::Every
        };
    }
    let alike = |i: u32| {
        let b = first.args.get(i as usize)?;
        launches
            .iter()
            .all(|l| l.args.get(i as usize) == Some(b))
            .then(|| crate::candidate::FoldedArg::of_bytes(i, b))
    };
    guard.values = Some(crate::candidate::Specialize {
        args: crate::lower::specialize::foldable(&k.signature)
            .into_iter()
            .filter_map(alike)
            .collect(),
        block: Some(first.block),
        grid: Some(first.grid),
    });
    Guarding::Behind(guard)
}

/// The rewrite's kernel lowered as its judge's search lowered the winning configuration, if
/// that gives the PTX it measured.
fn lower_rewrite(store: &Store, r: &crate::store::attempts::ShippableRewrite) -> Option<String> {
    let job = crate::lower::isolated::LowerJob {
        bitcode: store.kernel_dir(&r.variant).join("module.bc"),
        kernel_hash: r.variant.clone(),
        candidate: r.trial.candidate.clone(),
        target: crate::lower::Codegen {
            sm: r.trial.target.as_ref()?.sm.clone(),
            ptx: ptx_isa(&r.trial),
            opt_level: 3,
        },
        mutation: None,
    };
    let lowered = crate::lower::isolated::lower_isolated(&job).ok()?;
    (Some(&lowered.ptx_hash) == r.trial.ptx_hash.as_ref()).then_some(lowered.ptx)
}

fn plan_own_search(
    store: &Store,
    k: &KernelRecord,
    policy: &Policy,
) -> Result<Planned, StoreError> {
    let Some((path, recs)) = chosen_search(store, &TrialsKey::of_kernel(&k.hash), policy)? else {
        return Ok(Planned::default());
    };
    let confirmed = store.confirmations(&path)?;
    let policy = policy.for_record(k).with_run_ms(store.run_ms(&k.hash));
    let ships = winner::shipment(&recs, &confirmed, &policy);
    let winner = |t: &TrialRecord| Winner {
        code: nvcc_code(store, k, t),
        ..winner_of(k, t, &confirmed)
    };
    Ok(Planned {
        generic: ships.generic.map(winner),
        variants: ships
            .variants
            .iter()
            .map(|t| Variant {
                winner: winner(t),
                guard: Guard::of(&t.candidate),
            })
            .collect(),
        refused: Vec::new(),
        withheld: Vec::new(),
    })
}

/// nvcc's code of the kernel, for a trial that measured it: the store's, for the trial's target.
fn nvcc_code(store: &Store, k: &KernelRecord, t: &TrialRecord) -> Option<String> {
    let sm = t.target.as_ref().map_or(&k.signature.arch, |t| &t.sm);
    t.candidate
        .is_nvcc()
        .then(|| store.nvcc_code(&k.hash, sm).ok().flatten()?.ptx)
        .flatten()
}

fn winner_of(k: &KernelRecord, t: &TrialRecord, confirmed: &[Confirmation]) -> Winner {
    let simulated = t.simulated();
    let confirmed_speedup = winner::confirmation_of(confirmed, t.trial)
        .and_then(|c| c.ratio())
        .map(|r| 1.0 / r);
    Winner {
        hash: k.hash.clone(),
        name: k.signature.name.clone(),
        demangled: k.signature.demangled.clone(),
        arch: k.signature.arch.clone(),
        source: k.signature.source.clone(),
        gpu: t.gpu.clone(),
        driver: t.driver.clone(),
        candidate: t.candidate.clone(),
        ptx_isa: ptx_isa(t),
        ptx_hash: t.ptx_hash.clone().filter(|_| !simulated),
        trial: t.trial,
        speedup: t.ratio().map_or(1.0, |r| 1.0 / r),
        confirmed_speedup,
        simulated,
        r3_version: t.r3_version.clone(),
        code: None,
        rewrite: None,
    }
}

/// The PTX ISA the trial's candidate was compiled for: its own target where it records one.
fn ptx_isa(t: &TrialRecord) -> Option<String> {
    t.target
        .as_ref()
        .map_or_else(|| ptx_isa_of(&t.driver), |target| target.ptx.clone())
}

/// The PTX ISA replay lowered for, from the driver ("CUDA 13.0") of a trial that does not
/// record its target (an earlier r3's), as `lower::ptx_for_driver` chose it.
fn ptx_isa_of(driver: &str) -> Option<String> {
    let (major, minor) = driver.strip_prefix("CUDA ")?.split_once('.')?;
    let v = (major.parse().ok()?, minor.parse().ok()?);
    Some(crate::lower::ptx_for_driver(v).to_owned())
}

/// A digest of what apply ships from `store` under `policy`: each kernel's generic winner and
/// variants, by the code they ship (kernel, configuration, measured PTX), not by their speed.
/// It changes exactly when an applied build would compile differently; the store keeps it in
/// the winners stamp that compiles depend on. A kernel whose search files cannot be read
/// counts as shipping nothing, as apply then ships clang's code for it.
pub fn shipped_digest(store: &Store, policy: &Policy) -> Result<String, StoreError> {
    let source = Source::Store(store.clone());
    let code =
        |w: &Winner| serde_json::json!([w.hash, w.arch, w.ptx_hash, w.candidate, w.simulated]);
    let mut shipped = Vec::new();
    for k in store.kernels()?.into_iter().chain(store.variants()?) {
        let Ok(plan) = source.plan(&k, policy) else {
            continue;
        };
        let variants: Vec<_> = plan
            .variants
            .iter()
            .map(|v| serde_json::json!([code(&v.winner), v.guard]))
            .collect();
        if plan.generic.is_some() || !variants.is_empty() {
            shipped.push(serde_json::json!([
                plan.generic.as_ref().map(code),
                variants
            ]));
        }
    }
    // Nothing ships: the empty digest, which the empty stamp a build makes already holds (a
    // command that ships nothing rebuilds nothing).
    if shipped.is_empty() {
        return Ok(String::new());
    }
    Ok(
        blake3::hash(serde_json::Value::Array(shipped).to_string().as_bytes())
            .to_hex()
            .to_string(),
    )
}

/// Brings the store's winners stamp up to date with what apply ships now under the policy of
/// the environment (as a build would read it); returns whether it changed, and so whether the
/// next build recompiles the objects that depend on it.
pub fn refresh_winners_stamp(store: &Store) -> Result<bool, StoreError> {
    let digest = shipped_digest(store, &Policy::from_env())?;
    store.set_shipped_digest(&digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidate::Candidate;
    use crate::store::outcome::Outcome;
    use crate::store::trials::Target;

    fn trial(driver: &str, target: Option<Target>) -> TrialRecord {
        TrialRecord {
            format: 1,
            trial: 3,
            kernel: "h".into(),
            gpu: "NVIDIA H100 (sm_90)".into(),
            driver: driver.into(),
            device: None,
            target,
            r3_version: "0".into(),
            strategy: "bo".into(),
            seed: 0,
            batch: 1,
            candidate: Candidate::with_pipeline("default<O2>"),
            ptx_hash: Some("p".into()),
            duplicate_of: None,
            outcome: Outcome::CompileError {
                message: "unused here".into(),
            },
            passes_ms: 0.0,
            codegen_ms: 0.0,
            measure_ms: 0.0,
            finished_unix_ms: 0,
        }
    }

    #[test]
    fn the_ptx_isa_is_the_trials_own_target_and_the_driver_only_for_older_trials() {
        let target = |ptx: Option<&str>| Target {
            sm: "sm_90".into(),
            ptx: ptx.map(str::to_owned),
        };
        // A trial that records its target is lowered for it, whatever its driver says.
        let t = trial("CUDA 13.0", Some(target(Some("ptx85"))));
        assert_eq!(ptx_isa(&t).as_deref(), Some("ptx85"));
        let t = trial("CUDA 13.0", Some(target(None)));
        assert_eq!(ptx_isa(&t), None);
        // An earlier r3's trial names only the driver.
        let t = trial("CUDA 13.0", None);
        assert_eq!(ptx_isa(&t), ptx_isa_of("CUDA 13.0"));
        assert!(ptx_isa(&t).is_some());
        assert_eq!(ptx_isa(&trial("none", None)), None);
    }

    /// Where a rewrite may run is decided by the launches its judge checked it on, as its
    /// verdict names them: with one shape checked it runs behind that shape's guard, whether the
    /// store holds no recording (removed since, or carried without them) or a recording of
    /// another shape made after the judge; with two shapes, everywhere. A verdict of an earlier
    /// r3 that names none falls back to the store's recordings, here none: nowhere.
    #[test]
    fn a_rewrite_runs_where_its_judge_checked_it_not_where_the_store_records_now() {
        use crate::candidate::LaunchValues;
        use crate::store::attempts::{Checked, ShippableRewrite};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let k: KernelRecord = serde_json::from_value(serde_json::json!({
            "format": 1, "hash": "00112233aabbccdd", "name": "_Z1kiPf",
            "demangled": "k(int, float*)", "arch": "sm_90", "params": [],
            "compile": {"cwd": "/", "args": ["r3-clang++", "k.cu"], "env": {},
                        "clang": "clang", "clang_version": ""},
            "r3_version": "0"
        }))
        .unwrap();
        let launch = |grid: u32| LaunchValues {
            grid: [grid, 1, 1],
            block: [128, 1, 1],
            args: vec![vec![0, 4, 0, 0], vec![0; 8]],
        };
        let rewrite = |checked: Vec<LaunchValues>| ShippableRewrite {
            attempt: 1,
            label: "tiling".into(),
            variant: "ffeeddccbbaa9988".into(),
            gpu: "NVIDIA H100 (sm_90)".into(),
            speedup: 2.0,
            reference_speedup: Some(1.0),
            diff: String::new(),
            trial: trial("CUDA 13.0", None),
            checked,
        };
        match rewrite_guard(&store, &k, &rewrite(vec![launch(64)])) {
            Guarding::Behind(g) => {
                let v = g.values.expect("the checked shape");
                assert_eq!((v.grid, v.block), (Some([64, 1, 1]), Some([128, 1, 1])));
                assert!(v.holds_for(&launch(64)) && !v.holds_for(&launch(8)));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            rewrite_guard(&store, &k, &rewrite(vec![launch(64), launch(8)])),
            Guarding::Every
        );
        assert!(matches!(
            rewrite_guard(&store, &k, &rewrite(Vec::new())),
            Guarding::Unchecked(_)
        ));
        // Kept in its verdict as hex and read back as they were.
        let back: Vec<LaunchValues> = [launch(64)]
            .iter()
            .map(|l| Checked::of(l).values().unwrap())
            .collect();
        assert_eq!(back, [launch(64)]);
        let damaged = Checked {
            args: vec!["+f".into()],
            ..Checked::of(&launch(64))
        };
        assert_eq!(damaged.values(), None);
    }
}
