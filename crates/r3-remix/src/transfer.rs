//! Learning from earlier searches. A store that has tuned other kernels on this GPU, or this
//! kernel on another GPU, knows which configurations tend to win; a new search measures a few
//! of those first instead of starting from nothing (warm-starting with a portfolio, as
//! auto-sklearn does for hyperparameter search).
//!
//! The *portfolio* is, first, the best of each earlier search of this same kernel (on other
//! GPUs: the closest evidence there is), then the fewest configurations such that every source
//! has one of its winners — within 2% of its best — among them, chosen greedily by how many
//! sources each covers; at most a handful in all. The `bo` strategy measures it right after
//! the baseline, then searches as it would without it: when the kernel resembles an earlier
//! one, the portfolio finds what won there in a trial or two; when it resembles none, it costs
//! those few trials. What is used is recorded (`<gpu>.transfer.json`) so that `--resume` asks
//! the same candidates.

use super::space::Space;
use crate::candidate::Candidate;
use crate::kernel::TrialsKey;
use crate::store::trials::{RecipePick, TransferSource, TransferSources, FORMAT};
use crate::store::{Store, StoreError};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

/// At most this many earlier searches are used, and of each at most `MAX_TRIALS` trials (its
/// `KEEP_BEST` best, then the earliest others): a store of many large searches stays cheap to
/// read and to choose a portfolio from.
pub const MAX_SOURCES: usize = 16;
const MAX_TRIALS: usize = 96;
const KEEP_BEST: usize = 32;
/// A source needs this many valid trials to say anything.
const MIN_VALID: usize = 5;
/// A configuration within this fraction of a source's best counts as one of its winners.
const NEAR_BEST: f64 = 0.98;

/// One earlier search: its candidates as points of this search's space, with time over
/// baseline (None: failed).
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub name: String,
    pub trials: Vec<(Candidate, Option<f64>)>,
    /// The same kernel, searched on another GPU: the closest evidence there is, so its best
    /// leads the portfolio.
    pub same_kernel: bool,
    /// Another kernel of the same loop shape ([`shape_of`]): its best comes next.
    pub similar: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transfer {
    pub sources: Vec<Source>,
    /// The shipped recipes chosen for this kernel (`remix::recipes::pick`), in order.
    pub recipes: Vec<RecipePick>,
}

/// The most candidates a warm start puts before the search's own design.
pub const MAX_WARM_START: usize = 8;

/// A stored kernel's loop shape (`ir::shape`), computed once a process; None where its module
/// does not read (a simulated landscape's name, a damaged entry).
pub fn shape_of(store: &Store, kernel: &TrialsKey) -> Option<String> {
    use std::sync::{Mutex, OnceLock};
    static SHAPES: OnceLock<Mutex<HashMap<PathBuf, Option<String>>>> = OnceLock::new();
    let path = store.kernel_dir(&kernel.kernel_hash()?).join("module.bc");
    let shapes = SHAPES.get_or_init(Default::default);
    if let Some(known) = shapes.lock().ok()?.get(&path) {
        return known.clone();
    }
    let shape = std::fs::read(&path)
        .ok()
        .and_then(|bc| r3_ir::shape::of_bitcode(&bc));
    shapes.lock().ok()?.insert(path, shape.clone());
    shape
}

#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{path} (kernel {kernel} on {gpu}) now holds {have} trials, fewer than the {want} this search learned from; fix: restore that file, or start the search over")]
    Shrunk {
        path: PathBuf,
        kernel: TrialsKey,
        gpu: String,
        want: usize,
        have: usize,
    },
}

impl Source {
    /// A source from an earlier search's trials, in trial order, adopted into `space`; None
    /// when too few of them are valid there.
    pub fn new(name: &str, trials: &[(Candidate, Option<f64>)], space: &Space) -> Option<Source> {
        let mut seen = HashSet::new();
        let adopted: Vec<(Candidate, Option<f64>)> = trials
            .iter()
            .filter_map(|(c, r)| Some((space.adopt(c)?, *r)))
            .filter(|(c, _)| seen.insert(c.clone()))
            .collect();
        if adopted.iter().filter(|(_, r)| r.is_some()).count() < MIN_VALID {
            return None;
        }
        let mut by_ratio: Vec<usize> = (0..adopted.len())
            .filter(|&i| adopted[i].1.is_some())
            .collect();
        by_ratio.sort_by(|&a, &b| adopted[a].1.unwrap().total_cmp(&adopted[b].1.unwrap()));
        let mut keep: HashSet<usize> = by_ratio.into_iter().take(KEEP_BEST).collect();
        for i in 0..adopted.len() {
            if keep.len() >= MAX_TRIALS {
                break;
            }
            keep.insert(i);
        }
        Some(Source {
            name: name.into(),
            trials: (0..adopted.len())
                .filter(|i| keep.contains(i))
                .map(|i| adopted[i].clone())
                .collect(),
            same_kernel: false,
            similar: false,
        })
    }

