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
    let mut raw = Vec::new();
    for op in lcs_ops(&a, &b) {
        match op {
            Raw::Same(..) => match raw.last_mut() {
                Some(DiffOp::Same { count }) => *count += 1,
                _ => raw.push(DiffOp::Same { count: 1 }),
            },
            Raw::Added(j) => raw.push(DiffOp::Added { step: b[j].clone() }),
            Raw::Removed(i) => raw.push(DiffOp::Removed { step: a[i].clone() }),
        }
    }
    pair_changes(raw)
}

/// One step of the edit script between two lists, by index (0-based) into them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Raw {
    Same(usize, usize),
    Removed(usize),
    Added(usize),
}

/// The longest-common-subsequence edit script from `a` to `b`.
fn lcs_ops(a: &[String], b: &[String]) -> Vec<Raw> {
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
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push(Raw::Same(i, j));
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push(Raw::Added(j));
            j += 1;
        } else {
            out.push(Raw::Removed(i));
            i += 1;
        }
    }
    out
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

/// One edit of -O3's pipeline, as people read it: where `diff` says a pass was removed here
/// and added there, or removed and added back with other parameters, this says it moved, or
/// which of its parameters switched. Positions count passes from 1, in -O3 for what -O3 had
/// (`removed`, `moved` from) and in the pipeline for the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Edit {
    /// -O3's pass `at` left out.
    Removed { pass: String, at: usize },
    /// A pass -O3 does not have, with its parameters and adaptors.
    Added { pass: String, at: usize },
    /// -O3's pass `from`, unchanged, at `to`.
    Moved {
        pass: String,
        from: usize,
        to: usize,
    },
    /// One parameter of the pass at `at` (-O3's, in the same place): `on` and `off` for a
    /// flag (`switch-to-lookup`, `no-switch-to-lookup`), the value for the others, `unset`
    /// where one side does not give it.
    Switched {
        pass: String,
        at: usize,
        param: String,
        from: String,
        to: String,
    },
    /// The pass at `at` with other adaptors around it (both paths), a parameter with another
    /// value in its place (`O3` → `O2`), or parameters that differ otherwise (both texts).
    Rewritten {
        pass: String,
        at: usize,
        from: String,
        to: String,
    },
}

/// Longest pass text an edit line shows before it is cut in the middle.
const EDIT_TEXT: usize = 80;

impl Edit {
    /// The edit as a diff line: `- `, `+ ` or `~ `, then its words.
    pub fn line(&self) -> String {
        match self {
            Edit::Removed { pass, at } => format!("- {pass} (pass {at} of -O3)"),
            Edit::Added { pass, at } => format!("+ {} (pass {at})", cut(pass, EDIT_TEXT)),
            _ => format!("~ {}", self.words()),
        }
    }

    /// The edit in words, for one line among others: `simplifycfg: switch-to-lookup off → on
    /// (pass 40)`, `instcombine removed (pass 12 of -O3)`.
    pub fn words(&self) -> String {
        match self {
            Edit::Removed { pass, at } => format!("{pass} removed (pass {at} of -O3)"),
            Edit::Added { pass, at } => format!("{} added (pass {at})", cut(pass, EDIT_TEXT)),
            Edit::Moved { pass, from, to } => {
                format!("{pass} moved from pass {from} to pass {to}")
            }
            Edit::Switched {
                pass,
                at,
                param,
                from,
                to,
            } => format!("{pass}: {param} {from} → {to} (pass {at})"),
            Edit::Rewritten { pass, at, from, to } => format!(
                "{pass}: {} → {} (pass {at})",
                cut(from, EDIT_TEXT),
                cut(to, EDIT_TEXT)
            ),
        }
    }
}

/// A text cut in the middle to `keep` characters (`…` where it was cut).
fn cut(s: &str, keep: usize) -> String {
    let n = s.chars().count();
    if n <= keep {
        return s.to_owned();
    }
    let head: String = s.chars().take(keep * 2 / 3).collect();
    let tail: String = s.chars().skip(n - keep / 3).collect();
    format!("{head}…{tail}")
}

