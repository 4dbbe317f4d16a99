//! `r3 status`: where the searches of a store stand. Each search (one kernel on one GPU) is
//! running (on which host, as which process, since when), finished (and why it stopped), or
//! stopped by a kill (`--resume` continues it), with its trials and the best speedup over -O3
//! so far (the best trial as report and apply pick it); and
//! the recorded kernels no search has started on are waiting. It reads only what the store
//! holds (`Store::search_statuses`), so the searches of every host writing one store on a
//! shared filesystem show up together.

use crate::kernel::{KernelHash, TrialsKey};
use crate::store::identity::short_name;
use crate::store::programs::share_words as percent;
use crate::store::records::irreproducible_text;
use crate::store::status::{SearchState, SearchStatus};
use crate::store::{Store, StoreError};
use serde::Serialize;

/// The format of `r3 status --json` (docs/formats.md): 2 since `best` is a speedup like
/// `shipped` (the output before it had no number, and `best` was the time ratio).
pub const JSON_FORMAT: u32 = 2;

#[derive(Debug, Serialize)]
pub struct Fleet {
    pub format: u32,
    pub searches: Vec<Search>,
    /// Recorded kernels (with a replayable launch) that no search has started on.
    pub waiting: Vec<Waiting>,
    /// Recorded kernels with no search, none of whose replayable recordings reproduces.
    pub irreproducible: Vec<Irreproducible>,
    /// Recorded kernels with no search, none of whose recordings can be replayed (texture
    /// objects, CUDA graphs, pinned host memory, ...): the reason of one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_replayable: Vec<Irreproducible>,
    /// Kernels that cannot be searched, counted by class of reason (`exception_class`): what a
    /// user of unseen code needs to see at a glance.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub exceptions: std::collections::BTreeMap<String, usize>,
    /// Kernels the store compiled but no recording has launched yet: `r3 record` comes next.
    pub unrecorded: Vec<Compiled>,
    /// Kernels compiled without optimization (-O0), which r3 cannot tune, recorded or not.
    pub unoptimized: Vec<Compiled>,
    /// Old versions no search started on: kernels no current build contains (their source was
    /// edited and compiled again; `identity::Index::is_old`), which `r3 gc` removes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub old: Vec<Compiled>,
    /// Programs with a launch census and tuned kernels: their predicted speedups.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<super::programs::ProgramReport>,
}

#[derive(Debug, Serialize)]
pub struct Search {
    /// The kernel's demangled name, or its hash where the store does not know it.
    pub name: String,
    /// No current build contains the kernel (an old version: its source was edited).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub old: bool,
    #[serde(flatten)]
    pub status: SearchStatus,
    /// Why the search cannot go on, when no recording of its kernel reproduces (a replay of
    /// the -O3 baseline found that it does not): the reason of one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub irreproducible: Option<String>,
    /// Its largest share of a program's GPU time (the launch census), where known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// The speedup over -O3 of what `r3 apply` would build from this search on its searched
    /// launch (1: clang's code), as the report leads with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shipped: Option<f64>,
    /// The speedup over -O3 of the fastest trial (above 1: faster), as the text shows it; its
    /// inverse is `best_time_ratio`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best: Option<f64>,
    /// Why what ships is not the best, or why nothing ships (the report's Apply line).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where a program measured the fastest trial slower than the recorded build (`r3 record
    /// --time-only` of an applied build), its speedup there: apply withholds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub withheld: Option<f64>,
    /// The best trial's configuration, whole (the text shows its pipeline as edits of -O3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub best_candidate: Option<crate::candidate::Candidate>,
    /// nvcc's code, the second baseline, where the search measured it: its speed over -O3's
    /// and what ships against it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvcc: Option<super::tuning::NvccBaseline>,
}

