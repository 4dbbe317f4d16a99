//! One recorded launch, set up on the GPU: the recorded address range reserved at the same
//! address, every allocation mapped where it was, the prologue's bytes ready to restore.
//! Candidates (PTX) are loaded into it, run, read back and timed. All CUDA calls of replay
//! are here; this runs inside a worker process (see `worker`), never in the search's process.

use super::determinism;
use super::outputs;
use super::stopping;
use super::validate::{self, Tolerance, Unordered};
use crate::store::l2::Regime;
use crate::store::outcome::TimeStats;
use crate::store::records::{LaunchRecord, Recording, Region, RegionData, RegionKind, Snapshot};
use cudarc::driver::sys::{self, CUresult};
use std::ffi::CString;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("CUDA error {code} during {during}")]
    Cuda { during: String, code: String },
    #[error("the recording's address range {base:#x}+{size:#x} cannot be reserved at the same address here (got {got:#x}); another allocation holds it")]
    Range { base: u64, size: u64, got: u64 },
    #[error("recording {0}: {1}")]
    Recording(String, String),
    #[error("{0}")]
    Other(String),
}

fn ck(r: CUresult, during: &str) -> Result<(), ReplayError> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(ReplayError::Cuda {
            during: during.to_owned(),
            code: format!("{r:?}"),
        })
    }
}

/// Whether an error leaves the CUDA context unusable (the worker must then exit).
pub fn is_sticky(e: &ReplayError) -> bool {
    matches!(e, ReplayError::Cuda { code, .. } if code.contains("ILLEGAL") || code.contains("LAUNCH_FAILED")
        || code.contains("MISALIGNED") || code.contains("HARDWARE_STACK") || code.contains("ILLEGAL_INSTRUCTION")
        || code.contains("INVALID_PC") || code.contains("ASSERT"))
}

/// A candidate's module loaded into the session.
pub struct Loaded {
    module: sys::CUmodule,
    func: sys::CUfunction,
    /// (region index, device address) of the recorded variables the module defines.
    vars: Vec<(usize, u64)>,
    pub registers: i32,
    pub local_bytes: i32,
}

pub struct Session {
    launch: LaunchRecord,
    args: Vec<u8>,
    prologue: Snapshot,
    expected: Snapshot,
    /// Regions the original launch changed: restored before every timed run (warm: but for their
    /// learned output bytes, which every run overwrites), from a copy of
    /// their prologue bytes kept on the device (device-to-device copies are ~50x faster).
    written: Vec<usize>,
    golden: Vec<u64>,
    /// Whether allocations may differ from the prologue outside the written regions (at the
    /// start, and after a candidate failed its check): then the next check restores them all.
    dirty: std::cell::Cell<bool>,
    /// The expected post-launch bytes of every allocation, on the device, and the comparison
    /// kernel: a check reads back only the allocations that differ.
    expected_dev: Vec<Option<u64>>,
    compare: Compare,
    scratch: u64,
    scratch_bytes: usize,
    stream: sys::CUstream,
    /// The mapped bytes just past each allocation's end, filled with a pattern: a write past
    /// the end of a buffer lands there (allocations are mapped in whole granules), where no
    /// region is compared, and in the program it would overwrite a neighbouring buffer.
    guards: Vec<Guard>,
    /// Each allocation's mapping in the recorded range (address, mapped bytes): unmapped,
    /// and the range given back, when the session goes (`Drop`).
    mappings: Vec<Mapping>,
    /// The GPU's UUID, which names its measurement turn (`turn`).
    pub uuid: String,
    /// Regions compared in any order of their elements, as the baseline writes them in another
    /// order than the recording (`check_baseline`).
    unordered: std::cell::RefCell<Vec<Unordered>>,
    /// Tolerances learned per region where the baseline's own runs differ (`check_baseline`'s
    /// caller, `determinism::learn`): every check without the user's tolerance is held to them.
    learned: std::cell::RefCell<Vec<super::determinism::Learned>>,
    /// Output bytes poisoned before every checked run (`learn_outputs`, see `outputs`).
    poison: std::cell::RefCell<Vec<Poisoned>>,
    /// The CUDA context (the device's primary one, as an address), for the threads that
    /// load candidates ahead of their turn (`ahead`).
    context: usize,
    ahead: super::ahead::Ahead,
}

/// One region's poisoned output bytes: the mask, and the region's prologue with the mask set
/// to `outputs::POISON`, on the device (copied over the region before each checked run).
struct Poisoned {
    region: usize,
    mask: Vec<std::ops::Range<usize>>,
    image: u64,
}

/// An allocation mapped in the recorded range: its address and mapped bytes.
type Mapping = (u64, usize);

/// A session gives back what it made: the recorded range and its memory above all, so that a
/// worker can open the next recording's session (which reserves the same range) after it.
impl Drop for Session {
    fn drop(&mut self) {
        // SAFETY: everything freed was made by `open` in this context, and nothing uses it once
        // the session goes (loaded candidates hold functions, not these buffers).
        self.ahead.unload_untaken();
        unsafe {
            sys::cuCtxSynchronize();
            sys::cuStreamDestroy_v2(self.stream);
            let copies = self.golden.iter().chain(self.expected_dev.iter().flatten());
            let poisoned: Vec<u64> = self.poison.borrow().iter().map(|p| p.image).collect();
            for d in copies
                .chain([&self.scratch, &self.compare.first])
                .chain(&poisoned)
            {
                sys::cuMemFree_v2(*d);
            }
            sys::cuModuleUnload(self.compare.module);
            for &(addr, len) in &self.mappings {
                sys::cuMemUnmap(addr, len);
            }
            sys::cuMemAddressFree(self.launch.va_base, self.launch.va_size as usize);
        }
    }
}

/// What a checked run left: the regions that differ from the recording (the others equal it).
pub struct Output(Snapshot);

/// Bytes of dynamic shared memory a launch must be allowed before it can run with `bytes`: a
/// launch of more than 48 KiB fails (CUDA_ERROR_INVALID_VALUE) unless its function opted in, as
/// the program did with `cudaFuncSetAttribute` (cuda-samples' tensor-core GEMMs: 72 KiB, their
/// baselines "not checked", H200, 2026-11-29). None: no opt-in needed.
fn dynamic_shared_opt_in(bytes: u64) -> Option<i32> {
    const DEFAULT_LIMIT: u64 = 48 << 10;
    (bytes > DEFAULT_LIMIT).then(|| i32::try_from(bytes).unwrap_or(i32::MAX))
}

