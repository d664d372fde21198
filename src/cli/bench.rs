//! `blkalign bench`: time writes (or reads) by size and offset, in the
//! three workloads of the articles.

use super::output::OutputArgs;
use super::{EXIT_ERROR, EXIT_OK};
use anyhow::{bail, Context};
use blkalign::bench::{self, rng::Rng, safety, Mode, Workload};
use blkalign::bench::{cpu_latency::CpuLatency, Progress, Span};
use blkalign::device::{self, SysRoot};
use blkalign::units::{size_arg, SIZE_SYNTAX};
use std::path::PathBuf;

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Pattern {
    /// COUNT requests of SIZE at random points of a SIZE grid plus each OFFSET.
    Random,
    /// The size × offset matrix of phybs: sizes 1-8 logical sectors, every
    /// sector offset below the size, COUNT requests 4 × size apart.
    Phybs,
    /// SIZE requests every STRIDE from each BASE sector for TOTAL bytes, in
    /// sequential runs (part-align-bench).
    Stride,
}

#[derive(clap::Args)]
#[command(after_help = after_help())]
pub struct Args {
    /// A disk, partition or image. Writes put back the bytes read there
    /// before the timed phase (unless --destructive); a mounted or held
    /// device is refused.
    #[arg(required_unless_present = "columns")]
    target: Option<PathBuf>,

    /// The workload.
    #[arg(long, value_enum, default_value_t = Pattern::Random)]
    pattern: Pattern,

    /// random, stride: bytes per request, at most 64 MiB [default: 4096, or
    /// the logical sector when larger].
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    size: Option<u64>,

    /// random: offsets to compare, comma-separated [default: 0 and the
    /// logical sector].
    #[arg(long, value_name = "SIZE,...", value_delimiter = ',', value_parser = size_arg)]
    offset: Vec<u64>,

    /// random, phybs: requests per cell [default: 1000 for random, 100 for
    /// phybs]; at most 10 million requests in all.
    #[arg(long, value_name = "N")]
    count: Option<u64>,

    /// stride: distance between requests [default: the size].
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    stride: Option<u64>,

    /// stride: bytes covered from each base [default: 4MiB].
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    total: Option<u64>,

    /// stride: base sectors, comma-separated (the articles' partition
    /// starts) [default: 0,8,34,40,42].
    #[arg(long, value_name = "LBA,...", value_delimiter = ',')]
    base: Vec<u64>,

    /// Use only this many bytes from the start of the target [default: all].
    #[arg(long, value_name = "SIZE", value_parser = size_arg)]
    span: Option<u64>,

    /// Time reads instead of writes.
    #[arg(long, conflicts_with_all = ["write", "destructive"])]
    read: bool,

    /// Time writes (the default).
    #[arg(long)]
    write: bool,

    /// Open with O_SYNC: each write returns once it is on stable storage.
    #[arg(long, conflicts_with = "read")]
    sync: bool,

    /// Write a pattern over the data instead of putting it back; needs --yes.
    #[arg(long)]
    destructive: bool,

    /// Confirm --destructive.
    #[arg(long, requires = "destructive")]
    yes: bool,

    /// How requests are issued: psync (one pwrite/pread at a time, as fio's
    /// psync) or io_uring (up to --iodepth in flight; up to depth 8, or 32
    /// when no CPU latency limit of 0 is in force, it polls for a completion
    /// for up to 100 µs before sleeping, so that the wakeup is not timed as
    /// the device's).
    #[arg(long, value_enum, default_value_t = EngineArg::Psync)]
    engine: EngineArg,

    /// Hold the CPU latency limit (/dev/cpu_dma_latency) at USEC
    /// microseconds while the run lasts, so that idle CPUs wake at once for
    /// a completion instead of from a deep sleep, as cyclictest does (at 0
    /// every CPU polls: more power for the run); `off` leaves power
    /// management alone. Needs root [default: 0].
    #[arg(long, value_name = "USEC|off", value_parser = cpu_latency_arg)]
    cpu_latency: Option<CpuLatencyArg>,

