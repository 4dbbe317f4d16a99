//! Launch recordings: `<store>/records/<kernel_key(fatbin, name)>/<launch id>/` holding
//! `launch.json`, `prologue.r3snap` and `epilogue.r3snap`. They are written by the recording
//! runtime linked into the program (crates/r3-driver/src/runtime/r3rt.c) or, for tests and harnesses, by
//! [`write_snapshot`]; this module defines the format and is the only reader.
//!
//! A snapshot is one zstd frame (with content checksum) holding, little-endian:
//! `"R3SNAP01"`, u32 version (1), u32 region count, then per region: u8 kind (0 allocation,
//! 1 device variable), u8 encoding (0 full bytes, 1 unchanged, 2 changed pages), u16 name
//! length, u32 page size, u64 device address, u64 size, the name, then the data: `size` bytes
//! (full), nothing (unchanged), or u64 page count and per page u64 index + the page's bytes
//! (the last page of a region may be short); and the trailer `"R3END\0\0\0"`.
//! A prologue holds every region in full, except a large allocation of a launch whose whole
//! working set is over the recording limit: that one holds the pages that hold data (encoding
//! 2), every other page being zeros (the runtime read them all), and
//! [`Recording::prologue`] gives it back in full. An epilogue holds what the launch changed.
//! The runtime cuts the stream into frames of 4 MiB, each compressed on its own (decoders
//! read concatenated frames as one stream), and keeps each file's size and [`file_sum`] in
//! launch.json (`files`), which every read checks: a frame lost, repeated or taken from
//! another file passes the frames' own checksums, not the file's sum.

use super::StoreError;
use crate::kernel::KernelHash;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"R3SNAP01";
const TRAILER: &[u8; 8] = b"R3END\0\0\0";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegionKind {
    Allocation,
    Variable,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegionData {
    Full(Vec<u8>),
    Unchanged,
    /// (page index, bytes) of each changed page.
    Pages(Vec<(u64, Vec<u8>)>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub kind: RegionKind,
    /// Device address at record time (allocations are replayed at the same address).
    pub addr: u64,
    pub size: u64,
    /// Symbol name of a device variable; empty for allocations.
    pub name: String,
    pub page_size: u32,
    pub data: RegionData,
}

impl Region {
    /// An allocation at `addr` holding `bytes` in full, in 4 KiB pages: a region made by hand
    /// (tests, tools).
    pub fn allocation(addr: u64, bytes: Vec<u8>) -> Region {
        Region {
            kind: RegionKind::Allocation,
            addr,
            size: bytes.len() as u64,
            name: String::new(),
            page_size: 4096,
            data: RegionData::Full(bytes),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    pub regions: Vec<Region>,
}

/// Regions from this size on are copied page by page where a page holds data, so that their
/// zero pages, allocated zeroed, take no memory (a pool reserved up front and little used).
const LARGE_REGION: usize = 64 << 20;

/// `n` zero bytes, allocated zeroed (untouched pages take no memory), or None where the
/// allocator refuses them: `vec![0; n]` would abort the process instead.
fn zeroed(n: usize) -> Option<Vec<u8>> {
    if n == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(n).ok()?;
    // SAFETY: `layout` is of non-zero size. A non-null result is a fresh allocation of `n`
    // zeroed bytes by the global allocator with that layout, which the Vec owns from here, with
    // length and capacity `n`, as `Vec::from_raw_parts` requires.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout);
        (!p.is_null()).then(|| Vec::from_raw_parts(p, n, n))
    }
}

/// A copy of `bytes` whose zero pages are never written.
fn copy_leaving_zeros(bytes: &[u8], page: usize) -> Vec<u8> {
    let mut out = vec![0u8; bytes.len()];
    for (to, from) in out.chunks_mut(page).zip(bytes.chunks(page)) {
        if from.iter().any(|&b| b != 0) {
            to.copy_from_slice(from);
        }
    }
    out
}

impl Snapshot {
    /// Every region in full: a region held as pages (a prologue's large allocation recorded by
    /// its pages that hold data) becomes its bytes, zeros where no page is held. The zeros are
    /// allocated zeroed, and take no memory until written. A region this machine cannot hold
    /// is an error that says so (its size comes from the file: never an abort).
    pub fn completed(mut self) -> Result<Snapshot, String> {
        for r in &mut self.regions {
            let RegionData::Pages(pages) = &r.data else {
                continue;
            };
            let mut bytes = usize::try_from(r.size)
                .ok()
                .and_then(zeroed)
                .ok_or_else(|| {
                    format!(
                    "its allocation at {:#x} of {} bytes cannot be held in this machine's memory",
                    r.addr, r.size
                )
                })?;
            for (index, page) in pages {
                let at = (*index * r.page_size as u64) as usize;
                bytes[at..at + page.len()].copy_from_slice(page);
            }
            r.data = RegionData::Full(bytes);
        }
        Ok(self)
    }

    /// A copy whose large regions' zero pages are left unwritten (see [`LARGE_REGION`]): a
    /// clone that takes no memory for a reservation's zeros.
    pub fn copy_leaving_zeros(&self) -> Snapshot {
        let regions = self
            .regions
            .iter()
            .map(|r| match &r.data {
                RegionData::Full(b) if b.len() >= LARGE_REGION => Region {
                    data: RegionData::Full(copy_leaving_zeros(b, r.page_size as usize)),
                    name: r.name.clone(),
                    ..*r
                },
                _ => r.clone(),
            })
            .collect();
        Snapshot { regions }
    }
}

/// One kernel parameter's place in the argument buffer, as the driver reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParamSlot {
    pub offset: u64,
    pub size: u64,
}

/// A snapshot file as the runtime wrote it: its name, size and [`file_sum`] (hex).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSum {
    pub name: String,
    pub bytes: u64,
    pub sum: String,
}

/// `launch.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchRecord {
    pub format: u32,
    /// Mangled kernel name.
    pub kernel: String,
    /// Content hash of the fatbinary the kernel was registered from (FNV-1a 64, hex): names
    /// the compile of the translation unit that ran (`Unit::fatbins`). Absent in recordings
    /// made before r3 recorded it, or when the registration path is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fatbin: Option<String>,
    /// The GPU the program ran on (its CUDA device name); absent in older recordings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// The CUDA device the launch ran on, as the program numbered them (its ordinal under the
    /// program's `CUDA_VISIBLE_DEVICES`): a program that uses several GPUs has launches on each.
    /// A recording replays on any GPU (its code is compiled for the GPU that replays it); this
    /// says which one the program's launch, and its `in_app_ms`, ran on. Absent in recordings
    /// made before r3 recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<u32>,
    pub arch: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u64,
    pub params: Vec<ParamSlot>,
    /// The argument buffer (all parameters at their offsets), hex.
    pub args_hex: String,
    /// The fixed device address range all allocations came from.
    pub va_base: u64,
    pub va_size: u64,
    /// The launch's time inside the application (CUDA events): the median of three warm
    /// re-launches on the same inputs (state restored afterwards), or the first launch's time
    /// (see `in_app_from`).
    pub in_app_ms: f64,
    /// The first launch's time, which includes lazy module loading.
    #[serde(default)]
    pub first_launch_ms: f64,
    /// Where `in_app_ms` came from: `warm re-launches`, or `first launch` where re-launching
    /// would have cost too much (absent in older recordings: warm re-launches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_app_from: Option<String>,
    /// What the prologue holds: `reachable` (the allocations the launch's arguments and
    /// recorded regions point into, and every variable) or `full` (every live allocation;
    /// recordings made before r3 chose).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    pub regions: u32,
    /// Live allocations left out of the prologue as unreachable.
    #[serde(default)]
    pub regions_skipped: u32,
    pub bytes_in: u64,
    pub bytes_changed: u64,
    /// Allocations recorded by their pages that hold data, the rest zeros: a launch whose
    /// whole working set is over the limit, as a pool reserved up front and little used. Then
    /// `bytes_reachable` is what the launch reaches, and `bytes_in` the part that holds data.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sparse_regions: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_reachable: Option<u64>,
    /// Bytes of the snapshot files, and the time the program waited for this recording (the
    /// launch itself excluded; the files are written after, while the program runs on).
    #[serde(default)]
    pub bytes_written: u64,
    #[serde(default)]
    pub record_ms: f64,
    /// The snapshot files, each checked against its sum when read (absent in recordings made
    /// before r3 kept them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileSum>,
    pub replayable: bool,
    pub not_replayable: Option<String>,
    pub program: String,
    pub pid: u32,
    pub unix_time: i64,
    /// The `r3 record` run that made it (`R3_RECORD_RUN`), which counts and checks only its
    /// own recordings while other programs record into the store; absent in recordings made
    /// outside `r3 record` or before r3 named runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl LaunchRecord {
    /// The bytes a replay maps and copies in: what the launch reaches, zero pages included.
    pub fn bytes_replayed(&self) -> u64 {
        self.bytes_reachable
            .unwrap_or(self.bytes_in)
            .max(self.bytes_in)
    }

    /// A replayable launch of `kernel` by one block of 32 threads on sm_90, with these
    /// parameter slots and argument bytes, allocations from 0x1000 and nothing measured: a
    /// launch made by hand (tests, tools), to be adjusted field by field.
    pub fn by_hand(kernel: &str, params: Vec<ParamSlot>, args: &[u8]) -> LaunchRecord {
        LaunchRecord {
            format: 1,
            kernel: kernel.into(),
            fatbin: None,
            gpu: None,
            device: None,
            arch: "sm_90".into(),
            grid: [1, 1, 1],
            block: [32, 1, 1],
            shared_bytes: 0,
            params,
            args_hex: args.iter().map(|b| format!("{b:02x}")).collect(),
            va_base: 0x1000,
            va_size: 0x10000,
            in_app_ms: 0.0,
            first_launch_ms: 0.0,
            in_app_from: None,
            snapshot: None,
            regions: 0,
            regions_skipped: 0,
            bytes_in: 0,
            bytes_changed: 0,
            sparse_regions: 0,
            bytes_reachable: None,
            bytes_written: 0,
            record_ms: 0.0,
            files: vec![],
            replayable: true,
            not_replayable: None,
            program: "p".into(),
            pid: 1,
            unix_time: 0,
            run: None,
        }
    }

    /// What a guard checks of this launch: its shape and each parameter's bytes; None when
    /// its argument bytes do not cover its parameter list.
    pub fn values(&self) -> Option<crate::candidate::LaunchValues> {
        let bytes = self.args().ok()?;
        let args = self
            .params
            .iter()
            .map(|p| {
                let start = usize::try_from(p.offset).ok()?;
                let end = start.checked_add(usize::try_from(p.size).ok()?)?;
                bytes.get(start..end).map(<[u8]>::to_vec)
            })
            .collect::<Option<Vec<_>>>()?;
        Some(crate::candidate::LaunchValues {
            grid: self.grid,
            block: self.block,
            args,
        })
    }

    pub fn args(&self) -> Result<Vec<u8>, String> {
        let hex = self.args_hex.as_bytes();
        if !hex.len().is_multiple_of(2) {
            return Err("args_hex: odd number of hex digits".into());
        }
        // Digits only: `from_str_radix` alone would take "+f" as 0x0f.
        if let Some(at) = hex.iter().position(|b| !b.is_ascii_hexdigit()) {
            return Err(format!("args_hex: not a hex digit at {at}"));
        }
        let digit = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
        Ok(hex
            .chunks(2)
            .map(|p| (digit(p[0]) << 4) | digit(p[1]))
            .collect())
    }
}

