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
pub mod compdb;
pub mod depfile;
pub mod launcher;
pub mod locate;
pub mod nvcc;
pub mod plugin;
pub mod probe;
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
    warn_if_under_a_cache(&args);
    run(
        &Compiler {
            clang,
            wrapper: Vec::new(),
            cxx,
        },
        args,
    )
}

/// The compiler a command runs: clang, behind a compiler cache where r3 launches one
/// (`r3 ccache clang++ …`, see [`launcher`]).
pub struct Compiler {
    pub clang: PathBuf,
    /// The cache and its own arguments, run with clang and clang's arguments after them.
    pub wrapper: Vec<OsString>,
    pub cxx: bool,
}

impl Compiler {
    /// The command that compiles: the cache in front of clang, or clang.
    fn command(&self) -> Command {
        match self.wrapper.split_first() {
            Some((cache, rest)) => {
                let mut c = Command::new(cache);
                c.args(rest).arg(&self.clang);
                c
            }
            None => Command::new(&self.clang),
        }
    }
}

/// The driver proper, for `compiler` and the command line after it.
pub fn run(compiler: &Compiler, args: Vec<OsString>) -> i32 {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    // Read through response files: a build that keeps its flags in one is seen whole.
    let args = args::expand_response_files(args, &cwd);
    let (opts, mut clang_args) = args::split_r3_options(args);
    if !opts.unknown.is_empty() {
        warn(&format!(
            "unknown r3 option {} ignored (known: --r3-store=DIR, --r3-apply[=FILE], --r3-apply-rewrites, --r3-off)",
            opts.unknown.join(", ")
        ));
    }
    // Even with r3 off, clang finds the SDK r3 knows: --r3-off turns r3's additions off, not
    // the CUDA installation a working command needs.
    let sdk = sdk::additions(&clang_args);
    clang_args.extend(sdk);
    if opts.off {
        return finish(compiler, &clang_args, &[]);
    }
    if let Some(code) = probe::cmake_compiler_check(compiler, &clang_args) {
        return code;
    }
    // Read once: the store's location, apply and the dependency file all follow from it.
    let found = store::config::find(&cwd);
    if let Err(e) = &found {
        warn(&format!("r3's build settings not used: {e}"));
    }
    let config = found.clone().ok().flatten();
    // Asked only where a store is needed: most compiles of a project are plain C++.
    let locate = || store::locate_with(opts.store.as_deref(), &cwd, || found.clone());
    let apply = match winners_from(&opts, config.as_ref(), &locate, &cwd) {
        Ok(apply) => apply,
        Err(e) => {
            eprintln!("r3: error: {e}");
            return 1;
        }
    };
    // Apply needs the compile's IR, so it captures even where capture is switched off.
    let capture_off = apply.is_none() && std::env::var_os("R3_CAPTURE").is_some_and(|v| v == "0");
    let runtime = runtime_args(&clang_args);
    if capture_off || !args::may_compile_cuda(&clang_args) || args::stops_before_ir(&clang_args) {
        return finish(compiler, &clang_args, &runtime);
    }
    let store = match locate() {
        Ok(loc) => loc.path,
        Err(e) => {
            warn(&format!("kernel capture skipped: {e}"));
            return finish(compiler, &clang_args, &runtime);
        }
    };
    let how = How {
        compiler,
        clang_args: &clang_args,
        runtime: &runtime,
        store: &store,
        apply: apply.as_ref(),
        // The shim reads the build tree's own setting too; the flag reaches it only this way.
        apply_rewrites: opts.apply_rewrites,
    };
    if apply.is_some() {
        let sources = args::cuda_sources(&clang_args, &cwd);
        if sources.len() > 1 {
            return compile_each_source(&how, &sources, config.as_ref());
        }
    }
    compile(&how, config.as_ref())
}

