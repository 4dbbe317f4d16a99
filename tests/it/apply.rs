//! Apply without a GPU: a corpus program (scan: three kernels) is built by r3-clang++, one kernel
//! is tuned in simulation on a recorded grid landscape, and the applied build must carry exactly
//! the winner's PTX for that kernel and clang's own PTX for the others; an edited kernel falls
//! back; an exported winners file builds the same with no store.

use crate::support::*;
use r3::apply::plan::WinnersFile;
use r3::apply::splice::entry_text;
use r3::lower::Codegen;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The kernel tuned: its grid winner changes the machine code, not only the PTX's names.
const TUNED: &str = "_Z23scan_tile_totals_kerneliPKiPi";
const OTHERS: [&str; 2] = [
    "_Z17scan_tiles_kerneliPKiPiS1_",
    "_Z23add_tile_offsets_kerneliPKiS0_Pi",
];
/// The PTX clang writes for the device side under -save-temps.
const PTX: &str = "scan-cuda-nvptx64-nvidia-cuda-sm_90.s";
/// What ptxas assembled from it.
const CUBIN: &str = "scan-cuda-nvptx64-nvidia-cuda-sm_90.o";

/// Builds `src` as `dir/scan` (compile and link, -save-temps) with r3-clang++ and `extra`.
pub(crate) fn build(
    dir: &Path,
    src: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
    store: &Path,
) -> Output {
    std::fs::create_dir_all(dir).unwrap();
    let links = driver_links(dir.parent().unwrap());
    let out = cuda_driver(&links, store)
        .arg("-I")
        .arg(repo().join("llvm-ir-corpus/common"))
        .arg(src)
        .args(["-o", "scan", "-save-temps"])
        .args(cudart_link())
        .args(extra)
        .envs(env.iter().copied())
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    out
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn entry<'a>(ptx: &'a str, kernel: &str) -> &'a str {
    entry_text(ptx, kernel).unwrap_or_else(|| panic!("no .entry {kernel}"))
}

/// The stored kernel `hash`'s module lowered with `c` for sm_90 (`ptx`: the PTX ISA, None: the
/// module's), as the search lowers a trial.
fn lower_stored(
    store: &Path,
    hash: &str,
    c: &r3::candidate::Candidate,
    ptx: Option<String>,
) -> r3::lower::Lowered {
    let bitcode = std::fs::read(store.join("kernels").join(hash).join("module.bc")).unwrap();
    let target = Codegen {
        sm: "sm_90".into(),
        ptx,
        opt_level: 3,
    };
    r3::lower::isolated::lower_in_process(&bitcode, &hash.into(), c, &target, None).unwrap()
}

/// scan.cu in `d`, built plain (`plain/`) and recorded into `d/store` (`record/`), its
/// scan_tile_totals_kernel searched in simulation on the recorded grid landscape: the store and
/// the source.
pub(crate) fn scan_tuned_in_simulation(d: &Path) -> (PathBuf, PathBuf) {
    let store = d.join("store");
    let src = d.join("scan.cu");
    std::fs::copy(repo().join("llvm-ir-corpus/programs/scan.cu"), &src).unwrap();
    build(&d.join("plain"), &src, &["--r3-off"], &[], &store);
    build(&d.join("record"), &src, &[], &[], &store);
    let table = landscape(d);
    let tune = r3(
        &[
            "tune",
            "scan_tile_totals_kernel",
            "--simulate",
            table.to_str().unwrap(),
            "--strategy",
            "exhaustive",
            "--budget",
            "600",
            "--r3-store",
            store.to_str().unwrap(),
        ],
        d,
    );
    assert!(tune.status.success(), "{}", stderr(&tune));
    (store, src)
}

