//! `.r3/config`: a build tree's settings for r3, found upward from the working directory like
//! the project store. The CMake toolchain writes it into the build directory, so that neither
//! compile commands nor `compile_commands.json` carry a flag clang does not know, and so that
//! `r3 kernels`, `r3 status`, … run in the build tree find the store the build writes.
//!
//! ```toml
//! store = "/home/me/proj/build/r3-store"   # where the build's kernels go
//! apply = true                              # compiles ship tuned winners (as R3_APPLY=1)
//! apply_rewrites = true                     # and validated source rewrites (R3_APPLY_REWRITES=1)
//! ```

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file's name inside `.r3/`.
pub const FILE: &str = "config";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildConfig {
    /// The store; relative paths are taken from the directory holding `.r3/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<PathBuf>,
    /// Compiles apply the store's winners, as `R3_APPLY=1` does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub apply: bool,
    /// Apply ships validated source rewrites of `r3 evolve` too, as `R3_APPLY_REWRITES=1`
    /// does (`-DR3_APPLY_REWRITES=ON`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub apply_rewrites: bool,
}

/// A build configuration and the file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    pub config: BuildConfig,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("{path}: {msg}; fix: correct it (it holds `store = \"DIR\"`, `apply = true|false` and `apply_rewrites = true|false`; the CMake toolchain writes it on configure), or remove it")]
pub struct ConfigError {
    pub path: PathBuf,
    pub msg: String,
}

/// The nearest `.r3/config` at or above `cwd`, read; None where there is none.
pub fn find(cwd: &Path) -> Result<Option<Found>, ConfigError> {
    let Some(path) = cwd
        .ancestors()
        .map(|d| d.join(super::LOCAL_DIR).join(FILE))
        .find(|p| p.is_file())
    else {
        return Ok(None);
    };
    read(&path).map(|config| Some(Found { path, config }))
}

/// Reads one config file, with relative paths resolved from the directory above `.r3/`.
pub fn read(path: &Path) -> Result<BuildConfig, ConfigError> {
    let err = |msg: String| ConfigError {
        path: path.to_owned(),
        msg,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let mut config: BuildConfig = toml::from_str(&text).map_err(|e| err(e.message().to_owned()))?;
    let base = path
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("/"));
    if let Some(s) = config.store.as_mut().filter(|s| s.is_relative()) {
        *s = base.join(&*s);
    }
    Ok(config)
}

/// Writes `<dir>/.r3/config` whole (temp file, then rename); an unchanged file is left alone,
/// so that what depends on it (compiles, through their depfiles) is not rebuilt for nothing.
pub fn write(dir: &Path, config: &BuildConfig) -> Result<PathBuf, ConfigError> {
    let r3 = dir.join(super::LOCAL_DIR);
    let path = r3.join(FILE);
    let err = |msg: String| ConfigError {
        path: path.clone(),
        msg,
    };
    let text = format!(
        "# r3's settings for this build tree (r3 commands run here read them); see docs/formats.md\n{}",
        toml::to_string(config).map_err(|e| err(e.to_string()))?
    );
    if std::fs::read_to_string(&path).is_ok_and(|old| old == text) {
        return Ok(path);
    }
    std::fs::create_dir_all(&r3).map_err(|e| err(e.to_string()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(&r3).map_err(|e| err(e.to_string()))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(|e| err(e.to_string()))?;
    tmp.persist(&path).map_err(|e| err(e.to_string()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_is_found_from_below_and_its_store_made_absolute() {
        let dir = tempfile::tempdir().unwrap();
        let config = BuildConfig {
            store: Some("r3-store".into()),
            apply: true,
            apply_rewrites: true,
        };
        let path = write(dir.path(), &config).unwrap();
        let sub = dir.path().join("CMakeFiles/app.dir");
        std::fs::create_dir_all(&sub).unwrap();
        let found = find(&sub).unwrap().unwrap();
        assert_eq!(found.path, path);
        assert_eq!(found.config.store, Some(dir.path().join("r3-store")));
        assert!(found.config.apply && found.config.apply_rewrites);
        assert!(find(Path::new("/")).unwrap().is_none() || Path::new("/.r3/config").exists());
    }

    #[test]
    fn an_unchanged_config_keeps_its_time_and_a_bad_one_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        let config = BuildConfig {
            store: Some("/s".into()),
            apply: false,
            apply_rewrites: false,
        };
        let path = write(dir.path(), &config).unwrap();
        let before = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        write(dir.path(), &config).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().modified().unwrap(),
            before
        );
        std::fs::write(&path, "stor = \"/x\"\n").unwrap();
        let e = find(dir.path()).unwrap_err().to_string();
        assert!(e.contains(".r3/config") && e.contains("stor"), "{e}");
    }
}
