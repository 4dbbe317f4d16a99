//! `r3 report` for people: one document (sections of paragraphs, tables, diffs and plots)
//! built from a [`Report`], written as terminal text, Markdown, or one self-contained HTML file
//! (inline CSS and SVG, no network; a little optional JavaScript re-sorts the summary table).

use super::svg::{self, esc};
use super::tuning::{KernelReport, Report};
use crate::candidate::Candidate;
use crate::store::outcome::TimeStats;
use std::fmt::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Term,
    Markdown,
    Html,
    Json,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Format, String> {
        match s {
            "term" | "text" => Ok(Format::Term),
            "md" | "markdown" => Ok(Format::Markdown),
            "html" => Ok(Format::Html),
            "json" => Ok(Format::Json),
            _ => Err(format!(
                "unknown report format '{s}'; use term, md, html or json"
            )),
        }
    }
}

/// Renders a report in a format, kernels by their short names (see [`render_with`]).
pub fn render(r: &Report, f: Format) -> String {
    render_with(r, f, false)
}

/// Renders a report in a format. Tables and titles name kernels by their short names
/// (`identity::short_name`, a short hash beside a name two kernels share), the full name one
/// line below in each kernel's section (and a mouse's hover away in HTML); `full_names` puts
/// the demangled names everywhere. JSON always has them whole.
pub fn render_with(r: &Report, f: Format, full_names: bool) -> String {
    let names = Names::new(r, full_names);
    match f {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(r).expect("reports serialize");
            s.push('\n');
            s
        }
        Format::Markdown => markdown(&document(r, &names)),
        Format::Term => term(&document(r, &names)),
        Format::Html => html(&document(r, &names), r),
    }
}

/// How the report names each kernel (by its trials key).
struct Names {
    full: bool,
    by_key: std::collections::HashMap<String, String>,
}

impl Names {
    fn new(r: &Report, full: bool) -> Names {
        let rows: Vec<(String, String)> = r
            .kernels
            .iter()
            .map(|k| (shown(&k.name, full), k.kernel.to_string()))
            .collect();
        let labels = crate::store::identity::with_short_hashes(&rows);
        let mut by_key = std::collections::HashMap::new();
        for ((_, key), label) in rows.into_iter().zip(labels) {
            let old = r.kernels.iter().any(|k| k.kernel == key && k.old);
            by_key.insert(key, if old { format!("{label} (old)") } else { label });
        }
        Names { full, by_key }
    }

    /// The kernel with this trials key, as tables name it.
    fn of(&self, key: &str, name: &str) -> String {
        self.by_key
            .get(key)
            .cloned()
            .unwrap_or_else(|| shown(name, self.full))
    }

    /// A name that is not a reported kernel's (a program's largest, a rewrite's).
    fn other(&self, name: &str) -> String {
        shown(name, self.full)
    }
}

/// A kernel's name in full or short.
fn shown(name: &str, full: bool) -> String {
    if full {
        name.to_owned()
    } else {
        crate::store::identity::short_name(name)
    }
}

#[derive(Debug, Clone)]
enum Span {
    Text(String),
    Code(String),
    Strong(String),
}

fn t(s: impl Into<String>) -> Span {
    Span::Text(s.into())
}
fn c(s: impl Into<String>) -> Span {
    Span::Code(s.into())
}
fn b(s: impl Into<String>) -> Span {
    Span::Strong(s.into())
}

/// A table cell: its text, the number a sortable table sorts its column by (the value, never
/// parsed back from the text, where a name such as a hash would pass for a number), and the
/// section it links to (HTML).
#[derive(Debug, Clone, Default)]
struct Cell {
    text: String,
    key: Option<f64>,
    link: Option<String>,
    /// Shown on hover (HTML): the full name beside a short one.
    title: Option<String>,
}

impl From<String> for Cell {
    fn from(text: String) -> Cell {
        Cell {
            text,
            ..Cell::default()
        }
    }
}

/// A numeric cell: its text and the value it sorts by.
fn num(text: String, key: Option<f64>) -> Cell {
    Cell {
        text,
        key,
        ..Cell::default()
    }
}

