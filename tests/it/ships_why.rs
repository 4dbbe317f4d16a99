//! Where nothing ships, each place a user looks says why (issue 59, items 6 and 7): the last
//! line of `r3 tune`, a reason column in `r3 status` (and `reason` in its JSON, whose speedups
//! are speedups as the text's are), and `r3 export`'s count; and a tune that fails leaves the
//! winners stamp, and so every build, as it was.

use crate::support::*;
use std::path::Path;
use std::process::{Command, Output};

/// `r3 args…` in `home` with its store, simulated winners shipped or not.
fn r3_in(home: &Path, args: &[&str], simulated: bool) -> Output {
    let mut cmd = Command::new(r3_bin());
    cmd.args(args)
        .current_dir(home)
        .env("R3_STORE", home.join("store"))
        .env_remove("R3_APPLY_SIMULATED")
        .env_remove("R3_CUDA_PATH");
    if simulated {
        cmd.env("R3_APPLY_SIMULATED", "1");
    }
    cmd.output().unwrap()
}

/// A simulated search of gemm_naive (12 trials) in `home`'s store; and its landscape.
fn tuned(home: &Path, simulated: bool) -> (Output, std::path::PathBuf) {
    let table = landscape(home);
    let t = table.to_str().unwrap();
    let out = r3_in(
        home,
        &["tune", "--simulate", t, "--budget", "12"],
        simulated,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    (out, table)
}

fn last_line(text: &str) -> &str {
    text.lines().last().unwrap_or_default()
}

#[test]
fn nothing_ships_and_each_place_says_why() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let (tune, _) = tuned(h, false);
    insta::assert_snapshot!("tune_last_line", last_line(&stdout(&tune)));

    let status = r3_in(h, &["status"], false);
    assert!(status.status.success(), "{}", stderr(&status));
    insta::assert_snapshot!("status_with_reason", stdout(&status));

    // The JSON says what the text says: speedups above 1 are faster.
    let json = r3_in(h, &["status", "--json"], false);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["format"], 2, "{v}");
    let s = &v["searches"][0];
    let best = s["best"].as_f64().unwrap();
    let ratio = s["best_time_ratio"].as_f64().unwrap();
    assert!(best > 1.0 && (best * ratio - 1.0).abs() < 1e-12, "{s}");
    assert!(
        stdout(&status).contains(&r3::store::speed::times(best)),
        "the text's best is the JSON's: {}",
        stdout(&status)
    );
    assert_eq!(s["shipped"].as_f64(), Some(1.0), "{s}");
    assert!(
        s["reason"]
            .as_str()
            .is_some_and(|r| r.contains("simulated trials are never shipped")),
        "{s}"
    );

    let out = h.join("winners.json");
    let export = r3_in(h, &["export", "-o", out.to_str().unwrap()], false);
    assert!(export.status.success(), "{}", stderr(&export));
    let dir = regex::escape(&h.display().to_string());
    insta::with_settings!({filters => vec![(dir.as_str(), "[DIR]")]}, {
        insta::assert_snapshot!("export_says_why_none", stderr(&export));
    });

    // With simulated winners asked for, the best ships, with no reason; but the search is of
    // a kernel the store holds no module of (the landscape's word): export says it leaves it.
    let status = r3_in(h, &["status", "--json"], true);
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let s = &v["searches"][0];
    assert_eq!(s["shipped"].as_f64(), s["best"].as_f64(), "{s}");
    assert!(s.get("reason").is_none(), "{s}");
    let export = r3_in(h, &["export", "-o", out.to_str().unwrap()], true);
    let err = stderr(&export);
    assert!(
        err.contains("0 kernels")
            && err.contains("1 search(es) of kernels the store holds no module of"),
        "{err}"
    );
}

#[test]
fn a_tune_that_fails_leaves_the_winners_stamp() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    let (_, table) = tuned(h, false);
    // The stamp as an earlier tune left it, when something shipped.
    let stamp = h.join("store/winners.stamp");
    std::fs::write(&stamp, "0123abcd\n").unwrap();
    let before = (
        std::fs::read_to_string(&stamp).unwrap(),
        std::fs::metadata(&stamp).unwrap().modified().unwrap(),
    );
    assert!(!before.0.trim().is_empty());
    // Under the default policy nothing ships, but a tune that fails says nothing of it: a bad
    // argument, and (on a machine without one) no GPU.
    let mut failed = vec![r3_in(
        h,
        &["tune", "--all", "--strategy", "exhaustive"],
        false,
    )];
    let all = r3_in(h, &["tune", "--all"], false);
    if all.status.success() {
        skip(
            "no-gpu",
            "a GPU is here: `r3 tune --all` without one not checked",
        );
    } else {
        assert!(stderr(&all).contains("no GPU"), "{}", stderr(&all));
        failed.push(all);
    }
    for out in failed {
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(
            !stderr(&out).contains("what apply ships changed"),
            "{}",
            stderr(&out)
        );
    }
    let after = (
        std::fs::read_to_string(&stamp).unwrap(),
        std::fs::metadata(&stamp).unwrap().modified().unwrap(),
    );
    assert_eq!(before, after, "the stamp is as it was");
    // A tune that runs does bring it up to date: nothing ships under the default policy.
    let tune = r3_in(
        h,
        &[
            "tune",
            "--simulate",
            table.to_str().unwrap(),
            "--budget",
            "13",
            "--resume",
        ],
        false,
    );
    assert!(tune.status.success(), "{}", stderr(&tune));
    assert!(
        stderr(&tune).contains("what apply ships changed"),
        "{}",
        stderr(&tune)
    );
    assert_eq!(std::fs::read_to_string(&stamp).unwrap().trim(), "");
}
