//! Variants chosen at launch (r3rt.c's dispatch) on a fake GPU (fixtures/dispatch_fake_gpu.c),
//! with the table r3's apply generates (`apply::dispatch`): a launch runs a variant exactly when
//! its guard holds and the device can run it, and every launch gives the generic code's result.
//!
//! `R3_TEST_R3RT=<file>` builds the fake program against another r3rt.c (HEAD's before issue 57
//! probes a variant inside its first launch, and fails the test that says it must not).

use crate::support::{fake_gpu_program, stderr, stdout};
use r3::apply::dispatch::{self, Row};
use r3::apply::plan::Guard;
use r3::candidate::{FoldedArg, Specialize};
use r3::store::programs::ShippedKernel;
use std::path::{Path, PathBuf};
use std::process::Command;

const GENERIC: &str = "_Z5scalePfPKfif";

fn spec() -> String {
    dispatch::entry_name(GENERIC, "0123abcd", 1)
}

fn bounds() -> String {
    dispatch::entry_name(GENERIC, "0123abcd", 2)
}

fn relaunch() -> String {
    dispatch::entry_name(GENERIC, "0123abcd", 3)
}

/// The table apply would write for scale: the specialized variant (n = 1024, 256-thread
/// blocks, launch bounds 256) first, then launch bounds alone, then (with `relaunched`) a
/// variant that runs 128-thread blocks.
fn table() -> Vec<String> {
    table_with(false)
}

fn table_with(relaunched: bool) -> Vec<String> {
    let row = |entry: String, guard: Guard| Row {
        kernel: GENERIC.into(),
        arch: "sm_90".into(),
        entry,
        guard,
    };
    vec![
        dispatch::line(&row(
            spec(),
            Guard {
                max_threads: Some(256),
                block_x: None,
                values: Some(Specialize {
                    args: vec![FoldedArg::of_bytes(2, &1024i32.to_le_bytes())],
                    block: Some([256, 1, 1]),
                    grid: None,
                }),
            },
        )),
        dispatch::line(&row(
            bounds(),
            Guard {
                max_threads: Some(256),
                block_x: None,
                values: None,
            },
        )),
    ]
    .into_iter()
    .chain(relaunched.then(|| {
        dispatch::line(&row(
            relaunch(),
            Guard {
                max_threads: Some(128),
                block_x: Some(128),
                values: None,
            },
        ))
    }))
    .collect()
}

/// The fake program built with `header` included, as an applied build's host side is.
fn harness(dir: &Path, header: &str) -> PathBuf {
    let h = dir.join(dispatch::HEADER);
    std::fs::write(&h, header).unwrap();
    let mut flags = vec![format!("-include{}", h.display())];
    // The fixture's `#include "r3rt.c"` looks in -iquote directories before -I ones.
    if let Some(file) = std::env::var_os("R3_TEST_R3RT") {
        let d = dir.join("runtime");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::copy(file, d.join("r3rt.c")).unwrap();
        flags.push(format!("-iquote{}", d.display()));
    }
    fake_gpu_program(dir, "dispatch_fake_gpu", &flags)
}

/// The entries that ran, one per launch (`N THREADS` pairs, or `shared BYTES`).
fn ran(exe: &Path, launches: &str, env: &[(&str, &str)]) -> Vec<String> {
    lines(exe, launches, env, "ran ")
}