/// What replaying a recording's -O3 baseline showed (`verify.json` beside launch.json):
/// written by `r3 record` right after the run, and by `r3 tune` when the baseline it would
/// search against does not reproduce the recording. A recording recorded again replaces its
/// directory, and with it this verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verification {
    pub format: u32,
    /// The baseline left exactly what the recording says the launch left.
    pub reproduces: bool,
    /// Why not, in the check's words (the first region and byte that differ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where the baseline's own runs differ (float atomics, a race) and it reproduced the
    /// recording within a tolerance: why, and the tolerance every candidate is held to, in
    /// words (`replay::determinism::Decision`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_deterministic: Option<String>,
    /// The GPU that replayed it (its CUDA device name).
    pub gpu: String,
    pub unix_time: i64,
}

const VERIFICATION: &str = "verify.json";

/// Which stored kernel a recorded launch ran (`kernel.ref.json` beside launch.json): resolved
/// once, by `r3 record` right after the run, while the store holds the compile that ran. A later
/// rebuild replaces the unit and its fatbinaries, after which the launch's fatbinary leads
/// nowhere and its name may fit several kernels; this file still names the one that ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelRef {
    pub format: u32,
    /// The kernel's content hash (`kernels/<hash>/`).
    pub kernel: KernelHash,
}

const KERNEL_REF: &str = "kernel.ref.json";

/// A recording in the store.
#[derive(Debug, Clone)]
pub struct Recording {
    pub dir: PathBuf,
    /// `<kernel dir>/<launch dir>`, unique in the store.
    pub id: String,
    pub launch: LaunchRecord,
    /// Whether its -O3 baseline reproduced it, where that was checked.
    pub verification: Option<Verification>,
    /// The content hash of the stored kernel it ran, where `r3 record` resolved it
    /// (`KernelRef`); `identity::Index::of_recording` falls back to the launch otherwise.
    pub kernel: Option<KernelHash>,
}

/// A kernel's recordings by the time they stand for in the programs' censuses
/// (`Store::recorded_time`), the most first; those no census timed after them, in the order
/// they came. Every reader that takes a kernel's first recording as the one searched orders
/// them so: the search goes to the launch the programs spend their time in, as a recording's
/// name (a hash of its launch) says nothing of that.
pub fn heaviest_first(recs: &mut [Recording], time: &std::collections::HashMap<String, f64>) {
    recs.sort_by(|a, b| {
        let t = |r: &Recording| time.get(&r.id).copied().unwrap_or(-1.0);
        t(b).total_cmp(&t(a))
    });
}

/// How every command words a recording whose baseline does not reproduce it.
pub fn irreproducible_text(reason: &str) -> String {
    format!(
        "baseline does not reproduce its recording ({reason}); re-record the program (`r3 record -- ./your-program`)"
    )
}

impl Recording {
    /// Why the -O3 baseline did not reproduce this recording, where a replay found it did not.
    pub fn irreproducible(&self) -> Option<&str> {
        self.verification
            .as_ref()
            .filter(|v| !v.reproduces)
            .map(|v| v.reason.as_deref().unwrap_or("no reason given"))
    }

    /// Whether a search, a confirmation or a check can use this recording: it can be replayed,
    /// and no replay found that its baseline does not reproduce it.
    pub fn usable(&self) -> bool {
        self.launch.not_replayable.is_none() && self.irreproducible().is_none()
    }

    /// The memory before the launch, every region in full ([`Snapshot::completed`]).
    pub fn prologue(&self) -> Result<Snapshot, StoreError> {
        let name = "prologue.r3snap";
        self.snapshot(name)?
            .completed()
            .map_err(|msg| StoreError::Io {
                path: self.dir.join(name),
                msg,
            })
    }

    /// Whether the launch's memory is here (its launch description may travel alone, e.g. to
    /// propose rewrites on a machine that cannot run it).
    pub fn has_memory(&self) -> bool {
        self.dir.join("prologue.r3snap").is_file()
    }

    pub fn epilogue(&self) -> Result<Snapshot, StoreError> {
        self.snapshot("epilogue.r3snap")
    }

    fn snapshot(&self, name: &str) -> Result<Snapshot, StoreError> {
        let expected = self.launch.files.iter().find(|f| f.name == name);
        read_snapshot_checked(&self.dir.join(name), expected)
    }

