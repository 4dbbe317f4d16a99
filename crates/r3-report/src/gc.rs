//! `r3 gc`'s lines: what a collection removes (or would), with the bytes, and the old
//! versions it keeps, with why.

use crate::store::gc::{Plan, Removal, What};
use std::path::Path;

/// Bytes for people: `812 B`, `4.0 KiB`, `1.2 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// The plan (`removed`: false) or what a collection removed (true), one line per item but the
/// recordings, one line per kernel, then the old versions kept and the total. Paths are the
/// store's own (relative to `store`).
pub fn render(plan: &Plan, done: Option<&[Removal]>, store: &Path) -> String {
    let items: &[Removal] = done.unwrap_or(&plan.removals);
    let rel = |p: &Path| p.strip_prefix(store).unwrap_or(p).display().to_string();
    let mut rows: Vec<[String; 4]> = Vec::new();
    let mut recordings: Vec<(String, Vec<&Removal>)> = Vec::new();
    for r in items {
        if r.what == What::Recording {
            match recordings.iter_mut().find(|(k, _)| *k == r.kernel) {
                Some((_, v)) => v.push(r),
                None => recordings.push((r.kernel.clone(), vec![r])),
            }
            continue;
        }
        rows.push([
            r.what.words().to_owned(),
            rel(&r.path),
            bytes(r.bytes),
            r.kernel.clone(),
        ]);
    }
    // Recordings first, as they go first.
    let grouped: Vec<[String; 4]> = recordings
        .iter()
        .map(|(kernel, rs)| {
            let first = rel(&rs[0].path);
            let place = match rs.len() {
                1 => first,
                n => format!("{first} and {} more", n - 1),
            };
            [
                if rs.len() == 1 {
                    "recording".to_owned()
                } else {
                    format!("{} recordings", rs.len())
                },
                place,
                bytes(rs.iter().map(|r| r.bytes).sum()),
                kernel.clone(),
            ]
        })
        .collect();
    let rows: Vec<[String; 4]> = grouped.into_iter().chain(rows).collect();
    let mut out = String::new();
    if rows.is_empty() {
        out += "nothing to remove: every kernel in the store is in a current build, or kept\n";
    } else {
        out += if done.is_some() {
            "removed:\n"
        } else {
            "would remove (a dry run; `r3 gc --yes` removes them):\n"
        };
        let w = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
        let (a, b, c) = (w(0), w(1), w(2));
        for r in &rows {
            let line = format!("  {:<a$}  {:<b$}  {:>c$}  {}", r[0], r[1], r[2], r[3]);
            out += line.trim_end();
            out.push('\n');
        }
    }
    for k in &plan.kept {
        out += &format!(
            "kept: {} [{}]: {}\n",
            crate::store::identity::short_name(&k.name),
            k.hash.get(..8).unwrap_or(&k.hash),
            k.why
        );
    }
    let total: u64 = items.iter().map(|r| r.bytes).sum();
    if !items.is_empty() {
        out += &format!(
            "{} {} item(s), {}\n",
            if done.is_some() { "freed:" } else { "total:" },
            items.len(),
            bytes(total)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_as_people_write_them() {
        assert_eq!(bytes(812), "812 B");
        assert_eq!(bytes(4096), "4.0 KiB");
        assert_eq!(bytes(3 * 1024 * 1024 * 1024 / 2), "1.5 GiB");
    }
}
