//! `gateway-plot`: renders the load sweep of `gateway-bench --sweep ... --csv FILE` as an
//! SVG: p50 and p99 latency against the throughput reached, through the gateway and
//! direct (rpc-client to the same backends), one point per concurrency level.
//!
//! ```text
//! gateway-plot --csv examples/gateway/bench/sweep.csv --out examples/gateway/bench/latency-vs-load.svg
//! ```

use std::path::PathBuf;

use clap::Parser;
use plotters::prelude::*;

#[derive(Parser, Debug)]
#[command(about = "Plots gateway-bench's load sweep (latency vs throughput) to SVG")]
struct Args {
    /// The sweep's CSV (`path,concurrency,msgs_per_s,p50_us,p99_us[,cpu_us_per_msg]`).
    #[arg(long)]
    csv: PathBuf,
    /// The SVG to write.
    #[arg(long)]
    out: PathBuf,
    /// A subtitle (e.g. the machine load during the run).
    #[arg(long, default_value = "")]
    note: String,
}

/// One row of the CSV.
struct Point {
    path: String,
    concurrency: u32,
    rate: f64,
    p50: f64,
    p99: f64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let text = std::fs::read_to_string(&args.csv)?;
    let mut points = Vec::new();
    for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < 5 {
            return Err(format!("bad CSV row: {line}").into());
        }
        points.push(Point {
            path: f[0].to_string(),
            concurrency: f[1].parse()?,
            rate: f[2].parse()?,
            p50: f[3].parse()?,
            p99: f[4].parse()?,
        });
    }
    let max_rate = points.iter().map(|p| p.rate).fold(0.0, f64::max) * 1.08;
    let max_lat = points.iter().map(|p| p.p99).fold(0.0, f64::max) * 1.5;
    let min_lat = points
        .iter()
        .map(|p| p.p50)
        .fold(f64::MAX, f64::min)
        .max(1.0)
        / 1.5;
    let root = SVGBackend::new(&args.out, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let title = if args.note.is_empty() {
        "Gateway vs direct: latency against throughput (2 cores)".to_string()
    } else {
        format!(
            "Gateway vs direct: latency against throughput ({})",
            args.note
        )
    };
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..max_rate, (min_lat..max_lat).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("messages/s reached (closed loop: 1 request in flight per caller)")
        .y_desc("latency (µs, log scale)")
        .x_label_formatter(&|v| format!("{:.0}k", v / 1000.0))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    let series = [
        ("gateway", "p99", RED, true),
        ("gateway", "p50", RED, false),
        ("direct", "p99", BLUE, true),
        ("direct", "p50", BLUE, false),
    ];
    for (path, q, color, dashed) in series {
        let mut pts: Vec<&Point> = points.iter().filter(|p| p.path == path).collect();
        pts.sort_by_key(|p| p.concurrency);
        let xy: Vec<(f64, f64)> = pts
            .iter()
            .map(|p| (p.rate, if q == "p99" { p.p99 } else { p.p50 }))
            .collect();
        let style = if dashed {
            color.stroke_width(2)
        } else {
            color.mix(0.6).stroke_width(2)
        };
        chart
            .draw_series(LineSeries::new(xy.clone(), style))?
            .label(format!("{path} {q}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart.draw_series(
            xy.iter()
                .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
        )?;
        if q == "p99" {
            // Label the concurrency of every point once (on the p99 line).
            chart.draw_series(pts.iter().map(|p| {
                Text::new(
                    format!("{}", p.concurrency),
                    (p.rate, p.p99),
                    ("sans-serif", 11).into_font().color(&color),
                )
            }))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    root.present()?;
    println!("wrote {}", args.out.display());
    Ok(())
}
