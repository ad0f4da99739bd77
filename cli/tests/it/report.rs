//! `bench --report`: the page, its plots and its JSON, built from real and synthetic replays.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bsor-stream"))
}

const PLOTS: [&str; 13] = [
    "rate-distortion",
    "rate-distortion-rotation",
    "rate-distortion-mean",
    "rate-distortion-rotation-mean",
    "sizes",
    "keyframes",
    "speed",
    "hist-fine-position",
    "hist-fine-rotation",
    "hist-compact-position",
    "hist-compact-rotation",
    "hist-butter-position",
    "hist-butter-rotation",
];

const CODERS: [&str; 12] = [
    "zstd-3",
    "zstd-19-long",
    "xz-9e",
    "brotli-11",
    "lossless-live",
    "lossless-archive",
    "fine-live",
    "fine-archive",
    "compact-live",
    "compact-archive",
    "butter-live",
    "butter-archive",
];

/// Runs the report on `files` into `dir/report` with a sweep of two intervals, and checks
/// everything the page promises. Returns the JSON.
fn build_and_check(files: &[PathBuf], dir: &Path) -> Value {
    let out_dir = dir.join("report");
    let out = bin()
        .arg("bench")
        .args(files)
        .arg("--report")
        .arg(&out_dir)
        .arg("--json")
        .args(["--sweep", "1,10"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Nothing but the report folder was written.
    let written: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(written, ["report"]);
    let mut names: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut expected: Vec<String> = PLOTS.iter().map(|p| format!("{p}.svg")).collect();
    expected.extend(["index.html".into(), "report.json".into()]);
    expected.sort();
    assert_eq!(names, expected);

    let page = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    assert!(!page.contains("<script"), "no JavaScript");
    let json: Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("report.json")).unwrap()).unwrap();

    // Every SVG parses, inline and as a file, and holds its series.
    let inline: Vec<&str> = page
        .split("<svg ")
        .skip(1)
        .map(|s| &s[..s.find("</svg>").unwrap() + 6])
        .collect();
    assert_eq!(inline.len(), PLOTS.len());
    for p in PLOTS {
        let text = std::fs::read_to_string(out_dir.join(format!("{p}.svg"))).unwrap();
        let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        assert_eq!(doc.root_element().attribute("id"), Some(p));
        assert!(
            inline.iter().any(|s| format!("<svg {s}") == text),
            "{p} is inline in the page"
        );
        let series: Vec<(String, usize)> = doc
            .descendants()
            .filter(|n| n.attribute("class") == Some("series"))
            .map(|n| {
                let marks = n
                    .descendants()
                    .filter(|m| matches!(m.tag_name().name(), "circle" | "rect"))
                    .count();
                (n.attribute("id").unwrap_or_default().to_string(), marks)
            })
            .collect();
        let want: Vec<String> = match p {
            p if p.starts_with("rate-distortion") => {
                let mut w = vec!["rd-live".to_string(), "rd-archive".into()];
                for m in [
                    "lossless",
                    "fine",
                    "compact",
                    "butter-live",
                    "butter-archive",
                    "zstd-3",
                    "zstd-19-long",
                    "xz-9e",
                    "brotli-11",
                ] {
                    w.push(format!("mark-{m}"));
                }
                w
            }
            "sizes" => CODERS.iter().map(|c| format!("size-{c}")).collect(),
            "keyframes" => ["live", "archive"]
                .iter()
                .flat_map(|c| {
                    ["lossless", "fine", "compact"]
                        .iter()
                        .map(move |p| format!("kf-{p}-{c}"))
                })
                .collect(),
            "speed" => vec!["speed-encode".into(), "speed-decode".into()],
            h => vec![h.to_string()],
        };
        let ids: Vec<String> = series.iter().map(|(id, _)| id.clone()).collect();
        let want: Vec<String> = want.iter().map(|w| format!("series-{w}")).collect();
        assert_eq!(ids, want, "{p}");
        for (id, marks) in &series {
            assert!(*marks > 0, "{p}: {id} is empty");
        }
    }
    // The R-D curves have a point per step of their sweep (7 position steps, 8 rotation
    // steps); the marks for lossless, fine and compact, two each.
    let rd = std::fs::read_to_string(out_dir.join("rate-distortion.svg")).unwrap();
    let doc = roxmltree::Document::parse(&rd).unwrap();
    let count = |id: &str| {
        doc.descendants()
            .find(|n| n.attribute("id") == Some(id))
            .map_or(0, |n| {
                n.children().filter(|c| c.has_tag_name("circle")).count()
            })
    };
    assert_eq!(count("series-rd-live"), 7);
    assert_eq!(count("series-rd-archive"), 7);
    assert_eq!(count("series-mark-lossless"), 2);
    assert_eq!(count("series-mark-fine"), 2);
    assert_eq!(count("series-mark-compact"), 2);

    // The page's figures are the JSON's.
    let cell = |id: &str| -> String {
        let key = format!("id=\"{id}\"");
        let at = page.find(&key).unwrap_or_else(|| panic!("no cell {id}")) + key.len();
        let rest = &page[at..];
        let start = rest.find('>').unwrap() + 1;
        let end = rest.find('<').unwrap();
        rest[start..end].to_string()
    };
    let entries = json["entries"].as_array().unwrap();
    let names: Vec<&str> = entries
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    let mut want = vec!["bsor"];
    want.extend(CODERS);
    assert_eq!(names, want);
    for e in entries {
        let n = e["name"].as_str().unwrap();
        let f = |k: &str| e[k].as_f64().unwrap();
        let err = |k: &str| e["error"][k].as_f64().unwrap();
        assert_eq!(cell(&format!("bytes-{n}")), e["bytes"].to_string());
        assert_eq!(
            cell(&format!("ratio-{n}")),
            format!("{:.2}", f("ratio") * 100.0)
        );
        assert_eq!(
            cell(&format!("maxpos-{n}")),
            format!("{:.4}", err("maxPositionMm"))
        );
        assert_eq!(
            cell(&format!("meanpos-{n}")),
            format!("{:.4}", err("meanPositionMm"))
        );
        assert_eq!(
            cell(&format!("maxrot-{n}")),
            format!("{:.4}", err("maxRotationDeg"))
        );
        assert_eq!(
            cell(&format!("meanrot-{n}")),
            format!("{:.4}", err("meanRotationDeg"))
        );
        assert_eq!(cell(&format!("enc-{n}")), format!("{:.1}", f("encodeMbS")));
        assert_eq!(cell(&format!("dec-{n}")), format!("{:.1}", f("decodeMbS")));
        // Each coder's error is what it promises.
        let (p, r) = match n {
            n if n.starts_with("fine") => (0.1, 0.02),
            n if n.starts_with("compact") => (1.0, 0.2),
            n if n.starts_with("butter") => (f64::INFINITY, 0.28),
            _ => (0.0, 0.0),
        };
        assert!(err("maxPositionMm") <= p, "{n}");
        assert!(err("maxRotationDeg") <= r, "{n}");
        if n.starts_with("fine") || n.starts_with("compact") || n.starts_with("butter") {
            assert!(err("maxPositionMm") > 0.0, "{n} is lossy");
        }
    }
    for (i, f) in json["files"].as_array().unwrap().iter().enumerate() {
        let b = f["bsorBytes"].as_f64().unwrap();
        for c in CODERS {
            let v = f["bytes"][c].as_f64().unwrap();
            assert_eq!(
                cell(&format!("file-{i}-{c}")),
                format!("{:.2}%", v / b * 100.0)
            );
        }
    }
    // The step sweep: two 1-D sweeps, both settings, each point within its grid's bounds
    // (the run fails unless its events are exact), lossy, and in the page.
    let steps = json["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2 * (7 + 8));
    // (sweep, setting) -> (step, size share, mean position + rotation error) per point.
    type Points = Vec<(f64, f64, f64)>;
    let mut by_sweep: std::collections::BTreeMap<(String, String), Points> = Default::default();
    for (i, s) in steps.iter().enumerate() {
        let f = |k: &str| s[k].as_f64().unwrap();
        let err = |k: &str| s["error"][k].as_f64().unwrap();
        assert_eq!(
            cell(&format!("steps-{i}")),
            format!("{:.2}", f("ratio") * 100.0)
        );
        assert!(err("maxPositionMm") <= f("boundPositionMm"), "{s}");
        assert!(err("maxRotationDeg") <= f("boundRotationDeg"), "{s}");
        assert!(
            err("maxPositionMm") > 0.0 && err("maxRotationDeg") > 0.0,
            "{s}"
        );
        let key = (
            s["sweep"].as_str().unwrap().to_string(),
            s["curve"].as_str().unwrap().to_string(),
        );
        let step = if key.0 == "position" {
            f("positionStepMm")
        } else {
            f("rotationStepDeg")
        };
        by_sweep.entry(key).or_default().push((
            step,
            f("ratio"),
            err("meanPositionMm") + err("meanRotationDeg"),
        ));
    }
    assert_eq!(by_sweep.len(), 4);
    for (k, pts) in &by_sweep {
        // Coarser steps: larger mean errors, and the coarsest is smaller than the finest.
        for w in pts.windows(2) {
            assert!(w[0].0 < w[1].0 && w[0].2 < w[1].2, "{k:?}: {pts:?}");
        }
        assert!(pts[pts.len() - 1].1 < pts[0].1, "{k:?}: {pts:?}");
    }
    let sweep = json["sweep"].as_array().unwrap();
    assert_eq!(sweep.len(), 2 * 2 * 3);
    for s in sweep {
        let id = format!(
            "sweep-{}-{}-{}",
            s["profile"].as_str().unwrap(),
            s["curve"].as_str().unwrap(),
            s["keyframeSeconds"].as_f64().unwrap()
        );
        assert_eq!(
            cell(&id),
            format!("{:.2}", s["ratio"].as_f64().unwrap() * 100.0)
        );
    }
    json
}

#[test]
fn report_builds_from_a_synthetic_replay() {
    let dir = tempfile::tempdir().unwrap();
    let input = tempfile::tempdir().unwrap();
    let file = input.path().join("synthetic.bsor");
    let out = bin()
        .args(["synth", "--seconds", "15", "--seed", "4", "-o"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let json = build_and_check(std::slice::from_ref(&file), dir.path());
    assert_eq!(json["files"].as_array().unwrap().len(), 1);
    // A sweep that makes no sense is refused before anything is written.
    let bad = dir.path().join("bad");
    for sweep in ["0", "-1", "1,inf"] {
        let out = bin()
            .arg("bench")
            .arg(&file)
            .arg("--report")
            .arg(&bad)
            .arg(format!("--sweep={sweep}"))
            .output()
            .unwrap();
        assert!(!out.status.success(), "--sweep {sweep}");
        assert!(!bad.exists());
    }
}

#[test]
fn report_builds_from_the_corpus() {
    let Some(corpus) = common::corpus_dir() else {
        return;
    };
    // The two smallest replays: brotli 11 and xz -9e take most of the time.
    let mut files: Vec<(u64, PathBuf)> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "bsor"))
        .map(|p| (std::fs::metadata(&p).unwrap().len(), p))
        .collect();
    files.sort();
    let files: Vec<PathBuf> = files.into_iter().take(2).map(|(_, p)| p).collect();
    let dir = tempfile::tempdir().unwrap();
    let json = build_and_check(&files, dir.path());
    // On real play the profiles beat every general compressor, and archive beats live.
    let ratio = |n: &str| {
        json["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == n)
            .unwrap()["ratio"]
            .as_f64()
            .unwrap()
    };
    assert!(ratio("lossless-archive") < ratio("xz-9e"));
    assert!(ratio("fine-archive") < ratio("fine-live"));
    assert!(ratio("compact-archive") < ratio("fine-archive"));
}
