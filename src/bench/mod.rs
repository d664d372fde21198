//! Measuring write (or read) latency at chosen sizes and offsets, with
//! O_DIRECT so every request reaches the drive as issued.
//!
//! A [`plan::IoPlan`] lists cells (size × offset) and their positions;
//! [`run`] interleaves them at random, times each request and summarises
//! each cell. Writes are non-destructive unless asked otherwise: the data
//! is read before the timed phase and the same bytes are written back.

pub mod cpu_latency;
mod engine;
pub mod io;
pub mod plan;
mod progress;
mod request;
pub mod rng;
pub mod safety;
pub mod stats;
pub mod svg;
#[cfg(feature = "io_uring")]
pub mod uring;

pub use engine::Engine;
pub use io::{device_info, open_direct};
pub(crate) use io::{reopen_direct, KernelView};
pub(crate) use plan::{Cell, IoPlan};
pub use plan::{Span, Workload};
pub use progress::{BenchPhase, Progress};
pub use request::Mode;
pub(crate) use request::{BenchError, IoRequest};

use rng::Rng;
use serde::Serialize;
use stats::Latency;

/// One cell's summary, in phybs' terms plus latency percentiles.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CellResult {
    pub size: u64,
    pub offset: u64,
    pub step: u64,
    pub count: u64,
    /// Sum of the request latencies, at any depth.
    pub msec: f64,
    /// count ÷ msec: throughput at depth 1; at a greater depth, cells share
    /// the queue, so this is the rate of one request at a time (the
    /// run's `throughput_iops` is what the device sustained).
    pub iops: f64,
    /// Kilobytes (1000 bytes) per second, from count, size and msec.
    pub kbps: f64,
    pub lat_us: Latency,
}

/// Slowest offset against fastest, by median latency, for one size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ratio {
    pub size: u64,
    pub fast_offset: u64,
    pub slow_offset: u64,
    /// Median latency at slow_offset ÷ at fast_offset.
    pub ratio: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// "psync" or "io_uring".
    pub engine: &'static str,
    pub iodepth: u32,
    /// Wall time of the timed phases (backups excluded), in seconds.
    pub wall_s: f64,
    /// Every request of the run ÷ wall_s: the throughput at any depth.
    pub throughput_iops: f64,
    /// The CPU latency limit in force as the run began, in microseconds
    /// (see [`cpu_latency`]); None: no limit, or it could not be read.
    pub cpu_latency_us: Option<u32>,
    pub results: Vec<CellResult>,
    pub ratios: Vec<Ratio>,
}

/// Runs `plan` on `file` (opened by [`open_direct`]), counting each timed
/// request in `progress`.
pub fn run(
    file: &std::fs::File,
    plan: &IoPlan,
    mode: Mode,
    engine: Engine,
    rng: &mut Rng,
    progress: &Progress,
) -> Result<Report, BenchError> {
    let requests = plan::schedule(plan, rng);
    let cpu_latency_us = cpu_latency::in_force();
    let executed = io::execute(file, &requests, mode, engine, progress)?;
    let (latencies, wall) = (executed.latencies, executed.wall);
    let mut samples = vec![Vec::new(); plan.cells.len()];
    for (req, lat) in requests.iter().zip(&latencies) {
        samples[req.cell].push(lat.as_secs_f64() * 1e6);
    }
    let (engine, iodepth) = engine.describe();
    let results: Vec<CellResult> =
        plan.cells.iter().zip(&samples).map(|(c, s)| summarise(c, s)).collect();
    let ratios = ratios(&results);
    let wall_s = wall.as_secs_f64();
    let throughput_iops = throughput(requests.len(), wall_s);
    Ok(Report { engine, iodepth, wall_s, throughput_iops, cpu_latency_us, results, ratios })
}

/// Requests per second of wall time; 0 when no time passed.
fn throughput(requests: usize, wall_s: f64) -> f64 {
    if wall_s > 0.0 {
        requests as f64 / wall_s
    } else {
        0.0
    }
}

