//! Which trial is a search's best, and which one apply ships: the one rule that tune
//! (confirming), apply, export and report all read trials by.
//!
//! The best is the valid trial with the lowest time over -O3, unless its re-measurement after
//! the search (a [`Confirmation`]) did not hold up, in which case -O3 itself is the best.
//! What ships is a [`Shipment`]: the generic code, the best among the trials that are right
//! for every launch (no launch bounds, no folded values; or clang's code), and with dispatch
//! on (the default) guarded variants beside it, the best trial with launch bounds or folded
//! values, taken at launch only where its guard holds (`Candidate::admits`); candidates that
//! change the block size exist only for kernels the user declared block-size agnostic, and
//! ship as variants unless the build withholds them (`R3_APPLY_BLOCK_SIZE`). A gain below
//! `min_speedup` over what the launch would run otherwise is not worth a change.

use super::trials::{slug, Confirmation, TrialRecord};
use super::{Store, StoreError};
use crate::candidate::Candidate;
use crate::kernel::TrialsKey;
use std::path::PathBuf;

/// The valid trial with the lowest time over baseline (the first of equals) — unless a
/// confirmation of exactly that trial found it no faster than the baseline (or not valid), or
/// a program that shipped it measured it slower than the recorded build
/// (`Confirmation::refuted_in_program`), or it was withheld unconfirmed
/// (`Confirmation::unconfirmed`), in which case the baseline itself (trial 0) is the
/// best: r3 keeps -O3 when nothing beats it.
pub fn pick_best<'a>(
    recs: &'a [TrialRecord],
    confirmed: &[Confirmation],
) -> Option<&'a TrialRecord> {
    let best = recs
        .iter()
        .filter(|t| t.ratio().is_some())
        .min_by(|a, b| a.ratio().unwrap().total_cmp(&b.ratio().unwrap()))?;
    let held = match confirmation_of(confirmed, best.trial) {
        Some(c) if !holds(c) => 1.0,
        Some(c) => c.ratio().unwrap_or(1.0),
        None => return Some(best),
    };
    // A confirmation comes out lower than the search's figure, which is biased high: where it
    // falls under nvcc's code's, nvcc's is the best (and is confirmed in its turn), so that
    // what ships is never slower than the faster of the two compilers. device_calls' best,
    // 1.268x in its search, was confirmed at 1.239x, under nvcc's 1.260x, and ran 3% behind
    // nvcc's build in its program (H200, 2026-11-30).
    let nvcc = recs.iter().find(|t| {
        t.candidate.is_nvcc() && t.trial != best.trial && nvcc_figure(t, confirmed) < held
    });
    match nvcc {
        Some(n) => Some(n),
        None if held >= 1.0 => recs.iter().find(|t| t.trial == 0 && t.ratio().is_some()),
        None => Some(best),
    }
}

/// Whether a confirmation lets its trial stand: it came out faster than -O3, no program ran
/// it slower, and it was not withheld.
fn holds(c: &Confirmation) -> bool {
    c.ratio().is_some_and(|r| r < 1.0)
        && c.refuted_in_program().is_none()
        && c.unconfirmed.is_none()
}

/// nvcc's trial's time over -O3: confirmed where it was (infinite where that did not hold),
/// else its search's.
fn nvcc_figure(t: &TrialRecord, confirmed: &[Confirmation]) -> f64 {
    match confirmation_of(confirmed, t.trial) {
        Some(c) if holds(c) => c.ratio().unwrap_or(f64::INFINITY),
        Some(_) => f64::INFINITY,
        None => t.ratio().unwrap_or(f64::INFINITY),
    }
}

/// The re-measurement of one trial, if there is one.
pub fn confirmation_of(confirmed: &[Confirmation], trial: u32) -> Option<&Confirmation> {
    confirmed.iter().find(|c| c.trial == trial)
}

