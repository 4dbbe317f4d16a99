//! How every r3 view writes a speedup: -O3's time over the candidate's, so above 1 is faster,
//! as `1.234×` in a table and `1.234× faster than -O3` in a sentence. One convention, because
//! a time ratio (`0.81`) beside a speedup (`1.23`) reads as the opposite of what it says.

/// Outside [PLAIN_FROM, PLAIN_BELOW) a speedup is written in scientific notation. No real
/// kernel gets there; a time ratio near 0 or a hand-edited file does, and its plain digits
/// (309 at 1e308, or `0.000×`) would fill a line or say nothing.
const PLAIN_FROM: f64 = 1e-3;
const PLAIN_BELOW: f64 = 1e5;

/// A speedup for a table cell: four significant digits, `1.234×`, `13.12×`, `131.2×`;
/// `1.234e308×` when absurd, `inf×` or `NaN×` when not a number.
pub fn times(speedup: f64) -> String {
    match speedup.abs() {
        s if !s.is_finite() => format!("{speedup}×"),
        s if s != 0.0 && !(PLAIN_FROM..PLAIN_BELOW).contains(&s) => format!("{speedup:.3e}×"),
        s if s < 10.0 => format!("{speedup:.3}×"),
        s if s < 100.0 => format!("{speedup:.2}×"),
        _ => format!("{speedup:.1}×"),
    }
}

/// A speedup in a sentence: `1.234× faster than -O3`, or `0.810× (slower than -O3)` below 1,
/// where "0.810× faster" would read as a gain; NaN is neither.
pub fn faster(speedup: f64) -> String {
    if speedup.is_nan() {
        format!("{} (not a measured speed)", times(speedup))
    } else if speedup >= 1.0 {
        format!("{} faster than -O3", times(speedup))
    } else {
        format!("{} (slower than -O3)", times(speedup))
    }
}

/// The speedup of a time ratio (candidate time over -O3's, as trials store it).
pub fn of_ratio(ratio: f64) -> Option<f64> {
    (ratio > 0.0 && ratio.is_finite()).then(|| 1.0 / ratio)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_convention_above_one_is_faster() {
        assert_eq!(times(1.25), "1.250×");
        assert_eq!(times(13.1), "13.10×");
        assert_eq!(times(131.25), "131.2×");
        assert_eq!(faster(1.25), "1.250× faster than -O3");
        // A time ratio of 0.8103 is a speedup of 1.234, never "0.8103x".
        assert_eq!(faster(of_ratio(0.8103).unwrap()), "1.234× faster than -O3");
        assert_eq!(faster(0.81), "0.810× (slower than -O3)");
        assert_eq!(of_ratio(0.0), None);
    }

    /// Issue 56: a speedup of 1e308 printed 309 digits; every view writes it through here.
    #[test]
    fn absurd_speedups_stay_one_short_cell() {
        assert_eq!(times(99999.94), "99999.9×");
        assert_eq!(times(1e308), "1.000e308×");
        assert_eq!(times(123456.0), "1.235e5×");
        assert_eq!(times(2.5e-7), "2.500e-7×");
        assert_eq!(times(0.0), "0.000×");
        assert_eq!(times(f64::INFINITY), "inf×");
        assert_eq!(faster(1e308), "1.000e308× faster than -O3");
        assert_eq!(faster(f64::NAN), "NaN× (not a measured speed)");
    }
}
