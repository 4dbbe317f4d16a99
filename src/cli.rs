//! The command-line interface: parsing and printing only; the work is in the library.

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};

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
    #[arg(long = "r3-store", global = true, value_name = "DIR")]
    store: Option<PathBuf>,
    /// CUDA SDK root (default: R3_CUDA_PATH, then scripts/setup's cache, then CUDA_HOME, /usr/local/cuda).
    #[arg(long, global = true, value_name = "DIR")]
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
        #[arg(long)]
        json: bool,
    },
    /// Run a program built by r3-clang++ and record each kernel launch's device inputs and outputs.
    Record {
        /// Distinct launches to record per kernel.
        #[arg(long, default_value_t = 4)]
        launches: u32,
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
        /// Evaluations per kernel.
        #[arg(long, default_value_t = 100)]
        budget: u32,
        /// Search strategy: bo, random, local, evolution.
        #[arg(long, default_value = "bo")]
        strategy: String,
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Run one recorded launch with a given pipeline or configuration; check the outputs and time it.
    Replay {
        kernel: String,
        /// Pass pipeline in `opt -passes=` syntax.
        #[arg(long)]
        pipeline: Option<String>,
        #[arg(long, default_value_t = 100)]
        repeat: u32,
        #[arg(long)]
        json: bool,
    },
    /// Pass-order reports: baseline vs best, pipeline diff, pass importance, convergence.
    Report {
        kernels: Vec<String>,
        /// term, md, html or json.
        #[arg(long, default_value = "term")]
        format: String,
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// The pass catalog and pipeline presets (passes/*.toml).
    Passes {
        /// Print a preset's full pipeline text, e.g. O3.
        #[arg(long, value_name = "PRESET")]
        print: Option<String>,
    },
    /// Optimize a device IR file (.ll or .bc) with a pipeline and lower it to PTX.
    Ptx {
        /// Device LLVM IR, textual or bitcode.
        input: PathBuf,
        /// Pass pipeline in `opt -passes=` syntax; empty for none.
        #[arg(long, default_value = "default<O3>")]
        pipeline: String,
        /// GPU architecture.
        #[arg(long, default_value = "sm_90")]
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
        #[arg(long)]
        json: bool,
    },
    /// End-to-end check: lower a built-in saxpy kernel to PTX, and on a GPU load, run, verify and time it.
    Selftest {
        /// Fail (exit 1) when no GPU is present instead of stopping after PTX.
        #[arg(long)]
        require_gpu: bool,
        /// Lower for this architecture instead of the GPU present.
        #[arg(long)]
        sm: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

pub fn main() -> i32 {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("r3: error: {e:#}");
            1
        }
    }
}

fn not_built(what: &str, issue: u32) -> Result<i32> {
    eprintln!("r3 {what}: not built yet (tracked in issue #{issue}); nothing was done");
    Ok(2)
}

fn run(cli: Cli) -> Result<i32> {
    let cwd = std::env::current_dir().context("reading the working directory")?;
    match cli.command {
        Cmd::Doctor { json } => doctor(cli.cuda_path.as_deref(), cli.store.as_deref(), &cwd, json),
        Cmd::Kernels { json } => kernels(cli.store.as_deref(), &cwd, json),
        Cmd::Record { .. } => not_built("record", 5),
        Cmd::Tune { .. } => not_built("tune", 7),
        Cmd::Replay { .. } => not_built("replay", 6),
        Cmd::Report { .. } => not_built("report", 9),
        Cmd::Passes { .. } => not_built("passes", 7),
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

fn doctor(cuda: Option<&Path>, store: Option<&Path>, cwd: &Path, json: bool) -> Result<i32> {
    let report = r3::doctor::run(cuda, store, cwd);
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", r3::doctor::render(&report));
    }
    Ok(if report.healthy() { 0 } else { 1 })
}

fn kernels(store: Option<&Path>, cwd: &Path, json: bool) -> Result<i32> {
    let loc = r3::store::locate(store, cwd);
    let store = r3::store::Store::open(&loc.path)?;
    let kernels = store.kernels()?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r3::report::kernels::by_source(&kernels))?
        );
    } else {
        print!("{}", r3::report::kernels::render(&kernels, store.root()));
    }
    Ok(0)
}

fn ptx_cmd(
    input: &Path,
    pipeline: &str,
    cg: &r3::lower::Codegen,
    output: Option<&Path>,
    stats: bool,
) -> Result<i32> {
    let ctx = inkwell::context::Context::create();
    let module = r3::ir::load_file(&ctx, input)?;
    let ptx = r3::lower::to_ptx(&module, pipeline, cg)?;
    match output {
        Some(path) => r3::store::write_atomic(path, ptx.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?,
        None => print!("{ptx}"),
    }
    if stats {
        let s = r3::lower::ptx_stats(&ptx);
        eprintln!(
            "{}: {} PTX instructions, entries: {}",
            input.display(),
            s.instructions,
            s.entries.join(", ")
        );
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
    let ctx = inkwell::context::Context::create();
    let module = if Path::new(input).exists() {
        r3::ir::load_file(&ctx, Path::new(input))?
    } else {
        let loc = r3::store::locate(store, cwd);
        let store = r3::store::Store::open(&loc.path)
            .with_context(|| format!("'{input}' is no file, and the store cannot be opened"))?;
        let k = store
            .kernels()?
            .into_iter()
            .find(|k| {
                k.hash.starts_with(input)
                    || k.signature.name == input
                    || k.signature.demangled == input
            })
            .with_context(|| format!("'{input}' is neither a file nor a recorded kernel"))?;
        let bytes = store.kernel_bitcode(&k.hash)?;
        r3::ir::load_bytes(&ctx, &bytes, &k.signature.name)?
    };
    let opts = r3::egraph::EgraphOptions::parse(options)?;
    let tm = r3::lower::target_machine(&r3::lower::Codegen::default())?;
    r3::ir::run_pipeline(&module, pipeline_before, &tm)?;
    let (stats, changes) = r3::egraph::run_with_report(&module, &opts)?;
    r3::ir::verify(&module, &format!("{input} after r3-egraph"))?;
    if json {
        let out = serde_json::json!({ "stats": stats, "functions": changes });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for c in &changes {
            println!(
                "; ==== {}: {} -> {} instructions\n; ---- before\n{}\n; ---- after\n{}",
                c.name,
                c.instructions_before,
                c.instructions_after,
                c.before.trim_end(),
                c.after.trim_end()
            );
        }
        print!("{}", stats.render());
    }
    Ok(0)
}

fn selftest(require_gpu: bool, sm: Option<&str>, json: bool) -> Result<i32> {
    let outcome = r3::selftest::run(sm)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
    } else {
        print!("{}", r3::selftest::render(&outcome));
    }
    let passed = outcome.run.as_ref().map(|r| r.mismatches == 0);
    Ok(match passed {
        Some(true) => 0,
        Some(false) => 1,
        None if require_gpu => 1,
        None => 0,
    })
}
