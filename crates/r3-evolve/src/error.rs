//! What stops `r3 evolve` on a kernel (a proposal that fails is an attempt, not an error).

use crate::source;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum EvolveError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Source(#[from] source::SourceError),
    #[error("kernel {kernel}: {msg}")]
    Compile { kernel: String, msg: String },
    #[error("kernel {kernel}: {path} has changed since the kernel was stored (its kernel now hashes to {now}, the store's is {was}); fix: rebuild with r3-clang++ and record again, so that the rewrite's diff applies to the code that was measured")]
    SourceChanged {
        kernel: String,
        path: String,
        was: String,
        now: String,
    },
    #[error("kernel {kernel}: {path} already holds {n} attempts; fix: --resume to continue them, or move the file away to start over")]
    Exists {
        kernel: String,
        path: String,
        n: usize,
    },
    #[error("kernel {kernel}: no rewrites are stored to measure; fix: run `r3 evolve` without --measure-only where its source and clang are")]
    NothingToMeasure { kernel: String },
    #[error("kernel {kernel}: {path}: cannot read the source ({msg}); fix: run r3 evolve where the program was built, with its sources in place")]
    Read {
        kernel: String,
        path: String,
        msg: String,
    },
}
