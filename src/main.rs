//! The `r3` binary. Called as `r3-clang` or `r3-clang++` it is the compiler driver, and as
//! `r3-nvcc` the same driver behind nvcc's command line; called as `ptxas` (a link the driver
//! makes when it applies tuned kernels) it is the apply step inside clang's device compile;
//! called with a compiler first (`r3 clang++ …`, `r3 ccache clang++ …`) it is a compiler
//! launcher; otherwise the command-line interface.

mod cli;

use std::ffi::OsString;
use std::path::Path;

fn main() {
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let argv0 = args.first().cloned().unwrap_or_default();
    let name = Path::new(&argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("r3");
    let code = match name {
        "r3-clang++" => r3::driver::main(true, args.split_off(1)),
        "r3-clang" => r3::driver::main(false, args.split_off(1)),
        "r3-nvcc" => r3::driver::nvcc::main(args.split_off(1)),
        "ptxas" => r3::apply::shim::main(args.split_off(1)),
        // `r3 clang++ …`, `r3 ccache clang++ …`: r3 as a compiler launcher.
        _ if args
            .get(1)
            .is_some_and(|a| r3::driver::launcher::is_launch(a)) =>
        {
            r3::driver::launcher::main(args.split_off(1))
        }
        _ => cli::main(),
    };
    std::process::exit(code);
}
