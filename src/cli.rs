//! The command-line interface: parsing and printing only; the work is in the library.

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};

/// `print!` for what a command prints on standard output: a reader that closed the pipe
/// (`r3 report | head`) ends the command quietly, with success, instead of a panic.
macro_rules! out {
    ($($t:tt)*) => { emit(&format!($($t)*)) };
}

/// `println!`, ending quietly on a closed pipe like `out!`.
macro_rules! outln {
    ($($t:tt)*) => { emit(&format!("{}\n", format!($($t)*))) };
}

fn emit(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("r3: error: writing to standard output: {e}");
        std::process::exit(1);
    }
}

#[derive(Parser)]
#[command(
    name = "r3",
    version,
    term_width = 100,
    about = "Record, Remix, Replay: tune CUDA kernels by searching LLVM pass pipelines",
    long_about = "r3 records each CUDA kernel's device IR while r3-clang++ compiles your program and each \
                  launch's device inputs while it runs; it then searches pass pipelines, IR rewrites and \
                  codegen/launch knobs per kernel, replaying every candidate on the GPU against the \
                  recorded inputs, and rebuilds the program with the winners.\n\n\
                  Called as r3-clang or r3-clang++ (links installed beside r3) it is a drop-in clang."
)]
struct Cli {
    /// The store to use (default: R3_STORE, then the nearest .r3/ above the working directory,
    /// then ~/.local/share/r3).
    #[arg(
        long = "r3-store",
        global = true,
        value_name = "DIR",
        help_heading = "Global options"
    )]
    store: Option<PathBuf>,
    /// CUDA SDK root (default: R3_CUDA_PATH, then scripts/setup's cache, then CUDA_HOME, /usr/local/cuda).
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        help_heading = "Global options"
    )]
    cuda_path: Option<PathBuf>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Show what r3 found: LLVM, clang, the CUDA SDK, the GPU and driver, the store; and how to fix what is missing.
    Doctor {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the kernels recorded in the store, grouped by source file.
    Kernels {
        /// Print the kernels as JSON (grouped by source file, with their shares of programs).
        #[arg(long)]
        json: bool,
    },
    /// Where the store's searches stand: running (host, process), finished, stopped by a kill,
    /// or waiting (recorded, not searched yet), with trials and the best speedup so far.
    Status {
        /// Print every search, waiting kernel and program as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run a program built by r3-clang++ and record each kernel launch's device inputs and outputs.
    Record {
        /// Distinct launches to record per kernel.
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
        #[arg(long, value_enum, default_value_t = r3::record::WarmRelaunch::Auto)]
        warm: r3::record::WarmRelaunch,
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
        /// Evaluate against a landscape table (JSON) instead of the GPU; repeated, one kernel
        /// per table (searched as `--all` searches: each table a worker has not claimed).
        #[arg(long, value_name = "TABLE.json")]
        simulate: Vec<PathBuf>,
        /// One worker per GPU of this node (`all`, or ordinals such as 0,1): each takes the
        /// kernels no other worker holds, so identical GPUs share the work.
        #[arg(long, value_name = "all|0,1,...", value_parser = r3::remix::fleet::parse_gpu_spec)]
        gpus: Option<r3::remix::fleet::GpuSpec>,
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
        /// GPU time (the executable as recorded).
        #[arg(long, value_name = "EXE")]
        program: Option<PathBuf>,
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
        l2: r3::replay::l2::Policy,
        /// Tolerance for outputs, e.g. f32:rel=1e-5 or f64:ulp=4 (default: exact).
        #[arg(long)]
        tolerance: Option<r3::replay::validate::Tolerance>,
        /// Build the PTX and report static statistics only (works without a GPU).
        #[arg(long)]
        dry_run: bool,
        /// Testing r3 itself: also run the candidate broken on purpose, in the same batch, to
        /// check that replay catches it; repeatable. The faults are listed in docs/measurement.md.
        #[arg(long, value_enum, value_name = "FAULT", hide_possible_values = true)]
        mutate: Vec<r3::ir::mutate::Mutation>,
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
    /// Pass-order reports: baseline vs best, pipeline diff, pass importance, convergence.
    Report {
        /// Kernels (names, mangled or demangled, or hashes); default: every kernel with trials.
        kernels: Vec<String>,
        /// term, md, html (one self-contained file) or json (docs/report-schema.md).
        #[arg(long, default_value = "term")]
        format: r3::report::render::Format,
        /// Write the report to FILE instead of standard output.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
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
        /// Rewriter options, as inside r3-egraph<…>: e.g. 'iters=8;nodes=20000;time-ms=200'.
        #[arg(long, default_value = "")]
        options: String,
        /// Print the result (functions before and after, statistics) as JSON.
        #[arg(long)]
        json: bool,
    },
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

pub fn main() -> i32 {
    let cli = Cli::parse();
    let ships = matches!(
        cli.command,
        Cmd::Tune { dry_run: false, .. } | Cmd::Evolve { .. }
    )
    .then(|| cli.store.clone());
    let code = match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("r3: error: {e:#}");
            1
        }
    };
    // Even a search stopped by Ctrl-C may have changed what ships.
    if let Some(store) = ships {
        refresh_winners_stamp(store.as_deref());
    }
    code
}

/// After a command that may change what apply ships: the store's winners stamp follows, so
/// that builds whose objects depend on it (through their dependency files) recompile.
fn refresh_winners_stamp(store: Option<&Path>) {
    let Ok(cwd) = std::env::current_dir() else {
        return;
    };
    let Ok(store) = r3::store::locate(store, &cwd).and_then(|l| r3::store::Store::open(&l.path))
    else {
        return;
    };
    match r3::apply::plan::refresh_winners_stamp(&store) {
        Ok(true) => eprintln!(
            "r3: what apply ships changed: the next build with R3_APPLY recompiles the tuned kernels' sources"
        ),
        Ok(false) => {}
        Err(e) => eprintln!("r3: warning: the winners stamp was not updated ({e}); a rebuild may not apply the new winners until its sources change"),
    }
}

fn run(cli: Cli) -> Result<i32> {
    let cwd = std::env::current_dir().context("reading the working directory")?;
    match cli.command {
        Cmd::Doctor { json } => doctor(cli.cuda_path.as_deref(), cli.store.as_deref(), &cwd, json),
        Cmd::Kernels { json } => kernels(cli.store.as_deref(), &cwd, json),
        Cmd::Status { json } => status(cli.store.as_deref(), &cwd, json),
        Cmd::Record {
            launches,
            max_time,
            kernel_limit,
            launch_limit,
            full_snapshot,
            warm,
            quiet,
            no_verify,
            no_sync,
            time_only,
            command,
        } => {
            if time_only {
                let store = open_store(cli.store.as_deref(), &cwd, true)?;
                let run = r3::record::time_only(&store, &command)?;
                eprint!("{}", r3::record::time_only_summary(&run, &command[0]));
                return Ok(run.status.unwrap_or(1));
            }
            let opts = r3::record::RecordOptions {
                launches,
                max_time: max_time
                    .map(|t| parse_duration("--max-time", &t))
                    .transpose()?,
                kernel_limit_mb: kernel_limit,
                launch_limit_mb: launch_limit,
                full_snapshot,
                warm,
                progress: !quiet,
                sync: !no_sync,
            };
            record(cli.store.as_deref(), &cwd, &opts, !no_verify, &command)
        }
        Cmd::Tune {
            kernels,
            all,
            budget,
            time,
            strategy,
            space,
            seed,
            batch,
            resume,
            no_transfer,
            no_recipes,
            no_ablate,
            simulate,
            gpus,
            emit_sbatch,
            measure,
            block_size_agnostic,
            egraph,
            no_specialize,
            dry_run,
            deadline,
            program,
            no_race,
            deadline_id,
        } => {
            if let Some(tasks) = emit_sbatch {
                return emit_sbatch_script(cli.store.as_deref(), &cwd, tasks);
            }
            let deadline = deadline
                .as_deref()
                .map(|t| parse_duration("--deadline", t))
                .transpose()?;
            if let Some(spec) = gpus {
                return tune_per_gpu(&spec);
            }
            if deadline.is_none() && program.is_some() {
                anyhow::bail!("--program chooses what --deadline is spent on: add --deadline T");
            }
            if deadline.is_some() && (!simulate.is_empty() || dry_run) {
                anyhow::bail!("--deadline spends GPU time: leave out --simulate and --dry-run");
            }
            if deadline.is_some() && (program.is_some() == all || !kernels.is_empty()) {
                anyhow::bail!("--deadline is spent on a whole program or store: add --program EXE or --all (and name no kernel)");
            }
            let grid = space == "grid";
            if strategy == "exhaustive" && !grid && simulate.is_empty() {
                anyhow::bail!("--strategy exhaustive needs a finite space: add --space grid");
            }
            let time = time
                .as_deref()
                .map(|t| parse_duration("--time", t))
                .transpose()?;
            let batch = batch.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
            });
            let opts = r3::remix::tune::TuneOptions {
                kernel: String::new(),
                strategy,
                seed,
                budget,
                time,
                batch,
                transfer: !no_transfer,
                recipes: !no_recipes,
                race: !no_race,
            };
            if !simulate.is_empty() {
                return tune_simulated(
                    cli.store.as_deref(),
                    &cwd,
                    &simulate,
                    kernels.first().cloned(),
                    opts,
                    resume,
                );
            }
            if kernels.len() > 1 {
                anyhow::bail!("name one kernel, or --all");
            }
            if dry_run {
                return tune_dry_run(
                    cli.store.as_deref(),
                    &cwd,
                    kernels.first().map(String::as_str),
                    all,
                    &opts,
                    egraph,
                    grid,
                );
            }
            let sel = r3::store::identity::Selection {
                kernel: kernels.into_iter().next(),
                all,
                record: None,
            };
            let how = r3::remix::session::GpuTune {
                measure: measure.measure(),
                ablate: !no_ablate,
                resume,
                block_size_agnostic,
                egraph,
                grid,
                specialize: !no_specialize,
                fleet: all,
                deadline_id,
            };
            match deadline {
                Some(d) => tune_deadline(
                    cli.store.as_deref(),
                    &cwd,
                    program.as_deref(),
                    d,
                    opts,
                    &how,
                ),
                None => tune_gpu(cli.store.as_deref(), &cwd, &sel, opts, &how),
            }
        }
        Cmd::Evolve {
            kernels,
            all,
            budget,
            inner_budget,
            inner_time,
            repairs,
            proposer,
            max_tokens,
            seed,
            resume,
            no_measure,
            measure_only,
            simulate,
            compile_timeout,
            measure,
        } => {
            let opts = r3::evolve::Options {
                budget,
                repairs,
                seed,
                resume: resume || measure_only,
                compile_timeout: parse_duration("--compile-timeout", &compile_timeout)?,
                propose: !measure_only,
            };
            let how = EvolveHow {
                proposer,
                max_tokens,
                no_measure,
                simulate,
                inner_budget,
                inner_time: inner_time
                    .as_deref()
                    .map(|t| parse_duration("--inner-time", t))
                    .transpose()?,
                measure,
            };
            evolve_cmd(cli.store.as_deref(), &cwd, &kernels, all, &opts, &how)
        }
        Cmd::Replay {
            kernel,
            all,
            record,
            pipeline,
            config,
            repeat,
            l2,
            tolerance,
            dry_run,
            mutate,
            json,
        } => {
            let candidate = match (pipeline, config) {
                (Some(p), _) => r3::candidate::Candidate::with_pipeline(&p),
                (None, Some(path)) => {
                    let text = std::fs::read_to_string(&path)
                        .with_context(|| format!("reading {}", path.display()))?;
                    serde_json::from_str(&text).with_context(|| {
                        format!("{}: not a candidate configuration", path.display())
                    })?
                }
                (None, None) => r3::candidate::Candidate::baseline(),
            };
            let sel = r3::store::identity::Selection {
                kernel,
                all,
                record,
            };
            let how = ReplayHow {
                repeat,
                l2,
                tolerance,
                dry_run,
                mutate,
                json,
            };
            replay(cli.store.as_deref(), &cwd, &sel, &candidate, &how)
        }
        Cmd::ReplayWorker => Ok(r3::replay::worker::serve()),
        Cmd::LowerWorker => Ok(r3::lower::isolated::serve_lower()),
        Cmd::CaptureWorker => Ok(r3::driver::capture::serve()),
        Cmd::Report {
            kernels,
            format,
            output,
        } => report(
            cli.store.as_deref(),
            cli.cuda_path.as_deref(),
            &cwd,
            kernels,
            format,
            output.as_deref(),
        ),
        Cmd::Export {
            check: Some(file), ..
        } => check_winners(cli.store.as_deref(), &cwd, &file),
        Cmd::Export {
            output,
            gpu,
            launch_bounds,
            format,
            kernel,
            check: None,
        } => {
            let env = r3::store::winner::Policy::from_env();
            let policy = r3::store::winner::Policy {
                launch_bounds: launch_bounds || env.launch_bounds,
                gpu: gpu.or(env.gpu),
                ..env
            };
            let what = ExportWhat {
                format: &format,
                kernel: kernel.as_deref(),
                output: output.as_deref(),
            };
            export(cli.store.as_deref(), &cwd, &policy, &what)
        }
        Cmd::Passes { print, recipes } => passes(print.as_deref(), recipes),
        Cmd::Ptx {
            input,
            pipeline,
            sm,
            ptx,
            opt_level,
            output,
            stats,
        } => {
            let cg = r3::lower::Codegen { sm, ptx, opt_level };
            ptx_cmd(&input, &pipeline, &cg, output.as_deref(), stats)
        }
        Cmd::CmakeToolchain => cmake_toolchain(),
        Cmd::Egraph {
            input,
            pipeline_before,
            options,
            json,
        } => egraph_cmd(
            &input,
            &pipeline_before,
            &options,
            json,
            cli.store.as_deref(),
            &cwd,
        ),
        Cmd::Selftest {
            require_gpu,
            sm,
            json,
        } => selftest(require_gpu, sm.as_deref(), json),
    }
}

