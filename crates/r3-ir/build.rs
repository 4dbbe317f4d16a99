//! The GPU architectures the NVPTX backend of the LLVM r3 links knows, as its own `llc`
//! lists them (`--sm` is checked against them).

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=LLVM_SYS_221_PREFIX");
    nvptx_cpus();
}

/// `$OUT_DIR/nvptx_cpus.rs`: `NVPTX_CPUS`, the processors `llc -march=nvptx64 -mcpu=help`
/// of LLVM_SYS_221_PREFIX names; empty (with a warning) where that llc cannot be run, and
/// then `--sm` is checked by its form alone.
fn nvptx_cpus() {
    let prefix = std::env::var("LLVM_SYS_221_PREFIX").unwrap_or_else(|_| "/usr/lib/llvm-22".into());
    let llc = std::path::Path::new(&prefix).join("bin/llc");
    let listed = Command::new(&llc)
        .args(["-march=nvptx64", "-mcpu=help"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
        })
        .unwrap_or_default();
    let cpus: Vec<String> = listed
        .split("Available features")
        .next()
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.starts_with("sm_"))
        .map(|w| format!("{w:?}"))
        .collect();
    if cpus.is_empty() {
        println!(
            "cargo:warning=no NVPTX processor list from {} -mcpu=help: --sm is checked by its form only",
            llc.display()
        );
    }
    let out = std::path::Path::new(&std::env::var("OUT_DIR").unwrap()).join("nvptx_cpus.rs");
    std::fs::write(
        out,
        format!("pub const NVPTX_CPUS: &[&str] = &[{}];\n", cpus.join(", ")),
    )
    .unwrap();
}
