//! One table grammar for apply and the runtime (issue 56, item 2). Apply's
//! `dispatch::parse_line` and r3rt.c's `parse_line` take the same lines, with the same fields,
//! and refuse the same (crates/r3-driver/fuzz/dispatch_lines.c runs r3rt.c's). A table that
//! folds a parameter its kernel lacks, or of another size, or states a number that is not one,
//! never makes a launch read out of bounds and leaves the kernel its generic code; lines beyond
//! the runtime's limits are named under R3_DISPATCH_VERBOSE (crates/r3-driver/fuzz/
//! dispatch_launch.c, on a fake GPU, under AddressSanitizer and UndefinedBehaviorSanitizer).
//! A module whose fatbinary is compressed (item 7) gets its variants, found by the driver.
//!
//! `R3_TEST_R3RT=<file>` builds the harnesses against another r3rt.c: HEAD's before issue 56
//! fails the launch tests (dispatch_launch.c calls only what a program calls, so it builds
//! against either), and does not build the line reader's harness at all; HEAD's before issue 57
//! probes variants inside their first launch, and fails the test that says it must not.

use crate::support::{repo, stderr, stdout};
use r3::apply::dispatch::{self, Row, TableLine, MAX_VARIANTS};
use r3::apply::plan::Guard;
use r3::candidate::{FoldedArg, Specialize};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const SCALE: &str = "_Z5scalePfPKfif";
const AXPY: &str = "_Z4axpyfPfS_i";
const K3: &str = "k3";

