//! `r3-clang` / `r3-clang++`: a drop-in clang that also captures each CUDA kernel's device IR.
//!
//! The user's command always runs (minus r3's `--r3-*` options), and its output, diagnostics
//! and exit status are the driver's. r3 adds to it only what leaves its outputs unchanged: the
//! capture plugin (device IR) and, in links, the recording runtime. If anything of r3's own
//! fails, one `r3: warning:` line is printed and the build goes on as with plain clang.

use r3_ir as ir;
use r3_ir::toolchain;
use r3_kernel as kernel;
use r3_store as store;

pub mod apply;
pub mod args;
pub mod capture;
pub mod locate;
pub mod plugin;
pub mod runtime;
pub mod sdk;

use crate::store::CompileCommand;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

/// Runs the driver for `args` (without argv[0]); returns the process exit status.
pub fn main(cxx: bool, args: Vec<OsString>) -> i32 {
    let (opts, mut clang_args) = args::split_r3_options(args);
    if let Some(problem) = toolchain::clang_override_problem(cxx) {
        warn(&problem);
    }
    let clang = match toolchain::find_clang(cxx) {
        Ok(found) => found.path,
        Err(e) => {
            eprintln!("r3: error: {e}");
            return 1;
        }
    };
    if !opts.unknown.is_empty() {
        warn(&format!(
            "unknown r3 option {} ignored (known: --r3-store=DIR, --r3-apply[=FILE], --r3-off)",
            opts.unknown.join(", ")
        ));
    }
    if !opts.off {
        let sdk = sdk::additions(&clang_args);
        clang_args.extend(sdk);
    }
    let apply = (!opts.off).then(|| winners_from(&opts)).flatten();
    // Apply needs the compile's IR, so it captures even where capture is switched off.
    let capture_off =
        opts.off || (apply.is_none() && std::env::var_os("R3_CAPTURE").is_some_and(|v| v == "0"));
    let runtime = if opts.off {
        Vec::new()
    } else {
        runtime_args(&clang_args)
    };
    if capture_off || !args::may_compile_cuda(&clang_args) || args::stops_before_ir(&clang_args) {
        return finish(&clang, &clang_args, &runtime);
    }
    let how = How {
        clang: &clang,
        clang_args: &clang_args,
        runtime: &runtime,
        opts: &opts,
        cxx,
        apply: apply.as_ref(),
    };
    match plugin::plugin(&clang) {
        Ok(so) => compile_with_plugin(&how, &so),
        // Without the plugin, a separate capture compile gets the same IR, at the cost of a
        // second device front end; `r3 doctor` says which one runs and why.
        Err(_) => compile_with_capture_jobs(&how),
    }
}

/// One compile command as the driver runs it.
struct How<'a> {
    clang: &'a Path,
    clang_args: &'a [OsString],
    runtime: &'a [OsString],
    opts: &'a args::R3Options,
    cxx: bool,
    apply: Option<&'a apply::WinnersFrom>,
}

/// Where apply takes winners from: `--r3-apply[=FILE]`, else `R3_APPLY` (`1` for the store, or
/// a winners file); None when apply is off.
fn winners_from(opts: &args::R3Options) -> Option<apply::WinnersFrom> {
    let cwd = std::env::current_dir().ok()?;
    let file = match &opts.apply {
        Some(f) => f.clone(),
        None => match std::env::var_os("R3_APPLY").filter(|v| !v.is_empty() && v != "0") {
            Some(v) if v == "1" => None,
            Some(v) => Some(PathBuf::from(v)),
            None => return None,
        },
    };
    Some(match file {
        Some(f) => apply::WinnersFrom::File(cwd.join(f)),
        None => apply::WinnersFrom::Store(store::locate(opts.store.as_deref(), &cwd).path),
    })
}

/// Sets up apply for a compile whose captured IR lands in `dir`: the extra arguments and
/// environment, or nothing (with one warning) when apply cannot run.
fn apply_setup(how: &How, dir: &Path) -> (Vec<OsString>, apply::Env) {
    let Some(from) = how.apply else {
        return Default::default();
    };
    match apply::prepare(dir, from, how.clang, how.clang_args) {
        Ok(setup) => setup.unwrap_or_default(),
        Err(e) => {
            warn(&format!("tuned kernels not applied: {e}"));
            Default::default()
        }
    }
}

