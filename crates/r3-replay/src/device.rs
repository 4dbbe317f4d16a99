//! The GPU as r3 sees it through the CUDA driver API (cudarc, loaded at run time).
//!
//! Nothing here may panic on a machine without a driver: cudarc panics when libcuda is
//! missing, so every entry point checks for the library first.

use cudarc::driver::{sys, CudaContext};
use std::sync::Arc;

#[derive(Debug, Clone, serde::Serialize)]
pub struct GpuInfo {
    pub ordinal: usize,
    pub name: String,
    /// Compute capability (major, minor).
    pub cc: (i32, i32),
    pub mem_bytes: usize,
    /// The driver's UUID of the device, "GPU-" and 32 hex digits as nvidia-smi writes it:
    /// which device, whatever CUDA_VISIBLE_DEVICES renumbers.
    pub uuid: String,
    /// Streaming multiprocessors (0 where the driver did not say).
    #[serde(skip_serializing_if = "is_zero")]
    pub sms: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl GpuInfo {
    /// LLVM's name for the architecture, e.g. "sm_90".
    pub fn sm(&self) -> String {
        format!("sm_{}{}", self.cc.0, self.cc.1)
    }

    /// The device as trials name it ("NVIDIA H200 (sm_90)"), which keys their files.
    pub fn trials_name(&self) -> String {
        format!("{} ({})", self.name, self.sm())
    }
}

/// What the machine offers.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum GpuStatus {
    /// libcuda.so could not be loaded: no NVIDIA driver.
    NoDriver,
    /// The driver loaded but reported an error or no device.
    NoDevice {
        driver: Option<(i32, i32)>,
        reason: String,
    },
    Present {
        driver: (i32, i32),
        gpus: Vec<GpuInfo>,
    },
}

impl GpuStatus {
    /// The driver version and the first GPU, where there is one: the GPU r3's commands use.
    pub fn first(self) -> Option<((i32, i32), GpuInfo)> {
        match self {
            GpuStatus::Present { driver, mut gpus } if !gpus.is_empty() => {
                Some((driver, gpus.swap_remove(0)))
            }
            _ => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no NVIDIA driver on this machine (libcuda.so not found); GPU work needs a machine with a GPU")]
    NoDriver,
    #[error("CUDA driver error during {during}: {msg}; fix: `r3 doctor` and `nvidia-smi` show the GPU and driver state")]
    Driver { during: String, msg: String },
}

pub fn driver_present() -> bool {
    // SAFETY: only probes whether the shared library can be opened.
    std::panic::catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false)
}

/// Why no CUDA device can run here, asked without creating a context (a context would hold
/// GPU memory while a program runs beside it); None when one can. `R3_TEST_NO_GPU=1` makes it
/// answer as on a machine without a driver, so that the CPU-side tests cover that path too.
pub fn no_device_reason() -> Option<String> {
    if std::env::var_os("R3_TEST_NO_GPU").is_some_and(|v| v == "1") || !driver_present() {
        return Some("no NVIDIA driver (libcuda.so.1 cannot be loaded)".into());
    }
    match CudaContext::device_count() {
        Ok(n) if n > 0 => None,
        Ok(_) => Some("the NVIDIA driver reports no CUDA device".into()),
        Err(e) => Some(format!(
            "the NVIDIA driver reports no usable device ({e:?})"
        )),
    }
}

/// The driver's CUDA version as (major, minor), e.g. (13, 0).
pub fn driver_version() -> Option<(i32, i32)> {
    if !driver_present() {
        return None;
    }
    let mut v = 0;
    // SAFETY: the library is present; the call only writes `v`.
    let rc = unsafe { sys::cuDriverGetVersion(&mut v) };
    (rc == sys::CUresult::CUDA_SUCCESS).then_some((v / 1000, (v % 1000) / 10))
}

/// The threads GPU `ordinal` holds at once (SMs × threads an SM holds), read from the driver
/// without making a context (a context costs time and GPU memory on every device [`probe`]
/// visits); None without a driver or a device.
pub fn resident_threads(ordinal: i32) -> Option<f64> {
    use sys::CUdevice_attribute::*;
    let [sms, per_sm] = attributes(
        ordinal,
        [
            CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
            CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
        ],
    )?;
    Some(f64::from(sms) * f64::from(per_sm))
}

/// GPU `ordinal`'s peak memory bandwidth (GB/s): its memory clock (two transfers a clock) over
/// its bus width, read from the driver without making a context; None without a driver or
/// where the driver does not say. A nominal figure: what it is for (`remix::rewrites::reuse`)
/// tells apart kernels orders of magnitude apart.
pub fn memory_gbs(ordinal: usize) -> Option<f64> {
    use sys::CUdevice_attribute::*;
    let [khz, bits] = attributes(
        i32::try_from(ordinal).ok()?,
        [
            CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE,
            CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH,
        ],
    )?;
    Some(2.0 * f64::from(khz) * 1e3 * f64::from(bits) / 8.0 / 1e9)
}

/// GPU `ordinal`'s attributes `which`, each positive, read without making a context; None
/// without a driver or a device, or where one is not positive.
fn attributes<const N: usize>(
    ordinal: i32,
    which: [sys::CUdevice_attribute; N],
) -> Option<[i32; N]> {
    if !driver_present() {
        return None;
    }
    // SAFETY: the library is present; the calls only write the values passed.
    unsafe {
        let ok = |rc| rc == sys::CUresult::CUDA_SUCCESS;
        let mut dev = 0;
        if !ok(sys::cuInit(0)) || !ok(sys::cuDeviceGet(&mut dev, ordinal)) {
            return None;
        }
        let mut out = [0; N];
        for (v, a) in out.iter_mut().zip(which) {
            if !ok(sys::cuDeviceGetAttribute(v, a, dev)) || *v <= 0 {
                return None;
            }
        }
        Some(out)
    }
}

/// [`probe`] once for the process: the devices a process sees do not change while it runs
/// (`CUDA_VISIBLE_DEVICES` is read when the driver starts), and each probe creates and drops a
/// context on every GPU. An evaluator is made for every kernel, every rewrite's build and every
/// confirmation step; probing for each cost about 0.2 s on an H200 (2026-11-30: 36 builds of
/// a tiling template, 0.57 s each, 0.2 s of it between their lowerings).
pub fn probed() -> &'static GpuStatus {
    static PROBED: std::sync::OnceLock<GpuStatus> = std::sync::OnceLock::new();
    PROBED.get_or_init(probe)
}

