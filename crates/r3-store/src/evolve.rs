//! `evolve/<kernel>/attempts.jsonl`: every attempt of `r3 evolve` on a kernel, as events
//! (proposed, refused, compiled, judged), appended and fsynced one by one like trials, so a
//! killed run resumes from the last event and an audit sees every prompt's hash and answer.
//! The event type is `evolve`'s; the store owns the file.

use super::trials::{self, JsonLog};
use super::{Store, StoreError};
use serde::de::DeserializeOwned;
use std::path::PathBuf;

impl Store {
    pub fn attempts_path(&self, kernel: &str) -> PathBuf {
        self.root()
            .join("evolve")
            .join(trials::slug(kernel))
            .join("attempts.jsonl")
    }

    /// The attempts on `kernel`, in file order (none when it was never evolved).
    pub fn attempts<T: DeserializeOwned>(&self, kernel: &str) -> Result<Vec<T>, StoreError> {
        Ok(trials::read_log(&self.attempts_path(kernel))?.0)
    }

    /// Opens the attempts log for appending: one writer at a time (`StoreError::Busy`).
    pub fn open_attempts<T: DeserializeOwned>(
        &self,
        kernel: &str,
    ) -> Result<JsonLog<T>, StoreError> {
        trials::open_log(self.attempts_path(kernel))
    }

    /// The kernels with an attempts log.
    pub fn evolved(&self) -> Result<Vec<String>, StoreError> {
        let dir = self.root().join("evolve");
        let mut out: Vec<String> = match std::fs::read_dir(&dir) {
            Ok(rd) => rd
                .flatten()
                .filter(|e| e.path().join("attempts.jsonl").is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        };
        out.sort();
        Ok(out)
    }
}
