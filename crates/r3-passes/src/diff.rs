//! Pipelines as pass lists for reports: preset expansion, the diff of a pipeline against
//! clang's O3 pipeline, and the ablation candidates that measure each pass's importance.

use crate::candidate::Candidate;
use crate::catalog::{Catalog, CatalogError};
use crate::pipeline::{ParseError, Pipeline, Step};
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum PassesError {
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
}

/// Parses a pipeline text and replaces every top-level `default<On>` element by the preset's
/// full pipeline (passes/presets.toml), so that a pipeline is always a list of single passes.
pub fn expand(text: &str) -> Result<Pipeline, PassesError> {
    let cat = Catalog::builtin()?;
    let p = Pipeline::parse(text)?;
    let mut next_id = p
        .steps
        .iter()
        .flat_map(|s| s.scope.iter().map(|sc| sc.id + 1))
        .max()
        .unwrap_or(0);
    let mut steps = Vec::new();
    for s in p.steps {
        let preset = (s.scope.is_empty() && s.name == "default")
            .then(|| cat.presets.iter().find(|pr| pr.default_text == s.text()))
            .flatten();
        match preset {
            Some(pr) => {
                let mut inner = Pipeline::parse(&pr.pipeline)?;
                let base = next_id;
                for st in &mut inner.steps {
                    for sc in &mut st.scope {
                        sc.id += base;
                        next_id = next_id.max(sc.id + 1);
                    }
                }
                steps.extend(inner.steps);
            }
            None => steps.push(s),
        }
    }
    Ok(Pipeline { steps })
}

/// A step as one line: its adaptors, then the pass (`function<eager-inv>/loop-mssa/licm`).
pub fn step_path(s: &Step) -> String {
    let mut parts: Vec<&str> = s.scope.iter().map(|sc| sc.header.as_str()).collect();
    let text = s.text();
    parts.push(&text);
    parts.join("/")
}

/// One line of a pipeline diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum DiffOp {
    /// A run of steps both pipelines have, in the same order.
    Same { count: usize },
    /// In O3, not in the best pipeline.
    Removed { step: String },
    /// In the best pipeline, not in O3.
    Added { step: String },
    /// The same pass at this place, with other parameters or adaptors.
    Changed { from: String, to: String },
}

/// The edit script turning pipeline `a` into `b` (longest common subsequence of step paths).
pub fn diff(a: &Pipeline, b: &Pipeline) -> Vec<DiffOp> {
    let a: Vec<String> = a.steps.iter().map(step_path).collect();
    let b: Vec<String> = b.steps.iter().map(step_path).collect();
    let (n, m) = (a.len(), b.len());
    // lcs[i][j]: length of the LCS of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut raw = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            match raw.last_mut() {
                Some(DiffOp::Same { count }) => *count += 1,
                _ => raw.push(DiffOp::Same { count: 1 }),
            }
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            raw.push(DiffOp::Added { step: b[j].clone() });
            j += 1;
        } else {
            raw.push(DiffOp::Removed { step: a[i].clone() });
            i += 1;
        }
    }
    pair_changes(raw)
}

fn pass_name(path: &str) -> &str {
    let last = path.rsplit('/').next().unwrap_or(path);
    last.split('<').next().unwrap_or(last)
}

