//! The command line of `r3` as clap parses it: commands, options, and the parsers of their
//! values. It lives in the library, not beside `main`, so that its tests run: the binary has
//! no test target of its own, which would link LLVM once more (`Cargo.toml`, `[[bin]]`).

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// `r3 --version`: the version and the commit it was built from (as `r3 doctor` shows it).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("R3_GIT_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "r3",
    version = VERSION,
    term_width = 100,
    about = "Record, Remix, Replay: tune CUDA kernels by searching LLVM pass pipelines",
    long_about = "r3 records each CUDA kernel's device IR while r3-clang++ compiles your program and each \
                  launch's device inputs while it runs; it then searches pass pipelines, IR rewrites and \
                  codegen/launch knobs per kernel, replaying every candidate on the GPU against the \
                  recorded inputs, and rebuilds the program with the winners.\n\n\
                  Called as r3-clang or r3-clang++ (links installed beside r3) it is a drop-in clang."
)]
pub struct Cli {
    /// The store to use (default: R3_STORE, then the nearest .r3/ above the working directory,
    /// then ~/.local/share/r3).
    #[arg(
        long = "r3-store",
        global = true,
        value_name = "DIR",
        help_heading = "Global options"
    )]
    pub store: Option<PathBuf>,
    /// CUDA SDK root (default: R3_CUDA_PATH, then scripts/setup's cache, then CUDA_HOME, /usr/local/cuda).
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        help_heading = "Global options"
    )]
    pub cuda_path: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Show what r3 found: LLVM, clang, the CUDA SDK, the GPU and driver, the store; and how to fix what is missing.
    Doctor {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the kernels recorded in the store, grouped by source file (old versions, which no
    /// current build contains, last).
    Kernels {
        /// Print the kernels as JSON (grouped by source file, with their shares of programs).
        #[arg(long)]
        json: bool,
        /// Demangled names in full (by default long template arguments show as <…>).
        #[arg(long)]
        full_names: bool,
    },
    /// Where the store's searches stand: running (host, process), finished, stopped by a kill,
    /// or waiting (recorded, not searched yet), with trials and the best speedup so far.
    Status {
        /// Print every search, waiting kernel and program as JSON.
        #[arg(long)]
        json: bool,
        /// Demangled names in full (by default long template arguments show as <…>).
        #[arg(long)]
        full_names: bool,
    },
    /// Remove what edited kernels left: old versions (no current build contains them), their
    /// recordings, and dispatch headers only they are in. A dry run unless --yes.
    ///
    /// An old version's trials and evolve attempts are kept, with the kernel they name, unless
    /// --trials: they are what GPU time bought, and reverting the edit brings the same kernel
    /// (and its searches) back. Its recordings go in any case.
    Gc {
        /// Remove them (without it, only say what would go and how many bytes).
        #[arg(long)]
        yes: bool,
        /// Old versions' trials and evolve attempts too, and so the kernels themselves.
        #[arg(long)]
        trials: bool,
    },
    /// Run a program built by r3-clang++ and record each kernel launch's device inputs and outputs.
    Record {
        /// Distinct launches to record per kernel, the first ones; and one more, later, that
        /// repeats an earlier launch and is larger than every recorded one (the launch a solver
        /// or a timing loop repeats).
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
        launches: u32,
        /// Stop recording after this much recording time (e.g. 90s, 10m, 1h 30m; a bare number
        /// is seconds); the program runs on with later launches unrecorded.
        #[arg(long, value_name = "TIME")]
        max_time: Option<String>,
        /// Stop recording a kernel once its recordings take this many MiB in the store.
        #[arg(long, value_name = "MIB")]
        kernel_limit: Option<u64>,
        /// Record a launch as not replayable when what it can reach exceeds this many MiB
        /// (default 4096).
        #[arg(long, value_name = "MIB")]
        launch_limit: Option<u64>,
        /// Snapshot every live allocation, not only what each launch can reach.
        #[arg(long)]
        full_snapshot: bool,
        /// Warm re-launches for the in-app time of each recorded launch.
        #[arg(long, value_enum, default_value_t = WarmRelaunch::Auto)]
        warm: WarmRelaunch,
        /// No progress lines while the program runs (the summary is still printed).
        #[arg(long)]
        quiet: bool,
        /// Do not replay the new recordings' -O3 baselines after the run to check that each
        /// reproduces (`r3 tune` still checks a recording before it searches it).
        #[arg(long)]
        no_verify: bool,
        /// Do not sync recordings to the disk before they appear: the program's exit does not
        /// wait for the disk, and after a crash of the machine a short file is found by its sum.
        #[arg(long)]
        no_sync: bool,
        /// Record nothing: time every launch with CUDA events, the build as it is (its variants
        /// included), and keep the program's GPU time by kernel in the store. No check follows.
        #[arg(long)]
        time_only: bool,
        /// The program and its arguments.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Search pass pipelines and codegen/launch knobs per kernel, replaying candidates on the GPU.
    Tune {
        /// Kernels (names or hashes) to tune.
        kernels: Vec<String>,
        /// Tune every recorded kernel.
        #[arg(long)]
        all: bool,
        /// Trials per kernel, the -O3 baseline included.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
        budget: u32,
        /// Stop after this much time per kernel (e.g. 90s, 20m, 1h 30m; a bare number is seconds).
        #[arg(long, value_name = "T")]
        time: Option<String>,
        /// Search strategy: bo, random, local, evolution, exhaustive (all of --space grid).
        #[arg(long, default_value = "bo")]
        strategy: String,
        /// The search space: free (pass sequences as edits of -O3, with the knobs) or grid
        /// (the finite space of passes/grid.toml: pipeline variants times every knob setting).
        #[arg(long, default_value = "free", value_parser = ["free", "grid"])]
        space: String,
        /// Seed of the search's random stream: the same seed, space and trials ask the same
        /// candidates (a resume needs the recorded one).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Candidates per round, compiled in parallel (default: the number of cores).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        batch: Option<u32>,
        /// Continue the trials recorded for the kernel on this GPU.
        #[arg(long)]
        resume: bool,
        /// Search from scratch: do not learn from the store's earlier searches (other kernels
        /// on this GPU, this kernel on other GPUs), which bo otherwise starts from.
        #[arg(long)]
        no_transfer: bool,
        /// Do not start from r3's shipped recipes (passes/recipes.toml: configurations known to
        /// matter on GPUs, those whose preconditions the kernel's code meets first).
        #[arg(long)]
        no_recipes: bool,
        /// Skip the ablation round after the search (the best pipeline with one pass removed,
        /// each, measured so that `r3 report` can show which passes matter).
        #[arg(long)]
        no_ablate: bool,
        /// Do not measure nvcc's build of each kernel (by default, where nvcc is found, its
        /// -O3 code of the kernel's source is one more candidate, measured beside clang's -O3,
        /// and apply ships it where it wins).
        #[arg(long)]
        no_nvcc: bool,
        /// With --deadline: try no source rewrites (by default, a kernel that matters gets
        /// rewrite attempts of `r3 evolve`'s proposer once warm, where they are worth more a
        /// second than more compiler trials: the rules proposer, or the model R3_LLM_URL names).
        #[arg(long, requires = "deadline")]
        no_rewrites: bool,
        /// Evaluate against a landscape table (JSON) instead of the GPU; repeated, one kernel
        /// per table (searched as `--all` searches: each table a worker has not claimed).
        #[arg(long, value_name = "TABLE.json")]
        simulate: Vec<PathBuf>,
        /// With --simulate: key the search by this name, which need not be a stored kernel's
        /// (a kernel named on its own must be one; with neither, the table's own name is used).
        #[arg(long, value_name = "NAME", requires = "simulate", conflicts_with_all = ["kernels", "all"])]
        landscape_name: Option<String>,
        /// Demangled names in full in --dry-run's table (by default long template arguments
        /// show as <…>).
        #[arg(long)]
        full_names: bool,
        /// One worker per GPU of this node (`all`, or ordinals such as 0,1): each takes the
        /// kernels no other worker holds, so identical GPUs share the work.
        #[arg(long, value_name = "all|0,1,...", value_parser = crate::remix::fleet::parse_gpu_spec)]
        gpus: Option<crate::remix::fleet::GpuSpec>,
        /// Print a Slurm batch script for a job array of N tasks, one GPU each, every task a
        /// worker on this store (a shared filesystem), and exit.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        emit_sbatch: Option<u32>,
        #[command(flatten)]
        measure: MeasureHow,
        /// The kernels are correct for any 1-D block size: let the search change it (grid recomputed).
        #[arg(long)]
        block_size_agnostic: bool,
        /// Offer r3's e-graph rewriter (r3-egraph) as a pass.
        #[arg(long)]
        egraph: bool,
        /// Do not offer specialization (the searched launch's scalar arguments and launch
        /// dimensions folded into constants; such code ships behind a guard on those values).
        #[arg(long)]
        no_specialize: bool,
        /// No GPU needed: lower `--budget` candidates per stored kernel to PTX and check them
        /// with ptxas; nothing is timed.
        #[arg(long)]
        dry_run: bool,
        /// One wall-clock allowance (e.g. 30m) for the whole store (--all) or program
        /// (--program), spent where the program's GPU time goes: kernels by their share of it
        /// (from `r3 record`'s launch census) times the speedup expected, in slices, more to
        /// searches still improving; stops early when the predicted whole-program gain stops
        /// moving. Continues the store's trials (as --resume); with --resume, also the last
        /// deadline's clock and allocation. Each kernel's trials stay within --budget.
        #[arg(long, value_name = "T")]
        deadline: Option<String>,
        /// With --deadline: the kernels of this program only, weighted by their share of its
        /// GPU time: the executable as recorded (every workload of it: each run with other
        /// arguments), or one workload as shell words ('./app -k 1').
        #[arg(long, value_name = "EXE [ARGS]")]
        program: Option<String>,
        /// Time every candidate in full (by default one clearly slower than the search's best
        /// is timed no further: a long kernel's losers cost one pair of runs).
        #[arg(long)]
        no_race: bool,
        /// With --deadline, in a worker of --gpus or --emit-sbatch: the allocation its fleet
        /// started, continued by every worker (written by r3, not by hand).
        #[arg(long, value_name = "ID", hide = true)]
        deadline_id: Option<String>,
    },
    /// Source rewrites on top of the compiler search, each tuned and checked on the recordings
    ///
    /// A model (R3_LLM_URL, R3_LLM_MODEL, R3_LLM_API_KEY) or r3's rules propose rewrites of the
    /// kernel's code; each is compiled with the recorded command, tuned and validated against
    /// the recorded launches. r3 never edits your source: winners are diffs, shown by
    /// `r3 report`.
    Evolve {
        /// Kernels (names or hashes) to evolve.
        kernels: Vec<String>,
        /// Every recorded kernel.
        #[arg(long)]
        all: bool,
        /// Attempts per kernel in all (repairs included, earlier runs counted).
        #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..))]
        budget: u32,
        /// Trials of the compiler search on each variant, its -O3 included.
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
        inner_budget: u32,
        /// Stop each variant's compiler search after this much time (e.g. 20s).
        #[arg(long, value_name = "T")]
        inner_time: Option<String>,
        /// Repair rounds after a compile error (the diagnostics go back to the model).
        #[arg(long, default_value_t = 2)]
        repairs: u32,
        /// Who proposes: llm (the endpoint R3_LLM_URL names), rules (r3's built-in rewrites),
        /// or auto (llm where R3_LLM_URL is set, else rules).
        #[arg(long, default_value = "auto", value_parser = ["auto", "llm", "rules"])]
        proposer: String,
        /// Tokens the model may use in this run, prompts and answers together.
        #[arg(long, default_value_t = 200_000)]
        max_tokens: u64,
        /// Seed of the random stream that picks the parent each rewrite is proposed from.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Continue the attempts recorded for the kernel (measuring any not measured here).
        #[arg(long)]
        resume: bool,
        /// Compile and store rewrites without measuring them (no GPU needed); a later
        /// `--resume` on a GPU machine measures them.
        #[arg(long)]
        no_measure: bool,
        /// Measure the stored rewrites not yet measured on this GPU, propose none (no clang
        /// needed).
        #[arg(long, conflicts_with = "no_measure")]
        measure_only: bool,
        /// Judge variants by a script (JSON: default_speedup, rules of contains/speedup/fails)
        /// instead of the GPU; verdicts are marked simulated.
        #[arg(long, value_name = "SCRIPT.json")]
        simulate: Option<PathBuf>,
        /// Longest a compile of a rewrite may take (e.g. 120s).
        #[arg(long, default_value = "120s")]
        compile_timeout: String,
        #[command(flatten)]
        measure: MeasureHow,
    },
    /// Run recorded launches with a pipeline or configuration; check the outputs and time them against -O3.
    Replay {
        /// Kernel: store hash, mangled name, or part of the demangled name.
        kernel: Option<String>,
        /// Replay every replayable recording in the store.
        #[arg(long, conflicts_with = "kernel")]
        all: bool,
        /// Recording id (`<kernel key>/<launch>`, see `r3 record`); default: every recording of the kernel.
        #[arg(long)]
        record: Option<String>,
        /// Pass pipeline in `opt -passes=` syntax (default: the -O3 baseline itself).
        #[arg(long, conflicts_with = "config")]
        pipeline: Option<String>,
        /// A candidate configuration as JSON (pipeline, codegen_opt, max_threads, ...).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Most timed repetitions (fewer once the median is known within 1%).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
        repeat: u32,
        /// L2 state of the timed runs: auto (the program's own where known, else cold), warm, cold.
        #[arg(long, default_value = "auto")]
        l2: crate::replay::l2::Policy,
        /// Tolerance for outputs, e.g. f32:rel=1e-5 or f64:ulp=4 (default: exact).
        #[arg(long)]
        tolerance: Option<crate::replay::validate::Tolerance>,
        /// Build the PTX and report static statistics only (works without a GPU).
        #[arg(long)]
        dry_run: bool,
        /// Testing r3 itself: also run the candidate broken on purpose, in the same batch, to
        /// check that replay catches it; repeatable. The faults are listed in docs/measurement.md.
        #[arg(long, value_name = "FAULT")]
        mutate: Vec<crate::ir::mutate::Mutation>,
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
    },
    #[command(name = "__replay-worker", hide = true)]
    ReplayWorker,
    #[command(name = "__lower", hide = true)]
    LowerWorker,
    #[command(name = "__capture", hide = true)]
    CaptureWorker,
    /// For r3's developers: a deadline's allocation file as it stood SECONDS into its run, and
    /// what the allocation decides there and why (`remix::deadline::explain`).
    #[command(name = "__deadline-at", hide = true)]
    DeadlineAt {
        /// An allocation: the store's deadline/<gpu>/<scope>.json, or allocation-deadline.json
        /// of a bench run.
        file: PathBuf,
        /// Seconds into the run (the allocation's own clock).
        seconds: f64,
    },
    /// Pass-order reports: baseline vs best, pipeline diff, pass importance, convergence.
    Report {
        /// Kernels (names, mangled or demangled, or hashes); default: every kernel with trials.
        kernels: Vec<String>,
        /// term, md, html (one self-contained file) or json (docs/report-schema.md).
        #[arg(long, default_value = "term")]
        format: crate::report::render::Format,
        /// Write the report to FILE instead of standard output.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Demangled names in full in tables and titles (by default long template arguments
        /// show as <…>; JSON has them in full either way).
        #[arg(long)]
        full_names: bool,
    },
    /// Each tuned kernel's winner as one JSON file to commit (docs/export-schema.md); build from
    /// it with `r3-clang++ --r3-apply=FILE`, no store needed.
    Export {
        /// Write to FILE (atomically) instead of standard output.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// Which GPU's searches, when several GPUs of one arch tuned a kernel (part of its name).
        #[arg(long, value_name = "NAME")]
        gpu: Option<String>,
        /// Ship launch bounds (.maxntid) too: only right if the program never launches a kernel
        /// with more threads per block than when it was recorded.
        #[arg(long)]
        launch_bounds: bool,
        /// r3 (the winners file --r3-apply reads), t4 (one kernel's trials in the auto-tuning
        /// community's T4 results schema, as Kernel Tuner reads them) or proteus (the
        /// PROTEUS_TUNED_KERNELS JSON).
        #[arg(long, default_value = "r3", value_parser = ["r3", "t4", "proteus"])]
        format: String,
        /// The kernel whose trials --format t4 writes (a hash, prefix or name).
        #[arg(long, value_name = "KERNEL")]
        kernel: Option<String>,
        /// Check a winners file without building: each entry as apply would take or refuse it
        /// (guards against candidates, folded values against the store's kernels); exit 1 if
        /// any entry would be refused.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["output", "kernel"])]
        check: Option<PathBuf>,
    },
    /// The pass catalog and pipeline presets (passes/*.toml).
    Passes {
        /// Print a preset's full pipeline text, e.g. O3.
        #[arg(long, value_name = "PRESET")]
        print: Option<String>,
        /// The shipped recipes (passes/recipes.toml), what every search measures first, and
        /// the code traits their preconditions name.
        #[arg(long)]
        recipes: bool,
    },
    /// Print the path of a CMake toolchain file that builds with r3's drivers (written on demand).
    CmakeToolchain,
    /// Optimize a device IR file (.ll or .bc) with a pipeline and lower it to PTX.
    Ptx {
        /// Device LLVM IR, textual or bitcode.
        input: PathBuf,
        /// Pass pipeline in `opt -passes=` syntax; empty for none.
        #[arg(long, default_value = "default<O3>")]
        pipeline: String,
        /// GPU architecture (an NVPTX processor of the LLVM linked in: sm_90, or 90).
        #[arg(
            long,
            visible_alias = "cuda-gpu-arch",
            default_value = "sm_90",
            value_parser = parse_sm
        )]
        sm: String,
        /// PTX ISA version (LLVM feature name, e.g. ptx80); default: what the IR asks for.
        #[arg(long)]
        ptx: Option<String>,
        /// Backend optimization level, 0 to 3.
        #[arg(long, default_value_t = 3)]
        opt_level: u8,
        /// Where to write the PTX (default: standard output).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Print instruction counts and entries to standard error.
        #[arg(long)]
        stats: bool,
    },
    /// Run the e-graph rewriter (r3-egraph) on a kernel or IR file; print the changed functions
    /// before and after, and statistics.
    Egraph {
        /// A device IR file (.ll or .bc), or a recorded kernel (name, demangled name or hash).
        input: String,
        /// Pipeline run before the rewriter ('' for none).
        #[arg(long, default_value = "default<O3>")]
        pipeline_before: String,
        /// Rewriter options, as inside r3-egraph<…>: e.g. 'iters=8;nodes=20000;time-ms=2000'.
        #[arg(long, default_value = "")]
        options: String,
        /// Print the result (functions before and after, statistics) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell's completion script for r3 (scripts/setup installs bash's).
    Completions {
        /// The shell: bash, zsh or fish.
        #[arg(value_enum)]
        shell: crate::shell::Shell,
    },
    /// Print r3's man page (roff; scripts/setup installs it as share/man/man1/r3.1).
    Man,
    /// End-to-end check: lower a built-in saxpy kernel to PTX, and on a GPU load, run, verify and time it.
    Selftest {
        /// Fail (exit 1) when no GPU is present instead of stopping after PTX.
        #[arg(long)]
        require_gpu: bool,
        /// Lower for this architecture instead of the GPU present (sm_90, or 90).
        #[arg(long, visible_alias = "cuda-gpu-arch", value_parser = parse_sm)]
        sm: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// `--warm`: whether a recorded launch is re-run three times, warm, for the in-app time
/// (`record::WarmRelaunch`, which knows no clap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WarmRelaunch {
    /// When they cost under 50 ms (estimated from the first launch and the bytes it changed).
    Auto,
    Always,
    Never,
}

impl From<WarmRelaunch> for crate::record::WarmRelaunch {
    fn from(w: WarmRelaunch) -> Self {
        match w {
            WarmRelaunch::Auto => crate::record::WarmRelaunch::Auto,
            WarmRelaunch::Always => crate::record::WarmRelaunch::Always,
            WarmRelaunch::Never => crate::record::WarmRelaunch::Never,
        }
    }
}

/// How candidates are measured: `r3 tune`'s and `r3 evolve`'s flags.
#[derive(clap::Args)]
pub struct MeasureHow {
    /// Most timed repetitions per measurement (fewer once the median is known within 1%).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// L2 state of the timed runs: auto (the program's own, from its later identical
    /// launches, where it made any on this GPU model; else cold), warm, or cold.
    #[arg(long, default_value = "auto")]
    pub l2: crate::replay::l2::Policy,
    /// Accept outputs within this tolerance (e.g. f32:rel=1e-5); also lets the search try fast-math.
    #[arg(long)]
    pub tolerance: Option<crate::replay::validate::Tolerance>,
    /// Screen long kernels: a kernel of 50 ms or more a launch, over enough blocks, has its
    /// candidates timed first on a prefix of its grid, and only those not clearly slower than
    /// the best there are checked and timed on the whole launch. The screen is held to the
    /// whole launch as it goes and turns off where they disagree. Off by default: on an H100 it
    /// saved no time where racing already cuts losers short, and a GEMM's first rows misread
    /// its speedups (docs/measurement.md).
    #[arg(long)]
    pub screen: bool,
}

impl MeasureHow {
    pub fn measure(&self) -> crate::remix::session::Measure {
        crate::remix::session::Measure {
            repeat: self.repeat,
            l2: self.l2,
            tolerance: self.tolerance,
            screen: self.screen,
        }
    }
}

/// `--sm` (alias `--cuda-gpu-arch`, as clang spells it): `sm_90`, or `90` as CMake's
/// CUDA_ARCHITECTURES writes it, checked against the NVPTX backend linked in.
fn parse_sm(s: &str) -> Result<String, String> {
    let sm = if s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("sm_{s}")
    } else {
        s.to_owned()
    };
    crate::lower::check_sm(&sm)
        .map(|()| sm)
        .map_err(|e| e.to_string())
}

/// A duration option's value: humantime's forms (`90s`, `20m`, `1h 30m`, `1h30m`, `1.5h`,
/// `2days`), or a bare number of seconds (`90`, `2.5`), as r3 has always taken.
pub fn parse_duration(flag: &str, s: &str) -> Result<std::time::Duration> {
    if let Some(d) = s
        .trim()
        .parse::<f64>()
        .ok()
        .and_then(|secs| std::time::Duration::try_from_secs_f64(secs).ok())
    {
        return Ok(d);
    }
    humantime::parse_duration(s).map_err(|e| {
        anyhow::anyhow!(
            "{flag} {s}: not a duration ({e}); fix: seconds, or numbers with units, e.g. 90s, 20m, 1h30m or '1h 30m'"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::{CommandFactory, Parser as _};

    /// Every option and argument of every command says what it is for in `--help`.
    #[test]
    fn every_option_has_a_description() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                let builtin = matches!(a.get_id().as_str(), "help" | "version");
                if !builtin && !a.is_hide_set() && a.get_help().is_none() {
                    missing.push(format!("{path} {}", a.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "r3", &mut missing);
        assert!(
            missing.is_empty(),
            "options without a description: {missing:#?}"
        );
    }

    /// What `r3 ARGS` would print for --help.
    fn help(args: &[&str]) -> String {
        let e = Cli::try_parse_from(std::iter::once("r3").chain(args.iter().copied()))
            .err()
            .expect("--help ends the parse");
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
        e.to_string()
    }

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("r3").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    /// Issue 36, item 9: the store and the CUDA SDK are options of r3, not of each command:
    /// listed once, under their own heading, and taken before or after the command's name.
    #[test]
    fn global_options_are_listed_once_under_their_heading() {
        for args in [&["--help"][..], &["tune", "--help"], &["replay", "-h"]] {
            let text = help(args);
            let (own, global) = text
                .split_once("Global options:")
                .unwrap_or_else(|| panic!("{args:?}: no Global options heading:\n{text}"));
            for opt in ["--r3-store", "--cuda-path"] {
                assert!(
                    !own.contains(opt),
                    "{args:?}: {opt} among the command's own:\n{text}"
                );
                assert_eq!(global.matches(opt).count(), 1, "{args:?}: {opt}:\n{text}");
            }
        }
        for args in [
            &["tune", "--r3-store", "S", "--cuda-path", "C", "k"][..],
            &["--r3-store", "S", "--cuda-path", "C", "tune", "k"],
            &["--r3-store", "S", "tune", "k", "--cuda-path", "C"],
        ] {
            let cli = parse(args);
            assert_eq!(cli.store.as_deref(), Some(std::path::Path::new("S")));
            assert_eq!(cli.cuda_path.as_deref(), Some(std::path::Path::new("C")));
            assert!(matches!(&cli.command, super::Cmd::Tune { kernels, .. } if kernels == &["k"]));
        }
    }

    /// `--mutate` breaks candidates on purpose to test replay: its faults are in
    /// docs/measurement.md, every one of them, and not in the help users read.
    #[test]
    fn mutate_faults_are_documented_not_listed_in_help() {
        let docs = include_str!("../docs/measurement.md");
        for text in [help(&["replay", "--help"]), help(&["replay", "-h"])] {
            assert!(text.contains("--mutate <FAULT>"), "{text}");
            assert!(text.contains("docs/measurement.md"), "{text}");
            assert!(
                !text.contains("drop-store") && !text.contains("endless-loop"),
                "{text}"
            );
        }
        for m in crate::ir::mutate::Mutation::ALL {
            let name = m.name();
            assert!(
                docs.contains(&format!("`{name}`")),
                "{name} not in docs/measurement.md"
            );
            let cli = parse(&["replay", "k", "--mutate", name]);
            assert!(
                matches!(cli.command, super::Cmd::Replay { ref mutate, .. } if mutate == &[*m])
            );
        }
        let e = Cli::try_parse_from(["r3", "replay", "k", "--mutate", "drop-stores"])
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("no fault 'drop-stores'") && e.contains("drop-store, change-constant"),
            "{e}"
        );
    }

    /// `--cuda-gpu-arch` (clang's name) is `--sm`, and both take `sm_90` and `90`.
    #[test]
    fn cuda_gpu_arch_is_sm_in_either_form() {
        let ptx_sm = |args: &[&str]| match parse(args).command {
            super::Cmd::Ptx { sm, .. } => sm,
            _ => unreachable!(),
        };
        assert_eq!(ptx_sm(&["ptx", "k.ll"]), "sm_90");
        assert_eq!(ptx_sm(&["ptx", "k.ll", "--sm", "sm_80"]), "sm_80");
        assert_eq!(ptx_sm(&["ptx", "k.ll", "--sm", "90a"]), "sm_90a");
        assert_eq!(
            ptx_sm(&["ptx", "k.ll", "--cuda-gpu-arch", "sm_90a"]),
            "sm_90a"
        );
        assert_eq!(ptx_sm(&["ptx", "k.ll", "--cuda-gpu-arch=80"]), "sm_80");
        let selftest_sm = |args: &[&str]| match parse(args).command {
            super::Cmd::Selftest { sm, .. } => sm,
            _ => unreachable!(),
        };
        assert_eq!(
            selftest_sm(&["selftest", "--cuda-gpu-arch", "90"]).as_deref(),
            Some("sm_90")
        );
        assert_eq!(
            selftest_sm(&["selftest", "--sm", "sm_80"]).as_deref(),
            Some("sm_80")
        );
        for args in [
            &["ptx", "k.ll", "--cuda-gpu-arch", "banana"][..],
            &["selftest", "--sm", "1"],
        ] {
            let e = Cli::try_parse_from(std::iter::once("r3").chain(args.iter().copied()))
                .err()
                .unwrap()
                .to_string();
            assert!(
                e.contains("not a GPU architecture") && e.contains("sm_90"),
                "{e}"
            );
        }
        for cmd in ["ptx", "selftest"] {
            let text = help(&[cmd, "--help"]);
            assert!(text.contains("--cuda-gpu-arch"), "{cmd}: {text}");
        }
    }

    /// Durations are humantime's forms, and what r3 took before: a bare number of seconds,
    /// one number with s, m or h, fractions included.
    #[test]
    fn durations_take_humantime_forms_and_bare_seconds() {
        use super::parse_duration;
        use std::time::Duration;
        for (text, secs) in [
            ("90", 90.0),
            ("2.5", 2.5),
            ("0", 0.0),
            ("8s", 8.0),
            ("10m", 600.0),
            ("1h", 3600.0),
            ("1.5h", 5400.0),
            ("0.5m", 30.0),
            ("1h30m", 5400.0),
            ("1h 30m", 5400.0),
            ("2min 5s", 125.0),
            ("1day", 86400.0),
            ("250ms", 0.25),
        ] {
            assert_eq!(
                parse_duration("--time", text).unwrap(),
                Duration::from_secs_f64(secs),
                "{text}"
            );
        }
        for bad in ["soon", "", "-5", "10x", "1h30", "inf"] {
            let e = format!("{:#}", parse_duration("--deadline", bad).unwrap_err());
            assert!(
                e.starts_with(&format!("--deadline {bad}: not a duration"))
                    && e.contains("fix:")
                    && e.contains("1h 30m"),
                "{bad}: {e}"
            );
        }
    }
}
