//! The model proposer: an OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, the
//! llama.cpp server and Ollama all speak it), configured by `R3_LLM_URL`, `R3_LLM_MODEL` and
//! `R3_LLM_API_KEY`. The key is read from the environment for each run and sent in a header;
//! it is never part of a prompt, an attempt record, a log line or an error message.
//!
//! Prompts are the templates in `src/evolve/prompts/` (data, embedded), filled with what a
//! performance engineer would hand over: the code, the launch, PTX statistics, the best
//! compiler-only pipeline, earlier attempts and winning rewrites of other kernels.

use crate::propose::{Proposal, ProposeError, Proposer, Request};
use serde_json::json;
use std::time::Duration;

pub const SYSTEM: &str = include_str!("prompts/system.md");
pub const REWRITE: &str = include_str!("prompts/rewrite.md");
pub const REPAIR: &str = include_str!("prompts/repair.md");

/// Fills `{{name}}` placeholders; a placeholder without a value is left visible.
pub fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = template.to_owned();
    for (k, v) in values {
        out = out.replace(&format!("{{{{{k}}}}}"), v);
    }
    out
}

#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("R3_LLM_URL is set but R3_LLM_MODEL is not; fix: set R3_LLM_MODEL to the model's name (e.g. gpt-4.1, or the name vLLM serves)")]
    NoModel,
    #[error("{url}: {msg} (after {tries} tries); fix: check R3_LLM_URL, R3_LLM_API_KEY and that the server answers (`curl {url}/models`), or use --proposer rules")]
    Failed {
        url: String,
        msg: String,
        tries: u32,
    },
    #[error("{url}: the answer is not a chat completion: {msg}; fix: point R3_LLM_URL at an OpenAI-compatible /v1 endpoint")]
    BadAnswer { url: String, msg: String },
    #[error("the token budget of this run ({budget}) is spent ({used} used); fix: --max-tokens for a larger budget, then --resume")]
    Budget { used: u64, budget: u64 },
}

