//! Learns r3's shipped recipes from complete grid landscapes (the corpus's, recorded by
//! scripts/gpu-landscapes) and writes them after the "learned" line of passes/recipes.toml:
//! the fewest grid points, at most K, such that every landscape has one within 2% of its best
//! among them (`remix::recipes::learn`).
//!
//!   learn_recipes [--k K] [--write passes/recipes.toml] TABLE.json...
//!
//! Without --write it prints the recipes. Leave-one-out evidence that they generalize is
//! `scripts/bench-strategies --prior` (each landscape searched with recipes learned from the
//! others only).

use r3::remix::recipes;
use r3::remix::sim::Landscape;

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut k, mut write, mut tables) = (4usize, None, Vec::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--k" => k = args.next().expect("--k N").parse().expect("--k N"),
            "--write" => write = args.next(),
            t => tables.push(
                Landscape::load(std::path::Path::new(t)).unwrap_or_else(|e| {
                    eprintln!("learn_recipes: {e}");
                    std::process::exit(2)
                }),
            ),
        }
    }
    let learned = recipes::learn(&tables, k).unwrap_or_else(|e| {
        eprintln!("learn_recipes: {e}");
        std::process::exit(1)
    });
    for r in &learned {
        eprintln!(
            "{}: {} cg{} maxntid={:?} minctasm={:?} fast={}: {}",
            r.name,
            r.variant,
            r.codegen_opt,
            r.max_threads,
            r.min_blocks_per_sm,
            r.fast_math,
            r.why
        );
    }
    if let Some(path) = write {
        let text = std::fs::read_to_string(&path).expect("read the recipes file");
        let new = recipes::with_learned(&text, &learned).unwrap_or_else(|e| {
            eprintln!("learn_recipes: {e}");
            std::process::exit(1)
        });
        std::fs::write(&path, new).expect("write the recipes file");
        eprintln!("wrote {} learned recipes to {path}", learned.len());
    }
}