    /// The times (ms) of the program's later launches identical to this one, each in the
    /// cache state the program left (`natural.json`); empty when the program made none.
    pub fn natural_ms(&self) -> Result<Vec<f64>, StoreError> {
        #[derive(Deserialize)]
        struct Natural {
            natural_ms: Vec<f64>,
        }
        let path = self.dir.join("natural.json");
        if !path.exists() {
            return Ok(Vec::new());
        }
        let n: Natural = super::read_json(&path)?;
        Ok(n.natural_ms.into_iter().filter(|t| *t > 0.0).collect())
    }
}

/// The directory name of a kernel's recordings, as r3rt.c computes it: FNV-1a 64 of
/// `<fatbin hash>/<mangled name>`, or of the name alone when the fatbinary is unknown, so that
/// same-named kernels of two programs never share a directory.
pub fn kernel_key(fatbin: Option<&str>, name: &str) -> String {
    let key = match fatbin {
        Some(f) => format!("{f}/{name}"),
        None => name.to_owned(),
    };
    format!("{:016x}", fnv1a(key.as_bytes()))
}

/// FNV-1a 64: what the recording runtime can compute without a library, for directory keys
/// and fatbinary hashes.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The content hashes of the fatbinaries in an object file or executable (its `.nv_fatbin`
/// section, where clang and nvcc put them): what the recording runtime computes for the
/// fatbinary it registers. Nothing when the file has no such section or cannot be read.
pub fn fatbin_hashes(file: &Path) -> Vec<String> {
    let Ok(bytes) = std::fs::read(file) else {
        return Vec::new();
    };
    let Ok(obj) = object::File::parse(&*bytes) else {
        return Vec::new();
    };
    use object::{Object, ObjectSection};
    let Some(data) = obj
        .section_by_name(".nv_fatbin")
        .and_then(|s| s.data().ok())
    else {
        return Vec::new();
    };
    split_fatbins(data)
        .into_iter()
        .map(|blob| format!("{:016x}", fnv1a(blob)))
        .collect()
}

/// The fatbinaries laid end to end in a `.nv_fatbin` section (one per translation unit, each
/// 8-byte aligned): magic 0xBA55ED50, u16 version, u16 header size, u64 payload size.
fn split_fatbins(mut data: &[u8]) -> Vec<&[u8]> {
    const MAGIC: u32 = 0xBA55_ED50;
    let mut out = Vec::new();
    while data.len() >= 16 {
        let word = |at: usize, n: usize| {
            data[at..at + n]
                .iter()
                .rev()
                .fold(0u64, |v, &b| (v << 8) | u64::from(b))
        };
        if word(0, 4) != u64::from(MAGIC) {
            // Padding between fatbinaries: skip to the next 8-byte boundary.
            data = &data[8.min(data.len())..];
            continue;
        }
        let len = word(6, 2).saturating_add(word(8, 8));
        let Some(blob) = usize::try_from(len).ok().and_then(|n| data.get(..n)) else {
            break; // truncated: hash nothing rather than a part
        };
        out.push(blob);
        let next = usize::try_from(len.next_multiple_of(8)).unwrap_or(usize::MAX);
        data = data.get(next..).unwrap_or_default();
    }
    out
}

fn corrupt(path: &Path, msg: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        path: path.to_owned(),
        msg: msg.into(),
    }
}

/// r3sum64 of a file's bytes, as the recording runtime computes it while it writes (r3rt.c:
/// `struct filesum`): every 8-byte little-endian word (the last one zero-padded) mixed by
/// murmur3's 64-bit finalizer and folded into an FNV-style product, then the byte count.
pub fn file_sum(bytes: &[u8]) -> u64 {
    fn fmix64(mut k: u64) -> u64 {
        k ^= k >> 33;
        k = k.wrapping_mul(0xff51afd7ed558ccd);
        k ^= k >> 33;
        k = k.wrapping_mul(0xc4ceb9fe1a85ec53);
        k ^ (k >> 33)
    }
    let fold = |h: u64, w: u64| (h ^ fmix64(w)).wrapping_mul(0x100000001b3);
    let mut h = 0xcbf29ce484222325;
    let mut words = bytes.chunks_exact(8);
    for w in words.by_ref() {
        h = fold(h, u64::from_le_bytes(w.try_into().expect("8 bytes")));
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        let mut last = [0u8; 8];
        last[..tail.len()].copy_from_slice(tail);
        h = fold(h, u64::from_le_bytes(last));
    }
    fold(h, bytes.len() as u64)
}

/// Reads and checks a snapshot; a truncated or damaged file is an error naming it.
pub fn read_snapshot(path: &Path) -> Result<Snapshot, StoreError> {
    read_snapshot_checked(path, None)
}

/// Reads a snapshot and checks it against the size and sum launch.json keeps for it, where it
/// keeps them.
pub fn read_snapshot_checked(
    path: &Path,
    expected: Option<&FileSum>,
) -> Result<Snapshot, StoreError> {
    let key = expected.map(|f| super::snapcache::Sum {
        sum: &f.sum,
        bytes: f.bytes,
    });
    if let Some(raw) = super::snapcache::decompressed(key) {
        return decode_snapshot(path, raw.as_slice());
    }
    let file = std::fs::read(path).map_err(|e| StoreError::Io {
        path: path.to_owned(),
        msg: e.to_string(),
    })?;
    if let Some(want) = expected {
        let got = format!("{:016x}", file_sum(&file));
        if file.len() as u64 != want.bytes || got != want.sum {
            return Err(corrupt(
                path,
                format!(
                    "{} bytes with sum {got}, but launch.json says {} bytes with sum {}",
                    file.len(),
                    want.bytes,
                    want.sum
                ),
            ));
        }
    }
    if super::snapcache::wanted(key) {
        let raw = zstd::stream::decode_all(file.as_slice())
            .map_err(|e| corrupt(path, format!("truncated or damaged ({e})")))?;
        let snap = decode_snapshot(path, raw.as_slice())?;
        super::snapcache::keep(key, &raw);
        return Ok(snap);
    }
    let r = zstd::stream::read::Decoder::new(file.as_slice())
        .map_err(|e| corrupt(path, e.to_string()))?;
    decode_snapshot(path, r)
}

/// A snapshot from its decompressed bytes (`path` names it in errors).
fn decode_snapshot(path: &Path, mut r: impl Read) -> Result<Snapshot, StoreError> {
    let bad = |e: std::io::Error| corrupt(path, format!("truncated or damaged ({e})"));
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic).map_err(bad)?;
    if &magic != MAGIC {
        return Err(corrupt(path, "not an r3 snapshot (bad magic)"));
    }
    let version = read_u32(&mut r).map_err(bad)?;
    if version != 1 {
        return Err(corrupt(
            path,
            format!("snapshot version {version}; this r3 reads 1"),
        ));
    }
    let count = read_u32(&mut r).map_err(bad)?;
    let mut regions = Vec::new();
    for _ in 0..count {
        regions.push(read_region(&mut r).map_err(bad)?);
    }
    let mut trailer = [0u8; 8];
    r.read_exact(&mut trailer).map_err(bad)?;
    if &trailer != TRAILER {
        return Err(corrupt(path, "missing end marker"));
    }
    // Reading to the end makes zstd verify the frame checksum.
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).map_err(bad)?;
    if !rest.is_empty() {
        return Err(corrupt(path, "data after the end marker"));
    }
    Ok(Snapshot { regions })
}

