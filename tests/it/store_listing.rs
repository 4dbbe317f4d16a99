//! One damaged recording or unit costs only itself in every listing (issue 56, item 6): the
//! commands that list the store go on, and say which file is damaged and how to repair it.

use crate::support::*;
use r3::store::records::LaunchRecord;
use std::path::Path;
use std::process::Command;

/// saxpy (A) and gemm_naive (B) of the corpus's store.
const A: &str = "cbb892557072d3a2";
const B: &str = "f4af54c4d91b6671";

/// A store of A and B, each with a compile's unit and a recorded launch tied to it through the
/// unit's fatbinary, as r3-clang++ and `r3 record` leave them.
fn two_kernel_store(store: &Path) {
    let corpus = repo().join("llvm-ir-corpus/store");
    std::fs::create_dir_all(store.join("kernels")).unwrap();
    std::fs::copy(corpus.join("format.json"), store.join("format.json")).unwrap();
    for (hash, unit) in [(A, "aaaaaaaaaaaaaaaa"), (B, "bbbbbbbbbbbbbbbb")] {
        let ok = Command::new("cp")
            .arg("-r")
            .arg(corpus.join("kernels").join(hash))
            .arg(store.join("kernels"))
            .status()
            .unwrap();
        assert!(ok.success());
        let kernel: serde_json::Value = serde_json::from_slice(
            &std::fs::read(store.join("kernels").join(hash).join("kernel.json")).unwrap(),
        )
        .unwrap();
        let name = kernel["name"].as_str().unwrap();
        let fatbin = format!("00000000000000{}", &unit[..2]);
        let unit_json = serde_json::json!({
            "format": 2, "id": unit, "source": format!("/nonexistent/{unit}.cu"),
            "output": format!("/nonexistent/{unit}.o"), "kernels": {"sm_90": [hash]},
            "fatbins": [fatbin], "compile": kernel["compile"],
        });
        std::fs::create_dir_all(store.join("units")).unwrap();
        std::fs::write(
            store.join(format!("units/{unit}.json")),
            serde_json::to_vec_pretty(&unit_json).unwrap(),
        )
        .unwrap();
        let mut launch = LaunchRecord::by_hand(name, vec![], &[]);
        launch.fatbin = Some(fatbin);
        let ldir = store.join(format!("records/{unit}/0000000000000001"));
        std::fs::create_dir_all(&ldir).unwrap();
        std::fs::write(
            ldir.join("launch.json"),
            serde_json::to_vec(&launch).unwrap(),
        )
        .unwrap();
    }
}

/// A's recorded launch and its compile's unit.
const REC_A: &str = "records/aaaaaaaaaaaaaaaa/0000000000000001";
const UNIT_A: &str = "units/aaaaaaaaaaaaaaaa.json";

/// A case of damage: what it is, the path it damages (in the store), and how.
type Damage = (&'static str, &'static str, fn(&Path));

#[test]
fn a_damaged_recording_or_unit_costs_only_itself_in_every_listing() {
    // The probe's cases: what is damaged, and how.
    let damage: [Damage; 6] = [
        ("launch.json garbage", REC_A, |s| {
            std::fs::write(s.join(REC_A).join("launch.json"), "garbage").unwrap()
        }),
        ("launch.json empty", REC_A, |s| {
            std::fs::write(s.join(REC_A).join("launch.json"), "").unwrap()
        }),
        ("launch.json missing", REC_A, |s| {
            std::fs::remove_file(s.join(REC_A).join("launch.json")).unwrap()
        }),
        (
            "an empty record directory",
            "records/aaaaaaaaaaaaaaaa/0000000000000002",
            |s| std::fs::create_dir(s.join("records/aaaaaaaaaaaaaaaa/0000000000000002")).unwrap(),
        ),
        ("a unit's JSON garbage", UNIT_A, |s| {
            std::fs::write(s.join(UNIT_A), "{\"format\": 2, \"id\": ").unwrap()
        }),
        ("a unit's JSON empty", UNIT_A, |s| {
            std::fs::write(s.join(UNIT_A), "").unwrap()
        }),
    ];
    for (what, damaged, apply) in damage {
        let home = tempfile::tempdir().unwrap();
        let store = home.path().join("store");
        two_kernel_store(&store);
        apply(&store);
        let commands: [&[&str]; 3] = [
            &["kernels"],
            &["status"],
            &["tune", "--all", "--dry-run", "--budget", "1"],
        ];
        for args in commands {
            let out = r3(args, home.path());
            let (text, err) = (stdout(&out), stderr(&out));
            assert!(out.status.success(), "{what}: r3 {args:?} failed:\n{err}");
            assert!(
                text.contains("gemm_naive") || text.contains(&B[..8]),
                "{what}: r3 {args:?} lost the undamaged kernel:\n{text}"
            );
            // `dry-run` lowers every stored kernel and needs no recording.
            if args[0] != "tune" || damaged.starts_with("units/") {
                let path = store.join(damaged);
                assert!(
                    err.contains(&format!("r3: warning: {}", path.display()))
                        && err.contains("fix: delete")
                        && !err.contains("create it"),
                    "{what}: r3 {args:?} does not name {} and its fix:\n{err}",
                    path.display()
                );
            }
        }
    }
}

/// A directory that cannot hold a store (`R3_STORE=/proc`: mkdir there answers "No such file
/// or directory" to root) is named, with a fix that works, never "create it".
#[test]
fn a_store_path_that_cannot_hold_a_store_says_so_and_how_to_fix_it() {
    let out = Command::new(r3_bin())
        .args(["record", "--", "true"])
        .env("R3_STORE", "/proc")
        .env("R3_RECORD_WITHOUT_GPU", "1")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains("/proc")
            && err.contains("fix: ")
            && err.contains("point --r3-store / R3_STORE at a")
            && !err.contains("create it"),
        "{err}"
    );
    // The compiler driver builds on without capture, and says why in the same words.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("saxpy.cu"), SAXPY).unwrap();
    let out = cuda_driver(&driver_links(dir.path()), Path::new("/proc"))
        .args(["-c", "saxpy.cu", "-o", "saxpy.o"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("kernel capture skipped: ")
            && err.contains("/proc")
            && !err.contains("create it"),
        "{err}"
    );
}

#[test]
fn a_kernel_recorded_only_where_it_cannot_be_replayed_is_named_with_its_class_not_as_unrecorded() {
    // Issue 61: cuda-samples' kernels that read texture objects or run in CUDA graphs were
    // recorded as not replayable, and `r3 status` listed them as compiled and not recorded
    // yet, with `r3 record` as the next step.
    let home = tempfile::tempdir().unwrap();
    let store = home.path().join("store");
    two_kernel_store(&store);
    let path = store.join(REC_A).join("launch.json");
    let mut launch: LaunchRecord = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    launch.not_replayable = Some("texture objects in use".into());
    std::fs::write(&path, serde_json::to_vec(&launch).unwrap()).unwrap();
    let text = stdout(&r3(&["status"], home.path()));
    assert!(
        text.contains("not searched: saxpy")
            && text.contains("not replayable: texture objects in use")
            && text.contains("kernels that cannot be searched, by class: 1 texture objects in use"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&r3(&["status", "--json"], home.path()).stdout).unwrap();
    assert_eq!(json["not_replayable"][0]["hash"], A, "{json}");
    assert_eq!(json["exceptions"]["texture objects in use"], 1, "{json}");
    let unrecorded = json["unrecorded"].as_array().unwrap();
    assert!(
        !unrecorded.iter().any(|k| k["hash"] == A),
        "listed as not recorded yet: {json}"
    );
}