/// The recording's snapshots, decompressed: the state before the launch, the state after it,
/// the regions the launch writes, and the launch's argument bytes.
#[allow(clippy::type_complexity)]
fn read_recording(
    rec: &Recording,
) -> Result<(Snapshot, Snapshot, Vec<usize>, Vec<u8>), ReplayError> {
    let bad = |e: crate::store::StoreError| ReplayError::Recording(rec.id.clone(), e.to_string());
    let _reading = crate::timeline::span("open.read", || rec.id.clone());
    // Both decompressed at once: each is one zstd frame, read by one core.
    let (prologue, epilogue) = std::thread::scope(|s| {
        let epilogue = s.spawn(|| rec.epilogue());
        let prologue = rec.prologue();
        (prologue, epilogue.join())
    });
    let prologue = prologue.map_err(bad)?;
    let epilogue = epilogue
        .map_err(|_| ReplayError::Recording(rec.id.clone(), "reading it panicked".into()))?
        .map_err(bad)?;
    let expected = crate::store::records::apply(&prologue, &epilogue)
        .map_err(|e| ReplayError::Recording(rec.id.clone(), e))?;
    let written: Vec<usize> = epilogue
        .regions
        .iter()
        .enumerate()
        .filter(|(_, r)| r.data != RegionData::Unchanged)
        .map(|(i, _)| i)
        .collect();
    let args = rec
        .launch
        .args()
        .map_err(|e| ReplayError::Recording(rec.id.clone(), e))?;
    Ok((prologue, expected, written, args))
}

/// GPU `ordinal`'s primary context, made current on the calling thread: the device, the
/// context and the GPU's UUID (hex).
///
/// # Safety
/// Plain driver calls; the context is retained for the process's life.
unsafe fn open_context(
    ordinal: i32,
) -> Result<(sys::CUdevice, sys::CUcontext, String), ReplayError> {
    let _context = crate::timeline::span("open.context", String::new);
    ck(sys::cuInit(0), "cuInit")?;
    let mut dev = 0;
    ck(sys::cuDeviceGet(&mut dev, ordinal), "cuDeviceGet")?;
    let mut ctx = std::ptr::null_mut();
    ck(
        sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
        "retaining the primary context",
    )?;
    ck(sys::cuCtxSetCurrent(ctx), "cuCtxSetCurrent")?;
    let mut id: sys::CUuuid = std::mem::zeroed();
    ck(
        sys::cuDeviceGetUuid_v2(&mut id, dev),
        "reading the GPU's UUID",
    )?;
    let uuid = id
        .bytes
        .iter()
        .map(|b| format!("{:02x}", *b as u8))
        .collect();
    Ok((dev, ctx, uuid))
}

/// Where every later run of one code must leave the allocations the launch writes: the bytes of
/// its checked run, on the device, with one result word per allocation (see `determinism`).
pub struct Reference {
    /// (region, device address of the bytes it must hold after a run)
    regions: Vec<(usize, u64)>,
    /// Device buffers this reference allocated (the rest are the recording's expected bytes).
    owned: Vec<u64>,
    flags: u64,
    compared: std::cell::Cell<u32>,
}

/// The pattern guard bytes hold, and the most bytes of each allocation's slack checked.
const GUARD_BYTE: u8 = 0xa5;
const GUARD_MAX: u64 = 64 << 10;

#[derive(Debug, Clone, Copy)]
struct Guard {
    region: usize,
    addr: u64,
    len: u64,
}

impl Session {
    /// Sets up a recording on GPU `ordinal`.
    pub fn open(rec: &Recording, ordinal: i32) -> Result<Session, ReplayError> {
        // The recording is read while the context is made: each takes a few hundred ms of a
        // short kernel's evaluator (H200, 2026-11-29: 274 and 333 ms, one after the other).
        let (read, context) = std::thread::scope(|s| {
            let read = s.spawn(|| read_recording(rec));
            // SAFETY: plain driver calls; every result is checked.
            let context = unsafe { open_context(ordinal) };
            (read.join(), context)
        });
        let (prologue, expected, written, args) = read
            .map_err(|_| ReplayError::Recording(rec.id.clone(), "reading it panicked".into()))??;
        let (dev, ctx, uuid) = context?;
        // SAFETY: plain driver calls; every result is checked.
        unsafe {
            let mapping = crate::timeline::span("open.map", String::new);
            let (guards, mappings) = map_range(&rec.launch, &prologue, dev)?;
            drop(mapping);
            let mut stream = std::ptr::null_mut();
            ck(sys::cuStreamCreate(&mut stream, 0), "cuStreamCreate")?;
            let mut l2 = 0;
            ck(
                sys::cuDeviceGetAttribute(
                    &mut l2,
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE,
                    dev,
                ),
                "reading the L2 size",
            )?;
            let scratch_bytes = (l2.max(1 << 20) as usize) * 2;
            let mut scratch = 0;
            ck(
                sys::cuMemAlloc_v2(&mut scratch, scratch_bytes),
                "allocating the L2 flush buffer",
            )?;
            let copying = crate::timeline::span("open.golden", String::new);
            let golden = golden_copies(&prologue, &written)?;
            let all_allocations: Vec<usize> = (0..expected.regions.len())
                .filter(|&i| expected.regions[i].kind == RegionKind::Allocation)
                .collect();
            let copies = golden_copies(&expected, &all_allocations)?;
            let mut expected_dev = vec![None; expected.regions.len()];
            for (i, d) in all_allocations.into_iter().zip(copies) {
                expected_dev[i] = Some(d);
            }
            drop(copying);
            let compare = {
                let _span = crate::timeline::span("open.compare", String::new);
                Compare::load()?
            };
            Ok(Session {
                expected_dev,
                compare,
                launch: rec.launch.clone(),
                args,
                prologue,
                expected,
                written,
                golden,
                dirty: std::cell::Cell::new(true),
                scratch,
                scratch_bytes,
                stream,
                guards,
                mappings,
                uuid,
                unordered: Default::default(),
                learned: Default::default(),
                poison: Default::default(),
                context: ctx as usize,
                ahead: Default::default(),
            })
        }
    }

    /// Starts loading `ptxs` on threads of their own, for their `load`s to come (`ahead`).
    pub fn load_ahead(&self, ptxs: Vec<String>) {
        self.ahead.load(self.context, ptxs);
    }

