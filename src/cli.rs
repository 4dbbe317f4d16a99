//! The command-line interface: parsing and printing only; the work is in the library.

use anyhow::{Context as _, Result};
use clap::Parser as _;
use r3::args::{parse_duration, Cli, Cmd, MeasureHow};
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

pub fn main() -> i32 {
    let cli = Cli::parse();
    let ships = matches!(
        cli.command,
        Cmd::Tune { dry_run: false, .. } | Cmd::Evolve { .. }
    )
    .then(|| cli.store.clone());
    let (code, failed) = match run(cli) {
        Ok(code) => (code, false),
        Err(e) => {
            eprintln!("r3: error: {e:#}");
            (1, true)
        }
    };
    // Even a search stopped by Ctrl-C may have changed what ships; a command that failed
    // (no GPU, a bad argument) leaves the stamp, and so every build, as it was.
    if let Some(store) = ships.filter(|_| !failed) {
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
        Cmd::Kernels { json, full_names } => kernels(cli.store.as_deref(), &cwd, json, full_names),
        Cmd::Status { json, full_names } => status(cli.store.as_deref(), &cwd, json, full_names),
        Cmd::Gc { yes, trials } => gc(cli.store.as_deref(), &cwd, yes, trials),
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
                let ended = r3::record::time_only_session(&store, &command, &mut say_on_stderr)?;
                return Ok(ended.code);
            }
            let opts = r3::record::RecordOptions {
                launches,
                max_time: max_time
                    .map(|t| parse_duration("--max-time", &t))
                    .transpose()?,
                kernel_limit_mb: kernel_limit,
                launch_limit_mb: launch_limit,
                full_snapshot,
                warm: warm.into(),
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
            no_nvcc,
            no_rewrites,
            simulate,
            landscape_name,
            full_names,
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
                kernel: r3::kernel::TrialsKey::default(),
                strategy,
                seed,
                budget,
                time,
                limit: None,
                batch,
                transfer: !no_transfer,
                recipes: !no_recipes,
                race: !no_race,
            };
            if !simulate.is_empty() {
                let kernel = match landscape_name {
                    Some(name) => Some(Named::Landscape(name)),
                    None => kernels.first().cloned().map(Named::Stored),
                };
                return tune_simulated(cli.store.as_deref(), &cwd, &simulate, kernel, opts, resume);
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
                    DryRunHow {
                        egraph,
                        grid,
                        full_names,
                        nvcc: !no_nvcc,
                    },
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
                nvcc: !no_nvcc,
                resume,
                block_size_agnostic,
                egraph,
                grid,
                specialize: !no_specialize,
                fleet: all,
                deadline_id,
            };
            let what = match deadline {
                Some(deadline) => OnGpu::Deadline {
                    program: program.as_deref(),
                    deadline,
                    rewrites: !no_rewrites,
                },
                None => OnGpu::Kernels(&sel),
            };
            tune_gpu(cli.store.as_deref(), &cwd, what, opts, &how)
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
                only: None,
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
        Cmd::DeadlineAt { file, seconds } => deadline_at(&file, seconds),
        Cmd::Report {
            kernels,
            format,
            output,
            full_names,
        } => report(
            cli.store.as_deref(),
            cli.cuda_path.as_deref(),
            &cwd,
            kernels,
            (format, full_names),
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
        Cmd::Completions { shell } => {
            use clap::CommandFactory as _;
            out!("{}", r3::shell::completions(&Cli::command(), shell));
            Ok(0)
        }
        Cmd::Man => {
            use clap::CommandFactory as _;
            out!(
                "{}",
                r3::shell::man_page(&Cli::command(), r3::args::VERSION)
            );
            Ok(0)
        }
    }
}