fn read_region(r: &mut impl Read) -> std::io::Result<Region> {
    let kind = match read_u8(r)? {
        0 => RegionKind::Allocation,
        1 => RegionKind::Variable,
        k => return Err(invalid(format!("region kind {k}"))),
    };
    let encoding = read_u8(r)?;
    let name_len = read_u16(r)? as u64;
    let page_size = read_u32(r)?;
    let addr = read_u64(r)?;
    let size = read_u64(r)?;
    let name = String::from_utf8_lossy(&read_bytes(r, name_len)?).into_owned();
    if page_size == 0 {
        return Err(invalid("page size 0".into()));
    }
    let data = match encoding {
        0 => RegionData::Full(read_bytes(r, size)?),
        1 => RegionData::Unchanged,
        2 => {
            let pages = read_u64(r)?;
            let total = size.div_ceil(page_size as u64);
            let mut out = Vec::new();
            for _ in 0..pages {
                let index = read_u64(r)?;
                if index >= total {
                    return Err(invalid(format!("page {index} past the region's end")));
                }
                let len = (size - index * page_size as u64).min(page_size as u64);
                out.push((index, read_bytes(r, len)?));
            }
            RegionData::Pages(out)
        }
        e => return Err(invalid(format!("encoding {e}"))),
    };
    Ok(Region {
        kind,
        addr,
        size,
        name,
        page_size,
        data,
    })
}

fn invalid(msg: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg)
}

fn read_bytes(r: &mut impl Read, n: u64) -> std::io::Result<Vec<u8>> {
    // Grows as data arrives, so a damaged length cannot ask for more memory than the file holds.
    let mut v = Vec::new();
    r.take(n).read_to_end(&mut v)?;
    if v.len() as u64 != n {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "region data cut short",
        ));
    }
    Ok(v)
}

fn read_u8(r: &mut impl Read) -> std::io::Result<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}
fn read_u16(r: &mut impl Read) -> std::io::Result<u16> {
    let mut b = [0u8; 2];
    r.read_exact(&mut b)?;
    Ok(u16::from_le_bytes(b))
}
fn read_u32(r: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}
fn read_u64(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Writes a snapshot (temp file + rename). Used by test harnesses that set up a launch without
/// a recorded program; the recording runtime writes the same format.
pub fn write_snapshot(path: &Path, snap: &Snapshot) -> std::io::Result<()> {
    super::write_atomic(path, &compress(&encode(snap))?)
}

/// A snapshot's bytes before compression.
fn encode(snap: &Snapshot) -> Vec<u8> {
    let mut raw = Vec::new();
    raw.extend_from_slice(MAGIC);
    raw.extend_from_slice(&1u32.to_le_bytes());
    raw.extend_from_slice(&(snap.regions.len() as u32).to_le_bytes());
    for reg in &snap.regions {
        let (encoding, body) = match &reg.data {
            RegionData::Full(b) => (0u8, b.clone()),
            RegionData::Unchanged => (1, Vec::new()),
            RegionData::Pages(pages) => {
                let mut body = (pages.len() as u64).to_le_bytes().to_vec();
                for (index, bytes) in pages {
                    body.extend_from_slice(&index.to_le_bytes());
                    body.extend_from_slice(bytes);
                }
                (2, body)
            }
        };
        raw.push(reg.kind as u8);
        raw.push(encoding);
        raw.extend_from_slice(&(reg.name.len() as u16).to_le_bytes());
        raw.extend_from_slice(&reg.page_size.to_le_bytes());
        raw.extend_from_slice(&reg.addr.to_le_bytes());
        raw.extend_from_slice(&reg.size.to_le_bytes());
        raw.extend_from_slice(reg.name.as_bytes());
        raw.extend_from_slice(&body);
    }
    raw.extend_from_slice(TRAILER);
    raw
}

/// One zstd frame with a content checksum.
fn compress(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 3)?;
    enc.include_checksum(true)?;
    enc.write_all(raw)?;
    enc.finish()
}

/// The state after the launch: the prologue with the epilogue's changes applied.
pub fn apply(prologue: &Snapshot, epilogue: &Snapshot) -> Result<Snapshot, String> {
    if prologue.regions.len() != epilogue.regions.len() {
        return Err(format!(
            "prologue has {} regions, epilogue {}",
            prologue.regions.len(),
            epilogue.regions.len()
        ));
    }
    let mut out = prologue.copy_leaving_zeros();
    for (before, after) in out.regions.iter_mut().zip(&epilogue.regions) {
        if (before.addr, before.size, &before.name) != (after.addr, after.size, &after.name) {
            return Err(format!(
                "region at {:#x} differs between prologue and epilogue",
                before.addr
            ));
        }
        let RegionData::Full(bytes) = &mut before.data else {
            return Err(format!(
                "prologue region at {:#x} is not complete",
                before.addr
            ));
        };
        match &after.data {
            RegionData::Unchanged => {}
            RegionData::Full(b) => bytes.clone_from(b),
            RegionData::Pages(pages) => {
                for (index, page) in pages {
                    let at = (*index * after.page_size as u64) as usize;
                    bytes[at..at + page.len()].copy_from_slice(page);
                }
            }
        }
    }
    Ok(out)
}

/// The changed pages between two full snapshots of the same regions: an epilogue.
pub fn diff(before: &Snapshot, after: &Snapshot, page_size: u32) -> Snapshot {
    let regions = before
        .regions
        .iter()
        .zip(&after.regions)
        .map(|(b, a)| {
            let (RegionData::Full(x), RegionData::Full(y)) = (&b.data, &a.data) else {
                return Region {
                    data: RegionData::Unchanged,
                    ..b.clone()
                };
            };
            let pages: Vec<(u64, Vec<u8>)> = x
                .chunks(page_size as usize)
                .zip(y.chunks(page_size as usize))
                .enumerate()
                .filter(|(_, (p, q))| p != q)
                .map(|(i, (_, q))| (i as u64, q.to_vec()))
                .collect();
            let data = if pages.is_empty() {
                RegionData::Unchanged
            } else {
                RegionData::Pages(pages)
            };
            Region {
                page_size,
                data,
                ..b.clone()
            }
        })
        .collect();
    Snapshot { regions }
}

/// How long an unfinished recording (`records/.tmp-<pid>-<id>`) of a process that is gone must
/// have been left before it is removed: a store on a shared filesystem may hold another host's
/// recording in progress under a pid that means nothing here.
pub const STALE_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

