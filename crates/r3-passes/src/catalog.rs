//! The pass catalog and pipeline presets: `passes/catalog.toml` and `passes/presets.toml`,
//! embedded in the binary so an installed r3 has them.

use serde::{Deserialize, Serialize};

const CATALOG_TOML: &str = include_str!("../../../passes/catalog.toml");
const PRESETS_TOML: &str = include_str!("../../../passes/presets.toml");

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("passes/{file}: {msg}")]
    Parse { file: &'static str, msg: String },
    #[error("passes/catalog.toml: pass '{pass}': {msg}")]
    Invalid { pass: String, msg: String },
    #[error("LLVM option '{name}': {msg}")]
    Option { name: String, msg: String },
    #[error(
        "no preset '{name}'; presets: {known}; fix: name one of these (`r3 passes` shows them)"
    )]
    UnknownPreset { name: String, known: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Module,
    Cgscc,
    Function,
    Loop,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamKind {
    /// `name` or `no-name`.
    Flag,
    /// `name=N`.
    Int,
    /// The value itself.
    Choice,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ParamValue {
    Bool(bool),
    Int(i64),
    Str(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Param {
    pub name: String,
    pub kind: ParamKind,
    pub values: Vec<ParamValue>,
}

impl Param {
    /// The pipeline-text token for one of this parameter's values.
    pub fn token(&self, v: &ParamValue) -> String {
        match (self.kind, v) {
            (ParamKind::Flag, ParamValue::Bool(true)) => self.name.clone(),
            (ParamKind::Flag, ParamValue::Bool(false)) => format!("no-{}", self.name),
            (ParamKind::Int, ParamValue::Int(n)) => format!("{}={n}", self.name),
            (ParamKind::Choice, ParamValue::Str(s)) => s.clone(),
            (_, v) => panic!(
                "parameter {} cannot take {v:?} (catalog validated)",
                self.name
            ),
        }
    }

    /// Whether a token of a pass's `<...>` list sets this parameter.
    pub fn matches(&self, token: &str) -> bool {
        match self.kind {
            ParamKind::Flag => token == self.name || token.strip_prefix("no-") == Some(&self.name),
            ParamKind::Int => token.split_once('=').is_some_and(|(k, _)| k == self.name),
            ParamKind::Choice => self
                .values
                .iter()
                .any(|v| matches!(v, ParamValue::Str(s) if s == token)),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pass {
    pub name: String,
    pub level: Level,
    #[serde(default)]
    pub adaptor: Option<String>,
    pub description: String,
    #[serde(default)]
    pub params: Vec<Param>,
    #[serde(default)]
    pub exclude: Option<String>,
    #[serde(default = "llvm")]
    pub origin: String,
    /// LLVM command-line options that tune this pass; offered only where a pipeline runs it.
    #[serde(default)]
    pub options: Vec<LlvmOption>,
}

/// An LLVM command-line option (a `cl::opt`) that changes what a pass does, such as
/// `-unroll-max-count`: process-wide in LLVM, so a candidate that sets one is lowered in its
/// own process.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlvmOption {
    pub name: String,
    pub description: String,
    /// LLVM's own value when the option is not given, where it is a constant (for some, such
    /// as the unroll threshold, LLVM computes it); a candidate never sets it explicitly.
    #[serde(default)]
    pub default: Option<ParamValue>,
    /// The values the search tries (the default excluded).
    pub values: Vec<ParamValue>,
}

impl LlvmOption {
    /// The option's value as a candidate stores it (`4`, `false`).
    pub fn value_text(v: &ParamValue) -> String {
        match v {
            ParamValue::Bool(b) => b.to_string(),
            ParamValue::Int(n) => n.to_string(),
            ParamValue::Str(s) => s.clone(),
        }
    }

    /// Whether `text` is a value of this option's type.
    fn accepts(&self, text: &str) -> bool {
        match self.values[0] {
            ParamValue::Bool(_) => text == "true" || text == "false",
            ParamValue::Int(_) => text.parse::<i64>().is_ok(),
            ParamValue::Str(_) => false,
        }
    }
}

fn llvm() -> String {
    "llvm".into()
}

impl Pass {
    /// The loop adaptor this pass needs (`loop` or `loop-mssa`); None for other levels.
    pub fn loop_adaptor(&self) -> Option<&str> {
        (self.level == Level::Loop).then(|| self.adaptor.as_deref().unwrap_or("loop"))
    }

    /// The pass as a top-level pipeline element, wrapped in the adaptors its level needs.
    pub fn standalone(&self, params: &[String]) -> String {
        let inner = if params.is_empty() {
            self.name.clone()
        } else {
            format!("{}<{}>", self.name, params.join(";"))
        };
        match self.level {
            Level::Module => inner,
            Level::Cgscc => format!("cgscc({inner})"),
            Level::Function => format!("function({inner})"),
            Level::Loop => format!("function({}({inner}))", self.loop_adaptor().unwrap()),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    pub name: String,
    pub description: String,
    /// The short form LLVM expands to `pipeline`, e.g. `default<O3>`.
    pub default_text: String,
    pub pipeline: String,
}

#[derive(Debug, Clone)]
pub struct Catalog {
    pub passes: Vec<Pass>,
    pub presets: Vec<Preset>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    pass: Vec<Pass>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetFile {
    preset: Vec<Preset>,
}

impl Catalog {
    /// The catalog built into this r3.
    pub fn builtin() -> Result<Catalog, CatalogError> {
        Catalog::parse(CATALOG_TOML, PRESETS_TOML)
    }

    pub fn parse(catalog: &str, presets: &str) -> Result<Catalog, CatalogError> {
        let c: CatalogFile = toml::from_str(catalog).map_err(|e| CatalogError::Parse {
            file: "catalog.toml",
            msg: e.to_string(),
        })?;
        let p: PresetFile = toml::from_str(presets).map_err(|e| CatalogError::Parse {
            file: "presets.toml",
            msg: e.to_string(),
        })?;
        let cat = Catalog {
            passes: c.pass,
            presets: p.preset,
        };
        cat.validate()?;
        Ok(cat)
    }

    fn validate(&self) -> Result<(), CatalogError> {
        let mut seen = std::collections::BTreeSet::new();
        for p in &self.passes {
            let bad = |msg: String| CatalogError::Invalid {
                pass: p.name.clone(),
                msg,
            };
            if !seen.insert(&p.name) {
                return Err(bad("listed twice".into()));
            }
            if p.description.trim().is_empty() {
                return Err(bad("no description".into()));
            }
            match (&p.adaptor, p.level) {
                (Some(a), Level::Loop) if a == "loop" || a == "loop-mssa" => {}
                (Some(a), _) => {
                    return Err(bad(format!(
                        "adaptor '{a}' (loop passes only: loop, loop-mssa)"
                    )))
                }
                (None, _) => {}
            }
            if p.origin != "llvm" && p.origin != "r3" {
                return Err(bad(format!("origin '{}' (llvm or r3)", p.origin)));
            }
            for prm in &p.params {
                if prm.values.is_empty() {
                    return Err(bad(format!("parameter '{}' has no values", prm.name)));
                }
                for v in &prm.values {
                    let ok = matches!(
                        (prm.kind, v),
                        (ParamKind::Flag, ParamValue::Bool(_))
                            | (ParamKind::Int, ParamValue::Int(_))
                            | (ParamKind::Choice, ParamValue::Str(_))
                    );
                    if !ok {
                        return Err(bad(format!(
                            "parameter '{}' ({:?}) has value {v:?} of the wrong type",
                            prm.name, prm.kind
                        )));
                    }
                }
            }
            for o in &p.options {
                validate_option(o).map_err(|m| bad(format!("option '{}': {m}", o.name)))?;
            }
        }
        Ok(())
    }

    pub fn pass(&self, name: &str) -> Option<&Pass> {
        self.passes.iter().find(|p| p.name == name)
    }

    pub fn preset(&self, name: &str) -> Result<&Preset, CatalogError> {
        let key = name.trim_start_matches('-');
        self.presets
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(key) || p.default_text == name)
            .ok_or_else(|| CatalogError::UnknownPreset {
                name: name.to_owned(),
                known: self
                    .presets
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Passes the search offers: not excluded, and r3's own only when asked for.
    pub fn searchable(&self, r3_passes: bool) -> impl Iterator<Item = &Pass> {
        self.passes
            .iter()
            .filter(move |p| p.exclude.is_none() && (p.origin == "llvm" || r3_passes))
    }

    /// The LLVM option `name` and the pass it tunes.
    pub fn option(&self, name: &str) -> Option<(&Pass, &LlvmOption)> {
        self.passes
            .iter()
            .find_map(|p| p.options.iter().find(|o| o.name == name).map(|o| (p, o)))
    }

    /// Every LLVM option of the catalog, in catalog order.
    pub fn options(&self) -> impl Iterator<Item = (&Pass, &LlvmOption)> {
        self.passes
            .iter()
            .flat_map(|p| p.options.iter().map(move |o| (p, o)))
    }

    /// A candidate's LLVM options as command-line arguments (`-unroll-max-count=4`), checked
    /// against the catalog first: LLVM ends the process on an option it does not know, so
    /// nothing else may reach it.
    pub fn llvm_args(
        &self,
        options: &std::collections::BTreeMap<String, String>,
    ) -> Result<Vec<String>, CatalogError> {
        for (name, value) in options {
            let bad = |msg: String| CatalogError::Option {
                name: name.clone(),
                msg,
            };
            let (_, o) = self.option(name).ok_or_else(|| {
                bad("not in passes/catalog.toml; `r3 passes` lists the options r3 sets".into())
            })?;
            if !o.accepts(value) {
                return Err(bad(format!(
                    "'{value}' is not a value of its type (such as {})",
                    LlvmOption::value_text(&o.values[0])
                )));
            }
        }
        Ok(crate::candidate::llvm_option_args(options).collect())
    }

    /// A human listing for `r3 passes`.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for p in &self.passes {
            let params: Vec<String> = p
                .params
                .iter()
                .map(|prm| {
                    let vals: Vec<String> = prm.values.iter().map(|v| prm.token(v)).collect();
                    vals.join("|")
                })
                .collect();
            let note = match (&p.exclude, p.origin.as_str()) {
                (Some(r), _) => format!("  [excluded: {r}]"),
                (None, "r3") => "  [r3; not offered by default]".into(),
                _ => String::new(),
            };
            s += &format!(
                "{:<30} {:<9} {}{}\n",
                p.name,
                format!("{:?}", p.level).to_lowercase(),
                p.description,
                note
            );
            if !params.is_empty() {
                s += &format!("{:<30} <{}>\n", "", params.join(";"));
            }
            for o in &p.options {
                let vals: Vec<String> = o.values.iter().map(LlvmOption::value_text).collect();
                let default = o
                    .default
                    .as_ref()
                    .map_or("computed".into(), LlvmOption::value_text);
                s += &format!(
                    "{:<30} -{}={} (default {default}): {}\n",
                    "",
                    o.name,
                    vals.join("|"),
                    o.description
                );
            }
        }
        s += "\npresets: ";
        s += &self
            .presets
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        s += " (r3 passes --print O3)\n";
        s
    }
}

fn validate_option(o: &LlvmOption) -> Result<(), String> {
    if o.description.trim().is_empty() {
        return Err("no description".into());
    }
    let Some(first) = o.values.first() else {
        return Err("no values".into());
    };
    if matches!(first, ParamValue::Str(_)) {
        return Err("only integer and boolean options are supported".into());
    }
    for v in o.values.iter().chain(&o.default) {
        if std::mem::discriminant(v) != std::mem::discriminant(first) {
            return Err(format!("value {v:?} is not of the same type as {first:?}"));
        }
    }
    if o.default.as_ref().is_some_and(|d| o.values.contains(d)) {
        return Err("the default is among the values (a candidate never sets it)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_catalog_is_valid() {
        let c = Catalog::builtin().unwrap();
        assert!(c.passes.len() > 50);
        for name in [
            "gvn-sink",
            "structurizecfg",
            "mergereturn",
            "jump-threading",
        ] {
            assert!(c.pass(name).unwrap().exclude.is_some(), "{name}");
        }
        assert!(c.preset("O3").unwrap().pipeline.contains("loop-unroll<O3>"));
        assert!(c.preset("-O2").is_ok());
        assert!(c.searchable(false).all(|p| p.name != "r3-egraph"));
        assert_eq!(c.option("unroll-max-count").unwrap().0.name, "loop-unroll");
    }

    #[test]
    fn llvm_options_are_checked_before_llvm_sees_them() {
        let c = Catalog::builtin().unwrap();
        let set = |k: &str, v: &str| std::iter::once((k.to_owned(), v.to_owned())).collect();
        assert_eq!(
            c.llvm_args(&set("unroll-max-count", "4")).unwrap(),
            ["-unroll-max-count=4"]
        );
        let unknown = c.llvm_args(&set("print-after-all", "true")).unwrap_err();
        assert!(unknown.to_string().contains("print-after-all"), "{unknown}");
        let typed = c.llvm_args(&set("unroll-max-count", "four")).unwrap_err();
        assert!(typed.to_string().contains("not a value"), "{typed}");
        let bad = Catalog::parse(
            r#"
[[pass]]
name = "licm"
level = "loop"
description = "d"
[[pass.options]]
name = "licm-x"
description = "d"
default = 3
values = [3, 4]
"#,
            PRESETS_TOML,
        )
        .unwrap_err();
        assert!(bad.to_string().contains("default is among"), "{bad}");
    }

    #[test]
    fn param_tokens() {
        let c = Catalog::builtin().unwrap();
        let u = c.pass("loop-unroll").unwrap();
        let fm = u
            .params
            .iter()
            .find(|p| p.name == "full-unroll-max")
            .unwrap();
        assert_eq!(fm.token(&ParamValue::Int(64)), "full-unroll-max=64");
        assert!(fm.matches("full-unroll-max=4"));
        let rt = u.params.iter().find(|p| p.name == "runtime").unwrap();
        assert!(rt.matches("no-runtime") && rt.matches("runtime") && !rt.matches("partial"));
        assert_eq!(u.standalone(&["O2".into()]), "function(loop-unroll<O2>)");
        assert_eq!(
            c.pass("licm").unwrap().standalone(&[]),
            "function(loop-mssa(licm))"
        );
    }
}