/// Where the model is and how patiently to ask it.
#[derive(Clone)]
pub struct Endpoint {
    pub url: String,
    pub model: String,
    key: Option<String>,
    pub timeout: Duration,
    pub retries: u32,
    pub backoff: Duration,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("model", &self.model)
            .field("key", &self.key.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// One answer and what it cost.
#[derive(Debug, Clone)]
pub struct Reply {
    pub text: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

impl Endpoint {
    /// The endpoint the environment configures, None without `R3_LLM_URL`.
    /// `R3_LLM_TIMEOUT_S` (default 120), `R3_LLM_RETRIES` (3) and `R3_LLM_BACKOFF_MS` (1000,
    /// doubled for each retry) tune the patience.
    pub fn from_env() -> Result<Option<Endpoint>, LlmError> {
        let Some(url) = std::env::var("R3_LLM_URL").ok().filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        let model = std::env::var("R3_LLM_MODEL")
            .ok()
            .filter(|m| !m.is_empty())
            .ok_or(LlmError::NoModel)?;
        let num = |k: &str, d: u64| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        let url = url.trim_end_matches('/');
        let url = if url.ends_with("/chat/completions") {
            url.to_owned()
        } else {
            format!("{url}/chat/completions")
        };
        Ok(Some(Endpoint {
            url,
            model,
            key: std::env::var("R3_LLM_API_KEY")
                .ok()
                .filter(|k| !k.is_empty()),
            timeout: Duration::from_secs(num("R3_LLM_TIMEOUT_S", 120)),
            retries: num("R3_LLM_RETRIES", 3) as u32,
            backoff: Duration::from_millis(num("R3_LLM_BACKOFF_MS", 1000)),
        }))
    }

    /// Asks once, retrying transport errors, timeouts, 429 and 5xx with exponential backoff.
    pub fn chat(&self, system: &str, user: &str) -> Result<Reply, LlmError> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(self.timeout))
            .http_status_as_error(false)
            .build()
            .into();
        let body = json!({
            "model": self.model,
            "temperature": 0.7,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
        });
        let mut last = String::new();
        for attempt in 0..=self.retries {
            if attempt > 0 {
                std::thread::sleep(self.backoff * 2u32.saturating_pow(attempt - 1));
            }
            let mut req = agent.post(&self.url);
            if let Some(k) = &self.key {
                req = req.header("Authorization", &format!("Bearer {k}"));
            }
            match req.send_json(&body) {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    let text = resp.body_mut().read_to_string().unwrap_or_default();
                    if status == 200 {
                        return self.parse(&text);
                    }
                    last = format!("HTTP {status}: {}", snippet(&text));
                    if !(status == 429 || status >= 500) {
                        return Err(self.failed(last, attempt + 1));
                    }
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(self.failed(last, self.retries + 1))
    }

    fn failed(&self, msg: String, tries: u32) -> LlmError {
        let msg = match &self.key {
            Some(k) => msg.replace(k.as_str(), "<key>"),
            None => msg,
        };
        LlmError::Failed {
            url: self.url.clone(),
            msg,
            tries,
        }
    }

    fn parse(&self, text: &str) -> Result<Reply, LlmError> {
        let bad = |msg: String| LlmError::BadAnswer {
            url: self.url.clone(),
            msg,
        };
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| bad(format!("{e}: {}", snippet(text))))?;
        let content = v["choices"][0]["message"]["content"]
            .as_str()
            .ok_or_else(|| {
                bad(format!(
                    "no choices[0].message.content in {}",
                    snippet(text)
                ))
            })?;
        Ok(Reply {
            text: content.to_owned(),
            prompt_tokens: v["usage"]["prompt_tokens"].as_u64().unwrap_or(0),
            completion_tokens: v["usage"]["completion_tokens"].as_u64().unwrap_or(0),
        })
    }
}

/// Proposes rewrites by asking a model, within a token budget for the run.
pub struct ModelProposer {
    endpoint: Endpoint,
    budget: u64,
    used: u64,
}

impl ModelProposer {
    pub fn new(endpoint: Endpoint, budget: u64) -> ModelProposer {
        ModelProposer {
            endpoint,
            budget,
            used: 0,
        }
    }

    fn ask(
        &mut self,
        label: String,
        system: String,
        user: String,
    ) -> Result<Option<Proposal>, ProposeError> {
        if self.used >= self.budget {
            return Err(ProposeError::Exhausted(
                LlmError::Budget {
                    used: self.used,
                    budget: self.budget,
                }
                .to_string(),
            ));
        }
        let sha = crate::kernel::short_hash(format!("{system}\n\n{user}").as_bytes());
        let reply = self
            .endpoint
            .chat(&system, &user)
            .map_err(|e| ProposeError::Failed(e.to_string()))?;
        let tokens = reply.prompt_tokens + reply.completion_tokens;
        self.used += tokens;
        Ok(Some(Proposal {
            label,
            requires: Vec::new(),
            rewrite: super::guard::code_of(&reply.text).to_owned(),
            prompt_sha: Some(sha),
            answer: Some(reply.text),
            tokens,
        }))
    }

    fn system(&self, req: &Request) -> String {
        fill(
            SYSTEM,
            &[
                ("gpu", &req.launch.gpu),
                ("grid", &dims(req.launch.grid)),
                ("block", &dims(req.launch.block)),
            ],
        )
    }
}

fn dims(d: [u32; 3]) -> String {
    format!("({}, {}, {})", d[0], d[1], d[2])
}

impl Proposer for ModelProposer {
    fn name(&self) -> String {
        format!("llm:{}", self.endpoint.model)
    }

    fn propose(&mut self, req: &Request) -> Result<Option<Proposal>, ProposeError> {
        let user = fill(
            REWRITE,
            &[
                ("kernel", &req.kernel.signature.demangled),
                ("file", &req.file.display().to_string()),
                ("code", req.code),
                ("grid", &dims(req.launch.grid)),
                ("block", &dims(req.launch.block)),
                ("shared", &req.launch.shared_bytes.to_string()),
                ("pointers", pointers(req)),
                ("arch", &req.kernel.signature.arch),
                ("ptx_stats", req.ptx_stats),
                ("pipeline", req.pipeline),
                ("history", &history(req)),
                ("examples", &examples(req)),
            ],
        );
        let label = format!("llm: {}", self.endpoint.model);
        self.ask(label, self.system(req), user)
    }

    fn repair(
        &mut self,
        req: &Request,
        failed: &str,
        diagnostics: &str,
    ) -> Result<Option<Proposal>, ProposeError> {
        let user = fill(
            REPAIR,
            &[
                ("kernel", &req.kernel.signature.demangled),
                ("diagnostics", diagnostics),
                ("code", failed),
            ],
        );
        let label = format!("llm: {} (repair)", self.endpoint.model);
        self.ask(label, self.system(req), user)
    }

    fn tokens(&self) -> Option<(u64, u64)> {
        Some((self.used, self.budget))
    }
}

fn pointers(req: &Request) -> &'static str {
    match req.facts.pointers_disjoint {
        Some(true) => "in every recorded launch each points into an allocation of its own, so `__restrict__` is safe for these launches",
        Some(false) => "some point into the same allocation in the recordings, so do not assume they never alias",
        None => "r3 cannot tell here whether they overlap, so do not assume they never alias",
    }
}

/// The last attempts on this kernel, one line each.
fn history(req: &Request) -> String {
    let shown: Vec<String> = req
        .history
        .iter()
        .rev()
        .take(6)
        .rev()
        .map(|a| format!("- attempt {} ({}): {}", a.id, a.title(), a.outcome(None)))
        .collect();
    if shown.is_empty() {
        String::new()
    } else {
        format!("\nEarlier attempts on this kernel:\n{}\n", shown.join("\n"))
    }
}

fn examples(req: &Request) -> String {
    req.examples
        .iter()
        .map(|e| {
            format!(
                "\nA rewrite that made another kernel, {}, {:.2}x faster:\nbefore:\n```cuda\n{}\n```\nafter:\n```cuda\n{}\n```\n",
                e.kernel, e.speedup, e.before, e.after
            )
        })
        .collect()
}

fn snippet(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_fill_every_placeholder_they_are_given() {
        assert_eq!(
            fill("a {{x}} b {{y}} {{x}}", &[("x", "1")]),
            "a 1 b {{y}} 1"
        );
        for t in [SYSTEM, REWRITE, REPAIR] {
            assert!(t.contains("{{"), "templates are filled at run time");
        }
    }

    #[test]
    fn the_key_never_shows_in_debug_output_or_errors() {
        let e = Endpoint {
            url: "http://127.0.0.1:1/v1/chat/completions".into(),
            model: "m".into(),
            key: Some("sk-secret-123".into()),
            timeout: Duration::from_millis(200),
            retries: 0,
            backoff: Duration::from_millis(1),
        };
        assert!(!format!("{e:?}").contains("sk-secret"));
        let err = e.failed("echo sk-secret-123".into(), 1).to_string();
        assert!(!err.contains("sk-secret"), "{err}");
    }
}
