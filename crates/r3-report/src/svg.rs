//! Convergence plots as inline SVG: hand-rolled (a frame, ticks, dots and one step line), so
//! reports need no plotting dependency and stay one self-contained file.

use std::fmt::Write;

/// One trial on the plot: x (trial index or seconds), its speedup if valid, best so far.
#[derive(Debug, Clone, Copy)]
pub struct Point {
    pub x: f64,
    pub y: Option<f64>,
    pub best: Option<f64>,
}

const W: f64 = 640.0;
const H: f64 = 260.0;
const L: f64 = 58.0;
const R: f64 = 16.0;
const T: f64 = 26.0;
const B: f64 = 42.0;

/// Tick positions covering [lo, hi] with a 1-2-5 step.
fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let span = (hi - lo).max(1e-9);
    let raw = span / n as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let mut t = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while t <= hi + step * 1e-6 {
        out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    out
}

/// From here a tick label is written in scientific notation: only a broken measurement puts
/// a speedup this high, and its plain digits (309 at 1e308) would run far past the margin.
const PLAIN_TICK_BELOW: f64 = 1e5;

fn fmt_tick(v: f64) -> String {
    if v.abs() < PLAIN_TICK_BELOW {
        return trim_zeros(&format!("{v:.3}"));
    }
    let s = format!("{v:.3e}");
    match s.split_once('e') {
        Some((mantissa, exp)) => format!("{}e{exp}", trim_zeros(mantissa)),
        None => s, // inf or NaN: short already
    }
}

/// `1.200` as `1.2`, `2.000` as `2`, `-0.000` as `0`.
fn trim_zeros(s: &str) -> String {
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() || s == "-0" {
        "0".into()
    } else {
        s.into()
    }
}