/// `crates/r3-driver/fuzz/<name>.c` with r3rt.c, built under ASan and UBSan into `dir`.
fn harness(dir: &Path, name: &str) -> PathBuf {
    let clang = r3::toolchain::find_clang(false).unwrap().path;
    let cuda = r3::toolchain::find_cuda(None).unwrap().path;
    let runtime = match std::env::var_os("R3_TEST_R3RT") {
        Some(file) => {
            let d = dir.join("runtime");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::copy(file, d.join("r3rt.c")).unwrap();
            d
        }
        None => repo().join("crates/r3-driver/src/runtime"),
    };
    let exe = dir.join(name);
    let out = Command::new(clang)
        .args(["-x", "c", "-std=c11", "-g", "-O1", "-w"])
        .args(["-fsanitize=address,undefined", "-fno-sanitize-recover=all"])
        .arg("-I")
        .arg(runtime)
        .arg("-I")
        .arg(repo().join("crates/r3-driver/fuzz"))
        .arg("-I")
        .arg(cuda.join("include"))
        .arg(repo().join(format!("crates/r3-driver/fuzz/{name}.c")))
        .arg("-o")
        .arg(&exe)
        .args(["-l:libzstd.a", "-lpthread", "-ldl"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    exe
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

/// r3rt.c's answers for `inputs` ("l <line>" or "n <name>"), one each (dispatch_lines.c).
fn runtime_reads(exe: &Path, kind: char, inputs: &[String]) -> Vec<String> {
    let mut child = Command::new(exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let text: String = inputs
        .iter()
        .map(|l| format!("{kind} {}\n", hex(l.as_bytes())))
        .collect();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(text.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let answers: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    assert_eq!(answers.len(), inputs.len(), "{}", stderr(&out));
    answers
}

/// Apply's reading of a line, in dispatch_lines.c's words.
fn apply_reads(l: &str) -> String {
    match dispatch::parse_line(l) {
        Err(_) => "bad".into(),
        Ok(TableLine::Shipped(s)) => format!("s {s}"),
        Ok(TableLine::Variant(r)) => {
            let v = r.guard.values.clone().unwrap_or(Specialize {
                args: vec![],
                block: None,
                grid: None,
            });
            let dims = |d: Option<[u32; 3]>| {
                d.map_or("-".into(), |d| format!("{},{},{}", d[0], d[1], d[2]))
            };
            let mut out = format!(
                "v {} {} {} {} {} {} {} {} {}",
                r.kernel,
                r.arch,
                dispatch::arch_sm(&r.arch).unwrap(),
                r.entry,
                r.guard.max_threads.unwrap_or(0),
                dims(v.block),
                dims(v.grid),
                r.guard.block_x.unwrap_or(0),
                v.args.len()
            );
            for a in &v.args {
                out.push_str(&format!(" {}:{}", a.index, a.hex));
            }
            out
        }
    }
}

/// Lines apply writes: rows of every kind of guard.
fn written_lines() -> Vec<String> {
    let mut lines = Vec::new();
    let folds = [
        vec![],
        vec![FoldedArg::of_bytes(2, &1024i32.to_le_bytes())],
        vec![
            FoldedArg::of_bytes(0, &[1]),
            FoldedArg::of_bytes(1, &7u16.to_le_bytes()),
            FoldedArg::of_bytes(3, &2.5f64.to_le_bytes()),
        ],
        (0..16)
            .map(|i| FoldedArg::of_bytes(i * 2047, &[i as u8]))
            .collect(),
    ];
    for (n, args) in folds.iter().enumerate() {
        for (arch, max_threads, block_x) in [
            ("sm_90", Some(256), None),
            ("sm_80", None, Some(128)),
            ("sm_100a", Some(1024), None),
            ("sm_120f", None, None),
        ] {
            for (block, grid) in [
                (None, None),
                (Some([256, 1, 1]), None),
                (Some([32, 8, 2]), Some([u32::MAX, 65535, 1])),
            ] {
                let values =
                    (!args.is_empty() || block.is_some() || grid.is_some()).then(|| Specialize {
                        args: args.clone(),
                        block,
                        grid,
                    });
                lines.push(dispatch::line(&Row {
                    kernel: SCALE.into(),
                    arch: arch.into(),
                    entry: dispatch::entry_name(SCALE, "0123abcd", n + 1),
                    guard: Guard {
                        max_threads,
                        block_x,
                        values,
                    },
                }));
            }
        }
    }
    lines.push("s _Z5scalePfPKfif sm_90 0123abcd0123abcd aaaa,bbbb".into());
    lines
}

/// Values for any field of a line: what apply writes, what it never would, and what broke the
/// runtime (the probe's "-1", "abc", 4294967295, 10 bytes of hex).
const ODD: &[&str] = &[
    "",
    "0",
    "00",
    "01",
    "1",
    "7",
    "-1",
    "+1",
    "1024",
    "4294967295",
    "4294967296",
    "99999999999",
    "abc",
    "1a",
    "-",
    "1,1,1",
    "256,1,1",
    "1,1",
    "1,1,1,1",
    "0,1,1",
    "-1,1,1",
    "1,,1",
    ",1,1",
    "sm_90",
    "sm_90a",
    "sm_90f",
    "sm_90x",
    "sm_",
    "sm_0",
    "sm_09",
    "sm_9999",
    "sm_10000",
    "v",
    "s",
    "2:00",
    "2:0",
    "2:",
    ":00",
    "2:0g",
    "2:0A",
    "2:00:00",
    "32767:00",
    "32768:00",
    "99:00040000",
    "4294967295:00040000",
    "-1:00",
    "2:0000000000000000",
    "2:000000000000000000",
    "2:00040000000000000000",
    "k__r3_x_v1",
    "é",
    "\t",
    "a\u{7f}b",
    "\0",
    "x\ny",
];

/// Each field of good lines replaced, dropped or repeated, and random lines of those values.
fn odd_lines() -> Vec<String> {
    let mut lines = Vec::new();
    let good = [
        "v k sm_90 k__r3_x_v1 256 256,1,1 4,1,1 0 2 2:00040000 3:0000803f",
        "v k sm_90a e 0 - - 128 0",
        "s k sm_90 0123abcd0123abcd p1,p2",
    ];
    for g in good {
        let f: Vec<&str> = g.split(' ').collect();
        for i in 0..f.len() {
            for odd in ODD {
                let mut m = f.clone();
                m[i] = odd;
                lines.push(m.join(" "));
            }
            let mut dropped = f.clone();
            dropped.remove(i);
            lines.push(dropped.join(" "));
            let mut repeated = f.clone();
            repeated.insert(i, f[i]);
            lines.push(repeated.join(" "));
        }
        lines.push(format!("{g} "));
        lines.push(format!(" {g}"));
        lines.push(g.replacen(' ', "  ", 1));
    }
    // Random lines apply could write, most with a field or a byte changed.
    let mut rng = StdRng::seed_from_u64(56);
    for _ in 0..20_000 {
        let mut f = random_line(&mut rng);
        for _ in 0..rng.random_range(0..3) {
            let i = rng.random_range(0..f.len());
            match rng.random_range(0..4) {
                0 => f[i] = ODD[rng.random_range(0..ODD.len())].to_string(),
                1 => {
                    f.remove(i);
                }
                2 => f.insert(i, ODD[rng.random_range(0..ODD.len())].to_string()),
                _ => {
                    let at = rng.random_range(0..=f[i].len());
                    if f[i].is_char_boundary(at) {
                        f[i].insert(at, char::from(rng.random_range(0u8..128)));
                    }
                }
            }
            if f.is_empty() {
                break;
            }
        }
        lines.push(f.join(" "));
    }
    lines
}

/// The fields of a random variant line within the grammar: numbers of every length, folds of
/// 1 to 8 bytes, up to the most arguments a line folds.
fn random_line(rng: &mut StdRng) -> Vec<String> {
    let number = |rng: &mut StdRng| match rng.random_range(0..4) {
        0 => "0".to_string(),
        1 => rng.random_range(1..=1024u32).to_string(),
        2 => rng.random::<u32>().to_string(),
        _ => rng.random_range(1..=u32::MAX).to_string(),
    };
    let dims = |rng: &mut StdRng| {
        if rng.random_bool(0.5) {
            "-".to_string()
        } else {
            let d: Vec<String> = (0..3)
                .map(|_| rng.random_range(1..=65535u32).to_string())
                .collect();
            d.join(",")
        }
    };
    let archs = ["sm_90", "sm_80", "sm_100a", "sm_120f", "sm_9999", "sm_1"];
    let mut f = vec![
        "v".to_string(),
        "_Z1kPfi".into(),
        archs[rng.random_range(0..archs.len())].into(),
        format!("_Z1kPfi__r3_x_v{}", rng.random_range(1..9)),
        number(rng),
        dims(rng),
        dims(rng),
        number(rng),
    ];
    let nargs = rng.random_range(0..=dispatch::MAX_FOLDED_ARGS);
    f.push(nargs.to_string());
    for i in 0..nargs {
        let bytes: Vec<u8> = (0..rng.random_range(1..=dispatch::MAX_FOLDED_BYTES))
            .map(|_| rng.random())
            .collect();
        f.push(format!(
            "{}:{}",
            i * 3 + rng.random_range(0..3),
            hex(&bytes)
        ));
    }
    f
}

#[test]
fn apply_and_the_runtime_read_every_line_alike() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path(), "dispatch_lines");
    let written = written_lines();
    let mut lines = written.clone();
    lines.extend(odd_lines());
    let runtime = runtime_reads(&exe, 'l', &lines);
    let mut differ = Vec::new();
    for (l, c) in lines.iter().zip(&runtime) {
        let rust = apply_reads(l);
        if &rust != c {
            differ.push(format!("{l:?}\n  apply:   {rust}\n  runtime: {c}"));
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} lines read differently:\n{}",
        differ.len(),
        lines.len(),
        differ[..differ.len().min(20)].join("\n")
    );
    // Every line apply writes is taken, and reads back as written.
    for (l, c) in written.iter().zip(&runtime) {
        assert_ne!(c, "bad", "{l}");
        if let Ok(TableLine::Variant(r)) = dispatch::parse_line(l) {
            assert_eq!(&dispatch::line(&r), l);
        }
    }
    // Not a comparison of two refusals alone.
    let taken = runtime.iter().filter(|c| *c != "bad").count();
    assert!(
        taken > 2_000 && lines.len() - taken > 10_000,
        "{taken} of {} taken",
        lines.len()
    );
}

/// The runtime reads a kernel's parameters from its name where the driver cannot say: sizes as
/// clang mangles the types and sizes them, 0 for a class by value (its size is not in the
/// name), and nothing from names it does not read.
#[test]
fn the_runtime_reads_a_kernels_parameters_from_its_name_as_clang_mangles_them() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path(), "dispatch_lines");
    // (type, whether the name gives its size)
    let types: &[(&str, bool)] = &[
        ("int", true),
        ("unsigned", true),
        ("float", true),
        ("double", true),
        ("char", true),
        ("signed char", true),
        ("unsigned char", true),
        ("bool", true),
        ("short", true),
        ("unsigned short", true),
        ("long", true),
        ("unsigned long", true),
        ("long long", true),
        ("unsigned long long", true),
        ("__int128", true),
        ("wchar_t", true),
        ("char16_t", true),
        ("char32_t", true),
        ("decltype(nullptr)", true),
        ("float *", true),
        ("const float *", true),
        ("const float *__restrict__", true),
        ("float **", true),
        ("const int &", true),
        ("int &&", true),
        ("volatile int *", true),
        ("const volatile double *", true),
        ("S", false),
        ("S *", true),
        ("const S *", true),
        ("S &", true),
        ("const S &", true),
        ("S **", true),
        ("const S *const *", true),
    ];
    let mut rng = StdRng::seed_from_u64(56);
    let mut src = String::from("struct S { double a, b, c; };\n");
    let mut want = Vec::new();
    for f in 0..300 {
        let params: Vec<usize> = (0..rng.random_range(1..10))
            .map(|_| rng.random_range(0..types.len()))
            .collect();
        let list: Vec<String> = params
            .iter()
            .enumerate()
            .map(|(i, &t)| format!("{} p{i}", types[t].0))
            .collect();
        let sizes: Vec<String> = params
            .iter()
            .map(|&t| format!("sizeof({})", types[t].0.replace("__restrict__", "")))
            .collect();
        src.push_str(&format!(
            "void f{f}({}) {{}}\nextern \"C\" const unsigned long sizes_{f}[] = {{{}}};\n",
            list.join(", "),
            sizes.join(", ")
        ));
        want.push(params);
    }
    src.push_str(
        "void none() {}\nstatic void internal(int, float *) {}\nvoid *keep = (void *)internal;\n\
         template <class T> void templated(T) {}\ntemplate void templated<int>(int);\n\
         namespace ns { void nested(int) {} }\nextern \"C\" void plain(int) {}\n\
         void vector(int __attribute__((ext_vector_type(4)))) {}\n",
    );
    std::fs::write(dir.path().join("sig.cpp"), &src).unwrap();
    let clang = r3::toolchain::find_clang(false).unwrap().path;
    let out = Command::new(clang)
        .args(["-x", "c++", "-std=c++17", "-S", "-emit-llvm", "-o", "-"])
        .arg(dir.path().join("sig.cpp"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let ir = stdout(&out);
    let defined = |prefix: &str| -> String {
        ir.lines()
            .filter(|l| l.starts_with("define "))
            .filter_map(|l| l.split('@').nth(1)?.split('(').next())
            .find(|n| n.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix} in the IR"))
            .to_string()
    };
    let mut names = Vec::new();
    let mut expected = Vec::new();
    for (f, params) in want.iter().enumerate() {
        let tag = format!("f{f}");
        names.push(defined(&format!("_Z{}{tag}", tag.len())));
        let sizes_line = ir
            .lines()
            .find(|l| l.starts_with(&format!("@sizes_{f} ")))
            .unwrap();
        let (_, values) = sizes_line.split_once("] [").unwrap();
        let sizes: Vec<&str> = values
            .split(']')
            .next()
            .unwrap()
            .split(", ")
            .map(|v| v.trim_start_matches("i64 "))
            .collect();
        // A reference is passed as a pointer; a class by value's size is not in the name.
        let given: Vec<String> = params
            .iter()
            .zip(&sizes)
            .map(|(&t, s)| match types[t] {
                (_, false) => "0".into(),
                (ty, true) if ty.contains('&') => "8".into(),
                _ => s.to_string(),
            })
            .collect();
        expected.push(given.join(","));
    }
    for (prefix, answer) in [
        ("_Z4nonev", "none"),
        ("_ZL8internal", "4,8"),
        ("_Z9templated", "-1"),
        ("_ZN2ns6nested", "-1"),
        ("plain", "-1"),
        ("_Z6vector", "-1"),
    ] {
        names.push(defined(prefix));
        expected.push(answer.into());
    }
    let read = runtime_reads(&exe, 'n', &names);
    for ((name, r), e) in names.iter().zip(&read).zip(&expected) {
        assert_eq!(r, e, "{name}");
    }
}

/// The fake program of dispatch_launch.c with `table` (its lines after the format line): the
/// entries its launches ran, and its verbose messages. Fails on any sanitizer report.
fn launch(exe: &Path, table: &[String], launches: &[&str]) -> (Vec<String>, String) {
    launch_with(exe, table, launches, &[])
}

/// [`launch`] with `env` besides (after R3_DISPATCH_VERBOSE=1, which it may override).
fn launch_with(
    exe: &Path,
    table: &[String],
    launches: &[&str],
    env: &[(&str, &str)],
) -> (Vec<String>, String) {
    let (lines, said) = calls(exe, table, launches, env);
    let ran = lines
        .iter()
        .map(|l| {
            l.strip_prefix("ran ")
                .and_then(|r| r.split(' ').next())
                .unwrap_or(l)
                .to_string()
        })
        .collect();
    (ran, said)
}

/// The lines dispatch_launch.c prints for `calls` (launches and the program's other calls), and
/// its verbose messages, as [`launch_with`] runs it.
fn calls(
    exe: &Path,
    table: &[String],
    launches: &[&str],
    env: &[(&str, &str)],
) -> (Vec<String>, String) {
    let dir = exe.parent().unwrap();
    let file = dir.join("table.txt");
    let mut text = dispatch::MAGIC.to_string();
    for l in table {
        text.push('\n');
        text.push_str(l);
    }
    std::fs::write(&file, text).unwrap();
    let out = Command::new(exe)
        .arg(&file)
        .args(launches)
        .env("R3_DISPATCH_VERBOSE", "1")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let (o, e) = (stdout(&out), stderr(&out));
    assert!(
        out.status.success() && !e.contains("Sanitizer") && !e.contains("runtime error"),
        "the launches {launches:?} {env:?} of table\n{}\n{o}{e}",
        table.join("\n")
    );
    (o.lines().map(str::to_owned).collect(), e)
}

fn variant(kernel: &str, n: usize, rest: &str) -> String {
    format!("v {kernel} sm_90 {kernel}__r3_t_v{n} {rest}")
}

fn entry(kernel: &str, n: usize) -> String {
    format!("{kernel}__r3_t_v{n}")
}

/// The probe's tables (issue 56): a folded index past the kernel's parameters (99), one that
/// wrapped to -1 (4294967295), 10 bytes of hex on an int, 8 bytes on an int. Before, the first
/// three read out of bounds (a SEGV, and AddressSanitizer's overflows of 8 and 10 bytes).
#[test]
fn a_table_that_folds_what_the_kernel_lacks_never_reads_past_a_launchs_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path(), "dispatch_launch");
    let table = [
        variant(SCALE, 1, "0 - - 0 1 99:00040000"),
        variant(SCALE, 2, "0 - - 0 1 4294967295:00040000"),
        variant(SCALE, 3, "0 - - 0 1 2:00040000000000000000"),
        variant(SCALE, 4, "0 - - 0 1 2:0004000000000000"),
        variant(SCALE, 5, "256 - - 0 1 2:00040000"),
    ];
    let (ran, said) = launch(&exe, &table, &["0:1024:256", "0:512:256", "0:1024:256:ex"]);
    assert_eq!(
        ran,
        [entry(SCALE, 5), SCALE.into(), entry(SCALE, 5)],
        "{said}"
    );
    for why in [
        "table line 3 skipped: a folded argument other than",
        "table line 4 skipped: a folded argument other than",
        "_v1 not usable: it folds argument 99, which the kernel does not have",
        "_v4 not usable: it folds 8 bytes of argument 2, which has 4",
    ] {
        assert!(said.contains(why), "{why}:\n{said}");
    }
    // Where the driver cannot state the parameters, the kernel's mangled name does (axpy);
    // where neither can (an extern "C" kernel on such a driver), no variant that folds runs.
    let table = [
        variant(AXPY, 1, "0 - - 0 1 4:00040000"),
        variant(AXPY, 2, "0 - - 0 1 0:00040000"),
        variant(AXPY, 3, "0 - - 0 1 3:00040000"),
        variant(K3, 1, "0 - - 0 1 0:00040000"),
        variant(K3, 2, "0 - - 0 0"),
    ];
    let (ran, said) = launch(&exe, &table, &["1:1024:256", "2:1024:256"]);
    assert_eq!(ran, [entry(AXPY, 3), entry(K3, 2)], "{said}");
    for why in [
        "_v1 not usable: it folds argument 4, which the kernel does not have",
        "k3__r3_t_v1 not usable: nothing states the kernel's parameters",
    ] {
        assert!(said.contains(why), "{why}:\n{said}");
    }
}

/// "abc" and "-1" were read as max threads 0 (no limit) and 4294967291; "-1,1,1" as a block.
/// Now a line with any of them is skipped, with its line number, and the kernel's launches run
/// the lines that stand, or the generic code.
#[test]
fn a_number_that_is_not_one_skips_its_line_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path(), "dispatch_launch");
    let table = [
        variant(SCALE, 1, "abc - - 0 0"),
        variant(SCALE, 2, "-1 - - 0 0"),
        variant(SCALE, 3, "0 -1,1,1 - 0 0"),
        variant(SCALE, 4, "256 - - 0 0"),
        variant(SCALE, 5, "0 - - 0 01"),
        String::new(),
        "v".into(),
    ];
    let (ran, said) = launch(&exe, &table, &["0:1024:1024", "0:1024:256"]);
    assert_eq!(ran, [SCALE.into(), entry(SCALE, 4)], "{said}");
    for n in [2, 3, 4, 6, 7, 8] {
        assert!(
            said.contains(&format!("table line {n} skipped: ")),
            "line {n}:\n{said}"
        );
    }
}

