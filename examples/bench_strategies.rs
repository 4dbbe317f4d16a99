//! Strategy benchmark (run by scripts/bench-strategies): over landscape tables, the median
//! number of trials each strategy needs to reach 98% (`--target F`) of the best known time,
//! over seeds; then, per strategy, the geomean over the landscapes of the speedup over -O3 a
//! search holds at the end of the budget (median seed), beside the geomean of the best known.
//!
//!   bench_strategies [--seeds N] [--budget N] [--strategies a,b] [--transfer] [--prior]
//!                    [--target F] [--transfer-from TABLE.json]... [--write-synthetic DIR]
//!                    [TABLE.json...]
//!
//! Without tables it uses the built-in synthetic landscapes (2 families x 3 generator seeds).
//! `--transfer` adds the column `bo+transfer`: bo learning from earlier searches of the
//! *other* landscapes (leave-one-out), each searched beforehand by plain bo with a budget of
//! 100 (seed 1000), as `r3 tune` would have left them in a store. `--transfer-from` (repeated)
//! names the landscapes those earlier searches ran on instead, all of them used for every
//! target: e.g. every kernel on another GPU, the same kernel included (re-tuning for a new GPU).
//! `--prior` adds `bo+prior`: bo from a cold store with r3's shipped recipes, the learned ones
//! learned leave-one-out (from every landscape but the target's), chosen by the target's
//! traits when its table has them.

use r3::remix::recipes;
use r3::remix::sim::{synthetic, Family, Landscape, Simulator};
use r3::remix::space::Space;
use r3::remix::transfer::{Source, Transfer};
use r3::remix::tune::{simulated_search, tune, TuneOptions};

const SOURCE_BUDGET: u32 = 100;
const SOURCE_SEED: u64 = 1000;
/// Learned recipes in a leave-one-out prior, at most (examples/learn_recipes.rs's default).
const LEARNED: usize = 4;

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut seeds, mut budget, mut tables, mut write) = (10u64, 200u32, Vec::new(), None);
    let mut with_transfer = false;
    let (mut with_prior, mut fraction) = (false, 0.98f64);
    let mut from: Vec<Landscape> = Vec::new();
    let mut strategies: Vec<String> = ["bo", "random", "evolution", "local"]
        .map(String::from)
        .to_vec();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seeds" => seeds = args.next().unwrap().parse().unwrap(),
            "--budget" => budget = args.next().unwrap().parse().unwrap(),
            "--write-synthetic" => write = args.next(),
            "--transfer" => with_transfer = true,
            "--prior" => with_prior = true,
            "--target" => fraction = args.next().unwrap().parse().unwrap(),
            "--transfer-from" => {
                with_transfer = true;
                let t = args.next().unwrap();
                from.push(Landscape::load(std::path::Path::new(&t)).unwrap());
            }
            "--strategies" => {
                strategies = args.next().unwrap().split(',').map(String::from).collect()
            }
            t => tables.push(Landscape::load(std::path::Path::new(t)).unwrap()),
        }
    }
    if tables.is_empty() {
        for fam in [Family::Knobs, Family::Sparse] {
            for s in 0..3 {
                tables.push(synthetic(fam, s));
            }
        }
    }
    if let Some(dir) = write {
        std::fs::create_dir_all(&dir).unwrap();
        for l in &tables {
            let p = format!("{dir}/{}.json", l.kernel);
            std::fs::write(&p, serde_json::to_string_pretty(l).unwrap()).unwrap();
            eprintln!("wrote {p}");
        }
        return;
    }
    let sources = if from.is_empty() { &tables } else { &from };
    let earlier: Vec<Vec<(r3::candidate::Candidate, Option<f64>)>> = if with_transfer {
        strategies.push("bo+transfer".into());
        sources.iter().map(earlier_search).collect()
    } else {
        Vec::new()
    };
    if with_prior {
        strategies.push("bo+prior".into());
    }
    let pct = (fraction * 100.0).round();
    println!("median trials to reach {pct}% of the best known time ({seeds} seeds, budget {budget}; >B: not reached in the budget by the median run; hits = runs that reached it)\n");
    print!("{:<24}", "landscape");
    for s in &strategies {
        print!(" {s:>16}");
    }
    println!();
    let mut sums = vec![0u64; strategies.len()];
    // Per strategy, the sum over landscapes of ln(median speedup at the end of the budget).
    let mut final_logs = vec![0f64; strategies.len()];
    let mut known_logs = 0f64;
    for (t, l) in tables.iter().enumerate() {
        print!("{:<24}", l.kernel);
        let transfer = with_transfer.then(|| match from.is_empty() {
            true => learn_from(&tables, &earlier, l, Some(t)),
            false => learn_from(&from, &earlier, l, None),
        });
        let prior = with_prior.then(|| prior_for(&tables, l, t));
        for (k, s) in strategies.iter().enumerate() {
            let (name, tr) = if let Some(base) = s.strip_suffix("+transfer") {
                (base, transfer.as_ref())
            } else if let Some(base) = s.strip_suffix("+prior") {
                (base, prior.as_ref())
            } else {
                (s.as_str(), None)
            };
            let runs = over_seeds(seeds, |seed| {
                simulated_search(l, name, seed, budget, fraction, tr).unwrap()
            });
            let mut v: Vec<u32> = runs
                .iter()
                .map(|r| r.reached_at.unwrap_or(u32::MAX))
                .collect();
            v.sort();
            let mut ends: Vec<f64> = runs.iter().map(|r| r.best.unwrap_or(1.0)).collect();
            ends.sort_by(f64::total_cmp);
            final_logs[k] -= ends[ends.len() / 2].ln();
            let hits = v.iter().filter(|&&x| x != u32::MAX).count();
            let med = v[v.len() / 2];
            sums[k] += u64::from(med.min(budget + 1));
            let m = if med == u32::MAX {
                format!(">{budget}")
            } else {
                med.to_string()
            };
            print!(" {:>16}", format!("{m} ({hits}/{seeds})"));
        }
        known_logs -= l.best_known().unwrap_or(1.0).ln();
        println!();
    }
    print!("{:<24}", "sum of medians");
    for s in &sums {
        print!(" {s:>16}");
    }
    println!();
    // What a user keeps: the speedup over -O3 at the end of the budget (median seed), as a
    // geomean over the landscapes, against the best the landscapes know.
    let n = tables.len().max(1) as f64;
    print!("{:<24}", format!("geomean after {budget}"));
    for l in &final_logs {
        print!(" {:>16}", format!("{:.3}x", (l / n).exp()));
    }
    println!(
        "\n{:<24} {:>16}",
        "geomean best known",
        format!("{:.3}x", (known_logs / n).exp())
    );
}