fn report(
    store: Option<&Path>,
    cuda: Option<&Path>,
    cwd: &Path,
    kernels: Vec<String>,
    format: r3::report::render::Format,
    output: Option<&Path>,
) -> Result<i32> {
    let store = open_store(store, cwd, false)?;
    let ptxas = r3::toolchain::find_cuda(cuda)
        .ok()
        .map(|f| f.path.join("bin/ptxas"))
        .filter(|p| p.is_file());
    let opts = r3::report::tuning::ReportOptions {
        kernels,
        ptxas,
        code: true,
    };
    let rep = r3::report::tuning::build(&store, &opts)?;
    let text = r3::report::render::render(&rep, format);
    match output {
        Some(path) => r3::store::write_output(path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?,
        None => out!("{text}"),
    }
    Ok(0)
}

/// Opens (or creates) the store a command uses. A format-1 store is brought to format 2 first,
/// with one message saying what moved; nothing is lost either way (see store::migrate).
fn open_store(store: Option<&Path>, cwd: &Path, create: bool) -> Result<r3::store::Store> {
    let loc = r3::store::locate(store, cwd)?;
    let mut store = if create {
        r3::store::Store::create(&loc.path)?
    } else {
        r3::store::Store::open(&loc.path)?
    };
    if let Some(m) = store.migrate()? {
        eprintln!(
            "r3: store {} migrated to format {}: trials of {} kernels moved under their content hashes",
            loc.path.display(),
            r3::store::FORMAT,
            m.moved.len()
        );
        for (dir, why) in &m.kept {
            eprintln!("r3:   trials/{dir} left as it was: {why}");
        }
    }
    Ok(store)
}

fn doctor(cuda: Option<&Path>, store: Option<&Path>, cwd: &Path, json: bool) -> Result<i32> {
    let report = r3::doctor::run(cuda, store, cwd);
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        out!("{}", r3::doctor::render(&report));
    }
    Ok(if report.healthy() { 0 } else { 1 })
}