/// The one line about what apply did, if it did anything worth a line.
fn apply_summary(how: &How, dir: &Path) {
    if how.apply.is_some() {
        if let Some(line) = apply::summary(dir) {
            eprintln!("{line}");
        }
    }
}

/// The real command with r3's plugin loaded: it writes the device IR as it compiles.
fn compile_with_plugin(how: &How, so: &Path) -> i32 {
    let (clang, clang_args) = (how.clang, how.clang_args);
    let dir = match tempfile::Builder::new().prefix("r3-capture-").tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            warn(&format!(
                "kernel capture skipped: a temporary directory: {e}"
            ));
            return finish(clang, clang_args, how.runtime);
        }
    };
    let (apply_args, apply_env) = apply_setup(how, dir.path());
    let mut extra = vec![OsString::from(format!("-fpass-plugin={}", so.display()))];
    extra.extend_from_slice(how.runtime);
    extra.extend(apply_args);
    let mut env = vec![(plugin::DIR_ENV, dir.path().as_os_str().to_owned())];
    env.extend(apply_env);
    let (code, with_r3) = run_with_fallback(clang, clang_args, &extra, &env);
    if code == 0 && with_r3 {
        apply_summary(how, dir.path());
        let modules = capture::captured_in(dir.path());
        if !modules.is_empty() {
            if let Err(e) = store_capture(modules, how.opts, clang, how.cxx, clang_args) {
                warn(&format!("kernel capture skipped: {e}"));
            }
        }
    }
    code
}

/// The real command, and beside it a repeat of each device compile that writes its IR. With
/// apply, the capture compiles run first: the shim inside the real compile reads their IR.
fn compile_with_capture_jobs(how: &How) -> i32 {
    let (clang, clang_args) = (how.clang, how.clang_args);
    let plan = match capture::plan(clang, clang_args) {
        Ok(plan) if !plan.jobs.is_empty() => plan,
        Ok(_) => return finish(clang, clang_args, how.runtime),
        Err(e) => {
            warn(&format!("kernel capture skipped: {e}"));
            return finish(clang, clang_args, how.runtime);
        }
    };
    let (code, captured) = if how.apply.is_some() {
        let captured = capture::run(&plan);
        let (apply_args, apply_env) = match &captured {
            Ok(()) => apply_setup(how, plan.dir()),
            Err(_) => Default::default(),
        };
        let mut extra = how.runtime.to_vec();
        extra.extend(apply_args);
        let (code, _) = run_with_fallback(clang, clang_args, &extra, &apply_env);
        apply_summary(how, plan.dir());
        (code, captured)
    } else {
        std::thread::scope(|s| {
            let real = s.spawn(|| run_with_fallback(clang, clang_args, how.runtime, &[]).0);
            let captured = capture::run(&plan);
            (real.join().unwrap_or(1), captured)
        })
    };
    if code == 0 {
        let modules = plan.jobs.iter().map(capture::Captured::from).collect();
        let stored = captured
            .map_err(|e| e.to_string())
            .and_then(|()| store_capture(modules, how.opts, clang, how.cxx, clang_args));
        if let Err(e) = stored {
            warn(&format!("kernel capture skipped: {e}"));
        }
    }
    code
}

/// Link arguments for recording support, or none (with one warning if r3 cannot provide it).
fn runtime_args(clang_args: &[OsString]) -> Vec<OsString> {
    let Some(cudart) = runtime::cudart_arg(clang_args) else {
        return Vec::new();
    };
    if std::env::var_os("R3_LINK_RUNTIME").is_some_and(|v| v == "0") {
        return Vec::new();
    }
    match runtime::archive(args::cuda_path_flag(clang_args).as_deref()) {
        Ok(lib) => runtime::link_args(&lib, &cudart),
        Err(e) => {
            warn(&format!("recording support not linked: {e}"));
            Vec::new()
        }
    }
}

/// Runs clang when nothing else is left to do: by exec when r3 adds nothing.
fn finish(clang: &Path, clang_args: &[OsString], extra: &[OsString]) -> i32 {
    if extra.is_empty() {
        exec(clang, clang_args)
    } else {
        run_with_fallback(clang, clang_args, extra, &[]).0
    }
}

