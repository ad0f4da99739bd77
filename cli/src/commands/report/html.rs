//! The report's page: tables of the numbers (each figure's cell has an id, which the tests
//! check against `report.json`) and the plots inline. No JavaScript, no outside files.

use std::fmt::Write;

use super::plot::{self, esc, Axis, Series};
use super::sweep::{COMPRESSORS, PROFILES, SETTINGS};
use super::{Entry, Report};

fn pct(v: f64) -> f64 {
    v * 100.0
}

/// The most of `v` with a margin, for an axis.
fn top(v: impl Iterator<Item = f64>) -> f64 {
    v.fold(1e-9, f64::max) * 1.12
}

/// A rate–distortion plot: size against the largest (or, with `mean`, the mean) position
/// (or rotation) error.
fn rd(r: &Report, id: &str, rotation: bool, mean: bool) -> String {
    let err = |e: &Entry| match (rotation, mean) {
        (true, false) => e.error.max_rotation_deg,
        (true, true) => e.error.mean_rotation_deg,
        (false, false) => e.error.max_position_mm,
        (false, true) => e.error.mean_position_mm,
    };
    // The curves: the step sweep of the plotted quantity (the other at fine's grid).
    let which_sweep = if rotation { "rotation" } else { "position" };
    let mut series = Vec::new();
    for (curve, _, _) in SETTINGS {
        let points = r
            .steps
            .iter()
            .filter(|s| s.curve == curve && s.sweep == which_sweep)
            .map(|s| {
                let e = Entry {
                    error: s.error,
                    ..Entry::default()
                };
                (err(&e), pct(s.ratio))
            })
            .collect();
        series.push(Series {
            id: format!("rd-{curve}"),
            label: format!("{which_sweep} step sweep, {curve}"),
            points,
            line: true,
            radius: 3.0,
        });
    }
    let mut marks: Vec<(String, String)> = vec![
        ("lossless".into(), "lossless".into()),
        ("fine".into(), "fine".into()),
        ("compact".into(), "compact".into()),
    ];
    for (s, _, _) in SETTINGS {
        marks.push((format!("butter-{s}"), format!(".butter-style, {s}")));
    }
    for c in COMPRESSORS {
        marks.push((c.to_string(), c.to_string()));
    }
    for (id, label) in marks {
        let points = r
            .entries
            .iter()
            .filter(|e| e.name == id || (e.kind == "stream" && e.name.starts_with(&id)))
            .map(|e| (err(e), pct(e.ratio)))
            .collect();
        series.push(Series {
            id: format!("mark-{id}"),
            label,
            points,
            line: false,
            radius: 6.0,
        });
    }
    let which = if mean { "mean" } else { "largest" };
    let (x_label, min, max, what) = if rotation {
        (
            format!("{which} rotation error (degrees)"),
            1e-4,
            1.0,
            "rotation",
        )
    } else {
        (
            format!("{which} position error (mm)"),
            1e-3,
            10.0,
            "position",
        )
    };
    let y_max = top(r
        .entries
        .iter()
        .filter(|e| e.kind != "bsor")
        .map(|e| pct(e.ratio))
        .chain(r.steps.iter().map(|s| pct(s.ratio))));
    plot::xy(
        id,
        &format!("Size against {which} {what} error"),
        &Axis {
            label: x_label,
            log: true,
            min,
            max,
            zero: Some("exact"),
        },
        &size_axis(y_max),
        &series,
    )
}