impl super::Store {
    /// Removes unfinished recordings left by recorded programs that were killed: directories
    /// `records/.tmp-<pid>-<id>` whose process no longer runs on this host and that nobody has
    /// written for `older_than`. Returns what was removed. A recording only ever appears by
    /// the rename of its finished directory, so nothing here was ever readable.
    pub fn remove_stale_recordings(
        &self,
        older_than: std::time::Duration,
    ) -> Result<Vec<PathBuf>, StoreError> {
        let dir = self.root().join("records");
        let Some(entries) = super::read_dir_if_exists(&dir)? else {
            return Ok(Vec::new());
        };
        let mut removed = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix(".tmp-")
                .and_then(|rest| rest.split('-').next())
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let alive = Path::new("/proc").join(pid.to_string()).exists();
            let idle = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= older_than);
            if !alive && idle && std::fs::remove_dir_all(e.path()).is_ok() {
                removed.push(e.path());
            }
        }
        Ok(removed)
    }

    /// Keeps what a replay of the recording's -O3 baseline showed (`verify.json`, written whole).
    pub fn set_verification(&self, rec: &Recording, v: &Verification) -> Result<(), StoreError> {
        write_beside(rec, VERIFICATION, v)
    }

    /// Keeps which stored kernel a recording ran (`kernel.ref.json`, written whole).
    pub fn set_kernel_ref(&self, rec: &Recording, kernel: &KernelHash) -> Result<(), StoreError> {
        let r = KernelRef {
            format: 1,
            kernel: kernel.clone(),
        };
        write_beside(rec, KERNEL_REF, &r)
    }

    /// Every recording, or those of kernels with one mangled name, oldest first. (A name may
    /// be several kernels: `identity::Index::of_recording` says which one a recording ran.)
    /// A recording that cannot be read costs only itself: it is left out, and said once on
    /// stderr with its fix, as a damaged kernel or search is.
    pub fn recordings(&self, kernel: Option<&str>) -> Result<Vec<Recording>, StoreError> {
        let (recs, damaged) = self.recordings_and_damage(kernel)?;
        for e in &damaged {
            super::warn_left_out(e, "that recording");
        }
        Ok(recs)
    }

    /// [`Store::recordings`], with the error of each recording left out. Err only when the
    /// `records` directory itself cannot be read.
    pub fn recordings_and_damage(
        &self,
        kernel: Option<&str>,
    ) -> Result<(Vec<Recording>, Vec<StoreError>), StoreError> {
        note_listing(self.root());
        let root = self.root().join("records");
        if !root.exists() {
            return Ok((Vec::new(), Vec::new()));
        }
        let mut out = Vec::new();
        let mut damaged = Vec::new();
        for kdir in list_dirs(&root)? {
            let ldirs = match list_dirs(&kdir) {
                Ok(l) => l,
                Err(e) => {
                    damaged.push(e);
                    continue;
                }
            };
            for ldir in ldirs {
                let launch = match read_launch(&ldir) {
                    Ok(l) => l,
                    Err(e) => {
                        damaged.push(e);
                        continue;
                    }
                };
                if kernel.is_some_and(|k| k != launch.kernel) {
                    continue;
                }
                let id = format!(
                    "{}/{}",
                    kdir.file_name().unwrap().to_string_lossy(),
                    ldir.file_name().unwrap().to_string_lossy()
                );
                // A damaged verdict is no verdict: the recording is checked again when used.
                let verification = read_beside(&ldir, VERIFICATION);
                // Likewise a damaged reference: the launch is resolved as an older one is.
                let kernel = read_beside::<KernelRef>(&ldir, KERNEL_REF).map(|r| r.kernel);
                out.push(Recording {
                    dir: ldir,
                    id,
                    launch,
                    verification,
                    kernel,
                });
            }
        }
        out.sort_by(|a, b| (a.launch.unix_time, &a.id).cmp(&(b.launch.unix_time, &b.id)));
        Ok((out, damaged))
    }
}

/// How many times this process has listed the recordings of each store (by its root).
static LISTINGS: std::sync::Mutex<Vec<(PathBuf, u64)>> = std::sync::Mutex::new(Vec::new());

fn note_listing(root: &Path) {
    let mut all = LISTINGS.lock().unwrap_or_else(|e| e.into_inner());
    match all.iter_mut().find(|(r, _)| r == root) {
        Some((_, n)) => *n += 1,
        None => all.push((root.to_owned(), 1)),
    }
}

/// How many times this process has listed the recordings of the store at `root` whole
/// (`Store::recordings`, which every resolution of launches to kernels makes): what the tests
/// of the readers that go over every search hold to a few passes a command, whatever the
/// number of searches. Not for anything but tests.
#[doc(hidden)]
pub fn listings_of(root: &Path) -> u64 {
    let all = LISTINGS.lock().unwrap_or_else(|e| e.into_inner());
    all.iter().find(|(r, _)| r == root).map_or(0, |(_, n)| *n)
}

/// A recording's launch.json. The runtime renames a recording into place whole, so a launch
/// directory without one (or with an empty one) was damaged after: the error says to delete
/// the recording, never to create the file.
fn read_launch(ldir: &Path) -> Result<LaunchRecord, StoreError> {
    let path = ldir.join("launch.json");
    match std::fs::metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(corrupt(&path, "missing")),
        Ok(m) if m.is_dir() => Err(corrupt(&path, "a directory, not a file")),
        _ => super::read_json(&path),
    }
}

/// What r3 wrote beside a recording's launch.json (`verify.json`, `kernel.ref.json`), whole.
fn write_beside<T: Serialize>(rec: &Recording, name: &str, v: &T) -> Result<(), StoreError> {
    let path = rec.dir.join(name);
    super::write_atomic(&path, &super::to_json(v)).map_err(super::io_err(&path))
}

/// Such a file, where it is there and reads; a damaged one counts as absent.
fn read_beside<T: for<'de> Deserialize<'de>>(ldir: &Path, name: &str) -> Option<T> {
    let path = ldir.join(name);
    path.exists()
        .then(|| super::read_json(&path).ok())
        .flatten()
}

