//! Charts of benchmark results (`rshmem-bench plot`): JSON rows of several runs and libraries in,
//! SVG charts out.
//!
//! Input is JSON lines in the perftests' schema: `bench`, `size` (bytes; `bytes` is accepted
//! too), `value` (or `us`), `unit` (`us` when missing), and optionally `op`, `pes` (or a
//! "N PEs"/"N ranks" in `note`). rshmem's perftests, `gpu_perftest` and `scripts/nccl-bench.py`
//! write it; any other library's results converted to it plot the same way. Lines that are not
//! JSON objects (log lines) are skipped.
//!
//! A series is one (input label, bench, op, PEs); values measured more than once at a size
//! (several runs in one file) are shown as their median.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::prelude::*;

/// One measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Input label (file name or the `LABEL=` given with it).
    pub label: String,
    /// Program or row name.
    pub bench: String,
    /// Operation column, if any.
    pub op: Option<String>,
    /// Number of PEs (or ranks), when known.
    pub pes: Option<u64>,
    /// Bytes.
    pub size: f64,
    /// The value.
    pub value: f64,
    /// Its unit (`us`, `GB/s`).
    pub unit: String,
}

/// Reads the rows of one JSON-lines text; `label` names the input in the legends.
pub fn parse_rows(label: &str, text: &str) -> Vec<Point> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with('{') {
            continue;
        }
        let Ok(serde_json::Value::Object(r)) = serde_json::from_str::<serde_json::Value>(line)
        else {
            continue;
        };
        let Some(bench) = r.get("bench").and_then(|v| v.as_str()) else {
            continue;
        };
        let size = r
            .get("size")
            .or_else(|| r.get("bytes"))
            .and_then(|v| v.as_f64());
        let value = r
            .get("value")
            .or_else(|| r.get("us"))
            .and_then(|v| v.as_f64());
        let (Some(size), Some(value)) = (size, value) else {
            continue;
        };
        let unit = r
            .get("unit")
            .and_then(|v| v.as_str())
            .unwrap_or("us")
            .to_string();
        let pes = r
            .get("pes")
            .and_then(|v| v.as_u64())
            .or_else(|| r.get("note").and_then(|v| v.as_str()).and_then(pes_in_note));
        out.push(Point {
            label: label.to_string(),
            bench: bench.to_string(),
            op: r.get("op").and_then(|v| v.as_str()).map(str::to_string),
            pes,
            size,
            value,
            unit,
        });
    }
    out
}

/// "4 PEs" or "4 ranks" in a note.
fn pes_in_note(note: &str) -> Option<u64> {
    let words: Vec<&str> = note.split([' ', ',']).collect();
    words.windows(2).find_map(|w| {
        if w[1] == "PEs" || w[1] == "ranks" || w[1] == "PE" || w[1] == "rank" {
            w[0].parse().ok()
        } else {
            None
        }
    })
}

/// Reads `LABEL=PATH` or `PATH` (label: the file name without extension).
pub fn load(arg: &str) -> Result<Vec<Point>, String> {
    let (label, path) = match arg.split_once('=') {
        Some((l, p)) if !l.is_empty() && !l.contains('/') => (l.to_string(), p),
        _ => (
            Path::new(arg)
                .file_stem()
                .map_or_else(|| arg.to_string(), |s| s.to_string_lossy().into_owned()),
            arg,
        ),
    };
    let text = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
    Ok(parse_rows(&label, &text))
}

/// Which rows a chart shows.
#[derive(Debug, Clone)]
pub struct ChartSpec {
    /// File name part (`put-bw` gives `PREFIX-put-bw.svg`).
    pub name: String,
    /// Title.
    pub title: String,
    /// Benches whose rows it shows (exact names).
    pub benches: Vec<String>,
}