fn kernels(store: Option<&Path>, cwd: &Path, json: bool) -> Result<i32> {
    let loc = r3::store::locate(store, cwd)?;
    let store = r3::store::Store::open(&loc.path)?;
    let kernels = store.kernels()?;
    // The census is a hint here: a damaged program file is said and left out.
    let shares = store.kernel_shares().unwrap_or_default();
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&r3::report::kernels::by_source(&kernels, &shares))?
        );
    } else {
        let launches = store.launches_by_kernel()?;
        out!(
            "{}",
            r3::report::kernels::render(&kernels, &launches, &shares, store.root())
        );
    }
    Ok(0)
}

fn status(store: Option<&Path>, cwd: &Path, json: bool) -> Result<i32> {
    let loc = r3::store::locate(store, cwd)?;
    let store = r3::store::Store::open(&loc.path)?;
    let fleet = r3::report::status::gather(&store)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&fleet)?);
    } else {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        out!("{}", r3::report::status::render(&fleet, now_ms));
    }
    Ok(0)
}

/// Runs the program with recording on; it writes recordings into the store as it runs.
fn record(
    store: Option<&Path>,
    cwd: &Path,
    opts: &r3::record::RecordOptions,
    verify: bool,
    command: &[String],
) -> Result<i32> {
    let store = open_store(store, cwd, true)?;
    let run = r3::record::run(&store, command, opts)?;
    if !run.stale_removed.is_empty() {
        eprintln!(
            "r3: removed {} unfinished recording(s) that killed runs left in {}",
            run.stale_removed.len(),
            store.root().join("records").display()
        );
    }
    if let Some(stats) = &run.stats {
        eprint!("{}", r3::record::summary(stats, &run.span));
    }
    eprint!(
        "{}",
        r3::report::records::render(&run.recordings, store.root())
    );
    if let Some(census) = &run.census {
        eprint!("{}", r3::record::census_summary(census));
    }
    if run.recordings.is_empty() {
        eprintln!(
            "{}",
            r3::record::nothing_recorded(&command[0], run.stats.as_ref())
        );
    } else if verify {
        let check = r3::record::check(&store, &run.recordings);
        eprint!("{}", r3::record::check_summary(&check));
    }
    Ok(run.status.unwrap_or(1))
}

