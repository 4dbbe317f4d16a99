//! README's status table says "simulated" where its evidence is a simulated search (`r3 tune
//! --simulate`: a landscape table answered every trial, no GPU measured anything), so that a
//! reader does not take it for a measurement (issue 64, item 4).

use crate::support::repo;

/// Status rows (by the start of their first cell) whose claims rest on simulated searches, and
/// where those searches run.
const SIMULATED_EVIDENCE: [(&str, &str); 2] = [
    // "the applied build carries the winner's PTX": the winner of `tune --simulate`.
    ("apply (", "tests/it/apply.rs"),
    // "kill -9 ×100 during tune": crash-campaign kills `tune --simulate`.
    ("safety campaign (", "scripts/crash-campaign"),
];

#[test]
fn status_rows_resting_on_simulated_searches_say_so() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    for (row, source) in SIMULATED_EVIDENCE {
        let evidence = std::fs::read_to_string(repo().join(source)).unwrap();
        assert!(
            evidence.contains("tune --simulate") || evidence.contains("\"--simulate\""),
            "{source} no longer simulates: if README's '{row}' row is now measured, say so there and drop it from this list"
        );
        let line = readme
            .lines()
            .find(|l| l.starts_with(&format!("| {row}")))
            .unwrap_or_else(|| panic!("README has no status row '{row}'"));
        assert!(
            line.contains("simulated"),
            "README's '{row}' row rests on {source}'s simulated searches and must say so: {line}"
        );
    }
}
