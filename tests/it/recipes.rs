//! The shipped recipes (passes/recipes.toml): each is a point of the grid, each recipe with
//! preconditions finds a corpus kernel that shows them and changes its code, and a cold search
//! measures the recipes right after the baseline — those whose preconditions the kernel meets
//! first — records them, resumes with them, and never lets a time limit cut them.

use crate::support::{r3_bin, repo};
use r3::candidate::Candidate;
use r3::kernel::TrialsKey;
use r3::lower::{to_ptx, Codegen};
use r3::passes::catalog::Catalog;
use r3::ptx::cfg::traits as ptx_traits;
use r3::remix::recipes;
use r3::remix::sim::{synthetic, Family, Simulator};
use r3::remix::space::{Space, SpaceOptions};
use r3::remix::tune::{tune_in_store, TuneOptions};
use r3::store::Store;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

#[test]
fn every_recipe_is_a_grid_point_and_conditional_ones_change_a_kernel_that_shows_their_traits() {
    let cat = Catalog::builtin().unwrap();
    let all = recipes::builtin(&cat).unwrap();
    let grid = Space::builtin(SpaceOptions {
        launch_threads: Some(256),
        fast_math: true,
        grid: true,
        ..Default::default()
    })
    .unwrap();
    for r in &all {
        // A grid has no LLVM options: there a recipe is its point without them.
        let c = r.candidate(Some(256)).unwrap();
        let point = Candidate {
            llvm_options: Default::default(),
            ..c
        };
        assert_eq!(
            grid.adopt(&point),
            Some(point.clone()),
            "recipe {}",
            r.spec.name
        );
    }
    let store = Store::open(&repo().join("llvm-ir-corpus/store")).unwrap();
    let ctx = inkwell::context::Context::create();
    let mut shown = std::collections::BTreeMap::<String, Vec<String>>::new();
    for k in store.kernels().unwrap() {
        let bitcode = store.kernel_bitcode(&k.hash).unwrap();
        let m = r3::ir::load_bytes(&ctx, &bitcode, &k.hash).unwrap();
        let base = to_ptx(&m.clone(), "default<O3>", &Codegen::default()).unwrap();
        let traits: Vec<String> = ptx_traits(&base).into_iter().map(String::from).collect();
        for r in all
            .iter()
            .filter(|r| !r.spec.when.is_empty() && r.applies(&traits))
        {
            if recipe_ptx(r, &bitcode, &k.hash) != base {
                shown
                    .entry(r.spec.name.clone())
                    .or_default()
                    .push(k.signature.name.clone());
            }
        }
    }
    for r in all.iter().filter(|r| !r.spec.when.is_empty()) {
        assert!(
            shown.contains_key(&r.spec.name),
            "recipe {} finds no corpus kernel that shows {:?} and whose code it changes",
            r.spec.name,
            r.spec.when
        );
    }
    // The motivating pattern: an accumulator through a pointer argument that may
    // alias the matrix (atax's `tmp[i] += A[i*n+j] * x[j]`), and its column sweeps
    // (`y[j] += A[i*n+j] * tmp[i]` over i).
    let versioned = &shown["versioned-licm"];
    for kernel in [
        "atax_ax_kernel",
        "gesummv_kernel",
        "atax_aty_kernel",
        "trmm_kernel",
    ] {
        assert!(
            versioned.iter().any(|k| k.contains(kernel)),
            "versioned-licm leaves {kernel} unchanged; it changes {versioned:?}"
        );
    }
}

/// A recipe's PTX for a kernel; lowered in an r3 process of its own when it sets LLVM
/// options (they are process-wide, and the tests share this process).
fn recipe_ptx(r: &recipes::Recipe, bitcode: &[u8], hash: &str) -> String {
    let c = r.candidate(Some(256)).unwrap();
    if c.llvm_options.is_empty() {
        let ctx = inkwell::context::Context::create();
        let m = r3::ir::load_bytes(&ctx, bitcode, hash).unwrap();
        return r3::lower::lower_candidate(&m, &c, &Codegen::default(), |_| {})
            .unwrap()
            .ptx;
    }
    lower_with_options(bitcode, hash, &c)
}

