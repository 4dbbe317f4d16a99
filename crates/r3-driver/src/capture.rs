//! Kernel capture: the device IR of a command before LLVM's passes, split into one module per
//! kernel and stored. The IR comes from r3's clang plugin inside the real compile
//! (`super::plugin`), or, where that plugin cannot be had, from repeating each device compile
//! with `-emit-llvm-bc -disable-llvm-passes` ([`plan`], [`run`]).

use super::args::{self, DeviceJob};
use super::locate;
use crate::ir::{self, extract};
use crate::store::{CompileCommand, Store, Unit};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("cannot run {clang}: {msg}")]
    Spawn { clang: String, msg: String },
    #[error("the device compile of {input} for {arch} failed: {msg}")]
    DeviceCompile {
        input: String,
        arch: String,
        msg: String,
    },
    #[error(transparent)]
    Ir(#[from] ir::IrError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("temporary files: {0}")]
    Temp(std::io::Error),
}

/// What a command compiles for the device, and where the captured bitcode goes.
pub struct Plan {
    pub jobs: Vec<(DeviceJob, PathBuf)>,
    dir: tempfile::TempDir,
}

impl Plan {
    /// Where the capture compiles write their bitcode.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// Asks clang (`-###`) which device compiles `args` runs. An empty plan means nothing to capture.
pub fn plan(clang: &Path, args: &[OsString]) -> Result<Plan, CaptureError> {
    // Under -save-temps clang splits each device compile in steps (preprocess, IR, PTX) whose
    // inputs exist only as it runs; without it, one step compiles the source, as the capture
    // needs, to the same IR.
    let saves_temps = |a: &&OsString| {
        a.to_str().is_some_and(|a| {
            a == "-save-temps" || a.starts_with("-save-temps=") || a == "--save-temps"
        })
    };
    let out = Command::new(clang)
        .arg("-###")
        .args(args.iter().filter(|a| !saves_temps(a)))
        .output()
        .map_err(|e| CaptureError::Spawn {
            clang: clang.display().to_string(),
            msg: e.to_string(),
        })?;
    let dir = tempfile::Builder::new()
        .prefix("r3-capture-")
        .tempdir()
        .map_err(CaptureError::Temp)?;
    let mut jobs = Vec::new();
    if out.status.success() {
        for (i, job) in args::parse_jobs(&String::from_utf8_lossy(&out.stderr))
            .iter()
            .enumerate()
        {
            let bc = dir.path().join(format!("job{i}.bc"));
            if let Some(d) = args::device_job(job, &bc) {
                jobs.push((d, bc));
            }
        }
    }
    Ok(Plan { jobs, dir })
}

/// Runs the capture compiles. Their diagnostics are dropped: the real compile reports its own.
pub fn run(plan: &Plan) -> Result<(), CaptureError> {
    for (job, _) in &plan.jobs {
        let out = Command::new(&job.capture[0])
            .args(&job.capture[1..])
            .output()
            .map_err(|e| CaptureError::Spawn {
                clang: job.capture[0].clone(),
                msg: e.to_string(),
            })?;
        if !out.status.success() {
            let msg = String::from_utf8_lossy(&out.stderr)
                .lines()
                .next()
                .unwrap_or("no message")
                .to_owned();
            return Err(CaptureError::DeviceCompile {
                input: job.input.display().to_string(),
                arch: job.arch.clone(),
                msg,
            });
        }
    }
    Ok(())
}

/// One captured device module. What the plugin captures names its source file and arch
/// inside the module; what the capture compile wrote is named by its job.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Captured {
    pub bitcode: PathBuf,
    pub input: Option<PathBuf>,
    pub arch: Option<String>,
}

impl From<&(DeviceJob, PathBuf)> for Captured {
    fn from((job, bc): &(DeviceJob, PathBuf)) -> Self {
        Captured {
            bitcode: bc.clone(),
            input: Some(job.input.clone()),
            arch: Some(job.arch.clone()),
        }
    }
}

/// The modules the plugin wrote into `dir`, in a stable order.
pub fn captured_in(dir: &Path) -> Vec<Captured> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "bc"))
        .collect();
    found.sort();
    found
        .into_iter()
        .map(|bitcode| Captured {
            bitcode,
            input: None,
            arch: None,
        })
        .collect()
}

/// What one command added to the store.
#[derive(Debug, Default)]
struct Stored {
    /// Kernels new to the store.
    new: usize,
    /// New kernels compiled without optimization, by name: r3 cannot tune them.
    unoptimized: Vec<String>,
}