struct ReplayHow {
    repeat: u32,
    l2: r3::replay::l2::Policy,
    tolerance: Option<r3::replay::validate::Tolerance>,
    dry_run: bool,
    mutate: Vec<r3::ir::mutate::Mutation>,
    json: bool,
}

fn replay(
    store: Option<&Path>,
    cwd: &Path,
    sel: &r3::store::identity::Selection,
    candidate: &r3::candidate::Candidate,
    how: &ReplayHow,
) -> Result<i32> {
    let ReplayHow {
        repeat,
        l2,
        tolerance,
        dry_run,
        json,
        ..
    } = *how;
    // Broken candidates first, then the candidate as it is: it must still succeed after them.
    let mutations: Vec<_> = how.mutate.iter().copied().map(Some).chain([None]).collect();
    let store = open_store(store, cwd, false)?;
    let recs = store.select_recordings(sel)?;
    let gpu = r3::device::probe().first();
    if gpu.is_none() && !dry_run {
        anyhow::bail!("no GPU on this machine: replay runs recorded launches on one. `--dry-run` builds the PTX and reports static statistics without it");
    }
    let opts = r3::replay::gpu::MeasureOptions {
        ordinal: 0,
        max_reps: repeat,
        tolerance,
        l2: Default::default(),
        screen: None,
    };
    let rows = r3::replay::gpu::replay_each(
        &store,
        &recs,
        candidate,
        gpu.as_ref(),
        &opts,
        (!dry_run).then_some(l2),
        &mutations,
        |rec, e| eprintln!("r3: {}: {e}", rec.id),
    );
    if json {
        outln!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        out!("{}", r3::report::replay::render(&rows));
    }
    let all_valid = r3::replay::gpu::as_expected(&rows, recs.len(), mutations.len(), dry_run);
    Ok(if all_valid { 0 } else { 1 })
}

const TOOLCHAIN: &str = include_str!("../scripts/r3-toolchain.cmake");

