//! Many searches at once: several processes (one per GPU of a node, or the tasks of a Slurm job
//! array on many nodes) tune the kernels of one store. There is no coordinator and no static
//! shard: every worker walks the same kernel list in the same order and takes a kernel by
//! taking its trials file's lock (`claim`). A kernel another worker holds is left to it, one
//! whose search already reached its budget is passed over, and one a killed worker left half
//! done is continued by the next worker started with `--resume`. The store's invariants (one
//! writer per trials file, a torn tail cut on open) make this safe on a shared filesystem.

use crate::kernel::TrialsKey;
use crate::store::trials::{Lease, SearchEnd, TrialLog};
use crate::store::{Store, StoreError};

/// What a worker found when it tried to take one kernel's search on its GPU.
pub enum Claim {
    /// The trials file is this worker's, locked, until the log is dropped.
    Take(TrialLog),
    /// Another worker holds it; where, when its lease says.
    Busy(Option<Lease>),
    /// Its search already ended having reached `budget` trials or more.
    Done(SearchEnd),
}

/// Tries to take the search of `kernel` on `gpu` for a search of `budget` trials.
pub fn claim(
    store: &Store,
    kernel: &TrialsKey,
    gpu: &str,
    budget: u32,
) -> Result<Claim, StoreError> {
    let t0 = std::time::Instant::now();
    let claim = try_claim(store, kernel, gpu, budget);
    if let Some(path) = std::env::var_os("R3_FLEET_STATS").filter(|p| !p.is_empty()) {
        note_claim(std::path::Path::new(&path), &claim, t0.elapsed());
    }
    claim
}

/// `R3_FLEET_STATS=FILE` (scripts/bench-fleet-sim): one line a claim appended to FILE, `pid
/// outcome microseconds` (outcome `take`, `busy`, `done` or `error`), one write each, so that
/// workers appending at once do not mix their lines. What a fleet's workers spend walking past
/// kernels others hold or finished; never read by r3. A failed write is ignored.
fn note_claim(
    path: &std::path::Path,
    claim: &Result<Claim, StoreError>,
    took: std::time::Duration,
) {
    use std::io::Write;
    let outcome = match claim {
        Ok(Claim::Take(_)) => "take",
        Ok(Claim::Busy(_)) => "busy",
        Ok(Claim::Done(_)) => "done",
        Err(_) => "error",
    };
    let line = format!("{} {outcome} {}\n", std::process::id(), took.as_micros());
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}

fn try_claim(
    store: &Store,
    kernel: &TrialsKey,
    gpu: &str,
    budget: u32,
) -> Result<Claim, StoreError> {
    let path = store.trials_path(kernel, gpu);
    // A search that reached this budget is left whether or not another worker now extends it.
    if let Some(end) = store.search_end(&path)? {
        if end.stop == "budget" && end.budget >= budget {
            return Ok(Claim::Done(end));
        }
    }
    match store.open_trials(kernel, gpu) {
        Ok(log) => Ok(Claim::Take(log)),
        Err(StoreError::Busy { .. }) => Ok(Claim::Busy(store.lease(&path))),
        Err(e) => Err(e),
    }
}

/// The line a worker prints for a kernel it leaves.
pub fn left_because(label: &str, claim: &Claim) -> Option<String> {
    match claim {
        Claim::Take(_) => None,
        Claim::Busy(Some(l)) => Some(format!(
            "r3 tune: {label}: another r3 searches it (on {}, pid {}); left to it",
            l.host, l.pid
        )),
        Claim::Busy(None) => Some(format!(
            "r3 tune: {label}: another r3 searches it; left to it"
        )),
        Claim::Done(end) => Some(format!(
            "r3 tune: {label}: already searched ({} of budget {}); passed over",
            end.trials, end.budget
        )),
    }
}

/// The GPUs `--gpus` names, as written: `all`, or ordinals (repeats dropped, order kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuSpec {
    All,
    Ordinals(Vec<usize>),
}

/// `--gpus` as the command line parses it: a value that names no GPU is a usage error about
/// the value, before any GPU is probed (else a typo on a machine without GPUs reads "no GPU").
pub fn parse_gpu_spec(spec: &str) -> Result<GpuSpec, String> {
    if spec == "all" {
        return Ok(GpuSpec::All);
    }
    let mut out = Vec::new();
    for part in spec.split(',') {
        let n: usize = part.trim().parse().map_err(|_| {
            format!("`{part}` is not a GPU ordinal; give `all` or ordinals such as 0 or 0,1")
        })?;
        if !out.contains(&n) {
            out.push(n);
        }
    }
    Ok(GpuSpec::Ordinals(out))
}

impl GpuSpec {
    /// The ordinals this names on a machine the driver reports `count` GPUs on.
    pub fn ordinals(&self, count: usize) -> Result<Vec<usize>, String> {
        if count == 0 {
            return Err("--gpus: no GPU on this machine".into());
        }
        let GpuSpec::Ordinals(list) = self else {
            return Ok((0..count).collect());
        };
        match list.iter().find(|&&n| n >= count) {
            Some(n) => Err(format!(
                "--gpus: GPU {n} does not exist ({count} on this machine, 0 to {})",
                count - 1
            )),
            None => Ok(list.clone()),
        }
    }
}

