//! `r3 replay`'s table.

use crate::store::outcome::Outcome;
use r3_replay::gpu::ReplayResult;

pub fn render(rows: &[ReplayResult]) -> String {
    let mut out = format!(
        "{:<40} {:<34} {:<12} {:>16} {:>16} {:>7} {:>10} {:>5}\n",
        "kernel",
        "recording",
        "outcome",
        "baseline us",
        "candidate us",
        "ratio",
        "in-app us",
        "regs"
    );
    for r in rows {
        let (state, base, cand, ratio) = match r.measured.as_ref().map(|m| &m.outcome) {
            None => ("built".to_string(), "-".into(), "-".into(), "-".into()),
            Some(Outcome::Valid { time, baseline }) => (
                "valid".into(),
                format!("{:.2} ±{:.1}%", baseline.median_us, baseline.spread * 100.0),
                format!("{:.2} ±{:.1}%", time.median_us, time.spread * 100.0),
                format!("{:.3}", time.median_us / baseline.median_us),
            ),
            Some(o) => (short(o).into(), "-".into(), "-".into(), "-".into()),
        };
        let regs = r
            .measured
            .as_ref()
            .and_then(|m| m.registers)
            .map(|n| n.to_string())
            .unwrap_or_else(|| "-".into());
        let mut name: String = r.kernel.chars().take(40).collect();
        if let Some(m) = r.mutation {
            name = format!("{}[{m:?}]", name.chars().take(26).collect::<String>());
        }
        out += &format!(
            "{:<40} {:<34} {:<12} {:>16} {:>16} {:>7} {:>10.2} {:>5}\n",
            name, r.recording, state, base, cand, ratio, r.in_app_us, regs
        );
        if let Some(m) = &r.measured {
            if let Some(detail) = m.outcome.detail() {
                out += &format!("    {detail}\n");
            }
        }
        if let Some(c) = r.l2.as_ref().filter(|_| r.mutation.is_none()) {
            out += &format!("    {}\n", c.summary());
        }
    }
    out
}

fn short(o: &Outcome) -> &'static str {
    match o {
        Outcome::Valid { .. } => "valid",
        Outcome::CompileError { .. } => "compile-err",
        Outcome::WrongOutput { .. } => "WRONG",
        Outcome::Crashed { .. } => "crashed",
        Outcome::TimedOut { .. } => "timed-out",
        Outcome::Screened { .. } => "screened",
    }
}