fn lower_with_options(bitcode: &[u8], hash: &str, c: &Candidate) -> String {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), bitcode).unwrap();
    let job = r3::lower::isolated::LowerJob {
        bitcode: file.path().to_owned(),
        kernel_hash: hash.into(),
        candidate: c.clone(),
        target: Codegen::default(),
        mutation: None,
    };
    r3::lower::isolated::lower_isolated_with(&r3_bin(), &job)
        .unwrap_or_else(|o| panic!("{hash}: {o:?}"))
        .ptx
}

/// Loops of a PTX text (a label and a later branch back to it) whose body stores nothing to
/// global memory.
fn store_free_loops(ptx: &str) -> usize {
    let lines: Vec<&str> = ptx.lines().map(str::trim).collect();
    let mut n = 0;
    for (i, l) in lines.iter().enumerate() {
        let Some(label) = l.strip_prefix("$L__").and_then(|r| r.split(':').next()) else {
            continue;
        };
        let back = format!("bra.uni \t$L__{label};");
        let back2 = format!("bra \t$L__{label};");
        let Some(end) = lines[i + 1..]
            .iter()
            .position(|x| x.ends_with(&back) || x.ends_with(&back2))
        else {
            continue;
        };
        let body = &lines[i + 1..i + 1 + end];
        if body.iter().any(|x| x.starts_with("ld.global"))
            && !body.iter().any(|x| x.starts_with("st.global"))
        {
            n += 1;
        }
    }
    n
}

/// A column sweep whose accumulator is in global memory (`y[j] += A[i*n + j] * tmp[i]` over
/// i, n known only at run time): loop access analysis would version the loop on n == 1, so the
/// register-accumulating copy would never run on a real matrix. Without that assumption (the
/// versioned-LICM recipes' option) the alias check alone guards a loop that stores nothing.
#[test]
fn versioned_licm_recipes_give_column_sweeps_a_loop_without_stores() {
    let store = Store::open(&repo().join("llvm-ir-corpus/store")).unwrap();
    let cat = Catalog::builtin().unwrap();
    let all = recipes::builtin(&cat).unwrap();
    let recipe = all
        .iter()
        .find(|r| r.spec.name == "versioned-licm")
        .unwrap();
    let with = recipe.candidate(None).unwrap();
    assert_eq!(
        with.llvm_options
            .get("laa-speculate-unit-stride")
            .map(String::as_str),
        Some("false")
    );
    let without = Candidate {
        llvm_options: Default::default(),
        ..with.clone()
    };
    let sweeps = ["atax_aty_kernel", "bicg_s_kernel", "trmm_kernel"];
    for name in sweeps {
        let k = store
            .kernels()
            .unwrap()
            .into_iter()
            .find(|k| k.signature.name.contains(name))
            .unwrap();
        let bitcode = store.kernel_bitcode(&k.hash).unwrap();
        let ctx = inkwell::context::Context::create();
        let m = r3::ir::load_bytes(&ctx, &bitcode, &k.hash).unwrap();
        let o3 = to_ptx(&m, "default<O3>", &Codegen::default()).unwrap();
        assert_eq!(
            store_free_loops(&o3),
            0,
            "{name} at -O3 stores in every loop"
        );
        let speculated = lower_with_options(&bitcode, &k.hash, &without);
        let fast = lower_with_options(&bitcode, &k.hash, &with);
        assert_ne!(fast, speculated, "{name}: the option changes nothing");
        assert!(store_free_loops(&fast) >= 1, "{name}:\n{fast}");
        // The speculated version guards its fast loop with a test of the stride against 1.
        assert!(
            stride_one_tests(&speculated) > stride_one_tests(&fast),
            "{name}:\n{speculated}"
        );
    }
}

/// `setp.ne` comparisons of a register against 1: the stride tests of a loop versioned on a
/// unit stride.
fn stride_one_tests(ptx: &str) -> usize {
    ptx.lines()
        .filter(|l| l.trim_start().starts_with("setp.ne.") && l.trim_end().ends_with(", 1;"))
        .count()
}

fn opts(kernel: &str, budget: u32) -> TuneOptions {
    TuneOptions {
        kernel: kernel.into(),
        strategy: "bo".into(),
        seed: 7,
        budget,
        time: None,
        limit: None,
        batch: 1,
        transfer: true,
        recipes: true,
        race: false,
    }
}

