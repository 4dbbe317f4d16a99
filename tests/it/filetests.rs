//! Filetests: a kernel in, what r3 makes of it out, kept beside it for review.
//!
//! Each `tests/filetests/**/NAME.{ll,ptx,cu}` starts with comment lines (`;` in `.ll`, `//` in
//! `.ptx` and `.cu`), among them one or more `RUN:` lines. The test runs each and compares what
//! they printed with `NAME.out`, so that a change to a rewrite rule, the pass catalog, a preset,
//! a recipe, the lowering, the splice or the PTX reading shows up in review as a diff of PTX,
//! IR or source. `R3_BLESS=1 cargo test --release filetests` writes every `.out` file anew in
//! one run (and removes those whose test is gone).
//!
//! What a RUN line can say (tests/filetests/README.md has examples):
//!
//! - `r3 ARGS`: the r3 binary, `r3 ARGS FILE`; its standard output, then its standard error
//!   if it wrote any.
//! - `lower CANDIDATE`: FILE lowered as the search lowers a candidate (in an `r3 __lower`
//!   child, with its knobs, LLVM options and folded values): the candidate's knobs, then its PTX.
//! - `diff CANDIDATE`: what the candidate changes in the PTX of the baseline (`default<O3>`,
//!   llc -O3, as clang -O3 builds the kernel), as a unified diff.
//! - `splice CANDIDATE | CANDIDATE …`: apply's splice. The baseline PTX stands for clang's; each
//!   candidate is lowered and added as a guarded variant of the first kernel (`generic
//!   CANDIDATE` replaces the kernel's own entry instead). Prints the dispatch table's rows and
//!   the spliced PTX as a diff against clang's.
//! - `stats` / `stats lines`: r3-ptx's reading of the PTX (FILE itself for `.ptx`, else the
//!   baseline's): instructions, entries, mix, the traits recipes name; `lines` lists each
//!   counted instruction with its group.
//! - `rewrite RULE [block=X,Y,Z] [disjoint=yes|no]`: one of evolve's source rules applied to
//!   FILE's code (the comment header left out) with the recordings' facts given: the
//!   rewritten source.
//!
//! A CANDIDATE is `baseline`, `preset NAME` (passes/presets.toml, the expanded pipeline),
//! `variant NAME` (passes/grid.toml), `recipe NAME [block=N]` (passes/recipes.toml, for a
//! kernel launched with N threads a block) or a candidate as JSON, as the trials store it.

use crate::support::{r3, r3_bin, repo, stderr, stdout};
use r3::candidate::Candidate;
use r3::passes::catalog::Catalog;
use std::path::{Path, PathBuf};

const RUN: &str = "RUN: ";

/// The variant tag the splice runs use (apply's shim uses 8 hex digits of the kernel's hash).
const TAG: &str = "1234abcd";

/// The comment that starts a header line in a file of this extension.
fn comment_of(path: &Path) -> Option<&'static str> {
    match path.extension()?.to_str()? {
        "ll" => Some(";"),
        "ptx" | "cu" => Some("//"),
        _ => None,
    }
}

/// The header: the file's first lines, each a comment.
fn header<'a>(text: &'a str, comment: &'a str) -> impl Iterator<Item = &'a str> {
    text.lines().take_while(move |l| l.starts_with(comment))
}

/// The text after `RUN: ` of each RUN line of the header.
fn runs(text: &str, comment: &str) -> Vec<String> {
    header(text, comment)
        .filter_map(|l| l[comment.len()..].trim_start().strip_prefix(RUN))
        .map(|r| r.trim().to_owned())
        .collect()
}

/// `r3 ARGS`'s arguments (split at spaces; an argument `''` is the empty string).
fn r3_args(args: &str) -> Vec<String> {
    args.split_whitespace()
        .map(|a| {
            if a == "''" {
                String::new()
            } else {
                a.to_owned()
            }
        })
        .collect()
}