/// Runs clang with r3's additions (arguments, environment), its output going straight to the
/// user. If that fails, the plain command runs, so that r3's additions are never why a build
/// fails: when it succeeds, r3's additions were at fault (its output is shown, with one
/// warning); when it fails too, the first run's diagnostics were clang's own and stand.
/// Returns clang's exit status and whether r3's additions were in the run that counts.
fn run_with_fallback(
    clang: &Path,
    clang_args: &[OsString],
    extra: &[OsString],
    env: &[(&str, OsString)],
) -> (i32, bool) {
    if extra.is_empty() && env.is_empty() {
        return (run(Command::new(clang).args(clang_args)), false);
    }
    // Both runs keep their diagnostics until it is known which one the build is: what a user
    // sees is plain clang's, never an error of r3's additions (a plugin clang cannot load).
    let first = Command::new(clang)
        .args(clang_args)
        .args(color_like_a_terminal(clang_args))
        .args(extra)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .output();
    match first {
        Ok(out) if out.status.success() => {
            let _ = std::io::stderr().write_all(&out.stderr);
            return (0, true);
        }
        Ok(_) => {}
        Err(e) => {
            eprintln!("r3: error: cannot run {}: {e}", clang.display());
            return (1, false);
        }
    }
    let plain = Command::new(clang)
        .args(clang_args)
        .args(color_like_a_terminal(clang_args))
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .output();
    match plain {
        Ok(out) => {
            let _ = std::io::stderr().write_all(&out.stderr);
            if out.status.success() {
                warn("clang failed with r3's additions (capture plugin, recording runtime or tuned kernels), and succeeded without them");
            }
            (exit_code(out.status), false)
        }
        Err(e) => {
            eprintln!("r3: error: cannot run {}: {e}", clang.display());
            (1, false)
        }
    }
}

/// clang colours its diagnostics only on a terminal; with its error output piped through r3,
/// ask for what it would have done, unless the command says itself.
fn color_like_a_terminal(clang_args: &[OsString]) -> Option<&'static str> {
    use std::io::IsTerminal;
    let says = clang_args.iter().any(|a| {
        a.to_str().is_some_and(|a| {
            a.contains("color-diagnostics") || a.starts_with("-fdiagnostics-color")
        })
    });
    (!says && std::io::stderr().is_terminal()).then_some("-fcolor-diagnostics")
}

fn run(cmd: &mut Command) -> i32 {
    match cmd.status() {
        Ok(status) => exit_code(status),
        Err(e) => {
            eprintln!("r3: error: cannot run {:?}: {e}", cmd.get_program());
            1
        }
    }
}

fn store_capture(
    modules: Vec<capture::Captured>,
    opts: &args::R3Options,
    clang: &Path,
    cxx: bool,
    clang_args: &[OsString],
) -> Result<(), String> {
    let cwd = std::env::current_dir().map_err(|e| format!("the working directory: {e}"))?;
    let driver = if cxx { "r3-clang++" } else { "r3-clang" };
    let compile = CompileCommand {
        args: std::iter::once(driver.to_owned())
            .chain(clang_args.iter().map(|a| a.to_string_lossy().into_owned()))
            .collect(),
        env: CompileCommand::capture_env(),
        clang: clang.to_owned(),
        clang_version: toolchain::clang_version(clang).unwrap_or_default(),
        cwd: cwd.clone(),
    };
    let job = capture::StoreJob {
        store: store::locate(opts.store.as_deref(), &cwd).path,
        compile,
        output: args::output_of(clang_args),
        artifact: args::output_of(clang_args).or_else(|| args::default_output(clang_args)),
        modules,
    };
    capture::store_isolated(&job)
}

/// r3's one line about itself (at most one per command); the build's output stays clang's.
fn warn(msg: &str) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        eprintln!("r3: warning: {msg}; the build goes on as with plain clang");
    }
}

/// Replaces this process with clang, so that nothing of r3 stands between clang and the build.
fn exec(clang: &Path, args: &[OsString]) -> i32 {
    let err = Command::new(clang).args(args).exec();
    eprintln!("r3: error: cannot run {}: {err}", clang.display());
    1
}

/// The exit status a shell would report for clang: its code, or 128 + the signal.
fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}
