//! The directory one run shares between its processes: decompressed recordings
//! (`store::snapcache`) and `ptxas`'s code (`assemble`). The process that starts the workers
//! makes it while a `worker::SharedSnapshots` lives, and names it to each worker by
//! `R3_SNAPSHOT_CACHE`; it is removed when sharing ends.

use std::path::PathBuf;

static DIR: std::sync::Mutex<Option<tempfile::TempDir>> = std::sync::Mutex::new(None);

fn dir() -> std::sync::MutexGuard<'static, Option<tempfile::TempDir>> {
    DIR.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes this process's shared directory, where it has none; none where no temporary
/// directory can be made (then each worker decompresses for itself).
pub(crate) fn make() {
    let mut dir = dir();
    if dir.is_none() {
        *dir = tempfile::Builder::new()
            .prefix("r3-snapshots-")
            .tempdir()
            .ok();
    }
}

/// Removes this process's shared directory.
pub(crate) fn remove() {
    dir().take();
}

/// The shared directory this process made, while it lives.
pub(crate) fn made() -> Option<PathBuf> {
    dir().as_ref().map(|d| d.path().to_owned())
}

/// The run's shared directory: the one this process made, else the one its parent named to it
/// (a worker's).
pub(crate) fn named() -> Option<PathBuf> {
    made().or_else(|| {
        std::env::var_os(crate::store::snapcache::ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    })
}
