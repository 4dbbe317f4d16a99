//! Recipes: r3's shipped prior (`passes/recipes.toml`). Each is one configuration — a pipeline
//! variant of the grid and its knobs — that a search measures right after the baseline, so that
//! a cold store starts from what earlier searches found. A recipe may name preconditions: traits
//! of the kernel's `-O3` PTX (`ptx::cfg::TRAITS`); it is then offered only to kernels that show
//! them, and before the general recipes.
//!
//! Hand-written recipes carry their reason; learned ones are written by
//! `examples/learn_recipes.rs` from the corpus's complete grid landscapes (a greedy cover of
//! each kernel's near-best configurations, the same rule as the store's portfolio in
//! `transfer`).

use super::grid::{self, GridError};
use super::sim::Landscape;
use super::space::{Space, SpaceOptions};
use super::transfer::{Source, Transfer};
use crate::candidate::Candidate;
use crate::passes::catalog::{Catalog, LlvmOption, ParamValue};
use crate::store::trials::RecipePick;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

const RECIPES_TOML: &str = include_str!("../../../passes/recipes.toml");
/// The line after which `examples/learn_recipes.rs` writes its recipes.
pub const LEARNED_MARKER: &str =
    "# ---- learned: examples/learn_recipes.rs rewrites everything below this line ----";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecipeFile {
    #[serde(default)]
    recipe: Vec<RecipeSpec>,
}

/// One `[[recipe]]` as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecipeSpec {
    pub name: String,
    pub variant: String,
    #[serde(default = "three")]
    pub codegen_opt: u8,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_threads: Option<Threads>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_blocks_per_sm: Option<u32>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fast_math: bool,
    /// LLVM options of the catalog (`[[pass.options]]`) the recipe sets, such as
    /// `options = { laa-speculate-unit-stride = false }`; each of a pass its variant runs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, ParamValue>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub when: Vec<String>,
    pub origin: String,
    pub why: String,
}

fn three() -> u8 {
    3
}

/// `.maxntid` of a recipe: the kernel's own block size, or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Threads {
    Fixed(u32),
    Named(BlockWord),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockWord {
    Block,
}