/// Every plot, by file name (without `.svg`).
pub fn plots(r: &Report) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = [
        ("rate-distortion", false, false),
        ("rate-distortion-rotation", true, false),
        ("rate-distortion-mean", false, true),
        ("rate-distortion-rotation-mean", true, true),
    ]
    .iter()
    .map(|&(id, rotation, mean)| (id.to_string(), rd(r, id, rotation, mean)))
    .collect();
    // Sizes per replay.
    let coders: Vec<&Entry> = r.entries.iter().filter(|e| e.kind != "bsor").collect();
    let mut groups: Vec<String> = r.files.iter().map(|f| f.file.clone()).collect();
    groups.push("all".into());
    let series: Vec<Series> = coders
        .iter()
        .map(|e| {
            let mut points: Vec<(f64, f64)> = r
                .files
                .iter()
                .map(|f| {
                    let b = f.bytes.get(&e.name).copied().unwrap_or(0);
                    (0.0, b as f64 / f.bsor_bytes.max(1) as f64 * 100.0)
                })
                .collect();
            points.push((0.0, pct(e.ratio)));
            Series {
                id: format!("size-{}", e.name),
                label: e.name.clone(),
                points,
                line: false,
                radius: 0.0,
            }
        })
        .collect();
    let y_max = top(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
    out.push((
        "sizes".into(),
        plot::bars(
            "sizes",
            "Size per replay",
            &size_axis(y_max),
            &groups,
            &series,
        ),
    ));
    // The keyframe sweep.
    let mut series = Vec::new();
    for (curve, _, _) in SETTINGS {
        for (_, p) in PROFILES {
            let points: Vec<(f64, f64)> = r
                .sweep
                .iter()
                .filter(|s| s.curve == curve && s.profile == p)
                .map(|s| (f64::from(s.keyframe_seconds), pct(s.ratio)))
                .collect();
            series.push(Series {
                id: format!("kf-{p}-{curve}"),
                label: format!("{p}, {curve}"),
                points,
                line: true,
                radius: 3.0,
            });
        }
    }
    let ks: Vec<f64> = r
        .sweep
        .iter()
        .map(|s| f64::from(s.keyframe_seconds))
        .collect();
    let (lo, hi) = (
        ks.iter().cloned().fold(f64::INFINITY, f64::min),
        ks.iter().cloned().fold(0.0, f64::max),
    );
    let log = lo > 0.0 && hi / lo >= 10.0;
    let x = if log {
        Axis {
            label: "seconds between keyframes".into(),
            log: true,
            min: 10f64.powf(lo.log10().floor()),
            max: 10f64.powf(hi.log10().ceil()),
            zero: None,
        }
    } else {
        Axis {
            label: "seconds between keyframes".into(),
            log: false,
            min: 0.0,
            max: (hi * 1.1).max(1.0),
            zero: None,
        }
    };
    let y_max = top(r.sweep.iter().map(|s| pct(s.ratio)));
    out.push((
        "keyframes".into(),
        plot::xy(
            "keyframes",
            "Size against keyframe interval",
            &x,
            &size_axis(y_max),
            &series,
        ),
    ));
    // Speeds.
    let names: Vec<String> = coders.iter().map(|e| e.name.clone()).collect();
    let series = vec![
        Series {
            id: "speed-encode".into(),
            label: "encode".into(),
            points: coders.iter().map(|e| (0.0, e.encode_mb_s)).collect(),
            line: false,
            radius: 0.0,
        },
        Series {
            id: "speed-decode".into(),
            label: "decode".into(),
            points: coders.iter().map(|e| (0.0, e.decode_mb_s)).collect(),
            line: false,
            radius: 0.0,
        },
    ];
    let y_max = top(coders.iter().flat_map(|e| [e.encode_mb_s, e.decode_mb_s]));
    out.push((
        "speed".into(),
        plot::bars(
            "speed",
            "Throughput (BSOR MB/s, log scale)",
            &Axis {
                label: "MB/s".into(),
                log: true,
                min: 0.1,
                max: 10f64.powf(y_max.log10().ceil()),
                zero: None,
            },
            &names,
            &series,
        ),
    ));
    for h in &r.histograms {
        let id = format!("hist-{}-{}", h.coder, h.quantity);
        let unit = if h.quantity == "position" {
            "position error (mm)"
        } else {
            "rotation error (degrees)"
        };
        let coder = if h.coder == "butter" {
            ".butter-style"
        } else {
            h.coder
        };
        let svg = plot::histogram(
            &id,
            &format!("{coder}: {} errors", h.quantity),
            unit,
            h.bin_width,
            &h.counts,
        );
        out.push((id, svg));
    }
    out
}

fn svg<'a>(plots: &'a [(String, String)], name: &str) -> &'a str {
    plots
        .iter()
        .find(|(n, _)| n == name)
        .map_or("", |(_, s)| s.as_str())
}