impl ChartSpec {
    fn new(name: &str, title: &str, benches: &[&str]) -> ChartSpec {
        ChartSpec {
            name: name.into(),
            title: title.into(),
            benches: benches.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// The built-in charts: put and get bandwidth, p latency, and one chart per collective with
/// rshmem's host, stream and NCCL rows of it.
pub fn builtin_charts() -> Vec<ChartSpec> {
    vec![
        ChartSpec::new(
            "put-bw",
            "Put bandwidth vs message size",
            &["shmem_put_bw", "putmem_on_stream"],
        ),
        ChartSpec::new("get-bw", "Get bandwidth vs message size", &["shmem_get_bw"]),
        ChartSpec::new("p-latency", "p latency (one way)", &["shmem_p_latency"]),
        ChartSpec::new(
            "put-latency",
            "putmem + quiet latency vs message size",
            &["shmem_put_latency"],
        ),
        ChartSpec::new(
            "coll-alltoall",
            "alltoall latency vs bytes per PE",
            &["alltoall_on_stream", "alltoall_latency", "nccl_all_to_all"],
        ),
        ChartSpec::new(
            "coll-fcollect",
            "fcollect (all-gather) latency vs bytes per PE",
            &["fcollect_on_stream", "fcollect_latency", "nccl_all_gather"],
        ),
        ChartSpec::new(
            "coll-broadcast",
            "broadcast latency vs bytes",
            &["broadcast_on_stream", "bcast_latency", "nccl_broadcast"],
        ),
        ChartSpec::new(
            "coll-reduce",
            "sum reduction (all-reduce) latency vs bytes",
            &["reduce_on_stream", "reduction_latency", "nccl_all_reduce"],
        ),
        ChartSpec::new(
            "coll-reducescatter",
            "reduce-scatter latency vs bytes",
            &[
                "reducescatter_on_stream",
                "reducescatter_latency",
                "nccl_reduce_scatter",
            ],
        ),
    ]
}

/// Parses `NAME=BENCH[,BENCH...]` (a chart of those benches).
pub fn parse_chart(s: &str) -> Result<ChartSpec, String> {
    let (name, benches) = s
        .split_once('=')
        .filter(|(n, b)| !n.is_empty() && !b.is_empty())
        .ok_or_else(|| format!("expected NAME=BENCH[,BENCH...], got {s:?}"))?;
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(format!(
            "chart name {name:?}: letters, digits, '-' and '_' only"
        ));
    }
    let benches: Vec<&str> = benches.split(',').map(str::trim).collect();
    Ok(ChartSpec::new(name, name, &benches))
}

/// One line of a chart: its legend and (size, median value) points, sizes ascending.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points.
    pub points: Vec<(f64, f64)>,
}

/// The series of `spec` from `rows`, and their unit (the first row's unit; rows with other
/// units are left out). Empty when no row matches.
pub fn series(spec: &ChartSpec, rows: &[Point]) -> (Vec<Series>, String) {
    let sel: Vec<&Point> = rows
        .iter()
        .filter(|p| spec.benches.contains(&p.bench))
        .collect();
    let Some(unit) = sel.first().map(|p| p.unit.clone()) else {
        return (Vec::new(), String::new());
    };
    let mut pes_seen: Vec<Option<u64>> = sel.iter().map(|p| p.pes).collect();
    pes_seen.sort_unstable();
    pes_seen.dedup();
    let show_pes = pes_seen.len() > 1;
    // Key: (label, bench, op, pes) in first-seen order.
    let mut order: Vec<(String, String, Option<String>, Option<u64>)> = Vec::new();
    let mut values: BTreeMap<usize, BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
    for p in sel.iter().filter(|p| p.unit == unit) {
        let key = (p.label.clone(), p.bench.clone(), p.op.clone(), p.pes);
        let i = match order.iter().position(|k| *k == key) {
            Some(i) => i,
            None => {
                order.push(key);
                order.len() - 1
            }
        };
        values
            .entry(i)
            .or_default()
            .entry(p.size.to_bits())
            .or_default()
            .push(p.value);
    }
    let out = order
        .into_iter()
        .enumerate()
        .map(|(i, (label, bench, op, pes))| {
            let mut name = format!("{label}: {bench}");
            if let Some(op) = op {
                name.push_str(&format!(" {op}"));
            }
            if let (true, Some(n)) = (show_pes, pes) {
                name.push_str(&format!(", {n} PEs"));
            }
            let mut points: Vec<(f64, f64)> = values
                .remove(&i)
                .unwrap_or_default()
                .into_iter()
                .map(|(size, mut v)| {
                    v.sort_by(f64::total_cmp);
                    let m = v.len() / 2;
                    let med = if v.len() % 2 == 1 {
                        v[m]
                    } else {
                        (v[m - 1] + v[m]) / 2.0
                    };
                    (f64::from_bits(size), med)
                })
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series { name, points }
        })
        .collect();
    (out, unit)
}

/// A size for an axis label: 8, 4K, 16M.
pub fn human_size(v: f64) -> String {
    let v = v.round() as u64;
    for (shift, s) in [(30, "G"), (20, "M"), (10, "K")] {
        if v >= 1 << shift && v & ((1 << shift) - 1) == 0 {
            return format!("{}{s}", v >> shift);
        }
    }
    v.to_string()
}

fn err(e: impl std::fmt::Display) -> String {
    format!("drawing the chart: {e}")
}

/// Draws `series` (values in `unit`) to the SVG file `path`: log-log lines over the size, or,
/// when every series has a single size, one bar per series.
pub fn draw(path: &Path, title: &str, unit: &str, series: &[Series]) -> Result<(), String> {
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.clone()).collect();
    if all.is_empty() {
        return Err(format!("{title}: no rows to draw"));
    }
    let (ymin, ymax) = all
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let (ymin, ymax) = (ymin.max(1e-9) / 1.5, ymax.max(1e-9) * 1.5);
    let ylabel = if unit == "us" {
        "latency (µs)".to_string()
    } else {
        format!("bandwidth ({unit})")
    };
    let single = series.iter().all(|s| s.points.len() == 1);
    if single {
        let names: Vec<String> = series.iter().map(|s| s.name.clone()).collect();
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..series.len() as f64, 0f64..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .disable_x_axis()
            .max_light_lines(1)
            .y_desc(ylabel)
            .draw()
            .map_err(err)?;
        for (i, s) in series.iter().enumerate() {
            let c = Palette99::pick(i).to_rgba();
            let (size, v) = s.points[0];
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, v)],
                    c.filled(),
                )))
                .map_err(err)?
                .label(format!("{} ({} B): {v:.3}", names[i], human_size(size)))
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    } else {
        let (xmin, xmax) = all
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
        let (xmin, xmax) = (xmin.max(1.0) / 1.5, xmax.max(1.0) * 1.5);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d((xmin..xmax).log_scale().base(2.0), (ymin..ymax).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("message size (bytes)")
            .y_desc(ylabel)
            .x_labels(16)
            .max_light_lines(1)
            .x_label_formatter(&|v| human_size(*v))
            .draw()
            .map_err(err)?;
        for (i, s) in series.iter().enumerate() {
            let c = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(s.points.clone(), c.stroke_width(2)))
                .map_err(err)?
                .label(s.name.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            chart
                .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, c.filled())))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Draws every chart of `specs` that has rows into `dir`/`prefix`-`name`.svg; returns the files
