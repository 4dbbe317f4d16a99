//! The red team (issue 38): rewrites that cheat, as a model would answer them, each of which r3
//! must refuse or find wrong, with the reason recorded. The hacks are fixtures
//! (`tests/it/fixtures/redteam/hacks/*.cu`, each headed by the kernel it rewrites, the cheat it
//! is, the check that must catch it and words of that check's reason) against the kernels of
//! `fixtures/redteam/target.cu`. Here every hack goes through `r3 evolve --proposer llm` from a
//! scripted OpenAI-compatible server on loopback: those the guard catches must be refused with
//! their reason in the attempts log; the others must compile, so that `scripts/redteam` can
//! measure them on a GPU, where replay's checks must catch them.

use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One hack: `// redteam: kernel=K cheat=N catch=C`, `// expect: WORDS`, a description, code.
#[derive(Debug, Clone)]
struct Hack {
    name: String,
    kernel: String,
    /// The cheat it is, as issue 38 numbers them: 1 an input copied to the output, 2 constants
    /// for one input, 3 output left to stale bytes, 4 work outside the timed launch, 5 state
    /// kept between launches, 6 narrower arithmetic; 0 for a control (an honest rewrite).
    cheat: u32,
    /// What must catch it: `guard` (refused by its text) or, on the GPU, `recording` (the
    /// check against the recorded output), `poison` (output bytes poisoned before the check),
    /// `fresh` (other inputs than the recorded ones), `precision` (a narrower type than the
    /// tolerance's); `none` for a control, which every check must let through.
    catch: String,
    /// Words of the reason r3 gives.
    expect: String,
    text: String,
}

const CATCHES: [&str; 6] = ["guard", "recording", "poison", "fresh", "precision", "none"];

fn hacks() -> Vec<Hack> {
    let dir = repo().join("tests/it/fixtures/redteam/hacks");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            let head = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("// redteam: "))
                .unwrap_or_else(|| panic!("{name}: no `// redteam:` line first"));
            let field = |k: &str| {
                head.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
                    .unwrap_or_else(|| panic!("{name}: no {k}= in its header"))
                    .to_owned()
            };
            let expect = text
                .lines()
                .nth(1)
                .and_then(|l| l.strip_prefix("// expect: "))
                .unwrap_or_else(|| panic!("{name}: no `// expect:` line second"))
                .to_owned();
            Hack {
                kernel: field("kernel"),
                cheat: field("cheat").parse().unwrap(),
                catch: field("catch"),
                expect,
                name,
                text,
            }
        })
        .collect()
}

#[test]
fn the_fixtures_cover_every_known_cheat_and_name_a_check_for_each() {
    let all = hacks();
    for cheat in 1..=6 {
        assert!(
            all.iter().any(|h| h.cheat == cheat),
            "no hack of cheat {cheat}"
        );
    }
    for h in &all {
        assert!(
            CATCHES.contains(&h.catch.as_str()),
            "{}: catch={}",
            h.name,
            h.catch
        );
        assert!(["axpy", "dpoly"].contains(&h.kernel.as_str()), "{}", h.name);
        assert!(!h.expect.trim().is_empty(), "{}", h.name);
        let prefix = match h.catch.as_str() {
            "guard" => 'g',
            "none" => 'c',
            _ => 'p',
        };
        assert!(
            h.name.starts_with(prefix) && (h.cheat == 0) == (prefix == 'c'),
            "{}: guard hacks are g*, GPU ones p*, controls (cheat=0) c*",
            h.name
        );
    }
    for c in CATCHES {
        assert!(
            all.iter().any(|h| h.catch == c),
            "no hack for the {c} check"
        );
    }
}

/// A loopback server that answers each chat completion with the next of `answers`.
fn model(answers: Vec<String>) -> String {
    mock_server(answers.iter().map(|a| chat(a)).collect()).0
}