pub fn probe() -> GpuStatus {
    if !driver_present() {
        return GpuStatus::NoDriver;
    }
    let driver = driver_version();
    let count = match CudaContext::device_count() {
        Ok(n) => n,
        Err(e) => {
            return GpuStatus::NoDevice {
                driver,
                reason: format!("{e:?}"),
            }
        }
    };
    if count == 0 {
        return GpuStatus::NoDevice {
            driver,
            reason: "the driver reports 0 devices".into(),
        };
    }
    let mut gpus = Vec::new();
    for ordinal in 0..count as usize {
        match context(ordinal).and_then(|ctx| info(&ctx)) {
            Ok(g) => gpus.push(g),
            Err(e) => {
                return GpuStatus::NoDevice {
                    driver,
                    reason: e.to_string(),
                }
            }
        }
    }
    GpuStatus::Present {
        driver: driver.unwrap_or((0, 0)),
        gpus,
    }
}

/// A context on one GPU, with the driver checked first.
pub fn context(ordinal: usize) -> Result<Arc<CudaContext>, GpuError> {
    if !driver_present() {
        return Err(GpuError::NoDriver);
    }
    CudaContext::new(ordinal)
        .map_err(|e| driver_err(&format!("creating a context on GPU {ordinal}"), e))
}

pub fn info(ctx: &Arc<CudaContext>) -> Result<GpuInfo, GpuError> {
    let during = "reading device properties";
    Ok(GpuInfo {
        ordinal: ctx.ordinal(),
        name: ctx.name().map_err(|e| driver_err(during, e))?,
        cc: ctx
            .compute_capability()
            .map_err(|e| driver_err(during, e))?,
        mem_bytes: ctx.total_mem().map_err(|e| driver_err(during, e))?,
        uuid: uuid_text(&ctx.uuid().map_err(|e| driver_err(during, e))?.bytes),
        sms: ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_or(0, |n| n.max(0) as u32),
    })
}

/// nvidia-smi's spelling of a device UUID: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
pub fn uuid_text(bytes: &[std::ffi::c_char; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{:02x}", *b as u8)).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

pub fn driver_err(during: &str, e: cudarc::driver::DriverError) -> GpuError {
    GpuError::Driver {
        during: during.to_owned(),
        msg: format!("{e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_device_uuid_reads_as_nvidia_smi_writes_it() {
        let mut b = [0 as std::ffi::c_char; 16];
        for (i, x) in b.iter_mut().enumerate() {
            *x = (i as u8 * 17) as std::ffi::c_char;
        }
        assert_eq!(uuid_text(&b), "GPU-00112233-4455-6677-8899-aabbccddeeff");
    }

    #[test]
    fn the_probe_an_evaluator_reads_is_made_once_and_says_what_a_fresh_one_says() {
        let once = probed();
        assert!(std::ptr::eq(once, probed()));
        assert_eq!(
            std::mem::discriminant(once),
            std::mem::discriminant(&probe())
        );
    }
}
