//! `r3 selftest`: the whole path on the smallest kernel. The saxpy device IR built into r3 is
//! optimized (default<O3>), lowered to PTX for the GPU present, loaded with the CUDA driver,
//! launched, checked against a CPU result, and timed. Without a GPU it stops after PTX.

use crate::{device, lower};
use cudarc::driver::{sys::CUevent_flags, LaunchConfig, PushKernelArg};
use serde::Serialize;
use std::time::Instant;

pub const SAXPY_IR: &str = include_str!("../../../llvm-ir-corpus/selftest/saxpy.ll");
const KERNEL: &str = "r3_saxpy";

#[derive(Debug, Serialize)]
pub struct Outcome {
    pub sm: String,
    pub ptx_version: String,
    pub ptx: crate::ptx::stats::PtxStats,
    pub lower_ms: f64,
    /// None when no GPU was there to run on.
    pub run: Option<RunOutcome>,
    pub no_gpu_reason: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct RunOutcome {
    pub gpu: device::GpuInfo,
    pub driver: (i32, i32),
    pub elements: usize,
    pub mismatches: usize,
    pub median_us: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum SelftestError {
    #[error(transparent)]
    Lower(#[from] lower::LowerError),
    #[error(transparent)]
    Gpu(#[from] device::GpuError),
}

pub fn run(sm_override: Option<&str>) -> Result<Outcome, SelftestError> {
    let status = device::probe();
    let (target, driver) = match &status {
        device::GpuStatus::Present { driver, gpus } => (Some(gpus[0].clone()), Some(*driver)),
        _ => (None, None),
    };
    let sm = sm_override
        .map(str::to_owned)
        .or_else(|| target.as_ref().map(device::GpuInfo::sm))
        .unwrap_or_else(|| "sm_90".into());
    let ptx_version = lower::ptx_for_driver(driver.unwrap_or((13, 0))).to_owned();
    let cg = lower::Codegen {
        sm: sm.clone(),
        ptx: Some(ptx_version.clone()),
        opt_level: 3,
    };

    let t = Instant::now();
    let ptx = lower::ptx_of_bytes(SAXPY_IR.as_bytes(), "selftest saxpy.ll", "default<O3>", &cg)?;
    let lower_ms = t.elapsed().as_secs_f64() * 1e3;
    let stats = crate::ptx::stats::stats(&ptx);

    let (run, no_gpu_reason) = match (target, driver) {
        (Some(g), Some(d)) => (Some(launch(&ptx, g, d)?), None),
        _ => (None, Some(no_gpu_text(&status))),
    };
    Ok(Outcome {
        sm,
        ptx_version,
        ptx: stats,
        lower_ms,
        run,
        no_gpu_reason,
    })
}

fn no_gpu_text(status: &device::GpuStatus) -> String {
    match status {
        device::GpuStatus::NoDriver => "no NVIDIA driver on this machine".into(),
        device::GpuStatus::NoDevice { reason, .. } => reason.clone(),
        device::GpuStatus::Present { .. } => String::new(),
    }
}

fn launch(
    ptx: &str,
    info: device::GpuInfo,
    driver: (i32, i32),
) -> Result<RunOutcome, SelftestError> {
    let err = |during: &'static str| move |e| device::driver_err(during, e);
    let ctx = device::context(info.ordinal)?;
    let module = ctx
        .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
        .map_err(err("loading the PTX"))?;
    let func = module
        .load_function(KERNEL)
        .map_err(err("finding the kernel"))?;
    let stream = ctx.default_stream();

    let n: usize = 1 << 24;
    // Small integers keep a*x+y exact with or without fma contraction.
    let x: Vec<f32> = (0..n).map(|i| (i % 1000) as f32).collect();
    let y: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let a = 2.0f32;
    let n_arg = n as i32;
    let x_d = stream.clone_htod(&x).map_err(err("copying inputs"))?;
    let mut y_d = stream.clone_htod(&y).map_err(err("copying inputs"))?;
    let cfg = LaunchConfig {
        grid_dim: ((n as u32).div_ceil(256), 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };

    let launch_once = |y_d: &mut cudarc::driver::CudaSlice<f32>| {
        let mut b = stream.launch_builder(&func);
        b.arg(&a).arg(&x_d).arg(y_d).arg(&n_arg);
        // SAFETY: the argument list matches r3_saxpy(float, const float*, float*, int).
        unsafe { b.launch(cfg) }.map(|_| ())
    };
    launch_once(&mut y_d).map_err(err("launching"))?;
    let out = stream.clone_dtoh(&y_d).map_err(err("copying results"))?;
    let mismatches = (0..n).filter(|&i| out[i] != a * x[i] + y[i]).count();

    let mut samples = Vec::new();
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    for _ in 0..25 {
        let start = ctx.new_event(flags).map_err(err("creating events"))?;
        let end = ctx.new_event(flags).map_err(err("creating events"))?;
        start.record(&stream).map_err(err("timing"))?;
        launch_once(&mut y_d).map_err(err("launching"))?;
        end.record(&stream).map_err(err("timing"))?;
        end.synchronize().map_err(err("timing"))?;
        samples.push(start.elapsed_ms(&end).map_err(err("timing"))? as f64 * 1e3);
    }
    samples.drain(..5); // warm-up
    samples.sort_by(f64::total_cmp);
    let median_us = samples[samples.len() / 2];
    Ok(RunOutcome {
        gpu: info,
        driver,
        elements: n,
        mismatches,
        median_us,
    })
}
