//! Minimal hand-written SVG line charts (no plotting dependency): latency by
//! percentile (the HdrHistogram "percentile spectrum", like the article's
//! figures) and values over time.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

/// One line.
pub struct Line {
    /// Legend label.
    pub name: String,
    /// (x, y) points in data units.
    pub points: Vec<(f64, f64)>,
}

/// X axis kind.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum XAxis {
    /// Plain linear axis.
    Linear,
    /// x = log10(1 / (1 - percentile/100)); ticks labelled as percentiles.
    Percentile,
}

/// A chart.
pub struct Chart {
    /// Title on top.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// X axis kind.
    pub x_axis: XAxis,
    /// The lines.
    pub lines: Vec<Line>,
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn nice_step(range: f64, ticks: f64) -> f64 {
    if range <= 0.0 || !range.is_finite() {
        return 1.0;
    }
    let raw = range / ticks;
    let mag = 10f64.powf(raw.log10().floor());
    let n = raw / mag;
    let m = if n < 1.5 {
        1.0
    } else if n < 3.0 {
        2.0
    } else if n < 7.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 || (v.fract() == 0.0 && v.abs() >= 1.0) {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Percentile spectrum points of `h` (values divided by `scale`), x in
/// [`XAxis::Percentile`] units, up to 99.999 %.
pub fn percentile_points(h: &Histogram<u64>, scale: f64) -> Vec<(f64, f64)> {
    let mut v = Vec::new();
    if h.is_empty() {
        return v;
    }
    for k in 0..=50 {
        let x = f64::from(k) / 10.0;
        let q = 1.0 - 10f64.powf(-x);
        v.push((x, h.value_at_quantile(q) as f64 / scale));
    }
    v.push((5.2, h.max() as f64 / scale));
    v
}

/// Render a chart as an SVG document.
pub fn render(c: &Chart) -> String {
    let (w, h) = (900.0, 500.0);
    let (ml, mr, mt, mb) = (80.0, 170.0, 40.0, 60.0);
    let pw = w - ml - mr;
    let ph = h - mt - mb;
    let pts = c.lines.iter().flat_map(|l| l.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0f64);
    for &(x, y) in pts {
        if x.is_finite() && y.is_finite() {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
    }
    if !x0.is_finite() {
        x0 = 0.0;
        x1 = 1.0;
    }
    if c.x_axis == XAxis::Percentile {
        x0 = 0.0;
        x1 = x1.max(5.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let ystep = nice_step(y1.max(1e-9), 6.0);
    let ymax = ((y1 / ystep).ceil() * ystep).max(ystep);
    let sx = |x: f64| ml + (x - x0) / (x1 - x0) * pw;
    let sy = |y: f64| mt + ph - (y / ymax) * ph;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" font-size="16" text-anchor="middle">{}</text>"#,
        ml + pw / 2.0,
        esc(&c.title)
    );
    // Y grid and labels.
    let mut y = 0.0;
    while y <= ymax + ystep / 2.0 {
        let py = sy(y);
        let _ = writeln!(
            s,
            r##"<line x1="{ml}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            ml + pw,
            ml - 6.0,
            py + 4.0,
            fmt_num(y)
        );
        y += ystep;
    }
    // X grid and labels.
    match c.x_axis {
        XAxis::Percentile => {
            let labels = ["0%", "90%", "99%", "99.9%", "99.99%", "99.999%"];
            for (i, lab) in labels.iter().enumerate() {
                let px = sx(i as f64);
                let _ = writeln!(
                    s,
                    r##"<line x1="{px:.1}" y1="{mt}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{lab}</text>"##,
                    mt + ph,
                    mt + ph + 18.0
                );
            }
        }
        XAxis::Linear => {
            let step = nice_step(x1 - x0, 8.0);
            let mut x = (x0 / step).ceil() * step;
            while x <= x1 + 1e-9 {
                let px = sx(x);
                let _ = writeln!(
                    s,
                    r##"<line x1="{px:.1}" y1="{mt}" x2="{px:.1}" y2="{:.1}" stroke="#ddd"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                    mt + ph,
                    mt + ph + 18.0,
                    fmt_num(x)
                );
                x += step;
            }
        }
    }
    let _ = writeln!(
        s,
        r##"<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#444"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        ml + pw / 2.0,
        h - 15.0,
        esc(&c.x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"#,
        mt + ph / 2.0,
        mt + ph / 2.0,
        esc(&c.y_label)
    );
    for (i, l) in c.lines.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut d = String::new();
        for (k, &(x, y)) in l
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .enumerate()
        {
            let _ = write!(
                d,
                "{}{:.1},{:.1} ",
                if k == 0 { "M" } else { "L" },
                sx(x),
                sy(y.min(ymax))
            );
        }
        if !d.is_empty() {
            let _ = writeln!(
                s,
                r#"<path d="{}" fill="none" stroke="{color}" stroke-width="1.8"/>"#,
                d.trim_end()
            );
        }
        let ly = mt + 10.0 + i as f64 * 20.0;
        let lx = ml + pw + 12.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            esc(&l.name)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_valid_looking_svg() {
        let mut h = crate::metrics::new_hist();
        for v in 1..1000u64 {
            let _ = h.record(v * 10);
        }
        let c = Chart {
            title: "a < b".into(),
            x_label: "percentile".into(),
            y_label: "ms".into(),
            x_axis: XAxis::Percentile,
            lines: vec![Line {
                name: "e2e".into(),
                points: percentile_points(&h, 1000.0),
            }],
        };
        let s = render(&c);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        assert!(s.contains("a &lt; b"));
        assert!(s.contains("99.99%"));
        let empty = render(&Chart {
            title: "t".into(),
            x_label: "s".into(),
            y_label: "y".into(),
            x_axis: XAxis::Linear,
            lines: vec![],
        });
        assert!(empty.contains("</svg>"));
        assert_eq!(nice_step(10.0, 5.0), 2.0);
    }
}