/// What apply may ship beyond the pipeline and codegen knobs.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Ship `.maxntid`/`.minnctapersm` in the generic code, unguarded: only right if the
    /// program never launches the kernel with more threads per block than it did when
    /// recorded (with dispatch on, launch bounds ship anyway, behind their guard).
    pub launch_bounds: bool,
    /// Ship guarded variants (launch bounds, folded values) beside the generic code, chosen at
    /// each launch by r3's runtime; off (`R3_APPLY_DISPATCH=0`) ships the generic code alone,
    /// as apply did before variants.
    pub dispatch: bool,
    /// Kernels whose variants may change the block size at launch. Only a kernel tuned with
    /// `--block-size-agnostic` has such trials: that declaration is the kernel's opt-in, so all
    /// of them by default; `R3_APPLY_BLOCK_SIZE=0` withholds every one, a comma-separated list
    /// of kernel names keeps those alone. Read through [`Policy::for_kernel`].
    pub block_size: BlockSizeOptIn,
    /// Which GPU's trials to use when several GPUs of one arch tuned a kernel (a part of its
    /// name, e.g. "h100"); the most recent search otherwise.
    pub gpu: Option<String>,
    /// Accept simulated trials (for tests of apply itself).
    pub simulated: bool,
    /// The least speedup worth shipping (the confirmed one where there is one): a gain within
    /// replay's noise changes the code for nothing.
    pub min_speedup: f64,
    /// Milliseconds the kernel runs in one run of the program that runs it longest, by the
    /// launch census (None: no census; every variant that gains ships): a variant ships only
    /// where it saves more than its first load costs ([`VARIANT_FIRST_LOAD_MS`]).
    pub run_ms: Option<f64>,
    /// Ship a kernel's best source rewrite (`r3 evolve`) where it beats the kernel's own
    /// winner, without the user's edit (`R3_APPLY_REWRITES=1`): opt-in, since the code that
    /// runs is then not the source's.
    pub rewrites: bool,
}

/// What a variant's first load adds to a program: measured on an H200 under CUDA's default
/// lazy loading (bench/RESULTS.md, 2026-11-28, `scripts/bench-dispatch`): the allocation that
/// loads it took 353 µs against 138 µs, the first launch 40 µs against 194 µs, 61 µs more in
/// all. A one-launch convolution whose variant gained 3 µs in replay ran 16-18 µs slower in its
/// program.
pub const VARIANT_FIRST_LOAD_MS: f64 = 0.061;

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            launch_bounds: false,
            dispatch: true,
            block_size: BlockSizeOptIn::All,
            gpu: None,
            simulated: false,
            min_speedup: DEFAULT_MIN_SPEEDUP,
            run_ms: None,
            rewrites: false,
        }
    }
}

/// Whether apply ships source rewrites: `R3_APPLY_REWRITES` where it is set (`0` turns off what
/// the build tree asks for), else the build tree's `apply_rewrites` (`-DR3_APPLY_REWRITES=ON`).
/// Every reader of the policy agrees on it: the shim in the build tree, and the stamp, report
/// and export of `r3` commands run there.
pub fn rewrites_asked(
    env: Option<&std::ffi::OsStr>,
    config: Option<&crate::config::BuildConfig>,
) -> bool {
    match env.filter(|v| !v.is_empty()) {
        Some(v) => v == "1",
        None => config.is_some_and(|c| c.apply_rewrites),
    }
}

/// The build tree's settings at the working directory, read once a process.
fn build_config() -> Option<crate::config::BuildConfig> {
    static CONFIG: std::sync::OnceLock<Option<crate::config::BuildConfig>> =
        std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let cwd = std::env::current_dir().ok()?;
            crate::config::find(&cwd).ok().flatten().map(|f| f.config)
        })
        .clone()
}

/// Replay tells apart differences of about 1% (medians within 1% at 95% confidence); twice
/// that is a gain worth a change of code.
pub const DEFAULT_MIN_SPEEDUP: f64 = 1.02;

/// The least gain over what a launch would run otherwise that apply ships:
/// `R3_APPLY_MIN_SPEEDUP`, else [`DEFAULT_MIN_SPEEDUP`] (`Policy::min_speedup`). A search asks
/// it of its winners before spending time to confirm them.
pub fn min_speedup_from_env() -> f64 {
    std::env::var("R3_APPLY_MIN_SPEEDUP")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|v: &f64| v.is_finite())
        .unwrap_or(DEFAULT_MIN_SPEEDUP)
}