/// A pass's parameters as (name, value): `no-x` is `x` off, `x` is `x` on, `x=v` is `x` at v
/// (empty positions, as in `loop-vectorize<a;;b>`, say nothing).
fn switches(params: &[String]) -> Vec<(String, String)> {
    params
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => match p.strip_prefix("no-") {
                Some(k) => (k.to_owned(), "off".to_owned()),
                None => (p.clone(), "on".to_owned()),
            },
        })
        .collect()
}

/// The adaptors around a step (`function<eager-inv>/loop-mssa`).
fn scope_path(s: &Step) -> String {
    s.scope
        .iter()
        .map(|sc| sc.header.as_str())
        .collect::<Vec<_>>()
        .join("/")
}

/// The edits turning -O3's pipeline `o3` into `p` (see [`Edit`]): the script of [`diff`], a
/// removal and an addition of the very same step anywhere made one move, and within a run of
/// changes a removal and an addition of one pass made its switched parameters, one edit each.
pub fn edits(o3: &Pipeline, p: &Pipeline) -> Vec<Edit> {
    let a: Vec<String> = o3.steps.iter().map(step_path).collect();
    let b: Vec<String> = p.steps.iter().map(step_path).collect();
    let ops = lcs_ops(&a, &b);
    // Runs of removals and additions between the steps both keep.
    let mut runs: Vec<(Vec<usize>, Vec<usize>)> = vec![(Vec::new(), Vec::new())];
    for op in &ops {
        match *op {
            Raw::Same(..) => {
                if runs
                    .last()
                    .is_some_and(|r| !r.0.is_empty() || !r.1.is_empty())
                {
                    runs.push((Vec::new(), Vec::new()));
                }
            }
            Raw::Removed(i) => runs.last_mut().unwrap().0.push(i),
            Raw::Added(j) => runs.last_mut().unwrap().1.push(j),
        }
    }
    // A removed step added back as it was, anywhere: moved.
    let mut moved: Vec<(usize, usize)> = Vec::new();
    let mut taken: std::collections::BTreeSet<usize> = Default::default();
    for (removed, _) in &runs {
        for &i in removed {
            let back = runs
                .iter()
                .flat_map(|r| r.1.iter().copied())
                .find(|&j| b[j] == a[i] && !taken.contains(&j));
            if let Some(j) = back {
                taken.insert(j);
                moved.push((i, j));
            }
        }
    }
    let name = |s: &Step| s.name.clone();
    let mut out = Vec::new();
    for (removed, added) in runs {
        let mut added: Vec<usize> = added.into_iter().filter(|j| !taken.contains(j)).collect();
        let mut plain_added = Vec::new();
        for i in removed {
            if let Some(&(_, j)) = moved.iter().find(|(mi, _)| *mi == i) {
                out.push(Edit::Moved {
                    pass: name(&o3.steps[i]),
                    from: i + 1,
                    to: j + 1,
                });
                continue;
            }
            let from = &o3.steps[i];
            match added.iter().position(|&j| p.steps[j].name == from.name) {
                Some(k) => {
                    let j = added.remove(k);
                    out.extend(changes(from, &p.steps[j], j + 1));
                }
                None => out.push(Edit::Removed {
                    pass: name(from),
                    at: i + 1,
                }),
            }
        }
        plain_added.append(&mut added);
        out.extend(plain_added.into_iter().map(|j| Edit::Added {
            pass: b[j].clone(),
            at: j + 1,
        }));
    }
    out
}

