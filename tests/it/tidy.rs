//! Tidy: the workspace's crate graph against ARCHITECTURE.md's crate table, the one place that
//! says which crate may use which. Cargo refuses only circles, so an arrow such as store → ir
//! would compile; this test refuses it, and keeps clap, cudarc, inkwell and llvm-sys in the
//! crates whose rows list them. The checks are functions of parsed data, tested below on
//! planted bad graphs as well as run on the real one.

use crate::support::{repo, skip};
use std::collections::{BTreeMap, BTreeSet};

/// The external crates that pin a crate to one place: the command line, the CUDA driver, LLVM.
const PINNING: &[&str] = &["clap", "cudarc", "inkwell", "llvm-sys"];

/// The header row's first cells, by which the table is found.
const HEADER: &str = "| crate | may depend on |";

/// One row of the crate table.
#[derive(Debug, Clone, Default, PartialEq)]
struct Row {
    /// The workspace crates it may depend on.
    crates: BTreeSet<String>,
    /// The crates of [`PINNING`] it may depend on.
    pinning: BTreeSet<String>,
}

/// The crate table, in its order (a crate's row lists only crates of rows above it).
#[derive(Debug, Default)]
struct Table {
    rows: Vec<(String, Row)>,
}

impl Table {
    fn row(&self, name: &str) -> Option<&Row> {
        self.rows.iter().find(|(n, _)| n == name).map(|(_, r)| r)
    }
}

/// One dependency of a workspace crate, as `cargo metadata` gives it.
#[derive(Debug, Clone)]
struct Dep {
    /// The package depended on (not the name it is renamed to).
    name: String,
    /// "normal", "dev" or "build".
    kind: String,
}

/// The workspace: each crate's manifest and dependencies.
#[derive(Debug, Default)]
struct Graph {
    crates: BTreeMap<String, (String, Vec<Dep>)>,
}

/// The backquoted names of a table cell (`—` or other text gives none).
fn names(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(|n| n.trim().to_owned())
        .collect()
}

/// Reads the crate table from ARCHITECTURE.md's text; Err says what is wrong with the table.
fn parse_table(doc: &str) -> Result<Table, String> {
    let mut lines = doc
        .lines()
        .skip_while(|l| !l.trim_start().starts_with(HEADER));
    if lines.next().is_none() {
        return Err(format!(
            "ARCHITECTURE.md has no crate table (a row starting `{HEADER}`)"
        ));
    }
    let mut table = Table::default();
    for line in lines
        .skip(1)
        .take_while(|l| l.trim_start().starts_with('|'))
    {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        let bad = |why: String| format!("ARCHITECTURE.md, crate table row `{line}`: {why}");
        if cells.len() < 3 {
            return Err(bad("fewer than 3 cells".into()));
        }
        let name = match names(cells[0]).as_slice() {
            [one] => one.clone(),
            _ => return Err(bad("the first cell names no crate, or several".into())),
        };
        if table.row(&name).is_some() {
            return Err(bad(format!("a second row for {name}")));
        }
        let mut row = Row::default();
        for dep in names(cells[1]) {
            if table.row(&dep).is_none() {
                return Err(bad(format!(
                    "{name} may depend on {dep}, which has no row above it; fix: a crate's \
                     row comes after the rows of every crate it may use (no arrow up, no \
                     circle)"
                )));
            }
            row.crates.insert(dep);
        }
        for ext in names(cells[2]) {
            if !PINNING.contains(&ext.as_str()) {
                return Err(bad(format!(
                    "`{ext}` in the third cell, which lists only {}",
                    PINNING.join(", ")
                )));
            }
            row.pinning.insert(ext);
        }
        table.rows.push((name, row));
    }
    if table.rows.is_empty() {
        return Err("ARCHITECTURE.md's crate table has no rows".into());
    }
    Ok(table)
}

