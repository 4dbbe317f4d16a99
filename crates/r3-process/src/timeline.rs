//! Where r3's processes spend a search's time, for a person (or a benchmark) asking why a
//! kernel took as long as it did: with `R3_TIMELINE=<file>`, every span a process marks is
//! appended to the file as one JSON line when it ends:
//!
//! ```text
//! {"pid":123,"what":"worker.open","about":"0a55c632df3dad11","start_ms":1795761899236.2,"ms":412.7}
//! ```
//!
//! The parent (`r3 tune`) and its children (replay workers, lowering) write to the same file,
//! each line in one `write` on a file opened for appending, so lines of different processes do
//! not interleave. Without the variable a span costs one look at a cached `Option`.
//! `scripts/timeline-summary` sums a file by span.

use std::io::Write;
use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The file spans go to, read once per process.
fn file() -> Option<&'static std::path::Path> {
    static FILE: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();
    FILE.get_or_init(|| {
        std::env::var_os("R3_TIMELINE")
            .filter(|v| !v.is_empty())
            .map(Into::into)
    })
    .as_deref()
}

/// A span under way; it is written when dropped.
pub struct Span {
    what: &'static str,
    about: String,
    wall_ms: f64,
    start: Instant,
}

/// Starts a span named `what` (a dotted phase: `worker.open`, `confirm.context`) about
/// `about` (a kernel or recording); None, at no cost, where no timeline is asked for.
pub fn span(what: &'static str, about: impl FnOnce() -> String) -> Option<Span> {
    file()?;
    let wall_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64() * 1e3);
    Some(Span {
        what,
        about: about(),
        wall_ms,
        start: Instant::now(),
    })
}

impl Drop for Span {
    fn drop(&mut self) {
        let Some(path) = file() else { return };
        let line = serde_json::json!({
            "pid": std::process::id(),
            "what": self.what,
            "about": self.about,
            "start_ms": self.wall_ms,
            "ms": self.start.elapsed().as_secs_f64() * 1e3,
        });
        // A diagnostic never fails the work it watches: a file that cannot be written loses
        // its lines.
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = f.write_all(format!("{line}\n").as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_span_is_nothing_without_a_timeline() {
        // The test process never sets R3_TIMELINE (the integration tests set it on children).
        if std::env::var_os("R3_TIMELINE").is_none() {
            assert!(super::span("x", || unreachable!("not asked without a file")).is_none());
        }
    }
}