    /// io_uring: requests in flight at once [default: 1].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    iodepth: Option<u32>,

    /// Print the report as JSON (schema: docs/schema/bench.schema.json).
    #[arg(long)]
    json: bool,

    /// Also draw IOPS against offset, one line per size, to FILE (needs a
    /// size measured at two or more offsets).
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,

    /// Seed the random positions and order, to reproduce a run.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,

    #[command(flatten)]
    output: OutputArgs,
}

/// Examples, and what every SIZE may be (util-linux's syntax).
fn after_help() -> String {
    format!(
        "Examples:
  blkalign bench /dev/sdb                     4 KiB writes at offsets 0 and 512
  blkalign bench /dev/sdb --offset 0,512,3584 --count 500 --sync
  blkalign bench /dev/sdb --pattern phybs --svg phybs.svg
  blkalign bench /dev/sdb --pattern stride --base 0,63,2048 --total 16MiB
  blkalign bench /dev/nvme0n1 --engine io_uring --iodepth 32 --read
  blkalign bench /dev/sdb -o SIZE,OFFSET,P50,P95 -b
  blkalign bench disk.img --json | jq '.ratios'

SIZE is {SIZE_SYNTAX}.

Writes put back the bytes read there just before (untimed), so no data
changes, even when Ctrl-C ends the run (it ends at once; exit status 130 in a
shell). On a terminal, stderr shows a progress bar with an ETA.

While it runs, bench holds the CPU latency limit at 0 µs (as root): idle CPUs
poll instead of sleeping, so that waking one is not timed as the device's
latency. --cpu-latency off leaves power management as it is."
    )
}

pub fn run(args: Args, root: SysRoot) -> anyhow::Result<u8> {
    if let Err(message) = ignored(&args) {
        return usage_error(&message);
    }
    let all = blkalign::report::bench::columns();
    let Some(columns) = args.output.columns(&all)? else { return Ok(EXIT_OK) };
    let target = args.target.as_deref().context("name the disk, partition or image to time")?;
    if args.destructive && !args.yes {
        bail!("--destructive overwrites the data on {}: add --yes to confirm", target.display());
    }
    let mode = match (args.read, args.destructive) {
        (true, _) => Mode::Read,
        (false, true) => Mode::Destructive,
        (false, false) => Mode::Write,
    };
    if mode != Mode::Read {
        // Before the exclusive open, which would itself look like a claim;
        // that open then keeps anyone from mounting it until we are done.
        safety::check_unused(device::open_path(target)?.file(), target, &root)?;
    }
    let file = bench::open_direct(target, mode, args.sync)?;
    let info = bench::device_info(&file, &root.sys)?;
    let mut rng = args.seed.map_or_else(Rng::from_clock, Rng::new);
    let span = Span { start: 0, len: args.span.unwrap_or(info.size).min(info.size) };
    let plan = workload(&args).plan(span, info.logical, &mut rng)?;
    if args.svg.is_some() && !plan.has_line() {
        return usage_error(
            "--svg draws IOPS against offset, and this run measures every size at one offset only",
        );
    }
    let engine = engine(args.engine, args.iodepth.unwrap_or(1));
    let progress = Progress::of(&plan, mode);
    let held = hold_cpu_latency(args.cpu_latency);
    let report = super::output::with_progress(&progress, "requests", || {
        bench::run(&file, &plan, mode, engine, &mut rng, &progress)
    })?;
    drop(held);
    if let Some(path) = &args.svg {
        std::fs::write(path, bench::svg::render(&report.results))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        super::emit_json(&report)?;
    } else {
        super::emit(&args.output.table(&columns, &report.results))?;
        if !args.output.raw {
            super::emit(&blkalign::report::bench::summary(&report, &args.output.style()))?;
        }
    }
    Ok(EXIT_OK)
}

/// `--cpu-latency`: a limit in microseconds, or None for `off`.
#[derive(Clone, Copy, Debug)]
struct CpuLatencyArg(Option<u32>);