    pub fn load(&self, ptx: &str) -> Result<Loaded, ReplayError> {
        if ptx.contains('\0') {
            return Err(ReplayError::Other("PTX holds a NUL byte".into()));
        }
        let name = CString::new(self.launch.kernel.as_str())
            .map_err(|_| ReplayError::Other("kernel name".into()))?;
        // SAFETY: the module and function handles come from the driver and are checked.
        unsafe {
            let mut module = match self.ahead.take(ptx) {
                Some(loaded) => loaded as sys::CUmodule,
                None => std::ptr::null_mut(),
            };
            if module.is_null() {
                module = crate::assemble::load(ptx)
                    .or_else(|e| ck(e, "loading the PTX").map(|()| std::ptr::null_mut()))?;
            }
            let mut func = std::ptr::null_mut();
            ck(
                sys::cuModuleGetFunction(&mut func, module, name.as_ptr()),
                "finding the kernel in the PTX",
            )?;
            if let Some(bytes) = dynamic_shared_opt_in(self.launch.shared_bytes) {
                ck(
                    sys::cuFuncSetAttribute(
                        func,
                        sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        bytes,
                    ),
                    "allowing the recorded launch's dynamic shared memory",
                )?;
            }
            let mut vars = Vec::new();
            for (i, r) in self.prologue.regions.iter().enumerate() {
                if r.kind != RegionKind::Variable {
                    continue;
                }
                let Ok(n) = CString::new(r.name.as_str()) else {
                    continue;
                };
                let (mut ptr, mut size) = (0u64, 0usize);
                // A variable the kernel does not reach is not in its module.
                if sys::cuModuleGetGlobal_v2(&mut ptr, &mut size, module, n.as_ptr())
                    == CUresult::CUDA_SUCCESS
                {
                    vars.push((i, ptr));
                }
            }
            let attr = |a| {
                let mut v = 0;
                sys::cuFuncGetAttribute(&mut v, a, func);
                v
            };
            let registers = attr(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NUM_REGS);
            let local_bytes = attr(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
            Ok(Loaded {
                module,
                func,
                vars,
                registers,
                local_bytes,
            })
        }
    }

    pub fn unload(&self, l: Loaded) {
        // SAFETY: the module was loaded by `load` and is not used after this.
        unsafe { sys::cuModuleUnload(l.module) };
    }

    /// Restores every input, runs once, and checks every region against the recording; what
    /// the run left is the reference its timed runs are held to ([`Session::reference`]).
    pub fn check(
        &self,
        l: &Loaded,
        block_x: Option<u32>,
        tol: Option<&Tolerance>,
    ) -> Result<Result<Output, String>, ReplayError> {
        Ok(self.check_timed(l, block_x, tol)?.0)
    }

    /// [`Session::check`], and how long its run took (µs, by events around the launch alone):
    /// a long kernel's candidate is judged on that one run where the answer is clear
    /// (`stopping::one_run_beaten`).
    pub fn check_timed(
        &self,
        l: &Loaded,
        block_x: Option<u32>,
        tol: Option<&Tolerance>,
    ) -> Result<(Result<Output, String>, f64), ReplayError> {
        let (observed, verdict, us) = self.run_and_compare(l, block_x, tol)?;
        Ok((self.settle(verdict.map(|()| observed))?, us))
    }

    /// The baseline's check. Where the baseline's code uses atomics (`atomics`) and leaves the
    /// regions it writes holding the recording's elements in another order (a list appended
    /// to with atomics), those regions are compared in any order from then on, for every code:
    /// the order is the GPU's choice, not the code's. Returns them with the verdict.
    #[allow(clippy::type_complexity)]
    pub fn check_baseline(
        &self,
        l: &Loaded,
        atomics: bool,
        appended: &[Unordered],
    ) -> Result<Result<(Output, Vec<Unordered>), String>, ReplayError> {
        *self.unordered.borrow_mut() = appended.to_vec();
        self.learned.borrow_mut().clear();
        let (observed, verdict, _) = self.run_and_compare(l, None, None)?;
        let relaxed = match (&verdict, atomics) {
            (Err(_), true) => validate::permuted(&self.expected, &observed, &self.written),
            _ => None,
        };
        let Some(unordered) = relaxed else {
            return Ok(self
                .settle(verdict.map(|()| observed))?
                .map(|o| (o, Vec::new())));
        };
        let appended_too = appended
            .iter()
            .filter(|a| !unordered.iter().any(|u| u.region == a.region));
        *self.unordered.borrow_mut() = unordered.iter().chain(appended_too).copied().collect();
        let verdict = self.check_guards()?;
        Ok(self
            .settle(verdict.map(|()| observed))?
            .map(|o| (o, unordered)))
    }

    /// How messages name region `i` of the recording.
    pub fn region_name(&self, i: usize) -> String {
        validate::describe(&self.prologue.regions[i])
    }

    /// The guards' check after a verdict on the regions, and the state the next check starts
    /// from.
    fn settle(
        &self,
        verdict: Result<Snapshot, String>,
    ) -> Result<Result<Output, String>, ReplayError> {
        let verdict = match verdict {
            Ok(observed) => self.check_guards()?.map(|()| observed),
            wrong => wrong,
        };
        self.dirty.set(verdict.is_err());
        Ok(verdict.map(Output))
    }

    /// One run of `l` from the recorded inputs, its results read back and compared; with the
    /// run's time (µs).
    fn run_and_compare(
        &self,
        l: &Loaded,
        block_x: Option<u32>,
        tol: Option<&Tolerance>,
    ) -> Result<(Snapshot, Result<(), String>, f64), ReplayError> {
        self.restore_for_run(l)?;
        self.apply_poison(l)?;
        let us = self.timed_launch(|| self.launch_once(l, block_x))?;
        let observed = self.read_back(l)?;
        // A learned output is a region the original writes, even where it wrote what was
        // already there (the recording shows no change): compared as one.
        let mut written = self.written.clone();
        written.extend(
            self.poison
                .borrow()
                .iter()
                .map(|p| p.region)
                .filter(|r| !self.written.contains(r)),
        );
        let verdict = validate::compare_by_region(
            &self.expected,
            &observed,
            &written,
            &self.unordered.borrow(),
            |i| {
                tol.copied()
                    .map(validate::Held::Floats)
                    .or_else(|| self.learned_tolerance(i))
            },
        )
        .map_err(|why| {
            // Output left as poisoned says more than the first byte that differs.
            let masks: outputs::Masks = self
                .poison
                .borrow()
                .iter()
                .map(|p| (p.region, p.mask.clone()))
                .collect();
            outputs::explain(&self.expected, &observed, &masks).unwrap_or(why)
        });
        Ok((observed, verdict, us))
    }

    /// The state a run starts from. Cheap when the last candidate was valid: only what the
    /// launch writes, from the device copies, and the module's variables (a fresh module starts
    /// from its initializers); everything otherwise.
    fn restore_for_run(&self, l: &Loaded) -> Result<(), ReplayError> {
        if self.dirty.replace(true) {
            self.restore(l, None)?;
            self.fill_guards()?;
        } else {
            // The check poisons the outputs after this.
            self.restore_written(l, true)?;
            let vars: Vec<usize> = l.vars.iter().map(|(i, _)| *i).collect();
            self.restore(l, Some(&vars))?;
        }
        Ok(())
    }

    /// Poisons the learned output bytes (`learn_outputs`) before a checked run.
    fn apply_poison(&self, l: &Loaded) -> Result<(), ReplayError> {
        for p in self.poison.borrow().iter() {
            let Some(dst) = self.device_addr(l, p.region) else {
                continue;
            };
            // SAFETY: the image and the region both hold the region's size.
            unsafe {
                ck(
                    sys::cuMemcpyDtoDAsync_v2(
                        dst,
                        p.image,
                        self.prologue.regions[p.region].size as usize,
                        self.stream,
                    ),
                    "poisoning outputs",
                )?;
            }
        }
        Ok(())
    }

    /// Learns which bytes `l` (the original code, which reproduces the recording) writes
    /// whatever they held, and poisons them before every checked run from now on (see
    /// `outputs`): two runs per region that may be an output, then one checked run with all of
    /// them poisoned, which must still reproduce the recording (else nothing is poisoned).
    /// Returns the masks, which later sessions of the recording take as they are
    /// ([`Session::set_outputs`]).
    pub fn learn_outputs(&self, l: &Loaded) -> Result<outputs::Masks, ReplayError> {
        self.forget_outputs();
        let mut learned: outputs::Masks = Vec::new();
        for r in outputs::candidates(&self.launch, &self.prologue, &self.written) {
            let (Some(want), Some(_)) =
                (full(&self.expected.regions[r].data), self.device_addr(l, r))
            else {
                continue;
            };
            let mut runs = Vec::new();
            for pattern in [outputs::POISON, outputs::SECOND] {
                runs.push(self.run_filled(l, r, pattern)?);
            }
            let [Some(a), Some(b)] = [&runs[0], &runs[1]] else {
                continue;
            };
            match outputs::learned(want, a, b) {
                Some(mask) if !mask.is_empty() && mask.len() <= outputs::MAX_RANGES => {
                    learned.push((r, mask))
                }
                _ => {}
            }
        }
        self.dirty.set(true);
        self.set_outputs(&learned)?;
        if learned.is_empty() {
            return Ok(learned);
        }
        let (_, verdict, _) = self.run_and_compare(l, None, None)?;
        self.dirty.set(true);
        if verdict.is_err() {
            // Together the regions are not outputs after all (one feeds another): no poison.
            self.forget_outputs();
            return Ok(Vec::new());
        }
        Ok(learned)
    }

    /// Poisons `masks` before every checked run from now on (none: nothing); masks that do
    /// not fit the recording's regions are left out.
    pub fn set_outputs(&self, masks: &outputs::Masks) -> Result<(), ReplayError> {
        self.forget_outputs();
        for (r, mask) in masks {
            let Some(pro) = self.prologue.regions.get(*r).and_then(|g| full(&g.data)) else {
                continue;
            };
            if self.prologue.regions[*r].kind != RegionKind::Allocation
                || mask.iter().any(|m| m.end > pro.len())
            {
                continue;
            }
            let snap = Snapshot {
                regions: vec![Region {
                    data: RegionData::Full(outputs::poisoned(pro, mask)),
                    name: String::new(),
                    ..self.prologue.regions[*r]
                }],
            };
            // SAFETY: allocating and filling a buffer of the region's size.
            let image = unsafe { golden_copies(&snap, &[0])?[0] };
            self.poison.borrow_mut().push(Poisoned {
                region: *r,
                mask: mask.clone(),
                image,
            });
        }
        Ok(())
    }

    /// The poisoned regions in words, for a note: `allocation 0x… (N of M bytes)`.
    pub fn describe_outputs(&self) -> Vec<String> {
        self.poison
            .borrow()
            .iter()
            .map(|p| {
                format!(
                    "{} ({} of {} bytes)",
                    self.region_name(p.region),
                    outputs::bytes(&p.mask),
                    self.prologue.regions[p.region].size
                )
            })
            .collect()
    }

    /// Set aside for another evaluator of the same recording, where the GPU has room to keep
    /// it: what was learned of the last code is forgotten (a new baseline learns its outputs,
    /// unordered regions and tolerances again), and the next check restores every allocation.
    /// False where its mapped bytes are more than a quarter of the GPU's free memory: it goes.
    pub fn set_aside(&self) -> bool {
        let mapped: u64 = self.mappings.iter().map(|&(_, len)| len as u64).sum();
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: the session's context is current on this thread; the call writes both.
        let ok =
            unsafe { sys::cuMemGetInfo_v2(&mut free, &mut total) } == sys::CUresult::CUDA_SUCCESS;
        if !ok || mapped.saturating_mul(4) > free as u64 {
            return false;
        }
        self.forget_outputs();
        self.dirty.set(true);
        true
    }

    /// Poisons nothing from now on.
    pub fn forget_outputs(&self) {
        for p in self.poison.borrow_mut().drain(..) {
            // SAFETY: the image was allocated by `set_outputs` and is used nowhere else.
            unsafe { sys::cuMemFree_v2(p.image) };
        }
    }

    /// One learning run: everything as recorded but region `r`, filled with `pattern`. Region
    /// `r`'s bytes afterwards, or None where the run changed another region than the
    /// recording says (the code read the pattern: `r` is an input).
    fn run_filled(
        &self,
        l: &Loaded,
        r: usize,
        pattern: u8,
    ) -> Result<Option<Vec<u8>>, ReplayError> {
        self.restore_for_run(l)?;
        let dst = self.device_addr(l, r).expect("checked by the caller");
        let size = self.prologue.regions[r].size as usize;
        // SAFETY: the region is mapped with `size` bytes.
        unsafe {
            ck(
                sys::cuMemsetD8Async(dst, pattern, size, self.stream),
                "filling an output",
            )?;
        }
        self.launch_once(l, None)?;
        // SAFETY: synchronizing the session's stream.
        unsafe { ck(sys::cuStreamSynchronize(self.stream), "running the kernel")? };
        let mut observed = self.read_back(l)?;
        let bytes = match std::mem::replace(&mut observed.regions[r].data, RegionData::Unchanged) {
            RegionData::Full(b) => b,
            _ => full(&self.expected.regions[r].data)
                .expect("allocations are complete")
                .to_vec(),
        };
        let others = validate::compare_by_region(
            &self.expected,
            &observed,
            &self.written,
            &self.unordered.borrow(),
            |i| self.learned_tolerance(i),
        );
        // What the next run must restore: everything where another region changed, or where
        // `r` is one the cheap restore does not cover.
        self.dirty
            .set(others.is_err() || !self.written.contains(&r));
        Ok(others.is_ok().then_some(bytes))
    }

    /// Runs `l` once from `inputs` (complete regions in the recording's order) instead of the
    /// recorded prologue, and reads every region back in full; with the guards' verdict. The
    /// next check restores everything.
    pub fn run_on(
        &self,
        l: &Loaded,
        inputs: &Snapshot,
        block_x: Option<u32>,
    ) -> Result<(Snapshot, Result<(), String>), ReplayError> {
        self.dirty.set(true);
        self.upload(l, inputs, None)?;
        self.fill_guards()?;
        self.launch_once(l, block_x)?;
        // SAFETY: synchronizing the session's stream.
        unsafe { ck(sys::cuStreamSynchronize(self.stream), "running the kernel")? };
        let mut out = inputs.clone();
        for (i, r) in out.regions.iter_mut().enumerate() {
            let Some(src) = self.device_addr(l, i) else {
                continue; // a variable this module does not have: not reached
            };
            let mut bytes = vec![0u8; r.size as usize];
            // SAFETY: reading a mapped region of `r.size` bytes.
            unsafe {
                ck(
                    sys::cuMemcpyDtoH_v2(bytes.as_mut_ptr() as *mut _, src, bytes.len()),
                    "reading results",
                )?;
            }
            r.data = RegionData::Full(bytes);
        }
        let guards = self.check_guards()?;
        Ok((out, guards))
    }

    /// Region `i`'s learned tolerance, where the baseline's runs differ there.
    fn learned_tolerance(&self, i: usize) -> Option<validate::Held> {
        self.learned
            .borrow()
            .iter()
            .find(|l| l.region == i)
            .map(|l| l.held())
    }

    /// One run of `l` from the recorded inputs, as read back (the regions equal to the
    /// recording left out), with no verdict: a sample of what the code does.
    pub fn observe(&self, l: &Loaded) -> Result<Snapshot, ReplayError> {
        let (observed, _, _) = self.run_and_compare(l, None, None)?;
        self.dirty.set(true);
        Ok(observed)
    }

    /// Learns a tolerance per region from `runs` of the baseline (`observe`) and the
    /// recording, and holds every later check to them (`determinism::learn`); Err(why) where
    /// none can be learned, and then nothing changes.
    pub fn learn_tolerances(
        &self,
        runs: &[Snapshot],
        hint: Option<validate::Dtype>,
        clock: bool,
    ) -> Result<Vec<(String, super::determinism::Learned)>, String> {
        let learned = super::determinism::learn(&self.expected, runs, &self.written, hint, clock)?;
        *self.learned.borrow_mut() = learned.clone();
        Ok(learned
            .into_iter()
            .map(|l| (self.region_name(l.region), l))
            .collect())
    }

    /// The recorded launch.
    pub fn launch(&self) -> &LaunchRecord {
        &self.launch
    }

    /// The recorded inputs (every region complete).
    pub fn prologue(&self) -> &Snapshot {
        &self.prologue
    }

    /// The regions compared in any order of their elements (`check_baseline`).
    pub fn unordered(&self) -> Vec<Unordered> {
        self.unordered.borrow().clone()
    }

    /// The allocations this launch appends to with atomics, as its code `appends` to its
    /// parameters (`validate::appended`).
    pub fn appended(&self, appends: &[crate::ptx::appends::Append]) -> Vec<Unordered> {
        match self.launch.values() {
            Some(values) => {
                validate::appended(appends, &values, &self.prologue.regions, &self.written)
            }
            None => Vec::new(),
        }
    }

    /// Device copies of what a checked run left in the allocations the launch writes (the
    /// recording's own bytes where the run left exactly those), and a result word for each.
    pub fn reference(&self, checked: &Output) -> Result<Reference, ReplayError> {
        let mut regions = Vec::new();
        let mut owned = Vec::new();
        let unordered = self.unordered.borrow();
        for &i in &self.written {
            let Some(expected) = self.expected_dev[i] else {
                continue; // a variable: small, at a per-module address; not compared
            };
            // Its order is the threads' in every code: its elements were checked, in any order.
            if unordered.iter().any(|u| u.region == i) {
                continue;
            }
            let at = match &checked.0.regions[i].data {
                RegionData::Full(bytes) => {
                    // SAFETY: allocating and filling a buffer of the region's size.
                    let d = unsafe { golden_copies(&checked.0, &[i])?[0] };
                    debug_assert_eq!(bytes.len() as u64, self.prologue.regions[i].size);
                    owned.push(d);
                    d
                }
                _ => expected,
            };
            regions.push((i, at));
        }
        let mut flags = 0u64;
        // SAFETY: one u64 per region, set to "no difference" (all ones).
        unsafe {
            ck(
                sys::cuMemAlloc_v2(&mut flags, 8 * regions.len().max(1)),
                "allocating the determinism check",
            )?;
            ck(
                sys::cuMemsetD32_v2(flags, u32::MAX, 2 * regions.len().max(1)),
                "allocating the determinism check",
            )?;
        }
        Ok(Reference {
            regions,
            owned,
            flags,
            compared: std::cell::Cell::new(0),
        })
    }

    /// Compares what the last run of `l` left with its reference, on the device, without
    /// waiting: a difference is only read in [`Session::differences`].
    fn compare_with(&self, l: &Loaded, r: &Reference) -> Result<(), ReplayError> {
        for (k, &(i, at)) in r.regions.iter().enumerate() {
            let Some(now) = self.device_addr(l, i) else {
                continue;
            };
            // (A tail of under four bytes is left out: allocations are whole words in practice.)
            let words = self.prologue.regions[i].size / 4;
            self.compare
                .launch(now, at, words, r.flags + 8 * k as u64, self.stream)?;
        }
        r.compared.set(r.compared.get() + 1);
        Ok(())
    }

    /// Where the compared runs first differed from the checked run (None: never); frees `r`.
    pub fn differences(&self, r: Reference) -> Result<Option<String>, ReplayError> {
        let mut first = vec![u64::MAX; r.regions.len()];
        // SAFETY: reading the result words, then freeing what `reference` allocated.
        unsafe {
            ck(sys::cuStreamSynchronize(self.stream), "comparing runs")?;
            if !first.is_empty() {
                ck(
                    sys::cuMemcpyDtoH_v2(first.as_mut_ptr() as *mut _, r.flags, 8 * first.len()),
                    "comparing runs",
                )?;
            }
            for d in r.owned.iter().chain([&r.flags]) {
                sys::cuMemFree_v2(*d);
            }
        }
        Ok(first
            .iter()
            .zip(&r.regions)
            .find(|(w, _)| **w != u64::MAX)
            .map(|(w, (i, _))| {
                format!(
                    "allocation {:#x} differs from the checked run at byte {} in one of {} runs compared",
                    self.prologue.regions[*i].addr,
                    w * 4,
                    r.compared.get()
                )
            }))
    }

    fn fill_guards(&self) -> Result<(), ReplayError> {
        for g in &self.guards {
            // SAFETY: the guard lies inside the allocation's mapped granules.
            unsafe {
                ck(
                    sys::cuMemsetD8Async(g.addr, GUARD_BYTE, g.len as usize, self.stream),
                    "filling the guard bytes past allocations",
                )?;
            }
        }
        Ok(())
    }

    /// Ok(Err(why)) when the launch wrote past the end of an allocation.
    fn check_guards(&self) -> Result<Result<(), String>, ReplayError> {
        for g in &self.guards {
            let mut bytes = vec![0u8; g.len as usize];
            // SAFETY: reading the guard's mapped bytes.
            unsafe {
                ck(
                    sys::cuMemcpyDtoH_v2(bytes.as_mut_ptr() as *mut _, g.addr, bytes.len()),
                    "reading the guard bytes past allocations",
                )?;
            }
            if let Some(at) = bytes.iter().position(|&b| b != GUARD_BYTE) {
                let r = &self.prologue.regions[g.region];
                return Ok(Err(format!(
                    "wrote past the end of allocation {:#x} ({} bytes{}): {} bytes after its end",
                    r.addr,
                    r.size,
                    [", ", &r.name].concat().trim_end_matches(", "),
                    at
                )));
            }
        }
        Ok(Ok(()))
    }

    /// Times the loaded candidates interleaved (A B A B …), each run on restored inputs and,
    /// in the cold regime, a flushed L2 (warm: what the previous run left), until
    /// [`stopping::enough`] (the medians known within 1%, 2% in a long kernel's race, or the
    /// ratio to the first decided; fewer samples for long kernels) or `max_reps`.
    ///
    /// With `refs` (one per loaded code), runs are also compared with their code's checked run
    /// where [`determinism::compare_after`] allows; [`Session::differences`] tells the result.
    /// With `until.race` (the search's best ratio to the baseline) a candidate timed against
    /// the baseline alone stops as soon as it is clearly slower than that
    /// ([`stopping::beaten`]), its stats marked `raced`; with `until.line`, as soon as a long
    /// kernel's ratio is known to lie on one side of it ([`stopping::sided`]).
    pub fn time(
        &self,
        ls: &[(&Loaded, Option<u32>)],
        refs: &[&Reference],
        until: stopping::Until,
        l2: Regime,
    ) -> Result<Vec<TimeStats>, ReplayError> {
        self.time_on(ls, refs, until, l2, None)
    }

    /// [`Session::time`] on the screen's prefix of the launch (`screen::Cut`; each code's
    /// module reads the full grid's extent, `ptx::grid`), with no comparison: the candidate is
    /// not checked yet. With `drop_above`, the candidate (the last code) stops as soon as its
    /// ratio to the baseline (the first) is clearly above it, its stats marked `raced`.
    ///
    /// Unchecked code may write anywhere in its allocations: every input is restored first
    /// where the last code left them in doubt, and they are in doubt after. Each module's
    /// variables start from the recording's values, not its initializers.
    pub fn time_screened(
        &self,
        ls: &[(&Loaded, Option<u32>)],
        cut: crate::screen::Cut,
        max_reps: u32,
        l2: Regime,
        drop_above: Option<f64>,
    ) -> Result<Vec<TimeStats>, ReplayError> {
        if self.dirty.get() {
            self.restore(ls[0].0, None)?;
            self.fill_guards()?;
        }
        for (l, _) in ls {
            let vars: Vec<usize> = l.vars.iter().map(|(i, _)| *i).collect();
            self.restore(l, Some(&vars))?;
        }
        self.dirty.set(true);
        let until = stopping::Until::reps(max_reps).racing(drop_above);
        self.time_on(ls, &[], until, l2, Some(cut))
    }

    fn time_on(
        &self,
        ls: &[(&Loaded, Option<u32>)],
        refs: &[&Reference],
        until: stopping::Until,
        l2: Regime,
        cut: Option<crate::screen::Cut>,
    ) -> Result<Vec<TimeStats>, ReplayError> {
        let stopping::Until {
            max_reps,
            race,
            line,
            ..
        } = until;
        let compare = |i: usize, next_is_sample: bool| -> Result<(), ReplayError> {
            match refs.get(i) {
                Some(r) if determinism::compare_after(l2, next_is_sample) => {
                    self.compare_with(ls[i].0, r)
                }
                _ => Ok(()),
            }
        };
        let last = ls.len() - 1;
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); ls.len()];
        let mut rounds = 3;
        let mut warm = 0;
        while warm < rounds {
            for (i, (l, bx)) in ls.iter().enumerate() {
                let us = self
                    .timed_run(l, *bx, l2, cut)
                    .map_err(|e| annotate(e, warm))?;
                if warm == 0 && i == 0 {
                    rounds = stopping::warmups(us);
                }
                compare(i, warm + 1 == rounds && i == last)?;
            }
            warm += 1;
        }
        for rep in 0..max_reps {
            for (i, (l, bx)) in ls.iter().enumerate() {
                samples[i].push(self.timed_run(l, *bx, l2, cut)?);
                if i < last {
                    compare(i, true)?;
                }
            }
            let beaten = match (race, &samples[..]) {
                (Some(best), [base, cand]) => stopping::beaten(base, cand, best),
                _ => false,
            };
            let sided = match (line, &samples[..]) {
                (Some(line), [base, cand]) => stopping::sided(base, cand, line),
                _ => false,
            };
            let done = rep + 1 == max_reps
                || beaten
                || sided
                || stopping::enough(&samples, race.is_some());
            compare(last, !done)?;
            if done {
                let mut stats: Vec<TimeStats> = samples.iter().map(|s| TimeStats::of(s)).collect();
                if beaten {
                    stats[last].raced = true;
                }
                return Ok(stats);
            }
        }
        Ok(samples.iter().map(|s| TimeStats::of(s)).collect())
    }

    fn timed_run(
        &self,
        l: &Loaded,
        block_x: Option<u32>,
        l2: Regime,
        cut: Option<crate::screen::Cut>,
    ) -> Result<f64, ReplayError> {
        // Warm, the outputs keep the last run's results, as in the program: copying them back
        // would bring a pristine image and the output through L2 before the run. Cold, L2 is
        // flushed after the copy, and each run starts from the prologue's bytes, so that the
        // runs compared for determinism show any output a run left unwritten.
        self.restore_written(l, l2 == Regime::Warm)?;
        // SAFETY: events and memset on the session's stream; results checked.
        unsafe {
            if l2 == Regime::Cold {
                ck(
                    sys::cuMemsetD8Async(self.scratch, 0x5a, self.scratch_bytes, self.stream),
                    "flushing L2",
                )?;
            }
        }
        self.timed_launch(|| self.launch_cut(l, block_x, cut))
    }

    /// Runs `launch` on the session's stream between two events, waits for it, and returns
    /// the time between them (µs).
    fn timed_launch(
        &self,
        launch: impl FnOnce() -> Result<(), ReplayError>,
    ) -> Result<f64, ReplayError> {
        // SAFETY: events on the session's stream, destroyed on every path; results checked.
        unsafe {
            let (mut a, mut b) = (std::ptr::null_mut(), std::ptr::null_mut());
            ck(sys::cuEventCreate(&mut a, 0), "cuEventCreate")?;
            if let Err(e) = ck(sys::cuEventCreate(&mut b, 0), "cuEventCreate") {
                sys::cuEventDestroy_v2(a);
                return Err(e);
            }
            let timed = (|| {
                ck(sys::cuEventRecord(a, self.stream), "cuEventRecord")?;
                launch()?;
                ck(sys::cuEventRecord(b, self.stream), "cuEventRecord")?;
                ck(sys::cuEventSynchronize(b), "running the kernel")?;
                let mut ms = 0f32;
                ck(
                    sys::cuEventElapsedTime_v2(&mut ms, a, b),
                    "cuEventElapsedTime",
                )?;
                Ok(ms as f64 * 1e3)
            })();
            sys::cuEventDestroy_v2(a);
            sys::cuEventDestroy_v2(b);
            timed
        }
    }

    /// Copies the prologue's bytes back into `only` (all regions when None).
    fn restore(&self, l: &Loaded, only: Option<&[usize]>) -> Result<(), ReplayError> {
        self.upload(l, &self.prologue, only)
    }

    /// Copies `from`'s bytes (a snapshot of the recording's regions) into `only` (all when None).
    fn upload(
        &self,
        l: &Loaded,
        from: &Snapshot,
        only: Option<&[usize]>,
    ) -> Result<(), ReplayError> {
        let all: Vec<usize> = (0..from.regions.len()).collect();
        for &i in only.unwrap_or(&all) {
            let r = &from.regions[i];
            let RegionData::Full(bytes) = &r.data else {
                continue;
            };
            let Some(dst) = self.device_addr(l, i) else {
                continue;
            };
            // SAFETY: `dst` is a mapped region of at least `bytes.len()` bytes.
            unsafe {
                ck(
                    sys::cuMemcpyHtoDAsync_v2(
                        dst,
                        bytes.as_ptr() as *const _,
                        bytes.len(),
                        self.stream,
                    ),
                    "restoring inputs",
                )?;
            }
        }
        Ok(())
    }

    /// Copies the prologue's bytes back into the written regions; with `keep_outputs`, not into
    /// their learned output bytes (`outputs::kept_between_runs`), which every run overwrites.
    fn restore_written(&self, l: &Loaded, keep_outputs: bool) -> Result<(), ReplayError> {
        let poison = self.poison.borrow();
        for (&i, &src) in self.written.iter().zip(&self.golden) {
            let Some(dst) = self.device_addr(l, i) else {
                continue;
            };
            let size = self.prologue.regions[i].size as usize;
            let mask = poison
                .iter()
                .find(|p| keep_outputs && p.region == i)
                .map(|p| &p.mask[..]);
            for r in outputs::kept_between_runs(size, mask.unwrap_or_default()) {
                // SAFETY: both buffers hold the region's size, and `r` lies within it.
                unsafe {
                    ck(
                        sys::cuMemcpyDtoDAsync_v2(
                            dst + r.start as u64,
                            src + r.start as u64,
                            r.len(),
                            self.stream,
                        ),
                        "restoring inputs",
                    )?;
                }
            }
        }
        Ok(())
    }

    fn device_addr(&self, l: &Loaded, region: usize) -> Option<u64> {
        let r = &self.prologue.regions[region];
        match r.kind {
            RegionKind::Allocation => Some(r.addr),
            RegionKind::Variable => l.vars.iter().find(|(i, _)| *i == region).map(|(_, a)| *a),
        }
    }

    fn launch_once(&self, l: &Loaded, block_x: Option<u32>) -> Result<(), ReplayError> {
        self.launch_cut(l, block_x, None)
    }

    /// The recorded launch, or with `cut` its screen's prefix.
    fn launch_cut(
        &self,
        l: &Loaded,
        block_x: Option<u32>,
        cut: Option<crate::screen::Cut>,
    ) -> Result<(), ReplayError> {
        let rec = &self.launch;
        let (grid, block) = shape(rec.grid, rec.block, block_x);
        let grid = cut.map_or(grid, |c| c.grid(grid));
        let mut params: Vec<*mut std::ffi::c_void> = rec
            .params
            .iter()
            .map(|p| self.args[p.offset as usize..].as_ptr() as *mut std::ffi::c_void)
            .collect();
        // SAFETY: each parameter pointer addresses the recorded bytes of that parameter.
        unsafe {
            ck(
                sys::cuLaunchKernel(
                    l.func,
                    grid[0],
                    grid[1],
                    grid[2],
                    block[0],
                    block[1],
                    block[2],
                    rec.shared_bytes as u32,
                    self.stream,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                ),
                "launching the kernel",
            )
        }
    }

    /// Every region the candidate can reach, read back; the others are left `Unchanged`, and so
    /// are allocations the device finds equal to the expected bytes (the comparison is exact,
    /// so nothing is lost: equal bytes pass any check).
    fn read_back(&self, l: &Loaded) -> Result<Snapshot, ReplayError> {
        let mut out = Snapshot {
            regions: self
                .prologue
                .regions
                .iter()
                .map(|r| Region {
                    data: RegionData::Unchanged,
                    name: r.name.clone(),
                    ..*r
                })
                .collect(),
        };
        for (i, r) in out.regions.iter_mut().enumerate() {
            let Some(src) = self.device_addr(l, i) else {
                continue;
            };
            if let Some(want) = self.expected_dev[i] {
                if self.compare.equal(src, want, r.size, self.stream)? {
                    continue;
                }
            }
            let mut bytes = vec![0u8; r.size as usize];
            // SAFETY: reading a mapped region of `r.size` bytes.
            unsafe {
                ck(
                    sys::cuMemcpyDtoH_v2(bytes.as_mut_ptr() as *mut _, src, bytes.len()),
                    "reading results",
                )?;
            }
            r.data = RegionData::Full(bytes);
        }
        Ok(out)
    }
}