/// A compile of several CUDA sources with apply: each source compiled on its own, so that each
/// object gets its own kernels' code and dispatch table (the shim and the host side of one
/// command share one apply directory). A command that links them, or names one output for
/// all, compiles with clang's code, and says so.
fn compile_each_source(how: &How, sources: &[usize], config: Option<&store::config::Found>) -> i32 {
    let Some(each) = args::one_compile_per_source(how.clang_args, sources) else {
        warn(&format!(
            "tuned kernels not applied: {} CUDA sources in one command that links them or names              one output; compile each with -c to apply",
            sources.len()
        ));
        return compile(
            &How {
                apply: None,
                ..*how
            },
            config,
        );
    };
    // As clang does: every source is compiled, and the command fails if one did.
    each.iter()
        .map(|clang_args| compile(&How { clang_args, ..*how }, config))
        .fold(0, |first, code| if first != 0 { first } else { code })
}

/// One compile, captured and (where asked) applied.
fn compile(how: &How, config: Option<&store::config::Found>) -> i32 {
    let compiler = how.compiler;
    let code = match plugin::plugin(&compiler.clang) {
        // A cache in front of clang would see the plugin's temporary directory as a new
        // argument each time and never hit: the capture then runs beside it. Apply needs the
        // IR before the compile, to work out the table the host side includes.
        Ok(so) if compiler.wrapper.is_empty() && how.apply.is_none() => {
            compile_with_plugin(how, &so)
        }
        // Without the plugin, a separate capture compile gets the same IR, at the cost of a
        // second device front end; `r3 doctor` says which one runs and why.
        _ => compile_with_capture_jobs(how),
    };
    if code == 0 {
        name_what_decides(how, config);
    }
    code
}

/// One compile command as the driver runs it.
#[derive(Clone, Copy)]
struct How<'a> {
    compiler: &'a Compiler,
    clang_args: &'a [OsString],
    runtime: &'a [OsString],
    /// The store this compile's kernels go to.
    store: &'a Path,
    apply: Option<&'a apply::WinnersFrom>,
    /// `--r3-apply-rewrites`: the shim ships validated source rewrites.
    apply_rewrites: bool,
}

/// Where apply takes winners from: `--r3-apply[=FILE]` (or `--r3-apply-rewrites`), else
/// `R3_APPLY` (`1` for the store, or a winners file), else the build tree's `.r3/config`
/// (`apply = true`, or `apply_rewrites = true`); None when apply is off. Err for a winners file that cannot be read: asked for by name, it must be there.
fn winners_from(
    opts: &args::R3Options,
    config: Option<&store::config::Found>,
    locate: &dyn Fn() -> Result<store::Location, store::StoreError>,
    cwd: &Path,
) -> Result<Option<apply::WinnersFrom>, String> {
    // Asking for rewrites asks for apply: `--r3-apply-rewrites` is `--r3-apply` and more.
    let flag = opts.apply.clone().or(opts.apply_rewrites.then_some(None));
    let file = match flag {
        Some(f) => f,
        None => match std::env::var_os("R3_APPLY").filter(|v| !v.is_empty()) {
            Some(v) => match switch_word(&v) {
                Some(false) => return Ok(None),
                Some(true) => None,
                None => Some(PathBuf::from(v)),
            },
            None if config.is_some_and(|c| c.config.apply || c.config.apply_rewrites) => None,
            None => return Ok(None),
        },
    };
    match file {
        Some(f) => {
            let path = cwd.join(f);
            let cannot = |e: String| {
                format!("tuned kernels cannot be applied: {e} (or name no file: --r3-apply or R3_APPLY=1 applies the store's winners)")
            };
            let text =
                std::fs::read(&path).map_err(|e| cannot(format!("{}: {e}", path.display())))?;
            r3_apply::plan::Source::file_text(&path, &text).map_err(|e| cannot(e.to_string()))?;
            Ok(Some(apply::WinnersFrom::File { path, text }))
        }
        None => Ok(Some(apply::WinnersFrom::Store(
            locate().map_err(|e| e.to_string())?.path,
        ))),
    }
}