fn cpu_latency_arg(text: &str) -> Result<CpuLatencyArg, String> {
    if text == "off" {
        return Ok(CpuLatencyArg(None));
    }
    match text.parse::<u32>() {
        Ok(us) if i32::try_from(us).is_ok() => Ok(CpuLatencyArg(Some(us))),
        _ => Err("expected microseconds (0 to 2147483647) or `off`".into()),
    }
}

/// Holds the limit asked for, if any (0 unless told), for the whole run.
/// The run goes on without it, its summary saying so; a warning only when
/// a limit was asked for by name.
fn hold_cpu_latency(asked: Option<CpuLatencyArg>) -> Option<CpuLatency> {
    let us = asked.unwrap_or(CpuLatencyArg(Some(0))).0?;
    match CpuLatency::hold(us) {
        Ok(held) => Some(held),
        Err(e) => {
            if asked.is_some() {
                eprintln!(
                    "blkalign: warning: CPU latency limit not held (/dev/cpu_dma_latency: {e}); \
                     the wakeups of idle CPUs are timed with the device"
                );
            }
            None
        }
    }
}

/// Options the chosen pattern or engine would not use: an error rather
/// than a surprise.
fn ignored(args: &Args) -> Result<(), String> {
    let pattern = clap::ValueEnum::to_possible_value(&args.pattern)
        .map_or_else(String::new, |v| v.get_name().to_string());
    if args.iodepth.is_some() && args.engine != EngineArg::IoUring {
        return Err("--iodepth needs --engine io_uring: psync, the default engine, has one request in flight".into());
    }
    let stride_only = [
        ("--stride", args.stride.is_some()),
        ("--total", args.total.is_some()),
        ("--base", !args.base.is_empty()),
    ];
    let not_for = |option: &str, why: &str| {
        Err(format!("{option} does not apply to --pattern {pattern}: {why}"))
    };
    match args.pattern {
        Pattern::Stride if args.count.is_some() => {
            not_for("--count", "each base gets --total ÷ --stride requests")
        }
        Pattern::Stride if !args.offset.is_empty() => {
            not_for("--offset", "its offsets are the --base sectors")
        }
        Pattern::Phybs if args.size.is_some() => {
            not_for("--size", "it measures 1, 2, 4 and 8 logical sectors")
        }
        Pattern::Phybs if !args.offset.is_empty() => {
            not_for("--offset", "it measures every logical-sector offset below each size")
        }
        Pattern::Random | Pattern::Phybs => match stride_only.iter().find(|(_, given)| *given) {
            Some((option, _)) => not_for(option, "it is an option of --pattern stride"),
            None => Ok(()),
        },
        Pattern::Stride => Ok(()),
    }
}

/// Prints a usage error as clap does, with bench's usage line: exit 2.
fn usage_error(message: &str) -> anyhow::Result<u8> {
    use clap::Args as _;
    let mut command = Args::augment_args(clap::Command::new("bench")).bin_name("blkalign bench");
    command.error(clap::error::ErrorKind::ArgumentConflict, message).print()?;
    Ok(EXIT_ERROR)
}

/// The workload asked for; the library fills in what is left out.
fn workload(args: &Args) -> Workload {
    let (size, count) = (args.size, args.count);
    match args.pattern {
        Pattern::Random => Workload::Random { size, offsets: args.offset.clone(), count },
        Pattern::Phybs => Workload::Phybs { count },
        Pattern::Stride => {
            let (stride, total, bases) = (args.stride, args.total, args.base.clone());
            Workload::Stride { size, stride, total, bases }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum EngineArg {
    /// One pwrite/pread at a time (the default).
    Psync,
    /// Up to --iodepth requests in flight.
    #[value(name = "io_uring", alias = "io-uring")]
    IoUring,
}

/// The engine asked for, or psync with a word on stderr when io_uring
/// cannot be had (not built in, or refused by this kernel or sandbox).
fn engine(asked: EngineArg, depth: u32) -> bench::Engine {
    if asked == EngineArg::Psync {
        return bench::Engine::Psync;
    }
    bench::Engine::io_uring(depth).unwrap_or_else(|e| {
        eprintln!("blkalign: {e}; using psync");
        bench::Engine::Psync
    })
}