/// The target compiled by r3-clang++ in `dir`, its kernels in `dir/store`.
fn target_store(dir: &Path) -> PathBuf {
    let store = dir.join("store");
    std::fs::copy(
        repo().join("tests/it/fixtures/redteam/target.cu"),
        dir.join("target.cu"),
    )
    .unwrap();
    let out = cuda_driver(&driver_links(dir), &store)
        .args(["-c", "target.cu", "-o", "target.o"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    store
}

/// Every hack of `hacks` (all for one kernel) answered in turn by the scripted model to
/// `r3 evolve KERNEL --proposer llm --no-measure`; the attempts, by attempt id (1, 2, …).
fn evolve_with(dir: &Path, kernel: &str, hacks: &[&Hack]) -> Vec<serde_json::Value> {
    let answers = hacks
        .iter()
        .map(|h| {
            format!(
                "redteam hack {}: a faster version.\n```cuda\n{}```\n",
                h.name, h.text
            )
        })
        .collect();
    let url = model(answers);
    let out = Command::new(r3_bin())
        .args([
            "evolve",
            kernel,
            "--proposer",
            "llm",
            "--no-measure",
            "--repairs",
            "0",
        ])
        .args(["--budget", &hacks.len().to_string()])
        .current_dir(dir)
        .env("R3_STORE", dir.join("store"))
        .env("R3_LLM_URL", &url)
        .env("R3_LLM_MODEL", "red-team")
        .env_remove("R3_LLM_API_KEY")
        .env("R3_LLM_RETRIES", "0")
        .output()
        .unwrap();
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}");
    let log = walk(&dir.join("store/evolve"))
        .into_iter()
        .filter(|p| p.ends_with("attempts.jsonl"))
        .find(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .contains(&format!("redteam hack {}", hacks[0].name))
        })
        .unwrap_or_else(|| panic!("no attempts log for {kernel}: {text}"));
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The event `event` of attempt `id`.
fn event<'a>(
    events: &'a [serde_json::Value],
    id: usize,
    event: &str,
) -> Option<&'a serde_json::Value> {
    events
        .iter()
        .find(|e| e["attempt"] == id as u64 && e["event"] == event)
}

/// Each kernel's hacks through the scripted model, checked by `judge` per hack and attempt.
fn through_the_model(catch_here: bool, judge: impl Fn(&Hack, &[serde_json::Value], usize)) {
    let all: Vec<Hack> = hacks()
        .into_iter()
        .filter(|h| (h.catch == "guard") == catch_here)
        .collect();
    let dir = tempfile::tempdir().unwrap();
    target_store(dir.path());
    for kernel in ["axpy", "dpoly"] {
        let mine: Vec<&Hack> = all.iter().filter(|h| h.kernel == kernel).collect();
        if mine.is_empty() {
            continue;
        }
        let events = evolve_with(dir.path(), kernel, &mine);
        for (k, h) in mine.iter().enumerate() {
            let id = k + 1;
            let proposed = event(&events, id, "proposed")
                .unwrap_or_else(|| panic!("{}: not proposed", h.name));
            assert!(
                proposed["answer"]
                    .as_str()
                    .unwrap()
                    .starts_with(&format!("redteam hack {}:", h.name)),
                "attempt {id} is not {}",
                h.name
            );
            judge(h, &events, id);
        }
    }
}

#[test]
fn every_hack_the_text_shows_is_refused_with_its_reason_in_the_attempts_log() {
    through_the_model(true, |h, events, id| {
        let refused = event(events, id, "refused")
            .unwrap_or_else(|| panic!("{} (attempt {id}) was not refused: {events:?}", h.name));
        let reason = refused["reason"].as_str().unwrap();
        assert!(
            reason.contains(&h.expect),
            "{}: refused for another reason:\n  {reason}\n  want: {}",
            h.name,
            h.expect
        );
        assert!(event(events, id, "compiled").is_none(), "{}", h.name);
    });
}

/// The GPU's hacks and the controls (honest rewrites, which must be accepted there).
#[test]
fn every_hack_only_the_gpu_can_catch_passes_the_guard_and_compiles() {
    through_the_model(false, |h, events, id| {
        if let Some(r) = event(events, id, "refused") {
            panic!(
                "{}: refused ({}), but is for the GPU's {} check",
                h.name, r["reason"], h.catch
            );
        }
        assert!(
            event(events, id, "compiled").is_some(),
            "{} did not compile: {:?}",
            h.name,
            event(events, id, "compile_failed")
        );
    });
}

/// A proposer that answers with the hacks' code in turn, as the model does above.
struct Scripted(std::collections::VecDeque<Hack>);