/// A recipe, checked and with its variant's pipeline text.
#[derive(Debug, Clone, PartialEq)]
pub struct Recipe {
    pub spec: RecipeSpec,
    pub pipeline: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    #[error("passes/recipes.toml: {0}")]
    Parse(String),
    #[error("passes/recipes.toml: recipe '{recipe}': {msg}")]
    Invalid { recipe: String, msg: String },
    #[error(transparent)]
    Grid(#[from] GridError),
}

/// The recipes built into this r3.
pub fn builtin(catalog: &Catalog) -> Result<Vec<Recipe>, RecipeError> {
    parse(RECIPES_TOML, catalog)
}

pub fn parse(text: &str, catalog: &Catalog) -> Result<Vec<Recipe>, RecipeError> {
    let file: RecipeFile = toml::from_str(text).map_err(|e| RecipeError::Parse(e.to_string()))?;
    check(file.recipe, catalog)
}

/// Recipes from their specs, each checked (its variant, knobs, traits, a unique name).
pub fn check(specs: Vec<RecipeSpec>, catalog: &Catalog) -> Result<Vec<Recipe>, RecipeError> {
    let variants = grid::builtin(catalog)?;
    let mut out: Vec<Recipe> = Vec::new();
    for spec in specs {
        let bad = |msg: String| RecipeError::Invalid {
            recipe: spec.name.clone(),
            msg,
        };
        let variant = variants
            .iter()
            .find(|v| v.name == spec.variant)
            .ok_or_else(|| bad(format!("no variant '{}' in passes/grid.toml", spec.variant)))?;
        if spec.codegen_opt > 3 {
            return Err(bad("codegen_opt must be 0 to 3".into()));
        }
        if spec.min_blocks_per_sm.is_some() && spec.max_threads.is_none() {
            return Err(bad("min_blocks_per_sm needs max_threads".into()));
        }
        if let Some(t) = spec.when.iter().find(|t| !is_trait(t)) {
            let known: Vec<&str> = crate::ptx::cfg::TRAITS.iter().map(|t| t.0).collect();
            return Err(bad(format!(
                "unknown trait '{t}'; traits: {}",
                known.join(", ")
            )));
        }
        check_options(&spec, &variant.pipeline, catalog).map_err(bad)?;
        if !matches!(spec.origin.as_str(), "hand" | "learned") {
            return Err(bad("origin must be \"hand\" or \"learned\"".into()));
        }
        if out.iter().any(|r| r.spec.name == spec.name) {
            return Err(bad("a recipe of that name comes earlier".into()));
        }
        out.push(Recipe {
            pipeline: variant.pipeline.clone(),
            spec,
        });
    }
    Ok(out)
}

/// A recipe's options are the catalog's, of its type, and of a pass its variant runs (an
/// option of a pass that does not run would be dropped from the candidate unseen).
fn check_options(spec: &RecipeSpec, pipeline: &str, catalog: &Catalog) -> Result<(), String> {
    catalog
        .llvm_args(&spec.option_texts())
        .map_err(|e| e.to_string())?;
    let runs = super::space::passes_run(pipeline);
    for name in spec.options.keys() {
        let (pass, _) = catalog.option(name).expect("checked by llvm_args");
        if !runs.contains(&pass.name) {
            return Err(format!(
                "option '{name}' belongs to pass '{}', which variant '{}' does not run",
                pass.name, spec.variant
            ));
        }
    }
    Ok(())
}

impl RecipeSpec {
    /// The options as a candidate holds them (`false`, `50`).
    fn option_texts(&self) -> BTreeMap<String, String> {
        self.options
            .iter()
            .map(|(k, v)| (k.clone(), LlvmOption::value_text(v)))
            .collect()
    }
}

fn is_trait(name: &str) -> bool {
    crate::ptx::cfg::TRAITS.iter().any(|t| t.0 == name)
}

impl Recipe {
    /// The recipe as a candidate for a kernel launched with `threads` per block (None when its
    /// launch bounds need a block size that is not known).
    pub fn candidate(&self, threads: Option<u32>) -> Option<Candidate> {
        let max_threads = match self.spec.max_threads {
            None => None,
            Some(Threads::Fixed(n)) => Some(n),
            Some(Threads::Named(BlockWord::Block)) => Some(threads?),
        };
        Some(Candidate {
            codegen_opt: self.spec.codegen_opt,
            max_threads,
            min_blocks_per_sm: self.spec.min_blocks_per_sm,
            fast_math: self.spec.fast_math,
            llvm_options: self.spec.option_texts(),
            ..Candidate::with_pipeline(&self.pipeline)
        })
    }