/// A synthetic landscape of a kernel whose -O3 code shows the versioned-LICM recipes' traits,
/// its outputs checked against a tolerance (so fast-math recipes are offered too).
fn pointer_accumulating() -> r3::remix::sim::Landscape {
    let mut l = synthetic(Family::Knobs, 2);
    l.space.fast_math = true;
    l.traits = vec!["loop".into(), "loop-invariant-store".into()];
    l
}

#[test]
fn a_cold_search_measures_the_matched_recipes_first_and_resumes_with_the_recorded_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path()).unwrap();
    let l = pointer_accumulating();
    let space = Space::builtin(l.space.clone()).unwrap();
    let all = recipes::builtin(&space.catalog).unwrap();
    let picks = recipes::pick(&all, &space, &l.traits);
    assert!(picks[0].matched, "{:?}", picks[0].name);
    let never = AtomicBool::new(false);
    let mut sim = Simulator::new(l.clone());
    let o = opts("k", 6);
    let (s, _) = tune_in_store(&store, &mut sim, &space, &o, false, &never, |_| {}).unwrap();
    let gpu = "simulated: synthetic";
    let trials = store.trials(&TrialsKey::from("k"), gpu).unwrap();
    let asked: Vec<&Candidate> = trials.iter().map(|t| &t.candidate).collect();
    for (i, p) in picks.iter().take(5).enumerate() {
        assert_eq!(
            asked[i + 1],
            &p.candidate,
            "trial {} is recipe {}",
            i + 1,
            p.name
        );
    }
    assert_eq!(s.recipes[0], format!("{}*", picks[0].name));
    let recorded = store
        .transfer_sources(&TrialsKey::from("k"), gpu)
        .unwrap()
        .unwrap();
    assert_eq!(recorded.recipes, picks);
    assert_eq!(recorded.traits, l.traits);

    // Resumed with other traits, the search still asks what was recorded.
    let mut other = l.clone();
    other.traits.clear();
    let mut sim = Simulator::new(other);
    let more = TuneOptions {
        budget: 12,
        ..o.clone()
    };
    tune_in_store(&store, &mut sim, &space, &more, true, &never, |_| {}).unwrap();
    assert_eq!(store.trials(&TrialsKey::from("k"), gpu).unwrap().len(), 12);

    // --no-recipes: none measured, none recorded.
    let plain = TuneOptions {
        kernel: "plain".into(),
        recipes: false,
        ..o
    };
    let mut sim = Simulator::new(l);
    let (s, _) = tune_in_store(&store, &mut sim, &space, &plain, false, &never, |_| {}).unwrap();
    assert!(s.recipes.is_empty());
    let recorded = store
        .transfer_sources(&TrialsKey::from("plain"), gpu)
        .unwrap()
        .unwrap();
    assert!(recorded.recipes.is_empty());
}

#[test]
fn a_time_limit_never_cuts_the_warm_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::create(dir.path()).unwrap();
    let l = pointer_accumulating();
    let space = Space::builtin(l.space.clone()).unwrap();
    let never = AtomicBool::new(false);
    let mut sim = Simulator::new(l);
    let o = TuneOptions {
        time: Some(Duration::ZERO),
        ..opts("k", 50)
    };
    let (s, _) = tune_in_store(&store, &mut sim, &space, &o, false, &never, |_| {}).unwrap();
    assert!(s.warm_start >= 2, "{}", s.warm_start);
    assert_eq!(s.trials, 1 + s.warm_start);
    assert_eq!(s.stop, r3::remix::tune::Stop::Time);
    // The report says the search was cut short, and what it started from.
    let opts = r3::report::tuning::ReportOptions {
        kernels: Vec::new(),
        ptxas: None,
        code: false,
    };
    let report = r3::report::tuning::build(&store, &opts).unwrap();
    let note = &report.kernels[0].search;
    assert_eq!(note.stop.as_deref(), Some("time"));
    assert_eq!(note.budget, Some(50));
    assert!(note.recipes[0].ends_with('*'), "{:?}", note.recipes);
    let md = r3::report::render::render(&report, r3::report::render::Format::Markdown);
    assert!(
        md.contains(&format!(
            "cut short by --time after {} of 50 trials",
            s.trials
        )),
        "{md}"
    );
}
