//! What `r3 record` says, for a person: what a run recorded and what recording cost, the
//! program's time by kernel, what a time-only run measured, and what the check found.

use crate::check::Check;
use crate::ended::Ended;
use crate::replay::gpu::Verdict;
use crate::stats::{ProcessSpan, RunStats};
use crate::store::in_program::{Judged, Kept};
use crate::store::programs::Census;
use crate::store::records::{irreproducible_text, LaunchRecord, Recording};
use crate::store::speed::times;
use crate::store::trials::{Against, Refusal};
use crate::time_only::TimedRun;
use std::path::{Path, PathBuf};

/// A kernel's name in a line: its unqualified demangled name.
fn short_name(mangled: &str) -> String {
    let name = crate::kernel::unqualified_name(&crate::kernel::demangle(mangled));
    if name.is_empty() {
        mangled.to_owned()
    } else {
        name
    }
}

fn ms_text(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else if ms >= 1.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.3} ms")
    }
}

fn launches_text(n: u64) -> String {
    format!("{n} launch{}", if n == 1 { "" } else { "es" })
}

/// Kernels shown by name in a time-by-kernel line; the rest are counted.
const TOP: usize = 5;

/// `share% name (N launches, time)` for each of the first kernels, ` · ` between, then how
/// many more.
fn by_kernel(rows: &[(String, u64, f64)], total_ms: f64) -> String {
    let mut parts: Vec<String> = rows
        .iter()
        .take(TOP)
        .map(|(name, launches, ms)| {
            format!(
                "{:.1}% {} ({}, {})",
                100.0 * ms / total_ms,
                short_name(name),
                launches_text(*launches),
                ms_text(*ms)
            )
        })
        .collect();
    if rows.len() > TOP {
        parts.push(format!("{} more", rows.len() - TOP));
    }
    parts.join(" · ")
}

/// The census's line for `r3 record`: each kernel's share of the program's estimated time.
pub fn census_summary(c: &Census) -> String {
    let total = c.total_ms();
    let timed: Vec<(String, u64, f64)> = c
        .kernels
        .iter()
        .filter_map(|k| Some((k.name.clone(), k.launches, k.estimated_ms?)))
        .collect();
    let untimed: Vec<_> = c
        .kernels
        .iter()
        .filter(|k| k.estimated_ms.is_none())
        .collect();
    let mut out = if timed.is_empty() || total <= 0.0 {
        "r3: program time by kernel: unknown (no recorded launch has a time)".to_owned()
    } else {
        format!(
            "r3: program time by kernel (timed while recording): {}",
            by_kernel(&timed, total)
        )
    };
    if !untimed.is_empty() && !timed.is_empty() {
        let n: u64 = untimed.iter().map(|k| k.launches).sum();
        out += &format!(
            "; {} kernel(s) without a timed launch ({})",
            untimed.len(),
            launches_text(n)
        );
    }
    if c.unknown_launches > 0 {
        out += &format!(
            "; {} of kernels r3 has no registration for",
            launches_text(c.unknown_launches)
        );
    }
    out + "\n"
}

/// What `r3 record --time-only` prints: the program's measured GPU time and its top kernels.
pub fn time_only_summary(run: &TimedRun, program: &str) -> String {
    let Some(t) = &run.timing else {
        return format!(
            "r3: no time was measured: was {program} linked by r3-clang++ against cudart (recording support)?\n"
        );
    };
    let mut out = format!(
        "r3: GPU time measured: {} over {} (each launch between CUDA events; nothing recorded)\n",
        ms_text(t.total_ms),
        launches_text(t.launches)
    );
    if t.total_ms > 0.0 {
        let rows: Vec<(String, u64, f64)> = t
            .kernels
            .iter()
            .map(|k| (k.name.clone(), k.launches, k.ms))
            .collect();
        out += &format!("r3: by kernel: {}\n", by_kernel(&rows, t.total_ms));
    }
    if run.untimed > 0 {
        out += &format!(
            "r3: note: {} gave no time (launched into a CUDA graph being captured); the total leaves them out\n",
            launches_text(run.untimed)
        );
    }
    out + &in_program_summary(&run.judged)
}