/// The command line of one worker of `--gpus`: the same `r3 tune` with `--gpus` and its value
/// left out and `--resume` added (a worker continues what a killed one left), run with
/// `CUDA_VISIBLE_DEVICES` naming its GPU.
pub fn worker_args(args: &[String]) -> Vec<String> {
    let mut out = without_option(args, "--gpus");
    if !out.iter().any(|a| a == "--resume") {
        out.push("--resume".into());
    }
    out
}

/// `args` for the workers of a fleet started now: where they spend a deadline that is not
/// resumed, each worker is told this fleet's allocation (`--deadline-id id`), so the first to
/// come starts it, the others (and the same job array submitted again) continue it, and an
/// allocation left by an earlier fleet is not continued.
pub fn fresh_deadline(args: &[String], id: &str) -> Vec<String> {
    let has = |name: &str| {
        let joined = format!("{name}=");
        args.iter().any(|a| a == name || a.starts_with(&joined))
    };
    let mut out = args.to_vec();
    if has("--deadline") && !has("--resume") && !has("--deadline-id") {
        out.extend(["--deadline-id".to_owned(), id.to_owned()]);
    }
    out
}

/// A new fleet allocation's id: 64 random bits, in hex.
pub fn new_allocation_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// `args` without option `name` and its value (`name VALUE` or `name=VALUE`).
pub fn without_option(args: &[String], name: &str) -> Vec<String> {
    let joined = format!("{name}=");
    let mut out = Vec::new();
    let mut skip = false;
    for a in args {
        if std::mem::take(&mut skip) {
            continue;
        }
        if a == name {
            skip = true;
        } else if !a.starts_with(&joined) {
            out.push(a.clone());
        }
    }
    out
}

/// What the workers of `gpus` share, one line per GPU model among them: a kernel's trials are
/// keyed by the GPU as trials name it (`GpuInfo::trials_name`: model and architecture), so the
/// GPUs of one model search each kernel once between them (its trials file's lock), and apply,
/// which takes a kernel's winner by the kernel's content hash (compiled for one architecture)
/// from its latest search (or `R3_APPLY_GPU`'s: `store::winner::chosen_search`), ships what one
/// of them found on every GPU of that architecture.
pub fn shared_search_lines(gpus: &[crate::replay::device::GpuInfo]) -> Vec<String> {
    let mut models: Vec<(String, String, Vec<usize>)> = Vec::new();
    for g in gpus {
        let name = g.trials_name();
        match models.iter_mut().find(|(n, _, _)| *n == name) {
            Some((_, _, ordinals)) => ordinals.push(g.ordinal),
            None => models.push((name, g.sm(), vec![g.ordinal])),
        }
    }
    models
        .into_iter()
        .map(|(name, sm, ordinals)| {
            let which: Vec<String> = ordinals.iter().map(usize::to_string).collect();
            let (gpus, share) = if ordinals.len() > 1 {
                ("GPUs", "share each kernel's search")
            } else {
                ("GPU", "keeps each kernel's search")
            };
            format!(
                "r3 tune: {gpus} {} ({name}) {share}, kept as \"{name}\": a kernel searched on one \
                 of them ships on every {sm} GPU (apply takes a kernel's winner by its content hash, \
                 compiled for {sm}, from its latest search, or R3_APPLY_GPU's)",
                which.join(",")
            )
        })
        .collect()
}

/// Runs one worker per GPU of `gpus` (this executable, `args` as `worker_args` makes them) and
/// waits for all; the exit status is the worst of theirs.
pub fn run_per_gpu(args: &[String], gpus: &[usize]) -> std::io::Result<i32> {
    let exe = std::env::current_exe()?;
    let worker = worker_args(args);
    if let crate::replay::device::GpuStatus::Present { gpus: all, .. } =
        crate::replay::device::probe()
    {
        let used: Vec<_> = all
            .into_iter()
            .filter(|g| gpus.contains(&g.ordinal))
            .collect();
        for line in shared_search_lines(&used) {
            eprintln!("{line}");
        }
    }
    let mut children = Vec::new();
    for g in gpus {
        eprintln!("r3 tune: worker on GPU {g}");
        children.push(
            std::process::Command::new(&exe)
                .args(&worker[1..])
                .env("CUDA_VISIBLE_DEVICES", g.to_string())
                .spawn()?,
        );
    }
    let mut code = 0;
    for mut c in children {
        code = code.max(c.wait()?.code().unwrap_or(1));
    }
    Ok(code)
}

