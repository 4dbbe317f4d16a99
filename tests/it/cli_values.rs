//! Option values the command line refuses itself (issue 56): a usage error naming the value and
//! what is accepted, exit status 2, before anything is probed or written.

use crate::support::*;

/// Exit status 2 and clap's message, which names `value`, carries `says` and has no "no GPU".
fn refused_as_usage(args: &[&str], value: &str, says: &str) {
    let home = tempfile::tempdir().unwrap();
    let out = r3(args, home.path());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(
        err.contains(&format!("'{value}'")) && err.contains(says) && !err.contains("no GPU"),
        "{args:?}: {err}"
    );
    assert!(stdout(&out).is_empty(), "{args:?} wrote: {}", stdout(&out));
}

#[test]
fn a_gpus_value_that_names_no_gpu_is_a_usage_error() {
    for spec in ["abc", "0,x", ""] {
        refused_as_usage(
            &["tune", "--all", "--gpus", spec],
            spec,
            "give `all` or ordinals such as 0 or 0,1",
        );
    }
}

#[test]
fn a_job_array_of_no_tasks_is_refused() {
    refused_as_usage(
        &["tune", "--all", "--emit-sbatch", "0"],
        "0",
        "0 is not in 1..",
    );
}

#[test]
fn no_rewrites_is_refused_without_the_deadline_whose_arm_it_turns_off() {
    let home = tempfile::tempdir().unwrap();
    let out = r3(&["tune", "--all", "--no-rewrites"], home.path());
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--deadline <T>") && !err.contains("no GPU"),
        "{err}"
    );
}