fn list_dirs(dir: &Path) -> Result<Vec<PathBuf>, StoreError> {
    let entries = std::fs::read_dir(dir).map_err(|e| StoreError::Io {
        path: dir.to_owned(),
        msg: e.to_string(),
    })?;
    let mut v: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    Ok(v)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Set in the child the test below starts (a process reads `R3_SNAPSHOT_CACHE` once).
    const CHILD: &str = "R3_TEST_SNAPCACHE_SNAPSHOT";

    fn sum_of(path: &Path) -> FileSum {
        let bytes = std::fs::read(path).unwrap();
        FileSum {
            name: "prologue.r3snap".into(),
            bytes: bytes.len() as u64,
            sum: format!("{:016x}", file_sum(&bytes)),
        }
    }

    #[test]
    fn a_snapshot_decompressed_once_in_a_run_is_read_by_its_next_processes() {
        if let Some(path) = std::env::var_os(CHILD) {
            // The child: read the snapshot as a replay worker does, checked by its sum.
            let path = PathBuf::from(path);
            let sum: FileSum =
                serde_json::from_str(&std::env::var("R3_TEST_SNAPCACHE_SUM").unwrap()).unwrap();
            let snap = read_snapshot_checked(&path, Some(&sum)).unwrap();
            assert_eq!(snap.regions[0].size, 4096);
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let cache = tempfile::tempdir().unwrap();
        let path = dir.path().join("prologue.r3snap");
        let snap = Snapshot {
            regions: vec![Region {
                kind: RegionKind::Allocation,
                addr: 0x1000,
                size: 4096,
                name: "a".into(),
                page_size: 4096,
                data: RegionData::Full((0..4096u32).map(|i| (i * 7) as u8).collect()),
            }],
        };
        write_snapshot(&path, &snap).unwrap();
        let sum = sum_of(&path);
        let child = || {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "records::tests::a_snapshot_decompressed_once_in_a_run_is_read_by_its_next_processes", "--test-threads=1"])
                .env(CHILD, &path)
                .env("R3_TEST_SNAPCACHE_SUM", serde_json::to_string(&sum).unwrap())
                .env(crate::snapcache::ENV, cache.path())
                .output()
                .unwrap()
        };
        let first = child();
        assert!(first.status.success(), "{first:?}");
        let kept: Vec<_> = std::fs::read_dir(cache.path()).unwrap().flatten().collect();
        assert_eq!(kept.len(), 1, "the first process keeps it");
        // The compressed file is gone: the next process can only have read the kept bytes.
        std::fs::write(&path, b"damaged").unwrap();
        let second = child();
        assert!(second.status.success(), "{second:?}");
    }

    #[test]
    fn unfinished_recordings_of_gone_processes_are_removed_and_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::Store::create(dir.path()).unwrap();
        let records = dir.path().join("records");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let mine = std::process::id();
        let dead = records.join(format!(".tmp-{gone}-00000000000000ab"));
        let live = records.join(format!(".tmp-{mine}-00000000000000cd"));
        let done = records.join("0123456789abcdef/0000000000000001");
        for d in [&dead, &live, &done] {
            std::fs::create_dir_all(d).unwrap();
        }
        let hour = std::time::Duration::from_secs(3600);
        assert!(
            store.remove_stale_recordings(hour).unwrap().is_empty(),
            "written just now: maybe another host's recording in progress"
        );
        let removed = store
            .remove_stale_recordings(std::time::Duration::ZERO)
            .unwrap();
        assert_eq!(removed, vec![dead.clone()]);
        assert!(!dead.exists() && live.exists() && done.exists());
    }

    #[test]
    fn a_recording_whose_baseline_does_not_reproduce_it_is_kept_but_not_usable() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::Store::create(dir.path()).unwrap();
        let ldir = dir.path().join("records/0123456789abcdef/0000000000000001");
        std::fs::create_dir_all(&ldir).unwrap();
        std::fs::write(ldir.join("launch.json"), LAUNCH).unwrap();
        let rec = store.recordings(None).unwrap().remove(0);
        assert!(
            rec.usable() && rec.verification.is_none(),
            "not checked yet"
        );
        let verdict = Verification {
            format: 1,
            reproduces: false,
            reason: Some("allocation 0x600000400000: differs at byte 6 (exact check)".into()),
            not_deterministic: None,
            gpu: "NVIDIA H100 80GB HBM3".into(),
            unix_time: 1,
        };
        store.set_verification(&rec, &verdict).unwrap();
        let rec = store.recordings(None).unwrap().remove(0);
        assert_eq!(rec.verification.as_ref(), Some(&verdict));
        assert!(!rec.usable());
        let text = irreproducible_text(rec.irreproducible().unwrap());
        assert!(
            text.starts_with("baseline does not reproduce its recording (allocation 0x600000400000: differs at byte 6")
                && text.contains("re-record the program"),
            "{text}"
        );
        std::fs::write(ldir.join(VERIFICATION), "{\"reproduces\": fal").unwrap();
        let rec = store.recordings(None).unwrap().remove(0);
        assert!(
            rec.usable(),
            "a damaged verdict is none: checked again when used"
        );
    }

    /// A garbage, empty or missing launch.json, or an empty launch directory, costs that
    /// recording alone (issue 56): the others are listed, and its error names the file and
    /// says to delete the recording, never to create the file.
    #[test]
    fn a_damaged_recording_costs_only_itself() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::Store::create(dir.path()).unwrap();
        let records = dir.path().join("records");
        let good = records.join("0123456789abcdef/0000000000000001");
        std::fs::create_dir_all(&good).unwrap();
        std::fs::write(good.join("launch.json"), LAUNCH).unwrap();
        let bad = records.join("fedcba9876543210");
        let damage: [(&str, Option<&[u8]>, &str); 4] = [
            ("0000000000000001", Some(b"garbage"), "expected value"),
            ("0000000000000002", Some(b""), "empty"),
            ("0000000000000003", None, "missing"), // the snapshots without their launch
            ("0000000000000004", None, "missing"), // nothing at all
        ];
        for (launch, bytes, _) in &damage {
            let ldir = bad.join(launch);
            std::fs::create_dir_all(&ldir).unwrap();
            match bytes {
                Some(b) => std::fs::write(ldir.join("launch.json"), b).unwrap(),
                None if launch.ends_with('3') => {
                    write_snapshot(&ldir.join("prologue.r3snap"), &sample().0).unwrap()
                }
                None => {}
            }
        }
        let listed = store.recordings(None).unwrap();
        assert_eq!(
            listed.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
            ["0123456789abcdef/0000000000000001"]
        );
        let (recs, damaged) = store.recordings_and_damage(None).unwrap();
        assert_eq!(recs.len(), 1);
        let said: Vec<String> = damaged.iter().map(ToString::to_string).collect();
        assert_eq!(said.len(), damage.len(), "{said:#?}");
        for ((launch, _, what), e) in damage.iter().zip(&said) {
            let ldir = bad.join(launch);
            assert!(
                e.starts_with(&format!(
                    "{}: damaged store file: {what}",
                    ldir.join("launch.json").display()
                )) && e.contains(&format!("fix: delete the recording {}", ldir.display()))
                    && !e.contains("create it"),
                "{e}"
            );
        }
        assert_eq!(store.recordings(Some("k")).unwrap().len(), 1, "by name too");
    }

    fn region(addr: u64, bytes: Vec<u8>) -> Region {
        Region::allocation(addr, bytes)
    }

    fn sample() -> (Snapshot, Snapshot) {
        let before = Snapshot {
            regions: vec![
                region(0x6000_0000_0000, (0..10_000u32).map(|i| i as u8).collect()),
                region(0x6000_0020_0000, vec![7; 100]),
                Region {
                    kind: RegionKind::Variable,
                    name: "counter".into(),
                    ..region(0x7000, vec![0; 4])
                },
            ],
        };
        let mut after = before.clone();
        if let RegionData::Full(b) = &mut after.regions[0].data {
            b[9_999] = 0xee; // last, short page
            b[5] = 0xaa;
        }
        if let RegionData::Full(b) = &mut after.regions[2].data {
            b[0] = 1;
        }
        (before, after)
    }

    #[test]
    fn snapshots_round_trip_and_diffs_apply() {
        let dir = tempfile::tempdir().unwrap();
        let (before, after) = sample();
        let epi = diff(&before, &after, 4096);
        assert!(
            matches!(&epi.regions[0].data, RegionData::Pages(p) if p.iter().map(|(i, _)| *i).collect::<Vec<_>>() == [0, 2])
        );
        assert_eq!(epi.regions[1].data, RegionData::Unchanged);
        write_snapshot(&dir.path().join("p"), &before).unwrap();
        write_snapshot(&dir.path().join("e"), &epi).unwrap();
        let p = read_snapshot(&dir.path().join("p")).unwrap();
        let e = read_snapshot(&dir.path().join("e")).unwrap();
        assert_eq!((p.clone(), e.clone()), (before, epi));
        assert_eq!(apply(&p, &e).unwrap(), after);
    }

    #[test]
    fn truncated_and_damaged_snapshots_are_rejected_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prologue.r3snap");
        write_snapshot(&path, &sample().0).unwrap();
        let good = std::fs::read(&path).unwrap();
        for cut in [0, 9, good.len() / 2, good.len() - 1] {
            std::fs::write(&path, &good[..cut]).unwrap();
            let err = read_snapshot(&path).unwrap_err().to_string();
            assert!(
                err.contains("prologue.r3snap") && err.contains("damaged"),
                "cut {cut}: {err}"
            );
        }
        let mut flipped = good.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0x40;
        std::fs::write(&path, &flipped).unwrap();
        assert!(
            read_snapshot(&path).is_err(),
            "a flipped bit is caught by the checksum"
        );
        std::fs::write(&path, b"plain text").unwrap();
        assert!(read_snapshot(&path).is_err());
    }

    /// A whole snapshot of another recording, or one with a frame missing, decodes cleanly: only
    /// the size and sum launch.json keeps for the file show that it is not the one written.
    #[test]
    fn a_file_that_is_not_the_one_written_is_refused_by_its_sum() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("epilogue.r3snap");
        let (before, after) = sample();
        write_snapshot(&path, &after).unwrap();
        let mine = std::fs::read(&path).unwrap();
        let sum = FileSum {
            name: "epilogue.r3snap".into(),
            bytes: mine.len() as u64,
            sum: format!("{:016x}", file_sum(&mine)),
        };
        assert_eq!(read_snapshot_checked(&path, Some(&sum)).unwrap(), after);
        write_snapshot(&path, &before).unwrap(); // another recording's file, whole
        assert!(read_snapshot(&path).is_ok(), "it decodes");
        let err = read_snapshot_checked(&path, Some(&sum))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("epilogue.r3snap")
                && err.contains("launch.json says")
                && err.contains("fix:"),
            "{err}"
        );
    }

    #[test]
    fn the_file_sum_sees_order_length_and_every_bit() {
        let data: Vec<u8> = (0..100u32).flat_map(|i| (i * 7919).to_le_bytes()).collect();
        let base = file_sum(&data);
        let mut swapped = data.clone();
        let (first, rest) = swapped.split_at_mut(8);
        first.swap_with_slice(&mut rest[..8]);
        assert_ne!(file_sum(&swapped), base, "two words swapped");
        assert_ne!(file_sum(&data[..data.len() - 1]), base, "one byte short");
        assert_ne!(
            file_sum(&[data.as_slice(), &[0]].concat()),
            base,
            "a zero byte more"
        );
        for bit in [0, 7, 63, 64 * 8 - 1, data.len() * 8 - 1] {
            let mut flipped = data.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(file_sum(&flipped), base, "bit {bit}");
        }
        // Two top bits of two words: an unmixed word-wise FNV would let them cancel.
        let mut two = data.clone();
        two[7] ^= 0x80;
        two[15] ^= 0x80;
        assert_ne!(file_sum(&two), base);
    }

    /// A prologue region held by its pages (a pool recorded by its pages that hold data) reads
    /// back in full, zeros elsewhere; a large region's expected state is what a plain copy
    /// would give, whatever its zero and data pages.
    #[test]
    fn a_region_held_by_its_pages_reads_back_in_full_and_applies_as_a_whole_one() {
        let page = 4096usize;
        let size = LARGE_REGION + 3 * page + 100; // a short last page
        let mut whole = vec![0u8; size];
        let data_pages = [0usize, 7, size / page - 1, size / page];
        for &p in &data_pages {
            let end = ((p + 1) * page).min(size);
            for (i, b) in whole[p * page..end].iter_mut().enumerate() {
                *b = (i % 251) as u8 + 1;
            }
        }
        whole[5 * page + 17] = 0; // a zero byte inside no data page changes nothing
        let pages: Vec<(u64, Vec<u8>)> = data_pages
            .iter()
            .map(|&p| {
                (
                    p as u64,
                    whole[p * page..((p + 1) * page).min(size)].to_vec(),
                )
            })
            .collect();
        let mut held = Region::allocation(0x1000, Vec::new());
        held.size = size as u64;
        held.data = RegionData::Pages(pages);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prologue.r3snap");
        write_snapshot(
            &path,
            &Snapshot {
                regions: vec![held],
            },
        )
        .unwrap();
        let pro = read_snapshot(&path).unwrap().completed().unwrap();
        // A size no machine holds (a damaged file's, say) is an error, not an abort.
        let mut huge = Snapshot {
            regions: vec![Region::allocation(0x1000, Vec::new())],
        };
        huge.regions[0].size = u64::MAX / 2;
        huge.regions[0].data = RegionData::Pages(Vec::new());
        let err = huge.completed().unwrap_err();
        assert!(err.contains("cannot be held"), "{err}");
        assert_eq!(pro.regions[0].data, RegionData::Full(whole.clone()));
        // The launch writes one zero page and zeroes a data page.
        let mut after = whole.clone();
        after[3 * page] = 9;
        after[7 * page..8 * page].fill(0);
        let after = Snapshot {
            regions: vec![Region::allocation(0x1000, after)],
        };
        let epi = diff(&pro, &after, 4096);
        assert_eq!(apply(&pro, &epi).unwrap(), after);
        // Where no page changed, the expected state is the prologue, zero pages and all.
        let unchanged = diff(&pro, &pro, 4096);
        assert_eq!(apply(&pro, &unchanged).unwrap(), pro);
    }

    #[test]
    fn mismatched_prologue_and_epilogue_do_not_apply() {
        let (before, after) = sample();
        let mut epi = diff(&before, &after, 4096);
        epi.regions.pop();
        assert!(apply(&before, &epi).is_err());
    }

    #[test]
    fn kernel_key_matches_the_runtime() {
        // FNV-1a 64 of "" is the offset basis; of "a" a known value.
        assert_eq!(kernel_key(None, ""), "cbf29ce484222325");
        assert_eq!(kernel_key(None, "a"), "af63dc4c8601ec8c");
        assert_eq!(
            kernel_key(Some("x"), "a"),
            format!("{:016x}", fnv1a(b"x/a"))
        );
        assert_ne!(kernel_key(Some("x"), "a"), kernel_key(Some("y"), "a"));
    }

    #[test]
    fn fatbinaries_are_split_at_their_headers() {
        let blob = |payload: u8, n: usize| {
            let mut b = vec![0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0];
            b.extend((n as u64).to_le_bytes());
            b.extend(std::iter::repeat_n(payload, n));
            b
        };
        let (a, b) = (blob(1, 8), blob(2, 5));
        let mut section = a.clone();
        section.extend(&b);
        section.extend([0, 0, 0]); // padding to 8
        section.extend(&a);
        let found = split_fatbins(&section);
        assert_eq!(found, [&a[..], &b[..], &a[..]]);
        // A header that claims more than is there yields nothing for it.
        let mut cut = blob(3, 40);
        cut.truncate(30);
        assert!(split_fatbins(&cut).is_empty());
    }

    #[test]
    fn args_decode_from_hex() {
        let rec: LaunchRecord = serde_json::from_str(LAUNCH).unwrap();
        assert_eq!(rec.args().unwrap(), [0, 0, 0, 0x40, 1, 0, 0, 0]);
    }

    #[test]
    fn the_programs_own_launch_times_are_read_where_it_made_any() {
        let dir = tempfile::tempdir().unwrap();
        let mut launch: LaunchRecord = serde_json::from_str(LAUNCH).unwrap();
        assert_eq!(launch.gpu, None, "older recordings name no GPU");
        launch.gpu = Some("NVIDIA H100 80GB HBM3".into());
        let text = serde_json::to_string(&launch).unwrap();
        assert!(text.contains(r#""gpu":"NVIDIA H100 80GB HBM3""#));
        let rec = Recording {
            dir: dir.path().to_owned(),
            id: "k/l".into(),
            launch,
            verification: None,
            kernel: None,
        };
        assert_eq!(rec.natural_ms().unwrap(), Vec::<f64>::new());
        // As r3rt.c writes it; a failed event time (0 or less) is not a time.
        let natural = dir.path().join("natural.json");
        std::fs::write(
            &natural,
            "{\n  \"format\": 1,\n  \"natural_ms\": [0.355000, 0.000000, 0.350000]\n}\n",
        )
        .unwrap();
        assert_eq!(rec.natural_ms().unwrap(), vec![0.355, 0.35]);
        std::fs::write(&natural, "{\"natural_ms\": [0.3").unwrap();
        let err = rec.natural_ms().unwrap_err().to_string();
        assert!(err.contains("natural.json"), "{err}");
    }

    pub(crate) mod props {
        //! Bad input, fuzzed: no byte sequence makes the readers panic, every error names the
        //! file, and what r3 writes reads back unchanged.
        use super::super::*;
        use super::{sample, LAUNCH};
        use proptest::prelude::*;

        fn region() -> impl Strategy<Value = Region> {
            let data = prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..300).prop_map(RegionData::Full),
                Just(RegionData::Unchanged),
            ];
            (
                any::<bool>(),
                any::<u64>(),
                "[a-z_]{0,12}",
                1u32..9000,
                data,
            )
                .prop_map(|(var, addr, name, page_size, data)| {
                    let size = match &data {
                        RegionData::Full(b) => b.len() as u64,
                        _ => u64::from(page_size) * 3 + 1,
                    };
                    Region {
                        kind: if var {
                            RegionKind::Variable
                        } else {
                            RegionKind::Allocation
                        },
                        addr,
                        size,
                        name,
                        page_size,
                        data,
                    }
                })
        }

        /// A byte string changed the ways a crash or a bad disk changes one.
        #[derive(Debug, Clone)]
        pub(crate) enum Damage {
            Truncate(usize),
            Flip(usize, u8),
            Splice(usize, Vec<u8>),
            Cut(usize, usize),
        }

        pub(crate) fn damage() -> impl Strategy<Value = Damage> {
            prop_oneof![
                any::<usize>().prop_map(Damage::Truncate),
                (any::<usize>(), 1u8..=255).prop_map(|(at, x)| Damage::Flip(at, x)),
                (
                    any::<usize>(),
                    proptest::collection::vec(any::<u8>(), 1..16)
                )
                    .prop_map(|(at, b)| Damage::Splice(at, b)),
                (any::<usize>(), 1usize..64).prop_map(|(at, n)| Damage::Cut(at, n)),
            ]
        }

        pub(crate) fn apply_damage(good: &[u8], d: &Damage) -> Vec<u8> {
            let mut v = good.to_vec();
            let at = |i: usize| if v.is_empty() { 0 } else { i % v.len() };
            match d {
                Damage::Truncate(n) => v.truncate(n % (good.len() + 1)),
                Damage::Flip(i, x) => {
                    if !v.is_empty() {
                        let i = at(*i);
                        v[i] ^= x;
                    }
                }
                Damage::Splice(i, b) => {
                    let i = at(*i);
                    v.splice(i..i, b.iter().copied());
                }
                Damage::Cut(i, n) => {
                    let i = at(*i);
                    let end = (i + n).min(v.len());
                    v.drain(i..end);
                }
            }
            v
        }

        fn read_named(bytes: &[u8]) -> Result<Snapshot, String> {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("epilogue.r3snap");
            std::fs::write(&path, bytes).unwrap();
            read_snapshot(&path).map_err(|e| e.to_string())
        }

        fn names_the_file(r: &Result<Snapshot, String>) -> Result<(), TestCaseError> {
            if let Err(e) = r {
                prop_assert!(e.contains("epilogue.r3snap"), "{}", e);
                prop_assert!(e.contains("fix:"), "{}", e);
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            #[test]
            fn snapshots_round_trip(regions in proptest::collection::vec(region(), 0..5)) {
                let snap = Snapshot { regions };
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("s.r3snap");
                write_snapshot(&path, &snap).unwrap();
                prop_assert_eq!(read_snapshot(&path).unwrap(), snap);
            }

            #[test]
            fn arbitrary_bytes_are_an_error_naming_the_file(
                bytes in proptest::collection::vec(any::<u8>(), 0..512)
            ) {
                let r = read_named(&bytes);
                prop_assert!(r.is_err());
                names_the_file(&r)?;
            }

            #[test]
            fn a_damaged_file_never_panics_and_errors_name_it(d in damage()) {
                let (before, after) = sample();
                let good = compress(&encode(&diff(&before, &after, 4096))).unwrap();
                let r = read_named(&apply_damage(&good, &d));
                names_the_file(&r)?;
            }

            /// Damage inside a valid frame (checksum right): the parser itself must cope with
            /// any lengths, counts, kinds and page indices, and apply must refuse, not panic.
            #[test]
            fn damaged_contents_never_panic_and_never_apply_out_of_bounds(
                d in damage(),
                d2 in damage(),
            ) {
                let (before, after) = sample();
                let raw = encode(&diff(&before, &after, 4096));
                let bytes = compress(&apply_damage(&apply_damage(&raw, &d), &d2)).unwrap();
                let r = read_named(&bytes);
                names_the_file(&r)?;
                if let Ok(epi) = r {
                    // What apply must do with what the parser let through: refuse an epilogue
                    // of other regions than the prologue's, else write the epilogue's bytes
                    // where it says and nowhere else.
                    let fits = before.regions.len() == epi.regions.len()
                        && before.regions.iter().zip(&epi.regions).all(|(b, e)| {
                            (b.addr, b.size, &b.name) == (e.addr, e.size, &e.name)
                        });
                    match apply(&before, &epi) {
                        Err(e) => prop_assert!(!fits, "refused an epilogue that fits: {}", e),
                        Ok(out) => {
                            prop_assert!(fits, "applied an epilogue of other regions");
                            prop_assert_eq!(out.regions.len(), before.regions.len());
                            let regions = out.regions.iter().zip(&before.regions).zip(&epi.regions);
                            for ((o, b), e) in regions {
                                prop_assert_eq!((o.addr, o.size, &o.name), (b.addr, b.size, &b.name));
                                let (RegionData::Full(got), RegionData::Full(was)) = (&o.data, &b.data)
                                else {
                                    return Err(TestCaseError::fail("a region left incomplete"));
                                };
                                let mut want = was.clone();
                                match &e.data {
                                    RegionData::Unchanged => {}
                                    RegionData::Full(bytes) => want.clone_from(bytes),
                                    RegionData::Pages(pages) => {
                                        for (index, page) in pages {
                                            let at = (index * u64::from(e.page_size)) as usize;
                                            want[at..at + page.len()].copy_from_slice(page);
                                        }
                                    }
                                }
                                prop_assert_eq!(got.len() as u64, b.size);
                                prop_assert!(got == &want, "region {:#x}: not the epilogue's bytes", b.addr);
                            }
                        }
                    }
                }
            }

            #[test]
            fn launch_args_decode_only_from_hex_digits(hex in "[0-9a-fA-F+ x-]{0,12}") {
                let mut rec: LaunchRecord = serde_json::from_str(LAUNCH).unwrap();
                rec.args_hex = hex.clone();
                let ok = hex.len() % 2 == 0 && hex.bytes().all(|b| b.is_ascii_hexdigit());
                match rec.args() {
                    Ok(bytes) => {
                        prop_assert!(ok);
                        let back: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                        prop_assert_eq!(back, hex.to_ascii_lowercase());
                    }
                    Err(_) => prop_assert!(!ok),
                }
            }

            #[test]
            fn a_damaged_launch_json_is_an_error_naming_it(d in damage(), junk in any::<bool>()) {
                let dir = tempfile::tempdir().unwrap();
                let store = crate::Store::create(dir.path()).unwrap();
                let ldir = dir.path().join("records/0123456789abcdef/1");
                std::fs::create_dir_all(&ldir).unwrap();
                let bytes = if junk {
                    apply_damage(b"\xff\xfe{}", &d)
                } else {
                    apply_damage(LAUNCH.as_bytes(), &d)
                };
                std::fs::write(ldir.join("launch.json"), &bytes).unwrap();
                // The listing always reads: a recording that does not is left out, with an
                // error that names its file and the fix.
                let (recs, damaged) = store.recordings_and_damage(None).unwrap();
                prop_assert_eq!(recs.len() + damaged.len(), 1);
                for r in &recs {
                    let _ = r.launch.args();
                }
                for e in &damaged {
                    let e = e.to_string();
                    prop_assert!(e.contains("launch.json") && e.contains("fix: delete the recording"), "{}", e);
                }
            }

            #[test]
            fn launch_records_round_trip(
                kernel in "\\PC{0,20}",
                grid in any::<[u32; 3]>(),
                args in proptest::collection::vec(any::<u8>(), 0..32),
                va_base in any::<u64>(),
                ms in 0.0f64..1e6,
            ) {
                let mut rec: LaunchRecord = serde_json::from_str(LAUNCH).unwrap();
                rec.kernel = kernel;
                rec.grid = grid;
                rec.args_hex = args.iter().map(|b| format!("{b:02x}")).collect();
                rec.va_base = va_base;
                rec.in_app_ms = ms;
                let dir = tempfile::tempdir().unwrap();
                let store = crate::Store::create(dir.path()).unwrap();
                let ldir = dir.path().join("records").join(kernel_key(None, &rec.kernel)).join("1");
                std::fs::create_dir_all(&ldir).unwrap();
                std::fs::write(ldir.join("launch.json"), serde_json::to_vec(&rec).unwrap()).unwrap();
                let got = store.recordings(Some(&rec.kernel)).unwrap();
                prop_assert_eq!(got.len(), 1);
                prop_assert_eq!(&got[0].launch, &rec);
                prop_assert_eq!(got[0].launch.args().unwrap(), args);
            }
        }
    }

    const LAUNCH: &str = r#"{"format": 1, "kernel": "k", "arch": "sm_90", "grid": [1,1,1], "block": [32,1,1],
      "shared_bytes": 0, "params": [{"offset": 0, "size": 4}, {"offset": 4, "size": 4}], "args_hex": "0000004001000000",
      "va_base": 1, "va_size": 2, "in_app_ms": 0.1, "regions": 0, "bytes_in": 0, "bytes_changed": 0,
      "replayable": true, "not_replayable": null, "program": "/bin/x", "pid": 1, "unix_time": 0}"#;
}
