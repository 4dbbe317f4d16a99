//! The search space: pass pipelines (edits of a preset, or sequences from scratch, repeats and
//! parameters allowed) and the codegen/launch knobs, with sampling, mutation, crossover and the
//! features the Bayesian surrogate compares. With `grid`, the space is finite instead: the
//! pipeline variants of `passes/grid.toml` times every legal knob setting.

use crate::candidate::{Candidate, Specialize};
use crate::passes::catalog::{Catalog, CatalogError, LlvmOption, Pass};
use crate::passes::pipeline::{ParseError, Pipeline};
use crate::store::programs::Recurrence;
use rand::seq::IndexedRandom;
use rand::Rng;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SpaceOptions {
    /// The preset searches start from and edit (`O3`).
    pub preset: String,
    /// Offer r3's own passes (the e-graph pass) as well as LLVM's.
    pub r3_passes: bool,
    /// Offer fast-math (only when outputs are validated against a tolerance).
    pub fast_math: bool,
    /// Offer block sizes (only for kernels declared block-size agnostic).
    pub block_size_agnostic: bool,
    /// Threads per block of the recorded launch; launch bounds are offered when known.
    pub launch_threads: Option<u32>,
    /// Longest pipeline (steps) a search may produce.
    pub max_steps: usize,
    /// The finite space of `passes/grid.toml` instead of free pipelines (no block sizes).
    #[serde(default)]
    pub grid: bool,
    /// Values of the searched launch a candidate may fold into constants (each a choice; none
    /// offered in a grid): the code then ships behind a guard that checks them at launch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub specialize: Vec<Specialize>,
}