/// Escapes text for XML and HTML.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A plot of speedup (against the -O3 baseline, the dashed line at 1) over `x_label`.
pub fn convergence(title: &str, x_label: &str, points: &[Point]) -> String {
    let title = &esc(title);
    let x_label = &esc(x_label);
    let xs = points.iter().map(|p| p.x);
    let (x0, x1) = (
        xs.clone().fold(f64::INFINITY, f64::min).min(0.0),
        xs.fold(f64::NEG_INFINITY, f64::max).max(1.0),
    );
    // A speedup of inf (a time ratio that underflows) has no place on an axis: it would make
    // every coordinate NaN, so it is left off the plot (the tables still show it).
    let finite = |v: Option<f64>| v.filter(|v| v.is_finite());
    let points: Vec<Point> = points
        .iter()
        .map(|p| Point {
            y: finite(p.y),
            best: finite(p.best),
            ..*p
        })
        .collect();
    let points = &points[..];
    let ys = points.iter().flat_map(|p| p.y.into_iter().chain(p.best));
    let (mut y0, mut y1) = ys.fold((1.0f64, 1.0f64), |(a, b), y| (a.min(y), b.max(y)));
    let pad = ((y1 - y0) * 0.08).max(0.02);
    y0 -= pad;
    y1 += pad;
    let px = |x: f64| L + (x - x0) / (x1 - x0) * (W - L - R);
    let py = |y: f64| T + (y1 - y) / (y1 - y0) * (H - T - B);
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" aria-label="{title}" font-family="sans-serif" font-size="11">"##
    );
    let _ = write!(
        s,
        r##"<title>{title}</title><rect x="0" y="0" width="{W}" height="{H}" fill="#fff"/><text x="{L}" y="16" font-size="13" font-weight="bold">{title}</text>"##
    );
    for t in ticks(y0, y1, 5) {
        let y = py(t);
        let _ = write!(
            s,
            r##"<line x1="{L}" x2="{:.1}" y1="{y:.1}" y2="{y:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}×</text>"##,
            W - R,
            L - 6.0,
            y + 4.0,
            fmt_tick(t)
        );
    }
    for t in ticks(x0, x1, 6) {
        let x = px(t);
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{:.1}" y2="{:.1}" stroke="#999"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            H - B,
            H - B + 4.0,
            H - B + 16.0,
            fmt_tick(t)
        );
    }
    let _ = write!(
        s,
        r##"<rect x="{L}" y="{T}" width="{:.1}" height="{:.1}" fill="none" stroke="#999"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{x_label}</text><text transform="translate(14 {:.1}) rotate(-90)" text-anchor="middle">× faster than -O3</text>"##,
        W - L - R,
        H - T - B,
        (L + W - R) / 2.0,
        H - 6.0,
        (T + H - B) / 2.0
    );
    let base = py(1.0);
    let _ = write!(
        s,
        r##"<line x1="{L}" x2="{:.1}" y1="{base:.1}" y2="{base:.1}" stroke="#888" stroke-dasharray="4 3"/>"##,
        W - R
    );
    for p in points {
        if let Some(y) = p.y {
            let _ = write!(
                s,
                r##"<circle cx="{:.1}" cy="{:.1}" r="2.2" fill="#9aa7b8"/>"##,
                px(p.x),
                py(y)
            );
        }
    }
    let mut d = String::new();
    let mut last: Option<f64> = None;
    for p in points {
        if let Some(b) = p.best {
            let (x, y) = (px(p.x), py(b));
            match last {
                None => {
                    let _ = write!(d, "M{x:.1},{y:.1}");
                }
                Some(ly) => {
                    let _ = write!(d, " L{x:.1},{ly:.1} L{x:.1},{y:.1}");
                }
            }
            last = Some(y);
        }
    }
    if let Some(ly) = last {
        let _ = write!(d, " L{:.1},{ly:.1}", px(x1));
        let _ = write!(
            s,
            r##"<path d="{d}" fill="none" stroke="#1f5fbf" stroke-width="2"/>"##
        );
    }
    let _ = write!(
        s,
        r##"<g transform="translate({:.1} {:.1})"><line x1="0" x2="18" y1="0" y2="0" stroke="#1f5fbf" stroke-width="2"/><text x="22" y="4">best so far</text><circle cx="100" cy="0" r="2.5" fill="#9aa7b8"/><text x="106" y="4">valid trial</text><line x1="170" x2="188" y1="0" y2="0" stroke="#888" stroke-dasharray="4 3"/><text x="192" y="4">-O3</text></g>"##,
        W - R - 230.0,
        14.0
    );
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(ticks(0.0, 10.0, 5), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(fmt_tick(1.2000000001), "1.2");
        let svg = convergence(
            "t",
            "trial",
            &[
                Point {
                    x: 0.0,
                    y: Some(1.0),
                    best: Some(1.0),
                },
                Point {
                    x: 1.0,
                    y: None,
                    best: Some(1.0),
                },
                Point {
                    x: 2.0,
                    y: Some(1.3),
                    best: Some(1.3),
                },
            ],
        );
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<circle").count(), 3); // two trials and the legend
    }

    /// Issue 56: a speedup of 1e308 (a time ratio near 0) labelled its ticks with 309 digits,
    /// and an infinite one made every coordinate NaN.
    #[test]
    fn absurd_speedups_keep_the_plot_readable() {
        assert_eq!(fmt_tick(2e307), "2e307");
        assert_eq!(fmt_tick(1.02e308), "1.02e308");
        assert_eq!(fmt_tick(12500.0), "12500");
        for y in [1e308, f64::INFINITY, f64::NAN] {
            let at = |x: f64, y: f64| Point {
                x,
                y: Some(y),
                best: Some(y),
            };
            let svg = convergence("t", "trial", &[at(0.0, 1.0), at(1.0, y)]);
            let longest = svg.split(['<', '>', '"', ' ']).map(str::len).max().unwrap();
            assert!(longest < 40 && !svg.contains("NaN"), "{y}: {svg}");
        }
    }
}