fn annotate(e: ReplayError, warm: u32) -> ReplayError {
    match e {
        ReplayError::Cuda { during, code } => ReplayError::Cuda {
            during: format!("{during} (warm-up {warm})"),
            code,
        },
        e => e,
    }
}

/// The launch shape for a block size override: total threads in x are kept.
pub fn shape(grid: [u32; 3], block: [u32; 3], block_x: Option<u32>) -> ([u32; 3], [u32; 3]) {
    match block_x {
        Some(bx) if bx > 0 => {
            let total = grid[0] as u64 * block[0] as u64;
            (
                [total.div_ceil(bx as u64) as u32, grid[1], grid[2]],
                [bx, block[1], block[2]],
            )
        }
        _ => (grid, block),
    }
}

/// The comparison kernel (src/replay/compare.ptx) and its result word.
struct Compare {
    module: sys::CUmodule,
    func: sys::CUfunction,
    first: u64,
}

const COMPARE_PTX: &str = include_str!("compare.ptx");

impl Compare {
    fn load() -> Result<Compare, ReplayError> {
        let text = CString::new(COMPARE_PTX).expect("no NUL in the PTX");
        // SAFETY: loading our own PTX; handles checked.
        unsafe {
            let mut module = std::ptr::null_mut();
            ck(
                sys::cuModuleLoadData(&mut module, text.as_ptr() as *const _),
                "loading the comparison kernel",
            )?;
            let mut func = std::ptr::null_mut();
            ck(
                sys::cuModuleGetFunction(&mut func, module, c"r3_first_difference".as_ptr()),
                "finding the comparison kernel",
            )?;
            let mut first = 0;
            ck(
                sys::cuMemAlloc_v2(&mut first, 8),
                "allocating the comparison result",
            )?;
            Ok(Compare {
                module,
                func,
                first,
            })
        }
    }

