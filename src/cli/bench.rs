//! `blkalign bench`: time writes (or reads) by size and offset, in the
//! three workloads of the articles.

use super::EXIT_OK;
use anyhow::{bail, Context};
use blkalign::bench::{self, plan, rng::Rng, safety, Mode, Plan, Report, Span};
use blkalign::device::{self, SysRoot};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Pattern {
    /// COUNT writes of SIZE at random points of a SIZE grid plus each OFFSET.
    Random,
    /// The size × offset matrix of phybs: sizes 1-8 logical sectors, every
    /// sector offset below the size, COUNT writes 4 × size apart.
    Phybs,
    /// SIZE writes every STRIDE from each BASE sector for TOTAL bytes.
    Stride,
}

#[derive(clap::Args)]
pub struct Args {
    /// A disk, partition or image. Writes put back the bytes read there
    /// before the timed phase (unless --destructive); a mounted or held
    /// device is refused.
    target: PathBuf,

    #[arg(long, value_enum, default_value_t = Pattern::Random)]
    pattern: Pattern,

    /// Bytes per request (random, stride), at most 64 MiB [default: 4096, or
    /// the logical sector when larger].
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,

    /// random: offsets to compare, comma-separated [default: 0 and the
    /// logical sector].
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    offset: Vec<u64>,

    /// Requests per cell [default: 1000 for random, 100 for phybs]; at most
    /// 10 million requests in all.
    #[arg(long)]
    count: Option<u64>,

    /// stride: distance between writes [default: the size].
    #[arg(long, value_parser = parse_size)]
    stride: Option<u64>,

    /// stride: bytes covered from each base.
    #[arg(long, value_parser = parse_size, default_value = "4MiB")]
    total: u64,

    /// stride: base sectors, comma-separated (the articles' partition starts).
    #[arg(long, value_delimiter = ',', default_value = "0,8,34,40,42")]
    base: Vec<u64>,

    /// Use only this many bytes from the start of the target [default: all].
    #[arg(long, value_parser = parse_size)]
    span: Option<u64>,

    /// Time reads instead of writes.
    #[arg(long, conflicts_with_all = ["write", "destructive"])]
    read: bool,

    /// Time writes (the default).
    #[arg(long)]
    write: bool,

    /// Open with O_SYNC.
    #[arg(long)]
    sync: bool,

    /// Write a pattern over the data instead of putting it back; needs --yes.
    #[arg(long)]
    destructive: bool,

    /// Confirm --destructive.
    #[arg(long)]
    yes: bool,

    /// How requests are issued: psync (one at a time) or io_uring.
    #[arg(long, value_enum, default_value_t = EngineArg::Psync)]
    engine: EngineArg,

    /// io_uring: requests in flight at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    iodepth: u32,

    /// Print the report as JSON (fields in docs/performance.md).
    #[arg(long)]
    json: bool,

    /// Also draw throughput against offset, one line per size, to FILE.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,

    /// Seed the random positions and order, to reproduce a run.
    #[arg(long)]
    seed: Option<u64>,
}

fn parse_size(text: &str) -> Result<u64, String> {
    blkalign::units::parse_bytes(text).ok_or_else(|| {
        format!("{text:?} is not a byte count: a number with an optional K, M, G or T suffix (binary), e.g. 4096, 64KiB, 1MiB")
    })
}