#[derive(Debug, Clone)]
enum Block {
    Para(Vec<Span>),
    /// A table; `code` marks the columns whose cells are code (pass names, pipelines), `right`
    /// the numeric ones (right-aligned; in a sortable table, sorted by their cells' keys).
    Table {
        head: Vec<&'static str>,
        rows: Vec<Vec<Cell>>,
        code: Vec<usize>,
        right: Vec<usize>,
        sortable: bool,
    },
    /// Rows of no interest to most readers: one line in text, a `<details>` in HTML.
    Folded {
        line: Vec<Span>,
        summary: String,
        inner: Box<Block>,
    },
    /// Named values (`kernel: …`); the value is code when the flag is set.
    Fields(Vec<(&'static str, String, bool)>),
    Pre(String),
    /// A long text few read whole (a pipeline): in HTML a `<details>` that opens on a click,
    /// in Markdown the same (GitHub's renders it folded), in text `line` instead.
    Whole {
        summary: String,
        text: String,
        line: String,
    },
    /// Diff lines, each starting with ' ', '-', '+' or '~' (changed in place, or moved).
    Diff(Vec<String>),
    /// An SVG plot and the text that stands for it where SVG cannot be shown.
    Svg {
        svg: String,
        alt: String,
    },
}

#[derive(Debug, Clone)]
struct Section {
    level: usize,
    title: String,
    id: String,
    blocks: Vec<Block>,
}

fn section(level: usize, title: impl Into<String>, id: impl Into<String>) -> Section {
    Section {
        level,
        title: title.into(),
        id: id.into(),
        blocks: Vec::new(),
    }
}

fn table(
    head: Vec<&'static str>,
    rows: Vec<Vec<String>>,
    code: &[usize],
    right: &[usize],
) -> Block {
    Block::Table {
        head,
        rows: rows
            .into_iter()
            .map(|r| r.into_iter().map(Cell::from).collect())
            .collect(),
        code: code.to_vec(),
        right: right.to_vec(),
        sortable: false,
    }
}

pub fn fmt_secs(s: f64) -> String {
    if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        format!("{} min {:02} s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{} h {:02} min",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}

fn x(v: f64) -> String {
    crate::speed::times(v)
}

fn opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map(f).unwrap_or_else(|| "-".into())
}

fn knobs(c: &Candidate) -> String {
    c.knob_words(true).join(", ")
}

fn anchor(s: &str) -> String {
    let a = crate::store::trials::slug(s);
    if a.is_empty() {
        "k".into()
    } else {
        a
    }
}

fn document(r: &Report, names: &Names) -> Vec<Section> {
    let mut out = Vec::new();
    let mut top = section(1, "r3 pass-order report", "top");
    if r.kernels.is_empty() {
        top.blocks.push(Block::Para(vec![
            t("No compiler searches yet; store "),
            c(&r.store),
            t(format!("; r3 {}.", r.r3_version)),
        ]));
        out.push(top);
        out.extend(rewrite_sections(&r.rewrites, names));
        return out;
    }
    top.blocks.extend(headline(&r.summary));
    top.blocks.push(Block::Para(vec![
        t(format!("{}; store ", what_was_searched(r))),
        c(&r.store),
        t(format!("; r3 {}.", r.r3_version)),
    ]));
    out.push(top);

    if !r.programs.is_empty() {
        out.push(programs_section(&r.programs, names));
    }
    if r.summary.kernels > 0 {
        out.push(summary_section(r, names));
    }
    out.extend(
        r.summary
            .simulated
            .as_deref()
            .map(|s| simulated_section(s, names)),
    );
    // Measured searches first, simulated ones after them, as the summaries go.
    for simulated in [false, true] {
        for k in r.kernels.iter().filter(|k| k.simulated == simulated) {
            out.extend(kernel_sections(k, names));
        }
    }
    if !r.rewrites.is_empty() {
        out.extend(rewrite_sections(&r.rewrites, names));
    }
    out
}

/// The measured pairs and their GPUs, and how many searches were simulated.
fn what_was_searched(r: &Report) -> String {
    let gpus: std::collections::BTreeSet<&str> = r
        .kernels
        .iter()
        .filter(|k| !k.simulated)
        .map(|k| k.gpu.as_str())
        .collect();
    let mut what = if gpus.is_empty() {
        "No measured search".to_string()
    } else {
        format!(
            "{} kernel–GPU pair(s) on {}",
            r.summary.kernels,
            gpus.into_iter().collect::<Vec<_>>().join(", ")
        )
    };
    if let Some(sim) = &r.summary.simulated {
        what += &format!("; {} simulated search(es), reported apart", sim.kernels);
    }
    what
}

/// The report's first line: what a build with the winners gets, then what the searches found.
/// What ships leads, because the best trial may be one apply does not build with.
fn headline(s: &super::tuning::Summary) -> Option<Block> {
    let (shipped, best) = (s.geomean_shipped?, s.geomean_speedup?);
    let mut line = vec![
        t("Ships: "),
        b(crate::speed::faster(shipped)),
        t(format!(
            " (geometric mean over {} tuned kernel–GPU pair(s); a winner ships for {} of them, the others keep clang's code). Best found: {} (each search's fastest trial).",
            s.tuned,
            s.shipped,
            x(best)
        )),
    ];
    if let Some(v) = &s.vs_nvcc {
        line.extend([
            t(" Against nvcc -O3: "),
            b(format!("{} its speed", x(v.geomean_shipped))),
            t(format!(
                " (over the {} pair(s) whose nvcc build was measured; nvcc's code beat clang's by more than 2% on {} of them).",
                v.kernels, v.nvcc_faster
            )),
        ]);
    }
    Some(Block::Para(line))
}

/// A kernel's second baseline: nvcc's build of it, and what ships against it.
fn nvcc_line(n: &super::tuning::NvccBaseline) -> String {
    match (n.speedup, n.shipped_over_nvcc, &n.why_not) {
        (Some(s), Some(o), _) => format!(
            "nvcc -O3 (trial {}): {} the speed of clang -O3; what ships runs at {} the speed of nvcc's code.",
            n.trial,
            x(s),
            x(o)
        ),
        (_, _, Some(why)) => format!("nvcc -O3 (trial {}): not measured: {why}.", n.trial),
        _ => format!("nvcc -O3 (trial {}): not measured.", n.trial),
    }
}

fn summary_section(r: &Report, names: &Names) -> Section {
    let s = &r.summary;
    let mut sum = section(2, "Summary", "summary");
    sum.blocks.push(Block::Para(vec![
        t("Geometric-mean speedup over clang -O3 of what ships: "),
        b(opt(s.geomean_shipped, x)),
        t(format!(
            " (a winner ships for {} of {} tuned pairs); of the best found: {}. {} trials in {} of tuning. ",
            s.shipped,
            s.tuned,
            opt(s.geomean_speedup, x),
            s.total_trials,
            fmt_secs(s.total_tuning_s)
        )),
        t("What ships is what "),
        c("r3 apply"),
        t(" and "),
        c("r3 export"),
        t(" build with: a winner its confirmation did not refute (at the confirmed speed, where re-measured) and worth a change of code ("),
        c("R3_APPLY_MIN_SPEEDUP"),
        t("); -O3 where clang's code is kept."),
    ]));
    sum.blocks.push(summary_table(&s.rows, true, names));
    sum
}

/// Searches a landscape table answered (`r3 tune --simulate`), apart from the measured ones:
/// their speedups are the table's, so no figure of the measured summary counts them.
fn simulated_section(s: &super::tuning::Summary, names: &Names) -> Section {
    let mut sec = section(2, "Simulated searches", "simulated");
    sec.blocks.push(Block::Para(vec![
        t("Answered by a simulation ("),
        c("r3 tune --simulate"),
        t(format!(
            ": a landscape table, no GPU ran), so no figure of the measured searches counts them. Geometric-mean speedup of the best found: {} over {} of {} searches; {} trials. Simulated trials ship only with ",
            opt(s.geomean_speedup, x),
            s.tuned,
            s.kernels,
            s.total_trials,
        )),
        c("R3_APPLY_SIMULATED=1"),
        t(" (for tests)."),
    ]));
    // Not sortable: the page's last sortable table stays the measured summary, which
    // scripts/report-screenshots clicks.
    sec.blocks.push(summary_table(&s.rows, false, names));
    sec
}

/// The summary table of these rows.
fn summary_table(rows: &[super::tuning::SummaryRow], sortable: bool, names: &Names) -> Block {
    Block::Table {
        head: vec![
            "kernel",
            "GPU",
            "ships",
            "best",
            "-O3 µs",
            "best µs",
            "trials",
            "tuning time",
        ],
        rows: summary_rows(rows, names),
        code: vec![0],
        right: vec![2, 3, 4, 5, 6, 7],
        sortable,
    }
}

/// One row per pair, what ships first (then the best), each linking to its kernel's section.
fn summary_rows(rows: &[super::tuning::SummaryRow], names: &Names) -> Vec<Vec<Cell>> {
    let mut rows: Vec<&super::tuning::SummaryRow> = rows.iter().collect();
    let best = |row: &super::tuning::SummaryRow| row.speedup.unwrap_or(f64::NEG_INFINITY);
    rows.sort_by(|a, b| {
        b.shipped_speedup
            .total_cmp(&a.shipped_speedup)
            .then(best(b).total_cmp(&best(a)))
    });
    let us = |v: Option<f64>| num(opt(v, |v| format!("{v:.2}")), v);
    rows.into_iter()
        .map(|row| {
            let ships = match row.shipped_trial {
                Some(_) => x(row.shipped_speedup),
                None => "-O3".into(),
            };
            let label = names.of(&row.kernel, &row.name);
            vec![
                Cell {
                    link: Some(kernel_id(&row.kernel, &row.gpu)),
                    title: (label != row.name).then(|| row.name.clone()),
                    ..Cell::from(label)
                },
                Cell::from(row.gpu.clone()),
                num(ships, Some(row.shipped_speedup)),
                num(opt(row.speedup, x), row.speedup),
                us(row.baseline_us),
                us(row.best_us),
                num(row.trials.to_string(), Some(row.trials as f64)),
                num(fmt_secs(row.tuning_s), Some(row.tuning_s)),
            ]
        })
        .collect()
}

/// A kernel section's anchor.
fn kernel_id(kernel: &str, gpu: &str) -> String {
    anchor(&format!("{kernel}-{gpu}"))
}

/// A kernel of this share of its program or more whose recordings stand for under
/// [`THIN_RECORDED_SHARE`] of its launches (`KernelCensus::recorded_share`), and that ships a
/// speedup, is named under the programs' table.
const THIN_KERNEL_SHARE: f64 = 0.05;
/// See [`THIN_KERNEL_SHARE`].
const THIN_RECORDED_SHARE: f64 = 0.5;

/// Whole programs: predicted from the launch census, measured where timed.
fn programs_section(programs: &[super::programs::ProgramReport], names: &Names) -> Section {
    let mut sec = section(2, "Programs", "programs");
    sec.blocks.push(Block::Para(vec![
        t("Each program's GPU time as its kernels' shares (the launch census of "),
        c("r3 record"),
        t("), each kernel at the speedup that ships and at its best: predicted by Amdahl's law. Measured: "),
        c("r3 record --time-only"),
        t(" of the recorded build against the newest other build at the same path (the applied one), the same counter on both."),
    ]));
    let pct = |v: f64| format!("{:.1}%", 100.0 * v);
    let rows = programs
        .iter()
        .map(|p| {
            let largest = p
                .top
                .first()
                .map(|k| format!("{} {}", names.other(&k.name), pct(k.share)))
                .unwrap_or_default();
            let measured = p.measured.as_ref().map(|m| m.speedup);
            vec![
                Cell::from(p.name.clone()),
                Cell::from(p.gpu.clone()),
                Cell::from(format!(
                    "{} of {} ({})",
                    p.tuned,
                    p.kernels,
                    pct(p.tuned_share)
                )),
                Cell::from(largest),
                num(x(p.predicted_shipped), Some(p.predicted_shipped)),
                num(x(p.predicted_best), Some(p.predicted_best)),
                num(opt(measured, x), measured),
            ]
        })
        .collect();
    sec.blocks.push(Block::Table {
        head: vec![
            "program",
            "GPU",
            "kernels tuned (of its time)",
            "largest kernel",
            "predicted, ships",
            "predicted, best",
            "measured",
        ],
        rows,
        code: vec![0],
        right: vec![4, 5, 6],
        sortable: true,
    });
    let thin: Vec<String> = programs
        .iter()
        .flat_map(|p| p.top.iter().map(move |k| (p, k)))
        .filter(|(_, k)| k.hash.is_some() && k.share >= THIN_KERNEL_SHARE && k.shipped > 1.0)
        .filter_map(|(p, k)| {
            let rs = k.recorded_share.filter(|rs| *rs < THIN_RECORDED_SHARE)?;
            Some(format!(
                "{} in {} ({} of it): its recordings stand for {} of its launches",
                names.other(&k.name),
                p.name,
                pct(k.share),
                pct(rs)
            ))
        })
        .collect();
    if !thin.is_empty() {
        sec.blocks.push(Block::Para(vec![t(format!(
            "Measured on few of their launches (replay times a kernel's recorded launches, which stand for those identical to them, by time, and those of their grid and block; the prediction credits the others with their speedup, which nothing measured): {}.",
            thin.join("; ")
        ))]));
    }
    sec
}

fn rewrite_sections(rewrites: &[super::rewrites::RewriteReport], names: &Names) -> Vec<Section> {
    let mut top = section(2, "Source rewrites", "rewrites");
    top.blocks.push(Block::Para(vec![t(
        "Rewrites of kernels' code proposed by `r3 evolve`, each compiled with the kernel's own compile command, tuned, and checked against every recorded launch. r3 never edits sources: apply a diff yourself (`patch -p1`) and rebuild; or build with R3_APPLY_REWRITES=1, and apply ships each kernel's best rewrite as its judge measured it, though your source does not hold it (the build's note says which): for every launch where the recorded launches it was checked on had two shapes or more, else behind a guard of those launches' values.",
    )]));
    let mut out = vec![top];
    for r in rewrites {
        let mut sec = section(
            3,
            names.other(&r.name),
            anchor(&format!("rewrite-{}", r.kernel)),
        );
        let mut fields = vec![
            ("kernel", r.kernel.to_string(), true),
            (
                "attempts",
                format!(
                    "{}: {} valid, {} refused before compiling, {} did not compile, {} failed when run, {} not measured yet",
                    r.attempts, r.valid, r.refused, r.compile_failed, r.run_failed, r.pending
                ),
                false,
            ),
        ];
        if let Some(b) = &r.best {
            let beats = b.speedup > 1.0;
            fields.push((
                if beats { "best" } else { "closest" },
                format!(
                    "attempt {} ({}): {} of the original's best compiler-only configuration on {} ({:.2} µs against {:.2} µs){}",
                    b.attempt,
                    b.label,
                    x(b.speedup),
                    b.gpu,
                    b.time_us,
                    b.reference_us,
                    if b.simulated { ", SIMULATED" } else { "" }
                ),
                false,
            ));
            if !beats {
                fields.push((
                    "verdict",
                    "no rewrite beats the original's best compiler-only build: keep the source"
                        .into(),
                    false,
                ));
            }
            if !b.values.is_empty() {
                fields.push(("knobs", crate::store::attempts::words(&b.values), true));
            }
            fields.push(("configuration", b.pipeline.clone(), true));
        }
        sec.blocks.push(Block::Fields(fields));
        if let Some(b) = r
            .best
            .as_ref()
            .filter(|b| !b.diff.is_empty() && b.speedup > 1.0)
        {
            sec.blocks
                .push(Block::Diff(b.diff.lines().map(str::to_owned).collect()));
        }
        sec.blocks.push(table(
            vec!["attempt", "proposer", "outcome"],
            r.rows
                .iter()
                .map(|a| vec![a.attempt.to_string(), a.label.clone(), a.outcome.clone()])
                .collect(),
            &[],
            &[0],
        ));
        out.push(sec);
    }
    out
}

fn time_row(what: &str, ts: &TimeStats) -> Vec<String> {
    vec![
        what.into(),
        format!("{:.2}", ts.median_us),
        format!("±{:.1}%", ts.spread * 100.0),
        format!("{:.2}", ts.min_us),
        ts.samples.to_string(),
    ]
}

fn kernel_sections(k: &KernelReport, names: &Names) -> Vec<Section> {
    let id = kernel_id(&k.kernel, &k.gpu);
    let mut out = Vec::new();
    let label = names.of(&k.kernel, &k.name);
    let mut head = section(2, format!("{label} on {}", k.gpu), id.clone());
    if k.old {
        head.blocks.push(Block::Para(vec![
            t("An old version: no current build contains this kernel (its source was edited and compiled again), so nothing ships from these trials; "),
            c("r3 gc --trials"),
            t(" removes them."),
        ]));
    }
    // What ships leads, before where the numbers come from.
    if let Some(best) = &k.best {
        head.blocks
            .push(Block::Para(ships_and_best(&k.apply, best)));
    }
    if let Some(n) = &k.nvcc {
        head.blocks.push(Block::Para(vec![t(nvcc_line(n))]));
    }
    let mut fields = vec![("kernel", k.kernel.to_string(), true)];
    if !label.starts_with(&k.name) {
        fields.push(("name", k.name.clone(), true));
    }
    fields.extend([
        (
            "stored kernel",
            k.hash.clone().unwrap_or_else(|| "not in the store".into()),
            k.hash.is_some(),
        ),
        ("GPU, driver", format!("{}, {}", k.gpu, k.driver), false),
        ("trials file", k.trials_file.clone(), true),
        (
            "strategy, seed",
            format!("{}, {}", k.strategy, k.seed),
            false,
        ),
        (
            "trials",
            format!(
                "{} in {} (compiling {}, measuring {})",
                k.trials,
                fmt_secs(k.tuning_s),
                fmt_secs(k.compile_s),
                fmt_secs(k.measure_s)
            ),
            false,
        ),
    ]);
    head.blocks.push(Block::Fields(fields));
    out.push(head);

    let mut times = section(3, "Baseline and best", format!("{id}-times"));
    match (&k.baseline, &k.best) {
        (Some(base), Some(best)) => {
            times.blocks.push(Block::Para(vec![t(
                "Times are medians of CUDA-event timings, the baseline interleaved with the best in one process; spread is the interquartile range over the median.",
            )]));
            times.blocks.push(table(
                vec!["", "median µs", "spread", "min µs", "samples"],
                vec![
                    time_row("clang -O3", base),
                    time_row(&format!("best (trial {})", best.trial), &best.time),
                ],
                &[],
                &[1, 2, 3, 4],
            ));
            times
                .blocks
                .push(Block::Para(vec![t(apply_line(&k.apply))]));
            if let Some(note) = search_note(&k.search, k.trials) {
                times.blocks.push(Block::Para(vec![t(note)]));
            }
        }
        _ => times.blocks.push(Block::Para(vec![t(
            "No trial validated: there is no best configuration.",
        )])),
    }
    out.push(times);

    if let (Some(p), Some(best)) = (&k.pipeline, &k.best) {
        let mut sec = section(3, "Best pipeline", format!("{id}-pipeline"));
        sec.blocks.push(Block::Para(vec![t(format!(
            "{} passes ({} in O3): {} removed, {} added, {} changed; codegen and launch: {}.",
            p.best_passes,
            p.o3_passes,
            p.removed,
            p.added,
            p.changed,
            knobs(&best.candidate)
        ))]));
        sec.blocks.push(Block::Para(vec![t(
            "As edits of the O3 pipeline (passes counted from 1; - removed, + added, ~ changed in place or moved):",
        )]));
        let mut lines: Vec<String> = p.edits.iter().map(|e| e.line()).collect();
        if lines.is_empty() {
            lines.push("  (none: the O3 pipeline itself)".into());
        }
        sec.blocks.push(Block::Diff(lines));
        let whole = format!("opt -passes='{}'", p.text);
        if whole.chars().count() <= 160 {
            sec.blocks.push(Block::Pre(whole));
        } else {
            sec.blocks.push(Block::Whole {
                summary: format!("The whole pipeline ({} characters)", p.text.len()),
                line: "The whole pipeline: the HTML or JSON report (`pipeline.text`).".into(),
                text: whole,
            });
        }
        out.push(sec);
    }

    let mut imp = section(3, "Pass importance", format!("{id}-importance"));
    let i = &k.importance;
    match i.status.as_str() {
        "unavailable" => imp
            .blocks
            .push(Block::Para(vec![t("Unavailable: there is no best configuration.")])),
        "not_measured" => imp.blocks.push(Block::Para(vec![
            t(format!(
                "Not measured: the trials hold none of the {} ablations of the best pipeline (it with one pass removed). ",
                i.total
            )),
            c("r3 tune"),
            t(" measures them after its search (unless "),
            c("--no-ablate"),
            t("); they appear here once measured on this kernel and GPU."),
        ])),
        _ => {
            imp.blocks.push(Block::Para(vec![t(format!(
                "The best pipeline with one pass removed, re-measured ({} of {} passes; {}). Slowdown is the time without the pass over the best time: above 1, the pass helps.",
                i.measured,
                i.total,
                if i.status == "measured" { "all" } else { "the others not measured" }
            ))]));
            imp.blocks.extend(importance_tables(&i.passes));
        }
    }
    out.push(imp);

    let mut conv = section(3, "Convergence", format!("{id}-convergence"));
    let span = k
        .convergence
        .iter()
        .map(|p| p.elapsed_s)
        .fold(0.0, f64::max);
    let (unit, per) = match span {
        s if s > 3.0 * 3600.0 => ("hours", 3600.0),
        s if s > 600.0 => ("minutes", 60.0),
        _ => ("seconds", 1.0),
    };
    let pts = |by_time: bool| -> Vec<svg::Point> {
        k.convergence
            .iter()
            .map(|p| svg::Point {
                x: if by_time {
                    p.elapsed_s / per
                } else {
                    p.trial as f64
                },
                y: p.speedup,
                best: p.best_speedup,
            })
            .collect()
    };
    let mut improved = Vec::new();
    let mut last = None;
    for p in &k.convergence {
        if p.best_speedup.is_some() && p.best_speedup != last {
            improved.push(vec![
                p.trial.to_string(),
                fmt_secs(p.elapsed_s),
                opt(p.best_speedup, x),
            ]);
            last = p.best_speedup;
        }
    }
    let alt = format!(
        "Best so far improved {} time(s) over {} trials; see the table.",
        improved.len().saturating_sub(1),
        k.trials
    );
    conv.blocks.push(Block::Svg {
        svg: svg::convergence("Best so far, by trial", "trial", &pts(false)),
        alt: alt.clone(),
    });
    conv.blocks.push(Block::Svg {
        svg: svg::convergence("Best so far, by wall time", unit, &pts(true)),
        alt: String::new(),
    });
    conv.blocks
        .push(Block::Para(vec![t("Where the best so far improved:")]));
    conv.blocks.push(table(
        vec!["trial", "elapsed", "best speedup"],
        improved,
        &[],
        &[0, 1, 2],
    ));
    out.push(conv);

    let mut top = section(3, "Top distinct configurations", format!("{id}-top"));
    top.blocks.push(Block::Para(vec![t(
        "The fastest valid trials with distinct PTX. Against O3: passes removed, added, changed.",
    )]));
    top.blocks.push(table(
        vec![
            "rank",
            "trial",
            "speedup",
            "median µs",
            "spread",
            "against O3",
            "codegen, launch",
        ],
        k.top
            .iter()
            .map(|tc| {
                vec![
                    tc.rank.to_string(),
                    tc.trial.to_string(),
                    x(tc.speedup),
                    format!("{:.2}", tc.time.median_us),
                    format!("±{:.1}%", tc.time.spread * 100.0),
                    tc.vs_o3.clone(),
                    knobs(&tc.candidate),
                ]
            })
            .collect(),
        &[],
        &[0, 1, 2, 3, 4],
    ));
    out.push(top);

    out.push(code_section(k, &id));

    let mut oc = section(3, "Trial outcomes", format!("{id}-outcomes"));
    let o = &k.outcomes;
    let mut rows = vec![
        vec!["validated".into(), o.valid.to_string()],
        vec!["failed validation".into(), o.wrong_output.to_string()],
        vec!["crashed".into(), o.crashed.to_string()],
        vec!["timed out".into(), o.timed_out.to_string()],
        vec!["did not compile".into(), o.compile_error.to_string()],
    ];
    if o.screened > 0 {
        rows.push(vec![
            "dropped by the screen (a prefix of the launch)".into(),
            o.screened.to_string(),
        ]);
    }
    rows.push(vec![
        "(of these, same PTX as an earlier trial)".into(),
        o.duplicates.to_string(),
    ]);
    oc.blocks
        .push(table(vec!["outcome", "trials"], rows, &[], &[1]));
    out.push(oc);
    out
}

/// Whether removing a pass made no difference that shows: it ran as fast (`1.000` as shown),
/// most often because the PTX did not change.
fn no_effect(p: &super::tuning::PassImportance) -> bool {
    p.slowdown.is_some_and(|s| format!("{s:.3}") == "1.000")
}

/// The passes that matter in a table, in rank order; those without a measurable effect (most
/// of an O3-sized pipeline) folded into one line.
fn importance_tables(passes: &[super::tuning::PassImportance]) -> Vec<Block> {
    let row = |(n, p): (usize, &super::tuning::PassImportance)| {
        vec![
            (n + 1).to_string(),
            p.pass.clone(),
            opt(p.slowdown, |v| format!("{v:.3}")),
            p.outcome.replace('_', " "),
            p.trial.to_string(),
        ]
    };
    let head = || vec!["rank", "pass removed", "slowdown", "outcome", "trial"];
    let (flat, shown): (Vec<_>, Vec<_>) =
        passes.iter().enumerate().partition(|(_, p)| no_effect(p));
    let mut out = Vec::new();
    if shown.is_empty() {
        out.push(Block::Para(vec![t(
            "No pass's removal made a measurable difference.",
        )]));
    } else {
        out.push(table(
            head(),
            shown.into_iter().map(row).collect(),
            &[1],
            &[0, 2, 4],
        ));
    }
    if flat.is_empty() {
        return out;
    }
    const NAMED: usize = 5;
    let summary = format!(
        "{} passes with no measurable effect (slowdown 1.000)",
        flat.len()
    );
    let mut line = vec![t(format!("{summary}: "))];
    for (n, (_, p)) in flat.iter().take(NAMED).enumerate() {
        if n > 0 {
            line.push(t(", "));
        }
        line.push(c(&p.pass));
    }
    line.push(t(match flat.len().saturating_sub(NAMED) {
        0 => ".".to_owned(),
        n => format!(", and {n} more."),
    }));
    out.push(Block::Folded {
        line,
        summary,
        inner: Box::new(table(
            head(),
            flat.into_iter().map(row).collect(),
            &[1],
            &[0, 2, 4],
        )),
    });
    out
}

fn code_section(k: &KernelReport, id: &str) -> Section {
    let mut sec = section(3, "What changed in the code", format!("{id}-code"));
    let cr = &k.code;
    if let Some(why) = &cr.unavailable {
        sec.blocks.push(Block::Para(vec![t(format!(
            "Code statistics unavailable: {why}."
        ))]));
        return sec;
    }
    sec.blocks.push(Block::Para(vec![t(format!(
        "Recomputed from the stored module for {} (LLVM {}), baseline and best.{}",
        cr.sm.as_deref().unwrap_or("?"),
        crate::toolchain::llvm_version(),
        cr.ptxas_unavailable
            .as_ref()
            .map(|w| format!(" Registers and spills unavailable: {w}."))
            .unwrap_or_default()
    ))]));
    let num = |v: Option<usize>| opt(v, |n| n.to_string());
    let change = |a: Option<usize>, b: Option<usize>| match (a, b) {
        (Some(a), Some(b)) if a == b => "=".to_string(),
        (Some(a), Some(b)) => format!("{:+}", b as i64 - a as i64),
        _ => "-".into(),
    };
    let (base, best) = (cr.baseline.as_ref(), cr.best.as_ref());
    let mut rows = Vec::new();
    let mut row = |what: String, a: Option<usize>, b: Option<usize>| {
        rows.push(vec![what, num(a), num(b), change(a, b)]);
    };
    row(
        "IR instructions".into(),
        base.map(|s| s.ir_instructions),
        best.map(|s| s.ir_instructions),
    );
    row(
        "PTX instructions".into(),
        base.map(|s| s.ptx_instructions),
        best.map(|s| s.ptx_instructions),
    );
    row(
        "PTX bytes".into(),
        base.map(|s| s.ptx_bytes),
        best.map(|s| s.ptx_bytes),
    );
    let u = |v: Option<u32>| v.map(|n| n as usize);
    row(
        "registers".into(),
        base.and_then(|s| u(s.registers)),
        best.and_then(|s| u(s.registers)),
    );
    row(
        "spill stores (bytes)".into(),
        base.and_then(|s| u(s.spill_store_bytes)),
        best.and_then(|s| u(s.spill_store_bytes)),
    );
    row(
        "spill loads (bytes)".into(),
        base.and_then(|s| u(s.spill_load_bytes)),
        best.and_then(|s| u(s.spill_load_bytes)),
    );
    let mut groups: Vec<&String> = base
        .iter()
        .chain(best.iter())
        .flat_map(|s| s.mix.keys())
        .collect();
    groups.sort();
    groups.dedup();
    for g in groups {
        let get =
            |s: Option<&super::code::CodeStats>| s.map(|s| s.mix.get(g).copied().unwrap_or(0));
        row(format!("PTX {g}"), get(base), get(best));
    }
    sec.blocks.push(table(
        vec!["", "clang -O3", "best", "change"],
        rows,
        &[],
        &[1, 2, 3],
    ));
    for e in &cr.errors {
        sec.blocks
            .push(Block::Para(vec![t(format!("Error: {e}."))]));
    }
    if let Some(before) = cr.ir_before {
        let steps = &cr.ir_after_each_pass;
        let mut prev = before;
        let mut rows = Vec::new();
        let mut failed = 0;
        for s in steps {
            match s.ir_instructions {
                Some(n) if n != prev => {
                    rows.push(vec![
                        s.index.to_string(),
                        s.pass.clone(),
                        n.to_string(),
                        format!("{:+}", n as i64 - prev as i64),
                    ]);
                    prev = n;
                }
                Some(_) => {}
                None => failed += 1,
            }
        }
        sec.blocks.push(Block::Para(vec![t(format!(
            "IR instructions after each pass of the best pipeline, run one pass at a time (close to the nested run, not identical): {} before, {} after; {} of {} passes changed the count (listed){}.",
            before,
            prev,
            rows.len(),
            steps.len(),
            if failed > 0 { format!("; {failed} could not run alone") } else { String::new() }
        ))]));
        sec.blocks.push(table(
            vec!["#", "pass", "IR instructions", "change"],
            rows,
            &[1],
            &[0, 2, 3],
        ));
    }
    sec
}

// ---- Markdown

fn md_spans(spans: &[Span]) -> String {
    spans
        .iter()
        .map(|s| match s {
            Span::Text(t) => t
                .replace('<', "\\<")
                .replace('*', "\\*")
                .replace('_', "\\_"),
            Span::Code(c) => format!("`{c}`"),
            Span::Strong(t) => format!("**{t}**"),
        })
        .collect()
}

fn md_cell(s: &str, code: bool) -> String {
    let s = s.replace('|', "\\|");
    if code && !s.is_empty() {
        format!("`{s}`")
    } else {
        s.replace('<', "\\<")
            .replace('_', "\\_")
            .replace('*', "\\*")
    }
}

fn markdown(doc: &[Section]) -> String {
    let mut o = String::new();
    for s in doc {
        let _ = writeln!(o, "{} {}\n", "#".repeat(s.level), md_cell(&s.title, false));
        for bl in &s.blocks {
            match bl {
                Block::Para(sp) => {
                    let _ = writeln!(o, "{}\n", md_spans(sp));
                }
                Block::Table {
                    head,
                    rows,
                    code,
                    right,
                    ..
                } => {
                    if rows.is_empty() {
                        o.push_str("(none)\n\n");
                        continue;
                    }
                    let _ = writeln!(o, "| {} |", head.join(" | "));
                    let seps: Vec<&str> = (0..head.len())
                        .map(|i| if right.contains(&i) { "---:" } else { "---" })
                        .collect();
                    let _ = writeln!(o, "|{}|", seps.join("|"));
                    for r in rows {
                        let cells: Vec<String> = r
                            .iter()
                            .enumerate()
                            .map(|(i, v)| md_cell(&v.text, code.contains(&i)))
                            .collect();
                        let _ = writeln!(o, "| {} |", cells.join(" | "));
                    }
                    o.push('\n');
                }
                Block::Fields(fields) => {
                    for (name, v, code) in fields {
                        let v = if *code {
                            format!("`{v}`")
                        } else {
                            md_cell(v, false)
                        };
                        let _ = writeln!(o, "- {name}: {v}");
                    }
                    o.push('\n');
                }
                Block::Pre(text) => {
                    let _ = writeln!(o, "```\n{text}\n```\n");
                }
                Block::Whole { summary, text, .. } => {
                    let _ = writeln!(
                        o,
                        "<details><summary>{}</summary>\n\n```\n{text}\n```\n\n</details>\n",
                        esc(summary)
                    );
                }
                Block::Diff(lines) => {
                    let _ = writeln!(o, "```diff\n{}\n```\n", lines.join("\n"));
                }
                Block::Svg { alt, .. } if !alt.is_empty() => {
                    let _ = writeln!(o, "_{}_\n", alt.replace('_', "\\_"));
                }
                Block::Folded { line, .. } => {
                    let _ = writeln!(o, "{}\n", md_spans(line));
                }
                Block::Svg { .. } => {}
            }
        }
    }
    while o.ends_with("\n\n") {
        o.pop();
    }
    o
}

// ---- Terminal

fn term(doc: &[Section]) -> String {
    let mut o = String::new();
    for s in doc {
        let under = match s.level {
            1 => '=',
            2 => '=',
            _ => '-',
        };
        let _ = writeln!(
            o,
            "{}\n{}\n",
            s.title,
            under.to_string().repeat(s.title.chars().count())
        );
        for bl in &s.blocks {
            match bl {
                Block::Para(sp) | Block::Folded { line: sp, .. } => {
                    let text: String = sp
                        .iter()
                        .map(|s| match s {
                            Span::Text(t) | Span::Code(t) | Span::Strong(t) => t.as_str(),
                        })
                        .collect();
                    let _ = writeln!(o, "{text}\n");
                }
                Block::Table {
                    head, rows, right, ..
                } => {
                    if rows.is_empty() {
                        o.push_str("  (none)\n\n");
                        continue;
                    }
                    let n = head.len();
                    let mut w = vec![0; n];
                    let rows: Vec<Vec<String>> = rows
                        .iter()
                        .map(|r| r.iter().map(|c| c.text.clone()).collect())
                        .collect();
                    for r in std::iter::once(head.iter().map(|h| h.to_string()).collect::<Vec<_>>())
                        .chain(rows.iter().cloned())
                    {
                        for (i, v) in r.iter().enumerate().take(n) {
                            w[i] = w[i].max(v.chars().count());
                        }
                    }
                    let line = |r: &[String]| {
                        let cells: Vec<String> = r
                            .iter()
                            .enumerate()
                            .map(|(i, v)| {
                                let pad = w[i].saturating_sub(v.chars().count());
                                if right.contains(&i) {
                                    format!("{}{v}", " ".repeat(pad))
                                } else {
                                    format!("{v}{}", " ".repeat(pad))
                                }
                            })
                            .collect();
                        format!("  {}", cells.join("  ").trim_end())
                    };
                    if head.iter().any(|h| !h.is_empty()) {
                        let _ = writeln!(
                            o,
                            "{}",
                            line(&head.iter().map(|h| h.to_string()).collect::<Vec<_>>())
                        );
                    }
                    for r in &rows {
                        let _ = writeln!(o, "{}", line(r));
                    }
                    o.push('\n');
                }
                Block::Fields(fields) => {
                    let w = fields.iter().map(|f| f.0.len()).max().unwrap_or(0);
                    for (name, v, _) in fields {
                        let _ = writeln!(o, "  {name:<w$}  {v}");
                    }
                    o.push('\n');
                }
                Block::Pre(text) => {
                    let _ = writeln!(o, "  {text}\n");
                }
                Block::Whole { line, .. } => {
                    let _ = writeln!(o, "{line}\n");
                }
                Block::Diff(lines) => {
                    for l in lines {
                        let _ = writeln!(o, "  {l}");
                    }
                    o.push('\n');
                }
                Block::Svg { .. } => {} // the table after it says the same
            }
        }
    }
    while o.ends_with("\n\n") {
        o.pop();
    }
    o
}

// ---- HTML

const CSS: &str = "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#1b1b1b;line-height:1.45}\
h1{font-size:1.7em}h2{margin-top:2.2em;border-bottom:2px solid #ccd;padding-bottom:.2em}h3{margin-top:1.6em}\
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #d4d4dc;padding:.25em .6em;vertical-align:top}\
th{background:#f0f1f5;text-align:left}td.r,th.r{text-align:right;white-space:nowrap}code,pre{font-family:ui-monospace,monospace;font-size:.9em}\
pre{background:#f6f7f9;padding:.7em;white-space:pre-wrap;word-break:break-all;border:1px solid #e2e3e8}\
pre.diff .del{color:#a11;background:#fde8e8}pre.diff .add{color:#161;background:#e6f6e6}pre.diff .chg{color:#735c0f;background:#fdf6dc}pre.diff .same{color:#777}\
th[data-col]{cursor:pointer;white-space:nowrap}th[data-col]::after{content:\" \\21C5\";color:#99a}\
th[data-dir=desc]::after{content:\" \\2193\";color:#222}th[data-dir=asc]::after{content:\" \\2191\";color:#222}\
summary{cursor:pointer}svg{display:block;margin:.5em 0;max-width:100%;height:auto}nav a{margin-right:1em}\
table.fields td{overflow-wrap:anywhere}table.fields th{white-space:nowrap}";

/// Sorts a `table.sortable` by the clicked column: by `data-v` where its cells have one (the
/// value; an empty one, a missing value, sorts last either way), largest first on the first
/// click, else by text, A to Z first; a second click reverses.
const SORT_JS: &str = "document.querySelectorAll('table.sortable').forEach(function(t){\
t.querySelectorAll('th').forEach(function(th,i){th.setAttribute('data-col',i);th.title='sort';\
th.addEventListener('click',function(){var b=t.tBodies[0],rows=[].slice.call(b.rows),\
numeric=rows.some(function(r){return r.cells[i].hasAttribute('data-v');}),\
dir=(th.getAttribute('data-dir')||(numeric?'asc':'desc'))==='asc'?'desc':'asc',d=dir==='asc'?1:-1;\
t.querySelectorAll('th').forEach(function(h){h.removeAttribute('data-dir');});th.setAttribute('data-dir',dir);\
var v=function(r){var s=r.cells[i].getAttribute('data-v');return s===null||s===''?null:parseFloat(s);};\
rows.sort(function(x,y){if(!numeric)return d*x.cells[i].textContent.localeCompare(y.cells[i].textContent);\
var p=v(x),q=v(y);if(p===null||q===null)return (p===null)-(q===null);return d*(p-q);});\
rows.forEach(function(r){b.appendChild(r);});});});});";

fn html_spans(spans: &[Span]) -> String {
    spans
        .iter()
        .map(|s| match s {
            Span::Text(t) => esc(t),
            Span::Code(c) => format!("<code>{}</code>", esc(c)),
            Span::Strong(t) => format!("<strong>{}</strong>", esc(t)),
        })
        .collect()
}

/// A sort key as `data-v`: the value in full (`{}` of f64 round-trips), empty where missing.
fn sort_key(key: Option<f64>) -> String {
    format!(
        " data-v=\"{}\"",
        key.map(|k| k.to_string()).unwrap_or_default()
    )
}

fn html(doc: &[Section], r: &Report) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\">\
<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\
<title>r3 report</title><style>{CSS}</style></head><body>\n"
    );
    let _ = writeln!(o, "{}", nav(r));
    for s in doc {
        let _ = writeln!(
            o,
            "<h{l} id=\"{}\">{}</h{l}>",
            esc(&s.id),
            esc(&s.title),
            l = s.level
        );
        for bl in &s.blocks {
            html_block(&mut o, bl);
        }
    }
    let _ = writeln!(o, "<script>{SORT_JS}</script>\n</body></html>");
    o
}

