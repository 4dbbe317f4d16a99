//! `r3 selftest`'s table: what `replay::selftest` did on the built-in saxpy, step by step.

use crate::replay::selftest::Outcome;

pub fn render(o: &Outcome) -> String {
    let mut t = String::from("step      result\n");
    t += &format!(
        "lower     {} instructions of PTX ({}, {}) in {:.1} ms\n",
        o.ptx.instructions, o.sm, o.ptx_version, o.lower_ms
    );
    match (&o.run, &o.no_gpu_reason) {
        (Some(r), _) => {
            t += &format!(
                "gpu       {} ({}), driver CUDA {}.{}\n",
                r.gpu.name,
                r.gpu.sm(),
                r.driver.0,
                r.driver.1
            );
            t += &format!("load+run  r3_saxpy over {} elements\n", r.elements);
            let verdict = if r.mismatches == 0 {
                "PASS".to_string()
            } else {
                format!("FAIL ({} wrong)", r.mismatches)
            };
            t += &format!("verify    {verdict}\n");
            t += &format!(
                "time      {:.1} us median of 20 (CUDA events)\n",
                r.median_us
            );
        }
        (None, reason) => {
            t += &format!(
                "gpu       none: {}\n",
                reason.as_deref().unwrap_or("unknown")
            );
            t += "run       skipped: loading, running and timing need a GPU\n";
        }
    }
    t
}