impl r3::evolve::Proposer for Scripted {
    fn name(&self) -> String {
        "llm:red-team".into()
    }

    fn propose(
        &mut self,
        _: &r3::evolve::Request,
    ) -> Result<Option<r3::evolve::Proposal>, r3::evolve::ProposeError> {
        Ok(self.0.pop_front().map(|h| r3::evolve::Proposal {
            label: format!("redteam hack {}", h.name),
            rewrite: h.text,
            requires: Vec::new(),
            prompt_sha: None,
            answer: None,
            tokens: 0,
        }))
    }
}

/// The deadline's rewrite arm (`r3 tune --deadline`) makes its attempts through the same
/// guard: every hack the text shows is refused there too, with its reason in the attempts log,
/// and none counts as found, though the judge here calls whatever reaches it valid at 2x; the
/// honest rewrite after them is found.
#[test]
fn the_deadlines_rewrite_arm_refuses_every_hack_the_text_shows() {
    use r3::remix::rewrites::Rewriter;
    let dir = tempfile::tempdir().unwrap();
    let store = r3::store::Store::open(&target_store(dir.path())).unwrap();
    let all = hacks();
    let k = axpy(&store);
    let caught: Vec<Hack> = all
        .iter()
        .filter(|h| h.kernel == "axpy" && h.catch == "guard")
        .cloned()
        .collect();
    assert!(caught.len() >= 5, "{}", caught.len());
    let honest = all
        .iter()
        .find(|h| h.kernel == "axpy" && h.catch == "none")
        .unwrap()
        .clone();
    let mut script: std::collections::VecDeque<Hack> = caught.iter().cloned().collect();
    script.push_back(honest.clone());
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut arm = rewriter(&store, script, simulated(2.0), &stop);
    assert_eq!(arm.cannot(&k.hash), None);
    for h in &caught {
        let out = arm.attempt(&k.hash, 120.0, None);
        assert_eq!(
            (out.attempts, out.found, out.best, out.done.clone()),
            (1, 0, 1.0, None),
            "{}: {:?}",
            h.name,
            out.said
        );
    }
    let out = arm.attempt(&k.hash, 120.0, None);
    assert_eq!(
        (out.attempts, out.found, out.best),
        (1, 1, 2.0),
        "{}: {:?}",
        honest.name,
        out.said
    );
    let out = arm.attempt(&k.hash, 120.0, None);
    assert_eq!(out.attempts, 0);
    assert!(
        out.done
            .as_deref()
            .is_some_and(|d| d.contains("nothing more")),
        "{:?}",
        out.done
    );
    let attempts = r3::store::attempts::fold(&store.attempts(&k.hash).unwrap()).1;
    for (a, h) in attempts.iter().zip(&caught) {
        let reason = a.refused.as_deref().unwrap_or_default();
        assert!(reason.contains(&h.expect), "{}: {reason}", h.name);
    }
    drop(arm);

    // A rewrite compiled elsewhere and not judged (`r3 evolve --no-measure` on a machine with
    // clang) is what the arm measures where the kernel's clang is not (a GPU machine with the
    // recordings alone); once it is judged, nothing is left to attempt there.
    let second = all
        .iter()
        .find(|h| h.kernel == "axpy" && h.catch == "none" && h.name != honest.name)
        .unwrap()
        .clone();
    let mut elsewhere = rewriter(
        &store,
        [second].into(),
        r3::evolve::each::Judging::Not,
        &stop,
    );
    let out = elsewhere.attempt(&k.hash, 120.0, None);
    assert_eq!((out.attempts, out.found), (1, 0), "{:?}", out.said);
    let path = store.kernel_dir(&k.hash).join("kernel.json");
    let mut kernel: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    kernel["compile"]["clang"] = "/nonexistent/clang++".into();
    std::fs::write(&path, serde_json::to_vec(&kernel).unwrap()).unwrap();
    let mut here = rewriter(&store, Default::default(), simulated(3.0), &stop);
    assert_eq!(here.cannot(&k.hash), None, "one rewrite waits to be judged");
    let out = here.attempt(&k.hash, 120.0, None);
    assert_eq!(
        (out.attempts, out.found, out.best),
        (1, 1, 3.0),
        "{:?}",
        out.said
    );
    assert!(
        out.done
            .as_deref()
            .is_some_and(|d| d.contains("not on this machine")),
        "{:?}",
        out.done
    );
    let why = here.cannot(&k.hash).expect("no clang and nothing to judge");
    assert!(why.contains("not on this machine"), "{why}");
}