#[derive(Debug, Serialize)]
pub struct Waiting {
    pub name: String,
    pub hash: crate::kernel::KernelHash,
    pub recordings: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Compiled {
    pub name: String,
    pub hash: crate::kernel::KernelHash,
}

#[derive(Debug, Serialize)]
pub struct Irreproducible {
    pub name: String,
    pub hash: crate::kernel::KernelHash,
    pub recordings: usize,
    /// Why one of them does not reproduce.
    pub reason: String,
}

/// What the store says of every search and of the kernels still waiting for one.
pub fn gather(store: &Store) -> Result<Fleet, StoreError> {
    let index = store.index()?;
    let statuses = store.search_statuses()?;
    let name_of = |hash: &str| {
        index
            .kernel(&KernelHash::from(hash))
            .map_or_else(|| hash.to_owned(), |k| k.signature.demangled.clone())
    };
    let recorded = store.launches_by_kernel()?;
    // Read once for every search, not once a search. The census is a hint here: a damaged
    // program file is said and left out.
    let read = super::tuning::ReadOnce::of(store);
    let share_of = |hash: &str| {
        read.shares()
            .get(hash)
            .and_then(|s| s.first())
            .map(|s| s.share)
    };
    let blocked = |hash: &str| {
        recorded
            .get(hash)
            .and_then(|r| r.blocked())
            .map(str::to_owned)
    };
    let (mut waiting, mut irreproducible) = (Vec::new(), Vec::new());
    for (hash, r) in &recorded {
        if statuses.iter().any(|s| *hash == s.kernel) || index.is_old_hash(hash) {
            continue;
        }
        match blocked(hash) {
            None => waiting.push(Waiting {
                name: name_of(hash),
                hash: hash.clone(),
                recordings: r.usable,
                share: share_of(hash),
            }),
            Some(reason) => irreproducible.push(Irreproducible {
                name: name_of(hash),
                hash: hash.clone(),
                recordings: r.irreproducible,
                reason,
            }),
        }
    }
    let compiled = |k: &crate::store::KernelRecord| Compiled {
        name: k.signature.demangled.clone(),
        hash: k.hash.clone(),
    };
    let unoptimized: Vec<Compiled> = index
        .current()
        .into_iter()
        .filter(|k| k.signature.unoptimized)
        .map(compiled)
        .collect();
    waiting.retain(|w| !unoptimized.iter().any(|u| u.hash == w.hash));
    let searched = |k: &&crate::store::KernelRecord| statuses.iter().any(|s| k.hash == s.kernel);
    let unreplayable = store.unreplayable_by_kernel()?;
    let not_replayable: Vec<Irreproducible> = unreplayable
        .iter()
        .filter(|(hash, _)| !recorded.contains_key(*hash) && !index.is_old_hash(hash))
        .filter(|(hash, _)| !statuses.iter().any(|s| **hash == s.kernel))
        .map(|(hash, (n, why))| Irreproducible {
            name: name_of(hash),
            hash: hash.clone(),
            recordings: *n,
            reason: why.clone(),
        })
        .collect();
    let unrecorded = index
        .current()
        .into_iter()
        .filter(|k| !k.signature.unoptimized && !recorded.contains_key(&k.hash))
        .filter(|k| !unreplayable.contains_key(&k.hash))
        .filter(|k| !searched(k))
        .map(compiled)
        .collect();
    let old = index
        .old()
        .into_iter()
        .filter(|k| !searched(k))
        .map(compiled)
        .collect();
    // What ships is a hint here too: a damaged trials file is said by the searches' own rows,
    // and the programs' predictions are left out with a warning. One pass serves both.
    let left_out = |e: &StoreError| {
        crate::store::warn_left_out(e, "the programs' predicted speedups");
        Vec::new()
    };
    let (ships, programs) = match super::programs::speedups(store) {
        Ok(s) => {
            let programs = super::programs::build_with(store, &s).unwrap_or_else(|e| left_out(&e));
            (s, programs)
        }
        Err(e) => (Default::default(), left_out(&e)),
    };
    let searches = statuses
        .into_iter()
        .map(|status| {
            let speeds = ships.get(&(status.gpu.clone(), status.kernel.clone()));
            let best = status.best_time_ratio.filter(|r| *r > 0.0).map(|r| 1.0 / r);
            let (best_candidate, trials) = best_candidate(store, &status);
            Search {
                name: name_of(&status.kernel),
                old: (status.kernel.kernel_hash()).is_some_and(|h| index.is_old_hash(&h)),
                nvcc: super::tuning::nvcc_baseline(
                    &trials,
                    &store
                        .confirmations(&store.trials_path(&status.kernel, &status.gpu))
                        .unwrap_or_default(),
                    speeds.map_or(1.0, |s| s.shipped),
                ),
                best_candidate,
                irreproducible: blocked(&status.kernel),
                share: share_of(&status.kernel),
                shipped: speeds.map(|s| s.shipped),
                best,
                reason: speeds.and_then(|s| reason(store, &read, &status, s.shipped, best)),
                withheld: speeds.and_then(|s| s.withheld),
                status,
            }
        })
        .collect();
    let exceptions = exceptions(&irreproducible, &not_replayable);
    Ok(Fleet {
        format: JSON_FORMAT,
        searches,
        waiting,
        irreproducible,
        not_replayable,
        exceptions,
        unrecorded,
        unoptimized,
        old,
        programs,
    })
}

/// The class of why a kernel cannot be searched, from the reason its recording gave: for a
/// launch that cannot be replayed, the reason's words before any detail ("texture objects in
/// use", "CUDA graphs in use"); for a baseline that does not reproduce, "not deterministic"
/// where its own runs differ (with why, where its code reads the GPU's clock), else "does not
/// reproduce".
pub fn exception_class(reason: &str, replayable: bool) -> String {
    if replayable {
        return if reason.contains(r3_replay::determinism::READS_CLOCK) {
            "not deterministic (it reads the GPU's clock)".into()
        } else if reason.contains("not deterministic") {
            "not deterministic".into()
        } else {
            "does not reproduce".into()
        };
    }
    let end = [" (", ";", ": ", ","]
        .iter()
        .filter_map(|s| reason.find(s))
        .min()
        .unwrap_or(reason.len());
    reason[..end].trim().to_owned()
}

fn exceptions(
    irreproducible: &[Irreproducible],
    not_replayable: &[Irreproducible],
) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    let classes = irreproducible
        .iter()
        .map(|k| exception_class(&k.reason, true))
        .chain(
            not_replayable
                .iter()
                .map(|k| exception_class(&k.reason, false)),
        );
    for class in classes {
        *out.entry(class).or_insert(0) += 1;
    }
    out
}

