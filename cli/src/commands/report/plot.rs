//! SVG plots written by hand: line and scatter plots on linear or logarithmic axes, grouped
//! bars and histograms.
//!
//! Not `plotters`: its SVG backend cannot tag a series with an id or a class, which the
//! report's tests (and anyone restyling the page) find series by, and without a font file
//! it lays text out with guessed metrics anyway. These plots need only lines, circles,
//! rectangles and text, each series a `<g class="series" id="series-…">`.

use std::fmt::Write;

const W: f64 = 720.0;
const H: f64 = 420.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 56.0;

const COLORS: [&str; 12] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#e7ba52",
];

/// Text for SVG and HTML: `&`, `<`, `>` and `"` escaped.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A series of points.
pub struct Series {
    /// Its id (the group's id is `series-{id}`).
    pub id: String,
    /// The legend's text.
    pub label: String,
    /// The points; on a log axis values at or below the axis' minimum sit on it.
    pub points: Vec<(f64, f64)>,
    /// Joined by a line (otherwise markers only).
    pub line: bool,
    /// Marker radius.
    pub radius: f64,
}

/// An axis.
pub struct Axis {
    /// Its label.
    pub label: String,
    /// Logarithmic.
    pub log: bool,
    /// Range.
    pub min: f64,
    /// Range.
    pub max: f64,
    /// A label for the minimum of a log axis (such as "exact" for zero error).
    pub zero: Option<&'static str>,
}

impl Axis {
    fn map(&self, v: f64, lo: f64, hi: f64) -> f64 {
        let f = if self.log {
            let v = v.max(self.min);
            (v.ln() - self.min.ln()) / (self.max.ln() - self.min.ln())
        } else {
            (v - self.min) / (self.max - self.min)
        };
        let f = if f.is_finite() {
            f.clamp(-0.02, 1.02)
        } else {
            0.0
        };
        lo + f * (hi - lo)
    }

    fn ticks(&self) -> Vec<(f64, String)> {
        if self.log {
            let mut t = Vec::new();
            let mut k = self.min.log10().ceil() as i32;
            while 10f64.powi(k) <= self.max * 1.000001 {
                let v = 10f64.powi(k);
                let label = if k == self.min.log10().round() as i32 && self.zero.is_some() {
                    self.zero.unwrap_or_default().to_string()
                } else {
                    fmt_num(v)
                };
                t.push((v, label));
                k += 1;
            }
            t
        } else {
            let span = (self.max - self.min).max(1e-12);
            let raw = span / 5.0;
            let mag = 10f64.powf(raw.log10().floor());
            let step = [1.0, 2.0, 5.0, 10.0]
                .iter()
                .map(|m| m * mag)
                .find(|s| *s >= raw)
                .unwrap_or(10.0 * mag);
            let mut v = (self.min / step).ceil() * step;
            let mut t = Vec::new();
            while v <= self.max + step * 1e-6 && t.len() < 20 {
                t.push((v, fmt_num(v)));
                v += step;
            }
            t
        }
    }
}

/// A number for a tick: no more digits than it needs.
pub fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        let digits = (-a.log10().floor()) as usize + 2;
        let s = format!("{v:.digits$}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

fn start(out: &mut String, id: &str, title: &str) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" id="{id}" class="plot" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12"><rect width="{W}" height="{H}" fill="white"/><text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        esc(title)
    );
}

fn frame(out: &mut String, x: &Axis, y: &Axis) {
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
    plot_box(out);
    for (v, label) in x.ticks() {
        let px = x.map(v, x0, x1);
        let _ = write!(
            out,
            r##"<line x1="{px:.1}" y1="{y1}" x2="{px:.1}" y2="{y0}" stroke="#ddd"/><text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"##,
            y0 + 16.0,
            esc(&label)
        );
    }
    y_grid(out, y);
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text></g>"#,
        (x0 + x1) / 2.0,
        H - 14.0,
        esc(&x.label)
    );
}

/// The plot area's frame (opens the `axes` group).
fn plot_box(out: &mut String) {
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
    let _ = write!(
        out,
        r##"<g class="axes"><rect x="{x0}" y="{y1}" width="{}" height="{}" fill="none" stroke="#333"/>"##,
        x1 - x0,
        y0 - y1
    );
}

/// The y axis: grid lines, tick labels and the rotated axis label.
fn y_grid(out: &mut String, y: &Axis) {
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
    for (v, label) in y.ticks() {
        let py = y.map(v, y0, y1);
        let _ = write!(
            out,
            r##"<line x1="{x0}" y1="{py:.1}" x2="{x1}" y2="{py:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            py + 4.0,
            esc(&label)
        );
    }
    let _ = write!(
        out,
        r#"<text transform="translate(18 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
        (y0 + y1) / 2.0,
        esc(&y.label)
    );
}

fn legend(out: &mut String, i: usize, label: &str, color: &str) {
    let y = TOP + 8.0 + i as f64 * 18.0;
    let x = W - RIGHT + 14.0;
    let _ = write!(
        out,
        r#"<rect x="{x}" y="{}" width="12" height="12" fill="{color}"/><text x="{}" y="{}">{}</text>"#,
        y - 10.0,
        x + 18.0,
        y,
        esc(label)
    );
}