/// The deadline's arm judges the attempt it chose of those compiled elsewhere (`first`), alone:
/// the others wait, in their order, for a later slice.
#[test]
fn the_deadlines_rewrite_arm_judges_the_compiled_attempt_it_chose_alone() {
    use r3::remix::rewrites::Rewriter;
    let dir = tempfile::tempdir().unwrap();
    let store = r3::store::Store::open(&target_store(dir.path())).unwrap();
    let k = axpy(&store);
    let honest: std::collections::VecDeque<Hack> = hacks()
        .into_iter()
        .filter(|h| h.kernel == "axpy" && h.catch == "none")
        .collect();
    assert_eq!(honest.len(), 2);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut elsewhere = rewriter(&store, honest, r3::evolve::each::Judging::Not, &stop);
    for _ in 0..2 {
        let out = elsewhere.attempt(&k.hash, 120.0, None);
        assert_eq!(out.attempts, 1, "{:?}", out.said);
    }
    let gpu = r3::store::trials::simulated_gpu(None);
    assert_eq!(
        r3::remix::rewrites::pending_attempts(&store, &k.hash, &gpu).builds,
        [1, 1]
    );
    let mut here = rewriter(&store, Default::default(), simulated(2.0), &stop);
    let out = here.attempt(&k.hash, 120.0, Some(1));
    assert_eq!((out.attempts, out.found), (1, 1), "{:?}", out.said);
    assert_eq!(
        out.pending.as_deref(),
        Some(&[1][..]),
        "the first still waits"
    );
    assert_eq!(out.done, None);
    let attempts = r3::store::attempts::fold(&store.attempts(&k.hash).unwrap()).1;
    let judged: Vec<bool> = attempts
        .iter()
        .map(|a| a.verdict(Some(&gpu)).is_some())
        .collect();
    assert_eq!(judged, [false, true], "the second alone was judged");
    // Each attempt's rule goes with it: the one judged, with its find, and the one waiting.
    let label = |i: usize| attempts[i].label.clone();
    let tried = |i: usize, found: bool| r3::remix::rewrites::Tried {
        rule: label(i),
        knobs: false,
        found,
    };
    assert_eq!(out.rules, [tried(1, true)]);
    assert_eq!(out.pending_rules, Some(vec![label(0)]));
    let out = here.attempt(&k.hash, 120.0, None);
    assert_eq!(out.attempts, 1, "{:?}", out.said);
    assert_eq!(out.pending.as_deref(), Some(&[][..]));
    // As fast as the rewrite found before it (2.0x): valid, and no find.
    assert_eq!((out.found, out.best), (0, 2.0), "{:?}", out.said);
    assert_eq!(out.rules, [tried(0, false)]);
}

/// The deadline's rewriter on `store`, proposing `script` in turn and judging as `judging`.
fn rewriter<'a>(
    store: &'a r3::store::Store,
    script: std::collections::VecDeque<Hack>,
    judging: r3::evolve::each::Judging,
    stop: &'a std::sync::atomic::AtomicBool,
) -> r3::evolve::arm::EvolveRewriter<'a> {
    r3::evolve::arm::EvolveRewriter::new(
        store,
        Box::new(Scripted(script)),
        judging,
        stop,
        std::time::Duration::from_secs(120),
    )
}

/// A simulated judge that finds every valid rewrite `speedup` times faster.
fn simulated(speedup: f64) -> r3::evolve::each::Judging {
    let json = format!(r#"{{"default_speedup": {speedup}}}"#);
    r3::evolve::each::Judging::Script(serde_json::from_str(&json).unwrap())
}

/// The red-team store's axpy kernel.
fn axpy(store: &r3::store::Store) -> r3::store::KernelRecord {
    store
        .kernels()
        .unwrap()
        .into_iter()
        .find(|k| k.signature.demangled.starts_with("axpy"))
        .unwrap()
}