pub fn run(args: Args, sysfs_root: Option<PathBuf>) -> anyhow::Result<u8> {
    if args.destructive && !args.yes {
        bail!(
            "--destructive overwrites the data on {}: add --yes to confirm",
            args.target.display()
        );
    }
    let mode = match (args.read, args.destructive) {
        (true, _) => Mode::Read,
        (false, true) => Mode::Destructive,
        (false, false) => Mode::Write,
    };
    let root = sysfs_root.map_or_else(SysRoot::real, SysRoot::fixture);
    let target = &args.target;
    if mode != Mode::Read {
        // Before the exclusive open, which would itself look like a claim;
        // that open then keeps anyone from mounting it until we are done.
        safety::check_unused(&device::open_path(target)?, target, &root)?;
    }
    let file = bench::open_direct(target, mode, args.sync)?;
    let info = bench::device_info(&file, &root.sys)?;
    let mut rng = args.seed.map_or_else(Rng::from_clock, Rng::new);
    let span = Span { start: 0, len: args.span.unwrap_or(info.size).min(info.size) };
    let plan = make_plan(&args, info.logical, span, &mut rng)?;
    let bar = progress(&plan);
    let engine = engine(args.engine, args.iodepth);
    let report = bench::run(&file, &plan, mode, engine, &mut rng, &mut || bar.inc(1))?;
    bar.finish_and_clear();
    if let Some(path) = &args.svg {
        std::fs::write(path, bench::svg::render(&report.results))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let text = if args.json { serde_json::to_string(&report)? + "\n" } else { table(&report) };
    super::emit(&text)?;
    Ok(EXIT_OK)
}

fn make_plan(args: &Args, logical: u64, span: Span, rng: &mut Rng) -> anyhow::Result<Plan> {
    let size = args.size.unwrap_or(logical.max(4096));
    let plan = match args.pattern {
        Pattern::Random => {
            let offsets = if args.offset.is_empty() {
                default_offsets(size, logical)
            } else {
                args.offset.clone()
            };
            plan::random(size, &offsets, args.count.unwrap_or(1000), span, logical, rng)?
        }
        Pattern::Phybs => plan::phybs(args.count.unwrap_or(100), span, logical)?,
        Pattern::Stride => {
            let stride = args.stride.unwrap_or(size);
            plan::stride(size, stride, args.total, &args.base, span, logical)?
        }
    };
    Ok(plan)
}

/// Aligned against one logical sector off, when the size allows both.
fn default_offsets(size: u64, logical: u64) -> Vec<u64> {
    if logical < size {
        vec![0, logical]
    } else {
        vec![0]
    }
}

/// A bar with ETA on a terminal; hidden when stderr is piped.
fn progress(plan: &Plan) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let total: usize = plan.cells.iter().map(|c| c.positions.len()).sum();
    let bar = ProgressBar::new(total as u64);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} requests, ETA {eta}") {
        bar.set_style(style);
    }
    bar
}

/// phybs' columns, then latency percentiles and the ratios.
fn table(report: &Report) -> String {
    let mut out = format!(
        "{:>7} {:>6} {:>6} {:>7} {:>10} {:>9} {:>10} {:>8} {:>8} {:>8}\n",
        "count", "size", "offset", "step", "msec", "tps", "kBps", "p5_us", "p50_us", "p95_us"
    );
    for r in &report.results {
        out += &format!(
            "{:>7} {:>6} {:>6} {:>7} {:>10.1} {:>9.1} {:>10.1} {:>8.0} {:>8.0} {:>8.0}\n",
            r.count,
            r.size,
            r.offset,
            r.step,
            r.msec,
            r.iops,
            r.kbps,
            r.lat_us.p5,
            r.lat_us.p50,
            r.lat_us.p95
        );
    }
    let requests: u64 = report.results.iter().map(|r| r.count).sum();
    out += &format!(
        "{requests} requests in {:.2} s at depth {} ({}): {:.1} IOPS overall\n",
        report.wall_s, report.iodepth, report.engine, report.throughput_iops
    );
    for r in &report.ratios {
        out += &format!(
            "size {}: offset {} is {:.2}× slower than offset {} (median latency)\n",
            r.size, r.slow_offset, r.ratio, r.fast_offset
        );
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum EngineArg {
    Psync,
    #[value(name = "io_uring", alias = "io-uring")]
    IoUring,
}

/// The engine asked for, or psync with a word on stderr when io_uring
/// cannot be had (not built in, or refused by this kernel or sandbox).
fn engine(asked: EngineArg, depth: u32) -> bench::Engine {
    if asked == EngineArg::Psync {
        return bench::Engine::Psync;
    }
    #[cfg(feature = "io_uring")]
    match bench::uring::check(depth) {
        Ok(()) => return bench::Engine::IoUring { depth },
        Err(e) => eprintln!("blkalign: io_uring is unavailable here ({e}); using psync"),
    }
    #[cfg(not(feature = "io_uring"))]
    eprintln!(
        "blkalign: built without the io_uring feature (queue depth {depth} ignored); using psync"
    );
    bench::Engine::Psync
}