/// What differs between -O3's step `from` and the same pass `to` at `at` in its place.
fn changes(from: &Step, to: &Step, at: usize) -> Vec<Edit> {
    let pass = to.name.clone();
    if scope_path(from) != scope_path(to) {
        return vec![Edit::Rewritten {
            pass,
            at,
            from: step_path(from),
            to: step_path(to),
        }];
    }
    if from.params.len() == to.params.len() {
        // LLVM prints a pass's parameters in one order: compared place by place, a flag that
        // switched is one edit, and so is a value that changed (`loop-unroll<O3>` → `<O2>`).
        let out: Vec<Edit> = from
            .params
            .iter()
            .zip(&to.params)
            .filter(|(f, t)| f != t)
            .map(|(f, t)| {
                let (was, now) = (
                    switches(std::slice::from_ref(f)),
                    switches(std::slice::from_ref(t)),
                );
                match (was.first(), now.first()) {
                    (Some((k, a)), Some((l, b))) if k == l => Edit::Switched {
                        pass: pass.clone(),
                        at,
                        param: k.clone(),
                        from: a.clone(),
                        to: b.clone(),
                    },
                    _ => Edit::Rewritten {
                        pass: pass.clone(),
                        at,
                        from: f.clone(),
                        to: t.clone(),
                    },
                }
            })
            .collect();
        if !out.is_empty() {
            return out;
        }
    }
    let (was, now) = (switches(&from.params), switches(&to.params));
    let value = |list: &[(String, String)], k: &str| {
        list.iter()
            .find(|(key, _)| key == k)
            .map_or("unset".to_owned(), |(_, v)| v.clone())
    };
    let mut keys: Vec<&String> = was.iter().chain(now.iter()).map(|(k, _)| k).collect();
    let mut seen = std::collections::BTreeSet::new();
    keys.retain(|k| seen.insert(k.as_str()));
    let out: Vec<Edit> = keys
        .into_iter()
        .filter_map(|k| {
            let (f, t) = (value(&was, k), value(&now, k));
            (f != t).then(|| Edit::Switched {
                pass: pass.clone(),
                at,
                param: k.clone(),
                from: f,
                to: t,
            })
        })
        .collect();
    if out.is_empty() {
        // Parameters reordered, or repeated: only the texts say how.
        return vec![Edit::Rewritten {
            pass,
            at,
            from: from.text(),
            to: to.text(),
        }];
    }
    out
}

/// A pipeline text as its edits of -O3's pipeline (`default<O3>` expanded on both sides).
pub fn edits_of_o3(text: &str) -> Result<Vec<Edit>, PassesError> {
    Ok(edits(&expand("default<O3>")?, &expand(text)?))
}