    /// Marks a source as a search of the same kernel (on another GPU).
    pub fn of_same_kernel(self, same: bool) -> Source {
        Source {
            same_kernel: same,
            ..self
        }
    }

    /// The valid candidate with the lowest ratio.
    fn best(&self) -> Option<&Candidate> {
        self.trials
            .iter()
            .filter_map(|(c, r)| r.map(|r| (c, r)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(c, _)| c)
    }

    /// Whether `c` is among this source's winners (within 2% of its best).
    pub fn is_winner(&self, c: &Candidate) -> bool {
        self.winners().iter().any(|(w, _)| *w == c)
    }

    /// Candidates within `NEAR_BEST` of this source's best.
    fn winners(&self) -> Vec<(&Candidate, f64)> {
        let best = self
            .trials
            .iter()
            .filter_map(|(_, r)| *r)
            .fold(f64::MAX, f64::min);
        self.trials
            .iter()
            .filter_map(|(c, r)| r.filter(|r| *r <= best / NEAR_BEST).map(|r| (c, r)))
            .collect()
    }
}

impl Transfer {
    /// Which earlier searches in the store a search of `kernel` on `gpu` learns from: the same
    /// kernel on other GPUs first, then kernels of the same loop shape on this GPU
    /// ([`shape_of`]), then other kernels on this GPU, then the rest (by trials file within
    /// each), at most `MAX_SOURCES`, each with all its trials so far.
    pub fn choose(
        store: &Store,
        kernel: &TrialsKey,
        gpu: &str,
    ) -> Result<TransferSources, StoreError> {
        let mine = shape_of(store, kernel);
        let mut found: Vec<(u8, TransferSource)> = Vec::new();
        for (_, recs) in store.trial_sets()? {
            let Some(first) = recs.first() else { continue };
            if first.kernel == *kernel && first.gpu == gpu {
                continue;
            }
            if recs.iter().filter(|r| r.ratio().is_some()).count() < MIN_VALID {
                continue;
            }
            let similar = first.kernel != *kernel
                && first.gpu == gpu
                && mine.is_some()
                && shape_of(store, &first.kernel) == mine;
            let rank = match (first.kernel == *kernel, first.gpu == gpu) {
                (true, _) => 0,
                (false, true) if similar => 1,
                (false, true) => 2,
                (false, false) => 3,
            };
            found.push((
                rank,
                TransferSource {
                    kernel: first.kernel.clone(),
                    gpu: first.gpu.clone(),
                    trials: recs.len(),
                    similar,
                },
            ));
        }
        found.sort_by_key(|(rank, _)| *rank);
        Ok(TransferSources {
            format: FORMAT,
            sources: found
                .into_iter()
                .take(MAX_SOURCES)
                .map(|(_, s)| s)
                .collect(),
            ..Default::default()
        })
    }

    /// The sources named in `refs`, read from the store (the first `trials` records of each),
    /// for a search of `kernel`.
    pub fn load(
        store: &Store,
        refs: &TransferSources,
        space: &Space,
        kernel: &TrialsKey,
    ) -> Result<Transfer, TransferError> {
        let mut sources = Vec::new();
        for r in &refs.sources {
            // Another search's damage costs this one what it would have learned from it, not
            // the search: a resume restores its checkpoint, which holds the warm start.
            let recs = match store.trials(&r.kernel, &r.gpu) {
                Ok(recs) if recs.len() >= r.trials => recs,
                Ok(recs) => {
                    let e = TransferError::Shrunk {
                        path: store.trials_path(&r.kernel, &r.gpu),
                        kernel: r.kernel.clone(),
                        gpu: r.gpu.clone(),
                        want: r.trials,
                        have: recs.len(),
                    };
                    crate::store::warn_left_out(&e, "what the search learns from it");
                    continue;
                }
                Err(e) => {
                    crate::store::warn_left_out(&e, "what the search learns from it");
                    continue;
                }
            };
            let trials: Vec<(Candidate, Option<f64>)> = recs[..r.trials]
                .iter()
                .map(|t| (t.candidate.clone(), t.ratio()))
                .collect();
            let name = format!("{} on {}", r.kernel, r.gpu);
            let source = Source::new(&name, &trials, space);
            sources.extend(source.map(|s| Source {
                similar: r.similar,
                ..s.of_same_kernel(r.kernel == *kernel)
            }));
        }
        Ok(Transfer {
            sources,
            recipes: refs.recipes.clone(),
        })
    }