#[test]
fn the_applied_build_carries_the_winner_and_clangs_code_for_every_other_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (store, src) = scan_tuned_in_simulation(d);
    let s = store.to_str().unwrap();

    // The winners stamp, which compiles depend on, holds the digest of what ships: the tune
    // wrote it for the policy it ran under (no simulated winners), which differs from what
    // ships once simulated winners are allowed.
    let st = r3::store::Store::open(&store).unwrap();
    let policy = |simulated| r3::store::winner::Policy {
        simulated,
        ..r3::store::winner::Policy::from_env()
    };
    let without = r3::apply::plan::shipped_digest(&st, &policy(false)).unwrap();
    let with = r3::apply::plan::shipped_digest(&st, &policy(true)).unwrap();
    assert_ne!(without, with);
    // Nothing ships under the tune's policy: the empty digest, which needs no stamp written.
    assert_eq!(without, "");
    let stamp = std::fs::read_to_string(store.join("winners.stamp")).unwrap_or_default();
    assert_eq!(stamp.trim(), without);

    // Simulated trials are never applied unless asked for (they measured nothing real).
    let out = build(&d.join("unasked"), &src, &["--r3-apply"], &[], &store);
    assert!(!stderr(&out).contains("applied"), "{}", stderr(&out));
    assert_eq!(
        read(d.join("unasked").join(PTX)),
        read(d.join("plain").join(PTX))
    );

    let sim = [("R3_APPLY_SIMULATED", "1")];
    let out = build(&d.join("applied"), &src, &["--r3-apply"], &sim, &store);
    let note = stderr(&out);
    assert_eq!(note.matches("r3: ").count(), 1, "one line: {note}");
    assert!(
        note.contains("r3: note: applied tuned code to scan_tile_totals_kernel"),
        "{note}"
    );

    // The winner, as `r3 export` states it, lowered here as the search lowered it.
    let exported = Command::new(r3_bin())
        .args(["export", "-o", "winners.json", "--r3-store", s])
        .env("R3_APPLY_SIMULATED", "1")
        .current_dir(d)
        .output()
        .unwrap();
    assert!(exported.status.success(), "{}", stderr(&exported));
    let winners: WinnersFile = serde_json::from_str(&read(d.join("winners.json"))).unwrap();
    assert_eq!(winners.kernels.len(), 1);
    let w = &winners.kernels[0];
    assert_eq!(w.name, TUNED);
    assert!(
        w.candidate.max_threads.is_none(),
        "launch bounds only when asked for"
    );
    let lowered = lower_stored(&store, &w.hash, &w.candidate, w.ptx_isa.clone());

    let plain = read(d.join("plain").join(PTX));
    let applied = read(d.join("applied").join(PTX));
    assert_eq!(entry(&applied, TUNED), entry(&lowered.ptx, TUNED));
    assert_ne!(entry(&applied, TUNED), entry(&plain, TUNED));

    // The best sets launch bounds: it ships by default, as a variant behind its guard, beside
    // the generic code; the program carries the table r3's runtime chooses it by.
    assert_eq!(winners.variants.len(), 1, "{:?}", winners.variants);
    let v = &winners.variants[0];
    assert_eq!(v.winner.name, TUNED);
    assert!(v.guard.max_threads.is_some() && v.winner.candidate.max_threads.is_some());
    assert!(v.winner.speedup > w.speedup, "the variant is the faster");
    let variant = lower_stored(&store, &w.hash, &v.winner.candidate, w.ptx_isa.clone());
    let variant_ptx = variant.ptx;
    let name = r3::apply::dispatch::entry_name(TUNED, &w.hash[..8], 1);
    assert_eq!(
        entry(&applied, &name).replacen(&name, TUNED, 1),
        entry(&variant_ptx, TUNED),
        "the variant's entry is its measured code, renamed"
    );
    let exe = std::fs::read(d.join("applied/scan")).unwrap();
    let table = format!("r3-dispatch 1\nv {TUNED} sm_90 {name} ");
    assert!(exe.windows(table.len()).any(|w| w == table.as_bytes()));
    // And what tuned code the kernel ships, for `r3 record --time-only` to say what it timed.
    let stated = |ptx: &[&str]| format!("\ns {TUNED} sm_90 {} {}", w.hash, ptx.join(","));
    let both = stated(&[lowered.ptx_hash.as_str(), variant.ptx_hash.as_str()]);
    assert!(
        exe.windows(both.len()).any(|w| w == both.as_bytes()),
        "{both}"
    );
    assert!(note.contains("+1 guarded variant at launch"), "{note}");

    // R3_APPLY_DISPATCH=0: the generic code alone, as apply built before variants.
    let off = [("R3_APPLY_SIMULATED", "1"), ("R3_APPLY_DISPATCH", "0")];
    build(&d.join("no-dispatch"), &src, &["--r3-apply"], &off, &store);
    let no_dispatch = read(d.join("no-dispatch").join(PTX));
    assert!(!no_dispatch.contains("__r3_"), "no variant entry");
    assert_eq!(entry(&no_dispatch, TUNED), entry(&lowered.ptx, TUNED));
    assert_eq!(
        no_dispatch,
        applied.replace(entry(&applied, &name), "").replacen(
            &format!(
                "// r3: variant `{name}` of `{TUNED}` (tag {}v1)\n\n\n",
                &w.hash[..8]
            ),
            "",
            1
        ),
        "the same PTX less the variant"
    );
    let exe = std::fs::read(d.join("no-dispatch/scan")).unwrap();
    // (r3's runtime names the table's first line; a table would follow it with a row.)
    assert!(!exe.windows(16).any(|w| w == b"r3-dispatch 1\nv "));
    let generic = stated(&[lowered.ptx_hash.as_str()]);
    assert!(
        exe.windows(generic.len()).any(|w| w == generic.as_bytes()),
        "{generic}"
    );
    for k in OTHERS {
        assert_eq!(entry(&applied, k), entry(&plain, k), "{k} must be clang's");
    }
    // What ptxas assembled from the spliced PTX is what the program carries.
    let exe = std::fs::read(d.join("applied/scan")).unwrap();
    let cubin = std::fs::read(d.join("applied").join(CUBIN)).unwrap();
    let plain_cubin = std::fs::read(d.join("plain").join(CUBIN)).unwrap();
    assert!(cubin != plain_cubin, "the winner changes the machine code");
    assert!(exe.windows(cubin.len()).any(|w| w == &cubin[..]));

    // The winners file builds the same with no store at all.
    let empty = d.join("no-store");
    let file = format!("--r3-apply={}", d.join("winners.json").display());
    let out = build(&d.join("from-file"), &src, &[&file], &sim, &empty);
    assert!(
        stderr(&out).contains("applied tuned code"),
        "{}",
        stderr(&out)
    );
    assert_eq!(read(d.join("from-file").join(PTX)), applied);

    // A winner that is not simulated but names no measured PTX is never shipped: nothing
    // would check that the code lowered now is the code that was measured.
    let mut unchecked: serde_json::Value =
        serde_json::from_str(&read(d.join("winners.json"))).unwrap();
    for w in ["kernels", "variants"] {
        unchecked[w][0]["simulated"] = false.into();
        unchecked[w][0]["ptx_hash"] = serde_json::Value::Null;
    }
    std::fs::write(d.join("unchecked.json"), unchecked.to_string()).unwrap();
    let file = format!("--r3-apply={}", d.join("unchecked.json").display());
    let out = build(&d.join("unchecked"), &src, &[&file], &sim, &empty);
    let note = stderr(&out);
    assert!(
        note.contains("kept clang's code for scan_tile_totals_kernel")
            && note.contains("names no measured PTX")
            && !note.contains("applied"),
        "{note}"
    );
    assert_eq!(read(d.join("unchecked").join(PTX)), plain);

    // An edited kernel keeps clang's code, and says so once.
    let text = read(src.clone());
    let changed = text.replacen("chunk_total = ", "chunk_total = 0 + ", 1);
    assert_ne!(changed, text, "scan.cu changed: the edit must apply");
    std::fs::write(&src, changed).unwrap();
    build(&d.join("edited-plain"), &src, &["--r3-off"], &[], &store);
    let out = build(&d.join("edited"), &src, &["--r3-apply"], &sim, &store);
    let note = stderr(&out);
    assert!(
        note.contains("scan_tile_totals_kernel(int, int const*, int*) [")
            && note.contains("changed since it was tuned"),
        "{note}"
    );
    assert_eq!(
        read(d.join("edited").join(PTX)),
        read(d.join("edited-plain").join(PTX))
    );
}

