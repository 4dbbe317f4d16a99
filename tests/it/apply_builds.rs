//! Builds with apply on, as build tools run them (issue 59): the dispatch header a compile
//! includes is the store's, named by its content, so that a second build with nothing changed
//! has nothing to do under Ninja and Make, its dependency files name only files that are
//! there, and a compiler cache in front of clang hits while what ships stays the same, and
//! misses once it changes.

use crate::apply::scan_tuned_in_simulation;
use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A CUDA source with no kernel, built beside scan.cu (a main.cu of a real project).
const NO_KERNEL: &str = "int helper(int x) { return x + 1; }\n";

/// The flags of a CUDA compile for sm_90 against the SDK r3 finds, with the corpus headers.
fn cuda_flags() -> String {
    let cuda = r3::toolchain::find_cuda(None).unwrap().path;
    format!(
        "-x cuda --cuda-gpu-arch=sm_90 -Wno-unknown-cuda-version -O3 --cuda-path={} -I {}",
        cuda.display(),
        repo().join("llvm-ir-corpus/common").display()
    )
}

/// `tool` on PATH, or None with the skip said.
fn tool(name: &str, what: &str) -> Option<PathBuf> {
    let found = r3::toolchain::which(name);
    if found.is_none() {
        skip(
            name,
            &format!("{name} is not installed: {what} not checked"),
        );
    }
    found
}

/// A project in `d/project`: scan.cu (tuned in the store) and plain.cu (no kernel).
fn project(d: &Path, src: &Path) -> PathBuf {
    let p = d.join("project");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::copy(src, p.join("scan.cu")).unwrap();
    std::fs::write(p.join("plain.cu"), NO_KERNEL).unwrap();
    p
}

/// `program args` in `dir` with the store and simulated winners allowed (what the scan was
/// tuned with).
fn run_in(dir: &Path, store: &Path, program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("R3_STORE", store)
        .env("R3_APPLY_SIMULATED", "1")
        .output()
        .unwrap()
}

/// Every file a dependency list names exists, and r3's header among them is the store's.
fn deps_exist(deps: &str, store: &Path) {
    let named: Vec<&str> = deps
        .split_whitespace()
        .filter(|w| w.starts_with('/') && !w.ends_with(':'))
        .collect();
    assert!(!named.is_empty(), "{deps}");
    for f in &named {
        assert!(Path::new(f).exists(), "{f} is named but not there: {deps}");
    }
    let headers: Vec<&&str> = named.iter().filter(|f| f.contains("dispatch")).collect();
    assert_eq!(headers.len(), 1, "one dispatch header: {deps}");
    assert!(
        headers[0].starts_with(&store.join("dispatch").display().to_string()),
        "the store's: {deps}"
    );
    assert!(!deps.contains("r3-capture-"), "no temporary file: {deps}");
}

#[test]
fn a_second_ninja_build_with_apply_on_has_nothing_to_do() {
    let Some(ninja) = tool("ninja", "Ninja builds with apply on") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (store, src) = scan_tuned_in_simulation(d);
    let p = project(d, &src);
    let links = driver_links(d);
    let cxx = links.join("r3-clang++");
    let link: Vec<String> = cudart_link();
    std::fs::write(
        p.join("build.ninja"),
        format!(
            "rule cu\n  command = {cxx} {flags} --r3-apply -MD -MF $out.d -c $in -o $out\n  depfile = $out.d\n  deps = gcc\n\
             rule link\n  command = {cxx} $in -o $out {link}\n\
             build scan.o: cu scan.cu\nbuild plain.o: cu plain.cu\nbuild app: link scan.o plain.o\n",
            cxx = cxx.display(),
            flags = cuda_flags(),
            link = link.join(" ")
        ),
    )
    .unwrap();
    let first = run_in(&p, &store, &ninja, &[]);
    assert!(
        first.status.success(),
        "{}{}",
        stdout(&first),
        stderr(&first)
    );
    assert!(
        stdout(&first).contains("r3: note: applied tuned code to scan_tile_totals_kernel"),
        "{}",
        stdout(&first)
    );
    for _ in 0..2 {
        let explain = run_in(&p, &store, &ninja, &["-n", "-d", "explain"]);
        let text = format!("{}{}", stdout(&explain), stderr(&explain));
        assert!(
            text.contains("ninja: no work to do.") && !text.contains("ninja explain:"),
            "{text}"
        );
        let again = run_in(&p, &store, &ninja, &[]);
        assert!(
            stdout(&again).contains("ninja: no work to do."),
            "{}",
            stdout(&again)
        );
    }
    for object in ["scan.o", "plain.o"] {
        let deps = run_in(&p, &store, &ninja, &["-t", "deps", object]);
        deps_exist(&stdout(&deps), &store);
    }
    // The source changed: that object alone is rebuilt, with the same header.
    let text = std::fs::read_to_string(p.join("scan.cu")).unwrap();
    std::fs::write(p.join("scan.cu"), format!("{text}\n")).unwrap();
    let explain = run_in(&p, &store, &ninja, &["-n", "-d", "explain"]);
    let text = stderr(&explain);
    assert!(
        text.contains("scan.o is dirty") && !text.contains("plain.o is dirty"),
        "{text}"
    );
}