fn report(
    store: Option<&Path>,
    cuda: Option<&Path>,
    cwd: &Path,
    kernels: Vec<String>,
    (format, full_names): (r3::report::render::Format, bool),
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
    let text = r3::report::render::render_with(&rep, format, full_names);
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

fn kernels(store: Option<&Path>, cwd: &Path, json: bool, full_names: bool) -> Result<i32> {
    let loc = r3::store::locate(store, cwd)?;
    let store = r3::store::Store::open(&loc.path)?;
    let index = store.index()?;
    // The census is a hint here: a damaged program file is said and left out.
    let shares = store.kernel_shares().unwrap_or_default();
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&r3::report::kernels::by_source(&index, &shares))?
        );
    } else {
        let launches = store.launches_by_kernel()?;
        out!(
            "{}",
            r3::report::kernels::render(&index, &launches, &shares, store.root(), full_names)
        );
    }
    Ok(0)
}

/// `r3 gc`: says what would go (or, with `--yes`, removes it), with the bytes.
fn gc(store: Option<&Path>, cwd: &Path, yes: bool, trials: bool) -> Result<i32> {
    let loc = r3::store::locate(store, cwd)?;
    let store = r3::store::Store::open(&loc.path)?;
    let plan = store.gc_plan(r3::store::gc::GcOptions { trials })?;
    let done = if yes { Some(store.gc(&plan)?) } else { None };
    out!(
        "{}",
        r3::report::gc::render(&plan, done.as_deref(), store.root())
    );
    Ok(0)
}

fn status(store: Option<&Path>, cwd: &Path, json: bool, full_names: bool) -> Result<i32> {
    let loc = r3::store::locate(store, cwd)?;
    let store = r3::store::Store::open(&loc.path)?;
    let fleet = r3::report::status::gather(&store)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&fleet)?);
    } else {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        out!("{}", r3::report::status::render(&fleet, now_ms, full_names));
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
    let ended = r3::record::record_session(&store, command, opts, verify, &mut say_on_stderr)?;
    Ok(ended.code)
}