/// `run` for every seed, on all cores.
fn over_seeds<T: Send>(seeds: u64, run: impl Fn(u64) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let run = &run;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    (t..seeds)
                        .step_by(threads as usize)
                        .map(run)
                        .collect::<Vec<T>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    })
}

/// The trials plain bo leaves in a store after searching a landscape.
fn earlier_search(l: &Landscape) -> Vec<(r3::candidate::Candidate, Option<f64>)> {
    let dir = tempfile::tempdir().unwrap();
    let store = r3::store::Store::create(dir.path()).unwrap();
    let space = Space::builtin(l.space.clone()).unwrap();
    let key = r3::kernel::TrialsKey::from(l.kernel.as_str());
    let mut log = store.open_trials(&key, &l.gpu).unwrap();
    let opts = TuneOptions {
        kernel: key.clone(),
        strategy: "bo".into(),
        seed: SOURCE_SEED,
        budget: SOURCE_BUDGET,
        time: None,
        limit: None,
        batch: 1,
        transfer: false,
        recipes: false,
        race: false,
    };
    let never = std::sync::atomic::AtomicBool::new(false);
    let mut sim = Simulator::new(l.clone());
    tune(
        &mut sim,
        &space,
        &opts,
        Vec::new(),
        Some(&mut log),
        &never,
        |_| {},
    )
    .unwrap();
    store
        .trials(&key, &l.gpu)
        .unwrap()
        .into_iter()
        .map(|r| (r.candidate.clone(), r.ratio()))
        .collect()
}

/// What a search of `target` learns from: the earlier searches of `sources`, but for `skip`.
fn learn_from(
    sources: &[Landscape],
    earlier: &[Vec<(r3::candidate::Candidate, Option<f64>)>],
    target: &Landscape,
    skip: Option<usize>,
) -> Transfer {
    let space = Space::builtin(target.space.clone()).unwrap();
    Transfer {
        sources: (0..sources.len())
            .filter(|&s| Some(s) != skip)
            .filter_map(|s| {
                let source = Source::new(&sources[s].kernel, &earlier[s], &space)?;
                Some(source.of_same_kernel(sources[s].kernel == target.kernel))
            })
            .collect(),
        ..Default::default()
    }
}

/// The shipped prior as a cold search of `target` would have it, learned leave-one-out: the
/// hand-written recipes, and recipes learned from every landscape but the target's (`skip`).
fn prior_for(tables: &[Landscape], target: &Landscape, skip: usize) -> Transfer {
    let space = Space::builtin(target.space.clone()).unwrap();
    let others: Vec<Landscape> = (0..tables.len())
        .filter(|&i| i != skip && tables[i].kernel != target.kernel)
        .map(|i| tables[i].clone())
        .collect();
    let mut specs: Vec<_> = recipes::builtin(&space.catalog)
        .unwrap()
        .into_iter()
        .filter(|r| r.spec.origin == "hand")
        .map(|r| r.spec)
        .collect();
    specs.extend(recipes::learn(&others, LEARNED).unwrap());
    let all = recipes::check(specs, &space.catalog).unwrap();
    Transfer {
        recipes: recipes::pick(&all, &space, &target.traits),
        ..Default::default()
    }
}
