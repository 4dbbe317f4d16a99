//! Make-style dependency files (`-MD -MF x.d`, as CMake, Ninja and Make have compilers write
//! them): r3 adds the files that decide what a compile ships beyond its sources, so that the
//! build tool recompiles when they change. Those are the store's winners stamp (it changes
//! when what apply ships changes: `r3 tune` then `R3_APPLY=1 ninja` rebuilds) and the build
//! tree's `.r3/config` (switching apply on or off there rebuilds).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The dependency file a command writes: `-MF FILE`, else with `-MD`/`-MMD` clang's own name
/// (the output with `.d` for its extension); None where it writes none.
pub fn of(args: &[OsString]) -> Option<PathBuf> {
    let flags: Vec<&str> = args.iter().filter_map(|a| a.to_str()).collect();
    let mut it = flags.iter();
    let mut named = None;
    while let Some(a) = it.next() {
        match a.strip_prefix("-MF") {
            Some("") => named = it.next().map(PathBuf::from),
            Some(f) => named = Some(PathBuf::from(f)),
            None => {}
        }
    }
    if named.is_some() {
        return named;
    }
    let writes = flags.iter().any(|a| matches!(*a, "-MD" | "-MMD"));
    let output = super::args::output_of(args)?;
    writes.then(|| output.with_extension("d"))
}

/// Adds `deps` to the first rule of the dependency file at `path` (the compile's own), each
/// once; the file is replaced whole, never left half-written.
pub fn add(path: &Path, deps: &[PathBuf]) -> std::io::Result<()> {
    let text = std::fs::read_to_string(path)?;
    let Some(updated) = with_deps(&text, deps) else {
        return Ok(());
    };
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    let mut tmp = tempfile::NamedTempFile::new_in(dir.unwrap_or(Path::new(".")))?;
    std::io::Write::write_all(&mut tmp, updated.as_bytes())?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The text with `deps` appended to its first rule, or None when there is nothing to add (no
/// rule, or every dep already named).
fn with_deps(text: &str, deps: &[PathBuf]) -> Option<String> {
    let missing: Vec<String> = deps
        .iter()
        .map(|d| escape(&d.to_string_lossy()))
        .filter(|d| !text.contains(d.as_str()))
        .collect();
    if missing.is_empty() || !text.contains(':') {
        return None;
    }
    // The first rule ends at the first line that does not continue with a backslash.
    let mut end = 0;
    for line in text.split_inclusive('\n') {
        end += line.len();
        if !line.trim_end_matches(['\n', '\r']).ends_with('\\') {
            break;
        }
    }
    let (rule, rest) = text.split_at(end);
    let rule = rule.trim_end_matches(['\n', '\r']);
    let added: String = missing.iter().map(|d| format!(" \\\n  {d}")).collect();
    Some(format!("{rule}{added}\n{rest}"))
}

/// A path as Make and Ninja read it in a dependency file.
fn escape(path: &str) -> String {
    path.replace(' ', "\\ ")
        .replace('#', "\\#")
        .replace('$', "$$")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_dependency_file_is_found_as_clang_names_it() {
        let a = os(&[
            "-MD",
            "-MT",
            "k.o",
            "-MF",
            "dir/k.o.d",
            "-c",
            "k.cu",
            "-o",
            "k.o",
        ]);
        assert_eq!(of(&a), Some(PathBuf::from("dir/k.o.d")));
        assert_eq!(
            of(&os(&["-MFx.d", "-c", "k.cu"])),
            Some(PathBuf::from("x.d"))
        );
        assert_eq!(
            of(&os(&["-MMD", "-c", "k.cu", "-o", "obj/k.o"])),
            Some(PathBuf::from("obj/k.d"))
        );
        assert_eq!(of(&os(&["-c", "k.cu", "-o", "k.o"])), None);
    }

    #[test]
    fn deps_go_into_the_first_rule_once_and_phony_rules_stay() {
        let text = "k.o: k.cu \\\n  a.h \\\n  b.h\na.h:\nb.h:\n";
        let deps = [
            PathBuf::from("/s/winners.stamp"),
            PathBuf::from("/b dir/.r3/config"),
        ];
        let out = with_deps(text, &deps).unwrap();
        assert_eq!(
            out,
            "k.o: k.cu \\\n  a.h \\\n  b.h \\\n  /s/winners.stamp \\\n  /b\\ dir/.r3/config\na.h:\nb.h:\n"
        );
        assert_eq!(with_deps(&out, &deps), None);
        assert_eq!(
            with_deps("k.o: k.cu", &deps[..1]).unwrap(),
            "k.o: k.cu \\\n  /s/winners.stamp\n"
        );
        assert_eq!(with_deps("", &deps), None);
    }

    #[test]
    fn a_dependency_file_is_rewritten_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("k.o.d");
        std::fs::write(&d, "k.o: k.cu\n").unwrap();
        add(&d, &[PathBuf::from("/s/winners.stamp")]).unwrap();
        assert_eq!(
            std::fs::read_to_string(&d).unwrap(),
            "k.o: k.cu \\\n  /s/winners.stamp\n"
        );
    }
}