/// The page.
pub fn page(r: &Report, plots: &[(String, String)]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>bsor-stream benchmark report</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em}}
table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 8px}}
td.n{{text-align:right;font-variant-numeric:tabular-nums}}svg.plot{{max-width:100%;height:auto}}
.hist{{display:flex;flex-wrap:wrap}}.hist svg{{width:49%}}</style></head><body>
<h1>bsor-stream benchmark report</h1>
<p>{n} replays, {b} BSOR bytes. Run: <code id="command">{cmd}</code> in {s:.1} s on
<span id="machine">{cpu}, {cores} cores, {os}</span>.</p>
"#,
        n = r.files.len(),
        b = r.bsor_bytes,
        cmd = esc(&r.command),
        s = r.seconds,
        cpu = esc(&r.machine.cpu),
        cores = r.machine.cores,
        os = esc(&r.machine.os),
    );
    h.push_str(
        "<h2>Size and error</h2>\n<p>Every coder on the same replays in the same run. \
         Errors are over every pose of every frame (positions in mm, rotations in degrees; \
         stored values that are not rotations are left out, as they pass through the \
         profiles exactly). Events and frame times are exact in every coder (checked).</p>\n\
         <table id=\"entries\"><tr><th>coder</th><th>bytes</th><th>% of BSOR</th>\
         <th>max pos (mm)</th><th>mean pos (mm)</th><th>max rot (°)</th><th>mean rot (°)</th>\
         <th>encode MB/s</th><th>decode MB/s</th></tr>\n",
    );
    for e in &r.entries {
        let n = esc(&e.name);
        let _ = writeln!(
            h,
            r#"<tr><td>{n}</td><td class="n" id="bytes-{n}">{}</td><td class="n" id="ratio-{n}">{:.2}</td><td class="n" id="maxpos-{n}">{:.4}</td><td class="n" id="meanpos-{n}">{:.4}</td><td class="n" id="maxrot-{n}">{:.4}</td><td class="n" id="meanrot-{n}">{:.4}</td><td class="n" id="enc-{n}">{:.1}</td><td class="n" id="dec-{n}">{:.1}</td></tr>"#,
            e.bytes,
            pct(e.ratio),
            e.error.max_position_mm,
            e.error.mean_position_mm,
            e.error.max_rotation_deg,
            e.error.mean_rotation_deg,
            e.encode_mb_s,
            e.decode_mb_s
        );
    }
    h.push_str("</table>\n<h2>Rate and distortion</h2>\n");
    h.push_str(
        "<p>The curves are the lossy coder's custom grids (proto-spec/format.md, section \
         3, profile 3): the position plots sweep the position step (0.05 to 5 mm, \
         rotations at fine's grid), the rotation plots the rotation step (0.005° to 1°, \
         positions at fine's step), under the live (keyframe every second, chunk every \
         100 ms) and archive (keyframe every 10 s) settings; fine, compact and the other \
         coders are marked. Lossless coders sit at “exact”.</p>\n",
    );
    h.push_str(svg(plots, "rate-distortion"));
    h.push_str(svg(plots, "rate-distortion-rotation"));
    h.push_str(svg(plots, "rate-distortion-mean"));
    h.push_str(svg(plots, "rate-distortion-rotation-mean"));
    h.push_str("\n<h2>Size per replay</h2>\n");
    h.push_str(svg(plots, "sizes"));
    h.push_str("<table id=\"files\"><tr><th>replay</th><th>BSOR</th>");
    let coders: Vec<&Entry> = r.entries.iter().filter(|e| e.kind != "bsor").collect();
    for e in &coders {
        let _ = write!(h, "<th>{}</th>", esc(&e.name));
    }
    h.push_str("</tr>\n");
    for (i, f) in r.files.iter().enumerate() {
        let _ = write!(
            h,
            r#"<tr><td>{}</td><td class="n">{}</td>"#,
            esc(&f.file),
            f.bsor_bytes
        );
        for e in &coders {
            let b = f.bytes.get(&e.name).copied().unwrap_or(0);
            let _ = write!(
                h,
                r#"<td class="n" id="file-{i}-{}" title="{b} bytes">{:.2}%</td>"#,
                esc(&e.name),
                b as f64 / f.bsor_bytes.max(1) as f64 * 100.0
            );
        }
        h.push_str("</tr>\n");
    }
    h.push_str(
        "</table>\n<h2>Quantization steps</h2>\n<p>The custom profile (format.md \
         section 3, profile 3) over two one-dimensional sweeps: the position step with \
         rotations at fine's grid (M = 3600), and the rotation step (the grid angle \
         √2/M rad) with positions at fine's step (0.1153 mm); these are the curves of the \
         size–error plots above. Every point decoded with its events, times and fps exact \
         and its errors within the grid's bounds (step/1.153, 72°/M).</p>\n",
    );
    h.push_str(
        "<table id=\"steps\"><tr><th>sweep</th><th>setting</th><th>pos step (mm)</th>\
         <th>rot step (°)</th><th>M</th><th>% of BSOR</th><th>max pos (mm)</th>\
         <th>mean pos (mm)</th><th>max rot (°)</th><th>mean rot (°)</th></tr>\n",
    );
    for (i, p) in r.steps.iter().enumerate() {
        let _ = writeln!(
            h,
            r#"<tr><td>{}</td><td>{}</td><td class="n">{:.4}</td><td class="n">{:.4}</td><td class="n">{}</td><td class="n" id="steps-{i}">{:.2}</td><td class="n">{:.4}</td><td class="n">{:.4}</td><td class="n">{:.4}</td><td class="n">{:.4}</td></tr>"#,
            p.sweep,
            p.curve,
            p.position_step_mm,
            p.rotation_step_deg,
            p.rotation_steps,
            pct(p.ratio),
            p.error.max_position_mm,
            p.error.mean_position_mm,
            p.error.max_rotation_deg,
            p.error.mean_rotation_deg,
        );
    }
    h.push_str(
        "</table>\n<h2>Keyframe interval</h2>\n<p>What a writer may choose freely: \
         the seconds between keyframes (live keeps its 100 ms chunks). Every point decoded \
         with its events exact.</p>\n",
    );
    h.push_str(svg(plots, "keyframes"));
    h.push_str(
        "<table id=\"sweep\"><tr><th>profile</th><th>setting</th><th>keyframe s</th>\
         <th>% of BSOR</th><th>max pos (mm)</th><th>mean pos (mm)</th>\
         <th>max rot (°)</th><th>mean rot (°)</th></tr>\n",
    );
    for p in &r.sweep {
        let _ = writeln!(
            h,
            r#"<tr><td>{pr}</td><td>{c}</td><td class="n">{k}</td><td class="n" id="sweep-{pr}-{c}-{k}">{:.2}</td><td class="n">{:.4}</td><td class="n">{:.4}</td><td class="n">{:.4}</td><td class="n">{:.4}</td></tr>"#,
            pct(p.ratio),
            p.error.max_position_mm,
            p.error.mean_position_mm,
            p.error.max_rotation_deg,
            p.error.mean_rotation_deg,
            pr = p.profile,
            c = p.curve,
            k = p.keyframe_seconds,
        );
    }
    h.push_str(
        "</table>\n<h2>Error distributions</h2>\n<p>Archive settings; the last bin \
         holds what is above the axis.</p>\n<div class=\"hist\">",
    );
    for hist in &r.histograms {
        h.push_str(svg(
            plots,
            &format!("hist-{}-{}", hist.coder, hist.quantity),
        ));
    }
    h.push_str(
        "</div>\n<h2>Speed</h2>\n<p>BSOR megabytes per second, wall clock, once per \
         replay. Seconds by stage: parse (BSOR), predict (the baseline's quantizing and \
         deltas), code (the stream format's frames: prediction and range coding are one \
         pass; decoding), compress (zstd, xz, brotli, and the stream's events, trailer and \
         index), write (output; BSOR bytes when decoding).</p>\n",
    );
    h.push_str(svg(plots, "speed"));
    h.push_str(
        "<table id=\"stages\"><tr><th>coder</th><th>encode: parse</th><th>predict</th>\
         <th>code</th><th>compress</th><th>write</th><th>decode: code</th><th>decompress</th>\
         <th>parse</th><th>write</th></tr>\n",
    );
    for e in &r.entries {
        let (a, b) = (&e.encode, &e.decode);
        let _ = write!(h, "<tr><td>{}</td>", esc(&e.name));
        for v in [
            a.parse, a.predict, a.code, a.compress, a.write, b.code, b.compress, b.parse, b.write,
        ] {
            let _ = write!(h, r#"<td class="n">{v:.4}</td>"#);
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n</body></html>\n");
    h
}

/// The y axis of every size plot: percent of the BSOR, from 0.
fn size_axis(max: f64) -> Axis {
    Axis {
        label: "size (% of BSOR)".into(),
        log: false,
        min: 0.0,
        max,
        zero: None,
    }
}
