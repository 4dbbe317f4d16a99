//! `r3 doctor`: what r3 found on this machine, and the command that fixes each missing part.

use crate::{device, store, toolchain};
use serde::Serialize;
use std::path::Path;

/// One line of the report.
#[derive(Debug, Serialize)]
pub struct Check {
    pub part: &'static str,
    pub ok: bool,
    /// Whether r3's core work (record, lower) needs this part; the GPU is needed only to time.
    pub required: bool,
    pub detail: String,
    /// The command or step that fixes a missing part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub r3_version: &'static str,
    pub r3_commit: &'static str,
    pub checks: Vec<Check>,
    pub gpu: device::GpuStatus,
}

impl Report {
    pub fn healthy(&self) -> bool {
        self.checks.iter().all(|c| c.ok || !c.required)
    }
}

pub fn run(cuda_path: Option<&Path>, store_flag: Option<&Path>, cwd: &Path) -> Report {
    let gpu_status = device::probe();
    let checks = vec![
        Check {
            part: "LLVM (linked)",
            ok: toolchain::llvm_version().starts_with(&format!("{}.", toolchain::CLANG_MAJOR)),
            required: true,
            detail: format!("{} (static, NVPTX backend)", toolchain::llvm_version()),
            fix: None,
        },
        clang_check(),
        capture_check(),
        cuda_check(cuda_path),
        gpu_check(&gpu_status),
        store_check(store_flag, cwd),
    ];
    Report {
        r3_version: env!("CARGO_PKG_VERSION"),
        r3_commit: env!("R3_GIT_COMMIT"),
        checks,
        gpu: gpu_status,
    }
}

fn clang_check() -> Check {
    match toolchain::find_clang(true) {
        Ok(found) => {
            let version = toolchain::clang_version(&found.path);
            Check {
                part: "clang",
                ok: version.is_some(),
                required: true,
                detail: format!(
                    "{} [{}]: {}",
                    found.path.display(),
                    found.source,
                    version.as_deref().unwrap_or("does not run")
                ),
                fix: match (version.is_none(), toolchain::clang_override_problem(true)) {
                    (true, _) => {
                        Some("set R3_CLANG to a working clang 22, or run scripts/setup".into())
                    }
                    (false, problem) => problem,
                },
            }
        }
        Err(e) => Check {
            part: "clang",
            ok: false,
            required: true,
            detail: e.to_string(),
            fix: Some("scripts/setup (installs clang-22 from Debian's packages)".into()),
        },
    }
}

/// Which way `r3-clang++` captures device IR here (building the plugin if it is not yet).
fn capture_check() -> Check {
    let Ok(clang) = toolchain::find_clang(true) else {
        return Check {
            part: "IR capture",
            ok: false,
            required: false,
            detail: "needs clang".into(),
            fix: None,
        };
    };
    match crate::driver::plugin::plugin(&clang.path) {
        Ok(so) => Check {
            part: "IR capture",
            ok: true,
            required: false,
            detail: format!("clang plugin {}", so.display()),
            fix: None,
        },
        Err(e) => Check {
            part: "IR capture",
            ok: true,
            required: false,
            detail: format!("a second device compile per TU (slower builds): plugin {e}"),
            fix: Some("install llvm-22-dev (LLVM headers), then rm -r ~/.cache/r3/plugin".into()),
        },
    }
}

fn cuda_check(cuda_path: Option<&Path>) -> Check {
    match toolchain::find_cuda(cuda_path) {
        Ok(found) => {
            let version = toolchain::cuda_version(&found.path);
            let ptxas = found.path.join("bin/ptxas");
            let libdevice = found.path.join("nvvm/libdevice/libdevice.10.bc");
            let missing: Vec<String> = [&ptxas, &libdevice]
                .into_iter()
                .filter(|p| !p.exists())
                .map(|p| p.display().to_string())
                .collect();
            Check {
                part: "CUDA SDK",
                ok: version.is_some() && missing.is_empty(),
                required: true,
                detail: format!(
                    "{} [{}]: CUDA {}{}",
                    found.path.display(),
                    found.source,
                    version
                        .as_deref()
                        .unwrap_or("version unknown (no version.json)"),
                    if missing.is_empty() {
                        String::new()
                    } else {
                        format!("; missing {}", missing.join(", "))
                    }
                ),
                fix: (!missing.is_empty() || version.is_none()).then(|| {
                    "scripts/setup (assembles CUDA 13.0 from NVIDIA's PyPI wheels)".into()
                }),
            }
        }
        Err(e) => Check {
            part: "CUDA SDK",
            ok: false,
            required: true,
            detail: e.to_string(),
            fix: Some("scripts/setup, or R3_CUDA_PATH=/path/to/cuda".into()),
        },
    }
}

fn gpu_check(status: &device::GpuStatus) -> Check {
    let (ok, detail, fix) = match status {
        device::GpuStatus::NoDriver => (
            false,
            "no GPU: no NVIDIA driver (libcuda.so not found)".to_string(),
            "run on a machine with an NVIDIA GPU and driver; without one r3 records and builds PTX but cannot time",
        ),
        device::GpuStatus::NoDevice { driver, reason } => (
            false,
            format!("no GPU: driver {} present, but {reason}", fmt_driver(*driver)),
            "check nvidia-smi and CUDA_VISIBLE_DEVICES",
        ),
        device::GpuStatus::Present { driver, gpus } => {
            let list: Vec<String> = gpus
                .iter()
                .map(|g| format!("#{} {} ({}, {} GiB)", g.ordinal, g.name, g.sm(), g.mem_bytes >> 30))
                .collect();
            (true, format!("{}; driver CUDA {}", list.join(", "), fmt_driver(Some(*driver))), "")
        }
    };
    Check {
        part: "GPU",
        ok,
        required: false,
        detail,
        fix: (!ok).then(|| fix.to_string()),
    }
}

fn fmt_driver(d: Option<(i32, i32)>) -> String {
    d.map(|(a, b)| format!("{a}.{b}"))
        .unwrap_or_else(|| "?".into())
}

fn store_check(store_flag: Option<&Path>, cwd: &Path) -> Check {
    let loc = match store::locate(store_flag, cwd) {
        Ok(loc) => loc,
        Err(e) => {
            return Check {
                part: "store",
                ok: false,
                required: false,
                detail: e.to_string(),
                fix: None,
            }
        }
    };
    let exists = loc.path.is_dir();
    Check {
        part: "store",
        ok: true,
        required: false,
        detail: format!(
            "{} [{}]{}",
            loc.path.display(),
            loc.source,
            if exists { "" } else { " (not created yet)" }
        ),
        fix: None,
    }
}

/// The report as aligned text lines.
pub fn render(report: &Report) -> String {
    let mut out = format!("r3 {} ({})\n", report.r3_version, report.r3_commit);
    for c in &report.checks {
        let mark = if c.ok {
            "ok"
        } else if c.required {
            "MISSING"
        } else {
            "absent"
        };
        out += &format!("{:<14} {:<8} {}\n", c.part, mark, c.detail);
        if let Some(fix) = &c.fix {
            out += &format!("{:<14} {:<8} fix: {fix}\n", "", "");
        }
    }
    out
}