/// written.
pub fn plot_all(
    rows: &[Point],
    specs: &[ChartSpec],
    dir: &Path,
    prefix: &str,
) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut written = Vec::new();
    for spec in specs {
        let (s, unit) = series(spec, rows);
        if s.is_empty() {
            continue;
        }
        let path = dir.join(format!("{prefix}-{}.svg", spec.name));
        draw(&path, &spec.title, &unit, &s)?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RSHMEM: &str = r#"{"bench":"alltoall_on_stream","size":8,"value":6.8,"unit":"us","note":"4 PEs, world team"}
{"bench":"alltoall_on_stream","size":8,"value":7.0,"unit":"us","note":"4 PEs, world team"}
{"bench":"alltoall_on_stream","size":8,"value":9.0,"unit":"us","note":"4 PEs, world team"}
{"bench":"alltoall_on_stream","size":1048576,"value":16.7,"unit":"us","note":"4 PEs, world team"}
{"bench":"alltoall_on_stream","size":8,"value":5.0,"unit":"us","note":"2 PEs, world team"}
rshmem PE 0 WARN a log line
{"bench":"shmem_put_bw","size":8,"value":0.01,"unit":"GB/s","note":"device"}
{"bench":"shmem_p_latency","size":8,"value":0.88,"unit":"us","note":"device"}"#;
    const NCCL: &str = r#"{"bench":"nccl_all_to_all","size":8,"value":32.1,"unit":"us","note":"4 ranks, torch"}
{"bench":"nccl_all_to_all","size":1048576,"value":40.0,"unit":"us","note":"4 ranks, torch"}"#;

    fn rows() -> Vec<Point> {
        let mut r = parse_rows("rshmem", RSHMEM);
        r.extend(parse_rows("nccl", NCCL));
        r
    }

    #[test]
    fn rows_and_series() {
        let r = rows();
        assert_eq!(r.len(), 9);
        assert_eq!(r[0].pes, Some(4));
        assert_eq!(r[7].pes, Some(4));
        let spec = &builtin_charts()[4];
        assert_eq!(spec.name, "coll-alltoall");
        let (s, unit) = series(spec, &r);
        assert_eq!(unit, "us");
        let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "rshmem: alltoall_on_stream, 4 PEs",
                "rshmem: alltoall_on_stream, 2 PEs",
                "nccl: nccl_all_to_all, 4 PEs"
            ]
        );
        // The median of the three 8-byte runs.
        assert_eq!(s[0].points, vec![(8.0, 7.0), (1048576.0, 16.7)]);
        assert_eq!(s[2].points, vec![(8.0, 32.1), (1048576.0, 40.0)]);
    }

    #[test]
    fn charts_are_written() {
        let dir = std::env::temp_dir().join(format!("rshmem-plot-test-{}", std::process::id()));
        let files = plot_all(&rows(), &builtin_charts(), &dir, "t").unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["t-put-bw.svg", "t-p-latency.svg", "t-coll-alltoall.svg"]
        );
        let svg = std::fs::read_to_string(dir.join("t-coll-alltoall.svg")).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..100]);
        assert!(svg.contains("nccl: nccl_all_to_all, 4 PEs"));
        assert!(svg.contains("alltoall latency vs bytes per PE"));
        // A marker per point: 2 + 1 + 2.
        assert_eq!(svg.matches("<circle").count(), 5);
        let bars = std::fs::read_to_string(dir.join("t-p-latency.svg")).unwrap();
        assert!(bars.contains("rshmem: shmem_p_latency (8 B): 0.880"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn custom_chart_and_sizes() {
        let c = parse_chart("bar=barrier_latency,barrier_all_on_stream").unwrap();
        assert_eq!(c.benches, ["barrier_latency", "barrier_all_on_stream"]);
        assert!(parse_chart("x").is_err());
        assert!(parse_chart("a/b=x").is_err());
        assert_eq!(human_size(16.0 * 1048576.0), "16M");
        assert_eq!(human_size(4096.0), "4K");
        assert_eq!(human_size(8.0), "8");
    }
}
