//! Where the store's searches stand (`r3 status`): each trials file with its state (running,
//! finished, stopped, damaged), its trials and its best as the winner rule picks it.

use super::trials::{
    held_by_another, is_copy, note_copy, read_trials, Lease, SearchEnd, TrialRecord,
};
use super::{Store, StoreError};
use crate::kernel::TrialsKey;
use serde::Serialize;
use std::path::{Path, PathBuf};

impl Store {
    /// Every search in the store (one per kernel and GPU), with its state: running (and where),
    /// finished (and why), or stopped without a word (killed), its trial count and best ratio.
    pub fn search_statuses(&self) -> Result<Vec<SearchStatus>, StoreError> {
        let mut out = Vec::new();
        for file in self.all_trial_files()? {
            // Read once, for the copy check and the status both.
            let recs = read_trials(&file);
            if let Ok(recs) = &recs {
                if is_copy(&file, recs) {
                    note_copy(&file, recs);
                    continue;
                }
            }
            let kernel_dir = file
                .parent()
                .expect("a trials file lies in its kernel's directory")
                .to_owned();
            // A damaged file is that search's problem alone: shown as damaged, with the fix.
            let status = recs
                .and_then(|recs| self.search_status(&kernel_dir, file.clone(), recs))
                .unwrap_or_else(|e| SearchStatus {
                    kernel: kernel_dir
                        .file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .as_ref()
                        .into(),
                    gpu: file
                        .file_stem()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned(),
                    trials: 0,
                    best_time_ratio: None,
                    state: SearchState::Damaged(e.to_string()),
                    trials_file: file,
                });
            out.push(status);
        }
        Ok(out)
    }

    fn search_status(
        &self,
        kernel_dir: &Path,
        file: PathBuf,
        recs: Vec<TrialRecord>,
    ) -> Result<SearchStatus, StoreError> {
        let dir_name = || {
            kernel_dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        };
        let gpu_name = || {
            file.file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        };
        let confirmed = self.confirmations(&file)?;
        let state = if held_by_another(&file) {
            // A lease that cannot be read (being replaced) says nothing more than the lock.
            SearchState::Running(self.lease(&file))
        } else if let Some(end) = self.search_end(&file)? {
            SearchState::Finished(end)
        } else {
            SearchState::Stopped
        };
        Ok(SearchStatus {
            kernel: recs
                .first()
                .map_or_else(|| dir_name().into(), |r| r.kernel.clone()),
            gpu: match (recs.first(), &state) {
                (Some(r), _) => r.gpu.clone(),
                (None, SearchState::Running(Some(l))) if !l.gpu.is_empty() => l.gpu.clone(),
                _ => gpu_name(),
            },
            trials: recs.len() as u32,
            best_time_ratio: super::winner::pick_best(&recs, &confirmed)
                .and_then(TrialRecord::ratio),
            state,
            trials_file: file,
        })
    }
}

/// What `r3 status` says of one search.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", content = "detail", rename_all = "lowercase")]
pub enum SearchState {
    /// Its trials file is locked by a running r3; where, when the lease says.
    Running(Option<Lease>),
    /// Its last run ended and said how (`SearchEnd::stop`).
    Finished(SearchEnd),
    /// Not running, and its last run said nothing: killed (resume with `--resume`).
    Stopped,
    /// Its files cannot be read: the error, with its fix (the store's other searches are
    /// unaffected).
    Damaged(String),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchStatus {
    pub trials_file: PathBuf,
    /// What its trials are kept under (a kernel's content hash, as its trials record it).
    pub kernel: TrialsKey,
    pub gpu: String,
    pub trials: u32,
    /// The best valid trial's time relative to -O3's (below 1: faster), as report and apply
    /// pick it; `r3 status` shows (and its JSON's `best` holds) its inverse, the speedup.
    pub best_time_ratio: Option<f64>,
    /// `"state"`: running, finished or stopped, and `"detail"`: the lease or the search's end.
    #[serde(flatten)]
    pub state: SearchState,
}