/// Writes the toolchain file into r3's cache, pointing at this r3 unless the user says otherwise.
fn cmake_toolchain() -> Result<i32> {
    let exe = std::env::current_exe().context("finding the r3 executable")?;
    let bin = exe.parent().context("the r3 executable has no directory")?;
    let text = format!(
        "# Written by `r3 cmake-toolchain` ({}); the same as r3's scripts/r3-toolchain.cmake,\n\
         # with R3_BIN_DIR defaulting to the r3 that wrote it.\n\
         if(NOT DEFINED R3_BIN_DIR AND NOT DEFINED ENV{{R3_BIN_DIR}})\n  set(R3_BIN_DIR \"{}\")\nendif()\n\n{TOOLCHAIN}",
        env!("CARGO_PKG_VERSION"),
        bin.display()
    );
    let path = r3::toolchain::cache_dir().join("cmake/r3-toolchain.cmake");
    if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
        std::fs::create_dir_all(path.parent().unwrap())
            .with_context(|| format!("creating {}", path.display()))?;
        r3::store::write_atomic(&path, text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    outln!("{}", path.display());
    Ok(0)
}

fn ptx_cmd(
    input: &Path,
    pipeline: &str,
    cg: &r3::lower::Codegen,
    output: Option<&Path>,
    stats: bool,
) -> Result<i32> {
    let ptx = r3::lower::ptx_of_file(input, pipeline, cg)?;
    match output {
        Some(path) => r3::store::write_output(path, ptx.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?,
        None => out!("{ptx}"),
    }
    if stats {
        let s = r3::ptx::stats::stats(&ptx);
        eprintln!(
            "{}: {} PTX instructions, entries: {}",
            input.display(),
            s.instructions,
            s.entries.join(", ")
        );
    }
    Ok(0)
}

/// `--sm` (alias `--cuda-gpu-arch`, as clang spells it): `sm_90`, or `90` as CMake's
/// CUDA_ARCHITECTURES writes it, checked against the NVPTX backend linked in.
fn parse_sm(s: &str) -> Result<String, String> {
    let sm = if s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("sm_{s}")
    } else {
        s.to_owned()
    };
    r3::lower::check_sm(&sm)
        .map(|()| sm)
        .map_err(|e| e.to_string())
}

/// A duration option's value: humantime's forms (`90s`, `20m`, `1h 30m`, `1h30m`, `1.5h`,
/// `2days`), or a bare number of seconds (`90`, `2.5`), as r3 has always taken.
fn parse_duration(flag: &str, s: &str) -> Result<std::time::Duration> {
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

fn tune_simulated(
    store: Option<&Path>,
    cwd: &Path,
    tables: &[PathBuf],
    kernel: Option<String>,
    opts: r3::remix::tune::TuneOptions,
    resume: bool,
) -> Result<i32> {
    if tables.len() > 1 && kernel.is_some() {
        anyhow::bail!("name no kernel with several --simulate tables: each table is its kernel");
    }
    let store = open_store(store, cwd, true)?;
    let stop = stop_flag();
    let tally =
        r3::remix::session::tune_simulated(&store, tables, kernel, &opts, resume, &stop, &mut say)?;
    Ok(if tally.interrupted { 130 } else { 0 })
}

/// Prints a session's lines: its results on stdout, the rest on stderr.
fn say(line: r3::remix::session::Line) {
    match line {
        r3::remix::session::Line::Out(s) => outln!("{s}"),
        r3::remix::session::Line::Note(s) => eprintln!("{s}"),
    }
}

/// `--gpus`: one worker process per GPU, each this same command.
fn tune_per_gpu(spec: &r3::remix::fleet::GpuSpec) -> Result<i32> {
    let count = match r3::device::probe() {
        r3::device::GpuStatus::Present { gpus, .. } => gpus.len(),
        _ => 0,
    };
    let gpus = spec.ordinals(count).map_err(anyhow::Error::msg)?;
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--all") {
        anyhow::bail!("--gpus spreads the kernels of --all over the GPUs: add --all");
    }
    use r3::remix::fleet::{fresh_deadline, new_allocation_id, run_per_gpu};
    Ok(run_per_gpu(
        &fresh_deadline(&args, &new_allocation_id()),
        &gpus,
    )?)
}

/// `--emit-sbatch N`: the job array script, for this store and this command.
fn emit_sbatch_script(store: Option<&Path>, cwd: &Path, tasks: u32) -> Result<i32> {
    // Created when missing, as the workers would create it (a simulated fleet has no recordings).
    let store = open_store(store, cwd, true)?;
    use r3::remix::fleet::without_option;
    let args: Vec<String> = std::env::args().collect();
    // The script names the store by its absolute path (R3_STORE); a relative --r3-store would
    // be read from wherever the task starts.
    let args = without_option(&without_option(&args, "--emit-sbatch"), "--r3-store");
    if !args.iter().any(|a| a == "--all") {
        anyhow::bail!("--emit-sbatch writes a job array for the kernels of --all: add --all");
    }
    let args = r3::remix::fleet::fresh_deadline(&args, &r3::remix::fleet::new_allocation_id());
    let exe = std::env::current_exe()?;
    let root = std::fs::canonicalize(store.root())?;
    out!(
        "{}",
        r3::remix::fleet::sbatch_script(
            &exe.to_string_lossy(),
            &root.to_string_lossy(),
            &args,
            tasks
        )
    );
    Ok(0)
}

/// A finite space has no more distinct candidates than points: a budget beyond that would
/// only repeat them.
/// Ctrl-C sets a flag: the round in flight finishes and is recorded, then tune stops, so
/// nothing measured is lost and --resume continues exactly (ctrlc: portable, no unsafe).
fn stop_flag() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let _ = ctrlc::set_handler(move || flag.store(true, std::sync::atomic::Ordering::SeqCst));
    stop
}

/// Tunes kernels on the GPU, each against its first replayable recording.
fn tune_gpu(
    store: Option<&Path>,
    cwd: &Path,
    sel: &r3::store::identity::Selection,
    base: r3::remix::tune::TuneOptions,
    how: &r3::remix::session::GpuTune,
) -> Result<i32> {
    let Some((driver, gpu)) = r3::device::probe().first() else {
        anyhow::bail!("no GPU on this machine: tune measures candidates on one (try `r3 tune --simulate TABLE.json`)");
    };
    let store = open_store(store, cwd, false)?;
    let recs = store.select_recordings(sel)?;
    let stop = stop_flag();
    let tally =
        r3::remix::session::tune_on_gpu(&store, recs, driver, &gpu, &base, how, &stop, &mut say)?;
    // A kernel named on its own and not searched is a failed command; in --all, the others'
    // searches are what was asked for, and the session said what was not done.
    let failed = tally.failed + tally.errors > 0 || (tally.irreproducible > 0 && !sel.all);
    Ok(match (tally.interrupted, failed) {
        (true, _) => 130,
        (false, true) => 1,
        (false, false) => 0,
    })
}