/// `R3_APPLY`'s words for on and off, as build systems spell booleans (CMake's `ON`, `yes`,
/// `true`); None for anything else, which names a winners file (`./on` names a file called
/// `on`).
fn switch_word(v: &std::ffi::OsStr) -> Option<bool> {
    let v = v.to_str()?.to_ascii_lowercase();
    match v.as_str() {
        "1" | "on" | "yes" | "true" => Some(true),
        "0" | "off" | "no" | "false" => Some(false),
        _ => None,
    }
}

/// Names, in the compile's dependency file, the files that decide what it ships beyond its
/// sources: the store's winners stamp and the build tree's r3 settings (see [`depfile`]).
fn name_what_decides(how: &How, config: Option<&store::config::Found>) {
    let Some(dep) = depfile::of(how.clang_args) else {
        return;
    };
    let mut deps = Vec::new();
    // The store exists once a kernel was captured into it; a compile without kernels (a
    // plain C++ file given as CUDA) leaves no store to depend on.
    if let Ok(stamp) = store::Store::open(how.store).and_then(|s| s.winners_stamp()) {
        deps.push(stamp);
    }
    deps.extend(config.map(|c| c.path.clone()));
    // A winners file decides what ships as the stamp does; a pipe is no file to depend on.
    if let Some(apply::WinnersFrom::File { path, .. }) = how.apply {
        deps.extend(
            std::fs::metadata(path)
                .ok()
                .filter(|m| m.is_file())
                .map(|_| path.clone()),
        );
    }
    if let Err(e) = depfile::add(&dep, &deps) {
        warn(&format!(
            "{} does not name r3's winners (a rebuild after tuning may not apply them): {e}",
            dep.display()
        ));
    }
}

/// Sets up apply for a compile whose captured IR is in `dir`, or nothing (with one warning)
/// when apply cannot run.
fn apply_setup(how: &How, dir: &Path) -> Option<apply::Setup> {
    let from = how.apply?;
    let rewrites = how.apply_rewrites;
    match apply::prepare(
        dir,
        from,
        &how.compiler.clang,
        how.clang_args,
        how.store,
        rewrites,
    ) {
        Ok(setup) => setup,
        Err(e) => {
            warn(&format!("tuned kernels not applied: {e}"));
            None
        }
    }
}

/// The compile with apply: once, or twice where its ptxas runs built another dispatch table
/// than the one its host side included (see `apply::Setup::rebuild`).
fn compile_applied(how: &How, dir: &Path) -> i32 {
    let (compiler, clang_args) = (how.compiler, how.clang_args);
    let mut setup = apply_setup(how, dir);
    let run = |args: &[OsString], env: &apply::Env| {
        let mut extra = how.runtime.to_vec();
        extra.extend_from_slice(args);
        run_with_fallback(compiler, clang_args, &extra, env)
    };
    let Some(s) = setup.as_mut() else {
        return run(&[], &Vec::new()).0;
    };
    let (code, with_r3) = run(&s.args, &s.env);
    if code != 0 || !with_r3 {
        return code;
    }
    match s.rebuild(dir) {
        Ok(None) => code,
        Ok(Some(args)) => run(&args, &s.env).0,
        Err(e) => {
            warn(&format!(
                "the dispatch table the compile built was not included: {e}"
            ));
            code
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
    let (compiler, clang_args) = (how.compiler, how.clang_args);
    let dir = match tempfile::Builder::new().prefix("r3-capture-").tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            warn(&format!(
                "kernel capture skipped: a temporary directory: {e}"
            ));
            return finish(compiler, clang_args, how.runtime);
        }
    };
    let mut extra = vec![OsString::from(format!("-fpass-plugin={}", so.display()))];
    extra.extend_from_slice(how.runtime);
    let env = vec![(plugin::DIR_ENV, dir.path().as_os_str().to_owned())];
    let (code, with_r3) = run_with_fallback(compiler, clang_args, &extra, &env);
    if code == 0 && with_r3 {
        let modules = capture::captured_in(dir.path());
        if !modules.is_empty() {
            if let Err(e) = store_capture(modules, how) {
                warn(&format!("kernel capture skipped: {e}"));
            }
        }
    }
    code
}