    /// Queues a comparison of `words` 32-bit words at `a` and `b` that lowers the u64 at `first`
    /// to the index of the first word that differs (left as it is where none does).
    fn launch(
        &self,
        a: u64,
        b: u64,
        words: u64,
        first: u64,
        stream: sys::CUstream,
    ) -> Result<(), ReplayError> {
        if words == 0 {
            return Ok(());
        }
        let (mut pa, mut pb, mut pn, mut pf) = (a, b, words, first);
        let mut params = [
            &mut pa as *mut u64 as *mut std::ffi::c_void,
            &mut pb as *mut u64 as *mut _,
            &mut pn as *mut u64 as *mut _,
            &mut pf as *mut u64 as *mut _,
        ];
        let blocks = words.div_ceil(256).min(65_535 * 8) as u32;
        // SAFETY: a and b address at least `words` words, `first` a u64; the parameters match
        // the kernel's.
        unsafe {
            ck(
                sys::cuLaunchKernel(
                    self.func,
                    blocks,
                    1,
                    1,
                    256,
                    1,
                    1,
                    0,
                    stream,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                ),
                "comparing results",
            )
        }
    }

    /// Whether `size` bytes at `a` and `b` are equal (whole words on the device, the tail on the host).
    fn equal(&self, a: u64, b: u64, size: u64, stream: sys::CUstream) -> Result<bool, ReplayError> {
        let words = size / 4;
        // SAFETY: a and b address at least `size` bytes.
        unsafe {
            if words > 0 {
                ck(
                    sys::cuMemsetD32Async(self.first, u32::MAX, 2, stream),
                    "comparing results",
                )?;
                self.launch(a, b, words, self.first, stream)?;
                let mut first = 0u64;
                ck(sys::cuStreamSynchronize(stream), "comparing results")?;
                ck(
                    sys::cuMemcpyDtoH_v2(&mut first as *mut u64 as *mut _, self.first, 8),
                    "comparing results",
                )?;
                if first != u64::MAX {
                    return Ok(false);
                }
            }
            let tail = (size - words * 4) as usize;
            if tail == 0 {
                return Ok(true);
            }
            let (mut x, mut y) = ([0u8; 4], [0u8; 4]);
            ck(
                sys::cuMemcpyDtoH_v2(x.as_mut_ptr() as *mut _, a + words * 4, tail),
                "comparing results",
            )?;
            ck(
                sys::cuMemcpyDtoH_v2(y.as_mut_ptr() as *mut _, b + words * 4, tail),
                "comparing results",
            )?;
            Ok(x == y)
        }
    }
}