#[test]
fn a_second_make_build_with_apply_on_is_up_to_date() {
    let Some(make) = tool("make", "Make builds with apply on") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (store, src) = scan_tuned_in_simulation(d);
    let p = project(d, &src);
    let links = driver_links(d);
    std::fs::write(
        p.join("Makefile"),
        format!(
            "CXX := {cxx}\nOBJS := scan.o plain.o\napp: $(OBJS)\n\t$(CXX) $^ -o $@ {link}\n\
             %.o: %.cu\n\t$(CXX) {flags} --r3-apply -MD -MF $*.d -c $< -o $@\n-include $(OBJS:.o=.d)\n",
            cxx = links.join("r3-clang++").display(),
            flags = cuda_flags(),
            link = cudart_link().join(" ")
        ),
    )
    .unwrap();
    let first = run_in(&p, &store, &make, &[]);
    assert!(
        first.status.success(),
        "{}{}",
        stdout(&first),
        stderr(&first)
    );
    assert!(
        stderr(&first).contains("applied tuned code to scan_tile_totals_kernel"),
        "{}",
        stderr(&first)
    );
    for _ in 0..2 {
        let q = run_in(&p, &store, &make, &["-q"]);
        assert_eq!(q.status.code(), Some(0), "make -q: out of date");
        let again = run_in(&p, &store, &make, &[]);
        assert!(
            stdout(&again).contains("is up to date"),
            "{}",
            stdout(&again)
        );
    }
    for d in ["scan.d", "plain.d"] {
        deps_exist(&std::fs::read_to_string(p.join(d)).unwrap(), &store);
    }
}

#[test]
fn ccache_hits_with_apply_on_and_misses_once_what_ships_changes() {
    let Some(_) = tool("ccache", "ccache with apply on") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (store, src) = scan_tuned_in_simulation(d);
    let p = project(d, &src);
    let cache = d.join("ccache");
    let clang = r3::toolchain::find_clang(true).unwrap().path;
    // `r3 ccache clang++ …` (README, "Compiler caches"): r3 in front of the cache.
    let compile = |out: &str, simulated: bool| {
        let mut args: Vec<String> = vec!["ccache".into(), clang.display().to_string()];
        args.extend(cuda_flags().split(' ').map(String::from));
        args.extend(["--r3-apply", "-c", "scan.cu", "-o", out].map(String::from));
        let mut cmd = Command::new(r3_bin());
        cmd.args(&args)
            .current_dir(&p)
            .env("R3_STORE", &store)
            .env("CCACHE_DIR", &cache)
            .env_remove("CCACHE_DISABLE")
            .env_remove("R3_APPLY_SIMULATED");
        if simulated {
            cmd.env("R3_APPLY_SIMULATED", "1");
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        std::fs::read(p.join(out)).unwrap()
    };
    let stat = |name: &str| -> u64 {
        let o = Command::new("ccache")
            .arg("--print-stats")
            .env("CCACHE_DIR", &cache)
            .output()
            .unwrap();
        stdout(&o)
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}\t")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in ccache's statistics: {}", stdout(&o)))
    };
    let first = compile("a.o", true);
    assert_eq!((stat("direct_cache_hit"), stat("cache_miss")), (0, 1));
    let second = compile("b.o", true);
    assert_eq!(
        (stat("direct_cache_hit"), stat("cache_miss")),
        (1, 1),
        "the same command, the same header: a hit"
    );
    assert_eq!(first, second, "the hit is the applied object");
    // Simulated winners no longer ship: another table, another header, a miss.
    let plain = compile("c.o", false);
    assert_eq!(stat("cache_miss"), 2, "what ships changed: a miss");
    assert_ne!(plain, first);
}