/// The report's parts, where there are more than the summary; each kernel is reached from its
/// summary row, since a link per kernel here is a wall of names once a store has tens of them.
fn nav(r: &Report) -> String {
    let mut links = Vec::new();
    if !r.programs.is_empty() {
        links.push(("programs", "programs"));
    }
    if r.summary.kernels > 0 {
        links.push(("summary", "summary"));
    }
    if r.summary.simulated.is_some() {
        links.push(("simulated", "simulated searches"));
    }
    if !r.rewrites.is_empty() {
        links.push(("rewrites", "source rewrites"));
    }
    if links.len() <= 1 {
        return String::new();
    }
    let a: String = links
        .iter()
        .map(|(id, text)| format!("<a href=\"#{id}\">{text}</a>"))
        .collect();
    format!("<nav>{a}</nav>")
}

fn html_block(o: &mut String, bl: &Block) {
    match bl {
        Block::Para(sp) => {
            let _ = writeln!(o, "<p>{}</p>", html_spans(sp));
        }
        Block::Table {
            head,
            rows,
            code,
            right,
            sortable,
        } => html_table(o, head, rows, code, right, *sortable),
        Block::Folded { summary, inner, .. } => {
            let _ = write!(o, "<details><summary>{}</summary>", esc(summary));
            html_block(o, inner);
            o.push_str("</details>\n");
        }
        Block::Fields(fields) => {
            o.push_str("<table class=\"fields\"><tbody>");
            for (name, v, code) in fields {
                let v = if *code {
                    format!("<code>{}</code>", esc(v))
                } else {
                    esc(v)
                };
                let _ = write!(o, "<tr><th>{}</th><td>{v}</td></tr>", esc(name));
            }
            o.push_str("</tbody></table>\n");
        }
        Block::Pre(text) if text.len() > 400 => {
            // Folded (no script needed): a full O3-sized pipeline is a page of text.
            let _ = writeln!(
                o,
                "<details><summary>The whole pipeline text ({} characters)</summary><pre>{}</pre></details>",
                text.len(),
                esc(text)
            );
        }
        Block::Pre(text) => {
            let _ = writeln!(o, "<pre>{}</pre>", esc(text));
        }
        Block::Whole { summary, text, .. } => {
            let _ = writeln!(
                o,
                "<details><summary>{}</summary><pre>{}</pre></details>",
                esc(summary),
                esc(text)
            );
        }
        Block::Diff(lines) => {
            o.push_str("<pre class=\"diff\">");
            for l in lines {
                let cls = match l.chars().next() {
                    Some('-') => "del",
                    Some('+') => "add",
                    Some('~') => "chg",
                    _ => "same",
                };
                let _ = writeln!(o, "<span class=\"{cls}\">{}</span>", esc(l));
            }
            o.push_str("</pre>\n");
        }
        Block::Svg { svg, .. } => {
            let _ = writeln!(o, "<figure>{svg}</figure>");
        }
    }
}