impl Policy {
    /// The policy build systems set through the environment (`R3_APPLY_LAUNCH_BOUNDS=1`,
    /// `R3_APPLY_DISPATCH=0`, `R3_APPLY_GPU=h100`, `R3_APPLY_SIMULATED=1`,
    /// `R3_APPLY_MIN_SPEEDUP=1.05`, `R3_APPLY_REWRITES=1`).
    pub fn from_env() -> Policy {
        let on = |k: &str| std::env::var_os(k).is_some_and(|v| v == "1");
        Policy {
            launch_bounds: on("R3_APPLY_LAUNCH_BOUNDS"),
            dispatch: std::env::var_os("R3_APPLY_DISPATCH").is_none_or(|v| v != "0"),
            block_size: BlockSizeOptIn::parse(
                &std::env::var("R3_APPLY_BLOCK_SIZE").unwrap_or_default(),
            ),
            gpu: std::env::var("R3_APPLY_GPU").ok().filter(|g| !g.is_empty()),
            simulated: on("R3_APPLY_SIMULATED"),
            min_speedup: min_speedup_from_env(),
            run_ms: None,
            rewrites: rewrites_asked(
                std::env::var_os("R3_APPLY_REWRITES").as_deref(),
                build_config().as_ref(),
            ),
        }
    }

    /// Whether apply may ship this candidate as the generic code, run by every launch.
    pub fn ships(&self, c: &Candidate) -> bool {
        c.block_x.is_none()
            && c.specialize.is_none()
            && (self.launch_bounds || (c.max_threads.is_none() && c.min_blocks_per_sm.is_none()))
    }

    /// Whether apply may ship this candidate as a variant behind its guard.
    pub fn ships_guarded(&self, c: &Candidate) -> bool {
        self.dispatch
            && c.guarded()
            && (c.block_x.is_none() || self.block_size == BlockSizeOptIn::All)
    }

    /// The policy with the kernel's time in a program run (`Store::run_ms`), for
    /// [`pays_its_load`].
    pub fn with_run_ms(self, run_ms: Option<f64>) -> Policy {
        Policy { run_ms, ..self }
    }

    /// The policy for a stored kernel: a block-size opt-in that names it holds for it alone.
    pub fn for_record(&self, k: &crate::KernelRecord) -> Policy {
        let short = crate::kernel::unqualified_name(&k.signature.demangled);
        self.for_kernel(&[&k.signature.name, &k.signature.demangled, &short])
    }

    /// The policy for one kernel (by its mangled name and its names for people): a block-size
    /// opt-in that names it holds for it alone.
    pub fn for_kernel(&self, names: &[&str]) -> Policy {
        let block_size = match &self.block_size {
            BlockSizeOptIn::Named(list) if list.iter().any(|n| names.contains(&n.as_str())) => {
                BlockSizeOptIn::All
            }
            BlockSizeOptIn::All => BlockSizeOptIn::All,
            _ => BlockSizeOptIn::None,
        };
        Policy {
            block_size,
            ..self.clone()
        }
    }
}

/// Where variants may launch with another block size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockSizeOptIn {
    None,
    All,
    /// Kernels by name (mangled, demangled, or unqualified).
    Named(Vec<String>),
}

impl BlockSizeOptIn {
    /// `R3_APPLY_BLOCK_SIZE`: unset, empty or `1` all (each kernel declared block-size
    /// agnostic when it was tuned), `0` none, else kernel names separated by commas.
    pub fn parse(v: &str) -> BlockSizeOptIn {
        match v.trim() {
            "0" => BlockSizeOptIn::None,
            "" | "1" => BlockSizeOptIn::All,
            list => BlockSizeOptIn::Named(
                list.split(',')
                    .map(|n| n.trim().to_owned())
                    .filter(|n| !n.is_empty())
                    .collect(),
            ),
        }
    }
}

/// What apply ships of one search: the generic code (None: clang's) and the guarded variants,
/// the narrowest guard first (the runtime takes the first whose guard holds).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shipment<'a> {
    pub generic: Option<&'a TrialRecord>,
    pub variants: Vec<&'a TrialRecord>,
}

impl<'a> Shipment<'a> {
    /// Every trial that ships.
    pub fn trials(&self) -> impl Iterator<Item = &'a TrialRecord> + '_ {
        self.generic
            .into_iter()
            .chain(self.variants.iter().copied())
    }
}