/// A line or scatter plot.
pub fn xy(id: &str, title: &str, x: &Axis, y: &Axis, series: &[Series]) -> String {
    let mut out = String::new();
    start(&mut out, id, title);
    frame(&mut out, x, y);
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let _ = write!(
            out,
            r#"<g class="series" id="series-{}" data-label="{}">"#,
            esc(&s.id),
            esc(&s.label)
        );
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .map(|&(a, b)| (x.map(a, x0, x1), y.map(b, y0, y1)))
            .collect();
        if s.line && pts.len() > 1 {
            let list: Vec<String> = pts.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
            let _ = write!(
                out,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
                list.join(" ")
            );
        }
        for ((a, b), (vx, vy)) in pts.iter().zip(&s.points) {
            let _ = write!(
                out,
                r#"<circle cx="{a:.1}" cy="{b:.1}" r="{}" fill="{color}"><title>{}: {}, {}</title></circle>"#,
                s.radius,
                esc(&s.label),
                fmt_num(*vx),
                fmt_num(*vy)
            );
        }
        legend(&mut out, i, &s.label, color);
        out.push_str("</g>");
    }
    out.push_str("</svg>");
    out
}

/// Grouped bars: one group per `groups` entry, one bar per series in each.
pub fn bars(id: &str, title: &str, y: &Axis, groups: &[String], series: &[Series]) -> String {
    let mut out = String::new();
    start(&mut out, id, title);
    let x = Axis {
        label: String::new(),
        log: false,
        min: 0.0,
        max: 1.0,
        zero: None,
    };
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
    // The frame without x ticks: the groups' names stand there.
    plot_box(&mut out);
    y_grid(&mut out, y);
    let gw = (x1 - x0) / groups.len().max(1) as f64;
    let every = groups.len().div_ceil(12).max(1);
    for (g, name) in groups.iter().enumerate() {
        if g % every == 0 {
            // Slanted, so that long names do not run into each other.
            let _ = write!(
                out,
                r#"<text transform="translate({:.1} {}) rotate(-25)" text-anchor="end" font-size="10">{}</text>"#,
                x0 + gw * (g as f64 + 0.5),
                y0 + 14.0,
                esc(name)
            );
        }
    }
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text></g>"#,
        (x0 + x1) / 2.0,
        H - 14.0,
        esc(&x.label)
    );
    let bw = gw * 0.8 / series.len().max(1) as f64;
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let _ = write!(
            out,
            r#"<g class="series" id="series-{}" data-label="{}">"#,
            esc(&s.id),
            esc(&s.label)
        );
        for (g, &(_, v)) in s.points.iter().enumerate().take(groups.len()) {
            let top = y.map(v, y0, y1);
            let bx = x0 + gw * (g as f64 + 0.1) + bw * i as f64;
            let _ = write!(
                out,
                r#"<rect x="{bx:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{color}"><title>{} {}: {}</title></rect>"#,
                bw.max(0.5),
                (y0 - top).max(0.0),
                esc(&s.label),
                esc(&groups[g]),
                fmt_num(v)
            );
        }
        if series.len() > 1 {
            legend(&mut out, i, &s.label, color);
        }
        out.push_str("</g>");
    }
    out.push_str("</svg>");
    out
}

/// A histogram: `counts[i]` poses in `[i·w, (i+1)·w)`.
pub fn histogram(id: &str, title: &str, x_label: &str, w: f64, counts: &[u64]) -> String {
    let total = counts.iter().sum::<u64>().max(1) as f64;
    let shares: Vec<f64> = counts.iter().map(|&c| c as f64 / total * 100.0).collect();
    let top = shares.iter().cloned().fold(0.0, f64::max).max(1e-9);
    let mut out = String::new();
    start(&mut out, id, title);
    let x = Axis {
        label: x_label.to_string(),
        log: false,
        min: 0.0,
        max: w * counts.len() as f64,
        zero: None,
    };
    let y = Axis {
        label: "share of poses (%)".into(),
        log: false,
        min: 0.0,
        max: top * 1.1,
        zero: None,
    };
    frame(&mut out, &x, &y);
    let (x0, x1, y0, y1) = (LEFT, W - RIGHT, H - BOTTOM, TOP);
    let _ = write!(out, r#"<g class="series" id="series-{}">"#, esc(id));
    for (i, s) in shares.iter().enumerate() {
        let a = x.map(w * i as f64, x0, x1);
        let b = x.map(w * (i + 1) as f64, x0, x1);
        let t = y.map(*s, y0, y1);
        let _ = write!(
            out,
            r##"<rect x="{a:.1}" y="{t:.1}" width="{:.1}" height="{:.1}" fill="#1f77b4"><title>{}–{}: {} poses</title></rect>"##,
            (b - a - 0.5).max(0.5),
            (y0 - t).max(0.0),
            fmt_num(w * i as f64),
            fmt_num(w * (i + 1) as f64),
            counts[i]
        );
    }
    out.push_str("</g></svg>");
    out
}