/// The limits are the runtime's named constants, and apply's `runtime_takes` keeps what the
/// runtime keeps: four variants of a kernel per architecture (the fifth is named), an entry
/// listed twice once, and every line after the 4096th variant is named, not dropped silently
/// (before, every line after it went unread).
#[test]
fn lines_beyond_the_runtimes_limits_are_named_and_apply_counts_as_it_does() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path(), "dispatch_launch");
    let table: Vec<String> = vec![
        variant(SCALE, 1, "1024 - - 0 0"),
        variant(SCALE, 2, "1024 - - 0 0"),
        variant(SCALE, 2, "1024 - - 0 0"),
        variant(SCALE, 3, "1024 - - 0 0"),
        variant(SCALE, 4, "1024 - - 0 0"),
        variant(SCALE, 5, "1024 - - 0 0"),
        format!("v {SCALE} sm_80 {} 1024 - - 0 0", entry(SCALE, 6)),
        variant(SCALE, 6, "1024 - - 0 0 extra"),
    ];
    let (_, said) = launch(&exe, &table, &["0:1024:256"]);
    let registered: Vec<&str> = said
        .lines()
        .filter_map(|l| {
            l.strip_prefix("r3: dispatch: ")?
                .strip_suffix(" registered")
        })
        .collect();
    let taken: Vec<String> = dispatch::runtime_takes(&table)
        .iter()
        .zip(&table)
        .filter(|(t, _)| t.is_ok())
        .map(|(_, l)| l.split(' ').nth(3).unwrap().to_string())
        .collect();
    assert_eq!(registered, taken, "{said}");
    assert_eq!(
        registered,
        [1, 2, 3, 4, 6].map(|n| entry(SCALE, n)),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "{} not registered: its kernel has 4 variants for this architecture already",
            entry(SCALE, 5)
        )),
        "{said}"
    );
    assert!(said.contains("table line 9 skipped: "), "{said}");

    // Kernels of other translation units, as far as this module goes.
    let mut many: Vec<String> = (0..MAX_VARIANTS)
        .map(|n| variant(&format!("_Z5otherv{n}"), 1, "0 - - 0 0"))
        .collect();
    many.push(variant(K3, 1, "0 - - 0 0"));
    many.push(variant(K3, 2, "0 - - 0 0"));
    let (ran, said) = launch(&exe, &many, &["2:1024:256"]);
    assert_eq!(ran, [K3], "{}", &said[said.len().saturating_sub(2000)..]);
    for n in [MAX_VARIANTS + 2, MAX_VARIANTS + 3] {
        assert!(
            said.contains(&format!(
                "table line {n} skipped: more variants than the 4096 r3rt keeps"
            )),
            "line {n}"
        );
    }
    let takes = dispatch::runtime_takes(&many);
    assert!(takes[..MAX_VARIANTS].iter().all(Result::is_ok));
    assert!(takes[MAX_VARIANTS..].iter().all(Result::is_err));
}