/// Splits every captured module into kernels and writes them and the units to the store.
fn store_modules(
    modules: &[Captured],
    store: &Store,
    compile: &CompileCommand,
    output: Option<&Path>,
    artifact: Option<&Path>,
) -> Result<Stored, CaptureError> {
    let mut units: BTreeMap<PathBuf, BTreeMap<String, Vec<crate::kernel::KernelHash>>> =
        BTreeMap::new();
    let mut stored = Stored::default();
    for m in modules {
        let ctx = inkwell::context::Context::create();
        let module = ir::load_file(&ctx, &m.bitcode)?;
        let input = m.input.clone().unwrap_or_else(|| {
            PathBuf::from(module.get_source_file_name().to_string_lossy().as_ref())
        });
        let what = format!(
            "{} ({})",
            input.display(),
            m.arch.as_deref().unwrap_or("device")
        );
        let mut kernels = extract::split(&module, &what)?;
        let Some(first) = kernels.first() else {
            continue; // e.g. CMake's compiler checks: nothing to tune, nothing to rebuild
        };
        let arch = m
            .arch
            .clone()
            .unwrap_or_else(|| first.signature.arch.clone());
        let source = absolute(&compile.cwd, &input);
        // Without debug info (the plugin sees the user's own flags), the line comes from the
        // source text.
        locate::fill_missing(&mut kernels, &source, &compile.args, &compile.cwd);
        let hashes = units.entry(source).or_default().entry(arch).or_default();
        for km in kernels {
            let new = store.put_kernel(&km, compile)?;
            stored.new += usize::from(new);
            if new && km.signature.unoptimized {
                stored.unoptimized.push(km.signature.demangled.clone());
            }
            // -save-temps runs the pipeline twice, so the same module may come twice.
            if !hashes.contains(&km.hash) {
                hashes.push(km.hash);
            }
        }
    }
    let output = output.map(|o| absolute(&compile.cwd, o));
    let fatbins = artifact
        .map(|a| crate::store::records::fatbin_hashes(&absolute(&compile.cwd, a)))
        .unwrap_or_default();
    for (source, kernels) in units {
        let id = Unit::id_for(&source, output.as_deref());
        let unit = Unit {
            format: crate::store::FORMAT,
            id,
            source,
            output: output.clone(),
            kernels,
            fatbins: fatbins.clone(),
            compile: compile.clone(),
        };
        store.put_unit(&unit)?;
    }
    Ok(stored)
}

/// The one warning for kernels r3 stored but cannot tune: -O0 code is `optnone`, which every
/// LLVM pass skips, so each candidate pipeline would give the same code as the baseline.
fn unoptimized_warning(names: &[String]) -> Option<String> {
    let (first, rest) = names.split_first()?;
    let more = match rest.len() {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    Some(format!(
        "r3: warning: kernel {first}{more} was compiled without optimization (-O0), so r3 cannot \
         tune it; build with -O3 (with CMake: -DCMAKE_BUILD_TYPE=Release)"
    ))
}

/// What the `r3 __capture` child reads on stdin: captured bitcode to split and store.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct StoreJob {
    pub store: PathBuf,
    pub compile: CompileCommand,
    pub output: Option<PathBuf>,
    /// The file the command wrote that holds its fatbinaries (its output, or clang's default
    /// name for it): their hashes tie recordings to this compile.
    #[serde(default)]
    pub artifact: Option<PathBuf>,
    pub modules: Vec<Captured>,
}

/// The child side: splits and stores; an error goes to stderr as one line, exit 1.
pub fn serve() -> i32 {
    // A fail point for the tests: this child dies the way an LLVM crash would.
    if std::env::var_os("R3_TEST_CRASH_CAPTURE").is_some() {
        std::process::abort();
    }
    let Some(job) = r3_process::read_request::<StoreJob>(&mut std::io::stdin().lock()) else {
        return 2;
    };
    let result = job
        .map_err(|e| format!("bad capture job: {e}"))
        .and_then(|job| store_job(&job).map_err(|e| e.to_string()));
    match result {
        Ok(stored) => {
            if let Some(w) = unoptimized_warning(&stored.unoptimized) {
                eprintln!("{w}");
            }
            0
        }
        Err(e) => {
            eprintln!("{e}");
            1
        }
    }
}

fn store_job(job: &StoreJob) -> Result<Stored, CaptureError> {
    let store = Store::create(&job.store)?;
    store_modules(
        &job.modules,
        &store,
        &job.compile,
        job.output.as_deref(),
        job.artifact.as_deref(),
    )
}

/// How long splitting and storing one command's IR may take: a hung child must not hang the
/// user's build (its kernels are then not stored, with a warning).
const CAPTURE_LIMIT: std::time::Duration = std::time::Duration::from_secs(3600);

/// Runs the splitting and storing in a child process (`r3 __capture`): LLVM runs there, so not
/// even a crash in it can change the exit status of the build. Err is one line for the warning.
pub fn store_isolated(job: &StoreJob) -> Result<(), String> {
    use r3_process::{Child, Stderr};
    let exe = r3_process::current_r3().map_err(|e| format!("finding r3: {e}"))?;
    let mut child = Child::spawn(&exe, &["__capture"], Stderr::Keep)
        .map_err(|e| format!("starting r3 __capture: {e}"))?;
    let _ = child.send(job);
    let Some(exit) = child.finish(CAPTURE_LIMIT) else {
        return Err(format!(
            "r3's IR processing did not finish within {} min",
            CAPTURE_LIMIT.as_secs() / 60
        ));
    };
    if exit.status.success() {
        // The child's only words on success are warnings meant for the user.
        for line in exit
            .stderr
            .lines()
            .filter(|l| l.starts_with("r3: warning:"))
        {
            eprintln!("{line}");
        }
        return Ok(());
    }
    match exit.signal() {
        Some(sig) => Err(format!("r3's IR processing crashed (signal {sig})")),
        None => Err(exit
            .stderr
            .lines()
            .next()
            .unwrap_or("r3 __capture failed")
            .to_owned()),
    }
}

fn absolute(cwd: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_owned()
    } else {
        cwd.join(p)
    }
}