/// What an applied build's run says of its tuned kernels: how many held up in the program
/// against the recorded build, each one that did not (withheld from the next build), and the
/// measures the store could not keep.
fn in_program_summary(judged: &[Judged]) -> String {
    if judged.is_empty() {
        return String::new();
    }
    let speed = |j: &Judged| j.measure.in_program.speedup();
    let per_launch = |j: &Judged| {
        let p = &j.measure.in_program;
        format!(
            "{} against {} per launch",
            ms_text(p.applied_ms),
            ms_text(p.recorded_ms)
        )
    };
    let against = match judged[0].measure.in_program.against {
        Against::Census => "the recorded run's census",
        Against::TimeOnly => "the recorded build's time-only run",
    };
    let held = judged
        .iter()
        .filter(|j| !j.measure.in_program.slower())
        .count();
    let mut out = format!(
        "r3: tuned kernels in this program, against {against}: {held} of {} at least as fast\n",
        judged.len()
    );
    for j in judged.iter() {
        let why = match j.withheld {
            None => continue,
            Some(Refusal::Slower) => "replay measured it faster".to_owned(),
            Some(Refusal::NoGain { replay }) => {
                format!("no gain here, where replay confirmed {}", times(replay))
            }
        };
        out += &format!(
            "r3: {} ran {:.3}× here ({}): withheld from the next build ({why}; the program decides)\n",
            short_name(&j.measure.shipped.name),
            speed(j),
            per_launch(j)
        );
    }
    let unkept: Vec<String> = judged
        .iter()
        .filter(|j| !matches!(j.kept, Kept::Trials(_)))
        .map(|j| format!("{} ({:.3}×)", short_name(&j.measure.shipped.name), speed(j)))
        .collect();
    if !unkept.is_empty() {
        out += &format!(
            "r3: note: not kept, the store has no confirmed trial of the code this build ships (tuned again since the build, or a search without confirmation): {}\n",
            unkept.join(", ")
        );
    }
    out
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

/// The summary `r3 record` prints after the run, for a person.
pub fn summary(s: &RunStats, span: &ProcessSpan) -> String {
    let mut out = format!(
        "r3: recorded {} launch(es) of the {} kernel(s) that ran ({} launches in all), in {:.2} s of the program's {:.2} s\n",
        s.recorded, s.kernels_seen, s.launches, s.record_s, s.wall_s
    );
    out += &format!(
        "r3:   snapshots ({}): {} read, {} written; {} region(s) recorded, {} unreachable allocation(s) left out\n",
        s.snapshot,
        mib(s.bytes_in),
        mib(s.bytes_written),
        s.regions,
        s.regions_skipped
    );
    out += &format!(
        "r3:   time: host buffers {:.2} s, device copies {:.2} s, pointer scan {:.2} s, warm re-launches {:.2} s ({} launch(es)), timed repeats {:.2} s\n",
        s.host_s, s.copy_s, s.scan_s, s.relaunch_s, s.relaunched, s.natural_s
    );
    out += &format!(
        "r3:   files: compressed and written in the background in {:.2} s; the program waited {:.2} s for them ({:.2} s at exit){}\n",
        s.background_s,
        s.wait_s,
        s.exit_wait_s,
        if s.write_s > 0.0 {
            format!(", {:.2} s written on the launching thread", s.write_s)
        } else {
            String::new()
        }
    );
    out += &format!(
        "r3:   allocations: {} ({} reused freed memory), {} freed, {:.2} s (and {:.2} s creating the CUDA context, which the program pays without r3 too)\n",
        s.allocs, s.allocs_reused, s.frees, s.alloc_s, s.context_s
    );
    if let Some(o) = span.outside(s) {
        out += &format!(
            "r3:   outside the runtime's clock: {:.2} s before it started (loading the program), {}, {:.2} s after its summary (CUDA's teardown, the process's end)\n",
            o.before_s,
            o.teardown_s.map_or("exit() not seen".to_owned(), |t| format!(
                "{t:.2} s from exit() to its exit handler (the program's exit handlers)"
            )),
            o.after_s
        );
    }
    if s.not_replayable > 0 {
        out += &format!(
            "r3:   {} recording(s) cannot be replayed (the list below says why)\n",
            s.not_replayable
        );
    }
    if s.time_capped {
        out += "r3: note: recording stopped at --max-time; later launches ran unrecorded\n";
    }
    if s.kernels_capped > 0 {
        out += &format!(
            "r3: note: {} kernel(s) reached --kernel-limit; their later launches ran unrecorded\n",
            s.kernels_capped
        );
    }
    out
}

/// Where some allocations were recorded by their pages that hold data: what the launch
/// reaches, of which `bytes_in` holds data.
fn held_by_pages(l: &LaunchRecord) -> String {
    match l.bytes_reachable {
        Some(reached) if l.sparse_regions > 0 => format!(
            " (of {:.1} MiB reached: {} allocation(s) held by their pages with data, the rest zeros)",
            reached as f64 / 1048576.0,
            l.sparse_regions
        ),
        _ => String::new(),
    }
}

/// The recordings a run made, one line each.
pub fn recordings(recs: &[Recording], store: &Path) -> String {
    let mut out = format!(
        "r3: {} launch(es) recorded in {}\n",
        recs.len(),
        store.display()
    );
    for r in recs {
        let l = &r.launch;
        let state = match &l.not_replayable {
            Some(why) => format!("not replayable: {why}"),
            None => format!(
                "{} regions, {:.1} MiB in{}, {:.1} MiB changed, {:.3} ms in app",
                l.regions,
                l.bytes_in as f64 / 1048576.0,
                held_by_pages(l),
                l.bytes_changed as f64 / 1048576.0,
                l.in_app_ms
            ),
        };
        out += &format!(
            "  {}  {}  grid {:?} block {:?}  {}\n",
            r.id,
            crate::kernel::demangle(&l.kernel),
            l.grid,
            l.block,
            state
        );
    }
    out
}

/// The line for the unfinished recordings of killed runs that a run removed first.
pub fn stale_removed(removed: &[PathBuf], store: &Path) -> String {
    format!(
        "r3: removed {} unfinished recording(s) that killed runs left in {}\n",
        removed.len(),
        store.join("records").display()
    )
}

/// The check's lines for `r3 record`'s summary: `N of M recordings reproduce`, then each that
/// does not, or could not be checked, with why.
pub fn check_summary(c: &Check) -> String {
    if let Some(why) = &c.skipped {
        return format!("r3: recordings not replayed: {why}\n");
    }
    let ok = c.verdicts.iter().filter(|(_, _, v)| v.reproduces()).count();
    let mut out = format!(
        "r3: {ok} of {} recordings reproduce (each -O3 baseline replayed and checked, in {:.2} s after the program)\n",
        c.verdicts.len(),
        c.seconds
    );
    for (id, kernel, v) in &c.verdicts {
        match v {
            Verdict::Reproduces => {}
            Verdict::NotDeterministic(d) => out += &format!("r3:   {id}  {kernel}: {}\n", d.text()),
            Verdict::Irreproducible(why) => {
                out += &format!("r3:   {id}  {kernel}: {}\n", irreproducible_text(why))
            }
            Verdict::NotChecked(why) => {
                out += &format!("r3:   {id}  {kernel}: not checked: {why}\n")
            }
        }
    }
    out
}

/// Why a run recorded nothing, when it did not.
pub fn nothing_recorded(program: &str, stats: Option<&RunStats>, ended: &Ended) -> String {
    match stats {
        None if ended.signal.is_some() => format!(
            "r3: no launch was recorded: {program} was killed before a recording was complete"
        ),
        None => format!(
            "r3: no launch was recorded: was {program} linked by r3-clang++ against cudart (recording support)?"
        ),
        Some(s) if s.launches == 0 => {
            format!("r3: no launch was recorded: {program} launched no kernel")
        }
        Some(_) => "r3: no launch was recorded: every launch was of a kernel r3 had no registration for, or the caps stopped recording first".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::tests::STATS;
    use crate::store::programs::{KernelTiming, ShippedKernel, Timing};

    const SPAN: ProcessSpan = ProcessSpan {
        spawned_unix_s: 999.9375,
        ended_unix_s: 1013.0,
    };

    #[test]
    fn a_launch_held_by_its_pages_says_what_it_reaches() {
        let mut l = LaunchRecord::by_hand("pool_step", vec![], &[]);
        l.bytes_in = 36872;
        assert_eq!(held_by_pages(&l), "");
        l.sparse_regions = 1;
        l.bytes_reachable = Some(5 << 30);
        assert_eq!(
            held_by_pages(&l),
            " (of 5120.0 MiB reached: 1 allocation(s) held by their pages with data, the rest zeros)"
        );
    }

    #[test]
    fn the_check_says_how_many_recordings_reproduce_and_why_others_do_not() {
        let c = Check {
            verdicts: vec![
                (
                    "0c2b6e8d9a256942/8c1badc7d54988de".into(),
                    "smooth".into(),
                    Verdict::Reproduces,
                ),
                (
                    "6f3396e03f7b650f/8c1badc7d54988de".into(),
                    "feedback".into(),
                    Verdict::Irreproducible(
                        "allocation 0x600000400000: differs at byte 6 (exact check)".into(),
                    ),
                ),
                (
                    "e1fe4175acc7cc5d/656ce7e945202e1e".into(),
                    "decay".into(),
                    Verdict::NotChecked("kernel decay has no device IR in the store".into()),
                ),
                (
                    "3a6e0b5c1d2f4e87/0c6f1e2d3b4a5968".into(),
                    "smooth_norm".into(),
                    Verdict::NotDeterministic(crate::replay::determinism::Decision {
                        reason: crate::replay::determinism::FLOAT_ATOMICS.into(),
                        learned: vec![(
                            "allocation 0x600000400000".into(),
                            crate::replay::determinism::Learned {
                                region: 1,
                                tolerance: Some("f32:rel=3.2e-6,abs=1.5e-6".parse().unwrap()),
                                spread: 8e-7,
                                words: Vec::new(),
                            },
                        )],
                        user: None,
                        runs: 8,
                    }),
                ),
            ],
            seconds: 0.5,
            skipped: None,
        };
        insta::assert_snapshot!(check_summary(&c));
        let none = Check {
            verdicts: Vec::new(),
            seconds: 0.0,
            skipped: Some("no GPU on this machine".into()),
        };
        assert_eq!(
            check_summary(&none),
            "r3: recordings not replayed: no GPU on this machine\n"
        );
    }

    #[test]
    fn the_summary_says_what_was_recorded_and_where_the_time_went() {
        let s: RunStats = serde_json::from_str(STATS).unwrap();
        insta::assert_snapshot!(summary(&s, &SPAN));
    }

    #[test]
    fn the_time_outside_the_runtime_s_clock_is_placed_by_its_times() {
        let mut s: RunStats = serde_json::from_str(STATS).unwrap();
        let o = SPAN.outside(&s).unwrap();
        assert_eq!(
            (o.before_s, o.teardown_s, o.after_s),
            (0.1875, Some(0.25), 0.375)
        );
        s.exit_unix_s = 0.0; // killed, or _exit(): no exit() seen
        assert_eq!(SPAN.outside(&s).unwrap().teardown_s, None);
        assert!(summary(&s, &SPAN).contains("exit() not seen"));
        s.start_unix_s = 0.0; // a runtime that wrote no times
        assert_eq!(SPAN.outside(&s), None);
        assert!(!summary(&s, &SPAN).contains("outside"));
    }

    #[test]
    fn the_time_by_kernel_lines_show_the_top_kernels_by_share() {
        use crate::store::programs::KernelCensus;
        let k = |name: &str, launches: u64, ms: Option<f64>| KernelCensus {
            kernel: None,
            name: name.into(),
            launches,
            estimated_ms: ms,
            timed_launches: launches,
            scaled_launches: 0,
            recurrence: Vec::new(),
            recorded: Vec::new(),
        };
        let mut kernels = vec![
            k("_Z11corr_kernelPfS_", 1, Some(1900.0)),
            k("_Z5smallv", 50, Some(80.0)),
        ];
        kernels.extend((0..5).map(|i| k(&format!("k{i}"), 1, Some(4.0))));
        kernels.push(k("_Z7untimedv", 3, None));
        let c = Census {
            format: 1,
            program: "./app".into(),
            path: "/w/app".into(),
            binary: "0123".into(),
            args: Vec::new(),
            unix_s: 0.0,
            launches: 58,
            unknown_launches: 2,
            kernels,
        };
        assert_eq!(
            census_summary(&c),
            "r3: program time by kernel (timed while recording): 95.0% corr_kernel \
             (1 launch, 1.90 s) · 4.0% small (50 launches, 80.0 ms) · 0.2% k0 (1 launch, 4.0 ms) · \
             0.2% k1 (1 launch, 4.0 ms) · 0.2% k2 (1 launch, 4.0 ms) · 2 more; 1 kernel(s) without \
             a timed launch (3 launches); 2 launches of kernels r3 has no registration for\n"
        );
        let mut none = c.clone();
        none.kernels.retain(|k| k.estimated_ms.is_none());
        none.unknown_launches = 0;
        assert_eq!(
            census_summary(&none),
            "r3: program time by kernel: unknown (no recorded launch has a time)\n"
        );
        let run = TimedRun {
            status: Ended::exited(0),
            timing: Some(Timing {
                format: 1,
                program: "./app".into(),
                path: "/w/app".into(),
                binary: "0123".into(),
                args: Vec::new(),
                unix_s: 0.0,
                total_ms: 0.5,
                launches: 3,
                kernels: vec![
                    KernelTiming {
                        name: "_Z5smallv".into(),
                        launches: 2,
                        ms: 0.375,
                    },
                    KernelTiming {
                        name: "(unknown)".into(),
                        launches: 1,
                        ms: 0.125,
                    },
                ],
                shipped: Vec::new(),
            }),
            untimed: 1,
            judged: Vec::new(),
        };
        let text = time_only_summary(&run, "./app");
        assert_eq!(
            text,
            "r3: GPU time measured: 0.500 ms over 3 launches (each launch between CUDA events; nothing recorded)\n\
             r3: by kernel: 75.0% small (2 launches, 0.375 ms) · 25.0% (unknown) (1 launch, 0.125 ms)\n\
             r3: note: 1 launch gave no time (launched into a CUDA graph being captured); the total leaves them out\n"
        );
        let nothing = TimedRun {
            status: Ended::exited(0),
            timing: None,
            untimed: 0,
            judged: Vec::new(),
        };
        assert!(time_only_summary(&nothing, "./app").contains("linked by r3-clang++"));
    }

    #[test]
    fn a_time_only_run_of_an_applied_build_says_which_tuned_kernels_held_up_in_the_program() {
        use crate::store::in_program::Measure;
        use crate::store::trials::InProgram;
        let judged = |name: &str, recorded_ms: f64, applied_ms: f64, kept: Kept| {
            let in_program = InProgram {
                program: "app-0123".into(),
                binary: "b".into(),
                against: Against::Census,
                recorded_ms,
                applied_ms,
                launches: 10,
                unix_s: 0.0,
            };
            Judged {
                withheld: (matches!(kept, Kept::Trials(_)) && in_program.slower())
                    .then_some(Refusal::Slower),
                measure: Measure {
                    shipped: ShippedKernel::parse(&format!("{name} sm_90 kh p1")).unwrap(),
                    in_program,
                },
                kept,
            }
        };
        let mut placed = judged("_Z6placedv", 1.0, 1.005, Kept::Trials(vec![2]));
        placed.withheld = Some(Refusal::NoGain { replay: 1.058 });
        let text = in_program_summary(&[
            judged("_Z4fastv", 2.0, 1.0, Kept::Trials(vec![3])),
            judged("_Z4slowv", 25.8, 44.9, Kept::Trials(vec![7])),
            placed,
            judged("_Z5stalev", 1.0, 1.0, Kept::NoConfirmedTrial),
        ]);
        assert_eq!(
            text,
            "r3: tuned kernels in this program, against the recorded run's census: 3 of 4 at least as fast\n\
             r3: slow ran 0.575× here (44.9 ms against 25.8 ms per launch): withheld from the next build (replay measured it faster; the program decides)\n\
             r3: placed ran 0.995× here (1.0 ms against 1.0 ms per launch): withheld from the next build (no gain here, where replay confirmed 1.058×; the program decides)\n\
             r3: note: not kept, the store has no confirmed trial of the code this build ships (tuned again since the build, or a search without confirmation): stale (1.000×)\n"
        );
        assert_eq!(in_program_summary(&[]), "");
    }

    #[test]
    fn nothing_recorded_names_the_likely_cause() {
        let ok = Ended::exited(0);
        assert!(nothing_recorded("./app", None, &ok).contains("linked by r3-clang++"));
        let killed = Ended {
            code: 139,
            signal: Some(11),
            core_dumped: false,
        };
        assert!(nothing_recorded("./app", None, &killed).contains("was killed"));
        let mut s: RunStats = serde_json::from_str(STATS).unwrap();
        s.launches = 0;
        assert!(nothing_recorded("./app", Some(&s), &ok).contains("launched no kernel"));
    }
}
