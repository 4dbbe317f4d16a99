//! Strategy benchmark (run by scripts/bench-strategies): over landscape tables, the median
//! number of trials each strategy needs to reach 98% of the best known time, over seeds.
//!
//!   bench_strategies [--seeds N] [--budget N] [--strategies a,b] [--write-synthetic DIR]
//!                    [TABLE.json...]
//!
//! Without tables it uses the built-in synthetic landscapes (2 families x 3 generator seeds).

use r3::remix::sim::{synthetic, Family, Landscape};
use r3::remix::tune::trials_to_reach;

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut seeds, mut budget, mut tables, mut write) = (10u64, 200u32, Vec::new(), None);
    let mut strategies: Vec<String> = ["bo", "random", "evolution", "local"]
        .map(String::from)
        .to_vec();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seeds" => seeds = args.next().unwrap().parse().unwrap(),
            "--budget" => budget = args.next().unwrap().parse().unwrap(),
            "--write-synthetic" => write = args.next(),
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
    println!("median trials to reach 98% of the best known time ({seeds} seeds, budget {budget}; >B: not reached in the budget by the median run; hits = runs that reached it)\n");
    print!("{:<24}", "landscape");
    for s in &strategies {
        print!(" {s:>16}");
    }
    println!();
    for l in &tables {
        print!("{:<24}", l.kernel);
        for s in &strategies {
            let mut v: Vec<u32> = (0..seeds)
                .map(|seed| {
                    trials_to_reach(l, s, seed, budget, 0.98)
                        .unwrap()
                        .unwrap_or(u32::MAX)
                })
                .collect();
            v.sort();
            let hits = v.iter().filter(|&&x| x != u32::MAX).count();
            let med = v[v.len() / 2];
            let m = if med == u32::MAX {
                format!(">{budget}")
            } else {
                med.to_string()
            };
            print!(" {:>16}", format!("{m} ({hits}/{seeds})"));
        }
        println!();
    }
}
