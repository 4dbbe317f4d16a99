//! One measurement at a time on each GPU, across processes.
//!
//! Two searches on one GPU (two terminals, two Slurm tasks sharing a node's GPU, `tune` beside
//! `evolve`) would otherwise run their kernels beside each other's, and both would record
//! timings of a shared GPU without knowing it. Each replay job takes the GPU's turn first: an
//! exclusive `flock` on a file named after the GPU's UUID (the same GPU under any
//! `CUDA_VISIBLE_DEVICES` numbering) in the temporary directory. The kernel releases the lock
//! with the process, so a worker that dies or is killed never keeps it.

use std::fs::{File, OpenOptions};
use std::path::PathBuf;

/// The GPU is this process's while it lives.
pub struct Turn {
    _file: File,
}

/// The lock file of the GPU with this UUID.
pub fn lock_path(uuid: &str) -> PathBuf {
    let safe: String = uuid
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    std::env::temp_dir().join(format!("r3-gpu-{safe}.lock"))
}

/// Takes the GPU's turn, calling `waiting` first if another process holds it. Another user's
/// lock file is opened read-only (enough for flock); an error is the caller's to report (the
/// worker measures anyway and says so).
pub fn take(uuid: &str, waiting: impl FnOnce()) -> std::io::Result<Turn> {
    let path = lock_path(uuid);
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => File::open(&path)?,
        Err(e) => return Err(e),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            waiting();
            file.lock()?;
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(e),
    }
    Ok(Turn { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    #[test]
    fn a_second_taker_waits_until_the_first_lets_go() {
        let uuid = format!("test-{}-{:?}", std::process::id(), Instant::now());
        let first = take(&uuid, || panic!("nobody holds it yet")).unwrap();
        let (tx, rx) = mpsc::channel();
        let id = uuid.clone();
        let second = std::thread::spawn(move || {
            // Its own open file: flock treats it as another holder, as another process would be.
            let t = take(&id, || tx.send("waiting").unwrap()).unwrap();
            tx.send("taken").unwrap();
            t
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("waiting"));
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "taken while the first still held it"
        );
        drop(first);
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok("taken"));
        drop(second.join().unwrap());
        take(&uuid, || panic!("free again")).unwrap();
        let _ = std::fs::remove_file(lock_path(&uuid));
    }

    #[test]
    fn lock_files_are_named_safely() {
        let p = lock_path("GPU-8c1f/../x y");
        assert_eq!(p.file_name().unwrap(), "r3-gpu-GPU-8c1f____x_y.lock");
        assert_eq!(p.parent().unwrap(), std::env::temp_dir());
    }
}
