//! The winners and trials in formats other tools read, where the fields map honestly:
//!
//! - **T4** (the auto-tuning community's results schema, which Kernel Tuner writes and reads):
//!   one kernel's trials, each with its configuration (the candidate's fields), its validity
//!   (`correct`, `compile`, `runtime`, `timeout`, `correctness`) and its measured time.
//! - **Proteus/Mneme tuned-kernels JSON** (`PROTEUS_TUNED_KERNELS`): per mangled kernel name the
//!   pipeline, codegen level and launch bounds. Fast-math and LLVM options have no field there,
//!   so a winner that needs either is left out (and named in `skipped`), never written without;
//!   nor has a guard, so variants (which run only where theirs holds) are left out too and the
//!   generic winner stands for the kernel.

use super::plan::{Variant, Winner};
use crate::store::outcome::Outcome;
use crate::store::trials::TrialRecord;
use serde_json::{json, Map, Value};

/// T4 results (schema 1.0.0) of one kernel's trials. Times are microseconds, as measured by
/// replay (the median of the interleaved repetitions); compile times are milliseconds.
pub fn t4(trials: &[TrialRecord]) -> Value {
    let results: Vec<Value> = trials.iter().filter_map(t4_result).collect();
    json!({ "schema_version": "1.0.0", "results": results })
}

/// None for a candidate the screen dropped: it was never run on the launch, so it has neither
/// a time nor a verdict to give.
fn t4_result(t: &TrialRecord) -> Option<Value> {
    let (invalidity, time) = match &t.outcome {
        Outcome::Screened { .. } => return None,
        Outcome::Valid { time, .. } => ("correct", Some(time.median_us)),
        Outcome::CompileError { .. } => ("compile", None),
        Outcome::WrongOutput { .. } => ("correctness", None),
        Outcome::Crashed { .. } => ("runtime", None),
        Outcome::TimedOut { .. } => ("timeout", None),
    };
    let measurements: Vec<Value> = time
        .map(|us| json!({ "name": "time", "value": us, "unit": "us" }))
        .into_iter()
        .collect();
    Some(json!({
        "timestamp": t.finished_unix_ms.to_string(),
        "configuration": serde_json::to_value(&t.candidate).expect("candidates serialize"),
        "objectives": ["time"],
        "times": {
            "compilation_time": t.passes_ms + t.codegen_ms,
            "runtimes": time.map(|us| vec![us]).unwrap_or_default(),
            "validation": t.measure_ms,
        },
        "invalidity": invalidity,
        "correctness": u8::from(invalidity == "correct"),
        "measurements": measurements,
    }))
}