    /// Whether there is anything to start from.
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty() && self.recipes.is_empty()
    }

    /// What a search measures right after the baseline, at most [`MAX_WARM_START`]: the best of
    /// each search of this kernel on other GPUs, the recipes whose preconditions the kernel
    /// meets, the store's portfolio (at most `k` more, covering the sources the candidates
    /// before do not), then the general recipes.
    pub fn warm_start(&self, k: usize) -> Vec<Candidate> {
        let mut chosen = self.same_kernel_bests();
        let (matched, general): (Vec<&RecipePick>, Vec<&RecipePick>) =
            self.recipes.iter().partition(|r| r.matched);
        for r in matched {
            if !chosen.contains(&r.candidate) {
                chosen.push(r.candidate.clone());
            }
        }
        let mut chosen = self.cover(chosen.clone(), chosen.len() + k);
        for r in general {
            if !chosen.contains(&r.candidate) {
                chosen.push(r.candidate.clone());
            }
        }
        chosen.truncate(MAX_WARM_START);
        chosen
    }

    /// The best of each search of this kernel on another GPU, then of each search of a kernel
    /// of the same loop shape: what a search of a kernel like this one found is tried first.
    fn same_kernel_bests(&self) -> Vec<Candidate> {
        let baseline = Candidate::baseline();
        let mut chosen: Vec<Candidate> = Vec::new();
        let alike = self.sources.iter().filter(|s| s.same_kernel);
        for s in alike.chain(self.sources.iter().filter(|s| s.similar && !s.same_kernel)) {
            if let Some(best) = s.best().filter(|b| **b != baseline && !chosen.contains(b)) {
                chosen.push(best.clone());
            }
        }
        chosen
    }

    /// The fewest candidates (at most `k`) such that every source has one of its winners among
    /// them: first the best of each search of the same kernel (on other GPUs), then greedily
    /// each next one a winner of the most sources not yet covered (ties: the lower mean ratio,
    /// then the candidate's key). Sources where -O3 is already a winner are covered by the
    /// baseline, which every search measures first.
    pub fn portfolio(&self, k: usize) -> Vec<Candidate> {
        let mut chosen = self.same_kernel_bests();
        chosen.truncate(k);
        self.cover(chosen, k)
    }