/// A trial's speedup over -O3: the confirmed one where it was re-measured, else the search's.
pub fn gain(t: &TrialRecord, confirmed: &[Confirmation]) -> Option<f64> {
    let ratio = match confirmation_of(confirmed, t.trial) {
        Some(c) => c.ratio()?,
        None => t.ratio()?,
    };
    (ratio > 0.0).then(|| 1.0 / ratio)
}

/// The one rule for what ships (module docs): the generic code if it gains `min_speedup`
/// over -O3; the best guarded trial if it gains `min_speedup` over the generic code; and,
/// where that one folds values, the best with launch bounds alone if it too gains over the
/// generic code, for the launches whose values differ.
pub fn shipment<'a>(
    recs: &'a [TrialRecord],
    confirmed: &[Confirmation],
    policy: &Policy,
) -> Shipment<'a> {
    let worth = |t: &TrialRecord, over: f64| {
        let line = line_of(&t.candidate, policy.min_speedup);
        t.trial != 0 && gain(t, confirmed).is_some_and(|g| g > over && g >= over * line)
    };
    // The best among -O3 and the trials `keep` takes.
    let best_of = |keep: &dyn Fn(&Candidate) -> bool| {
        best_among(recs, confirmed, |r| r.trial == 0 || keep(&r.candidate))
    };
    // Where the best every launch may run is under the line, nvcc's code still ships if it is
    // faster than clang's at all.
    let generic = shippable_best(recs, confirmed, policy)
        .filter(|t| worth(t, 1.0))
        .or_else(|| best_of(&Candidate::is_nvcc).filter(|t| worth(t, 1.0)));
    let floor = generic.and_then(|t| gain(t, confirmed)).unwrap_or(1.0);
    let best_of = |keep: &dyn Fn(&Candidate) -> bool| best_of(keep).filter(|t| worth(t, floor));
    let mut variants = Vec::new();
    if let Some(v) = best_of(&|c| policy.ships_guarded(c)) {
        variants.push(v);
        if v.candidate.specialize.is_some() {
            let bounds_only = |c: &Candidate| policy.ships_guarded(c) && c.specialize.is_none();
            variants.extend(best_of(&bounds_only));
        }
    }
    variants.retain(|v| pays_its_load(v, floor, confirmed, policy.run_ms));
    Shipment { generic, variants }
}

/// The gain over clang's -O3 code a candidate must show to ship (`min_speedup`, the policy's
/// line): a change of code must be worth it. nvcc's code is not a change to a user who builds
/// with nvcc, the baseline users compare with, so it ships wherever it is faster at all:
/// conv2d's nvcc code measured 1.018x, under the 1.02x line, and the program built with
/// clang's code then ran 2.2% behind nvcc's build (H200, 2026-11-30).
pub fn line_of(candidate: &Candidate, min_speedup: f64) -> f64 {
    if candidate.is_nvcc() {
        1.0
    } else {
        min_speedup.max(1.0)
    }
}

/// The most a search is hoped to gain by a variant over the code beside it, in deciding whether
/// variants are worth searching at all ([`variants_may_pay`]).
pub const VARIANT_HOPE: f64 = 2.0;

/// Whether a kernel that runs `run_ms` in a program run (the census's longest; None where no
/// census counts it) may gain by a variant what its first load costs: a variant twice as fast as
/// -O3 would have to save more than [`VARIANT_FIRST_LOAD_MS`]. Where it may not, apply would
/// withhold any variant a search finds ([`pays_its_load`]), and the search's trials of them, and
/// the deadline's prediction from them, would be for nothing.
pub fn variants_may_pay(run_ms: Option<f64>) -> bool {
    saves_its_load(run_ms, 1.0, VARIANT_HOPE)
}

/// Whether a variant at `speedup` over -O3, beside code at `floor` times -O3's speed, saves a
/// program run more than its first load costs ([`VARIANT_FIRST_LOAD_MS`]): the kernel's time in
/// a run as the code beside it runs it (`run_ms`, -O3's, over `floor`) times the part of it the
/// variant saves. Where the run's time is not known (no census), it may.
pub fn saves_its_load(run_ms: Option<f64>, floor: f64, speedup: f64) -> bool {
    run_ms.is_none_or(|ms| ms / floor * (1.0 - floor / speedup) > VARIANT_FIRST_LOAD_MS)
}