    /// Whether a kernel with these traits meets the recipe's preconditions (none: always).
    pub fn applies(&self, traits: &[String]) -> bool {
        self.spec.when.iter().all(|w| traits.contains(w))
    }
}

/// Block size of the space recipes are learned in: no kernel's, so that `.maxntid` of a
/// landscape's own block size (adopted as this) reads as "block".
const LEARN_THREADS: u32 = 1000;

/// Recipes learned from complete landscapes (the corpus's grid landscapes): the fewest
/// configurations, at most `k`, such that every landscape has one within 2% of its best among
/// them (where -O3 is not already), chosen greedily as the store's portfolio is
/// (`Transfer::portfolio`); then the same over the configurations without launch bounds (what
/// apply ships by default), those not chosen already. Each is written as its grid variant and
/// knobs, with the landscapes it serves in `why` ("among those without launch bounds" for the
/// second cover).
pub fn learn(landscapes: &[Landscape], k: usize) -> Result<Vec<RecipeSpec>, RecipeError> {
    let mut out = cover(landscapes, k, false)?;
    for r in cover(landscapes, k, true)? {
        let same = |o: &RecipeSpec| RecipeSpec {
            name: String::new(),
            why: String::new(),
            ..o.clone()
        };
        if !out.iter().any(|o| same(o) == same(&r)) {
            out.push(r);
        }
    }
    for (i, r) in out.iter_mut().enumerate() {
        r.name = format!("learned-{}", i + 1);
    }
    Ok(out)
}

/// The greedy cover of [`learn`], over every grid point or (`shippable`) over those without
/// launch bounds only: what apply ships by default, so that a cold search also meets the best
/// configurations a build can use.
fn cover(
    landscapes: &[Landscape],
    k: usize,
    shippable: bool,
) -> Result<Vec<RecipeSpec>, RecipeError> {
    let space = Space::builtin(SpaceOptions {
        grid: true,
        launch_threads: Some(LEARN_THREADS),
        fast_math: landscapes.iter().any(|l| l.space.fast_math),
        ..Default::default()
    })
    .map_err(|e| RecipeError::Parse(e.to_string()))?;
    let variants = grid::builtin(&space.catalog)?;
    let sources: Vec<Source> = landscapes
        .iter()
        .filter_map(|l| {
            let trials: Vec<_> = l
                .entries
                .iter()
                .filter(|e| !shippable || e.candidate.max_threads.is_none())
                .map(|e| (e.candidate.clone(), e.outcome.ratio()))
                .collect();
            Source::new(&l.kernel, &trials, &space)
        })
        .collect();
    let transfer = Transfer {
        sources,
        ..Default::default()
    };
    let mut out = Vec::new();
    for (i, c) in transfer.portfolio(k).into_iter().enumerate() {
        let Some(v) = variants.iter().find(|v| v.pipeline == c.pipeline) else {
            continue;
        };
        let served: Vec<&str> = transfer
            .sources
            .iter()
            .filter(|s| s.is_winner(&c))
            .map(|s| s.name.as_str())
            .collect();
        out.push(RecipeSpec {
            name: format!("learned-{}", i + 1),
            variant: v.name.clone(),
            codegen_opt: c.codegen_opt,
            max_threads: c.max_threads.map(|t| match t {
                LEARN_THREADS => Threads::Named(BlockWord::Block),
                n => Threads::Fixed(n),
            }),
            min_blocks_per_sm: c.min_blocks_per_sm,
            fast_math: c.fast_math,
            options: BTreeMap::new(),
            when: Vec::new(),
            origin: "learned".into(),
            why: format!(
                "within 2% of the best{} on {} of {} landscapes: {}",
                if shippable {
                    " without launch bounds"
                } else {
                    ""
                },
                served.len(),
                transfer.sources.len(),
                served.join(", ")
            ),
        });
    }
    Ok(out)
}

/// `text` (a recipes file) with everything after [`LEARNED_MARKER`] replaced by `learned`.
pub fn with_learned(text: &str, learned: &[RecipeSpec]) -> Result<String, RecipeError> {
    let at = text
        .find(LEARNED_MARKER)
        .ok_or_else(|| RecipeError::Parse(format!("no line '{LEARNED_MARKER}'")))?;
    #[derive(Serialize)]
    struct Out<'a> {
        recipe: &'a [RecipeSpec],
    }
    let body =
        toml::to_string(&Out { recipe: learned }).map_err(|e| RecipeError::Parse(e.to_string()))?;
    Ok(format!("{}{LEARNED_MARKER}\n\n{body}", &text[..at]))
}