/// A region's bytes where its data is complete.
fn full(d: &RegionData) -> Option<&[u8]> {
    match d {
        RegionData::Full(b) => Some(b),
        _ => None,
    }
}

/// Device copies of the bytes of the regions in `which`.
unsafe fn golden_copies(prologue: &Snapshot, which: &[usize]) -> Result<Vec<u64>, ReplayError> {
    let mut out = Vec::with_capacity(which.len());
    for &i in which {
        let RegionData::Full(bytes) = &prologue.regions[i].data else {
            return Err(ReplayError::Other(format!(
                "prologue region {i} is not complete"
            )));
        };
        let mut d = 0u64;
        ck(
            sys::cuMemAlloc_v2(&mut d, bytes.len().max(1)),
            "allocating a copy of the inputs",
        )?;
        ck(
            sys::cuMemcpyHtoD_v2(d, bytes.as_ptr() as *const _, bytes.len()),
            "copying the inputs",
        )?;
        out.push(d);
    }
    Ok(out)
}

/// Maps every allocation of the recording at its recorded address; returns the guards, the
/// start of each one's slack (the mapped bytes past its end), and the mappings (address,
/// bytes). Each allocation's handle is released once mapped: its memory lives until unmapped.
unsafe fn map_range(
    rec: &LaunchRecord,
    prologue: &Snapshot,
    dev: i32,
) -> Result<(Vec<Guard>, Vec<Mapping>), ReplayError> {
    let mut prop: sys::CUmemAllocationProp = std::mem::zeroed();
    prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    let mut gran = 0usize;
    ck(
        sys::cuMemGetAllocationGranularity(
            &mut gran,
            &prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
        ),
        "reading the allocation granularity",
    )?;
    let mut got = 0u64;
    ck(
        sys::cuMemAddressReserve(&mut got, rec.va_size as usize, 0, rec.va_base, 0),
        "reserving the recorded address range",
    )?;
    if got != rec.va_base {
        sys::cuMemAddressFree(got, rec.va_size as usize);
        return Err(ReplayError::Range {
            base: rec.va_base,
            size: rec.va_size,
            got,
        });
    }
    let mut access: sys::CUmemAccessDesc = std::mem::zeroed();
    access.location = prop.location;
    access.flags = sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    let mut guards = Vec::new();
    let mut mappings = Vec::new();
    for (i, r) in prologue
        .regions
        .iter()
        .enumerate()
        .filter(|(_, r)| r.kind == RegionKind::Allocation)
    {
        let mapped = (r.size as usize).div_ceil(gran).max(1) * gran;
        guards.extend(guard_of(i, r, mapped as u64));
        let mut handle = 0;
        ck(
            sys::cuMemCreate(&mut handle, mapped, &prop, 0),
            "creating device memory",
        )?;
        ck(
            sys::cuMemMap(r.addr, mapped, 0, handle, 0),
            &format!("mapping {:#x}", r.addr),
        )?;
        sys::cuMemRelease(handle);
        mappings.push((r.addr, mapped));
        ck(
            sys::cuMemSetAccess(r.addr, mapped, &access, 1),
            "setting access",
        )?;
    }
    Ok((guards, mappings))
}