/// Whether variant `v`, `floor` times faster than -O3 being what runs where it does not, saves
/// a program run more than its first load costs ([`saves_its_load`], at its gain).
pub fn pays_its_load(
    v: &TrialRecord,
    floor: f64,
    confirmed: &[Confirmation],
    run_ms: Option<f64>,
) -> bool {
    gain(v, confirmed).is_none_or(|g| saves_its_load(run_ms, floor, g))
}

/// The trial apply would ship from a search: `pick_best` among the trials the policy ships.
pub fn shippable_best<'a>(
    recs: &'a [TrialRecord],
    confirmed: &[Confirmation],
    policy: &Policy,
) -> Option<&'a TrialRecord> {
    best_among(recs, confirmed, |r| policy.ships(&r.candidate))
}

/// `pick_best` among the trials `keep` takes, as the record in `recs`.
fn best_among<'a>(
    recs: &'a [TrialRecord],
    confirmed: &[Confirmation],
    keep: impl Fn(&TrialRecord) -> bool,
) -> Option<&'a TrialRecord> {
    let pool: Vec<TrialRecord> = recs.iter().filter(|r| keep(r)).cloned().collect();
    let trial = pick_best(&pool, confirmed)?.trial;
    recs.iter().find(|r| r.trial == trial)
}

/// The search of a kernel that apply and export use: the policy's GPU, else the most recent.
pub fn chosen_search(
    store: &Store,
    key: &TrialsKey,
    policy: &Policy,
) -> Result<Option<(PathBuf, Vec<TrialRecord>)>, StoreError> {
    Ok(store.searches(key)?.into_iter().find(|(_, recs)| {
        policy
            .gpu
            .as_ref()
            .is_none_or(|want| slug(&recs[0].gpu).contains(&slug(want)))
    }))
}