/// The workspace from `cargo metadata --format-version 1 --no-deps` output.
fn parse_metadata(json: &str) -> Result<Graph, String> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("cargo metadata: {e}"))?;
    let mut graph = Graph::default();
    for p in v["packages"]
        .as_array()
        .ok_or("cargo metadata: no packages")?
    {
        let name = p["name"]
            .as_str()
            .ok_or("cargo metadata: a package without a name")?;
        let manifest = p["manifest_path"]
            .as_str()
            .unwrap_or("Cargo.toml")
            .to_owned();
        let deps = p["dependencies"]
            .as_array()
            .map(|deps| {
                deps.iter()
                    .map(|d| Dep {
                        name: d["name"].as_str().unwrap_or("").to_owned(),
                        kind: d["kind"].as_str().unwrap_or("normal").to_owned(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        graph.crates.insert(name.to_owned(), (manifest, deps));
    }
    Ok(graph)
}

/// Every way the workspace breaks the table, one line each, naming the manifest and the fix.
fn violations(table: &Table, graph: &Graph) -> Vec<String> {
    let mut out = Vec::new();
    for (name, (manifest, deps)) in &graph.crates {
        let Some(row) = table.row(name) else {
            out.push(format!(
                "{manifest}: crate {name} has no row in ARCHITECTURE.md's crate table; fix: add \
                 one saying which crates it may use"
            ));
            continue;
        };
        for d in deps {
            let kind = match d.kind.as_str() {
                "normal" => String::new(),
                k => format!(" ({k}-dependency)"),
            };
            if graph.crates.contains_key(&d.name) && !row.crates.contains(&d.name) {
                out.push(format!(
                    "{manifest}: {name} depends on {}{kind}, which ARCHITECTURE.md's crate table \
                     does not allow (its row: {}); fix: drop the dependency, or change the table \
                     with the reason",
                    d.name,
                    listed(&row.crates)
                ));
            }
            if PINNING.contains(&d.name.as_str()) && !row.pinning.contains(&d.name) {
                let users: BTreeSet<String> = table
                    .rows
                    .iter()
                    .filter(|(_, r)| r.pinning.contains(&d.name))
                    .map(|(n, _)| n.clone())
                    .collect();
                out.push(format!(
                    "{manifest}: {name} depends on {}{kind}, which ARCHITECTURE.md's crate table \
                     lets {} use; fix: move the code that needs it to such a crate, or change \
                     the table with the reason",
                    d.name,
                    if users.is_empty() {
                        "no crate".to_owned()
                    } else {
                        format!("only {}", listed(&users))
                    }
                ));
            }
        }
    }
    for (name, _) in &table.rows {
        if !graph.crates.contains_key(name) {
            out.push(format!(
                "ARCHITECTURE.md's crate table has a row for {name}, which is no crate of the \
                 workspace; fix: remove the row, or rename it to the crate's new name"
            ));
        }
    }
    out
}

fn listed(set: &BTreeSet<String>) -> String {
    if set.is_empty() {
        "no crate".into()
    } else {
        set.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

#[test]
fn every_crate_depends_only_on_what_the_architecture_table_allows() {
    let doc = std::fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let table = parse_table(&doc).unwrap_or_else(|e| panic!("{e}"));
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = match std::process::Command::new(&cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--no-deps",
        ])
        .current_dir(repo())
        .output()
    {
        Ok(out) => out,
        Err(e) => {
            skip("cargo", &format!("{}: {e}", cargo.to_string_lossy()));
            return;
        }
    };
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let graph = parse_metadata(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert!(
        graph.crates.contains_key("r3") && graph.crates.contains_key("r3-ir"),
        "cargo metadata lists {:?}",
        graph.crates.keys()
    );
    let v = violations(&table, &graph);
    assert!(v.is_empty(), "{}", v.join("\n"));
}

// ---- the checks on planted data --------------------------------------------------------------

const TABLE: &str = "Prose before.

| crate | may depend on | may use, of clap, cudarc, inkwell, llvm-sys | why those |
|---|---|---|---|
| `low` | — | — | the bottom |
| `store` | `low` | — | formats |
| `ir` | `low` | `inkwell`, `llvm-sys` | LLVM |
| `top` | `store`, `ir`, `low` | `clap`, `inkwell` | the command line |

Prose after, `not-a-row`.
";

fn graph(crates: &[(&str, &[(&str, &str)])]) -> Graph {
    Graph {
        crates: crates
            .iter()
            .map(|(name, deps)| {
                let deps = deps
                    .iter()
                    .map(|(d, kind)| Dep {
                        name: (*d).into(),
                        kind: (*kind).into(),
                    })
                    .collect();
                ((*name).into(), (format!("{name}/Cargo.toml"), deps))
            })
            .collect(),
    }
}

/// The graph the planted table allows, with its external crates.
fn allowed() -> Vec<(&'static str, &'static [(&'static str, &'static str)])> {
    vec![
        ("low", &[("serde", "normal")]),
        ("store", &[("low", "normal"), ("tempfile", "dev")]),
        (
            "ir",
            &[
                ("low", "normal"),
                ("inkwell", "normal"),
                ("llvm-sys", "normal"),
            ],
        ),
        (
            "top",
            &[
                ("ir", "normal"),
                ("store", "normal"),
                ("clap", "normal"),
                ("inkwell", "dev"),
            ],
        ),
    ]
}

#[test]
fn the_table_is_read_by_its_header_with_its_names_and_order() {
    let t = parse_table(TABLE).unwrap();
    let order: Vec<&str> = t.rows.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(order, ["low", "store", "ir", "top"]);
    assert!(t.row("low").unwrap().crates.is_empty());
    assert_eq!(
        t.row("top").unwrap().crates,
        ["store", "ir", "low"].map(String::from).into()
    );
    assert_eq!(
        t.row("ir").unwrap().pinning,
        ["inkwell", "llvm-sys"].map(String::from).into()
    );
    assert!(t.row("not-a-row").is_none());
    assert!(violations(&t, &graph(&allowed())).is_empty());
}

#[test]
fn a_planted_arrow_the_table_does_not_list_fails_naming_both_crates() {
    let t = parse_table(TABLE).unwrap();
    let mut g = allowed();
    // The store reads IR: it compiles (no circle), and the table forbids it.
    g[1] = ("store", &[("low", "normal"), ("ir", "normal")]);
    let v = violations(&t, &graph(&g));
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(
        v[0].starts_with("store/Cargo.toml: store depends on ir,")
            && v[0].contains("(its row: low)")
            && v[0].contains("fix:"),
        "{}",
        v[0]
    );
    // A dev-dependency is a dependency too.
    g[1] = ("store", &[("low", "normal"), ("top", "dev")]);
    let v = violations(&t, &graph(&g));
    assert!(
        v.len() == 1 && v[0].contains("depends on top (dev-dependency)"),
        "{v:#?}"
    );
}

#[test]
fn a_planted_pinning_crate_outside_its_rows_fails() {
    let t = parse_table(TABLE).unwrap();
    let mut g = allowed();
    // clap leaks into ir (as it once did, through `--mutate`'s ValueEnum).
    g[2] = (
        "ir",
        &[("low", "normal"), ("inkwell", "normal"), ("clap", "normal")],
    );
    // cudarc, which no row lists, in the bottom crate.
    g[0] = ("low", &[("cudarc", "build")]);
    let v = violations(&t, &graph(&g));
    assert_eq!(v.len(), 2, "{v:#?}");
    assert!(
        v.iter()
            .any(|l| l.starts_with("ir/Cargo.toml: ir depends on clap,")
                && l.contains("lets only top use")),
        "{v:#?}"
    );
    assert!(
        v.iter()
            .any(|l| l.contains("low depends on cudarc (build-dependency)")
                && l.contains("lets no crate use")),
        "{v:#?}"
    );
}

#[test]
fn a_crate_without_a_row_and_a_row_without_a_crate_fail() {
    let t = parse_table(TABLE).unwrap();
    let mut g = allowed();
    g.push(("record", &[("low", "normal")]));
    g.retain(|(n, _)| *n != "store");
    // `top` still names `store`, which is no crate of this workspace any more: not a
    // dependency cargo would list, so only the row is reported.
    g[2].1 = &[("ir", "normal")];
    let v = violations(&t, &graph(&g));
    assert_eq!(v.len(), 2, "{v:#?}");
    assert!(v[0].contains("crate record has no row"), "{v:#?}");
    assert!(
        v[1].contains("a row for store, which is no crate"),
        "{v:#?}"
    );
}

#[test]
fn a_table_with_an_arrow_up_or_a_foreign_crate_is_refused() {
    let up = TABLE.replace("| `store` | `low` |", "| `store` | `low`, `top` |");
    let e = parse_table(&up).unwrap_err();
    assert!(
        e.contains("store may depend on top, which has no row above it"),
        "{e}"
    );
    let foreign = TABLE.replace("`clap`, `inkwell`", "`clap`, `tokio`");
    let e = parse_table(&foreign).unwrap_err();
    assert!(e.contains("`tokio`"), "{e}");
    let e = parse_table("no table here").unwrap_err();
    assert!(e.contains("no crate table"), "{e}");
    let twice = TABLE.replace("| `ir` | `low` |", "| `low` | `low` |");
    assert!(parse_table(&twice).is_err());
}

#[test]
fn cargo_metadata_is_read_by_package_name_and_kind() {
    let json = r#"{"packages":[
        {"name":"a","manifest_path":"/w/a/Cargo.toml","dependencies":[
            {"name":"b","rename":"bee","kind":null},
            {"name":"clap","kind":"dev"}]},
        {"name":"b","manifest_path":"/w/b/Cargo.toml","dependencies":[]}]}"#;
    let g = parse_metadata(json).unwrap();
    let (manifest, deps) = &g.crates["a"];
    assert_eq!(manifest, "/w/a/Cargo.toml");
    let got: Vec<(&str, &str)> = deps
        .iter()
        .map(|d| (d.name.as_str(), d.kind.as_str()))
        .collect();
    assert_eq!(got, [("b", "normal"), ("clap", "dev")]);
    assert!(g.crates["b"].1.is_empty());
}
