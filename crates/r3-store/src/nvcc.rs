//! `nvcc/<hash>/<sm>.json`: a kernel as nvcc builds it (beside, not inside, `kernels/<hash>`,
//! which a compile of the same kernel may replace whole). `r3 tune` measures nvcc's code
//! as one more candidate (`Candidate::nvcc`), so that what ships is never slower than the faster
//! of clang and nvcc on the recorded launches; apply ships this text where it wins, checked by
//! its PTX hash like every winner. Made once per kernel and architecture, by
//! `remix::nvcc`; where nvcc could not make it, the file says why and nothing retries.

use crate::{io_err, KernelHash, Store, StoreError};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvccCode {
    /// The architecture compiled for (`sm_90`): the GPU's the search measures on.
    pub sm: String,
    /// `nvcc --version`'s release line.
    pub nvcc: String,
    /// The command that compiled the kernel's translation unit (argv, nvcc first).
    pub command: Vec<String>,
    /// The kernel and what it uses, as a PTX module of its own (`r3_ptx::module::extract`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ptx: Option<String>,
    /// Why there is no code (nvcc missing or failing, the kernel not in its output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why_not: Option<String>,
}

impl NvccCode {
    /// The code, or why there is none.
    pub fn code(&self) -> Result<&str, &str> {
        match (&self.ptx, &self.why_not) {
            (Some(ptx), _) => Ok(ptx),
            (None, Some(why)) => Err(why),
            (None, None) => Err("nvcc made no code"),
        }
    }
}

impl Store {
    fn nvcc_path(&self, kernel: &KernelHash, sm: &str) -> Option<PathBuf> {
        // Both parts name a file: a hash is hex, an architecture letters, digits and `_`.
        let plain = !sm.is_empty() && sm.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        (plain && crate::is_hash(kernel)).then(|| {
            self.root()
                .join("nvcc")
                .join(kernel.as_str())
                .join(format!("{sm}.json"))
        })
    }

    /// nvcc's code of `kernel` for `sm`, where it was made (or tried).
    pub fn nvcc_code(&self, kernel: &KernelHash, sm: &str) -> Result<Option<NvccCode>, StoreError> {
        let Some(path) = self.nvcc_path(kernel, sm) else {
            return Ok(None);
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path)(e)),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| StoreError::Corrupt {
                path,
                msg: e.to_string(),
            })
    }

    /// Keeps nvcc's code of `kernel` (or why there is none), whole or not at all.
    pub fn put_nvcc_code(&self, kernel: &KernelHash, code: &NvccCode) -> Result<(), StoreError> {
        let path = self
            .nvcc_path(kernel, &code.sm)
            .ok_or_else(|| StoreError::NoKernel {
                word: format!("{kernel} ({})", code.sm),
            })?;
        let text = serde_json::to_vec_pretty(code).expect("nvcc code serializes");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        crate::write_atomic(&path, &text).map_err(io_err(&path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvcc_code_is_kept_per_kernel_and_architecture_and_a_damaged_file_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::create(dir.path()).unwrap();
        let k = KernelHash::from("0123456789abcdef");
        assert_eq!(store.nvcc_code(&k, "sm_90").unwrap(), None);
        let code = NvccCode {
            sm: "sm_90".into(),
            nvcc: "Cuda compilation tools, release 13.0, V13.0.48".into(),
            command: vec!["nvcc".into(), "-ptx".into()],
            ptx: Some(".version 9.0\n".into()),
            why_not: None,
        };
        store.put_nvcc_code(&k, &code).unwrap();
        assert_eq!(store.nvcc_code(&k, "sm_90").unwrap(), Some(code.clone()));
        assert_eq!(store.nvcc_code(&k, "sm_80").unwrap(), None);
        assert_eq!(
            store.nvcc_code(&k, "../x").unwrap(),
            None,
            "not a file name"
        );
        let path = dir.path().join("nvcc/0123456789abcdef/sm_90.json");
        std::fs::write(&path, b"{").unwrap();
        let e = store.nvcc_code(&k, "sm_90").unwrap_err().to_string();
        assert!(e.contains("sm_90.json") && e.contains("damaged"), "{e}");
    }
}