impl Default for SpaceOptions {
    fn default() -> Self {
        SpaceOptions {
            preset: "O3".into(),
            r3_passes: false,
            fast_math: false,
            block_size_agnostic: false,
            launch_threads: None,
            max_steps: 200,
            grid: false,
            specialize: Vec::new(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SpaceError {
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error(transparent)]
    Grid(#[from] super::grid::GridError),
}

/// The share of a kernel's launches a specialization's values must recur in to be offered
/// ([`specializations`]): a variant runs only for the launches its guard admits, and replay
/// times the one recorded. Gram-Schmidt's update kernel, searched with its loop's counter
/// folded (k = 0, one launch in 1559), was 2.55x in replay and the program ran at 2.5x against
/// 6.0x where the search had folded only the matrix's width (H200, runs Y16 and Y20).
pub const MIN_RECURRENCE: f64 = 0.9;

/// The specializations a search of a launch is offered: everything foldable at once (the
/// scalar parameters of `foldable` and both launch dimensions), the dimensions alone, and each
/// parameter alone (the first eight), so that the search can find which value matters. Where
/// the census counted how often the launch's values recur over its program's launches
/// (`recurrence`), only values that recur in [`MIN_RECURRENCE`] of them, and everything at once
/// only as far as its values recur together in that share (the least recurring left out).
pub fn specializations(
    foldable: &[u32],
    l: &crate::candidate::LaunchValues,
    recurrence: Option<&Recurrence>,
) -> Vec<Specialize> {
    use crate::candidate::FoldedArg;
    let recurs = |args: &[u32], dims: bool| {
        recurrence.is_none_or(|r| r.share(args, dims).unwrap_or(0.0) >= MIN_RECURRENCE)
    };
    let single: Vec<u32> = foldable
        .iter()
        .copied()
        .filter(|&i| (i as usize) < l.args.len() && recurs(&[i], false))
        .collect();
    let with_dims = recurs(&[], true);
    let together = together(single.clone(), with_dims, recurrence);
    let arg = |i: u32| l.args.get(i as usize).map(|b| FoldedArg::of_bytes(i, b));
    let args = |of: &[u32]| -> Vec<FoldedArg> { of.iter().filter_map(|&i| arg(i)).collect() };
    let dims = Specialize {
        args: Vec::new(),
        block: Some(l.block),
        grid: Some(l.grid),
    };
    let all = Specialize {
        args: args(&together),
        block: with_dims.then_some(l.block),
        grid: with_dims.then_some(l.grid),
    };
    let mut out: Vec<Specialize> = [all]
        .into_iter()
        .chain(with_dims.then_some(dims))
        .filter(|s| !s.args.is_empty() || s.block.is_some())
        .collect();
    out.extend(args(&single).into_iter().take(8).map(|a| Specialize {
        args: vec![a],
        block: None,
        grid: None,
    }));
    out.dedup();
    out
}

/// The values of a launch that [`specializations`] leaves out for recurring in under
/// [`MIN_RECURRENCE`] of the launches `recurrence` counted, in words ("argument 2 (1 of 1559
/// launches)", "its grid and block (...)"); none where nothing was counted.
pub fn not_recurring(foldable: &[u32], recurrence: Option<&Recurrence>) -> Vec<String> {
    let Some(r) = recurrence else {
        return Vec::new();
    };
    let n = r.compared;
    let dims = (r.share(&[], true).unwrap_or(0.0) < MIN_RECURRENCE)
        .then(|| format!("its grid and block ({} of {n} launches)", r.dims_same));
    foldable
        .iter()
        .filter_map(|&i| {
            let same = *r.args_same.get(i as usize)?;
            (r.share(&[i], false)? < MIN_RECURRENCE)
                .then(|| format!("argument {i} ({same} of {n} launches)"))
        })
        .chain(dims)
        .collect()
}

/// Of `single` (parameters whose values recur alone), those whose values recur together, with
/// the launch's dimensions where `with_dims`, in [`MIN_RECURRENCE`] of the launches: the least
/// recurring left out first. All of them where nothing was counted.
fn together(mut single: Vec<u32>, with_dims: bool, recurrence: Option<&Recurrence>) -> Vec<u32> {
    let Some(r) = recurrence else {
        return single;
    };
    let share = |i: u32| r.share(&[i], false).unwrap_or(0.0);
    single.sort_by(|&x, &y| share(y).total_cmp(&share(x)).then(x.cmp(&y)));
    while !single.is_empty() && r.share(&single, with_dims).unwrap_or(0.0) < MIN_RECURRENCE {
        single.pop();
    }
    single.sort_unstable();
    single
}

pub const BLOCK_SIZES: &[u32] = &[32, 64, 128, 256, 512, 1024];
pub const MIN_BLOCKS: &[u32] = &[1, 2, 4, 8];

/// The minimum of blocks per SM the launch sweep asks with blocks of `threads`: two where two
/// fit in half an SM's threads, else one (2048 threads an SM on sm_80 and sm_90).
pub fn sweep_min_blocks(threads: u32) -> u32 {
    if threads <= 512 {
        2
    } else {
        1
    }
}

#[derive(Debug, Clone)]
pub struct Space {
    pub catalog: Catalog,
    pub opts: SpaceOptions,
    preset: Pipeline,
    /// Indices into `catalog.passes` the search may insert.
    offered: Vec<usize>,
    grid: Option<Grid>,
}

/// A finite space as coordinates: (pipeline variant, codegen level, launch bounds, fast-math).
#[derive(Debug, Clone)]
struct Grid {
    pipelines: Vec<String>,
    bounds: Vec<(Option<u32>, Option<u32>)>,
    fast: Vec<bool>,
    points: Vec<Candidate>,
}

const CODEGEN_LEVELS: usize = 4;

impl Grid {
    fn new(pipelines: Vec<String>, opts: &SpaceOptions) -> Grid {
        let mut bounds = vec![(None, None)];
        if let Some(t) = opts.launch_threads {
            let mut mt = vec![t];
            if t < 1024 {
                mt.push(1024);
            }
            for m in mt {
                bounds.push((Some(m), None));
                bounds.extend(MIN_BLOCKS.iter().map(|&b| (Some(m), Some(b))));
            }
        }
        let fast = if opts.fast_math {
            vec![false, true]
        } else {
            vec![false]
        };
        let mut g = Grid {
            pipelines,
            bounds,
            fast,
            points: Vec::new(),
        };
        let dims = g.dims();
        let mut points = Vec::with_capacity(dims.iter().product());
        for v in 0..dims[0] {
            for cg in (0..dims[1]).rev() {
                for b in 0..dims[2] {
                    for f in 0..dims[3] {
                        points.push(g.point([v, cg, b, f]));
                    }
                }
            }
        }
        g.points = points;
        g
    }

    fn dims(&self) -> [usize; 4] {
        [
            self.pipelines.len(),
            CODEGEN_LEVELS,
            self.bounds.len(),
            self.fast.len(),
        ]
    }

    fn point(&self, [v, cg, b, f]: [usize; 4]) -> Candidate {
        Candidate {
            codegen_opt: cg as u8,
            max_threads: self.bounds[b].0,
            min_blocks_per_sm: self.bounds[b].1,
            fast_math: self.fast[f],
            ..Candidate::with_pipeline(&self.pipelines[v])
        }
    }

    fn coords(&self, c: &Candidate) -> Option<[usize; 4]> {
        Some([
            self.pipelines.iter().position(|p| *p == c.pipeline)?,
            (c.codegen_opt as usize).min(CODEGEN_LEVELS - 1),
            self.bounds
                .iter()
                .position(|b| *b == (c.max_threads, c.min_blocks_per_sm))?,
            self.fast.iter().position(|f| *f == c.fast_math)?,
        ])
    }

    /// A neighbour: one coordinate changed to another of its values.
    fn mutate(&self, c: &Candidate, rng: &mut impl Rng) -> Candidate {
        let dims = self.dims();
        let Some(mut x) = self.coords(c) else {
            return self.points.choose(rng).unwrap().clone();
        };
        let open: Vec<usize> = (0..4).filter(|&d| dims[d] > 1).collect();
        let Some(&d) = open.choose(rng) else {
            return c.clone();
        };
        x[d] = (x[d] + rng.random_range(1..dims[d])) % dims[d];
        self.point(x)
    }

    /// Uniform crossover of the coordinates.
    fn crossover(&self, a: &Candidate, b: &Candidate, rng: &mut impl Rng) -> Candidate {
        match (self.coords(a), self.coords(b)) {
            (Some(xa), Some(xb)) => {
                let x = std::array::from_fn(|d| if rng.random_bool(0.5) { xa[d] } else { xb[d] });
                self.point(x)
            }
            _ => self.mutate(a, rng),
        }
    }
}

impl Space {
    pub fn new(catalog: Catalog, opts: SpaceOptions) -> Result<Space, SpaceError> {
        let preset = Pipeline::parse(&catalog.preset(&opts.preset)?.pipeline)?;
        let offered = catalog
            .passes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.exclude.is_none() && (p.origin == "llvm" || opts.r3_passes))
            .map(|(i, _)| i)
            .collect();
        let grid = if opts.grid {
            let pipelines = super::grid::builtin(&catalog)?
                .into_iter()
                .map(|v| v.pipeline)
                .collect();
            Some(Grid::new(pipelines, &opts))
        } else {
            None
        };
        Ok(Space {
            catalog,
            opts,
            preset,
            offered,
            grid,
        })
    }

    /// `n` spread-out first candidates. In a grid each coordinate runs through all its values
    /// (in a shuffled order) before any value repeats, a Latin-hypercube-like design, so the
    /// first trials already say something about every pipeline variant and knob value; in the
    /// free space, random samples.
    pub fn design(&self, n: usize, rng: &mut impl Rng) -> Vec<Candidate> {
        use rand::seq::SliceRandom;
        let Some(g) = &self.grid else {
            return (0..n).map(|_| self.sample(rng)).collect();
        };
        let columns: Vec<Vec<usize>> = g
            .dims()
            .iter()
            .map(|&size| {
                let mut col = Vec::with_capacity(n);
                while col.len() < n {
                    let mut values: Vec<usize> = (0..size).collect();
                    values.shuffle(rng);
                    col.extend(values);
                }
                col
            })
            .collect();
        (0..n)
            .map(|i| g.point(std::array::from_fn(|d| columns[d][i])))
            .collect()
    }

    /// Every point of a finite space (`grid`), in a fixed order; None for the free space.
    pub fn points(&self) -> Option<&[Candidate]> {
        self.grid.as_ref().map(|g| g.points.as_slice())
    }

    pub fn builtin(opts: SpaceOptions) -> Result<Space, SpaceError> {
        Space::new(Catalog::builtin()?, opts)
    }

    /// The starting point: the preset's text with the default knobs (in a grid: the baseline).
    pub fn start(&self) -> Candidate {
        match &self.grid {
            Some(g) => g.points[0].clone(),
            None => Candidate::with_pipeline(&self.preset.render()),
        }
    }

    fn pipeline(&self, c: &Candidate) -> Pipeline {
        Pipeline::parse(&c.pipeline).unwrap_or_else(|_| self.preset.clone())
    }

    /// A candidate from another search (another kernel, or this kernel on another GPU) as a
    /// point of this space: knobs this space does not offer are turned off and launch bounds
    /// are fitted to this kernel's block size (`.maxntid` of the source's own block becomes
    /// this kernel's); in a grid, None unless the result is a grid point, in the free space
    /// None unless the pipeline parses. nvcc's code is no point of any space: None.
    pub fn adopt(&self, c: &Candidate) -> Option<Candidate> {
        if c.is_nvcc() {
            return None;
        }
        let mut c = c.clone();
        self.repair(&mut c);
        match &self.grid {
            Some(g) => g.coords(&c).map(|x| g.point(x)),
            None => Pipeline::parse(&c.pipeline).ok().map(|_| c),
        }
    }

    /// One candidate's passes (pipeline and LLVM options) with another's knobs, made legal
    /// for this space (in a grid: None unless a grid point). A pass win and a knob win found
    /// in different trials are often worth more together than either alone.
    pub fn recombine(&self, passes: &Candidate, knobs: &Candidate) -> Option<Candidate> {
        let mut c = Candidate {
            pipeline: passes.pipeline.clone(),
            llvm_options: passes.llvm_options.clone(),
            ..knobs.clone()
        };
        self.repair(&mut c);
        match &self.grid {
            Some(g) => g.coords(&c).map(|x| g.point(x)),
            None => Some(c),
        }
    }

    /// The grid space of a kernel launched with 256 threads (for tests).
    #[cfg(test)]
    pub(crate) fn test_grid() -> Space {
        Space::builtin(SpaceOptions {
            launch_threads: Some(256),
            grid: true,
            ..Default::default()
        })
        .unwrap()
    }

    /// Block size the launch will use: the candidate's, else the recorded one.
    fn threads(&self, c: &Candidate) -> Option<u32> {
        c.block_x.or(self.opts.launch_threads)
    }

    /// `.maxntid` values legal for a candidate: none, or at least its block size.
    fn max_thread_choices(&self, c: &Candidate) -> Vec<Option<u32>> {
        let mut v = vec![None];
        if let Some(t) = self.threads(c) {
            v.push(Some(t));
            if t < 1024 {
                v.push(Some(1024));
            }
        }
        v
    }

    /// Keeps the knobs consistent after a change (bounds need a block size that fits).
    fn repair(&self, c: &mut Candidate) {
        if !self.opts.fast_math {
            c.fast_math = false;
        }
        if !self.opts.block_size_agnostic {
            c.block_x = None;
        }
        if !self.max_thread_choices(c).contains(&c.max_threads) {
            c.max_threads = self.threads(c);
        }
        if c.max_threads.is_none() {
            c.min_blocks_per_sm = None;
        }
        // Folded dimensions are the recorded launch's: wrong for a launch of another block.
        let dims_folded = |s: &Specialize| s.block.is_some() || s.grid.is_some();
        if c.specialize.as_ref().is_some_and(|s| {
            !self.specialize_choices().contains(s) || (c.block_x.is_some() && dims_folded(s))
        }) {
            c.specialize = None;
        }
        if !c.llvm_options.is_empty() {
            let runs = self.option_choices(c);
            c.llvm_options
                .retain(|name, _| runs.iter().any(|(n, _)| n == name));
        }
    }

    /// The specializations offered (none in a grid, whose points are fixed).
    fn specialize_choices(&self) -> &[Specialize] {
        if self.grid.is_some() {
            return &[];
        }
        &self.opts.specialize
    }

    /// No specialization, or one of those offered.
    fn random_specialize(&self, rng: &mut impl Rng) -> Option<Specialize> {
        let choices = self.specialize_choices();
        let pick = rng.random_range(0..=choices.len());
        choices.get(pick).cloned()
    }

    /// The LLVM options this candidate may set: those of the catalog's passes its pipeline
    /// runs, each with the values the search tries (none in a grid: its points are fixed).
    fn option_choices(&self, c: &Candidate) -> Vec<(String, Vec<String>)> {
        if self.grid.is_some() {
            return Vec::new();
        }
        let runs = passes_run(&c.pipeline);
        self.catalog
            .options()
            .filter(|(pass, _)| runs.contains(&pass.name))
            .map(|(_, o)| {
                let values = o.values.iter().map(LlvmOption::value_text).collect();
                (o.name.clone(), values)
            })
            .collect()
    }

    /// Sets one of the candidate's LLVM options to a value the search tries, or back to
    /// LLVM's default; false when its pipeline runs no pass with options.
    fn edit_option(&self, c: &mut Candidate, rng: &mut impl Rng) -> bool {
        let choices = self.option_choices(c);
        let Some((name, values)) = choices.choose(rng) else {
            return false;
        };
        let pick = rng.random_range(0..=values.len());
        match values.get(pick) {
            Some(v) => c.llvm_options.insert(name.clone(), v.clone()),
            None => c.llvm_options.remove(name),
        };
        true
    }

    fn random_params(&self, pass: &Pass, rng: &mut impl Rng) -> Vec<String> {
        let mut out = Vec::new();
        for p in &pass.params {
            if rng.random_bool(0.3) {
                out.push(p.token(p.values.choose(rng).unwrap()));
            }
        }
        out
    }

    fn random_pass(&self, rng: &mut impl Rng) -> &Pass {
        &self.catalog.passes[*self.offered.choose(rng).unwrap()]
    }

    /// A random point: mostly the preset with a few random edits, sometimes a sequence from
    /// scratch; knobs uniform over what is offered.
    pub fn sample(&self, rng: &mut impl Rng) -> Candidate {
        if let Some(g) = &self.grid {
            return g.points.choose(rng).unwrap().clone();
        }
        let mut c = if rng.random_bool(0.1) {
            let mut p = Pipeline::default();
            for _ in 0..rng.random_range(1..=20) {
                let pass = self.random_pass(rng);
                let params = self.random_params(pass, rng);
                p.insert(p.steps.len(), pass, params);
            }
            Candidate::with_pipeline(&p.render())
        } else {
            let mut c = self.start();
            for _ in 0..rng.random_range(0..=6) {
                c = self.edit_pipeline(&c, rng);
            }
            c
        };
        c.codegen_opt = rng.random_range(0..=3);
        if self.opts.block_size_agnostic {
            c.block_x = Some(*BLOCK_SIZES.choose(rng).unwrap());
        }
        c.max_threads = *self.max_thread_choices(&c).choose(rng).unwrap();
        if c.max_threads.is_some() && rng.random_bool(0.5) {
            c.min_blocks_per_sm = Some(*MIN_BLOCKS.choose(rng).unwrap());
        }
        c.fast_math = self.opts.fast_math && rng.random_bool(0.5);
        if rng.random_bool(0.2) {
            self.edit_option(&mut c, rng);
        }
        if !self.specialize_choices().is_empty() && rng.random_bool(0.3) {
            c.specialize = self.random_specialize(rng);
        }
        self.repair(&mut c);
        c
    }

    /// Edits that apply to a pipeline: positions of catalog passes (deletable) and of those
    /// with parameters.
    fn editable(&self, p: &Pipeline) -> (Vec<usize>, Vec<usize>) {
        let mut del = Vec::new();
        let mut prm = Vec::new();
        for (i, s) in p.steps.iter().enumerate() {
            if let Some(pass) = self.catalog.pass(&s.name) {
                del.push(i);
                if !pass.params.is_empty() {
                    prm.push(i);
                }
            }
        }
        (del, prm)
    }

    /// One random edit of the pipeline: insert, delete, swap adjacent, or change a parameter.
    pub fn edit_pipeline(&self, c: &Candidate, rng: &mut impl Rng) -> Candidate {
        let mut p = self.pipeline(c);
        let (del, prm) = self.editable(&p);
        let n = p.steps.len();
        for _ in 0..8 {
            match rng.random_range(0..4) {
                0 if n < self.opts.max_steps => {
                    let pass = self.random_pass(rng);
                    let params = self.random_params(pass, rng);
                    p.insert(rng.random_range(0..=n), pass, params);
                }
                1 if !del.is_empty() => {
                    p.steps.remove(*del.choose(rng).unwrap());
                }
                2 if n >= 2 => {
                    let i = rng.random_range(0..n - 1);
                    p.steps.swap(i, i + 1);
                }
                3 if !prm.is_empty() => {
                    let i = *prm.choose(rng).unwrap();
                    let pass = self.catalog.pass(&p.steps[i].name).unwrap();
                    let param = pass.params.choose(rng).unwrap();
                    let token = param.token(param.values.choose(rng).unwrap());
                    let step = &mut p.steps[i];
                    // LLVM prints some passes with a trailing ';' (`loop-vectorize<a;b;>`): the
                    // empty parameter it leaves must not end up between two (`a;b;;c`), which
                    // LLVM rejects.
                    step.params.retain(|t| !t.is_empty() && !param.matches(t));
                    step.params.push(token);
                }
                _ => continue,
            }
            break;
        }
        let mut c = Candidate {
            pipeline: p.render(),
            ..c.clone()
        };
        self.repair(&mut c);
        c
    }

    /// `c` at each block size the kernel allows (its recorded one only, unless it is
    /// block-size agnostic), each with launch bounds of exactly that block; then at its own
    /// block with a minimum of blocks per SM as well ([`sweep_min_blocks`]). `.maxntid` tells
    /// ptxas the block is no larger, `.minnctapersm` how many blocks must fit, and ptxas
    /// allocates registers and schedules by both: on the GPU the versioned-LICM recipe took
    /// atax_aty from 1.0x to 3.7x at any block size, and to 10.4x with 32 threads and
    /// `.maxntid 32`; at its recorded 256 threads, `.maxntid 256` alone kept 3.7x and with
    /// `.minnctapersm 2` it ran 10.4x (H100, 2026-11-26; bicg_s, corr, cov_mean, doitgen_sum
    /// and gs_update alike). None in a grid (its landscapes are measured without this step).
    pub fn launch_sweep(&self, c: &Candidate) -> Vec<Candidate> {
        if self.grid.is_some() {
            return Vec::new();
        }
        let sizes: Vec<Option<u32>> = if self.opts.block_size_agnostic {
            BLOCK_SIZES.iter().map(|&b| Some(b)).collect()
        } else {
            vec![None]
        };
        let mut out: Vec<Candidate> = Vec::new();
        for block_x in sizes {
            let mut x = Candidate {
                block_x,
                min_blocks_per_sm: None,
                ..c.clone()
            };
            x.max_threads = self.threads(&x);
            self.repair(&mut x);
            if x != *c && !out.contains(&x) {
                out.push(x);
            }
        }
        if let Some(threads) = self.threads(c) {
            let mut x = Candidate {
                max_threads: Some(threads),
                min_blocks_per_sm: Some(sweep_min_blocks(threads)),
                ..c.clone()
            };
            self.repair(&mut x);
            if x != *c && !out.contains(&x) {
                out.push(x);
            }
        }
        out
    }

    /// One random knob change among those offered.
    pub fn edit_knob(&self, c: &Candidate, rng: &mut impl Rng) -> Candidate {
        let mut c = c.clone();
        let mut knobs = vec![0];
        if self.threads(&c).is_some() {
            knobs.extend([1, 2]);
        }
        if self.opts.fast_math {
            knobs.push(3);
        }
        if self.opts.block_size_agnostic {
            knobs.push(4);
        }
        if !self.option_choices(&c).is_empty() {
            knobs.push(5);
        }
        if !self.specialize_choices().is_empty() {
            knobs.push(6);
        }
        match *knobs.choose(rng).unwrap() {
            0 => c.codegen_opt = rng.random_range(0..=3),
            1 => c.max_threads = *self.max_thread_choices(&c).choose(rng).unwrap(),
            2 => {
                if c.max_threads.is_none() {
                    c.max_threads = self.threads(&c);
                }
                let mut v: Vec<Option<u32>> = MIN_BLOCKS.iter().map(|&b| Some(b)).collect();
                v.push(None);
                c.min_blocks_per_sm = *v.choose(rng).unwrap();
            }
            3 => c.fast_math = !c.fast_math,
            4 => c.block_x = Some(*BLOCK_SIZES.choose(rng).unwrap()),
            6 => c.specialize = self.random_specialize(rng),
            _ => {
                self.edit_option(&mut c, rng);
            }
        }
        self.repair(&mut c);
        c
    }

    /// One random edit: of the pipeline (mostly) or of a knob.
    pub fn mutate(&self, c: &Candidate, rng: &mut impl Rng) -> Candidate {
        if let Some(g) = &self.grid {
            return g.mutate(c, rng);
        }
        if rng.random_bool(0.65) {
            self.edit_pipeline(c, rng)
        } else {
            self.edit_knob(c, rng)
        }
    }

    /// One-point crossover of the pass sequences, uniform crossover of the knobs.
    pub fn crossover(&self, a: &Candidate, b: &Candidate, rng: &mut impl Rng) -> Candidate {
        if let Some(g) = &self.grid {
            return g.crossover(a, b, rng);
        }
        let (pa, pb) = (self.pipeline(a), self.pipeline(b));
        let i = rng.random_range(0..=pa.steps.len());
        let j = rng.random_range(0..=pb.steps.len()).min(pb.steps.len());
        // Cut both at about the same relative place so the child keeps about one length.
        let j = if pa.steps.is_empty() {
            j
        } else {
            (i * pb.steps.len()) / pa.steps.len().max(1)
        };
        let mut steps = pa.steps[..i].to_vec();
        steps.extend_from_slice(&pb.steps[j.min(pb.steps.len())..]);
        steps.truncate(self.opts.max_steps);
        let pick = |rng: &mut dyn rand::RngCore| rng.next_u32() & 1 == 0;
        let mut c = Candidate {
            pipeline: Pipeline { steps }.render(),
            codegen_opt: if pick(rng) {
                a.codegen_opt
            } else {
                b.codegen_opt
            },
            max_threads: if pick(rng) {
                a.max_threads
            } else {
                b.max_threads
            },
            min_blocks_per_sm: if pick(rng) {
                a.min_blocks_per_sm
            } else {
                b.min_blocks_per_sm
            },
            fast_math: if pick(rng) { a.fast_math } else { b.fast_math },
            block_x: if pick(rng) { a.block_x } else { b.block_x },
            llvm_options: if pick(rng) {
                a.llvm_options.clone()
            } else {
                b.llvm_options.clone()
            },
            specialize: if pick(rng) {
                a.specialize.clone()
            } else {
                b.specialize.clone()
            },
            // The search's own candidates are LLVM's; nvcc's code is one fixed candidate.
            compiler: Default::default(),
        };
        self.repair(&mut c);
        c
    }

    /// Features for the surrogate: counts of each pass with its parameters, of each pass
    /// name, of adjacent pairs (order), and one feature per knob value. Knob features are
    /// keyed `#knob=value` so the surrogate can weigh them apart from the passes.
    pub fn features(c: &Candidate) -> Features {
        let p = Pipeline::parse(expand_preset(&c.pipeline)).unwrap_or_default();
        let mut counts: BTreeMap<u64, f64> = BTreeMap::new();
        let h = |s: &str| {
            use std::hash::{Hash, Hasher};
            let mut hs = std::hash::DefaultHasher::new();
            s.hash(&mut hs);
            hs.finish()
        };
        let mut prev: Option<String> = None;
        for s in &p.steps {
            let t = s.text();
            *counts.entry(h(&t)).or_default() += 1.0;
            if !s.params.is_empty() {
                *counts.entry(h(&s.name)).or_default() += 1.0;
            }
            if let Some(pr) = prev {
                *counts.entry(h(&format!("{pr} > {t}"))).or_default() += 0.5;
            }
            prev = Some(t);
        }
        // An LLVM option tunes a pass, so it is compared as the pass's parameters are.
        for (name, value) in &c.llvm_options {
            *counts.entry(h(&format!("-{name}={value}"))).or_default() += 1.0;
        }
        Features {
            passes: counts.into_iter().collect(),
            knobs: Space::knob_features(c),
        }
    }

    /// The knob part of [`Space::features`] alone (cheap: no pipeline is parsed).
    pub fn knob_features(c: &Candidate) -> Vec<String> {
        vec![
            format!("cg={}", c.codegen_opt),
            format!("maxntid={:?}", c.max_threads),
            format!("minctasm={:?}", c.min_blocks_per_sm),
            format!("fast={}", c.fast_math),
            format!("block={:?}", c.block_x),
            format!(
                "spec={}",
                c.specialize
                    .as_ref()
                    .map_or_else(String::new, |s| s.words(|i| i.to_string()))
            ),
        ]
    }
}

/// The names of the passes a pipeline text runs (a preset's expansion for its short form);
/// none for text that does not parse.
pub(crate) fn passes_run(pipeline: &str) -> std::collections::BTreeSet<String> {
    Pipeline::parse(expand_preset(pipeline))
        .map(|p| p.steps.into_iter().map(|s| s.name).collect())
        .unwrap_or_default()
}

/// A preset's short form (`default<O3>`) as its expanded text, so that the surrogate sees the
/// baseline as the pass sequence it is, a few edits away from its variants.
fn expand_preset(text: &str) -> &str {
    static PRESETS: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    let presets = PRESETS.get_or_init(|| {
        Catalog::builtin()
            .map(|c| {
                c.presets
                    .into_iter()
                    .map(|p| (p.default_text, p.pipeline))
                    .collect()
            })
            .unwrap_or_default()
    });
    presets
        .iter()
        .find(|(short, _)| short == text)
        .map_or(text, |(_, long)| long.as_str())
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Features {
    /// (hash of feature, count), sorted by hash.
    pub passes: Vec<(u64, f64)>,
    pub knobs: Vec<String>,
}

impl Features {
    /// L1 distance of the pass counts (Hamming distance for 0/1 features).
    pub fn pass_distance(&self, o: &Features) -> f64 {
        let (a, b) = (&self.passes, &o.passes);
        let (mut i, mut j, mut d) = (0, 0, 0.0);
        while i < a.len() && j < b.len() {
            match a[i].0.cmp(&b[j].0) {
                std::cmp::Ordering::Less => {
                    d += a[i].1;
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    d += b[j].1;
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    d += (a[i].1 - b[j].1).abs();
                    i += 1;
                    j += 1;
                }
            }
        }
        d + a[i..].iter().map(|x| x.1).sum::<f64>() + b[j..].iter().map(|x| x.1).sum::<f64>()
    }

    /// Hamming distance of the knobs.
    pub fn knob_distance(&self, o: &Features) -> f64 {
        self.knobs
            .iter()
            .zip(&o.knobs)
            .filter(|(a, b)| a != b)
            .count() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn sampling_and_edits_stay_valid_and_are_deterministic() {
        let opts = SpaceOptions {
            block_size_agnostic: true,
            launch_threads: Some(256),
            fast_math: true,
            ..Default::default()
        };
        let s = Space::builtin(opts).unwrap();
        let with_options = std::cell::Cell::new(0);
        let run = |seed| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut out = Vec::new();
            let mut c = s.start();
            for _ in 0..200 {
                let a = s.sample(&mut rng);
                c = s.mutate(&c, &mut rng);
                let x = s.crossover(&a, &c, &mut rng);
                for k in [&a, &c, &x] {
                    Pipeline::parse(&k.pipeline).unwrap();
                    if let (Some(m), Some(b)) = (k.max_threads, k.block_x) {
                        assert!(m >= b, "{k:?}");
                    }
                    assert!(k.min_blocks_per_sm.is_none() || k.max_threads.is_some());
                    let runs = s.option_choices(k);
                    for name in k.llvm_options.keys() {
                        assert!(runs.iter().any(|(n, _)| n == name), "{name}: {k:?}");
                    }
                    s.catalog.llvm_args(&k.llvm_options).unwrap();
                    with_options.set(with_options.get() + usize::from(!k.llvm_options.is_empty()));
                }
                out.push(x.key());
            }
            out
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        let n = with_options.get();
        assert!(
            n > 30,
            "LLVM options are offered: {n} candidates of 1800 set one"
        );
    }

    #[test]
    fn an_edited_parameter_list_never_has_an_empty_parameter() {
        // -O3's loop-vectorize is printed `loop-vectorize<a;b;>`: re-parameterizing it once
        // wrote `a;b;;c`, which LLVM rejects ("invalid LoopVectorize parameter ''").
        let s = Space::builtin(SpaceOptions::default()).unwrap();
        let start = s.start();
        assert!(start.pipeline.contains(";>"), "the premise: a trailing ';'");
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut edited = 0;
        for _ in 0..3000 {
            let c = s.edit_pipeline(&start, &mut rng);
            assert!(
                !c.pipeline.contains(";;") && !c.pipeline.contains("<;"),
                "{}",
                c.pipeline
            );
            edited +=
                usize::from(c.pipeline.contains("loop-vectorize<") && !c.pipeline.contains(";>"));
        }
        assert!(edited > 0, "loop-vectorize was re-parameterized");
    }

    #[test]
    fn llvm_options_follow_their_pass() {
        let s = Space::builtin(SpaceOptions::default()).unwrap();
        let mut c = Candidate::baseline();
        c.llvm_options.insert("unroll-max-count".into(), "4".into());
        c.llvm_options
            .insert("licm-versioning-invariant-threshold".into(), "5".into());
        s.repair(&mut c);
        // O3 runs loop-unroll but not loop-versioning-licm.
        assert_eq!(
            c.llvm_options.keys().collect::<Vec<_>>(),
            ["unroll-max-count"]
        );
        let (set, base) = (Space::features(&c), Space::features(&Candidate::baseline()));
        assert_eq!(set.knob_distance(&base), 0.0);
        assert_eq!(
            set.pass_distance(&base),
            1.0,
            "setting one option is one step, as a pass parameter is"
        );
        let mut none = Candidate::with_pipeline("function(sroa)");
        none.llvm_options = c.llvm_options.clone();
        s.repair(&mut none);
        assert!(none.llvm_options.is_empty());
        let grid = Space::test_grid();
        let mut g = c.clone();
        grid.repair(&mut g);
        assert!(g.llvm_options.is_empty(), "grid points set no options");
    }

    #[test]
    fn recombination_takes_passes_from_one_and_knobs_from_the_other() {
        let s = Space::builtin(SpaceOptions {
            block_size_agnostic: true,
            launch_threads: Some(256),
            ..Default::default()
        })
        .unwrap();
        let mut passes = Candidate::with_pipeline("function(loop(loop-versioning-licm))");
        passes.codegen_opt = 1;
        let knobs = Candidate {
            block_x: Some(32),
            max_threads: Some(32),
            ..Candidate::baseline()
        };
        let c = s.recombine(&passes, &knobs).unwrap();
        assert_eq!(c.pipeline, passes.pipeline);
        assert_eq!(
            (c.codegen_opt, c.block_x, c.max_threads),
            (3, Some(32), Some(32))
        );
        // Not offered in a grid (no block sizes): no grid point, so nothing.
        assert!(Space::test_grid().recombine(&passes, &knobs).is_none());
    }

    /// BO's pass distance makes "add pass X" one short move from any pipeline, however long:
    /// the pass's own count, the adjacent pairs it makes and breaks, and its name where it
    /// has parameters. Unrelated pipelines are further apart than that.
    #[test]
    fn adding_a_pass_is_a_short_move_from_any_pipeline() {
        let s = Space::builtin(SpaceOptions::default()).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let mut apart = Vec::new();
        for _ in 0..60 {
            let c = s.sample(&mut rng);
            let p = s.pipeline(&c);
            let before = Space::features(&c);
            for &i in &s.offered {
                let pass = &s.catalog.passes[i];
                let params = s.random_params(pass, &mut rng);
                let mut q = p.clone();
                q.insert(rng.random_range(0..=q.steps.len()), pass, params);
                let added = Candidate {
                    pipeline: q.render(),
                    ..c.clone()
                };
                let d = before.pass_distance(&Space::features(&added));
                assert!(d > 0.0 && d <= 3.5, "adding {} moved {d}", pass.name);
            }
            apart.push(before.pass_distance(&Space::features(&s.sample(&mut rng))));
        }
        apart.sort_by(f64::total_cmp);
        assert!(apart[apart.len() / 2] > 3.5, "median distance {apart:?}");
    }

    #[test]
    fn the_grid_is_finite_and_its_moves_stay_in_it() {
        let opts = SpaceOptions {
            launch_threads: Some(256),
            grid: true,
            ..Default::default()
        };
        let s = Space::builtin(opts).unwrap();
        let points = s.points().unwrap();
        let variants = crate::grid::builtin(&s.catalog).unwrap().len();
        // 4 codegen levels; bounds: none, or maxntid 256 or 1024 with no/1/2/4/8 blocks.
        assert_eq!(points.len(), variants * 4 * 11);
        assert_eq!(s.start(), Candidate::baseline());
        let set: std::collections::HashSet<_> = points.iter().collect();
        assert_eq!(set.len(), points.len(), "no point twice");
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for _ in 0..300 {
            let a = s.sample(&mut rng);
            let m = s.mutate(&a, &mut rng);
            let x = s.crossover(&a, &m, &mut rng);
            assert!(set.contains(&m) && set.contains(&x) && m != a);
        }
    }

    #[test]
    fn knobs_not_offered_stay_off() {
        let s = Space::builtin(SpaceOptions::default()).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        for _ in 0..100 {
            let c = s.mutate(&s.sample(&mut rng), &mut rng);
            assert!(!c.fast_math && c.block_x.is_none() && c.max_threads.is_none());
            assert!(c.specialize.is_none());
        }
        assert_eq!(s.start().pipeline, s.catalog.preset("O3").unwrap().pipeline);
    }

    #[test]
    fn specializations_are_the_launchs_own_values_and_the_search_stays_among_them() {
        let launch = crate::candidate::LaunchValues {
            grid: [40, 1, 1],
            block: [256, 1, 1],
            args: vec![
                vec![0; 8],
                1000i32.to_le_bytes().to_vec(),
                2.5f32.to_le_bytes().to_vec(),
            ],
        };
        let offered = specializations(&[1, 2], &launch, None);
        // Everything, the dimensions alone, then each argument alone.
        assert_eq!(offered.len(), 4);
        assert_eq!(offered[0].args.len(), 2);
        assert_eq!(
            (offered[1].block, offered[1].grid),
            (Some([256, 1, 1]), Some([40, 1, 1]))
        );
        assert_eq!(offered[2].args[0].hex, "e8030000");
        assert!(offered.iter().all(|s| launch_admitted(s, &launch)));
        let s = Space::builtin(SpaceOptions {
            launch_threads: Some(256),
            specialize: offered.clone(),
            ..Default::default()
        })
        .unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut seen = std::collections::BTreeSet::new();
        let mut c = s.sample(&mut rng);
        for _ in 0..300 {
            c = s.mutate(&c, &mut rng);
            if let Some(sp) = &c.specialize {
                assert!(offered.contains(sp));
                seen.insert(sp.clone());
            }
        }
        assert!(seen.len() >= 3, "the search reaches the choices: {seen:?}");
    }

    /// Gram-Schmidt's update step, `gs_update(k, m, n, ...)`, launched once for each column k:
    /// the census counts k = 0 in one launch of 1559, m and n and the launch's dimensions in
    /// all. No specialization folds k; everything at once folds m, n and the dimensions.
    #[test]
    fn only_values_that_recur_over_the_programs_launches_are_offered() {
        let launch = crate::candidate::LaunchValues {
            grid: [1, 1, 1],
            block: [256, 1, 1],
            args: vec![
                0i32.to_le_bytes().to_vec(),
                1024i32.to_le_bytes().to_vec(),
                256i32.to_le_bytes().to_vec(),
                vec![0; 8],
            ],
        };
        let counted = |dims_same, args_same: Vec<u64>| Recurrence {
            compared: 1559,
            dims_same,
            args_same,
        };
        let steps = counted(1559, vec![1, 1559, 1559, 1559]);
        let offered = specializations(&[0, 1, 2], &launch, Some(&steps));
        let folded = |s: &Specialize| s.args.iter().map(|a| a.index).collect::<Vec<_>>();
        assert!(
            offered.iter().all(|s| !folded(s).contains(&0)),
            "{offered:?}"
        );
        assert_eq!(folded(&offered[0]), [1, 2]);
        assert!(offered[0].block.is_some() && offered[1].args.is_empty());
        assert_eq!(offered.len(), 4, "{offered:?}");
        assert_eq!(
            not_recurring(&[0, 1, 2], Some(&steps)),
            ["argument 0 (1 of 1559 launches)"]
        );
        assert_eq!(
            specializations(&[0, 1, 2], &launch, None).len(),
            5,
            "uncounted, every value is offered"
        );
        // Three shapes in turn (a network's layers): the dimensions recur in a third; m and n
        // each in 93%, together in 86%, so everything at once folds the first of them only.
        let layers = counted(520, vec![1559, 1450, 1450, 1559]);
        let offered = specializations(&[1, 2], &launch, Some(&layers));
        assert!(offered
            .iter()
            .all(|s| s.block.is_none() && s.grid.is_none()));
        assert_eq!(
            not_recurring(&[1, 2], Some(&layers)),
            ["its grid and block (520 of 1559 launches)"]
        );
        assert_eq!(
            offered.iter().map(folded).collect::<Vec<_>>(),
            [vec![1], vec![2]]
        );
    }

    fn launch_admitted(s: &Specialize, l: &crate::candidate::LaunchValues) -> bool {
        s.holds_for(l)
    }
}
