//! `r3-clang` / `r3-clang++`: a drop-in clang. The argument list is clang's; r3's own
//! options all start with `--r3-` and are removed before clang sees the command.

use crate::toolchain;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// Runs the driver for `args` (without argv[0]); returns the exit status for the process.
pub fn main(cxx: bool, args: Vec<OsString>) -> i32 {
    let clang = match toolchain::find_clang(cxx) {
        Ok(found) => found.path,
        Err(e) => {
            eprintln!("r3: error: {e}");
            return 1;
        }
    };
    let clang_args: Vec<OsString> = args.into_iter().filter(|a| !is_r3_option(a)).collect();
    // exec replaces this process: clang's output, diagnostics and exit status are the driver's.
    let err = Command::new(&clang).args(&clang_args).exec();
    eprintln!("r3: error: cannot run {}: {err}", clang.display());
    1
}

fn is_r3_option(a: &OsString) -> bool {
    a.to_str().is_some_and(|s| s.starts_with("--r3-"))
}
