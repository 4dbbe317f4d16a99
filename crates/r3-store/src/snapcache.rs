//! Recordings' snapshots kept decompressed for the other processes of one run. A replay worker
//! opens a recording by decompressing its snapshots, which took 0.9 s of the 1.1 s an H200
//! worker needed to open a short kernel's recording (`R3_TIMELINE`, 2026-11-29); a search opens
//! the same recording again in every fresh context of its confirmation and whenever it comes
//! back to the kernel. With `R3_SNAPSHOT_CACHE=<dir>` (set by `r3 tune` for its workers, on a
//! directory of its own that it removes when it ends), the first worker to decompress a
//! snapshot leaves its bytes there, named by the compressed file's size and sum, and the next
//! ones read those instead. The directory holds at most [`CAP_BYTES`]: the oldest files go
//! first.

use std::path::{Path, PathBuf};

/// A compressed snapshot file as launch.json names it: its sum (hex) and size, which name
/// its decompressed bytes here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sum<'a> {
    pub sum: &'a str,
    pub bytes: u64,
}

/// The environment variable naming the directory.
pub const ENV: &str = "R3_SNAPSHOT_CACHE";
/// The most the directory holds.
pub const CAP_BYTES: u64 = 8 << 30;

static DIR: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();

/// Makes `dir` this process's directory (the one that starts the workers, which reads ahead
/// for them); false where the process has read snapshots already without one.
pub fn use_dir(dir: &Path) -> bool {
    DIR.set(Some(dir.to_owned())).is_ok() || self::dir() == Some(dir)
}

fn dir() -> Option<&'static Path> {
    DIR.get_or_init(|| {
        std::env::var_os(ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|d| d.is_dir())
    })
    .as_deref()
}

fn file_of(dir: &Path, sum: Sum) -> PathBuf {
    dir.join(format!("{}-{}.raw", sum.sum, sum.bytes))
}

/// A sum that can name a file: hex digits, as r3 writes them (a damaged launch.json's could
/// name a path out of the directory).
fn nameable(sum: Option<Sum>) -> Option<Sum> {
    sum.filter(|s| !s.sum.is_empty() && s.sum.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Whether a snapshot whose compressed file is `sum` is to be kept decompressed.
pub fn wanted(sum: Option<Sum>) -> bool {
    dir().is_some() && nameable(sum).is_some()
}

/// The decompressed bytes of the snapshot whose compressed file is `sum`, where a process of
/// this run kept them.
pub fn decompressed(sum: Option<Sum>) -> Option<Vec<u8>> {
    let (dir, sum) = (dir()?, nameable(sum)?);
    std::fs::read(file_of(dir, sum)).ok()
}

/// Keeps `raw`, the decompressed bytes of the snapshot whose compressed file is `sum`, for
/// the next process of this run, making room for it. Nothing is lost where it cannot: the next
/// one decompresses.
pub fn keep(sum: Option<Sum>, raw: &[u8]) {
    let (Some(dir), Some(sum)) = (dir(), nameable(sum)) else {
        return;
    };
    let path = file_of(dir, sum);
    if path.exists() || raw.len() as u64 > CAP_BYTES {
        return;
    }
    make_room(dir, raw.len() as u64);
    let _ = super::write_atomic(&path, raw);
}

/// Whether the snapshot whose compressed file is `sum` is kept already, or there is room for
/// `bytes` more without removing any (a read ahead never pushes out what a worker kept).
pub fn kept_or_room_for(sum: Sum, bytes: u64) -> bool {
    let (Some(dir), Some(sum)) = (dir(), nameable(Some(sum))) else {
        return false;
    };
    if file_of(dir, sum).exists() {
        return true;
    }
    let held: u64 = std::fs::read_dir(dir)
        .map(|es| {
            es.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(u64::MAX);
    held.saturating_add(bytes) <= CAP_BYTES
}

/// Removes the oldest files until `more` bytes fit under [`CAP_BYTES`].
fn make_room(dir: &Path, more: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            Some((m.modified().ok()?, m.len(), e.path()))
        })
        .collect();
    files.sort();
    let mut held: u64 = files.iter().map(|f| f.1).sum();
    for (_, len, path) in files {
        if held + more <= CAP_BYTES {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            held -= len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn only_a_sum_of_hex_digits_names_a_file() {
        let sum = |s| Some(Sum { sum: s, bytes: 1 });
        assert!(nameable(sum("00ff12ab34cd56ef")).is_some());
        for bad in ["", "../../x", "a/b", "zz"] {
            assert!(nameable(sum(bad)).is_none(), "{bad}");
        }
    }

    #[test]
    fn the_oldest_files_make_room_for_a_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old.raw");
        std::fs::write(&old, vec![0u8; 10]).unwrap();
        // Nothing goes while the new one fits.
        make_room(dir.path(), CAP_BYTES - 10);
        assert!(old.exists());
        make_room(dir.path(), CAP_BYTES - 9);
        assert!(!old.exists());
    }
}
