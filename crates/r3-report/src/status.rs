//! `r3 status`: where the searches of a store stand. Each search (one kernel on one GPU) is
//! running (on which host, as which process, since when), finished (and why it stopped), or
//! stopped by a kill (`--resume` continues it), with its trials and the best speedup over -O3
//! so far (the best trial as report and apply pick it); and
//! the recorded kernels no search has started on are waiting. It reads only what the store
//! holds (`Store::search_statuses`), so the searches of every host writing one store on a
//! shared filesystem show up together.

use crate::store::records::irreproducible_text;
use crate::store::status::{SearchState, SearchStatus};
use crate::store::{Store, StoreError};
use serde::Serialize;

#[derive(Debug, Serialize)]
pub struct Fleet {
    pub searches: Vec<Search>,
    /// Recorded kernels (with a replayable launch) that no search has started on.
    pub waiting: Vec<Waiting>,
    /// Recorded kernels with no search, none of whose replayable recordings reproduces.
    pub irreproducible: Vec<Irreproducible>,
}

#[derive(Debug, Serialize)]
pub struct Search {
    /// The kernel's demangled name, or its hash where the store does not know it.
    pub name: String,
    #[serde(flatten)]
    pub status: SearchStatus,
    /// Why the search cannot go on, when no recording of its kernel reproduces (a replay of
    /// the -O3 baseline found that it does not): the reason of one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub irreproducible: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Waiting {
    pub name: String,
    pub hash: crate::kernel::KernelHash,
    pub recordings: usize,
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
            .kernel(hash)
            .map_or_else(|| hash.to_owned(), |k| k.signature.demangled.clone())
    };
    let recorded = store.launches_by_kernel()?;
    let blocked = |hash: &str| {
        recorded
            .get(hash)
            .and_then(|r| r.blocked())
            .map(str::to_owned)
    };
    let (mut waiting, mut irreproducible) = (Vec::new(), Vec::new());
    for (hash, r) in &recorded {
        if statuses.iter().any(|s| *hash == s.kernel) {
            continue;
        }
        match blocked(hash) {
            None => waiting.push(Waiting {
                name: name_of(hash),
                hash: hash.clone(),
                recordings: r.usable,
            }),
            Some(reason) => irreproducible.push(Irreproducible {
                name: name_of(hash),
                hash: hash.clone(),
                recordings: r.irreproducible,
                reason,
            }),
        }
    }
    let searches = statuses
        .into_iter()
        .map(|status| Search {
            name: name_of(&status.kernel),
            irreproducible: blocked(&status.kernel),
            status,
        })
        .collect();
    Ok(Fleet {
        searches,
        waiting,
        irreproducible,
    })
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
pub fn render(f: &Fleet, now_ms: u64) -> String {
    let rows: Vec<[String; 5]> = f
        .searches
        .iter()
        .map(|s| {
            [
                format!("{} [{}]", s.name, short(&s.status.kernel)),
                s.status.gpu.clone(),
                s.status.trials.to_string(),
                s.status
                    .best
                    .filter(|r| *r > 0.0)
                    .map_or("-".into(), |r| format!("{:.2}x", 1.0 / r)),
                match (&s.status.state, &s.irreproducible) {
                    (SearchState::Finished(_), _) | (_, None) => state(&s.status.state, now_ms),
                    (_, Some(why)) => irreproducible_text(why),
                },
            ]
        })
        .collect();
    let head = ["kernel", "gpu", "trials", "speedup", "state"].map(str::to_owned);
    let width = |i: usize| {
        rows.iter()
            .chain(std::iter::once(&head))
            .map(|r| r[i].chars().count())
            .max()
            .unwrap_or(0)
    };
    let w = [width(0), width(1), width(2), width(3)];
    let mut out = String::new();
    if !rows.is_empty() {
        for r in std::iter::once(&head).chain(&rows) {
            out += &format!(
                "{:<a$}  {:<b$}  {:>c$}  {:>d$}  {}\n",
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                a = w[0],
                b = w[1],
                c = w[2],
                d = w[3]
            );
        }
    }
    for k in &f.waiting {
        out += &format!(
            "waiting: {} [{}] ({} recorded launch(es), no search yet)\n",
            k.name,
            short(&k.hash),
            k.recordings
        );
    }
    for k in &f.irreproducible {
        out += &format!(
            "not searched: {} [{}] ({} recorded launch(es)): {}\n",
            k.name,
            short(&k.hash),
            k.recordings,
            irreproducible_text(&k.reason)
        );
    }
    out += &summary(f);
    out
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

    fn search(name: &str, gpu: &str, trials: u32, best: Option<f64>, state: SearchState) -> Search {
        Search {
            name: name.into(),
            irreproducible: None,
            status: SearchStatus {
                trials_file: format!("trials/{name}/{gpu}.jsonl").into(),
                kernel: format!("{name}0123456789abcdef"),
                gpu: gpu.into(),
                trials,
                best,
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
        let f = Fleet {
            searches: vec![
                search(
                    "saxpy",
                    "NVIDIA H100",
                    37,
                    Some(0.8237),
                    SearchState::Running(Some(lease)),
                ),
                search(
                    "gemv",
                    "NVIDIA H100",
                    100,
                    Some(0.0741),
                    SearchState::Finished(end("budget", 100)),
                ),
                search(
                    "stencil",
                    "NVIDIA H200",
                    12,
                    None,
                    SearchState::Finished(end("time", 12)),
                ),
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
            }],
            irreproducible: vec![Irreproducible {
                name: "fdtd_hz".into(),
                hash: "0badc0de00112233".into(),
                recordings: 2,
                reason: "allocation 0x600000200000: written at byte 6, which the original launch left alone".into(),
            }],
        };
        insta::assert_snapshot!(render(&f, 1_000_000 + 192_000));
    }
}
