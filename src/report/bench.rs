//! `bench`'s report: the columns of its table of cells, and the summary
//! printed under it.

use super::table::{fill, Column, ColumnKind, Style, Units};
use crate::bench::{CellResult, Report};

/// The columns `-o` picks from: phybs' figures, then latency percentiles.
pub fn columns() -> Vec<Column<CellResult>> {
    use ColumnKind::Number;
    let column = |name, about, default, value| Column { name, about, kind: Number, default, value };
    vec![
        column("COUNT", "requests measured", true, |r: &CellResult, _| r.count.to_string()),
        column("SIZE", "bytes per request (with --bytes: in bytes)", true, |r, u: Units| {
            u.size(r.size)
        }),
        column(
            "OFFSET",
            "offset of the requests from the grid (with --bytes: in bytes)",
            true,
            |r, u| u.size(r.offset),
        ),
        column("STEP", "distance between positions (with --bytes: in bytes)", true, |r, u| {
            u.size(r.step)
        }),
        column("MSEC", "summed latency, milliseconds", true, |r, _| format!("{:.1}", r.msec)),
        column(
            "IOPS",
            "requests per second from latency: COUNT ÷ MSEC (phybs' tps)",
            true,
            |r, _| format!("{:.1}", r.iops),
        ),
        column("KBPS", "kilobytes (1000 bytes) per second, from latency as IOPS", true, |r, _| {
            format!("{:.1}", r.kbps)
        }),
        column("P5", "5th percentile latency, microseconds", true, |r, _| {
            format!("{:.0}", r.lat_us.p5)
        }),
        column("P50", "median latency, microseconds", true, |r, _| format!("{:.0}", r.lat_us.p50)),
        column("P95", "95th percentile latency, microseconds", true, |r, _| {
            format!("{:.0}", r.lat_us.p95)
        }),
    ]
}

/// What the run sustained, and each size's penalty.
pub fn summary(report: &Report, style: &Style) -> String {
    let units = style.units;
    let requests: u64 = report.results.iter().map(|r| r.count).sum();
    let mut out = format!(
        "{requests} requests in {:.2} s at depth {} ({}): {:.1} IOPS overall\n",
        report.wall_s, report.iodepth, report.engine, report.throughput_iops
    );
    // Requests in flight together share the wall time: a row's rates come
    // from its requests' own latencies, not from what the queue sustained.
    if report.iodepth > 1 {
        let text = format!(
            "per row, IOPS and KBPS come from the requests' latencies (COUNT ÷ MSEC): the rate \
             of one request at a time, not of {} in flight",
            report.iodepth
        );
        out += &fill("", 2, &text, style.width);
    }
    out += &match report.cpu_latency_us {
        Some(0) => "CPU latency limit: 0 µs, idle CPUs polling\n".to_string(),
        Some(us) => format!("CPU latency limit: {us} µs\n"),
        None => "no CPU latency limit: the wakeups of idle CPUs are timed too (--cpu-latency)\n"
            .to_string(),
    };
    for r in &report.ratios {
        out += &format!(
            "size {}: offset {} is {:.2}× slower than offset {} (median latency)\n",
            units.size(r.size),
            units.size(r.slow_offset),
            r.ratio,
            units.size(r.fast_offset)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::Ratio;

    fn report(iodepth: u32, cpu_latency_us: Option<u32>) -> Report {
        let ratio = Ratio { size: 4096, fast_offset: 0, slow_offset: 512, ratio: 7.5 };
        Report {
            engine: "psync",
            iodepth,
            wall_s: 2.0,
            throughput_iops: 1000.0,
            cpu_latency_us,
            results: Vec::new(),
            ratios: vec![ratio],
        }
    }

    #[test]
    fn summary_names_the_limit_and_each_penalty() {
        assert_eq!(
            summary(&report(1, Some(0)), &Style::default()),
            "0 requests in 2.00 s at depth 1 (psync): 1000.0 IOPS overall\n\
             CPU latency limit: 0 µs, idle CPUs polling\n\
             size 4 KiB: offset 512 B is 7.50× slower than offset 0 B (median latency)\n"
        );
        let bytes = Style { units: Units::Bytes, ..Style::default() };
        let text = summary(&report(1, None), &bytes);
        assert!(text.contains("no CPU latency limit: the wakeups of idle CPUs are timed too"));
        assert!(text.contains("size 4096: offset 512 is 7.50× slower than offset 0"), "{text}");
    }

    #[test]
    fn summary_at_depth_says_rows_are_per_request_and_wraps() {
        let narrow = Style { width: Some(40), ..Style::default() };
        let text = summary(&report(8, Some(20)), &narrow);
        assert!(text.contains("CPU latency limit: 20 µs\n"), "{text}");
        let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(words.contains("the rate of one request at a time, not of 8 in flight"), "{text}");
        let wrapped = text.lines().skip(1).take_while(|l| !l.starts_with("CPU"));
        assert!(wrapped.clone().count() > 1 && wrapped.clone().all(|l| l.chars().count() <= 40));
    }
}
