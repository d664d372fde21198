//! Throughput against offset, one line per size, as a small hand-written
//! SVG: a penalty shows as a dip at the misaligned offsets.

use super::CellResult;
use std::fmt::Write;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 400.0;
const MARGIN: f64 = 60.0;
const COLORS: [&str; 6] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];

/// The chart; IOPS on the y axis, from 0 to the best cell.
pub fn render(results: &[CellResult]) -> String {
    let max_offset = results.iter().map(|r| r.offset).max().unwrap_or(0).max(1) as f64;
    let max_iops = results.iter().map(|r| r.iops).fold(0.0, f64::max).max(1.0);
    let x = |offset: u64| MARGIN + offset as f64 / max_offset * (WIDTH - 2.0 * MARGIN);
    let y = |iops: f64| HEIGHT - MARGIN - iops / max_iops * (HEIGHT - 2.0 * MARGIN);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    axes(&mut svg, max_offset, max_iops);
    let mut sizes: Vec<u64> = results.iter().map(|r| r.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for (i, size) in sizes.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut cells: Vec<&CellResult> = results.iter().filter(|r| r.size == *size).collect();
        cells.sort_by_key(|r| r.offset);
        let points: Vec<String> =
            cells.iter().map(|r| format!("{:.1},{:.1}", x(r.offset), y(r.iops))).collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            points.join(" ")
        );
        for r in &cells {
            let _ = writeln!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>",
                x(r.offset),
                y(r.iops)
            );
        }
        let ly = MARGIN + 16.0 * i as f64;
        let _ = writeln!(
            svg,
            "<text x=\"{:.0}\" y=\"{ly:.0}\" fill=\"{color}\">{size} bytes</text>",
            WIDTH - MARGIN - 80.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

fn axes(svg: &mut String, max_offset: f64, max_iops: f64) {
    let (left, bottom, right) = (MARGIN, HEIGHT - MARGIN, WIDTH - MARGIN);
    let _ = writeln!(
        svg,
        "<path d=\"M{left},{MARGIN} V{bottom} H{right}\" stroke=\"black\" fill=\"none\"/>\n\
         <text x=\"{left}\" y=\"{:.0}\">0</text>\n\
         <text x=\"{right}\" y=\"{:.0}\" text-anchor=\"end\">{max_offset:.0}</text>\n\
         <text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"middle\">offset (bytes)</text>\n\
         <text x=\"{:.0}\" y=\"{MARGIN}\" text-anchor=\"end\">{max_iops:.0}</text>\n\
         <text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"middle\" transform=\"rotate(-90 {:.0} {:.0})\">IOPS</text>",
        bottom + 15.0,
        bottom + 15.0,
        WIDTH / 2.0,
        bottom + 35.0,
        left - 5.0,
        left - 40.0,
        HEIGHT / 2.0,
        left - 40.0,
        HEIGHT / 2.0,
    );
}