/// The best trial's configuration, as the winner rule picks it (None: no valid trial, or
/// trials that cannot be read, which the search's row says otherwise), and the trials.
fn best_candidate(
    store: &Store,
    s: &SearchStatus,
) -> (
    Option<crate::candidate::Candidate>,
    Vec<crate::store::trials::TrialRecord>,
) {
    let Ok(recs) = store.trials(&s.kernel, &s.gpu) else {
        return (None, Vec::new());
    };
    let confirmed = store.confirmations(&s.trials_file).unwrap_or_default();
    let best = s
        .best_time_ratio
        .and(crate::store::winner::pick_best(&recs, &confirmed))
        .map(|t| t.candidate.clone());
    (best, recs)
}

/// Why a search ships clang's code, or less than its best (as shown, to the 1/1000), in the
/// report's words; None where it ships its best, or has no trial to say it by.
fn reason(
    store: &Store,
    read: &super::tuning::ReadOnce,
    s: &SearchStatus,
    shipped: f64,
    best: Option<f64>,
) -> Option<String> {
    let best = best?;
    let shown = crate::speed::times;
    if shipped > 1.0 && shown(shipped) == shown(best) {
        return None;
    }
    let note = match super::tuning::apply_of_search(store, read, &s.kernel, &s.gpu) {
        Ok(a) => a.note,
        Err(e) => format!("its trials cannot be read: {e}"),
    };
    Some(
        note.strip_prefix("keeps clang's code: ")
            .map_or_else(|| note.clone(), str::to_owned),
    )
}

/// What apply ships of each search (kernel hash, GPU), one line each: `r3 tune`'s last lines.
/// The store's recorded launches and censuses are read once for all of them.
pub fn ships_lines(store: &Store, searches: &[(TrialsKey, String)]) -> Vec<String> {
    let read = super::tuning::ReadOnce::of(store);
    searches
        .iter()
        .map(|(hash, gpu)| ships_line(store, &read, hash, gpu))
        .collect()
}