/// Prints what `r3 record` says, on standard error (standard output is the program's).
fn say_on_stderr(text: &str) {
    eprint!("{text}");
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

/// What a simulated search is keyed by, where the command line says: a stored kernel the user
/// named, or a name of its own (`--landscape-name`).
enum Named {
    Stored(String),
    Landscape(String),
}

fn tune_simulated(
    store: Option<&Path>,
    cwd: &Path,
    tables: &[PathBuf],
    kernel: Option<Named>,
    opts: r3::remix::tune::TuneOptions,
    resume: bool,
) -> Result<i32> {
    if tables.len() > 1 && kernel.is_some() {
        anyhow::bail!("name no kernel with several --simulate tables: each table is its kernel");
    }
    // Before anything is written: a word that names nothing would start a search of nothing.
    if let Some(Named::Stored(word)) = &kernel {
        let loc = r3::store::locate(store, cwd)?;
        r3::remix::session::simulated_kernel_is_stored(&loc.path, word)?;
    }
    let kernel = kernel.map(|k| match k {
        Named::Stored(w) | Named::Landscape(w) => w,
    });
    let store = open_store(store, cwd, true)?;
    let stop = stop_flag();
    let tally =
        r3::remix::session::tune_simulated(&store, tables, kernel, &opts, resume, &stop, &mut say)?;
    say_what_ships(&store, &tally);
    Ok(if tally.interrupted { 130 } else { 0 })
}

/// Tune's last lines: what apply ships of each search it ran, and why where that is clang's
/// code or not the fastest trial.
fn say_what_ships(store: &r3::store::Store, tally: &r3::remix::session::Tally) {
    for line in r3::report::status::ships_lines(store, &tally.searches) {
        outln!("{line}");
    }
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

/// What `r3 tune` spends this machine's GPU on: the kernels selected, each searched against
/// its first replayable recording, or one deadline over the store's (or a program's) kernels.
enum OnGpu<'a> {
    Kernels(&'a r3::store::identity::Selection),
    Deadline {
        program: Option<&'a str>,
        deadline: std::time::Duration,
        /// The rewrite arm is on (no `--no-rewrites`).
        rewrites: bool,
    },
}

/// Tunes on the GPU (`r3 tune`, `r3 tune --deadline`).
fn tune_gpu(
    store: Option<&Path>,
    cwd: &Path,
    what: OnGpu,
    base: r3::remix::tune::TuneOptions,
    how: &r3::remix::session::GpuTune,
) -> Result<i32> {
    let Some((driver, gpu)) = r3::device::probe().first() else {
        match what {
            OnGpu::Kernels(_) => anyhow::bail!("no GPU on this machine: tune measures candidates on one (try `r3 tune --simulate TABLE.json`)"),
            OnGpu::Deadline { .. } => anyhow::bail!("no GPU on this machine: --deadline is spent measuring candidates on one (`r3 tune --all --dry-run` checks them without)"),
        }
    };
    let store = open_store(store, cwd, false)?;
    let stop = stop_flag();
    let (tally, all) = match what {
        OnGpu::Kernels(sel) => {
            let recs = store.select_recordings(sel)?;
            let tally = r3::remix::session::tune_on_gpu(
                &store, recs, driver, &gpu, &base, how, &stop, &mut say,
            )?;
            say_what_ships(&store, &tally);
            (tally, sel.all)
        }
        OnGpu::Deadline {
            program,
            deadline,
            rewrites,
        } => {
            let mut rewriter = if rewrites {
                Some(deadline_rewriter(&store, driver, &gpu, how, &stop)?)
            } else {
                None
            };
            let tally = r3::remix::program::tune_deadline_on_gpu(
                &store,
                program,
                driver,
                &gpu,
                &base,
                how,
                deadline,
                rewriter
                    .as_mut()
                    .map(|r| r as &mut dyn r3::remix::rewrites::Rewriter),
                &stop,
                &mut say,
            )?;
            (tally, true)
        }
    };
    // A kernel named on its own and not searched is a failed command; in --all (and a
    // deadline's store or program), the others' searches are what was asked for, and the
    // session said what was not done.
    let failed = tally.failed + tally.errors > 0 || (tally.irreproducible > 0 && !all);
    Ok(match (tally.interrupted, failed) {
        (true, _) => 130,
        (false, true) => 1,
        (false, false) => 0,
    })
}

/// The deadline's rewrite arm: `r3 evolve`'s loop with the model where R3_LLM_URL names one,
/// else the rules proposer, each variant judged on this GPU.
fn deadline_rewriter<'a>(
    store: &'a r3::store::Store,
    driver: (i32, i32),
    gpu: &r3::replay::device::GpuInfo,
    how: &r3::remix::session::GpuTune,
    stop: &'a std::sync::atomic::AtomicBool,
) -> Result<r3::evolve::arm::EvolveRewriter<'a>> {
    use r3::evolve::llm;
    let proposer: Box<dyn r3::evolve::Proposer> = match llm::Endpoint::from_env()? {
        Some(e) => Box::new(llm::ModelProposer::new(e, DEADLINE_MODEL_TOKENS)),
        None => Box::new(r3::evolve::RuleProposer),
    };
    let judging = r3::evolve::each::Judging::Gpu {
        driver,
        gpu: gpu.clone(),
        measure: how.measure.clone(),
        inner_budget: r3::remix::rewrites::INNER_TRIALS,
        inner_time: None,
    };
    Ok(r3::evolve::arm::EvolveRewriter::new(
        store,
        proposer,
        judging,
        stop,
        std::time::Duration::from_secs(120),
    ))
}

/// Tokens the model may use over a deadline's rewrite attempts (`r3 evolve --max-tokens`'s
/// default).
const DEADLINE_MODEL_TOKENS: u64 = 200_000;

/// The compile half of tuning, for every stored kernel that matches.
/// `tune --dry-run`'s space (`--egraph`, `--space grid`) and how its table names kernels.
struct DryRunHow {
    egraph: bool,
    grid: bool,
    full_names: bool,
    /// Build and check nvcc's code of each kernel too (`--no-nvcc`: not).
    nvcc: bool,
}

