//! The finite search space (`passes/grid.toml`): pipeline variants, each a preset with a few
//! edits, to be combined with every legal knob setting by [`super::space::Space`]. Finite, so
//! it can be measured exhaustively on a GPU: the recorded landscapes strategies are compared on.

use crate::passes::catalog::{Catalog, CatalogError};
use crate::passes::pipeline::Pipeline;
use serde::Deserialize;

const GRID_TOML: &str = include_str!("../../../passes/grid.toml");

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct GridFile {
    variant: Vec<VariantSpec>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct VariantSpec {
    name: String,
    /// The preset edited; or, instead, `pipeline`: a literal pipeline text ("" for no IR
    /// passes at all).
    #[serde(default)]
    preset: Option<String>,
    #[serde(default)]
    pipeline: Option<String>,
    #[serde(default)]
    delete: Vec<String>,
    #[serde(default)]
    set: Vec<SetParam>,
    #[serde(default)]
    insert: Vec<InsertPass>,
}

/// Inserts `pass` (with `params`) before the `occurrence`-th step (1-based) of pass `before`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct InsertPass {
    pass: String,
    #[serde(default)]
    params: Vec<String>,
    before: String,
    #[serde(default = "first")]
    occurrence: usize,
}

fn first() -> usize {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct SetParam {
    pass: String,
    token: String,
}

/// One pipeline of the grid: its name and its pipeline text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variant {
    pub name: String,
    pub pipeline: String,
}

#[derive(Debug, thiserror::Error)]
pub enum GridError {
    #[error("passes/grid.toml: {0}")]
    Parse(String),
    #[error("passes/grid.toml: variant '{variant}': {msg}")]
    Invalid { variant: String, msg: String },
    #[error(transparent)]
    Catalog(#[from] CatalogError),
}

/// The variants of the grid built into this r3.
pub fn builtin(catalog: &Catalog) -> Result<Vec<Variant>, GridError> {
    parse(GRID_TOML, catalog)
}

pub fn parse(text: &str, catalog: &Catalog) -> Result<Vec<Variant>, GridError> {
    let file: GridFile = toml::from_str(text).map_err(|e| GridError::Parse(e.to_string()))?;
    let variants: Vec<Variant> = file
        .variant
        .iter()
        .map(|v| build(v, catalog))
        .collect::<Result<_, _>>()?;
    for (i, v) in variants.iter().enumerate() {
        if let Some(same) = variants[..i].iter().find(|o| o.pipeline == v.pipeline) {
            return Err(GridError::Invalid {
                variant: v.name.clone(),
                msg: format!("same pipeline as '{}'", same.name),
            });
        }
    }
    Ok(variants)
}

/// A preset without edits keeps its short form (`default<O3>`), so the grid holds the baseline
/// itself; edited ones are the expanded text with the edits applied.
fn build(spec: &VariantSpec, catalog: &Catalog) -> Result<Variant, GridError> {
    let bad = |msg: String| GridError::Invalid {
        variant: spec.name.clone(),
        msg,
    };
    let (preset_name, text) = match (&spec.preset, &spec.pipeline) {
        (Some(name), None) => {
            let preset = catalog.preset(name)?;
            let edits = spec.delete.len() + spec.set.len() + spec.insert.len();
            if edits == 0 {
                return Ok(Variant {
                    name: spec.name.clone(),
                    pipeline: preset.default_text.clone(),
                });
            }
            (name.as_str(), preset.pipeline.as_str())
        }
        (None, Some(text)) => ("(its pipeline)", text.as_str()),
        _ => return Err(bad("give either `preset` or `pipeline`".into())),
    };
    let mut p = Pipeline::parse(text).map_err(|e| bad(e.to_string()))?;
    let spec_preset = preset_name;
    for name in &spec.delete {
        let before = p.steps.len();
        p.steps.retain(|s| &s.name != name);
        if p.steps.len() == before {
            return Err(bad(format!("'{name}' is not in preset {spec_preset}")));
        }
    }
    for set in &spec.set {
        let pass = catalog
            .pass(&set.pass)
            .ok_or_else(|| bad(format!("no pass '{}' in the catalog", set.pass)))?;
        let param = pass
            .params
            .iter()
            .find(|prm| prm.matches(&set.token))
            .ok_or_else(|| bad(format!("'{}' is no parameter of {}", set.token, set.pass)))?;
        let steps: Vec<_> = p.steps.iter_mut().filter(|s| s.name == set.pass).collect();
        if steps.is_empty() {
            return Err(bad(format!(
                "'{}' is not in preset {spec_preset}",
                set.pass
            )));
        }
        for s in steps {
            s.params.retain(|t| !param.matches(t));
            s.params.push(set.token.clone());
        }
    }
    for ins in &spec.insert {
        let pass = catalog
            .pass(&ins.pass)
            .ok_or_else(|| bad(format!("no pass '{}' in the catalog", ins.pass)))?;
        let at = p
            .steps
            .iter()
            .enumerate()
            .filter(|(_, s)| s.name == ins.before)
            .nth(ins.occurrence.saturating_sub(1))
            .map(|(i, _)| i)
            .ok_or_else(|| {
                bad(format!(
                    "preset {spec_preset} has no occurrence {} of '{}'",
                    ins.occurrence, ins.before
                ))
            })?;
        p.insert(at, pass, ins.params.clone());
    }
    Ok(Variant {
        name: spec.name.clone(),
        pipeline: p.render(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_grid_is_valid_and_holds_the_baseline() {
        let cat = Catalog::builtin().unwrap();
        let v = builtin(&cat).unwrap();
        assert!(v.len() >= 10);
        assert_eq!(v[0].pipeline, "default<O3>");
        let runtime = v.iter().find(|v| v.name.contains("runtime")).unwrap();
        assert!(
            runtime.pipeline.contains("loop-unroll<O3;no-runtime>"),
            "{}",
            runtime.pipeline
        );
        let no_licm = v.iter().find(|v| v.name.contains("licm")).unwrap();
        assert!(!no_licm.pipeline.contains("licm"));
    }

    #[test]
    fn bad_variants_are_named() {
        let cat = Catalog::builtin().unwrap();
        for (text, want) in [
            ("[[variant]]\nname = \"x\"\npreset = \"O3\"\ndelete = [\"nope\"]", "'nope' is not in preset O3"),
            ("[[variant]]\nname = \"x\"\npreset = \"O3\"\nset = [{ pass = \"licm\", token = \"fast\" }]", "'fast' is no parameter of licm"),
            ("[[variant]]\nname = \"a\"\npreset = \"O3\"\n[[variant]]\nname = \"b\"\npreset = \"O3\"", "same pipeline as 'a'"),
        ] {
            let err = parse(text, &cat).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
    }
}