/// The `prefix` lines of a run of the fake program, without the prefix.
fn lines(exe: &Path, launches: &str, env: &[(&str, &str)], prefix: &str) -> Vec<String> {
    let out = Command::new(exe)
        .args(launches.split(' '))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "{launches} {env:?}: {text}{}",
        stderr(&out)
    );
    text.lines()
        .filter_map(|l| l.strip_prefix(prefix))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_launch_runs_the_first_variant_whose_guard_holds_and_otherwise_the_generic_code() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path(), &dispatch::header(&table()));
    let (spec, bounds) = (spec(), bounds());
    let (spec, bounds, generic) = (spec.as_str(), bounds.as_str(), GENERIC);
    // The recorded values: the specialized code. Another n: launch bounds alone. A larger
    // block: neither guard holds (a launch of either would fail), the generic code.
    assert_eq!(
        ran(&exe, "1024 256 512 256 1024 512 1023 128 1024 128", &[]),
        [spec, bounds, generic, bounds, bounds]
    );
    // Switched off at run time, on a device of another architecture, or where the module
    // lacks the variant: the generic code, or the next variant that is there.
    assert_eq!(ran(&exe, "1024 256", &[("R3_DISPATCH", "0")]), [generic]);
    assert_eq!(ran(&exe, "1024 256", &[("FAKE_SM", "80")]), [generic]);
    assert_eq!(ran(&exe, "1024 256", &[("FAKE_MISSING", spec)]), [bounds]);
    // A compressed fatbinary (-Xcuda-fatbinary --compress-all) names no entry in its bytes: the
    // driver finds the variants the module has, and a missing one leaves no error behind.
    let compressed = ("FAKE_COMPRESSED", "1");
    assert_eq!(ran(&exe, "1024 256", &[compressed]), [spec]);
    assert_eq!(
        ran(&exe, "1024 256", &[compressed, ("FAKE_MISSING", spec)]),
        [bounds]
    );
    // A larger dynamic shared memory the program sets on its kernel holds for the variants.
    assert_eq!(ran(&exe, "shared 65536", &[]), [spec]);
}

/// Issue 57: a variant's first launch costs what the generic code's does. A program that
/// allocates before it launches has every variant probed (its architecture, its limits, which
/// loads its code) in that allocation, and its launches ask the driver nothing; so does a
/// dynamic shared memory the program raises, probed again where it is set. A program whose
/// first call is a launch has it probed there, once, and runs the variant from it on.
#[test]
fn a_program_that_allocates_first_probes_no_variant_inside_a_launch() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path(), &dispatch::header(&table()));
    let (spec, bounds) = (spec(), bounds());
    let (spec, bounds, generic) = (spec.as_str(), bounds.as_str(), GENERIC);
    let calls = "malloc 4096 1024 256 512 256 shared 65536";
    assert_eq!(ran(&exe, calls, &[]), [spec, bounds, spec]);
    assert_eq!(lines(&exe, calls, &[], "probes "), ["0", "0", "0"]);
    // Refused before the launch as well: another architecture, a variant the module lacks.
    for (env, want) in [
        (("FAKE_SM", "80"), generic),
        (("FAKE_MISSING", spec), bounds),
        (("FAKE_COMPRESSED", "1"), spec),
    ] {
        let calls = "malloc 4096 1024 256";
        assert_eq!(ran(&exe, calls, &[env]), [want], "{env:?}");
        assert_eq!(lines(&exe, calls, &[env], "probes "), ["0"], "{env:?}");
    }
    // Launched first: each variant probed inside the first launch that runs it, and only there.
    let calls = "1024 256 1024 256 512 256 512 256";
    assert_eq!(ran(&exe, calls, &[]), [spec, spec, bounds, bounds]);
    let probes = lines(&exe, calls, &[], "probes ");
    assert!(
        probes[0] != "0" && probes[1] == "0" && probes[2] != "0" && probes[3] == "0",
        "{probes:?}"
    );
}

#[test]
fn a_block_size_variant_runs_the_launch_with_its_block_and_the_grid_that_keeps_its_threads() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path(), &dispatch::header(&table_with(true)));
    let (bounds, relaunch) = (bounds(), relaunch());
    // 512-thread blocks: neither launch-bounds variant may run it; the block-size variant
    // runs it as 8 blocks of 128 threads (2 x 512 threads), with the generic result.
    assert_eq!(
        ran(&exe, "1024 512 1000 256", &[]),
        [relaunch.as_str(), bounds.as_str()]
    );
    assert_eq!(
        lines(&exe, "1024 512 1000 256", &[], "shape "),
        ["8 128", "4 256"]
    );
    // cudaLaunchKernelEx chooses the same way; with launch attributes (a cluster, say), never
    // another block size: the launch runs as the program shaped it.
    assert_eq!(
        ran(&exe, "ex 1 1024 256 1024 512 ex 2 1024 512", &[]),
        [spec().as_str(), relaunch.as_str(), GENERIC]
    );
}