/// What apply ships of one search (kernel hash `hash` on `gpu`), in one line, with the reason
/// where that is clang's code or not the fastest trial. `read`: what is read of the store once
/// (`tuning::ReadOnce`).
pub fn ships_line(
    store: &Store,
    read: &super::tuning::ReadOnce,
    key: &TrialsKey,
    gpu: &str,
) -> String {
    let label = key
        .kernel_hash()
        .and_then(|h| store.kernel(&h).ok())
        .map_or_else(|| key.to_string(), |k| k.signature.demangled);
    match super::tuning::apply_of_search(store, read, key, gpu) {
        Ok(a) => match a.shipped_trial {
            None => format!(
                "ships: clang's code (-O3) for {label}: {}",
                a.note
                    .strip_prefix("keeps clang's code: ")
                    .unwrap_or(&a.note)
            ),
            Some(t) => format!(
                "ships: {} for {label} (trial {t}): {}",
                crate::speed::faster(a.shipped_speedup),
                a.note
            ),
        },
        Err(e) => format!("ships: unknown for {label}: its trials cannot be read: {e}"),
    }
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

fn duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

fn state(s: &SearchState, now_ms: u64) -> String {
    match s {
        SearchState::Running(Some(l)) => format!(
            "running on {}, pid {}, for {}",
            l.host,
            l.pid,
            duration(now_ms.saturating_sub(l.started_unix_ms))
        ),
        SearchState::Running(None) => "running (where: no lease)".to_owned(),
        SearchState::Finished(end) => match end.stop.as_str() {
            "budget" => format!("done ({} of budget {})", end.trials, end.budget),
            "time" => format!(
                "cut short by --time ({} of budget {})",
                end.trials, end.budget
            ),
            other => format!("{other} ({} of budget {})", end.trials, end.budget),
        },
        SearchState::Stopped => "stopped without finishing (killed?): --resume continues it".into(),
        SearchState::Damaged(why) => format!("damaged: {why}"),
    }
}

/// The table for a person; `now_ms` (Unix ms) for how long running searches have run.
/// Kernels go by their short names (`identity::short_name`) unless `full_names`.
pub fn render(f: &Fleet, now_ms: u64, full_names: bool) -> String {
    let name = |n: &str| {
        if full_names {
            n.to_owned()
        } else {
            short_name(n)
        }
    };
    let rows: Vec<[String; 8]> = f
        .searches
        .iter()
        .map(|s| {
            [
                format!(
                    "{} [{}]{}",
                    name(&s.name),
                    short(&s.status.kernel),
                    if s.old { " old" } else { "" }
                ),
                s.status.gpu.clone(),
                s.status.trials.to_string(),
                s.shipped.map_or("-".into(), crate::speed::times),
                s.best.map_or("-".into(), crate::speed::times),
                s.share.map_or("-".into(), percent),
                match (&s.status.state, &s.irreproducible) {
                    (SearchState::Finished(_), _) | (_, None) => state(&s.status.state, now_ms),
                    (_, Some(why)) => irreproducible_text(why),
                },
                s.reason.clone().unwrap_or_default(),
            ]
        })
        .collect();
    let head = [
        "kernel",
        "gpu",
        "trials",
        "ships",
        "best",
        "of program",
        "state",
        "reason",
    ]
    .map(str::to_owned);
    let width = |i: usize| {
        rows.iter()
            .chain(std::iter::once(&head))
            .map(|r| r[i].chars().count())
            .max()
            .unwrap_or(0)
    };
    let w = [width(0), width(1), width(2), width(3), width(4), width(5)];
    // The reason column only where a search has one; the state column is padded to the
    // states of the rows with a reason (a long state of a row without one runs on).
    let reasons = f.searches.iter().any(|s| s.reason.is_some());
    let state_width = rows
        .iter()
        .chain(std::iter::once(&head))
        .filter(|r| !r[7].is_empty())
        .map(|r| r[6].chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    if !rows.is_empty() {
        for r in std::iter::once(&head).chain(&rows) {
            let last = if reasons {
                format!("{:<s$}  {}", r[6], r[7], s = state_width)
            } else {
                r[6].clone()
            };
            out += &format!(
                "{:<a$}  {:<b$}  {:>c$}  {:>d$}  {:>e$}  {:>g$}  {}\n",
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                last.trim_end(),
                a = w[0],
                b = w[1],
                c = w[2],
                d = w[3],
                e = w[4],
                g = w[5]
            );
        }
    }
    // Each search's best as edits of -O3; the GPU named where the store's searches ran on more
    // than one.
    let gpus: std::collections::BTreeSet<&str> =
        f.searches.iter().map(|s| s.status.gpu.as_str()).collect();
    for s in &f.searches {
        let c = s.best_candidate.as_ref();
        if let Some(c) = c.filter(|c| **c != crate::candidate::Candidate::baseline()) {
            let on = if gpus.len() > 1 {
                format!(" on {}", s.status.gpu)
            } else {
                String::new()
            };
            out += &format!(
                "best of {} [{}]{on}: {}\n",
                name(&s.name),
                short(&s.status.kernel),
                crate::passes::diff::candidate_brief(c, 3)
            );
        }
    }
    // nvcc's code where it matters: faster than clang's, or not measured (the JSON has all).
    for s in &f.searches {
        if let Some(n) = s
            .nvcc
            .as_ref()
            .filter(|n| n.nvcc_faster() || n.why_not.is_some())
        {
            let against = match (n.speedup, n.shipped_over_nvcc, &n.why_not) {
                (Some(v), Some(o), _) => format!(
                    "nvcc -O3 runs it at {} of clang -O3's speed; what ships, at {} of nvcc's",
                    crate::speed::times(v),
                    crate::speed::times(o)
                ),
                (_, _, Some(why)) => format!("nvcc's code not measured: {why}"),
                _ => "nvcc's code not measured".into(),
            };
            out += &format!(
                "nvcc: {} [{}]: {against}\n",
                name(&s.name),
                short(&s.status.kernel)
            );
        }
    }
    for s in &f.searches {
        if let Some(x) = s.withheld {
            out += &format!(
                "withheld: {} [{}] on {}: its fastest code ran {} in a program (r3 record --time-only of an applied build), so -O3 ships (r3 report says where)\n",
                name(&s.name),
                short(&s.status.kernel),
                s.status.gpu,
                crate::speed::times(x)
            );
        }
    }
    for k in &f.waiting {
        out += &format!(
            "waiting: {} [{}] ({} recorded launch(es), no search yet{})\n",
            name(&k.name),
            short(&k.hash),
            k.recordings,
            k.share.map_or(String::new(), |s| format!(
                "; {} of its program",
                percent(s)
            ))
        );
    }
    for k in &f.irreproducible {
        out += &format!(
            "not searched: {} [{}] ({} recorded launch(es)): {}\n",
            name(&k.name),
            short(&k.hash),
            k.recordings,
            irreproducible_text(&k.reason)
        );
    }
    for k in &f.not_replayable {
        out += &format!(
            "not searched: {} [{}] ({} recorded launch(es)): not replayable: {}\n",
            name(&k.name),
            short(&k.hash),
            k.recordings,
            k.reason
        );
    }
    if !f.exceptions.is_empty() {
        let mut by: Vec<(&String, &usize)> = f.exceptions.iter().collect();
        by.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let listed: Vec<String> = by.iter().map(|(c, n)| format!("{n} {c}")).collect();
        out += &format!(
            "kernels that cannot be searched, by class: {}\n",
            listed.join(", ")
        );
    }
    out += &compiled_lines(&f.unrecorded, &f.unoptimized, &f.old, &name);
    for p in &f.programs {
        out += &program_line(p, &name);
    }
    out += &summary(f);
    out
}

/// Compiled kernels without a recording, named (a few) with the command that comes next, the
/// -O0 ones apart (recording those would not help), and the old versions (no current build
/// contains them), which `r3 gc` removes.
fn compiled_lines(
    unrecorded: &[Compiled],
    unoptimized: &[Compiled],
    old: &[Compiled],
    name: &dyn Fn(&str) -> String,
) -> String {
    let listed = |ks: &[Compiled]| {
        let names: Vec<String> = ks.iter().take(3).map(|k| name(&k.name)).collect();
        let tail = match ks.len().saturating_sub(3) {
            0 => String::new(),
            more => format!(" and {more} more"),
        };
        format!("{}{tail}", names.join(", "))
    };
    let mut out = String::new();
    if !unrecorded.is_empty() {
        out += &format!(
            "not recorded yet: {} compiled kernel(s): {}; next: `r3 record -- ./your-program [args]` runs the program that launches them\n",
            unrecorded.len(),
            listed(unrecorded)
        );
    }
    if !unoptimized.is_empty() {
        out += &format!(
            "not tunable: {} kernel(s) compiled without optimization (-O0): {}; rebuild with -O3 (with CMake: -DCMAKE_BUILD_TYPE=Release)\n",
            unoptimized.len(),
            listed(unoptimized)
        );
    }
    if !old.is_empty() {
        let names: Vec<String> = old
            .iter()
            .take(3)
            .map(|k| format!("{} [{}]", name(&k.name), short(&k.hash)))
            .collect();
        let tail = match old.len().saturating_sub(3) {
            0 => String::new(),
            more => format!(" and {more} more"),
        };
        out += &format!(
            "old versions: {} kernel(s) no current build contains (their source was edited and compiled again; chosen by hash only): {}{tail}; `r3 gc` removes them with their recordings\n",
            old.len(),
            names.join(", ")
        );
    }
    out
}

/// A program's predicted speedup, with what was measured and where its time goes.
fn program_line(p: &super::programs::ProgramReport, name: &dyn Fn(&str) -> String) -> String {
    let largest = p.top.first().map_or(String::new(), |k| {
        format!("; largest kernel {} ({})", name(&k.name), percent(k.share))
    });
    format!(
        "program {} on {}: predicted {} with what ships (best {}), {} of {} kernels tuned ({} of its GPU time){}{largest}\n",
        p.name,
        p.gpu,
        crate::speed::faster(p.predicted_shipped),
        crate::speed::times(p.predicted_best),
        p.tuned,
        p.kernels,
        percent(p.tuned_share),
        p.measured
            .as_ref()
            .map_or(String::new(), |m| format!("; measured {} (r3 record --time-only)", crate::speed::times(m.speedup)))
    )
}

fn summary(f: &Fleet) -> String {
    let count =
        |p: fn(&SearchState) -> bool| f.searches.iter().filter(|s| p(&s.status.state)).count();
    let running = count(|s| matches!(s, SearchState::Running(_)));
    let done = count(|s| matches!(s, SearchState::Finished(_)));
    let stopped = count(|s| matches!(s, SearchState::Stopped));
    let damaged = match count(|s| matches!(s, SearchState::Damaged(_))) {
        0 => String::new(),
        n => format!(", {n} damaged"),
    };
    let blocked = f.irreproducible.len()
        + f.searches
            .iter()
            .filter(|s| {
                s.irreproducible.is_some() && !matches!(s.status.state, SearchState::Finished(_))
            })
            .count();
    let unsearchable = match blocked {
        0 => String::new(),
        n => format!("; {n} kernel(s) whose recordings do not reproduce (re-record)"),
    };
    format!(
        "{} search(es): {running} running, {done} finished, {stopped} stopped{damaged}; {} recorded kernel(s) waiting{unsearchable}\n",
        f.searches.len(),
        f.waiting.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::trials::{Lease, SearchEnd};

    #[test]
    fn exceptions_are_classed_by_the_words_before_their_detail() {
        let class = |r, replayable| exception_class(r, replayable);
        assert_eq!(
            class("texture objects in use", false),
            "texture objects in use"
        );
        assert_eq!(
            class(
                "reachable working set over the limit (6 GiB of 4 GiB; R3_RECORD_LIMIT_MB)",
                false
            ),
            "reachable working set over the limit"
        );
        assert_eq!(
            class(
                "an argument points to pinned host memory: argument 2",
                false
            ),
            "an argument points to pinned host memory"
        );
        assert_eq!(
            class("allocation 0x6: differs at byte 0 (exact check); the kernel is not deterministic (its own runs differ)", true),
            "not deterministic"
        );
        assert_eq!(
            class("allocation 0x6: differs at byte 6 (exact check)", true),
            "does not reproduce"
        );
        let clock = format!(
            "allocation 0x6: differs at byte 24 (exact check); the kernel is not deterministic ({}): two replays agreed, the program's run did not",
            r3_replay::determinism::READS_CLOCK
        );
        assert_eq!(
            class(&clock, true),
            "not deterministic (it reads the GPU's clock)"
        );
    }

    fn search(name: &str, gpu: &str, trials: u32, best: Option<f64>, state: SearchState) -> Search {
        Search {
            name: name.into(),
            old: false,
            best_candidate: None,
            irreproducible: None,
            share: None,
            shipped: best.map(|r| (1.0 / r).max(1.0)),
            best: best.map(|r| 1.0 / r),
            reason: None,
            withheld: None,
            nvcc: None,
            status: SearchStatus {
                trials_file: format!("trials/{name}/{gpu}.jsonl").into(),
                kernel: format!("{name}0123456789abcdef").into(),
                gpu: gpu.into(),
                trials,
                best_time_ratio: best,
                state,
            },
        }
    }

    #[test]
    fn the_table_says_where_each_search_stands() {
        let end = |stop: &str, trials| SearchEnd {
            format: 1,
            stop: stop.into(),
            trials,
            budget: 100,
            warm_start: 4,
        };
        let lease = Lease {
            host: "node12".into(),
            pid: 4242,
            started_unix_ms: 1_000_000,
            gpu: "NVIDIA H100".into(),
        };
        let mut f = Fleet {
            format: JSON_FORMAT,
            searches: vec![
                search(
                    "saxpy",
                    "NVIDIA H100",
                    37,
                    Some(0.8237),
                    SearchState::Running(Some(lease)),
                ),
                Search {
                    // nvcc's code beats clang's; what ships beats nvcc's.
                    nvcc: Some(super::super::tuning::NvccBaseline {
                        trial: 1,
                        speedup: Some(1.07),
                        shipped_over_nvcc: Some(12.61),
                        why_not: None,
                    }),
                    ..search(
                        "gemv",
                        "NVIDIA H100",
                        100,
                        Some(0.0741),
                        SearchState::Finished(end("budget", 100)),
                    )
                },
                Search {
                    nvcc: Some(super::super::tuning::NvccBaseline {
                        trial: 1,
                        speedup: None,
                        shipped_over_nvcc: None,
                        why_not: Some("nvcc could not compile stencil.cu: error".into()),
                    }),
                    ..search(
                        "stencil",
                        "NVIDIA H200",
                        12,
                        None,
                        SearchState::Finished(end("time", 12)),
                    )
                },
                search(
                    "bfs_step",
                    "NVIDIA H100",
                    51,
                    Some(1.0),
                    SearchState::Stopped,
                ),
                Search {
                    irreproducible: Some(
                        "allocation 0x600000400000: differs at byte 6 (exact check)".into(),
                    ),
                    ..search("adi_sweep", "NVIDIA H100", 0, None, SearchState::Stopped)
                },
            ],
            waiting: vec![Waiting {
                name: "scan_up".into(),
                hash: "feedbeef00112233".into(),
                recordings: 3,
                share: Some(0.0042),
            }],
            irreproducible: vec![Irreproducible {
                name: "fdtd_hz".into(),
                hash: "0badc0de00112233".into(),
                recordings: 2,
                reason: "allocation 0x600000200000: written at byte 6, which the original launch left alone".into(),
            }],
            // Issue 61: recorded kernels that cannot be replayed are named, not counted as
            // unrecorded, and every exception is counted by class.
            not_replayable: vec![Irreproducible {
                name: "sample_tex(float*, unsigned long long)".into(),
                hash: "7e7e7e7e00112233".into(),
                recordings: 1,
                reason: "texture objects in use (r3 cannot copy what a texture object reads)".into(),
            }],
            exceptions: [("does not reproduce".to_owned(), 1), ("texture objects in use".to_owned(), 1)]
                .into_iter()
                .collect(),
            unrecorded: ["scale(float*, int)", "blur(float const*, float*)", "reduce(float*)", "copy(int*)"]
                .iter()
                .map(|n| Compiled {
                    name: (*n).into(),
                    hash: "0011223344556677".into(),
                })
                .collect(),
            unoptimized: vec![Compiled {
                name: "debug_kernel(int*)".into(),
                hash: "7766554433221100".into(),
            }],
            old: vec![Compiled {
                name: "dot(float const*, float*)".into(),
                hash: "d07d07d007001122".into(),
            }],
            programs: vec![crate::programs::ProgramReport {
                key: "corr-0011223344556677".into(),
                name: "corr".into(),
                gpu: "NVIDIA H100".into(),
                kernels: 4,
                tuned: 1,
                tuned_share: 0.998,
                predicted_shipped: 1.91,
                predicted_best: 1.97,
                measured: Some(crate::programs::Measured {
                    recorded_ms: 1100.0,
                    applied_ms: 590.0,
                    speedup: 1100.0 / 590.0,
                    applied_binary: "8899aabbccddeeff".into(),
                }),
                top: vec![crate::programs::ProgramKernel {
                    name: "gemv".into(),
                    hash: Some("gemv0123456789abcdef".into()),
                    share: 0.998,
                    launches: 1,
                    shipped: 13.5,
                    best: 13.5,
                    recorded_share: None,
                }],
            }],
        };
        f.searches[1].share = Some(0.998);
        // A running search's best is not confirmed yet: apply keeps clang's code for it.
        f.searches[0].shipped = Some(1.0);
        // A finished one whose best ran slower in a program than the recorded build.
        f.searches[1].shipped = Some(1.0);
        f.searches[1].withheld = Some(0.575);
        // Each search that ships less than its best says why, in the reason column.
        f.searches[0].reason = Some("the fastest trial (30) is not confirmed yet".into());
        f.searches[1].reason = Some(
            "the fastest trial (88) ran 0.575× in program corr-0011223344556677 (r3 record --time-only)"
                .into(),
        );
        // Issue 59: a thrust kernel's 500-character name in a short form, an old version of an
        // edited kernel marked, and the best as its edits of -O3.
        let cub = "void cub::CUB_300001_SM_900::DeviceRadixSortOnesweepKernel<cub::CUB_300001_SM_900::detail::radix::policy_hub<unsigned int, cub::CUB_300001_SM_900::NullType, unsigned long>::Policy900, false, unsigned int, cub::CUB_300001_SM_900::NullType, unsigned long, int, int, cub::CUB_300001_SM_900::detail::identity_decomposer_t>(int*, int*, unsigned long*, unsigned long const*, unsigned int*, unsigned int const*, cub::CUB_300001_SM_900::NullType*, cub::CUB_300001_SM_900::NullType const*, unsigned long, int, int, cub::CUB_300001_SM_900::detail::identity_decomposer_t)";
        let mut radix = search(
            "radix",
            "NVIDIA H100",
            30,
            Some(0.5),
            SearchState::Finished(end("budget", 30)),
        );
        radix.name = cub.into();
        let o3 = crate::passes::diff::expand("default<O3>").unwrap();
        let mut p = o3.clone();
        let cfg = p
            .steps
            .iter()
            .position(|s| s.params.iter().any(|x| x == "no-switch-to-lookup"))
            .unwrap();
        for x in p.steps[cfg].params.iter_mut() {
            if x == "no-switch-to-lookup" {
                *x = "switch-to-lookup".into();
            }
        }
        radix.best_candidate = Some(crate::candidate::Candidate {
            max_threads: Some(256),
            ..crate::candidate::Candidate::with_pipeline(&p.render())
        });
        f.searches.push(radix);
        f.searches[2].old = true;
        let text = render(&f, 1_000_000 + 192_000, false);
        insta::assert_snapshot!(text);
        assert!(text.lines().all(|l| l.chars().count() < 400), "{text}");
        assert!(render(&f, 0, true).contains(cub));
        // As JSON: the speedups the text shows, the time ratio beside them, and the reason.
        let v = serde_json::to_value(&f).unwrap();
        let gemv = &v["searches"][1];
        assert_eq!(v["format"], 2);
        assert_eq!(gemv["best_time_ratio"], 0.0741);
        assert!((gemv["best"].as_f64().unwrap() - 1.0 / 0.0741).abs() < 1e-12);
        assert!(gemv["reason"].as_str().unwrap().contains("0.575×"));
        assert!(v["searches"][2].get("reason").is_none());
        // The JSON keeps the full name and the whole pipeline.
        assert_eq!(v["searches"][5]["name"], cub);
        assert_eq!(v["searches"][5]["best_candidate"]["pipeline"], p.render());
        assert_eq!(v["searches"][2]["old"], true);
        assert!(v["searches"][1].get("old").is_none());
    }
}