/// `-Xcuda-fatbinary --compress-all` (issue 56, item 7): fatbinary compresses every image, so no
/// entry's name is in the module's bytes, and the runtime, which registered a variant only where
/// it found its name there, registered none, while apply's note counted them. Where the bytes
/// cannot tell (an image compressed, a fatbinary r3 cannot read), each variant is registered
/// and the driver's own lookup decides at its first launch: a variant the module has runs, one
/// it lacks gives way to the next variant or the generic code, quietly but under
/// R3_DISPATCH_VERBOSE, and leaves no error for the program. An uncompressed image still
/// settles it by its bytes.
#[test]
fn a_compressed_fatbinary_leaves_it_to_the_driver_to_find_the_variants() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path(), "dispatch_launch");
    let table = [
        variant(SCALE, 1, "0 - - 0 0"),
        variant(SCALE, 2, "0 - - 0 0"),
        variant(AXPY, 1, "0 - - 0 0"),
        variant(K3, 1, "0 - - 0 0"),
    ];
    let launches = ["0:1024:256", "1:1024:256:ex", "2:1024:256"];
    let (ran, said) = launch_with(&exe, &table, &launches, &[("FAKE_FATBIN", "compressed")]);
    assert_eq!(
        ran,
        [entry(SCALE, 1), entry(AXPY, 1), entry(K3, 1)],
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "{} registered: its module's fatbinary is compressed, so the driver says",
            entry(SCALE, 1)
        )),
        "{said}"
    );

    // The module lacks scale's first variant and k3's only one.
    let lacks = format!("{},{}", entry(SCALE, 1), entry(K3, 1));
    let fallback = [entry(SCALE, 2), entry(AXPY, 1), K3.into()];
    for how in ["compressed", "cut", "overlong"] {
        let env = [("FAKE_FATBIN", how), ("FAKE_LACKS", lacks.as_str())];
        let (ran, said) = launch_with(&exe, &table, &launches, &env);
        assert_eq!(ran, fallback, "{how}: {said}");
        for lacked in [entry(SCALE, 1), entry(K3, 1)] {
            assert!(
                said.contains(&format!("{lacked} not usable: ")),
                "{how}: {lacked}:\n{said}"
            );
        }
        let quiet = [env[0], env[1], ("R3_DISPATCH_VERBOSE", "0")];
        let (ran, said) = launch_with(&exe, &table, &launches, &quiet);
        assert_eq!((ran, said.as_str()), (fallback.to_vec(), ""), "{how}");
    }

    let (ran, said) = launch_with(&exe, &table, &launches, &[("FAKE_LACKS", &lacks)]);
    assert_eq!(ran, fallback, "{said}");
    assert!(
        said.contains(&format!(
            "{} not registered: its name is not in this module's fatbinary",
            entry(SCALE, 1)
        )),
        "{said}"
    );
}