/// A Slurm batch script: a job array of `tasks` tasks, one GPU each, every task a worker
/// (`r3 tune` with `args`, `--resume` added) on the shared store at `store`.
pub fn sbatch_script(exe: &str, store: &str, args: &[String], tasks: u32) -> String {
    let quote = |s: &str| {
        if s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
        {
            s.to_owned()
        } else {
            format!("'{}'", s.replace('\'', r"'\''"))
        }
    };
    let worker: Vec<String> = worker_args(args).iter().map(|a| quote(a)).collect();
    format!(
        "#!/bin/bash
#SBATCH --job-name=r3-tune
#SBATCH --array=0-{last}
#SBATCH --ntasks=1
#SBATCH --gpus-per-task=1
#SBATCH --output=r3-tune-%A_%a.out
# Written by `r3 tune --emit-sbatch`. Every task is a worker on one GPU: it walks the store's
# kernels in order and searches each one no other task holds (the trials file's lock), so the
# tasks share the work without a shard list. A task killed (scancel, node failure) leaves its
# kernel's trials intact: submit this script again and the next worker continues them
# (--resume). `r3 status` shows where every search stands.
set -euo pipefail
export R3_STORE={store}
exec {exe} {args}
",
        last = tasks.saturating_sub(1),
        store = quote(store),
        exe = quote(exe),
        args = worker[1..].join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_gpus_of_one_model_say_they_share_each_kernels_search_and_winner() {
        let gpu = |ordinal, name: &str, cc| crate::replay::device::GpuInfo {
            ordinal,
            name: name.into(),
            cc,
            mem_bytes: 0,
            uuid: String::new(),
            sms: 0,
        };
        let node = [
            gpu(0, "NVIDIA H200", (9, 0)),
            gpu(1, "NVIDIA H200", (9, 0)),
            gpu(2, "NVIDIA H100 80GB HBM3", (9, 0)),
        ];
        let lines = shared_search_lines(&node);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with(
                "r3 tune: GPUs 0,1 (NVIDIA H200 (sm_90)) share each kernel's search, kept as \"NVIDIA H200 (sm_90)\": a kernel searched on one of them ships on every sm_90 GPU"
            ),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with("r3 tune: GPU 2 (NVIDIA H100 80GB HBM3 (sm_90)) keeps"),
            "{}",
            lines[1]
        );
    }

    #[test]
    fn gpus_are_all_or_ordinals_that_exist() {
        let on = |spec: &str, count| parse_gpu_spec(spec).unwrap().ordinals(count);
        assert_eq!(on("all", 2).unwrap(), [0, 1]);
        assert_eq!(on("1,0,1", 2).unwrap(), [1, 0]);
        assert!(on("2", 2).unwrap_err().contains("does not exist"));
        assert!(on("all", 0).unwrap_err().contains("no GPU"));
        assert!(on("0,1", 0).unwrap_err().contains("no GPU"));
    }

    #[test]
    fn a_gpus_value_naming_no_gpu_is_refused_whatever_the_machine() {
        for spec in ["abc", "", "0,", "1;2", "-1"] {
            let err = parse_gpu_spec(spec).unwrap_err();
            assert!(
                err.contains("`all`") && err.contains("0,1"),
                "{spec}: {err}"
            );
        }
    }

    #[test]
    fn a_worker_is_the_same_tune_without_gpus_and_with_resume() {
        let args = strings(&["r3", "tune", "--all", "--gpus", "0,1", "--budget", "50"]);
        assert_eq!(
            worker_args(&args),
            strings(&["r3", "tune", "--all", "--budget", "50", "--resume"])
        );
        let args = strings(&["r3", "tune", "--gpus=all", "--all", "--resume"]);
        assert_eq!(
            worker_args(&args),
            strings(&["r3", "tune", "--all", "--resume"])
        );
    }

    #[test]
    fn a_fleet_that_spends_a_new_deadline_names_its_allocation() {
        let args = strings(&["r3", "tune", "--all", "--deadline", "30m"]);
        assert_eq!(
            fresh_deadline(&args, "ab12"),
            strings(&[
                "r3",
                "tune",
                "--all",
                "--deadline",
                "30m",
                "--deadline-id",
                "ab12"
            ])
        );
        // Resumed, it continues whatever is stored; without a deadline there is nothing to name.
        let resumed = strings(&["r3", "tune", "--all", "--deadline=30m", "--resume"]);
        assert_eq!(fresh_deadline(&resumed, "ab12"), resumed);
        let budget = strings(&["r3", "tune", "--all", "--budget", "50"]);
        assert_eq!(fresh_deadline(&budget, "ab12"), budget);
        assert_ne!(new_allocation_id(), new_allocation_id());
    }

    #[test]
    fn the_batch_script_runs_one_worker_per_task() {
        let args = strings(&[
            "r3",
            "tune",
            "--all",
            "--budget",
            "100",
            "--emit-sbatch",
            "8",
            "--time",
            "20m",
        ]);
        // What the CLI passes: its own flag taken out.
        let args = without_option(&args, "--emit-sbatch");
        insta::assert_snapshot!(sbatch_script(
            "/opt/r3/bin/r3",
            "/shared/proj/r3 store",
            &args,
            8
        ));
    }
}
