//! What a proposer is asked and gives: the request (the parent's code, the recordings'
//! facts, the launch, the history, examples), a proposal, and the `Proposer` trait, with the
//! rule-based proposer (`rules`) behind it; the model's proposer is `llm`.

use crate::rules;
use crate::store::attempts::Attempt;
use crate::store::KernelRecord;

/// What a proposer is told.
pub struct Request<'a> {
    pub kernel: &'a KernelRecord,
    pub file: &'a std::path::Path,
    /// The code to rewrite: the parent's region.
    pub code: &'a str,
    pub parent: Option<u32>,
    pub facts: &'a rules::Facts,
    pub launch: &'a LaunchInfo,
    /// Statistics of the parent's -O3 PTX, in words.
    pub ptx_stats: &'a str,
    /// The original kernel's best compiler-only configuration, in words.
    pub pipeline: &'a str,
    pub history: &'a [Attempt],
    pub examples: &'a [Example],
}

/// The recorded launch, for prompts.
#[derive(Debug, Clone, Default)]
pub struct LaunchInfo {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u64,
    pub gpu: String,
}

/// A winning rewrite of another kernel, offered to the model as an example.
#[derive(Debug, Clone)]
pub struct Example {
    pub kernel: String,
    pub before: String,
    pub after: String,
    pub speedup: f64,
}

pub struct Proposal {
    pub label: String,
    pub rewrite: String,
    /// Facts it is sound under only (`rules::Facts`).
    pub requires: Vec<String>,
    pub prompt_sha: Option<String>,
    pub answer: Option<String>,
    pub tokens: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    /// This proposal failed (recorded as a failed attempt; the loop goes on).
    #[error("{0}")]
    Failed(String),
    /// The run cannot ask for more (the token budget is spent).
    #[error("{0}")]
    Exhausted(String),
}

pub trait Proposer {
    /// `rules` or `llm:<model>`: what the attempts record as the proposer.
    fn name(&self) -> String;
    /// A rewrite of `req.code`, or None when this proposer has nothing (more) for this parent.
    fn propose(&mut self, req: &Request) -> Result<Option<Proposal>, ProposeError>;
    /// A corrected `failed` given the compiler's `diagnostics`; None where it cannot repair.
    fn repair(
        &mut self,
        _req: &Request,
        _failed: &str,
        _diagnostics: &str,
    ) -> Result<Option<Proposal>, ProposeError> {
        Ok(None)
    }
    /// Tokens used so far and the budget, for the summary (None for proposers without).
    fn tokens(&self) -> Option<(u64, u64)> {
        None
    }
    /// Whether it reads the request's context beyond the code (PTX statistics cost a
    /// lowering of the parent).
    fn reads_context(&self) -> bool {
        true
    }
}

/// The rule-based proposer.
pub struct RuleProposer;

impl Proposer for RuleProposer {
    fn name(&self) -> String {
        "rules".into()
    }

    fn reads_context(&self) -> bool {
        false
    }

    fn propose(&mut self, req: &Request) -> Result<Option<Proposal>, ProposeError> {
        for r in rules::RULES {
            let label = format!("rules: {}", r.name);
            let tried = req
                .history
                .iter()
                .any(|a| a.parent == req.parent && a.label == label);
            if tried {
                continue;
            }
            if let Some(rewrite) = r.apply(req.code, req.facts) {
                return Ok(Some(Proposal {
                    label,
                    rewrite,
                    requires: r.requires.iter().map(|f| f.to_string()).collect(),
                    prompt_sha: None,
                    answer: None,
                    tokens: 0,
                }));
            }
        }
        Ok(None)
    }
}
