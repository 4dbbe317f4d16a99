//! The L2 state a search measured in and why, as the store keeps it (`<gpu>.l2.json`;
//! `r3 report` shows it). Which state to choose is `replay::l2`'s.

use serde::{Deserialize, Serialize};

/// The L2 state timed runs start from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Regime {
    #[default]
    Cold,
    Warm,
}

impl std::fmt::Display for Regime {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(match self {
            Regime::Cold => "cold",
            Regime::Warm => "warm",
        })
    }
}

/// Where two times differ enough that the report shows both.
pub const SHOWN_APART: f64 = 0.10;

/// What a search measured in and why (`<gpu>.l2.json` in the store; `r3 report` shows it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    pub policy: String,
    pub regime: Regime,
    pub reason: String,
    /// The median of the program's own later launches (µs), when it made any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub natural_us: Option<f64>,
    /// The baseline's replay times in each state (µs), when both were measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cold_us: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_us: Option<f64>,
}

impl Choice {
    /// "L2 warm: why (-O3 … µs cold, … µs warm; the program's own launches … µs)".
    pub fn summary(&self) -> String {
        let mut times = Vec::new();
        if let (Some(cold), Some(warm)) = (self.cold_us, self.warm_us) {
            times.push(format!("-O3 {cold:.1} µs cold, {warm:.1} µs warm"));
        }
        if let Some(n) = self.natural_us {
            times.push(format!("the program's own launches {n:.1} µs"));
        }
        let times = if times.is_empty() {
            String::new()
        } else {
            format!(" ({})", times.join("; "))
        };
        format!("L2 {}: {}{times}", self.regime, self.reason)
    }

    /// Whether a search's output and report mention the state: where it is warm, or where the
    /// two states differ enough that the choice mattered.
    pub fn worth_showing(&self) -> bool {
        self.regime == Regime::Warm || self.states_differ()
    }

    /// Whether the two states' times differ by more than [`SHOWN_APART`].
    pub fn states_differ(&self) -> bool {
        match (self.cold_us, self.warm_us) {
            (Some(c), Some(w)) if c > 0.0 && w > 0.0 => (c / w).ln().abs() > SHOWN_APART.ln_1p(),
            _ => false,
        }
    }
}