#[test]
fn a_winners_file_of_another_schema_fails_the_compile_with_the_reason() {
    // Asked for by name, the file must be one r3 can apply: a build that silently ships
    // clang's code instead would pass for a tuned one.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = d.join("scan.cu");
    std::fs::copy(repo().join("llvm-ir-corpus/programs/scan.cu"), &src).unwrap();
    std::fs::write(d.join("w.json"), "{\"schema\": \"other\"}").unwrap();
    let links = driver_links(d);
    let file = d.join("w.json");
    for (flag, env) in [
        (Some(format!("--r3-apply={}", file.display())), None),
        (None, Some(file.clone())),
    ] {
        let mut cmd = cuda_driver(&links, &d.join("store"));
        cmd.arg("-I")
            .arg(repo().join("llvm-ir-corpus/common"))
            .arg(&src)
            .args(["-o", "scan"])
            .args(cudart_link())
            .args(flag)
            .current_dir(d);
        if let Some(f) = env {
            cmd.env("R3_APPLY", f);
        }
        let out = cmd.output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains("r3: error: tuned kernels cannot be applied")
                && err.contains("w.json")
                && err.contains("r3 export"),
            "{err}"
        );
        assert!(!d.join("scan").exists());
    }
}

/// A winners file as people edit and merge it: the guard a variant runs behind comes from its
/// candidate, never from the file, and the generic code neither folds nor bounds. Each bad
/// entry is refused by name and costs only itself; a consistent one still ships.
#[test]
fn a_winners_file_cannot_ship_code_behind_a_guard_that_is_not_its_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (store, src) = scan_tuned_in_simulation(d);
    let s = store.to_str().unwrap();
    let exported = Command::new(r3_bin())
        .args(["export", "-o", "winners.json", "--r3-store", s])
        .env("R3_APPLY_SIMULATED", "1")
        .current_dir(d)
        .output()
        .unwrap();
    assert!(exported.status.success(), "{}", stderr(&exported));
    let file: WinnersFile = serde_json::from_str(&read(d.join("winners.json"))).unwrap();
    let generic = file.kernels[0].clone();

    // A variant that folds n = 512 and blockDim = 256, lowered as the search would have.
    let folded = r3::candidate::Specialize {
        args: vec![r3::candidate::FoldedArg::of_bytes(0, &512i32.to_le_bytes())],
        block: Some([256, 1, 1]),
        grid: None,
    };
    let spec = r3::candidate::Candidate {
        specialize: Some(folded),
        ..generic.candidate.clone()
    };
    let lowered = lower_stored(&store, &generic.hash, &spec, generic.ptx_isa.clone());
    let spec_winner = r3::apply::plan::Winner {
        candidate: spec.clone(),
        ptx_hash: Some(lowered.ptx_hash.clone()),
        speedup: 2.0,
        ..generic.clone()
    };
    let unguarded = r3::apply::plan::Guard {
        max_threads: None,
        block_x: None,
        values: None,
    };
    let with = |kernels: Vec<r3::apply::plan::Winner>, guards: Vec<r3::apply::plan::Guard>| {
        let variants = guards
            .into_iter()
            .map(|guard| r3::apply::plan::Variant {
                winner: spec_winner.clone(),
                guard,
            })
            .collect();
        WinnersFile {
            kernels,
            variants,
            ..file.clone()
        }
    };
    let sim = [("R3_APPLY_SIMULATED", "1")];
    let empty = d.join("no-store");
    let apply = |name: &str, w: &WinnersFile, env: &[(&str, &str)]| {
        let path = d.join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_string(w).unwrap()).unwrap();
        let flag = format!("--r3-apply={}", path.display());
        let out = build(&d.join(name), &src, &[&flag], env, &empty);
        let exe = std::fs::read(d.join(name).join("scan")).unwrap();
        let table = exe.windows(16).any(|w| w == b"r3-dispatch 1\nv ");
        (stderr(&out), read(d.join(name).join(PTX)), table)
    };

    // The guard left empty (or naming other values): the variant is refused, the generic code
    // still ships, and no table line lets a launch of another n run the folded code.
    let mut other = r3::apply::plan::Guard::of(&spec);
    other.values.as_mut().unwrap().args[0].hex = "00040000".into();
    for (name, guard, field) in [
        ("empty-guard", unguarded, "values.args, values.block"),
        ("other-guard", other, "in values.args"),
    ] {
        let (note, ptx, table) = apply(name, &with(vec![generic.clone()], vec![guard]), &sim);
        assert!(
            note.contains("applied tuned code to scan_tile_totals_kernel")
                && note.contains("variant 1: its guard disagrees with its candidate")
                && note.contains(field),
            "{name}: {note}"
        );
        assert!(!ptx.contains("__r3_") && !table, "{name}: no variant built");
    }

    // `r3 export --check` says the same without building, entry by entry.
    let check = |name: &str| {
        let file = d.join(format!("{name}.json"));
        let s = store.to_str().unwrap();
        let out = r3(
            &["export", "--check", file.to_str().unwrap(), "--r3-store", s],
            d,
        );
        (out.status.code(), stdout(&out))
    };
    let (code, text) = check("empty-guard");
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("refused  variants[0] ")
            && text.contains("its guard disagrees with its candidate")
            && text.contains("builds   kernels[0] ")
            && text.contains("1 refused"),
        "{text}"
    );

    // The same variant with its candidate's guard ships: the check refuses only what is wrong.
    let (note, ptx, table) = apply(
        "own-guard",
        &with(
            vec![generic.clone()],
            vec![r3::apply::plan::Guard::of(&spec)],
        ),
        &sim,
    );
    assert!(note.contains("+1 guarded variant at launch"), "{note}");
    assert!(ptx.contains("__r3_") && table, "the variant is built");
    let (code, text) = check("own-guard");
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("0 refused") && !text.contains("not checked"),
        "{text}"
    );

    // A winners file that can be read only once (a pipe, `--r3-apply=<(...)`) applies as a
    // file does: the driver reads it once and the shim reads its copy.
    let piped = d.join("piped");
    std::fs::create_dir_all(&piped).unwrap();
    let mut child = cuda_driver(&driver_links(d), &empty)
        .arg("-I")
        .arg(repo().join("llvm-ir-corpus/common"))
        .arg(&src)
        .args(["-o", "scan", "-save-temps", "--r3-apply=/dev/stdin"])
        .args(cudart_link())
        .envs(sim.iter().copied())
        .current_dir(&piped)
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let own = with(
        vec![generic.clone()],
        vec![r3::apply::plan::Guard::of(&spec)],
    );
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        serde_json::to_string(&own).unwrap().as_bytes(),
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("+1 guarded variant at launch"),
        "{}",
        stderr(&out)
    );
    assert_eq!(read(piped.join(PTX)), ptx, "the same build as from a file");

    // Folded or launch-bounded code listed as the generic entry would run at every launch.
    let (note, ptx, _) = apply(
        "folded-generic",
        &with(vec![spec_winner.clone()], vec![]),
        &sim,
    );
    assert!(
        note.contains("kept clang's code for scan_tile_totals_kernel")
            && note.contains("refused: generic code: it folds launch values"),
        "{note}"
    );
    assert_eq!(ptx, read(d.join("plain").join(PTX)));
    let bounded = r3::apply::plan::Winner {
        candidate: r3::candidate::Candidate {
            max_threads: Some(256),
            ..generic.candidate.clone()
        },
        ..generic.clone()
    };
    let (note, _, _) = apply(
        "bounded-generic",
        &with(vec![bounded.clone()], vec![]),
        &sim,
    );
    assert!(
        note.contains("it bounds launches") && note.contains("R3_APPLY_LAUNCH_BOUNDS=1"),
        "{note}"
    );

    // Two generic entries of one kernel (a merge that kept both sides): neither is chosen.
    let (note, ptx, _) = apply(
        "merged",
        &with(vec![generic.clone(), bounded], vec![]),
        &sim,
    );
    assert!(note.contains("2 entries for it under `kernels`"), "{note}");
    assert_eq!(ptx, read(d.join("plain").join(PTX)));
}