/// The candidate a CANDIDATE of a RUN line names.
fn candidate(spec: &str, cat: &Catalog) -> Result<Candidate, String> {
    let spec = spec.trim();
    if spec.starts_with('{') {
        return serde_json::from_str(spec).map_err(|e| format!("candidate {spec}: {e}"));
    }
    if spec == "baseline" {
        return Ok(Candidate::baseline());
    }
    if let Some(name) = spec.strip_prefix("preset ") {
        let p = cat.preset(name.trim()).map_err(|e| e.to_string())?;
        return Ok(Candidate::with_pipeline(&p.pipeline));
    }
    if let Some(name) = spec.strip_prefix("variant ") {
        let variants = r3::remix::grid::builtin(cat).map_err(|e| e.to_string())?;
        let names: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
        return variants
            .iter()
            .find(|v| v.name == name.trim())
            .map(|v| Candidate::with_pipeline(&v.pipeline))
            .ok_or_else(|| format!("no grid variant '{name}'; variants: {}", names.join(", ")));
    }
    if let Some(rest) = spec.strip_prefix("recipe ") {
        let (name, block) = match rest.trim().split_once(" block=") {
            Some((n, b)) => (
                n.trim(),
                Some(
                    b.trim()
                        .parse::<u32>()
                        .map_err(|e| format!("{spec}: {e}"))?,
                ),
            ),
            None => (rest.trim(), None),
        };
        let recipes = r3::remix::recipes::builtin(cat).map_err(|e| e.to_string())?;
        let r = recipes
            .iter()
            .find(|r| r.spec.name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = recipes.iter().map(|r| r.spec.name.as_str()).collect();
                format!("no recipe '{name}'; recipes: {}", names.join(", "))
            })?;
        return r.candidate(block).ok_or_else(|| {
            format!("recipe {name} bounds launches by the kernel's block: give block=N")
        });
    }
    Err(format!(
        "candidate `{spec}`: expected baseline, preset NAME, variant NAME, recipe NAME \
         [block=N] or a candidate as JSON"
    ))
}

/// The file's kernel lowered as the search lowers the candidate: in an `r3 __lower` child.
fn lower(file: &Path, c: &Candidate) -> Result<String, String> {
    let job = r3::lower::isolated::LowerJob {
        bitcode: file.to_owned(),
        kernel_hash: "filetest".into(),
        candidate: c.clone(),
        target: r3::lower::Codegen::default(),
        mutation: None,
    };
    r3::lower::isolated::lower_isolated_with(&r3_bin(), &job)
        .map(|l| l.ptx)
        .map_err(|e| e.message)
}

fn knobs(c: &Candidate) -> String {
    format!("; knobs: {}\n", c.knob_words(true).join(", "))
}

fn unified(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    if old == new {
        return "(no difference)\n".into();
    }
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .header(old_name, new_name)
        .to_string()
}

/// What one RUN line prints.
fn run(file: &Path, text: &str, line: &str, home: &Path) -> Result<String, String> {
    let cat = Catalog::builtin().map_err(|e| e.to_string())?;
    let (op, rest) = line.split_once(' ').unwrap_or((line, ""));
    let baseline = || lower(file, &Candidate::baseline());
    match op {
        "r3" => {
            let args = r3_args(rest);
            let path = file.to_string_lossy();
            let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
            argv.push(&path);
            let o = r3(&argv, home);
            if !o.status.success() {
                return Err(format!("r3 {args:?} failed:\n{}", stderr(&o)));
            }
            let mut out = stdout(&o);
            let err = stderr(&o);
            if !err.is_empty() {
                out.push_str("-- stderr\n");
                out.push_str(&err);
            }
            Ok(out)
        }
        "lower" => {
            let c = candidate(rest, &cat)?;
            Ok(knobs(&c) + &lower(file, &c)?)
        }
        "diff" => {
            let c = candidate(rest, &cat)?;
            let ptx = lower(file, &c)?;
            Ok(knobs(&c) + &unified(&baseline()?, &ptx, "baseline", "candidate"))
        }
        "splice" => splice(file, rest, &cat, &baseline()?),
        "stats" => {
            let ptx = match file.extension().and_then(|e| e.to_str()) {
                Some("ptx") => text.to_owned(),
                _ => baseline()?,
            };
            Ok(stats(&ptx, rest.trim() == "lines"))
        }
        "rewrite" => rewrite(text, rest),
        _ => Err(format!(
            "`RUN: {line}`: expected r3, lower, diff, splice, stats or rewrite"
        )),
    }
}

