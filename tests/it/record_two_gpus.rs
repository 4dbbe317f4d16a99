//! A program that uses two GPUs, recorded on the fake GPU (fixtures/record_fake_gpu.c, scenario
//! `two_devices`; issue 62): each recording names the device its launch ran on, holds only
//! that device's memory and reproduces from its own files (so it replays on any GPU); memory
//! freed on one device is never handed to an allocation on the other; peer access granted by
//! the program reaches the memory r3 maps for it; and a launch that reads the other device's
//! memory is recorded as not replayable, with the reason.

use crate::support::{fake_gpu_program, stderr};
use r3::store::records::{Recording, RegionData, RegionKind};
use r3::store::Store;
use std::process::Command;

/// scale(const float *x, float *y, int n) on the host: y[i] = 2 x[i].
fn scale_on_host(rec: &Recording) {
    let pro = rec.prologue().unwrap();
    let epi = rec.epilogue().unwrap();
    let after = r3::store::records::apply(&pro, &epi).unwrap();
    let args = rec.launch.args().unwrap();
    let ptr = |at: usize| u64::from_le_bytes(args[at..at + 8].try_into().unwrap());
    let n = i32::from_le_bytes(args[16..20].try_into().unwrap()) as usize;
    let floats = |regions: &[r3::store::records::Region], addr: u64| -> Vec<f32> {
        let r = regions
            .iter()
            .find(|r| r.kind == RegionKind::Allocation && r.addr == addr)
            .unwrap_or_else(|| panic!("{}: no region at {addr:#x}", rec.id));
        let RegionData::Full(b) = &r.data else {
            panic!("{}: regions are whole after apply", rec.id)
        };
        b[..4 * n]
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let x = floats(&pro.regions, ptr(0));
    let y = floats(&after.regions, ptr(8));
    let want: Vec<f32> = x.iter().map(|v| 2.0 * v).collect();
    assert_eq!(y, want, "{}: y = 2x", rec.id);
}

#[test]
fn each_recording_of_a_two_gpu_program_names_its_device_and_holds_only_its_memory() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fake_gpu_program(
        dir.path(),
        "record_fake_gpu",
        &["-fno-math-errno".to_owned()],
    );
    let store_dir = dir.path().join("store");
    Store::create(&store_dir).unwrap();
    let out = Command::new(&exe)
        .arg("two_devices")
        .env("R3_RECORD", "1")
        .env("R3_STORE", &store_dir)
        .output()
        .unwrap();
    // The program's own checks: every result right, no kernel faulted on memory its device
    // was not granted (device 1's buffers on device 1's memory, device 1's buffer reached by
    // device 0 once the program enabled peer access).
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("two_devices: ok"));

    let store = Store::open(&store_dir).unwrap();
    let mut recs = store.recordings(Some("scale")).unwrap();
    recs.sort_by_key(|r| (r.launch.device, !r.launch.replayable));
    let seen: Vec<(Option<u32>, bool)> = recs
        .iter()
        .map(|r| (r.launch.device, r.launch.replayable))
        .collect();
    assert_eq!(
        seen,
        [(Some(0), true), (Some(0), false), (Some(1), true)],
        "scale on device 0, on device 1, and on device 0 reading device 1's memory"
    );
    for rec in recs.iter().filter(|r| r.launch.replayable) {
        let pro = rec.prologue().unwrap();
        let sizes: Vec<u64> = pro
            .regions
            .iter()
            .filter(|r| r.kind == RegionKind::Allocation)
            .map(|r| r.size)
            .collect();
        assert_eq!(sizes, [4000, 4000], "{}: its own x and y only", rec.id);
        assert_eq!(rec.launch.gpu.as_deref(), Some("Fake GPU"));
        scale_on_host(rec);
    }
    let peer = &recs[1];
    let why = peer.launch.not_replayable.as_deref().unwrap_or_default();
    assert!(
        why.contains("device 0 reaches memory of device 1 (peer access)"),
        "{why}"
    );
    // The device is in launch.json as the runtime wrote it.
    let text = std::fs::read_to_string(recs[2].dir.join("launch.json")).unwrap();
    assert!(text.contains("\"device\": 1"), "{text}");
}