/// `r3 tune --deadline`: the store's (or one program's) kernels under one allocation.
fn tune_deadline(
    store: Option<&Path>,
    cwd: &Path,
    program: Option<&Path>,
    deadline: std::time::Duration,
    base: r3::remix::tune::TuneOptions,
    how: &r3::remix::session::GpuTune,
) -> Result<i32> {
    use r3::remix::program::Scope;
    let Some((driver, gpu)) = r3::device::probe().first() else {
        anyhow::bail!("no GPU on this machine: --deadline is spent measuring candidates on one (`r3 tune --all --dry-run` checks them without)");
    };
    let store = open_store(store, cwd, false)?;
    let scope = match program {
        None => Scope::All,
        Some(exe) => {
            let key = r3::store::programs::program_key(exe);
            let known = store
                .programs()?
                .into_iter()
                .any(|p| p.key == key && p.census.is_some());
            if !known {
                anyhow::bail!(
                    "{}: no launch census of this program in the store; fix: `r3 record -- {}` (with this r3) first",
                    exe.display(),
                    exe.display()
                );
            }
            Scope::Program {
                key,
                name: exe.display().to_string(),
            }
        }
    };
    let sel = r3::store::identity::Selection {
        kernel: None,
        all: true,
        record: None,
    };
    let recs = store.select_recordings(&sel)?;
    let stop = stop_flag();
    let tally = r3::remix::program::tune_deadline_on_gpu(
        &store, &scope, recs, driver, &gpu, &base, how, deadline, &stop, &mut say,
    )?;
    Ok(match (tally.interrupted, tally.failed + tally.errors > 0) {
        (true, _) => 130,
        (false, true) => 1,
        (false, false) => 0,
    })
}

/// The compile half of tuning, for every stored kernel that matches.
fn tune_dry_run(
    store: Option<&Path>,
    cwd: &Path,
    kernel: Option<&str>,
    all: bool,
    opts: &r3::remix::tune::TuneOptions,
    egraph: bool,
    grid: bool,
) -> Result<i32> {
    if kernel.is_none() && !all {
        anyhow::bail!("name a kernel, or --all");
    }
    let store = open_store(store, cwd, false)?;
    let index = store.index()?;
    let kernels: Vec<_> = match kernel {
        None => index.kernels().iter().collect(),
        Some(word) => {
            let found = index.select(word);
            if r3::store::identity::distinct(&found) > 1 {
                return Err(r3::store::identity::ambiguous(word, &found).into());
            }
            found
        }
    };
    if kernels.is_empty() {
        anyhow::bail!("no stored kernel matches; see `r3 kernels`");
    }
    let space = r3::remix::space::Space::builtin(r3::remix::space::SpaceOptions {
        r3_passes: egraph,
        grid,
        ..Default::default()
    })?;
    let rows = r3::remix::dry_run::dry_run_kernels(
        &store,
        &kernels,
        &space,
        opts.budget as usize,
        opts.seed,
        |row| eprintln!("{}: {} candidates lowered", row.kernel, row.compiled),
    );
    out!("{}", r3::remix::dry_run::render(&rows));
    outln!(
        "dry run: candidates built and checked; timing them needs a GPU (r3 record, then r3 tune)."
    );
    Ok(if r3::remix::dry_run::any_failed(&rows) {
        1
    } else {
        0
    })
}

/// How candidates are measured: `r3 tune`'s and `r3 evolve`'s flags.
#[derive(clap::Args)]
struct MeasureHow {
    /// Most timed repetitions per measurement (fewer once the median is known within 1%).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
    /// L2 state of the timed runs: auto (the program's own, from its later identical
    /// launches, where it made any on this GPU model; else cold), warm, or cold.
    #[arg(long, default_value = "auto")]
    l2: r3::replay::l2::Policy,
    /// Accept outputs within this tolerance (e.g. f32:rel=1e-5); also lets the search try fast-math.
    #[arg(long)]
    tolerance: Option<r3::replay::validate::Tolerance>,
    /// Screen long kernels: a kernel of 50 ms or more a launch, over enough blocks, has its
    /// candidates timed first on a prefix of its grid, and only those not clearly slower than
    /// the best there are checked and timed on the whole launch. The screen is held to the
    /// whole launch as it goes and turns off where they disagree. Off by default: on an H100 it
    /// saved no time where racing already cuts losers short, and a GEMM's first rows misread
    /// its speedups (docs/measurement.md).
    #[arg(long)]
    screen: bool,
}

impl MeasureHow {
    fn measure(&self) -> r3::remix::session::Measure {
        r3::remix::session::Measure {
            repeat: self.repeat,
            l2: self.l2,
            tolerance: self.tolerance,
            screen: self.screen,
        }
    }
}

struct EvolveHow {
    proposer: String,
    max_tokens: u64,
    no_measure: bool,
    simulate: Option<PathBuf>,
    inner_budget: u32,
    inner_time: Option<std::time::Duration>,
    measure: MeasureHow,
}