/// `splice CANDIDATE | …`: the candidates spliced into the baseline's PTX as apply does.
fn splice(file: &Path, specs: &str, cat: &Catalog, host: &str) -> Result<String, String> {
    use r3::apply::{dispatch, splice, winners::Guard};
    let kernel = r3::ptx::stats::entries(host)
        .into_iter()
        .next()
        .ok_or("the baseline's PTX has no entry")?;
    let mut pieces = Vec::new(); // (ptx, tag, variant entry)
    let mut out = String::from("; dispatch table rows:\n");
    for spec in specs.split(" | ") {
        let (generic, spec) = match spec.trim().strip_prefix("generic ") {
            Some(s) => (true, s),
            None => (false, spec),
        };
        let c = candidate(spec, cat)?;
        let ptx = lower(file, &c)?;
        if generic {
            pieces.push((ptx, TAG.to_owned(), None));
            continue;
        }
        let n = 1 + pieces.iter().filter(|p| p.2.is_some()).count();
        let entry = dispatch::entry_name(&kernel, TAG, n);
        out.push_str(&dispatch::line(&dispatch::Row {
            kernel: kernel.clone(),
            arch: "sm_90".into(),
            entry: entry.clone(),
            guard: Guard::of(&c),
        }));
        out.push('\n');
        pieces.push((ptx, format!("{TAG}v{n}"), Some(entry)));
    }
    let tuned: Vec<splice::Tuned> = pieces
        .iter()
        .map(|(ptx, tag, variant)| splice::Tuned {
            kernel: &kernel,
            ptx,
            tag,
            variant: variant.as_deref(),
        })
        .collect();
    let spliced = splice::splice(host, &tuned).map_err(|e| e.to_string())?;
    Ok(out + &unified(host, &spliced, "clang's PTX", "spliced"))
}

/// r3-ptx's reading of a PTX text.
fn stats(ptx: &str, lines: bool) -> String {
    use r3::ptx::stats;
    let s = stats::stats(ptx);
    let mix: Vec<String> = stats::mix(ptx)
        .iter()
        .map(|(g, n)| format!("{g}={n}"))
        .collect();
    let list = |v: Vec<String>, sep: &str| {
        if v.is_empty() {
            "(none)".to_owned()
        } else {
            v.join(sep)
        }
    };
    let traits = r3::ptx::cfg::traits(ptx)
        .iter()
        .map(|t| t.to_string())
        .collect();
    let mut out = format!(
        "instructions: {}\nentries: {}\nmix: {}\ntraits: {}\n",
        s.instructions,
        list(s.entries, ", "),
        list(mix, " "),
        list(traits, ", ")
    );
    if lines {
        for l in stats::instructions(ptx) {
            out.push_str(&format!(
                "  {:<15} {l}\n",
                stats::opcode_group(stats::opcode(l))
            ));
        }
    }
    out
}