/// Proteus's per-kernel tuned configuration, and the kernels that could not be expressed in it.
pub fn proteus(winners: &[Winner], variants: &[Variant]) -> (Value, Vec<String>) {
    let mut out = Map::new();
    let mut skipped: Vec<String> = variants
        .iter()
        .map(|v| format!("{} (a variant behind a guard)", v.winner.demangled))
        .collect();
    for w in winners {
        if w.candidate.is_nvcc() || w.rewrite.is_some() {
            skipped.push(format!(
                "{} (nvcc's or a rewrite's code, not an LLVM pipeline of the kernel)",
                w.demangled
            ));
            continue;
        }
        if w.candidate.fast_math {
            skipped.push(format!("{} (needs fast-math)", w.demangled));
            continue;
        }
        if !w.candidate.llvm_options.is_empty() {
            skipped.push(format!("{} (needs LLVM options)", w.demangled));
            continue;
        }
        let mut k = Map::new();
        k.insert("Pipeline".into(), w.candidate.pipeline.clone().into());
        k.insert("CodeGenOptLevel".into(), w.candidate.codegen_opt.into());
        k.insert(
            "LaunchBounds".into(),
            w.candidate.max_threads.is_some().into(),
        );
        if let Some(t) = w.candidate.max_threads {
            k.insert("TunedMaxThreads".into(), t.into());
        }
        if let Some(b) = w.candidate.min_blocks_per_sm {
            k.insert("BlocksPerExecUnit".into(), b.into());
        }
        out.insert(w.name.clone(), Value::Object(k));
    }
    (Value::Object(out), skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::candidate::Candidate;
    use crate::store::outcome::TimeStats;

    fn trial(outcome: Outcome) -> TrialRecord {
        TrialRecord {
            format: 1,
            trial: 0,
            kernel: "h".into(),
            gpu: "g".into(),
            driver: "d".into(),
            device: None,
            target: None,
            r3_version: "0".into(),
            strategy: "bo".into(),
            seed: 0,
            batch: 1,
            candidate: Candidate::with_pipeline("default<O2>"),
            ptx_hash: None,
            duplicate_of: None,
            outcome,
            passes_ms: 3.0,
            codegen_ms: 2.0,
            measure_ms: 7.0,
            finished_unix_ms: 42,
        }
    }

    #[test]
    fn t4_maps_each_outcome_to_its_invalidity() {
        let ts = TimeStats::exact(12.5);
        let valid = Outcome::Valid {
            time: ts.clone(),
            baseline: ts,
        };
        let v = t4(&[
            trial(valid),
            trial(Outcome::CompileError {
                message: "x".into(),
            }),
            trial(Outcome::WrongOutput {
                message: "x".into(),
            }),
            trial(Outcome::Crashed {
                message: "x".into(),
            }),
            trial(Outcome::TimedOut { limit_ms: 1.0 }),
            trial(Outcome::Screened {
                time: TimeStats::exact(30.0),
                baseline: TimeStats::exact(10.0),
                fraction: 0.0625,
            }),
        ]);
        let r = v["results"].as_array().unwrap();
        let inv: Vec<&str> = r
            .iter()
            .map(|x| x["invalidity"].as_str().unwrap())
            .collect();
        // The screened candidate ran on no launch: left out.
        assert_eq!(
            inv,
            ["correct", "compile", "correctness", "runtime", "timeout"]
        );
        assert_eq!(r[0]["measurements"][0]["value"], 12.5);
        assert_eq!(r[0]["configuration"]["pipeline"], "default<O2>");
        assert_eq!(r[0]["times"]["compilation_time"], 5.0);
        assert_eq!(r[1]["correctness"], 0);
        assert!(r[1]["measurements"].as_array().unwrap().is_empty());
    }

    #[test]
    fn proteus_leaves_out_what_it_cannot_express() {
        let w = |name: &str, c: Candidate| Winner {
            hash: "h".into(),
            name: name.into(),
            demangled: name.into(),
            arch: "sm_90".into(),
            source: None,
            gpu: "g".into(),
            driver: "d".into(),
            candidate: c,
            ptx_isa: None,
            ptx_hash: None,
            trial: 1,
            speedup: 1.5,
            confirmed_speedup: None,
            simulated: false,
            r3_version: "0".into(),
            code: None,
            rewrite: None,
        };
        let bounded = Candidate {
            max_threads: Some(256),
            min_blocks_per_sm: Some(2),
            codegen_opt: 2,
            ..Candidate::with_pipeline("default<O2>")
        };
        let fast = Candidate {
            fast_math: true,
            ..Candidate::baseline()
        };
        let mut unrolled = Candidate::baseline();
        unrolled
            .llvm_options
            .insert("unroll-max-count".into(), "4".into());
        let guarded = Variant {
            winner: w("_Z1di", Candidate::baseline()),
            guard: crate::winners::Guard {
                max_threads: Some(128),
                block_x: None,
                values: None,
            },
        };
        let (v, skipped) = proteus(
            &[w("_Z1ai", bounded), w("_Z1bi", fast), w("_Z1ci", unrolled)],
            &[guarded],
        );
        assert_eq!(v["_Z1ai"]["TunedMaxThreads"], 256);
        assert_eq!(v["_Z1ai"]["BlocksPerExecUnit"], 2);
        assert_eq!(v["_Z1ai"]["CodeGenOptLevel"], 2);
        assert_eq!(v["_Z1ai"]["LaunchBounds"], true);
        assert!(v.get("_Z1bi").is_none());
        assert_eq!(
            skipped,
            [
                "_Z1di (a variant behind a guard)",
                "_Z1bi (needs fast-math)",
                "_Z1ci (needs LLVM options)"
            ]
        );
    }
}
