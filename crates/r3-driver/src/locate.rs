//! Where a kernel is defined, when its IR carries no debug info (the capture plugin sees the
//! user's own flags, usually without `-g`): found in the source text of the translation unit
//! and of the headers it includes through its `-I` directories.
//!
//! A kernel named through a macro is not found; it keeps no location rather than a wrong one.

use crate::kernel::{KernelModule, SourceLoc};
use std::collections::{HashSet, VecDeque};
use std::path::{Component, Path, PathBuf};

/// More would mean scanning a library's headers, where the kernels of this TU rarely are.
const MAX_FILES: usize = 64;

/// Fills the source location of every kernel that has none.
pub fn fill_missing(kernels: &mut [KernelModule], source: &Path, args: &[String], cwd: &Path) {
    if kernels.iter().all(|k| k.signature.source.is_some()) {
        return;
    }
    let files = reachable_files(source, &include_dirs(args, cwd));
    for k in kernels.iter_mut().filter(|k| k.signature.source.is_none()) {
        let name = crate::kernel::unqualified_name(&k.signature.demangled);
        k.signature.source = files.iter().find_map(|(path, text)| {
            definition_line(text, &name).map(|line| SourceLoc {
                file: path.display().to_string(),
                line,
            })
        });
    }
}

/// `-I`, `-iquote` and `--include-directory` directories of a command, made absolute.
pub fn include_dirs(args: &[String], cwd: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let value = match a.as_str() {
            "-I" | "-iquote" | "--include-directory" => it.next().cloned(),
            _ => ["-I", "-iquote", "--include-directory="]
                .iter()
                .find_map(|p| a.strip_prefix(p))
                .filter(|v| !v.is_empty())
                .map(str::to_owned),
        };
        if let Some(v) = value {
            dirs.push(normalize(&cwd.join(v)));
        }
    }
    dirs
}

/// The file and the non-system headers it includes, breadth first, with their text.
fn reachable_files(source: &Path, dirs: &[PathBuf]) -> Vec<(PathBuf, String)> {
    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([normalize(source)]);
    let mut out = Vec::new();
    while let Some(path) = queue.pop_front() {
        if out.len() >= MAX_FILES || !seen.insert(path.clone()) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let here = path.parent().map(Path::to_path_buf).unwrap_or_default();
        for (name, quoted) in includes(&text) {
            let local = quoted.then(|| here.join(&name));
            let found = local
                .into_iter()
                .chain(dirs.iter().map(|d| d.join(&name)))
                .find(|p| p.is_file());
            if let Some(p) = found {
                queue.push_back(normalize(&p));
            }
        }
        out.push((path, strip_comments(&text)));
    }
    out
}

/// `#include "name"` (true) and `#include <name>` (false) lines.
fn includes(text: &str) -> Vec<(String, bool)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix('#')?.trim_start();
            let rest = rest.strip_prefix("include")?.trim_start();
            let (open, close, quoted) = match rest.chars().next()? {
                '"' => ('"', '"', true),
                '<' => ('<', '>', false),
                _ => return None,
            };
            let inner = rest.strip_prefix(open)?;
            Some((inner[..inner.find(close)?].to_owned(), quoted))
        })
        .collect()
}

/// The 1-based line of `name`'s `__global__` definition (else declaration) in `text`.
pub fn definition_line(text: &str, name: &str) -> Option<u32> {
    let bytes = text.as_bytes();
    let mut declaration = None;
    let mut from = 0;
    while let Some(off) = text[from..].find(name) {
        let at = from + off;
        from = at + name.len();
        let word_start = at == 0 || !is_ident(bytes[at - 1]);
        let word_end = bytes.get(from).is_none_or(|&b| !is_ident(b));
        if !(word_start && word_end && is_kernel_declarator(text, at)) {
            continue;
        }
        let line = 1 + text[..at].matches('\n').count() as u32;
        match after_parameters(text, from) {
            Some(b'{') => return Some(line),
            Some(b';') => {
                declaration.get_or_insert(line);
            }
            _ => {}
        }
    }
    declaration
}