/// Within each run of removals and additions, a removal and an addition of the same pass
/// become one `Changed`, placed where the removal was.
fn pair_changes(raw: Vec<DiffOp>) -> Vec<DiffOp> {
    let mut out = Vec::new();
    let mut run: Vec<DiffOp> = Vec::new();
    let flush = |run: &mut Vec<DiffOp>, out: &mut Vec<DiffOp>| {
        let mut added: Vec<Option<String>> = run
            .iter()
            .filter_map(|o| match o {
                DiffOp::Added { step } => Some(Some(step.clone())),
                _ => None,
            })
            .collect();
        let mut merged = Vec::new();
        for o in run.drain(..) {
            if let DiffOp::Removed { step } = o {
                let hit = added.iter_mut().find(|a| {
                    a.as_deref()
                        .is_some_and(|a| pass_name(a) == pass_name(&step))
                });
                match hit {
                    Some(a) => merged.push(DiffOp::Changed {
                        from: step,
                        to: a.take().unwrap(),
                    }),
                    None => merged.push(DiffOp::Removed { step }),
                }
            }
        }
        merged.extend(
            added
                .into_iter()
                .flatten()
                .map(|step| DiffOp::Added { step }),
        );
        out.extend(merged);
    };
    for o in raw {
        if matches!(o, DiffOp::Same { .. }) {
            flush(&mut run, &mut out);
            out.push(o);
        } else {
            run.push(o);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// A pipeline as a message shows it: quoted as written when it is short; otherwise as its
/// edits of -O3's pipeline (`default<O3>` expanded), since a candidate is -O3's 5 KB of text
/// with a few edits and the whole text would bury the message. The edits are `-pass at N`
/// (-O3's pass N, counting from 1, left out), `+pass at N` (pass N of this pipeline, not in
/// -O3) and `~pass<params> at N` (pass N, -O3's with other parameters or adaptors); at most
/// `most` of them, then how many more: "312 passes, differing from -O3 in:
/// ~loop-vectorize<a;;b> at 201, -instcombine at 12, and 2 more". A text r3 cannot parse is
/// quoted cut in the middle. Only a quoted text starts with `'`.
pub fn brief(text: &str, most: usize) -> String {
    /// Longest text quoted whole; longest pass text in an edit.
    const WHOLE: usize = 160;
    const PASS: usize = 100;
    fn cut(s: &str, keep: usize) -> String {
        let n = s.chars().count();
        if n <= keep {
            return s.to_owned();
        }
        let head: String = s.chars().take(keep * 2 / 3).collect();
        let tail: String = s.chars().skip(n - keep / 3).collect();
        format!("{head}…{tail}")
    }
    if text.chars().count() <= WHOLE {
        return format!("'{text}'");
    }
    let (p, o3) = match (expand(text), expand("default<O3>")) {
        (Ok(p), Ok(o3)) => (p, o3),
        _ => return format!("'{}' ({} characters)", cut(text, WHOLE), text.len()),
    };
    let last = |path: &str| cut(path.rsplit('/').next().unwrap_or(path), PASS);
    // Positions: i in -O3, j in this pipeline, both counting from 1 as people count passes.
    let (mut i, mut j) = (1, 1);
    let mut edits = Vec::new();
    for op in diff(&o3, &p) {
        match op {
            DiffOp::Same { count } => {
                i += count;
                j += count;
            }
            DiffOp::Removed { step } => {
                edits.push(format!("-{} at {i}", last(&step)));
                i += 1;
            }
            DiffOp::Added { step } => {
                edits.push(format!("+{} at {j}", last(&step)));
                j += 1;
            }
            DiffOp::Changed { to, .. } => {
                edits.push(format!("~{} at {j}", last(&to)));
                i += 1;
                j += 1;
            }
        }
    }
    let n = p.steps.len();
    if edits.is_empty() {
        return format!("{n} passes, -O3's own");
    }
    let more = edits.len().saturating_sub(most.max(1));
    edits.truncate(most.max(1));
    if more > 0 {
        edits.push(format!("and {more} more"));
    }
    format!("{n} passes, differing from -O3 in: {}", edits.join(", "))
}

/// Counts of a diff: (removed, added, changed).
pub fn diff_counts(d: &[DiffOp]) -> (usize, usize, usize) {
    let mut c = (0, 0, 0);
    for o in d {
        match o {
            DiffOp::Removed { .. } => c.0 += 1,
            DiffOp::Added { .. } => c.1 += 1,
            DiffOp::Changed { .. } => c.2 += 1,
            DiffOp::Same { .. } => {}
        }
    }
    c
}

/// The best pipeline with one pass removed: one candidate of a pass-importance measurement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ablation {
    /// Position of the removed pass in the (preset-expanded) pipeline.
    pub index: usize,
    /// The removed pass, with its adaptors (`function<eager-inv>/sroa<modify-cfg>`).
    pub pass: String,
    pub candidate: Candidate,
}

/// The candidates that measure each pass's importance in `best`: for every pass of its
/// pipeline (`default<On>` expanded), `best` with that one pass removed, all other knobs kept.
///
/// `r3 report` reads their outcomes from the trials database by exact candidate match (so
/// tune must record these very candidates); a pass whose ablation was never measured is shown
/// as "not measured". To produce them, evaluate the returned candidates as trials of the same
/// kernel and GPU (e.g. as a final round of `r3 tune` after the search).
///
/// A specialized `best` also gets one ablation per folded value (`folded arg2`, `folded
/// block`, `folded grid`), after the passes: `best` without that value folded, so the report
/// shows which constant made the difference.
pub fn ablations(best: &Candidate) -> Result<Vec<Ablation>, PassesError> {
    let p = expand(&best.pipeline)?;
    let mut out: Vec<Ablation> = (0..p.steps.len())
        .map(|i| {
            let mut q = p.clone();
            let removed = q.steps.remove(i);
            Ablation {
                index: i,
                pass: step_path(&removed),
                candidate: Candidate {
                    pipeline: q.render(),
                    ..best.clone()
                },
            }
        })
        .collect();
    if let Some(s) = &best.specialize {
        let without = |s: crate::candidate::Specialize| Candidate {
            specialize: (s != Default::default()).then_some(s),
            ..best.clone()
        };
        let mut folded: Vec<(String, Candidate)> = (0..s.args.len())
            .map(|i| {
                let mut t = s.clone();
                let a = t.args.remove(i);
                (format!("folded arg{}", a.index), without(t))
            })
            .collect();
        if s.block.is_some() {
            let t = crate::candidate::Specialize {
                block: None,
                ..s.clone()
            };
            folded.push(("folded block".into(), without(t)));
        }
        if s.grid.is_some() {
            let t = crate::candidate::Specialize {
                grid: None,
                ..s.clone()
            };
            folded.push(("folded grid".into(), without(t)));
        }
        let first = out.len();
        out.extend(
            folded
                .into_iter()
                .enumerate()
                .map(|(j, (pass, candidate))| Ablation {
                    index: first + j,
                    pass,
                    candidate,
                }),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_specialized_best_is_ablated_value_by_value_after_its_passes() {
        let best: Candidate = serde_json::from_value(serde_json::json!({
            "pipeline": "function(sroa,instcombine)",
            "specialize": {"args": [{"index": 1, "hex": "0004"}, {"index": 3, "hex": "01"}],
                           "block": [256, 1, 1]}
        }))
        .unwrap();
        let a = ablations(&best).unwrap();
        let names: Vec<&str> = a.iter().map(|a| a.pass.as_str()).collect();
        assert_eq!(
            names,
            [
                "function/sroa",
                "function/instcombine",
                "folded arg1",
                "folded arg3",
                "folded block"
            ]
        );
        let s = a[2].candidate.specialize.as_ref().unwrap();
        assert_eq!(
            (s.args.len(), s.args[0].index, s.block),
            (1, 3, Some([256, 1, 1]))
        );
        assert_eq!(a[2].candidate.pipeline, best.pipeline);
        // The last folded value gone: no specialization at all.
        let one: Candidate = serde_json::from_value(serde_json::json!({
            "pipeline": "function(sroa)", "specialize": {"grid": [4, 1, 1]}
        }))
        .unwrap();
        assert_eq!(ablations(&one).unwrap()[1].candidate.specialize, None);
    }

    fn p(t: &str) -> Pipeline {
        Pipeline::parse(t).unwrap()
    }

    #[test]
    fn diff_finds_removed_added_and_changed() {
        let a = p("function(sroa,instcombine,licm<x>),globaldce");
        let b = p("function(sroa,licm<y>,gvn),globaldce");
        let d = diff(&a, &b);
        assert_eq!(
            d,
            vec![
                DiffOp::Same { count: 1 },
                DiffOp::Removed {
                    step: "function/instcombine".into()
                },
                DiffOp::Changed {
                    from: "function/licm<x>".into(),
                    to: "function/licm<y>".into()
                },
                DiffOp::Added {
                    step: "function/gvn".into()
                },
                DiffOp::Same { count: 1 },
            ]
        );
        assert_eq!(diff_counts(&d), (1, 1, 1));
        assert_eq!(diff(&a, &a), vec![DiffOp::Same { count: 4 }]);
    }

    /// Issue 36, item 7: a rejected candidate is -O3's 5 KB with an edit or two; its message
    /// names the edits and their places, not the whole text.
    #[test]
    fn a_long_pipeline_is_shown_briefly_as_its_edits_of_o3() {
        let o3 = expand("default<O3>").unwrap();
        let mut p = o3.clone();
        let lv = p
            .steps
            .iter()
            .position(|s| s.name == "loop-vectorize")
            .unwrap();
        p.steps[lv].params = vec![
            "no-interleave-forced-only".into(),
            String::new(),
            "vectorize-forced-only".into(),
        ];
        let gone = p
            .steps
            .iter()
            .position(|s| s.name == "instcombine")
            .unwrap();
        let removed = p.steps.remove(gone);
        let text = p.render();
        assert!(text.len() > 2000, "{}", text.len());
        let b = brief(&text, 6);
        assert!(b.len() < 300, "{b}");
        assert!(b.starts_with(&format!(
            "{} passes, differing from -O3 in: ",
            p.steps.len()
        )));
        assert!(
            b.contains(&format!("-{} at {}", removed.text(), gone + 1)),
            "{b}"
        );
        // Its place in this pipeline: one pass earlier, the instcombine before it being gone.
        assert!(
            b.contains(&format!(
                "~loop-vectorize<no-interleave-forced-only;;vectorize-forced-only> at {}",
                lv
            )),
            "{b}"
        );
        assert!(!b.contains("and "), "{b}");

        // Many edits: the first few, then how many more; each edit cut to its head and tail.
        let mut many = o3.clone();
        for s in many.steps.iter_mut().filter(|s| s.name == "simplifycfg") {
            s.params = vec!["x".repeat(200)];
        }
        let b = brief(&many.render(), 3);
        assert!(b.len() < 500, "{b}");
        assert!(b.contains("~simplifycfg<xxx") && b.contains('…'), "{b}");
        assert!(b.contains(", and ") && b.ends_with(" more"), "{b}");

        assert_eq!(
            brief(&o3.render(), 6),
            format!("{} passes, -O3's own", o3.steps.len())
        );
        assert_eq!(brief("function(sroa)", 6), "'function(sroa)'");
        // Not a pipeline r3 reads: quoted, cut in the middle, its length said.
        let junk = format!("function({}", "sroa,".repeat(100));
        let b = brief(&junk, 6);
        assert!(b.starts_with("'function(sroa,") && b.len() < 250, "{b}");
        assert!(b.ends_with(&format!("({} characters)", junk.len())), "{b}");
    }

    #[test]
    fn presets_expand_and_ablations_drop_one_pass_each() {
        let o3 = expand("default<O3>").unwrap();
        let cat = Catalog::builtin().unwrap();
        assert_eq!(o3.render(), cat.preset("O3").unwrap().pipeline);
        let mixed = expand("default<O1>,r3-egraph").unwrap();
        assert_eq!(mixed.steps.last().unwrap().name, "r3-egraph");
        let best = Candidate {
            codegen_opt: 2,
            ..Candidate::with_pipeline("function(sroa,gvn),globaldce")
        };
        let abl = ablations(&best).unwrap();
        let texts: Vec<&str> = abl.iter().map(|a| a.candidate.pipeline.as_str()).collect();
        assert_eq!(
            texts,
            [
                "function(gvn),globaldce",
                "function(sroa),globaldce",
                "function(sroa,gvn)"
            ]
        );
        assert_eq!(abl[1].pass, "function/gvn");
        assert!(abl.iter().all(|a| a.candidate.codegen_opt == 2));
    }
}