fn proposer_for(how: &EvolveHow) -> Result<Box<dyn r3::evolve::Proposer>> {
    use r3::evolve::llm;
    let endpoint = llm::Endpoint::from_env()?;
    match (how.proposer.as_str(), endpoint) {
        ("rules", _) | ("auto", None) => Ok(Box::new(r3::evolve::RuleProposer)),
        (_, Some(e)) => Ok(Box::new(llm::ModelProposer::new(e, how.max_tokens))),
        (_, None) => anyhow::bail!(
            "--proposer llm needs R3_LLM_URL (an OpenAI-compatible endpoint such as https://api.openai.com/v1 or http://localhost:8000/v1), R3_LLM_MODEL and, where the endpoint wants one, R3_LLM_API_KEY; or use --proposer rules"
        ),
    }
}

fn evolve_cmd(
    store: Option<&Path>,
    cwd: &Path,
    kernels: &[String],
    all: bool,
    opts: &r3::evolve::Options,
    how: &EvolveHow,
) -> Result<i32> {
    use r3::evolve::each::{self, Judging};
    let store = open_store(store, cwd, false)?;
    let targets = each::targets(&store, kernels, all, opts.propose)?;
    let mut proposer = proposer_for(how)?;
    let gpu = r3::device::probe().first();
    let script = how
        .simulate
        .as_ref()
        .map(|p| -> Result<r3::evolve::judge::SimJudge> {
            let text = std::fs::read_to_string(p).with_context(|| format!("{}", p.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("{}: not a simulation script", p.display()))
        })
        .transpose()?;
    // Variants are measured on this machine's GPU unless a script judges or none is asked.
    let mut judging = match (script, gpu) {
        _ if how.no_measure => Judging::Not,
        (Some(s), _) => Judging::Script(s),
        (None, Some((driver, gpu))) => Judging::Gpu {
            driver,
            gpu,
            measure: how.measure.measure(),
            inner_budget: how.inner_budget,
            inner_time: how.inner_time,
        },
        (None, None) => {
            eprintln!("r3 evolve: no GPU on this machine: rewrites are proposed, compiled and stored, not measured; `r3 evolve --measure-only` on a GPU machine measures them");
            Judging::Not
        }
    };
    let stop = stop_flag();
    let ok = each::evolve_each(
        &store,
        &targets,
        proposer.as_mut(),
        &mut judging,
        opts,
        &stop,
        &mut say,
    );
    Ok(match (stop.load(std::sync::atomic::Ordering::SeqCst), ok) {
        (true, _) => 130,
        (false, false) => 1,
        (false, true) => 0,
    })
}

/// `r3 export --check FILE`: what apply would build of each entry, and why not where not.
fn check_winners(store: Option<&Path>, cwd: &Path, file: &Path) -> Result<i32> {
    let text = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let f = r3::apply::plan::WinnersFile::parse(&text)
        .map_err(anyhow::Error::msg)
        .with_context(|| {
            format!(
                "{} is not a winners file; fix: write it with `r3 export`",
                file.display()
            )
        })?;
    // The store's kernels, where there is one, let folded values be checked against them.
    let kernels = open_store(store, cwd, false)
        .ok()
        .and_then(|s| s.kernels().ok())
        .unwrap_or_default();
    let signature = |hash: &str| {
        kernels
            .iter()
            .find(|k| k.hash.as_str() == hash)
            .map(|k| k.signature.clone())
    };
    let policy = r3::store::winner::Policy::from_env();
    let findings = r3::apply::check::verify_file(&f, &signature, &policy);
    let refused = findings.iter().filter(|x| x.refused.is_some()).count();
    for x in &findings {
        let what = format!(
            "{}[{}] {} [{}]",
            x.list,
            x.index,
            x.demangled,
            x.hash.get(..8).unwrap_or(&x.hash)
        );
        match &x.refused {
            Some(why) => outln!("refused  {what}: {why}"),
            None if x.signature_known => outln!("builds   {what}"),
            None => outln!("builds   {what} (kernel not in the store: folded values not checked against its parameters)"),
        }
    }
    outln!(
        "{}: {} entries, {refused} refused",
        file.display(),
        findings.len()
    );
    Ok(if refused == 0 { 0 } else { 1 })
}

struct ExportWhat<'a> {
    format: &'a str,
    kernel: Option<&'a str>,
    output: Option<&'a Path>,
}

fn export(
    store: Option<&Path>,
    cwd: &Path,
    policy: &r3::store::winner::Policy,
    what: &ExportWhat,
) -> Result<i32> {
    use r3::apply::formats;
    let store = open_store(store, cwd, false)?;
    let (value, count) = match what.format {
        "t4" => {
            let word = what
                .kernel
                .context("--format t4 writes one kernel's trials: name it with --kernel")?;
            let index = store.index()?;
            let k = index.select_one(word, None)?;
            let (_, trials) = r3::store::winner::chosen_search(&store, &k.hash, policy)?
                .with_context(|| format!("{}: no trials in the store", k.signature.demangled))?;
            (formats::t4(&trials), trials.len())
        }
        "proteus" => {
            let file = r3::report::export::winners(&store, policy)?;
            let (v, skipped) = formats::proteus(&file.kernels, &file.variants);
            for s in &skipped {
                eprintln!("r3 export: {s} left out: Proteus has no field for it");
            }
            let written = v.as_object().map_or(0, |o| o.len());
            (v, written)
        }
        _ => {
            let w = r3::report::export::winners(&store, policy)?;
            let n = w.kernels.len();
            if w.kernels.iter().any(|k| k.candidate.max_threads.is_some()) {
                eprintln!("r3 export: note: generic code with launch bounds is built from this file only under R3_APPLY_LAUNCH_BOUNDS=1 (the build's promise that no launch has more threads)");
            }
            (serde_json::to_value(&w)?, n)
        }
    };
    let mut text = serde_json::to_vec_pretty(&value)?;
    text.push(b'\n');
    match what.output {
        Some(path) => {
            r3::store::write_output(path, &text)
                .with_context(|| format!("writing {}", path.display()))?;
            let unit = match (what.format == "t4", count == 1) {
                (true, true) => "trial",
                (true, false) => "trials",
                (false, true) => "kernel",
                (false, false) => "kernels",
            };
            eprintln!("r3 export: {count} {unit} in {}", path.display());
        }
        None => out!("{}", String::from_utf8_lossy(&text)),
    }
    Ok(0)
}