/// A candidate in one line, for people: its pipeline as its edits of -O3 (the first `most`,
/// then how many more), then its knobs. `-O3's pipeline; llc -O2, maxntid 256`, or
/// `-O3 with 2 edits: simplifycfg: switch-to-lookup off → on (pass 40); instcombine removed
/// (pass 12 of -O3)`. A pipeline r3 cannot read as edits is shown as [`brief`] shows it.
pub fn candidate_brief(c: &Candidate, most: usize) -> String {
    if c.is_nvcc() {
        return "nvcc's code (nvcc -O3 of the kernel's source)".into();
    }
    let pipeline = match edits_of_o3(&c.pipeline) {
        Ok(e) if e.is_empty() => "-O3's pipeline".to_owned(),
        Ok(e) => {
            let n = e.len();
            // One pass removed at several places is one phrase: `instcombine removed at 3
            // places (passes 19, 35, 49 of -O3)`.
            let mut phrases: Vec<(Option<&str>, Vec<usize>, String)> = Vec::new();
            for edit in &e {
                match edit {
                    Edit::Removed { pass, at } => {
                        match phrases
                            .iter_mut()
                            .find(|(p, _, _)| *p == Some(pass.as_str()))
                        {
                            Some((_, places, _)) => places.push(*at),
                            None => phrases.push((Some(pass), vec![*at], String::new())),
                        }
                    }
                    other => phrases.push((None, Vec::new(), other.words())),
                }
            }
            let words = |(pass, places, text): &(Option<&str>, Vec<usize>, String)| match pass {
                Some(p) if places.len() > 1 => {
                    let at: Vec<String> = places.iter().map(usize::to_string).collect();
                    format!(
                        "{p} removed at {} places (passes {} of -O3)",
                        places.len(),
                        at.join(", ")
                    )
                }
                Some(p) => format!("{p} removed (pass {} of -O3)", places[0]),
                None => text.clone(),
            };
            let mut shown: Vec<String> = phrases.iter().take(most.max(1)).map(words).collect();
            let left: usize = phrases
                .iter()
                .skip(shown.len())
                .map(|(_, places, _)| places.len().max(1))
                .sum();
            if left > 0 {
                shown.push(format!("and {left} more"));
            }
            format!(
                "-O3 with {n} edit{}: {}",
                if n == 1 { "" } else { "s" },
                shown.join("; ")
            )
        }
        Err(_) => format!("pipeline {}", brief(&c.pipeline, most)),
    };
    let knobs = c.knob_words(false);
    if knobs.is_empty() {
        pipeline
    } else {
        format!("{pipeline}; {}", knobs.join(", "))
    }
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

    /// Issue 59, item 8: one switched flag of one pass is one line, and a moved pass one line,
    /// not two 300-character lines each.
    #[test]
    fn edits_say_a_switched_flag_and_a_moved_pass_in_one_line_each() {
        let o3 = expand("default<O3>").unwrap();
        let mut p = o3.clone();
        let cfg = p
            .steps
            .iter()
            .position(|s| {
                s.name == "simplifycfg" && s.params.iter().any(|x| x == "no-switch-to-lookup")
            })
            .unwrap();
        for x in p.steps[cfg].params.iter_mut() {
            if x == "no-switch-to-lookup" {
                *x = "switch-to-lookup".into();
            }
        }
        let e = edits(&o3, &p);
        assert_eq!(
            e,
            [Edit::Switched {
                pass: "simplifycfg".into(),
                at: cfg + 1,
                param: "switch-to-lookup".into(),
                from: "off".into(),
                to: "on".into()
            }]
        );
        assert_eq!(
            e[0].line(),
            format!(
                "~ simplifycfg: switch-to-lookup off → on (pass {})",
                cfg + 1
            )
        );
        // One pass moved further down: one edit.
        let mut q = o3.clone();
        let from = q.steps.iter().position(|s| s.name == "sroa").unwrap();
        let step = q.steps.remove(from);
        q.steps.insert(from + 20, step);
        let e = edits(&o3, &q);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(
            matches!(&e[0], Edit::Moved { pass, .. } if pass == "sroa"),
            "{e:?}"
        );
        assert!(
            e[0].line().starts_with("~ sroa moved from pass "),
            "{}",
            e[0].line()
        );
        // Removed and added passes, and the whole text as before.
        let mut r = o3.clone();
        let gone = r
            .steps
            .iter()
            .position(|s| s.name == "instcombine")
            .unwrap();
        r.steps.remove(gone);
        r.steps
            .push(Pipeline::parse("function(gvn)").unwrap().steps.remove(0));
        let lines: Vec<String> = edits(&o3, &r).iter().map(Edit::line).collect();
        assert_eq!(
            lines,
            [
                format!("- instcombine (pass {} of -O3)", gone + 1),
                format!("+ function/gvn (pass {})", r.steps.len())
            ]
        );
        assert!(edits(&o3, &o3).is_empty());
        let mut u = o3.clone();
        let at = u
            .steps
            .iter()
            .position(|s| s.name == "loop-unroll")
            .unwrap();
        u.steps[at].params = vec!["O2".into()];
        let lines: Vec<String> = edits(&o3, &u).iter().map(Edit::line).collect();
        assert_eq!(lines, [format!("~ loop-unroll: O3 → O2 (pass {})", at + 1)]);
        // A candidate in one line: its edits, then its knobs.
        let c = Candidate {
            codegen_opt: 2,
            max_threads: Some(256),
            ..Candidate::with_pipeline(&p.render())
        };
        let one = candidate_brief(&c, 4);
        assert_eq!(
            one,
            format!("-O3 with 1 edit: simplifycfg: switch-to-lookup off → on (pass {}); llc -O2, maxntid 256", cfg + 1)
        );
        assert_eq!(candidate_brief(&Candidate::baseline(), 4), "-O3's pipeline");
        let many = Candidate::with_pipeline(&r.render());
        assert!(
            candidate_brief(&many, 1).ends_with("; and 1 more"),
            "{}",
            candidate_brief(&many, 1)
        );
        // One pass removed at several places: one phrase, each place named.
        let mut w = o3.clone();
        w.steps.retain(|s| s.name != "licm");
        let places = o3.steps.iter().filter(|s| s.name == "licm").count();
        let one = candidate_brief(&Candidate::with_pipeline(&w.render()), 4);
        assert!(
            one.starts_with(&format!(
                "-O3 with {places} edits: licm removed at {places} places (passes "
            )),
            "{one}"
        );
    }
}