#[test]
fn without_a_table_or_with_a_damaged_one_every_launch_runs_the_generic_code() {
    let dir = tempfile::tempdir().unwrap();
    let generic = GENERIC;
    let exe = harness(dir.path(), &dispatch::empty_header());
    assert_eq!(ran(&exe, "1024 256 512 128", &[]), [generic, generic]);
    let damaged: Vec<String> = table()
        .iter()
        .map(|l| l.replace(" 0 1 2:00040000", " 0 2 2:00040000"))
        .chain(["v truncated".to_string()])
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path(), &dispatch::header(&damaged));
    // The damaged first line is skipped; the second stands.
    assert_eq!(
        ran(&exe, "1024 256 1024 512", &[]),
        [bounds().as_str(), generic]
    );
}

/// `r3 record --time-only` measures the build as it runs without r3: each launch runs the code
/// dispatch chooses (cudaLaunchKernelEx's too), between events, and counts for the generic
/// kernel.
#[test]
fn a_time_only_run_times_the_launches_as_dispatched() {
    let dir = tempfile::tempdir().unwrap();
    // The line apply writes for the tuned code the kernel ships: the runtime passes it on.
    let shipped = ShippedKernel {
        name: GENERIC.into(),
        arch: "sm_90".into(),
        kernel: "0123abcd0123abcd".into(),
        ptx: vec!["aaaa".into(), "bbbb".into()],
    };
    let mut lines = table();
    lines.push(shipped.line());
    let exe = harness(dir.path(), &dispatch::header(&lines));
    let stats = dir.path().join("stats.json");
    let env = [
        ("R3_TIME_ONLY", "1"),
        ("R3_RECORD_STATS", stats.to_str().unwrap()),
    ];
    assert_eq!(
        ran(&exe, "1024 256 512 256 ex 1 1024 256", &env),
        [spec(), bounds(), spec()]
    );
    let s: r3::record::RunStats = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
    let t = s.timing.expect("the times");
    assert_eq!((t.launches, t.timed_launches, t.total_ms), (3, 3, 1.5));
    assert_eq!(
        t.kernels,
        [r3::store::programs::KernelTiming {
            name: GENERIC.into(),
            launches: 3,
            ms: 1.5
        }]
    );
    assert!(
        s.census.is_none(),
        "nothing recorded, nothing counted for it"
    );
    let stated: Vec<_> = t
        .shipped
        .iter()
        .filter_map(|l| ShippedKernel::parse(l))
        .collect();
    assert_eq!(stated, [shipped]);
}

/// Issue 62: a program on two GPUs. Each device has its variants probed on it: the first call
/// the program makes on a device (an allocation) probes them there, and a launch on a device of
/// another architecture runs the generic code while the same launch on the other device runs
/// the variant; switching back and forth asks the driver nothing more.
#[test]
fn each_device_has_its_variants_probed_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let exe = harness(dir.path(), &dispatch::header(&table()));
    let spec = spec();
    let (spec, generic) = (spec.as_str(), GENERIC);
    let sm80 = [("FAKE_SM1", "80")];
    let calls = "malloc 4096 device 1 malloc 4096 1024 256 device 0 1024 256 device 1 1024 256";
    assert_eq!(ran(&exe, calls, &sm80), [generic, spec, generic]);
    assert_eq!(lines(&exe, calls, &sm80, "probes "), ["0", "0", "0"]);
    // Device 1 of the same architecture runs the variant too.
    assert_eq!(ran(&exe, calls, &[]), [spec, spec, spec]);
    // Device 1's first call a launch: its variants are probed there, once, though device 0's
    // were probed at its allocation.
    let calls = "malloc 4096 device 1 1024 256 1024 256 device 0 1024 256";
    assert_eq!(ran(&exe, calls, &[]), [spec, spec, spec]);
    let probes = lines(&exe, calls, &[], "probes ");
    assert!(
        probes[0] != "0" && probes[1] == "0" && probes[2] == "0",
        "{probes:?}"
    );
}
