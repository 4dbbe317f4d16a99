//! The store: where r3 keeps kernels, recordings and trials. This module is the only code
//! that knows the layout of a store directory.

use std::path::{Path, PathBuf};

/// Name of a project-local store directory, found by walking up from the working directory.
pub const LOCAL_DIR: &str = ".r3";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub path: PathBuf,
    /// Which rule chose it: "--r3-store", "R3_STORE", "project (.r3 above the working directory)" or "default".
    pub source: &'static str,
}

/// Resolves the store: `--r3-store`, then `R3_STORE`, then the nearest `.r3/` directory at or
/// above `cwd`, then the per-user default `$XDG_DATA_HOME/r3` (~/.local/share/r3). Every rule
/// gives one place for all compiles of a build, whatever directory each compile runs in.
pub fn locate(explicit: Option<&Path>, cwd: &Path) -> Location {
    if let Some(p) = explicit {
        return Location {
            path: absolute(p, cwd),
            source: "--r3-store",
        };
    }
    if let Some(p) = std::env::var_os("R3_STORE").filter(|v| !v.is_empty()) {
        return Location {
            path: absolute(Path::new(&p), cwd),
            source: "R3_STORE",
        };
    }
    if let Some(dir) = cwd
        .ancestors()
        .map(|d| d.join(LOCAL_DIR))
        .find(|d| d.is_dir())
    {
        return Location {
            path: dir,
            source: "project (.r3 above the working directory)",
        };
    }
    Location {
        path: default_dir(),
        source: "default",
    }
}

pub fn default_dir() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::toolchain::home().join(".local/share"))
        .join("r3")
}

fn absolute(p: &Path, cwd: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_owned()
    } else {
        cwd.join(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_store_is_made_absolute() {
        let loc = locate(Some(Path::new("st")), Path::new("/work/build"));
        assert_eq!(loc.path, PathBuf::from("/work/build/st"));
        assert_eq!(loc.source, "--r3-store");
    }

    #[test]
    fn project_store_is_found_from_a_subdirectory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".r3")).unwrap();
        let sub = dir.path().join("build/src/cuda");
        std::fs::create_dir_all(&sub).unwrap();
        if std::env::var_os("R3_STORE").is_none() {
            let loc = locate(None, &sub);
            assert_eq!(loc.path, dir.path().join(".r3"));
        }
    }
}