/// Issue 57: a variant's first launch costs what the generic code's does, so the driver is asked
/// about a variant before it: at the program's first allocation or free on the device (most
/// programs make one before they launch), every registered variant is probed (architecture,
/// limits, which loads its code, and the parameters it folds), and launches ask nothing. Not
/// while an error of the program's is pending, which stays the program's; a launch that comes
/// first probes as before, once; an attribute the program sets is probed again where it is set.
#[test]
fn a_program_that_allocates_first_probes_no_variant_inside_a_launch() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path(), "dispatch_launch");
    // scale's parameters come from cudart, axpy's from its name, k3 folds none.
    let table = [
        variant(SCALE, 1, "256 - - 0 1 2:00040000"),
        variant(AXPY, 1, "0 - - 0 1 3:00040000"),
        variant(K3, 1, "0 - - 0 0"),
        format!("v {SCALE} sm_80 {} 0 - - 0 0", entry(SCALE, 2)),
    ];
    let launches = ["0:1024:256", "1:1024:256:ex", "2:1024:256", "0:1024:256"];
    let variants = [
        entry(SCALE, 1),
        entry(AXPY, 1),
        entry(K3, 1),
        entry(SCALE, 1),
    ];
    // Each launch line: its entry and the probe calls made inside it.
    let probed = |lines: &[String]| -> Vec<(String, String)> {
        lines
            .iter()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                match f[..] {
                    ["ran", entry, _, _, probes] => (entry.to_string(), probes.to_string()),
                    _ => (l.clone(), String::new()),
                }
            })
            .collect()
    };
    let none = |ran: &[String]| -> Vec<(String, String)> {
        ran.iter().map(|e| (e.clone(), "0".to_string())).collect()
    };
    for (first, call) in [("malloc", "cudaMalloc"), ("free", "cudaFree")] {
        let mut all = vec![first];
        all.extend(launches);
        let (lines, said) = calls(&exe, &table, &all, &[]);
        assert_eq!(probed(&lines), none(&variants), "{first}:\n{said}");
        assert!(
            said.contains(&format!(
                "4 variants probed on device 0 in the program's {call}, outside its launches"
            )),
            "{said}"
        );
        assert!(
            said.contains(&format!(
                "{} not usable: the device is of another architecture",
                entry(SCALE, 2)
            )),
            "{said}"
        );
    }

    // A folded argument the kernel lacks is found at the allocation too.
    let lacking = [variant(SCALE, 1, "0 - - 0 1 7:00040000")];
    let (lines, said) = calls(&exe, &lacking, &["malloc", "0:1024:256"], &[]);
    assert_eq!(probed(&lines), none(&[SCALE.to_string()]), "{said}");
    assert!(
        said.contains("it folds argument 7, which the kernel does not have"),
        "{said}"
    );

    // Launched first: each kernel's first launch probes, once; the same code runs.
    let (lines, said) = calls(&exe, &table, &launches, &[]);
    let p = probed(&lines);
    assert_eq!(
        p.iter().map(|(e, _)| e.clone()).collect::<Vec<_>>(),
        variants,
        "{said}"
    );
    assert!(
        p[..3].iter().all(|(_, n)| n != "0") && p[3].1 == "0",
        "{p:?}"
    );

    // An error of the program's pending at its allocation: nothing probed, the error left for
    // the program to find; its first launch then probes.
    let (lines, said) = calls(
        &exe,
        &table,
        &["fail", "malloc", "clear", "0:1024:256"],
        &[],
    );
    assert_eq!(lines[0], "cleared 1", "{said}");
    assert!(!said.contains("probed on device"), "{said}");
    let p = probed(&lines[1..]);
    assert!(p[0].0 == entry(SCALE, 1) && p[0].1 != "0", "{p:?}");

    // A dynamic shared memory the program raises after its allocation: probed again there.
    let (lines, said) = calls(
        &exe,
        &table,
        &["malloc", "attr:0", "0:1024:256", "attr:2", "2:1024:256"],
        &[],
    );
    assert_eq!(
        probed(&lines),
        none(&[entry(SCALE, 1), entry(K3, 1)]),
        "{said}"
    );
}