/// The checked slack of allocation `i`, `mapped` bytes in all; none where it fills its granules.
fn guard_of(i: usize, r: &Region, mapped: u64) -> Option<Guard> {
    let len = mapped.saturating_sub(r.size).min(GUARD_MAX);
    (len > 0).then_some(Guard {
        region: i,
        addr: r.addr + r.size,
        len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_of_more_than_48_kib_of_dynamic_shared_memory_opts_in_to_it() {
        assert_eq!(dynamic_shared_opt_in(0), None);
        assert_eq!(dynamic_shared_opt_in(48 << 10), None);
        assert_eq!(dynamic_shared_opt_in(72 << 10), Some(72 << 10));
        assert_eq!(dynamic_shared_opt_in(u64::MAX), Some(i32::MAX));
    }

    #[test]
    fn guards_cover_the_slack_after_each_allocation_up_to_a_cap() {
        let r = |size| Region {
            kind: RegionKind::Allocation,
            addr: 0x7000_0000_0000,
            size,
            name: "a".into(),
            page_size: 4096,
            data: RegionData::Unchanged,
        };
        let g = guard_of(3, &r(4000), 2 << 20).unwrap();
        assert_eq!(
            (g.region, g.addr, g.len),
            (3, 0x7000_0000_0000 + 4000, GUARD_MAX)
        );
        let g = guard_of(0, &r((2 << 20) - 6), 2 << 20).unwrap();
        assert_eq!(g.len, 6, "a write of one float past the end is inside it");
        assert!(guard_of(0, &r(2 << 20), 2 << 20).is_none());
    }

    #[test]
    fn block_override_keeps_total_threads() {
        assert_eq!(
            shape([4096, 1, 1], [256, 1, 1], Some(128)),
            ([8192, 1, 1], [128, 1, 1])
        );
        assert_eq!(
            shape([10, 2, 1], [100, 1, 1], Some(64)),
            ([16, 2, 1], [64, 1, 1])
        );
        assert_eq!(
            shape([10, 1, 1], [100, 1, 1], None),
            ([10, 1, 1], [100, 1, 1])
        );
    }

    #[test]
    fn stats_and_settling() {
        let t = TimeStats::of(&[3.0, 1.0, 2.0, 4.0, 5.0]);
        assert_eq!((t.median_us, t.min_us, t.samples), (3.0, 1.0, 5));
        assert!((t.spread - 2.0 / 3.0).abs() < 1e-12);
        assert!(stopping::settled(&[10.0; 12], stopping::TIE));
        assert!(!stopping::settled(&[10.0; 9], stopping::TIE));
        assert!(!stopping::settled(
            &[10.0, 20.0, 10.0, 20.0, 10.0, 20.0, 10.0, 20.0, 10.0, 20.0],
            stopping::TIE
        ));
    }
}

#[cfg(test)]
mod compare_tests {
    /// The comparison kernel is hand-written PTX: ptxas (from the CUDA SDK) must accept it.
    #[test]
    fn comparison_kernel_assembles() {
        // The tests always have the SDK (scripts/test sets it up; `.ci/run` says why): without
        // it this fails, rather than passing with nothing checked.
        let cuda = crate::toolchain::find_cuda(None)
            .unwrap_or_else(|e| panic!("the tests need the CUDA SDK: {e}"));
        let ptxas = cuda.path.join("bin/ptxas");
        assert!(ptxas.is_file(), "no ptxas at {}", ptxas.display());
        let info = crate::lower::ptxas_info(&ptxas, super::COMPARE_PTX, "sm_90")
            .expect("ptxas accepts compare.ptx");
        assert!(info.registers > 0 && info.spill_stores == 0);
    }
}