fn html_table(
    o: &mut String,
    head: &[&str],
    rows: &[Vec<Cell>],
    code: &[usize],
    right: &[usize],
    sortable: bool,
) {
    if rows.is_empty() {
        o.push_str("<p>(none)</p>\n");
        return;
    }
    let cls = |i: usize| {
        if right.contains(&i) {
            " class=\"r\""
        } else {
            ""
        }
    };
    let _ = write!(
        o,
        "<table{}>",
        if sortable { " class=\"sortable\"" } else { "" }
    );
    if head.iter().any(|h| !h.is_empty()) {
        o.push_str("<thead><tr>");
        for (i, h) in head.iter().enumerate() {
            let _ = write!(o, "<th{}>{}</th>", cls(i), esc(h));
        }
        o.push_str("</tr></thead>");
    }
    o.push_str("<tbody>");
    for row in rows {
        o.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let mut val = esc(&cell.text);
            if code.contains(&i) {
                val = format!("<code>{val}</code>");
            }
            if let Some(id) = &cell.link {
                val = format!("<a href=\"#{}\">{val}</a>", esc(id));
            }
            let title = cell
                .title
                .as_ref()
                .map_or(String::new(), |t| format!(" title=\"{}\"", esc(t)));
            // Numeric columns sort by value; text columns by their text (no data-v).
            let dv = if sortable && right.contains(&i) {
                sort_key(cell.key)
            } else {
                String::new()
            };
            let _ = write!(o, "<td{}{dv}{title}>{val}</td>", cls(i));
        }
        o.push_str("</tr>");
    }
    o.push_str("</tbody></table>\n");
}