/// `rewrite RULE [block=X,Y,Z] [disjoint=yes|no]`: an evolve rule on the file's code.
fn rewrite(text: &str, args: &str) -> Result<String, String> {
    let mut words = args.split_whitespace();
    let name = words.next().ok_or("rewrite: name a rule")?;
    let rule = r3::evolve::rules::rule(name).ok_or_else(|| {
        let names: Vec<&str> = r3::evolve::rules::RULES.iter().map(|r| r.name).collect();
        format!("no rule '{name}'; rules: {}", names.join(", "))
    })?;
    let mut facts = r3::evolve::rules::Facts::default();
    for w in words {
        match w.split_once('=') {
            Some(("block", dims)) => {
                let d: Vec<u32> = dims
                    .split(',')
                    .map(|x| x.parse().map_err(|e| format!("{w}: {e}")))
                    .collect::<Result<_, String>>()?;
                let [x, y, z] = d[..] else {
                    return Err(format!("{w}: expected block=X,Y,Z"));
                };
                facts.block = Some([x, y, z]);
            }
            Some(("disjoint", "yes")) => facts.pointers_disjoint = Some(true),
            Some(("disjoint", "no")) => facts.pointers_disjoint = Some(false),
            _ => {
                return Err(format!(
                    "rewrite: `{w}`: expected block=X,Y,Z or disjoint=yes|no"
                ))
            }
        }
    }
    let code: String = text
        .lines()
        .skip_while(|l| l.starts_with("//"))
        .skip_while(|l| l.trim().is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    Ok(rule
        .apply(&code, &facts)
        .unwrap_or_else(|| format!("({name} does not apply)\n")))
}

/// What the runs of one file print, each after a line naming it. The file's own path reads as
/// its name and a time in milliseconds as `_ ms`, so that the output depends on neither where
/// the repository is nor how fast the machine is.
fn output(file: &Path, home: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let comment = comment_of(file).ok_or_else(|| format!("{}: not a filetest", file.display()))?;
    let runs = runs(&text, comment);
    if runs.is_empty() {
        return Err(format!("{}: no `{comment} {RUN}…` line", file.display()));
    }
    let name = file.file_name().unwrap().to_string_lossy().into_owned();
    let millis = regex::Regex::new(r"\b\d+(\.\d+)? ms\b").unwrap();
    let path = file.to_string_lossy();
    let mut out = String::new();
    for line in runs {
        let got = run(file, &text, &line, home)
            .map_err(|e| format!("{}: `RUN: {line}`: {e}", file.display()))?;
        out.push_str(&format!("== {line} {name}\n"));
        out.push_str(&millis.replace_all(&got.replace(&*path, &name), "_ ms"));
    }
    Ok(out)
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = crate::support::walk(dir)
        .into_iter()
        .filter(|p| comment_of(p).is_some())
        .collect();
    v.sort();
    v
}

/// Where the output differs from the `.out` file's, a unified diff that names it.
fn compare(expected_path: &Path, want: &str, got: &str) -> Option<String> {
    (want != got).then(|| {
        similar::TextDiff::from_lines(want, got)
            .unified_diff()
            .header(&expected_path.display().to_string(), "now")
            .to_string()
    })
}

/// Each file's output, the files run `jobs` at a time (each run is its own process).
fn outputs(all: &[PathBuf], home: &Path) -> Vec<Result<String, String>> {
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let slots: Vec<std::sync::Mutex<Option<Result<String, String>>>> =
        all.iter().map(|_| Default::default()).collect();
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(file) = all.get(i) else { break };
                *slots[i].lock().unwrap() = Some(output(file, home));
            });
        }
    });
    slots
        .into_iter()
        .map(|m| m.into_inner().unwrap().expect("every file ran"))
        .collect()
}

