//! Build information baked into r3: the git commit (`r3 doctor` says which r3 this is).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

fn main() {
    // A commit moves the branch's ref, not HEAD (which names the branch): watching HEAD alone
    // kept a binary built 27 commits later saying the older commit (2026-12-03).
    match git(&["rev-parse", "--git-dir"]) {
        Some(dir) => {
            let dir = Path::new(&dir);
            let branch = git(&["symbolic-ref", "-q", "HEAD"]);
            let watched = ["HEAD", "packed-refs"]
                .into_iter()
                .map(|f| dir.join(f))
                .chain(branch.map(|b| dir.join(b)));
            // A path that does not exist would run this script on every build.
            for path in watched.filter(|p| p.exists()) {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
        None => println!("cargo:rerun-if-changed=build.rs"),
    }
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=R3_GIT_COMMIT={commit}");
}