/// "Search: …" — the warm start and, where the last run stopped early, why.
fn search_note(s: &crate::tuning::SearchNote, trials: usize) -> Option<String> {
    let mut parts = Vec::new();
    if !s.recipes.is_empty() {
        let traits = if s.traits.is_empty() {
            String::new()
        } else {
            format!(" (traits: {})", s.traits.join(", "))
        };
        parts.push(format!(
            "recipes measured first: {}{traits}",
            s.recipes.join(", ")
        ));
    }
    if s.learned_from > 0 {
        parts.push(format!(
            "learned from {} earlier searches in the store",
            s.learned_from
        ));
    }
    match (s.stop.as_deref(), s.budget) {
        (Some("time"), Some(b)) => {
            parts.push(format!("cut short by --time after {trials} of {b} trials"))
        }
        (Some("interrupted"), Some(b)) => parts.push(format!(
            "interrupted after {trials} of {b} trials (--resume continues it)"
        )),
        _ => {}
    }
    if let Some(l2) = s.l2.as_ref().filter(|c| c.worth_showing()) {
        parts.push(format!("measured with {}", l2.summary()));
    }
    (!parts.is_empty()).then(|| format!("Search: {}.", parts.join("; ")))
}

/// A kernel's lead: what ships, then what the search found. They differ where apply builds
/// with another trial, or with the same one at the speed its confirmation re-measured.
fn ships_and_best(a: &super::tuning::ApplyReport, best: &super::tuning::Best) -> Vec<Span> {
    let found = |how: &str| {
        format!(
            "Best found: {} (trial {}{how}).",
            x(best.speedup),
            best.trial
        )
    };
    let Some(trial) = a.shipped_trial else {
        return vec![
            t("Ships: "),
            b("clang's code (-O3)"),
            t(format!("; the Apply line below says why. {}", found(""))),
        ];
    };
    let ships = crate::speed::faster(a.shipped_speedup);
    if trial != best.trial {
        return vec![
            t("Ships: "),
            b(ships),
            t(format!(
                " (trial {trial}). {} The Apply line below says why it ships another.",
                found("")
            )),
        ];
    }
    if x(a.shipped_speedup) == x(best.speedup) {
        return vec![
            t("Ships the best: "),
            b(ships),
            t(format!(" (trial {trial}).")),
        ];
    }
    vec![
        t("Ships: "),
        b(ships),
        t(format!(
            " (trial {trial}, as re-measured after the search, which apply goes by). {}",
            found(", as the search measured it")
        )),
    ]
}