/// Whether the declaration that `at` is in says `__global__`.
fn is_kernel_declarator(text: &str, at: usize) -> bool {
    let start = text[..at].rfind([';', '{', '}']).map_or(0, |i| i + 1);
    let decl = &text[start..at];
    decl.contains("__global__") || decl.contains("global))")
}

/// The first character after a name's (template arguments and) parameter list.
fn after_parameters(text: &str, from: usize) -> Option<u8> {
    let bytes = text.as_bytes();
    let mut i = skip_space(bytes, from);
    if bytes.get(i) == Some(&b'<') {
        i = skip_balanced(bytes, i, b'<', b'>')?;
        i = skip_space(bytes, i);
    }
    if bytes.get(i) != Some(&b'(') {
        return None;
    }
    i = skip_balanced(bytes, i, b'(', b')')?;
    bytes.get(skip_space(bytes, i)).copied()
}

fn skip_space(bytes: &[u8], mut i: usize) -> usize {
    while bytes.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
        i += 1;
    }
    i
}

/// The index just past the bracket that closes the one at `i`.
fn skip_balanced(bytes: &[u8], i: usize, open: u8, close: u8) -> Option<usize> {
    let mut depth = 0;
    for (j, &b) in bytes.iter().enumerate().skip(i) {
        if b == open {
            depth += 1;
        } else if b == close {
            depth -= 1;
            if depth == 0 {
                return Some(j + 1);
            }
        }
    }
    None
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Comments become spaces (newlines kept), so lines still count and commented-out code is
/// not mistaken for a definition.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('/', Some('/')) => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut prev = ' ';
                for c in chars.by_ref() {
                    out.push(if c == '\n' { '\n' } else { ' ' });
                    if prev == '*' && c == '/' {
                        break;
                    }
                    prev = c;
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// `a/./b/../c` → `a/c`, without touching the file system (as clang names files).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_definition_not_the_declaration_or_a_call() {
        let text = strip_comments(
            "__global__ void k(int);\n\
             // __global__ void k(int) {}\n\
             void host() { k<<<1, 1>>>(3); }\n\
             template <typename T>\n\
             __global__ void\n\
             __launch_bounds__(256)\n\
             k(int n)\n\
             {\n}\n",
        );
        assert_eq!(definition_line(&text, "k"), Some(7));
        assert_eq!(definition_line("__global__ void k(int);", "k"), Some(1));
        assert_eq!(definition_line("void k(int) {}", "k"), None);
        assert_eq!(definition_line("__global__ void kk(int) {}", "k"), None);
    }

    #[test]
    fn include_dirs_in_both_spellings_relative_to_cwd() {
        let args: Vec<String> = ["-I", "inc", "-I/abs", "-iquote", "q", "-Ix/../y"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let dirs = include_dirs(&args, Path::new("/w"));
        let want: Vec<PathBuf> = ["/w/inc", "/abs", "/w/q", "/w/y"]
            .iter()
            .map(PathBuf::from)
            .collect();
        assert_eq!(dirs, want);
    }

    #[test]
    fn kernels_in_included_headers_are_found() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("inc/lib")).unwrap();
        std::fs::write(
            dir.path().join("inc/lib/k.cuh"),
            "#pragma once\n\n__global__ void scale(float *x) { *x *= 2; }\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("main.cu"),
            "#include <lib/k.cuh>\n#include <cuda_runtime.h>\nint main() {}\n",
        )
        .unwrap();
        let files = reachable_files(&dir.path().join("main.cu"), &[dir.path().join("inc")]);
        let found: Vec<_> = files
            .iter()
            .filter_map(|(p, t)| definition_line(t, "scale").map(|l| (p.clone(), l)))
            .collect();
        assert_eq!(found, vec![(dir.path().join("inc/lib/k.cuh"), 3)]);
    }
}