impl Store {
    /// The best valid trial of a kernel on a GPU, as `winner::pick_best` decides: what report and
    /// apply use.
    pub fn best_trial(
        &self,
        key: &TrialsKey,
        gpu: &str,
    ) -> Result<Option<TrialRecord>, StoreError> {
        let path = self.trials_path(key, gpu);
        let recs = self.trials(key, gpu)?;
        let confirmed = self.confirmations(&path)?;
        Ok(pick_best(&recs, &confirmed).cloned())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fixtures;
    use crate::outcome::Outcome;

    #[test]
    fn variants_are_searched_only_where_one_could_save_its_first_load() {
        assert!(variants_may_pay(None));
        assert!(variants_may_pay(Some(5.0)));
        // Half of 0.1 ms is under the 0.061 ms a first load costs.
        assert!(!variants_may_pay(Some(0.1)));
        assert!(variants_may_pay(Some(0.13)));
        assert!(!variants_may_pay(Some(0.0)));
    }

    #[test]
    fn rewrites_ship_where_the_environment_or_else_the_build_tree_asks() {
        use std::ffi::OsStr;
        let tree = crate::config::BuildConfig {
            apply_rewrites: true,
            ..Default::default()
        };
        assert!(!rewrites_asked(None, None));
        assert!(rewrites_asked(None, Some(&tree)));
        assert!(!rewrites_asked(None, Some(&Default::default())));
        assert!(rewrites_asked(Some(OsStr::new("1")), None));
        assert!(!rewrites_asked(Some(OsStr::new("0")), Some(&tree)));
        assert!(rewrites_asked(Some(OsStr::new("")), Some(&tree)));
    }

    #[test]
    fn a_best_that_does_not_hold_up_gives_way_to_the_baseline() {
        let rec =
            |trial: u32, us: f64| timed(trial, serde_json::json!({"pipeline": "default<O3>"}), us);
        let recs = vec![rec(0, 100.0), rec(1, 90.0), rec(2, 95.0)];
        assert_eq!(pick_best(&recs, &[]).unwrap().trial, 1);
        let confirm = confirmed;
        assert_eq!(pick_best(&recs, &[confirm(1, 92.0)]).unwrap().trial, 1);
        assert_eq!(pick_best(&recs, &[confirm(1, 101.0)]).unwrap().trial, 0);
        // A confirmation of another trial says nothing about this one, nor does it hide one.
        assert_eq!(
            pick_best(&recs, &[confirm(2, 90.0), confirm(1, 101.0)])
                .unwrap()
                .trial,
            0
        );
        // A confirmation of another trial says nothing about this one.
        assert_eq!(pick_best(&recs, &[confirm(2, 101.0)]).unwrap().trial, 1);
        // Faster on the searched launch, wrong on another recorded one: never the best.
        let check = |recording: &str, outcome| crate::trials::LaunchCheck {
            recording: recording.into(),
            outcome,
        };
        let mut elsewhere = confirm(1, 80.0);
        elsewhere.launches = vec![
            check("k/2", confirm(1, 85.0).outcome),
            check(
                "k/3",
                Outcome::WrongOutput {
                    message: "region 0 differs".into(),
                },
            ),
        ];
        assert_eq!(elsewhere.failed_launch().unwrap().recording, "k/3");
        assert_eq!(elsewhere.ratio(), None);
        assert_eq!(pick_best(&recs, &[elsewhere.clone()]).unwrap().trial, 0);
        elsewhere.launches.pop();
        assert_eq!(elsewhere.ratio(), Some(0.8));
        assert_eq!(pick_best(&recs, &[elsewhere]).unwrap().trial, 1);
    }

    #[test]
    fn a_candidate_the_screen_dropped_is_never_the_best_however_its_prefix_timed() {
        let rec =
            |trial: u32, us: f64| timed(trial, serde_json::json!({"pipeline": "default<O3>"}), us);
        let mut screened = rec(2, 0.0);
        screened.outcome = Outcome::Screened {
            time: fixtures::samples(10.0),
            baseline: fixtures::samples(100.0),
            fraction: 0.0625,
        };
        let recs = vec![rec(0, 100.0), rec(1, 90.0), screened];
        assert_eq!(recs[2].outcome.screened_ratio(), Some(0.1));
        assert_eq!(recs[2].ratio(), None, "no ratio on the whole launch");
        assert_eq!(pick_best(&recs, &[]).unwrap().trial, 1);
        // Serialized as the trials file keeps it, and read back.
        let line = serde_json::to_string(&recs[2].outcome).unwrap();
        assert!(line.contains(r#""status":"screened""#), "{line}");
        let back: Outcome = serde_json::from_str(&line).unwrap();
        assert_eq!(back, recs[2].outcome);
        assert!(back.to_string().starts_with("was screened out: 0.10× the baseline's time on the first 6.2% of the launch's blocks"), "{back}");
    }

    /// A re-measurement of `trial` at `us` microseconds against -O3's 100.
    pub(crate) fn confirmed(trial: u32, us: f64) -> Confirmation {
        fixtures::confirmation(trial, fixtures::valid(us, 100.0))
    }

    /// Trial `trial` of candidate `c` at `us` microseconds against -O3's 100.
    pub(crate) fn timed(trial: u32, c: serde_json::Value, us: f64) -> TrialRecord {
        let mut r = fixtures::trial("k", "g", trial, c, fixtures::valid(us, 100.0));
        r.ptx_hash = Some("h".into());
        r
    }

    #[test]
    fn nvccs_code_ships_wherever_it_is_faster_and_clangs_only_past_the_line() {
        let nvcc = serde_json::to_value(Candidate::nvcc()).unwrap();
        let o2 = serde_json::json!({"pipeline": "default<O2>"});
        let o3 = || timed(0, serde_json::json!({"pipeline": "default<O3>"}), 100.0);
        let policy = Policy::default();
        let ships = |recs: &[TrialRecord]| shipped(&shipment(recs, &[], &policy)).0;
        // 1.018x: nvcc's code ships, clang's does not.
        assert_eq!(ships(&[o3(), timed(1, nvcc.clone(), 98.2)]), Some(1));
        assert_eq!(ships(&[o3(), timed(1, o2.clone(), 98.2)]), None);
        // The best under the line is clang's: nvcc's, slower than it but faster than -O3, ships.
        let both = [
            o3(),
            timed(1, nvcc.clone(), 98.6),
            timed(2, o2.clone(), 98.2),
        ];
        assert_eq!(ships(&both), Some(1));
        // Past the line, the best ships, whichever compiler made it.
        let past = [o3(), timed(1, nvcc.clone(), 98.6), timed(2, o2, 90.0)];
        assert_eq!(ships(&past), Some(2));
        // nvcc's code no faster than clang's, or not confirmed faster: nothing ships.
        assert_eq!(ships(&[o3(), timed(1, nvcc.clone(), 100.0)]), None);
        let recs = [o3(), timed(1, nvcc, 98.2)];
        assert_eq!(
            shipped(&shipment(&recs, &[confirmed(1, 100.5)], &policy)).0,
            None
        );
    }

    #[test]
    fn a_best_confirmed_under_nvccs_code_gives_way_to_it() {
        let nvcc = serde_json::to_value(Candidate::nvcc()).unwrap();
        let o3 = timed(0, serde_json::json!({"pipeline": "default<O3>"}), 100.0);
        let o2 = timed(10, serde_json::json!({"pipeline": "default<O2>"}), 78.9);
        let recs = vec![o3, timed(1, nvcc, 79.4), o2];
        let best = |c: &[Confirmation]| pick_best(&recs, c).unwrap().trial;
        // Unconfirmed, the search's best.
        assert_eq!(best(&[]), 10);
        // Confirmed at 80.7, under nvcc's 79.4: nvcc's code, until its own confirmation.
        assert_eq!(best(&[confirmed(10, 80.7)]), 1);
        assert_eq!(best(&[confirmed(10, 80.7), confirmed(1, 80.0)]), 1);
        assert_eq!(best(&[confirmed(10, 80.7), confirmed(1, 83.0)]), 10);
        assert_eq!(best(&[confirmed(10, 80.7), confirmed(1, 101.0)]), 10);
        // Confirmed at nvcc's figure or better: it stands.
        assert_eq!(best(&[confirmed(10, 79.0)]), 10);
        // Not holding up at all: nvcc's code where it is faster than -O3, else -O3.
        assert_eq!(best(&[confirmed(10, 101.0)]), 1);
        assert_eq!(best(&[confirmed(10, 101.0), confirmed(1, 100.5)]), 0);
    }

    fn shipped(s: &Shipment) -> (Option<u32>, Vec<u32>) {
        (
            s.generic.map(|t| t.trial),
            s.variants.iter().map(|t| t.trial).collect(),
        )
    }

    #[test]
    fn a_variant_ships_only_where_its_program_runs_it_long_enough_to_pay_its_first_load() {
        use serde_json::json;
        let recs = vec![
            timed(0, json!({"pipeline": "default<O3>"}), 100.0),
            timed(1, json!({"pipeline": "default<O2>"}), 80.0),
            timed(
                2,
                json!({"pipeline": "default<O2>", "max_threads": 256}),
                50.0,
            ),
        ];
        let with = |run_ms| Policy {
            run_ms,
            ..Policy::default()
        };
        // The variant runs 50 against the generic 80: it saves 3/8 of the kernel's time. A
        // program that runs the kernel 0.1 ms a run at -O3 (0.08 ms as the generic code runs
        // it) saves 30 µs, less than the 61 µs its load costs; one that runs it 1 ms saves
        // 300 µs. Without a census, it ships.
        assert_eq!(
            shipped(&shipment(&recs, &[], &with(Some(0.1)))),
            (Some(1), vec![])
        );
        assert_eq!(
            shipped(&shipment(&recs, &[], &with(Some(1.0)))),
            (Some(1), vec![2])
        );
        assert_eq!(
            shipped(&shipment(&recs, &[], &with(None))),
            (Some(1), vec![2])
        );
    }

    /// The program-level veto for one variant: a time-only run of an applied build measured the
    /// variant's code slower than the recorded build, so the next build leaves that variant out
    /// and keeps the generic code, which the program did not find slower.
    #[test]
    fn a_variant_a_program_ran_slower_is_withheld_and_the_generic_code_still_ships() {
        use crate::trials::{Against, InProgram};
        use serde_json::json;
        let recs = vec![
            timed(0, json!({"pipeline": "default<O3>"}), 100.0),
            timed(1, json!({"pipeline": "default<O2>"}), 80.0),
            timed(
                2,
                json!({"pipeline": "default<O2>", "max_threads": 256}),
                50.0,
            ),
        ];
        let policy = Policy::default();
        assert_eq!(shipped(&shipment(&recs, &[], &policy)), (Some(1), vec![2]));
        let mut slower = crate::fixtures::confirmation(2, crate::fixtures::valid(50.0, 100.0));
        slower.in_program.push(InProgram {
            program: "app".into(),
            binary: "app".into(),
            against: Against::TimeOnly,
            recorded_ms: 1.0,
            applied_ms: 1.2,
            launches: 3,
            unix_s: 0.0,
        });
        assert_eq!(
            shipped(&shipment(&recs, &[slower], &policy)),
            (Some(1), vec![])
        );
    }

    #[test]
    fn the_generic_code_runs_everywhere_and_variants_ship_behind_their_guards() {
        use serde_json::json;
        let plain = json!({"pipeline": "default<O2>"});
        let bounds = json!({"pipeline": "default<O2>", "max_threads": 256});
        let spec = json!({"pipeline": "default<O2>", "max_threads": 256,
            "specialize": {"args": [{"index": 2, "hex": "00040000"}]}});
        let block = json!({"pipeline": "default<O2>", "block_x": 128});
        let o3 = || timed(0, json!({"pipeline": "default<O3>"}), 100.0);
        let recs = vec![
            o3(),
            timed(1, plain.clone(), 80.0),
            timed(2, bounds.clone(), 50.0),
            timed(3, spec.clone(), 30.0),
            timed(4, block.clone(), 10.0),
        ];
        let default = Policy::default();
        // The kernel was tuned as block-size agnostic (it has a block-size trial): its fastest,
        // another block size, ships behind its guard, beside the best every launch may run.
        assert_eq!(shipped(&shipment(&recs, &[], &default)), (Some(1), vec![4]));
        // Block sizes withheld: the specialized variant first, launch bounds alone for the
        // launches with other values.
        let no_blocks = Policy {
            block_size: BlockSizeOptIn::None,
            ..Policy::default()
        };
        assert_eq!(
            shipped(&shipment(&recs, &[], &no_blocks)),
            (Some(1), vec![3, 2])
        );
        // A build may keep block sizes to the kernels it names.
        let named = Policy {
            block_size: BlockSizeOptIn::parse("scale, other_kernel"),
            ..Policy::default()
        };
        assert_eq!(
            shipped(&shipment(
                &recs,
                &[],
                &named.for_kernel(&["_Z5scalev", "scale"])
            )),
            (Some(1), vec![4])
        );
        assert_eq!(
            shipped(&shipment(
                &recs,
                &[],
                &named.for_kernel(&["_Z4axpyv", "axpy"])
            )),
            (Some(1), vec![3, 2])
        );
        assert_eq!(BlockSizeOptIn::parse(" 0 "), BlockSizeOptIn::None);
        assert_eq!(BlockSizeOptIn::parse(""), BlockSizeOptIn::All);
        // Dispatch off: the generic code alone, as before variants.
        let off = Policy {
            dispatch: false,
            ..Policy::default()
        };
        assert_eq!(shipped(&shipment(&recs, &[], &off)), (Some(1), vec![]));
        // Launch bounds opted into, unguarded: they are the generic code.
        let unguarded = Policy {
            launch_bounds: true,
            dispatch: false,
            ..Policy::default()
        };
        assert_eq!(
            shipped(&shipment(&recs, &[], &unguarded)),
            (Some(2), vec![])
        );
        // A variant must beat the generic code by min_speedup: 80 against 79 does not.
        let close = vec![
            o3(),
            timed(1, plain.clone(), 80.0),
            timed(2, bounds.clone(), 79.0),
        ];
        assert_eq!(shipped(&shipment(&close, &[], &default)), (Some(1), vec![]));
        // Nothing faster that every launch may run: clang's code is the generic code.
        let only_guarded = vec![o3(), timed(1, bounds, 50.0)];
        assert_eq!(
            shipped(&shipment(&only_guarded, &[], &default)),
            (None, vec![1])
        );
        // A variant whose re-measurement did not hold up does not ship.
        let failed = Confirmation {
            format: 1,
            trial: 3,
            outcome: Outcome::WrongOutput {
                message: "on k/2".into(),
            },
            finished_unix_ms: 0,
            launches: Vec::new(),
            context_ratios: Vec::new(),
            in_program: Vec::new(),
            unconfirmed: None,
        };
        assert_eq!(
            shipped(&shipment(&recs, &[failed], &no_blocks)),
            (Some(1), vec![])
        );
    }
}