fn passes(print: Option<&str>, recipes: bool) -> Result<i32> {
    let cat = r3::passes::catalog::Catalog::builtin()?;
    if recipes {
        return print_recipes(&cat);
    }
    match print {
        Some(name) => outln!("{}", cat.preset(name)?.pipeline),
        None => out!("{}", cat.render()),
    }
    Ok(0)
}

fn print_recipes(cat: &r3::passes::catalog::Catalog) -> Result<i32> {
    outln!("recipes (passes/recipes.toml), measured first by every search, those whose preconditions the kernel meets before the rest:");
    for r in r3::remix::recipes::builtin(cat)? {
        let s = &r.spec;
        let mut knobs = vec![format!("codegen O{}", s.codegen_opt)];
        if let Some(t) = s.max_threads {
            knobs.push(format!(
                "maxntid {}",
                serde_json::to_string(&t)?.trim_matches('"')
            ));
        }
        if let Some(b) = s.min_blocks_per_sm {
            knobs.push(format!("minnctapersm {b}"));
        }
        if s.fast_math {
            knobs.push("fast-math (with a tolerance)".into());
        }
        for (name, v) in &s.options {
            knobs.push(format!(
                "-{name}={}",
                r3::passes::catalog::LlvmOption::value_text(v)
            ));
        }
        let when = if s.when.is_empty() {
            "any kernel".to_string()
        } else {
            format!("when {}", s.when.join(" + "))
        };
        outln!(
            "  {:<24} {} · {} · {when} · {}",
            s.name,
            s.variant,
            knobs.join(", "),
            s.origin
        );
        outln!("  {:<24} {}", "", s.why);
    }
    outln!("traits (read off a kernel's -O3 PTX):");
    for (name, what) in r3::ptx::cfg::TRAITS {
        outln!("  {name:<24} {what}");
    }
    Ok(0)
}

fn egraph_cmd(
    input: &str,
    pipeline_before: &str,
    options: &str,
    json: bool,
    store: Option<&Path>,
    cwd: &Path,
) -> Result<i32> {
    use r3::egraph::{show, Input};
    let (stats, changes) = if Path::new(input).exists() {
        show(
            Input::File(Path::new(input)),
            pipeline_before,
            options,
            input,
        )?
    } else {
        let loc = r3::store::locate(store, cwd)?;
        let store = r3::store::Store::open(&loc.path)
            .with_context(|| format!("'{input}' is no file, and the store cannot be opened"))?;
        let index = store.index()?;
        let k = index
            .select_one(input, None)
            .with_context(|| format!("'{input}' is no file; as a kernel"))?;
        let bytes = store.kernel_bitcode(&k.hash)?;
        let source = Input::Bitcode(&bytes, &k.signature.name);
        show(source, pipeline_before, options, input)?
    };
    if json {
        let out = serde_json::json!({ "stats": stats, "functions": changes });
        outln!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for c in &changes {
            outln!(
                "; ==== {}: {} -> {} instructions\n; ---- before\n{}\n; ---- after\n{}",
                c.name,
                c.instructions_before,
                c.instructions_after,
                c.before.trim_end(),
                c.after.trim_end()
            );
        }
        out!("{}", stats.render());
    }
    Ok(0)
}

fn selftest(require_gpu: bool, sm: Option<&str>, json: bool) -> Result<i32> {
    let outcome = r3::selftest::run(sm)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&outcome)?);
    } else {
        out!("{}", r3::selftest::render(&outcome));
    }
    let passed = outcome.run.as_ref().map(|r| r.mismatches == 0);
    Ok(match passed {
        Some(true) => 0,
        Some(false) => 1,
        None if require_gpu => 1,
        None => 0,
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
        use clap::ValueEnum as _;
        let docs = include_str!("../docs/measurement.md");
        for text in [help(&["replay", "--help"]), help(&["replay", "-h"])] {
            assert!(text.contains("--mutate <FAULT>"), "{text}");
            assert!(text.contains("docs/measurement.md"), "{text}");
            assert!(
                !text.contains("drop-store") && !text.contains("endless-loop"),
                "{text}"
            );
        }
        for m in r3::ir::mutate::Mutation::value_variants() {
            let name = m.to_possible_value().unwrap().get_name().to_owned();
            assert!(
                docs.contains(&format!("`{name}`")),
                "{name} not in docs/measurement.md"
            );
            let cli = parse(&["replay", "k", "--mutate", &name]);
            assert!(
                matches!(cli.command, super::Cmd::Replay { ref mutate, .. } if mutate == &[*m])
            );
        }
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