    /// `chosen`, then greedily the winner of the most sources not yet covered, until every
    /// source is covered or `k` are chosen.
    fn cover(&self, mut chosen: Vec<Candidate>, k: usize) -> Vec<Candidate> {
        let baseline = Candidate::baseline();
        let winners: Vec<Vec<(&Candidate, f64)>> =
            self.sources.iter().map(Source::winners).collect();
        let covered = |s: usize, chosen: &[Candidate]| {
            winners[s]
                .iter()
                .any(|(c, _)| **c == baseline || chosen.contains(c))
        };
        let mut open: Vec<usize> = (0..winners.len())
            .filter(|&s| !covered(s, &chosen))
            .collect();
        while chosen.len() < k && !open.is_empty() {
            let mut votes: HashMap<&Candidate, (usize, f64)> = HashMap::new();
            for &s in &open {
                for &(c, r) in &winners[s] {
                    let v = votes.entry(c).or_default();
                    v.0 += 1;
                    v.1 += r;
                }
            }
            let Some(pick) = votes
                .into_iter()
                .map(|(c, (n, sum))| (c, n, sum / n as f64))
                .min_by(|a, b| {
                    b.1.cmp(&a.1)
                        .then(a.2.total_cmp(&b.2))
                        .then_with(|| a.0.key().cmp(&b.0.key()))
                })
                .map(|(c, _, _)| c.clone())
            else {
                break;
            };
            chosen.push(pick);
            open.retain(|&s| !covered(s, &chosen));
        }
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cg(cg: u8) -> Candidate {
        Candidate {
            codegen_opt: cg,
            ..Candidate::baseline()
        }
    }

    fn source(name: &str, trials: &[(Candidate, f64)], space: &Space) -> Source {
        let t: Vec<_> = trials.iter().map(|(c, r)| (c.clone(), Some(*r))).collect();
        Source::new(name, &t, space).unwrap()
    }

    /// nvcc's code won an earlier search (or tied -O3 in it): it is no candidate of another
    /// search's space, so no warm start proposes it. Proposed, it had taken one of the warm
    /// start's eight places in 69 of 71 searches and been measured as a repeat of trial 1
    /// (H200, 2026-11-29, run F).
    #[test]
    fn nvcc_code_is_never_learned_from_an_earlier_search() {
        let s = Space::builtin(Default::default()).unwrap();
        let o2 = Candidate::with_pipeline("default<O2>");
        let trials = [
            (Candidate::baseline(), 1.0),
            (Candidate::nvcc(), 0.5),
            (o2.clone(), 0.6),
            (with_cg(0), 0.95),
            (with_cg(1), 0.99),
            (with_cg(2), 0.995),
        ];
        let src = source("k", &trials, &s);
        assert!(src.trials.iter().all(|(c, _)| !c.is_nvcc()));
        let tr = Transfer {
            sources: vec![src.of_same_kernel(true)],
            ..Default::default()
        };
        assert_eq!(tr.warm_start(5).first(), Some(&o2));
        assert!(tr.warm_start(5).iter().all(|c| !c.is_nvcc()));
    }

    #[test]
    fn the_portfolio_covers_every_source_with_the_fewest_picks() {
        let s = Space::test_grid();
        let o2 = Candidate::with_pipeline("default<O2>");
        let filler = [(with_cg(1), 0.99), (with_cg(2), 0.995)];
        let a = [(o2.clone(), 0.8), (with_cg(0), 0.95)];
        let b = [(o2.clone(), 0.81), (with_cg(0), 0.80)];
        let c = [(with_cg(0), 0.7), (o2.clone(), 0.9)];
        let all: Vec<Source> = [&a, &b, &c]
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut t = t.to_vec();
                t.extend(filler.clone());
                t.push((Candidate::baseline(), 1.0));
                source(&format!("s{i}"), &t, &s)
            })
            .collect();
        let tr = Transfer {
            sources: all,
            ..Default::default()
        };
        // O2 wins in a and b (within 2% in b), cg0 in b and c: two picks cover all three,
        // cg0 first (two votes each; its mean ratio is lower).
        assert_eq!(tr.portfolio(5), vec![with_cg(0), o2.clone()]);
        assert_eq!(tr.portfolio(1).len(), 1);
        // The same kernel on another GPU leads, whatever covers most.
        let mut tr = tr;
        tr.sources[0].same_kernel = true;
        assert_eq!(tr.portfolio(5), vec![o2, with_cg(0)]);
    }

    #[test]
    fn sources_are_adopted_into_the_space_and_capped() {
        let s = Space::test_grid();
        // Another kernel launched with 128 threads: .maxntid 128 becomes this kernel's 256.
        let mut own_block = with_cg(2);
        own_block.max_threads = Some(128);
        // (First, since a later trial of the same point would be a repeat and dropped.)
        let trials: Vec<(Candidate, Option<f64>)> = std::iter::once((own_block, Some(0.5)))
            .chain(
                s.points()
                    .unwrap()
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (c.clone(), Some(1.0 + i as f64 / 1000.0))),
            )
            .collect();
        let src = Source::new("k", &trials, &s).unwrap();
        assert_eq!(src.trials.len(), MAX_TRIALS);
        let adopted = src.trials.iter().find(|(_, r)| *r == Some(0.5)).unwrap();
        assert_eq!(adopted.0.max_threads, Some(256));
        assert!(s.points().unwrap().contains(&adopted.0));
        // A free-space pipeline is no grid point, and too few valid trials say nothing.
        let free = [(
            Candidate::with_pipeline("function(instcombine<>)"),
            Some(0.5),
        )];
        assert!(Source::new("k", &free, &s).is_none());
    }
}