/// The recipes a search of a kernel with `traits` measures first, as points of `space`, in
/// order: those whose preconditions it meets (`matched`), then the general ones; recipes whose
/// preconditions it does not meet, and those that are no point of the space (or repeat an
/// earlier one once adopted, e.g. fast-math dropped), are left out.
pub fn pick(recipes: &[Recipe], space: &Space, traits: &[String]) -> Vec<RecipePick> {
    let threads = space.opts.launch_threads;
    let baseline = Candidate::baseline();
    let mut out: Vec<RecipePick> = Vec::new();
    let conditional = recipes.iter().filter(|r| !r.spec.when.is_empty());
    let general = recipes.iter().filter(|r| r.spec.when.is_empty());
    for r in conditional.filter(|r| r.applies(traits)).chain(general) {
        let Some(c) = r.candidate(threads).and_then(|c| space.adopt(&c)) else {
            continue;
        };
        if c != baseline && !out.iter().any(|p| p.candidate == c) {
            out.push(RecipePick {
                name: r.spec.name.clone(),
                candidate: c,
                matched: !r.spec.when.is_empty(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cat() -> Catalog {
        Catalog::builtin().unwrap()
    }

    const TWO: &str = r#"
[[recipe]]
name = "vl"
variant = "O3 with loop versioning for LICM"
fast_math = true
when = ["loop-invariant-store"]
origin = "hand"
why = "test"

[[recipe]]
name = "o2-bounds"
variant = "O2"
codegen_opt = 2
max_threads = "block"
min_blocks_per_sm = 2
origin = "learned"
why = "test"
"#;

    #[test]
    fn the_builtin_recipes_are_valid() {
        let r = builtin(&cat()).unwrap();
        assert!(r.iter().any(|r| r.spec.name == "versioned-licm"));
        assert!(RECIPES_TOML.contains(LEARNED_MARKER));
    }

    #[test]
    fn matched_recipes_come_first_and_others_are_left_out() {
        let recipes = parse(TWO, &cat()).unwrap();
        let space = Space::builtin(SpaceOptions {
            launch_threads: Some(128),
            fast_math: true,
            ..Default::default()
        })
        .unwrap();
        let acc = vec!["loop".to_string(), "loop-invariant-store".to_string()];
        let picks = pick(&recipes, &space, &acc);
        assert_eq!(picks.len(), 2);
        assert!(picks[0].matched && picks[0].candidate.fast_math);
        assert!(picks[0]
            .candidate
            .pipeline
            .contains("loop(loop-versioning-licm)"));
        // "block" is this kernel's block size.
        assert_eq!(picks[1].candidate.max_threads, Some(128));
        assert_eq!(picks[1].candidate.min_blocks_per_sm, Some(2));
        // Without the trait, only the general recipe.
        let picks = pick(&recipes, &space, &["loop".to_string()]);
        assert_eq!(picks.len(), 1);
        assert_eq!(picks[0].name, "o2-bounds");
        // Without fast-math on offer, the recipe is measured without it.
        let strict = Space::builtin(SpaceOptions::default()).unwrap();
        let picks = pick(&recipes, &strict, &acc);
        assert!(!picks[0].candidate.fast_math);
        // With no block size known, "block" bounds cannot be had: that recipe is left out.
        assert_eq!(picks.len(), 1);
    }

    /// A complete landscape of the test grid where `wins` are 0.5 of -O3 and the rest 1.0.
    fn landscape(name: &str, threads: u32, wins: impl Fn(&Candidate) -> bool) -> Landscape {
        let opts = SpaceOptions {
            grid: true,
            launch_threads: Some(threads),
            ..Default::default()
        };
        let space = Space::builtin(opts.clone()).unwrap();
        let time = crate::store::outcome::TimeStats::exact;
        let entries = space
            .points()
            .unwrap()
            .iter()
            .map(|c| crate::sim::Entry {
                candidate: c.clone(),
                ptx_hash: c.key().into(),
                outcome: crate::store::outcome::Outcome::Valid {
                    time: time(if wins(c) { 50.0 } else { 100.0 }),
                    baseline: time(100.0),
                },
            })
            .collect();
        Landscape {
            format: 1,
            kernel: name.into(),
            gpu: "test".into(),
            synthetic: false,
            baseline_us: 100.0,
            space: opts,
            entries,
            model: None,
            best_ratio: None,
            traits: Vec::new(),
        }
    }

    #[test]
    fn learned_recipes_cover_every_landscape_and_write_back() {
        let o2 = "default<O2>".to_string();
        // a and b win with O2 at codegen 2 and .maxntid of their own (different) block sizes;
        // c only with codegen 0 and no bounds.
        let a = landscape("a", 128, |c| {
            c.pipeline == o2 && c.codegen_opt == 2 && c.max_threads == Some(128)
        });
        let b = landscape("b", 256, |c| {
            c.pipeline == o2 && c.codegen_opt == 2 && c.max_threads == Some(256)
        });
        let cc = landscape("c", 64, |c| c.codegen_opt == 0 && c.max_threads.is_none());
        let learned = learn(&[a, b, cc], 5).unwrap();
        // The full cover (O2 with bounds, codegen 0), then the best without bounds where it
        // differs: for a and b every unbounded point is -O3's equal, so nothing more.
        assert_eq!(learned.len(), 2, "{learned:?}");
        let first = &learned[0];
        assert_eq!(first.variant, "O2");
        assert_eq!(first.max_threads, Some(Threads::Named(BlockWord::Block)));
        assert!(first.why.starts_with("within 2% of the best on 2 of 3"));
        assert_eq!(learned[1].codegen_opt, 0);
        // Written after the marker, they read back as recipes; what is above stays.
        let text = with_learned(RECIPES_TOML, &learned).unwrap();
        let back = parse(&text, &cat()).unwrap();
        // What the marker keeps: the hand-written recipes above it (the shipped learned ones
        // below it are replaced).
        let above = builtin(&cat())
            .unwrap()
            .into_iter()
            .filter(|r| r.spec.origin == "hand")
            .count();
        assert_eq!(back.len(), above + 2);
        assert_eq!(back[above].spec, learned[0]);
        assert_eq!(with_learned(&text, &learned).unwrap(), text);
    }

    #[test]
    fn bad_recipes_are_refused_with_the_reason() {
        let err = |text: &str| parse(text, &cat()).unwrap_err().to_string();
        let one = |extra: &str| {
            format!("[[recipe]]\nname = \"x\"\nvariant = \"O2\"\norigin = \"hand\"\nwhy = \"t\"\n{extra}")
        };
        assert!(err(&one("when = [\"loopy\"]")).contains("unknown trait 'loopy'"));
        assert!(err(&one("min_blocks_per_sm = 2")).contains("needs max_threads"));
        assert!(err(&one("codegen_opt = 4")).contains("0 to 3"));
        assert!(err(&one("max_threads = \"warp\"")).contains("passes/recipes.toml"));
        let unknown = one("").replace("O2", "O9");
        assert!(err(&unknown).contains("no variant 'O9'"));
        assert!(err(&format!("{}\n{}", one(""), one(""))).contains("comes earlier"));
        let unknown = err(&one("options = { no-such-option = 1 }"));
        assert!(unknown.contains("'no-such-option'"), "{unknown}");
        let typed = err(&one("options = { laa-speculate-unit-stride = 3 }"));
        assert!(typed.contains("'3' is not a value"), "{typed}");
        // -O2 runs no loop-versioning-licm, whose option this is.
        let idle = err(&one("options = { laa-speculate-unit-stride = false }"));
        assert!(idle.contains("which variant 'O2' does not run"), "{idle}");
    }

    #[test]
    fn a_recipe_sets_its_options_where_the_space_has_them() {
        let text = r#"
[[recipe]]
name = "vl"
variant = "O3 with loop versioning for LICM"
options = { laa-speculate-unit-stride = false }
origin = "hand"
why = "test"
"#;
        let recipes = parse(text, &cat()).unwrap();
        let free = Space::builtin(SpaceOptions::default()).unwrap();
        let picks = pick(&recipes, &free, &[]);
        let want = [("laa-speculate-unit-stride".to_string(), "false".to_string())];
        assert_eq!(picks[0].candidate.llvm_options, want.into_iter().collect());
        // A grid sets no options: there the recipe is its point without them.
        let picks = pick(&recipes, &Space::test_grid(), &[]);
        assert!(picks[0].candidate.llvm_options.is_empty());
    }
}