/// Apply finds the PTX and the sources whatever the command line: options around ptxas's input
/// (`-Xcuda-ptxas`, `-fgpu-rdc`'s `-c`), flags kept in a response file, and several sources in
/// one compile, each object with its own kernels' code.
#[test]
fn apply_finds_the_ptx_and_the_sources_whatever_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = d.join("store");
    let links = driver_links(d);
    let common = repo().join("llvm-ir-corpus/common");
    for (name, program) in [("a", "scan"), ("b", "saxpy")] {
        let from = repo().join(format!("llvm-ir-corpus/programs/{program}.cu"));
        std::fs::copy(from, d.join(format!("{name}.cu"))).unwrap();
    }
    let compile = |out: &str, args: &[&str], winners: Option<&Path>| {
        let at = d.join(out);
        std::fs::create_dir_all(&at).unwrap();
        let mut cmd = cuda_driver(&links, &store);
        cmd.arg("-I")
            .arg(&common)
            .args(["-c", "-save-temps"])
            .args(args);
        if let Some(w) = winners {
            cmd.arg(format!("--r3-apply={}", w.display()))
                .env("R3_APPLY_SIMULATED", "1");
        }
        let out = cmd.current_dir(&at).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        stderr(&out)
    };
    let (a, b) = (d.join("a.cu"), d.join("b.cu"));
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    compile("record", &[a, b], None);
    compile("plain", &[a, b, "--r3-off"], None);

    // A winner for one kernel of each source: -O1's code, which differs from clang's -O3.
    let st = r3::store::Store::open(&store).unwrap();
    let candidate = r3::candidate::Candidate::with_pipeline("default<O1>");
    let mut kernels = Vec::new();
    let mut lowered = Vec::new();
    for name in [TUNED, "_Z12saxpy_kernelmfPKfS0_Pf"] {
        let k = st
            .kernels()
            .unwrap()
            .into_iter()
            .find(|k| k.signature.name == name)
            .unwrap_or_else(|| panic!("{name} captured"));
        let l = lower_stored(&store, &k.hash, &candidate, None);
        kernels.push(serde_json::json!({
            "hash": k.hash, "name": name, "demangled": k.signature.demangled, "arch": "sm_90",
            "gpu": "sim", "driver": "sim", "candidate": candidate, "ptx_isa": null,
            "ptx_hash": l.ptx_hash, "trial": 1, "speedup": 1.5, "confirmed_speedup": null,
            "simulated": true, "r3_version": "0"
        }));
        lowered.push((name, l.ptx));
    }
    let winners = d.join("w.json");
    let file = serde_json::json!({
        "schema": r3::apply::plan::SCHEMA, "schema_version": r3::apply::plan::SCHEMA_VERSION,
        "created_by": "test", "llvm_version": "22", "kernels": kernels
    });
    std::fs::write(&winners, file.to_string()).unwrap();
    let ptx_of = |out: &str, stem: &str| {
        read(
            d.join(out)
                .join(format!("{stem}-cuda-nvptx64-nvidia-cuda-sm_90.s")),
        )
    };
    let carries_winner = |out: &str, stem: &str, (name, ptx): &(&str, String)| {
        assert_eq!(
            entry(&ptx_of(out, stem), name),
            entry(ptx, name),
            "{out}: {name}"
        );
        assert_ne!(
            entry(&ptx_of("plain", stem), name),
            entry(ptx, name),
            "{name} changes"
        );
    };

    // Two sources in one compile: each object carries its own kernel's winner.
    let note = compile("two", &[a, b], Some(&winners));
    assert!(
        note.contains("scan_tile_totals_kernel") && note.contains("saxpy_kernel"),
        "{note}"
    );
    assert!(!note.contains("kept clang's code"), "{note}");
    carries_winner("two", "a", &lowered[0]);
    carries_winner("two", "b", &lowered[1]);

    // ptxas's input found among options the user or clang put after it.
    for (out, flags) in [
        ("maxrreg", &["-Xcuda-ptxas", "--maxrregcount=64"][..]),
        ("verbose", &["-Xcuda-ptxas", "-v"][..]),
        ("rdc", &["-fgpu-rdc"][..]),
    ] {
        let mut args = vec![a];
        args.extend_from_slice(flags);
        let note = compile(out, &args, Some(&winners));
        assert!(
            note.contains("applied tuned code to scan_tile_totals_kernel"),
            "{out}: {note}"
        );
        carries_winner(out, "a", &lowered[0]);
    }

    // A compilation database entry (-MJ) names the user's command, not r3's temporary files.
    let mj = d.join("mj.json");
    let mj_arg = format!("-MJ{}", mj.display());
    compile("mj", &[a, &mj_arg], Some(&winners));
    let entries = read(mj.clone());
    assert!(
        entries.contains("a.cu") && entries.contains("\"arguments\""),
        "{entries}"
    );
    assert!(
        !entries.contains("r3-capture") && !entries.contains("r3capture"),
        "{entries}"
    );

    // The whole command in a response file.
    std::fs::write(d.join("flags.rsp"), format!("-Xcuda-ptxas -v\n'{a}'\n")).unwrap();
    let rsp = format!("@{}", d.join("flags.rsp").display());
    let note = compile("rsp", &[&rsp], Some(&winners));
    assert!(
        note.contains("applied tuned code to scan_tile_totals_kernel"),
        "{note}"
    );
    carries_winner("rsp", "a", &lowered[0]);
}