/// A cell's figures from its latencies. Cells are interleaved, so at a
/// depth above 1 they share the queue and no cell has a wall time of its
/// own: msec is the plain summed latency, as in phybs at depth 1.
fn summarise(cell: &Cell, samples_us: &[f64]) -> CellResult {
    let count = samples_us.len() as u64;
    let msec = samples_us.iter().sum::<f64>() / 1000.0;
    let (iops, kbps) = stats::rates(count, cell.size, msec);
    CellResult {
        size: cell.size,
        offset: cell.offset,
        step: cell.step,
        count,
        msec,
        iops,
        kbps,
        lat_us: Latency::of(samples_us),
    }
}

/// For every size measured at two or more offsets.
pub fn ratios(results: &[CellResult]) -> Vec<Ratio> {
    let mut sizes: Vec<u64> = results.iter().map(|r| r.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
        .into_iter()
        .filter_map(|size| {
            let cells: Vec<&CellResult> = results.iter().filter(|r| r.size == size).collect();
            let by_p50 = |a: &&&CellResult, b: &&&CellResult| a.lat_us.p50.total_cmp(&b.lat_us.p50);
            let fast = cells.iter().min_by(by_p50)?;
            let slow = cells.iter().max_by(by_p50)?;
            (cells.len() >= 2 && fast.lat_us.p50 > 0.0).then(|| Ratio {
                size,
                fast_offset: fast.offset,
                slow_offset: slow.offset,
                ratio: slow.lat_us.p50 / fast.lat_us.p50,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(size: u64, offset: u64, p50: f64) -> CellResult {
        let lat_us = Latency { p5: p50, p50, p95: p50 };
        CellResult { size, offset, step: size, count: 1, msec: 1.0, iops: 1.0, kbps: 1.0, lat_us }
    }

    #[test]
    fn ratio_is_slowest_over_fastest_per_size() {
        let results = [cell(4096, 0, 1000.0), cell(4096, 512, 3800.0), cell(512, 0, 2000.0)];
        let r = ratios(&results);
        assert_eq!(r.len(), 1, "a size at one offset has no ratio");
        assert_eq!((r[0].fast_offset, r[0].slow_offset, r[0].ratio), (0, 512, 3.8));
    }

    #[test]
    fn summary_arithmetic() {
        let c = Cell { size: 4096, offset: 512, step: 4096, positions: vec![] };
        let r = summarise(&c, &[1000.0, 3000.0]);
        assert_eq!((r.count, r.msec, r.iops, r.kbps), (2, 4.0, 500.0, 2048.0));
        assert_eq!(r.lat_us.p50, 2000.0);
    }

    #[test]
    fn the_first_request_ends_a_backup() {
        let progress = Progress::new(3, BenchPhase::Backup);
        progress.finish_one();
        assert_eq!((progress.phase(), progress.counts()), (BenchPhase::Timed, (1, 3)));
        progress.start_backup();
        assert_eq!(progress.phase(), BenchPhase::Backup);
        progress.set_phase(BenchPhase::Sweep);
        progress.start_backup();
        progress.finish_one();
        assert_eq!(progress.phase(), BenchPhase::Sweep);
    }

    #[test]
    fn progress_of_a_plan_counts_its_requests_and_starts_as_the_mode_does() {
        let cell = |n| Cell { size: 512, offset: 0, step: 512, positions: vec![0; n] };
        let plan = IoPlan { cells: vec![cell(2), cell(3)], run: 1 };
        let phase_and_total = |mode| {
            let progress = Progress::of(&plan, mode);
            (progress.phase(), progress.counts().1)
        };
        assert_eq!(phase_and_total(Mode::Write), (BenchPhase::Backup, 5));
        assert_eq!(phase_and_total(Mode::Read), (BenchPhase::Timed, 5));
        assert_eq!(phase_and_total(Mode::Destructive), (BenchPhase::Timed, 5));
    }

    #[test]
    fn throughput_is_requests_over_wall_time() {
        assert_eq!(throughput(1000, 0.5), 2000.0);
        assert_eq!(throughput(10, 0.0), 0.0);
    }
}