/// The real command, and beside it a repeat of each device compile that writes its IR. With
/// apply, the capture compiles run first: the shim inside the real compile reads their IR.
fn compile_with_capture_jobs(how: &How) -> i32 {
    let (compiler, clang_args) = (how.compiler, how.clang_args);
    let plan = match capture::plan(&compiler.clang, clang_args) {
        Ok(plan) if !plan.jobs.is_empty() => plan,
        Ok(_) => return finish(compiler, clang_args, how.runtime),
        Err(e) => {
            warn(&format!("kernel capture skipped: {e}"));
            return finish(compiler, clang_args, how.runtime);
        }
    };
    let (code, captured) = if how.apply.is_some() {
        let captured = capture::run(&plan);
        let code = match &captured {
            Ok(()) => compile_applied(how, plan.dir()),
            Err(_) => run_with_fallback(compiler, clang_args, how.runtime, &[]).0,
        };
        apply_summary(how, plan.dir());
        (code, captured)
    } else {
        std::thread::scope(|s| {
            let real = s.spawn(|| run_with_fallback(compiler, clang_args, how.runtime, &[]).0);
            let captured = capture::run(&plan);
            (real.join().unwrap_or(1), captured)
        })
    };
    if code == 0 {
        let modules = plan.jobs.iter().map(capture::Captured::from).collect();
        let stored = captured
            .map_err(|e| e.to_string())
            .and_then(|()| store_capture(modules, how));
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
    if std::env::var_os("R3_LINK_RUNTIME").is_some_and(|v| v == "0")
        || runtime::stays_out(clang_args)
    {
        return Vec::new();
    }
    match runtime::archive(args::cuda_path_flag(clang_args).as_deref()) {
        Ok(lib) => runtime::link_args(&lib, &cudart, runtime::uses_cuda_ipc(clang_args)),
        Err(e) => {
            warn(&format!("recording support not linked: {e}"));
            Vec::new()
        }
    }
}

/// Runs clang when nothing else is left to do: by exec when r3 adds nothing.
fn finish(compiler: &Compiler, clang_args: &[OsString], extra: &[OsString]) -> i32 {
    if extra.is_empty() {
        exec(compiler, clang_args)
    } else {
        run_with_fallback(compiler, clang_args, extra, &[]).0
    }
}

/// Runs clang with r3's additions (arguments, environment), its output going straight to the
/// user. If that fails, the plain command runs, so that r3's additions are never why a build
/// fails: when it succeeds, r3's additions were at fault (its output is shown, with one
/// warning); when it fails too, the first run's diagnostics were clang's own and stand.
/// Returns clang's exit status and whether r3's additions were in the run that counts.
fn run_with_fallback(
    compiler: &Compiler,
    clang_args: &[OsString],
    extra: &[OsString],
    env: &[(&str, OsString)],
) -> (i32, bool) {
    if extra.is_empty() && env.is_empty() {
        return (status_of(compiler.command().args(clang_args)), false);
    }
    // Both runs keep their diagnostics until it is known which one the build is: what a user
    // sees is plain clang's, never an error of r3's additions (a plugin clang cannot load).
    let clang = &compiler.clang;
    let first = compiler
        .command()
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
            if let Some(mj) = compdb::of(clang_args) {
                if let Err(e) = compdb::strip(&mj, extra) {
                    warn(&format!("{e}: its entries name r3's temporary files"));
                }
            }
            return (0, true);
        }
        Ok(_) => {}
        Err(e) => {
            eprintln!("r3: error: cannot run {}: {e}", clang.display());
            return (1, false);
        }
    }
    let plain = compiler
        .command()
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

