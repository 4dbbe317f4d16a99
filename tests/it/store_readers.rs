//! The readers that go over every search of a store (`r3 status`, `r3 report`, tune's `ships:`
//! lines) read its kernels and recordings a few times a command, never once a search (issue 62:
//! at 963 searches of 2000 kernels `r3 status` took 38 s and `r3 report` 148 s, each search
//! reading every `kernel.json` and recording again through `Store::launches_of`).

use r3::kernel::{KernelHash, KernelModule, KernelSignature, SourceLoc, TrialsKey};
use r3::report::tuning::{build, ReportOptions};
use r3::store::fixtures;
use r3::store::records::{listings_of, LaunchRecord, Verification};
use r3::store::{CompileCommand, Store};
use std::path::Path;

/// A simulated GPU: apply never ships its trials, so every search has a reason to say (the
/// path that read the store once a search).
const GPU: &str = "simulated: synthetic";

fn hash(i: usize) -> String {
    format!("{:016x}", 0xa11c_e000_u64 + i as u64)
}

fn name(i: usize) -> String {
    format!("_Z8kernel_{i}Pf")
}

/// `n` stored kernels, each with a recorded launch (found by its name) and a search of three
/// trials, the last faster than the baseline; kernel 0 has two more recordings, one that its
/// baseline did not reproduce and one that cannot be replayed, which no reader may use.
fn store_of(dir: &Path, n: usize) -> Store {
    let store = Store::create(dir).unwrap();
    let compile = CompileCommand {
        cwd: "/w".into(),
        args: vec!["r3-clang++".into(), "-c".into(), "k.cu".into()],
        env: Default::default(),
        clang: "/usr/bin/clang++".into(),
        clang_version: "clang version 22".into(),
    };
    for i in 0..n {
        let km = KernelModule {
            hash: hash(i).into(),
            bitcode: b"BC\xc0\xde".to_vec(),
            signature: KernelSignature {
                demangled: format!("kernel_{i}(float*)"),
                name: name(i),
                arch: "sm_90".into(),
                params: vec![],
                source: Some(SourceLoc {
                    file: "k.cu".into(),
                    line: i as u32 + 1,
                }),
                unoptimized: false,
            },
        };
        assert!(store.put_kernel(&km, &compile).unwrap());
        let launches = if i == 0 { 3 } else { 1 };
        for l in 0..launches {
            let mut launch = LaunchRecord::by_hand(&name(i), vec![], &[]);
            launch.unix_time = 1_000 + l as i64;
            if l == 2 {
                launch.not_replayable = Some("a pointer argument r3 cannot follow".into());
            }
            let ldir = dir.join(format!("records/{}/{:016x}", hash(i), l + 1));
            std::fs::create_dir_all(&ldir).unwrap();
            std::fs::write(
                ldir.join("launch.json"),
                serde_json::to_vec(&launch).unwrap(),
            )
            .unwrap();
        }
        let mut log = store
            .open_trials(&TrialsKey::from(hash(i).as_str()), GPU)
            .unwrap();
        for (t, us) in [10.0, 9.5, 8.0].into_iter().enumerate() {
            let c = serde_json::json!({"pipeline": "default<O3>"});
            log.append(&fixtures::trial(
                &hash(i),
                GPU,
                t as u32,
                c,
                fixtures::valid(us, 10.0),
            ))
            .unwrap();
        }
    }
    // Kernel 0's second recording: its baseline did not reproduce it.
    let rec = store
        .recordings(None)
        .unwrap()
        .into_iter()
        .find(|r| r.id == format!("{}/{:016x}", hash(0), 2))
        .unwrap();
    let v = Verification {
        format: 1,
        reproduces: false,
        reason: Some("y[3] differs".into()),
        not_deterministic: None,
        gpu: "NVIDIA H200".into(),
        unix_time: 0,
    };
    store.set_verification(&rec, &v).unwrap();
    store
}

/// How many times `what` lists the store's recordings.
fn listings(store: &Store, what: impl FnOnce(&Store)) -> u64 {
    let before = listings_of(store.root());
    what(store);
    listings_of(store.root()) - before
}

/// What each reader costs in listings of the store, on a store of `n` searches.
fn costs(n: usize) -> [u64; 3] {
    let dir = tempfile::tempdir().unwrap();
    let store = store_of(dir.path(), n);
    let status = listings(&store, |s| {
        let fleet = r3::report::status::gather(s).unwrap();
        assert_eq!(fleet.searches.len(), n);
        for search in &fleet.searches {
            let why = search.reason.as_deref().unwrap_or_default();
            assert!(why.contains("simulated"), "each search says why: {why}");
        }
    });
    let opts = ReportOptions {
        code: false,
        ..Default::default()
    };
    let report = listings(&store, |s| {
        let rep = build(s, &opts).unwrap();
        assert_eq!(rep.kernels.len(), n);
    });
    let searches: Vec<(TrialsKey, String)> =
        (0..n).map(|i| (hash(i).into(), GPU.to_owned())).collect();
    let ships = listings(&store, |s| {
        let lines = r3::report::status::ships_lines(s, &searches);
        assert_eq!(lines.len(), n);
        assert!(lines.iter().all(|l| l.starts_with("ships: clang's code")));
    });
    [status, report, ships]
}

#[test]
fn status_report_and_ships_lines_read_the_store_once_whatever_the_searches() {
    let (one, many) = (costs(1), costs(12));
    assert_eq!(
        one, many,
        "listings of the store by status, report and tune's ships lines: at 1 search {one:?}, at 12 {many:?}"
    );
    assert!(
        many.iter().all(|&n| n <= 4),
        "a few listings a command: {many:?}"
    );
}

/// Each kernel's launches read once for all (`Store::usable_launches`) are the ones
/// `Store::launches_of` lists for it alone, in its order.
#[test]
fn launches_read_once_are_each_kernels_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_of(dir.path(), 3);
    let all = store.usable_launches().unwrap();
    for i in 0..3 {
        let ids = |recs: &[r3::store::records::Recording]| -> Vec<String> {
            recs.iter().map(|r| r.id.clone()).collect()
        };
        let alone = store
            .launches_of(&KernelHash::from(hash(i).as_str()))
            .unwrap();
        assert_eq!(
            ids(all.of(&KernelHash::from(hash(i).as_str()))),
            ids(&alone)
        );
        assert_eq!(alone.len(), 1, "kernel {i}: only its usable recording");
    }
    assert!(all.of(&KernelHash::from("0123456789abcdef")).is_empty());
}