#[test]
fn a_winners_file_build_says_what_it_kept_and_why_and_its_depfile_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (store, src) = scan_tuned_in_simulation(d);
    let exported = run_in(
        d,
        &store,
        &r3_bin(),
        &[
            "export",
            "-o",
            "winners.json",
            "--r3-store",
            store.to_str().unwrap(),
        ],
    );
    assert!(exported.status.success(), "{}", stderr(&exported));
    let winners = d.join("winners.json");
    // Only the guarded variant, as a file whose winner ships behind a guard alone has it.
    let mut only_variants: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&winners).unwrap()).unwrap();
    assert_eq!(only_variants["variants"].as_array().map(Vec::len), Some(1));
    only_variants["kernels"] = serde_json::json!([]);
    let variants = d.join("variants.json");
    std::fs::write(&variants, only_variants.to_string()).unwrap();

    // Another checkout of the project, with no store: the file is all there is.
    let checkout = d.join("elsewhere/checkout");
    std::fs::create_dir_all(&checkout).unwrap();
    let text = std::fs::read_to_string(&src).unwrap();
    let edited = text.replacen("chunk_total = ", "chunk_total = 0 + ", 1);
    assert_ne!(edited, text, "scan.cu changed: the edit must apply");
    std::fs::write(checkout.join("scan.cu"), &edited).unwrap();
    let links = driver_links(d);
    let empty = d.join("no-store");
    let build = |file: &Path, simulated: bool, out: &str| {
        let mut cmd = cuda_driver(&links, &empty);
        cmd.arg("-I")
            .arg(repo().join("llvm-ir-corpus/common"))
            .arg(format!("--r3-apply={}", file.display()))
            .args([
                "-MD",
                "-MF",
                &format!("{out}.d"),
                "-c",
                "scan.cu",
                "-o",
                out,
            ])
            .current_dir(&checkout)
            .env_remove("R3_APPLY_SIMULATED");
        if simulated {
            cmd.env("R3_APPLY_SIMULATED", "1");
        }
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        let deps = std::fs::read_to_string(checkout.join(format!("{out}.d"))).unwrap();
        assert!(deps.contains(&file.display().to_string()), "{deps}");
        deps_exist(&deps, &empty);
        stderr(&o)
    };
    for (file, out) in [(&winners, "a.o"), (&variants, "b.o")] {
        let note = build(file, true, out);
        assert!(
            note.contains("kept clang's code for scan_tile_totals_kernel(int, int const*, int*) [")
                && note.contains("(changed since it was tuned)")
                && !note.contains("applied"),
            "{}: {note}",
            file.display()
        );
    }
    // The kernel as it was tuned, its winner simulated and simulated winners not asked for.
    std::fs::write(checkout.join("scan.cu"), &text).unwrap();
    let note = build(&winners, false, "c.o");
    assert!(
        note.contains("kept clang's code for scan_tile_totals_kernel")
            && note.contains("its winner is simulated")
            && note.contains("R3_APPLY_SIMULATED=1"),
        "{note}"
    );
    let note = build(&winners, true, "d.o");
    assert!(
        note.contains("applied tuned code to scan_tile_totals_kernel"),
        "{note}"
    );
}