/// "Apply: …", on how many recorded launches the shipped code reproduced the outputs, and
/// each variant with its guard and the recorded launches that would take it.
fn apply_line(a: &super::tuning::ApplyReport) -> String {
    let mut line = match a.validated_on.len() {
        0 => format!("Apply: {}.", a.note),
        n => format!(
            "Apply: {}; outputs right on {} recorded launches ({} besides the searched one).",
            a.note,
            n + 1,
            a.validated_on.join(", ")
        ),
    };
    for v in &a.variants {
        let speed = opt(v.speedup, x);
        let taken = match v.launches_recorded {
            0 => String::new(),
            n => format!("; taken by {} of {n} recorded launches", v.launches_taken),
        };
        line.push_str(&format!(
            " Variant: trial {} ({speed}) where {}{taken}.",
            v.trial, v.guard
        ));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_sort_keys() {
        assert_eq!("md".parse::<Format>().unwrap(), Format::Markdown);
        assert!("pdf".parse::<Format>().is_err());
        assert_eq!(fmt_secs(75.0), "1 min 15 s");
        // The value in full, never the text's leading digits; empty (sorted last) for none.
        assert_eq!(sort_key(Some(75.25)), " data-v=\"75.25\"");
        assert_eq!(sort_key(None), " data-v=\"\"");
    }

    #[test]
    fn sortable_tables_sort_by_value_and_link_their_rows() {
        let rows = vec![vec![
            Cell {
                link: Some("k-3d7f".into()),
                ..Cell::from("3d7f9a2b1c4e5d60".to_owned())
            },
            num("1 min 15 s".into(), Some(75.5)),
            num("-".into(), None),
        ]];
        let mut o = String::new();
        html_table(
            &mut o,
            &["kernel", "time", "best"],
            &rows,
            &[0],
            &[1, 2],
            true,
        );
        assert!(
            o.contains("<td><a href=\"#k-3d7f\"><code>3d7f9a2b1c4e5d60</code></a></td>"),
            "a name that starts with digits is text: {o}"
        );
        assert!(
            o.contains("<td class=\"r\" data-v=\"75.5\">1 min 15 s</td>"),
            "{o}"
        );
        assert!(o.contains("<td class=\"r\" data-v=\"\">-</td>"), "{o}");
    }

    /// bfs_step in run Y22 (H200, 2026-12-03): its four recorded launches, its first levels,
    /// stood for few of its launches; 1.48x in replay, 1.16x in the program. The programs'
    /// section names such a kernel; one whose recordings stand for most of its launches, or that
    /// ships nothing, it does not.
    #[test]
    fn a_kernel_measured_on_few_of_its_launches_is_named_under_the_programs() {
        use crate::programs::{ProgramKernel, ProgramReport};
        let kernel = |name: &str, recorded_share: Option<f64>, shipped: f64| ProgramKernel {
            name: name.into(),
            hash: Some(format!("{name}0123456789")),
            share: 0.99,
            launches: 35,
            shipped,
            best: shipped,
            recorded_share,
        };
        let program = |top: Vec<ProgramKernel>| ProgramReport {
            key: "bfs_step-51d6".into(),
            name: "bfs_step".into(),
            gpu: "NVIDIA H200".into(),
            kernels: 1,
            tuned: 1,
            tuned_share: 0.99,
            predicted_shipped: 1.47,
            predicted_best: 1.47,
            measured: None,
            top,
        };
        let names = Names {
            full: false,
            by_key: Default::default(),
        };
        let text = |top| {
            let sec = programs_section(&[program(top)], &names);
            format!("{:?}", sec.blocks)
        };
        let thin = text(vec![kernel("bfs_step_kernel", Some(0.011), 1.48)]);
        assert!(
            thin.contains("Measured on few of their launches")
                && thin.contains(
                    "bfs_step_kernel in bfs_step (99.0% of it): its recordings stand for 1.1% of its launches"
                ),
            "{thin}"
        );
        for top in [
            vec![kernel("k", Some(0.8), 1.48)],
            vec![kernel("k", Some(0.011), 1.0)],
            vec![kernel("k", None, 1.48)],
        ] {
            assert!(!text(top).contains("Measured on few"));
        }
    }

    #[test]
    fn the_l2_state_is_noted_where_it_is_warm_or_the_states_differ() {
        use crate::store::l2::{Choice, Regime};
        let choice = |regime, cold: f64, warm: f64| Choice {
            policy: "auto".into(),
            regime,
            reason: "why".into(),
            natural_us: Some(355.0),
            cold_us: Some(cold),
            warm_us: Some(warm),
        };
        let note = |c: Choice| {
            let s = crate::tuning::SearchNote {
                l2: Some(c),
                ..Default::default()
            };
            search_note(&s, 10)
        };
        assert_eq!(
            note(choice(Regime::Warm, 783.0, 360.0)).unwrap(),
            "Search: measured with L2 warm: why (-O3 783.0 µs cold, 360.0 µs warm; \
             the program's own launches 355.0 µs)."
        );
        assert!(note(choice(Regime::Cold, 783.0, 360.0)).is_some());
        assert_eq!(note(choice(Regime::Cold, 104.0, 100.0)), None);
    }
}