#[test]
fn each_filetest_prints_what_its_out_file_holds() {
    let home = tempfile::tempdir().unwrap();
    let bless = std::env::var_os("R3_BLESS").is_some_and(|v| v == "1");
    let dir = repo().join("tests/filetests");
    let all = files(&dir);
    assert!(all.len() >= 40, "filetests found: {all:?}");
    let mut failures = Vec::new();
    // One `.out` per test: `k.ll` and `k.ptx` in one directory would share one.
    let outs: Vec<PathBuf> = all.iter().map(|f| f.with_extension("out")).collect();
    for (i, o) in outs.iter().enumerate() {
        if outs[..i].contains(o) {
            failures.push(format!("{}: two filetests of that name", o.display()));
        }
    }
    for stale in crate::support::walk(&dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "out") && !outs.contains(p))
    {
        if bless {
            std::fs::remove_file(&stale).unwrap();
        } else {
            failures.push(format!(
                "{}: no filetest of that name (bless to remove it)",
                stale.display()
            ));
        }
    }
    for (got, expected_path) in outputs(&all, home.path()).into_iter().zip(&outs) {
        let got = match got {
            Ok(got) => got,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        if bless {
            std::fs::write(expected_path, &got)
                .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
            continue;
        }
        let want = std::fs::read_to_string(expected_path).unwrap_or_default();
        failures.extend(compare(expected_path, &want, &got));
    }
    assert!(
        failures.is_empty(),
        "{} of {} filetests differ from their .out files (if the change is meant, bless them: \
         R3_BLESS=1 cargo test --release filetests):\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}

#[test]
fn run_lines_are_read_from_the_header_only() {
    let text = "; RUN: r3 ptx --pipeline ''\n; a comment\n; RUN: diff recipe learned-2 block=256\n\
                define void @f() {\n; RUN: r3 not-a-header\n  ret void\n}\n";
    assert_eq!(
        runs(text, ";"),
        ["r3 ptx --pipeline ''", "diff recipe learned-2 block=256"]
    );
    assert_eq!(r3_args("ptx --pipeline ''"), ["ptx", "--pipeline", ""]);
    let cu = "// RUN: rewrite shared-tiling block=16,16,1\n//\n__global__ void k() {}\n// RUN: x\n";
    assert_eq!(runs(cu, "//"), ["rewrite shared-tiling block=16,16,1"]);
}

/// An output that no longer matches fails with a diff naming the `.out` file, the lines
/// expected (`-`) and the lines printed now (`+`).
#[test]
fn a_changed_output_reads_as_a_diff_naming_the_out_file() {
    let path = Path::new("tests/filetests/ptx/k.out");
    let want = "== r3 ptx k.ll\n\tadd.s32 \t%r3, %r2, 1;\n\tret;\n";
    let got = "== r3 ptx k.ll\n\tadd.s32 \t%r3, %r2, 2;\n\tret;\n";
    assert_eq!(compare(path, want, want), None);
    let diff = compare(path, want, got).unwrap();
    assert!(
        diff.starts_with("--- tests/filetests/ptx/k.out\n+++ now\n"),
        "{diff}"
    );
    assert!(
        diff.contains("\n-\tadd.s32 \t%r3, %r2, 1;\n+\tadd.s32 \t%r3, %r2, 2;\n"),
        "{diff}"
    );
}

/// Each way a RUN line names a candidate gives the candidate the search would lower.
#[test]
fn candidates_are_named_as_the_search_names_them() {
    let cat = Catalog::builtin().unwrap();
    assert_eq!(candidate("baseline", &cat).unwrap(), Candidate::baseline());
    assert_eq!(
        candidate("preset O2", &cat).unwrap().pipeline,
        cat.preset("O2").unwrap().pipeline
    );
    assert_eq!(
        candidate("variant no IR passes", &cat).unwrap().pipeline,
        ""
    );
    let c = candidate("recipe learned-2 block=256", &cat).unwrap();
    assert_eq!((c.max_threads, c.min_blocks_per_sm), (Some(256), Some(2)));
    let c = candidate(r#"{"pipeline":"default<O3>","codegen_opt":1}"#, &cat).unwrap();
    assert_eq!(c.codegen_opt, 1);
    for (bad, says) in [
        ("variant O4", "no grid variant 'O4'"),
        ("recipe learned-2", "give block=N"),
        ("recipe nope", "no recipe 'nope'"),
        ("O3", "expected baseline"),
        (r#"{"pipeline":"default<O3>","speed":9}"#, "speed"),
    ] {
        let e = candidate(bad, &cat).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}