/// nvcc's build of a kernel, where a search measured it fastest, is what the applied build
/// carries for that kernel: its entry as nvcc wrote it, spliced into clang's PTX beside clang's
/// code of the other kernels (issue 57). `r3 tune --dry-run` makes it, as a search would.
#[test]
fn nvcc_code_that_won_its_search_is_what_the_applied_build_carries() {
    if let Err(e) = r3::toolchain::real_nvcc() {
        skip("cuda-sdk", &format!("nvcc's code needs nvcc: {e}"));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = d.join("store");
    let src = d.join("scan.cu");
    std::fs::copy(repo().join("llvm-ir-corpus/programs/scan.cu"), &src).unwrap();
    build(&d.join("plain"), &src, &["--r3-off"], &[], &store);
    build(&d.join("record"), &src, &[], &[], &store);
    let s = store.to_str().unwrap();
    let dry = r3(
        &[
            "tune",
            "--all",
            "--dry-run",
            "--budget",
            "1",
            "--r3-store",
            s,
        ],
        d,
    );
    assert!(dry.status.success(), "{}", stderr(&dry));
    assert_eq!(
        stdout(&dry).matches("nvcc -O3: ").count(),
        3,
        "{}",
        stdout(&dry)
    );
    assert!(!stdout(&dry).contains("not built"), "{}", stdout(&dry));

    let st = r3::store::Store::open(&store).unwrap();
    let k = st
        .kernels()
        .unwrap()
        .into_iter()
        .find(|k| k.signature.name == TUNED)
        .unwrap();
    let code = st
        .nvcc_code(&k.hash, "sm_90")
        .unwrap()
        .unwrap()
        .ptx
        .unwrap();
    let key = r3::kernel::TrialsKey::of_kernel(&k.hash);
    let mut log = st.open_trials(&key, "NVIDIA H200").unwrap();
    let baseline = serde_json::json!({"pipeline": "default<O3>"});
    let nvcc = serde_json::json!({"pipeline": "default<O3>", "compiler": "nvcc"});
    let target = r3::store::trials::Target {
        sm: "sm_90".into(),
        ptx: None,
    };
    for (t, c, us) in [(0, baseline, 10.0), (1, nvcc, 5.0)] {
        let mut r = r3::store::fixtures::trial(k.hash.as_str(), "NVIDIA H200", t, c, {
            r3::store::fixtures::valid(us, 10.0)
        });
        r.target = Some(target.clone());
        if t == 1 {
            r.ptx_hash = Some(r3::kernel::PtxHash::of_ptx(&code));
        }
        log.append(&r).unwrap();
    }
    drop(log);

    let out = build(&d.join("applied"), &src, &["--r3-apply"], &[], &store);
    let note = stderr(&out);
    assert!(
        note.contains("applied tuned code to scan_tile_totals_kernel"),
        "{note}"
    );
    let plain = read(d.join("plain").join(PTX));
    let applied = read(d.join("applied").join(PTX));
    assert_eq!(entry(&applied, TUNED), entry(&code, TUNED));
    assert_ne!(entry(&applied, TUNED), entry(&plain, TUNED));
    for other in OTHERS {
        assert_eq!(entry(&applied, other), entry(&plain, other), "{other}");
    }
    let cubin = std::fs::read(d.join("applied").join(CUBIN)).unwrap();
    let exe = std::fs::read(d.join("applied/scan")).unwrap();
    assert!(exe.windows(cubin.len()).any(|w| w == &cubin[..]));

    // Exported, it carries the code; without it, apply refuses the entry and keeps clang's.
    let winners = d.join("winners.json");
    let exported = r3(
        &["export", "-o", winners.to_str().unwrap(), "--r3-store", s],
        d,
    );
    assert!(exported.status.success(), "{}", stderr(&exported));
    let mut file: serde_json::Value = serde_json::from_str(&read(d.join("winners.json"))).unwrap();
    assert_eq!(file["kernels"][0]["code"].as_str(), Some(code.as_str()));
    file["kernels"][0]["code"] = serde_json::Value::Null;
    std::fs::write(d.join("no-code.json"), file.to_string()).unwrap();
    let arg = format!("--r3-apply={}", d.join("no-code.json").display());
    let out = build(&d.join("no-code"), &src, &[&arg], &[], &d.join("no-store"));
    assert!(stderr(&out).contains("carries none"), "{}", stderr(&out));
    assert_eq!(read(d.join("no-code").join(PTX)), plain);
}

/// A source rewrite that `r3 evolve` validated ships without the user's edit where the build
/// asks for it (`R3_APPLY_REWRITES=1`, issue 58): the kernel's entry is the rewrite's code as its
/// judge measured it, the note says it is not the source's, and a winners file carries it; a
/// build that does not ask keeps the kernel's own code.
#[test]
fn a_validated_rewrite_ships_without_editing_the_source_only_when_asked() {
    use r3::store::attempts::{Event, What};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let store = d.join("store");
    let src = d.join("scan.cu");
    std::fs::copy(repo().join("llvm-ir-corpus/programs/scan.cu"), &src).unwrap();
    build(&d.join("plain"), &src, &["--r3-off"], &[], &store);
    build(&d.join("record"), &src, &[], &[], &store);
    // The rewrite: the same kernel computed another way, compiled into a store of its own.
    let text = read(src.clone());
    let rewritten = text.replacen("chunk_total = ", "chunk_total = 0 + ", 1);
    assert_ne!(rewritten, text, "scan.cu changed: the edit must apply");
    let rsrc = d.join("rewrite").join("scan.cu");
    std::fs::create_dir_all(rsrc.parent().unwrap()).unwrap();
    std::fs::write(&rsrc, rewritten).unwrap();
    let other = d.join("rewrite-store");
    build(&d.join("rewrite/build"), &rsrc, &[], &[], &other);

    let st = r3::store::Store::open(&store).unwrap();
    let find = |s: &r3::store::Store| {
        s.kernels()
            .unwrap()
            .into_iter()
            .find(|k| k.signature.name == TUNED)
            .unwrap()
    };
    let original = find(&st);
    let os = r3::store::Store::open(&other).unwrap();
    let r = find(&os);
    assert_ne!(r.hash, original.hash);
    let km = r3::kernel::KernelModule {
        hash: r.hash.clone(),
        bitcode: os.kernel_bitcode(&r.hash).unwrap(),
        signature: r.signature.clone(),
    };
    st.put_variant(&km, &r.compile, &original.hash).unwrap();

    // Its judge's search: -O3 of the rewrite, measured; the verdict: 1.5x over the original.
    let c = r3::candidate::Candidate::baseline();
    let lowered = lower_stored(&store, r.hash.as_str(), &c, None);
    let gpu = "NVIDIA H200";
    let key = r3::kernel::TrialsKey::of_kernel(&r.hash);
    let mut log = st.open_trials(&key, gpu).unwrap();
    let mut t = r3::store::fixtures::trial(
        r.hash.as_str(),
        gpu,
        0,
        serde_json::to_value(&c).unwrap(),
        r3::store::fixtures::valid(10.0, 10.0),
    );
    t.target = Some(r3::store::trials::Target {
        sm: "sm_90".into(),
        ptx: None,
    });
    t.ptx_hash = Some(lowered.ptx_hash.clone());
    log.append(&t).unwrap();
    drop(log);
    let mut attempts = st.open_attempts(&original.hash).unwrap();
    let event = |what| Event {
        format: 1,
        attempt: 1,
        unix_ms: 0,
        what,
    };
    for what in [
        What::Compiled {
            variant: r.hash.clone(),
            diff: "-  chunk_total = x;\n+  chunk_total = 0 + x;\n".into(),
            cell: String::new(),
            builds: Vec::new(),
        },
        What::Judged {
            gpu: gpu.into(),
            verdict: r3::store::fixtures::judged_valid(1.5, c.clone(), 1.0),
        },
    ] {
        attempts.append(&event(what)).unwrap();
    }
    drop(attempts);
    // Its judge checked it on the original's recorded launches: of two shapes here.
    recorded(
        &store,
        &original.hash,
        "0000000000000001",
        [64, 1, 1],
        1 << 14,
    );
    recorded(
        &store,
        &original.hash,
        "0000000000000002",
        [8, 1, 1],
        1 << 11,
    );

    let plain = read(d.join("plain").join(PTX));
    let asked = [("R3_APPLY_REWRITES", "1")];
    let out = build(&d.join("applied"), &src, &["--r3-apply"], &asked, &store);
    let note = stderr(&out);
    assert!(
        note.contains("applied tuned code to scan_tile_totals_kernel")
            && note.contains("source rewrite 1 of `r3 evolve`, not in your source"),
        "{note}"
    );
    let applied = read(d.join("applied").join(PTX));
    assert_eq!(entry(&applied, TUNED), entry(&lowered.ptx, TUNED));
    assert_ne!(entry(&applied, TUNED), entry(&plain, TUNED));
    for other in OTHERS {
        assert_eq!(entry(&applied, other), entry(&plain, other), "{other}");
    }
    // Asked by the flag alone (it applies the store's winners), or by the build tree's
    // settings (`-DR3_APPLY_REWRITES=ON` writes them): the same code.
    build(
        &d.join("flagged"),
        &src,
        &["--r3-apply-rewrites"],
        &[],
        &store,
    );
    let configured = d.join("configured");
    std::fs::create_dir_all(configured.join(".r3")).unwrap();
    std::fs::write(configured.join(".r3/config"), "apply_rewrites = true\n").unwrap();
    build(&configured, &src, &[], &[], &store);
    for by in ["flagged", "configured"] {
        let ptx = read(d.join(by).join(PTX));
        assert_eq!(entry(&ptx, TUNED), entry(&lowered.ptx, TUNED), "{by}");
    }
    // Not asked: the kernel's own code (it has no search of its own here: clang's).
    let out = build(&d.join("unasked"), &src, &["--r3-apply"], &[], &store);
    assert!(!stderr(&out).contains("rewrite"), "{}", stderr(&out));
    assert_eq!(read(d.join("unasked").join(PTX)), plain);

    // Exported when asked, the file carries the rewrite's code and builds it with no store.
    let winners = d.join("winners.json");
    let exported = std::process::Command::new(r3_bin())
        .args(["export", "-o", winners.to_str().unwrap(), "--r3-store"])
        .arg(&store)
        .env("R3_APPLY_REWRITES", "1")
        .output()
        .unwrap();
    assert!(exported.status.success(), "{}", stderr(&exported));
    let file: serde_json::Value = serde_json::from_str(&read(winners.clone())).unwrap();
    assert_eq!(file["kernels"][0]["rewrite"]["attempt"], 1);
    let arg = format!("--r3-apply={}", winners.display());
    build(
        &d.join("from-file"),
        &src,
        &[&arg],
        &[],
        &d.join("no-store"),
    );
    assert_eq!(read(d.join("from-file").join(PTX)), applied);

    // Checked on one launch shape only: behind a guard of that launch, clang's code for every
    // other launch.
    std::fs::remove_dir_all(store.join("records/aaaaaaaaaaaaaaaa/0000000000000002")).unwrap();
    let out = build(&d.join("guarded"), &src, &["--r3-apply"], &asked, &store);
    let note = stderr(&out);
    assert!(note.contains("behind a guard"), "{note}");
    let guarded = read(d.join("guarded").join(PTX));
    assert_eq!(entry(&guarded, TUNED), entry(&plain, TUNED));
    let name = r3::apply::dispatch::entry_name(TUNED, &original.hash[..8], 1);
    assert_eq!(
        entry(&guarded, &name).replacen(&name, TUNED, 1),
        entry(&lowered.ptx, TUNED)
    );
    // The table holds the launch's shape and its scalar argument (n = 16384).
    let exe = std::fs::read(d.join("guarded/scan")).unwrap();
    let row = format!("v {TUNED} sm_90 {name} ");
    let at = exe
        .windows(row.len())
        .position(|w| w == row.as_bytes())
        .expect("the rewrite's row in the dispatch table");
    let line: String = exe[at..]
        .iter()
        .take_while(|b| **b != b'\n')
        .map(|b| *b as char)
        .collect();
    assert!(
        line.contains("00400000") && line.contains("64,1,1"),
        "{line}"
    );

    // Where the census counts the kernel's launches one by one, the rewrite behind that guard
    // is credited only the launches that pass it: predicted at its 1.5x on 2 of the kernel's
    // 10 ms (1 ms each, identical to the recorded one), its own -O3 the rest.
    let o3 = r3::store::fixtures::trial(
        original.hash.as_str(),
        gpu,
        0,
        serde_json::to_value(&c).unwrap(),
        r3::store::fixtures::valid(10.0, 10.0),
    );
    let key = r3::kernel::TrialsKey::of_kernel(&original.hash);
    st.open_trials(&key, gpu).unwrap().append(&o3).unwrap();
    let census = |identical: u64, ms: f64| r3::store::programs::Census {
        format: 1,
        program: "./scan".into(),
        path: "/build/scan".into(),
        binary: "b".into(),
        args: Vec::new(),
        unix_s: 0.0,
        launches: 10,
        unknown_launches: 0,
        kernels: vec![r3::store::programs::KernelCensus {
            kernel: Some(original.hash.to_string()),
            name: TUNED.into(),
            launches: 10,
            estimated_ms: Some(10.0),
            timed_launches: 10,
            scaled_launches: 0,
            recurrence: Vec::new(),
            recorded: vec![r3::store::programs::RecordedTime {
                id: "aaaaaaaaaaaaaaaa/0000000000000001".into(),
                identical,
                ms: Some(ms),
            }],
        }],
    };
    st.put_census(&census(2, 1.0)).unwrap();
    let report = std::process::Command::new(r3_bin())
        .args(["report", "--format", "json", "--r3-store"])
        .arg(&store)
        .env("R3_APPLY_REWRITES", "1")
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", stderr(&report));
    let json: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let predicted = json["programs"][0]["predicted_shipped"].as_f64().unwrap();
    let kernel = 10.0 / (2.0 / 1.5 + 8.0);
    let expected = 10.0 / (10.0 / kernel + r3::store::winner::VARIANT_FIRST_LOAD_MS);
    assert!(
        (predicted - expected).abs() < 1e-6,
        "{predicted} against {expected}"
    );
    // Where what passes the guard saves less than the variant's first load costs, the
    // rewrite is not shipped (0.01 ms at 1.5x saves 0.003 ms).
    st.put_census(&census(1, 0.01)).unwrap();
    build(&d.join("unpaid"), &src, &["--r3-apply"], &asked, &store);
    let unpaid = read(d.join("unpaid").join(PTX));
    assert!(!unpaid.contains(&name), "{unpaid}");
    assert_eq!(
        entry(&read(d.join("unpaid").join(PTX)), TUNED),
        entry(&plain, TUNED)
    );
}

/// A launch of the tuned kernel recorded by hand into `store` as `r3 record` leaves one (its
/// memory left out: apply reads its values only), resolved to `kernel`: `grid`, blocks of 256
/// and its first parameter, the int `n`.
fn recorded(store: &Path, kernel: &r3::kernel::KernelHash, id: &str, grid: [u32; 3], n: i32) {
    use r3::store::records::{LaunchRecord, ParamSlot};
    let slot = |offset, size| ParamSlot { offset, size };
    let mut args = n.to_le_bytes().to_vec();
    args.resize(24, 0);
    let mut launch = LaunchRecord::by_hand(TUNED, vec![slot(0, 4), slot(8, 8), slot(16, 8)], &args);
    launch.grid = grid;
    launch.block = [256, 1, 1];
    let dir = store.join("records/aaaaaaaaaaaaaaaa").join(id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("launch.json"),
        serde_json::to_vec(&launch).unwrap(),
    )
    .unwrap();
    let st = r3::store::Store::open(store).unwrap();
    let rec = st
        .recordings(None)
        .unwrap()
        .into_iter()
        .find(|r| r.dir == dir)
        .expect("the recording reads back");
    st.set_kernel_ref(&rec, kernel).unwrap();
}