fn status_of(cmd: &mut Command) -> i32 {
    match cmd.status() {
        Ok(status) => exit_code(status),
        Err(e) => {
            eprintln!("r3: error: cannot run {:?}: {e}", cmd.get_program());
            1
        }
    }
}

fn store_capture(modules: Vec<capture::Captured>, how: &How) -> Result<(), String> {
    let cwd = std::env::current_dir().map_err(|e| format!("the working directory: {e}"))?;
    let driver = if how.compiler.cxx {
        "r3-clang++"
    } else {
        "r3-clang"
    };
    let clang = &how.compiler.clang;
    let compile = CompileCommand {
        args: std::iter::once(driver.to_owned())
            .chain(
                how.clang_args
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned()),
            )
            .collect(),
        env: CompileCommand::capture_env(),
        clang: clang.to_owned(),
        clang_version: toolchain::clang_version(clang).unwrap_or_default(),
        cwd: cwd.clone(),
    };
    let job = capture::StoreJob {
        store: how.store.to_owned(),
        compile,
        output: args::output_of(how.clang_args),
        artifact: args::output_of(how.clang_args).or_else(|| args::default_output(how.clang_args)),
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
fn exec(compiler: &Compiler, args: &[OsString]) -> i32 {
    let err = compiler.command().args(args).exec();
    eprintln!("r3: error: cannot run {}: {err}", compiler.clang.display());
    1
}

/// A compiler cache that runs r3-clang++ itself (`ccache r3-clang++ …`) skips r3 on every hit,
/// so those compiles' kernels never reach the store. Said once per build (per process that
/// runs the cache), with the order that works: r3 in front of the cache.
fn warn_if_under_a_cache(args: &[OsString]) {
    // Not in the cache's preprocessing run: the cache keeps that run's messages to itself.
    if !args::may_compile_cuda(args) || args::stops_before_ir(args) {
        return;
    }
    let comm = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).ok();
    let parent = std::os::unix::process::parent_id();
    let Some(cache) = comm(parent)
        .map(|c| c.trim().to_owned())
        .filter(|c| matches!(c.as_str(), "ccache" | "sccache" | "buildcache"))
    else {
        return;
    };
    let build = std::fs::read_to_string(format!("/proc/{parent}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit(')')
                .next()?
                .split_whitespace()
                .nth(1)?
                .parse::<u32>()
                .ok()
        })
        .unwrap_or(parent);
    let uid =
        std::fs::metadata("/proc/self").map_or(0, |m| std::os::unix::fs::MetadataExt::uid(&m));
    let marker = std::env::temp_dir().join(format!("r3-under-{cache}-{uid}-{build}"));
    if std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&marker)
        .is_ok()
    {
        eprintln!(
            "r3: warning: {cache} runs r3-clang++, so a cache hit skips r3 and that compile's kernels are not captured; fix: put r3 in front of the cache (CMake: -DCMAKE_CUDA_COMPILER_LAUNCHER=\"r3;{cache}\", which r3's toolchain file sets by itself; Make: CXX=\"r3 {cache} clang++\")"
        );
    }
}

/// The exit status a shell would report for clang: its code, or 128 + the signal.
fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    #[test]
    fn r3_apply_takes_the_words_build_systems_use_for_on_and_off() {
        let word = |w: &str| super::switch_word(std::ffi::OsStr::new(w));
        for on in ["1", "ON", "on", "Yes", "TRUE"] {
            assert_eq!(word(on), Some(true), "{on}");
        }
        for off in ["0", "OFF", "no", "False"] {
            assert_eq!(word(off), Some(false), "{off}");
        }
        for file in ["w.json", "./on", "onward"] {
            assert_eq!(word(file), None, "{file}");
        }
    }
}