fn tune_dry_run(
    store: Option<&Path>,
    cwd: &Path,
    kernel: Option<&str>,
    all: bool,
    opts: &r3::remix::tune::TuneOptions,
    how: DryRunHow,
) -> Result<i32> {
    let DryRunHow {
        egraph,
        grid,
        full_names,
        nvcc,
    } = how;
    if kernel.is_none() && !all {
        anyhow::bail!("name a kernel, or --all");
    }
    let store = open_store(store, cwd, false)?;
    let index = store.index()?;
    let kernels = r3::remix::dry_run::kernels(&index, kernel)?;
    let space = r3::remix::space::Space::builtin(r3::remix::space::SpaceOptions {
        r3_passes: egraph,
        grid,
        ..Default::default()
    })?;
    // Each row's name: short (unless --full-names), with a short hash where two rows share it
    // (two versions or two builds of one kernel), cut to the table's column with the hash kept.
    let names: Vec<(String, String)> = kernels
        .iter()
        .map(|k| {
            let name = if full_names {
                k.signature.demangled.clone()
            } else {
                r3::store::identity::short_name(&k.signature.demangled)
            };
            (name, k.hash.to_string())
        })
        .collect();
    let labels: Vec<String> = r3::store::identity::with_short_hashes(&names)
        .into_iter()
        .zip(&names)
        .map(|(label, (name, _))| fit_label(&label, name, 44))
        .collect();
    let mut done = 0;
    let mut rows = r3::remix::dry_run::dry_run_kernels(
        &store,
        &kernels,
        &space,
        opts.budget as usize,
        opts.seed,
        nvcc,
        |row| {
            let label = labels.get(done).map_or(row.kernel.as_str(), String::as_str);
            eprintln!("{label}: {} candidates lowered", row.compiled);
            done += 1;
        },
    );
    for (row, label) in rows.iter_mut().zip(&labels) {
        row.kernel = label.clone();
    }
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

/// A table's label of at most `width` characters: `label` is `name` with a short hash after
/// it, or `name` alone; a long name is cut (`…`), the hash after it kept.
fn fit_label(label: &str, name: &str, width: usize) -> String {
    let n = label.chars().count();
    if n <= width {
        return label.to_owned();
    }
    let tail = &label[name.len()..];
    let keep = width.saturating_sub(tail.chars().count() + 1);
    format!("{}…{tail}", name.chars().take(keep).collect::<String>())
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
    use r3::report::export::Format;
    let store = open_store(store, cwd, false)?;
    let format = Format::named(what.format);
    let exported = r3::report::export::export(&store, policy, format, what.kernel)?;
    for note in &exported.notes {
        eprintln!("r3 export: {note}");
    }
    let mut text = serde_json::to_vec_pretty(&exported.value)?;
    text.push(b'\n');
    let count = exported.count;
    match what.output {
        Some(path) => {
            r3::store::write_output(path, &text)
                .with_context(|| format!("writing {}", path.display()))?;
            let unit = match (format == Format::T4, count == 1) {
                (true, true) => "trial",
                (true, false) => "trials",
                (false, true) => "kernel",
                (false, false) => "kernels",
            };
            eprintln!("r3 export: {count} {unit} in {}", path.display());
        }
        None => out!("{}", String::from_utf8_lossy(&text)),
    }
    // Why searches of the store are not in the file, said after what it holds.
    for why in &exported.left_out {
        eprintln!("r3 export: {why}");
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
    // A file where the word names one, else the stored kernel it names.
    let stored;
    let source = if Path::new(input).exists() {
        Input::File(Path::new(input))
    } else {
        stored = r3::store::identity::module_named(store, cwd, input)?;
        Input::Bitcode(&stored.bitcode, &stored.name)
    };
    let (stats, changes) = show(source, pipeline_before, options, input)?;
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
    let outcome = r3::replay::selftest::run(sm)?;
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

/// `r3 __deadline-at FILE SECONDS`: the allocation in `file` as it stood then, and why it
/// decides what it does there.
fn deadline_at(file: &Path, seconds: f64) -> Result<i32> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading the allocation {}", file.display()))?;
    let end: r3::store::deadline::Allocation = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not a deadline's allocation (fix: give the store's deadline/<gpu>/<scope>.json or a bench run's allocation-deadline.json)",
            file.display()
        )
    })?;
    emit(&r3::remix::deadline::explain_at(&end, seconds, 4));
    Ok(0)
}
