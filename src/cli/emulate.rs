//! `blkalign emulate`: start, list, stop and power-cut emulated drives.

use super::{EXIT_ERROR, EXIT_OK, EXIT_PROBLEM};
use anyhow::Context;
use blkalign::emulate::{self, EmulateError, EmulatedDrive, EmulatedGeometry, LbaRange, Spec};
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Start an emulated drive and print its device and id.
    #[command(after_help = "Examples:
  blkalign emulate start --preset wd-ears --size 256MiB
  blkalign emulate start --preset 4kn --file disk.img --json
  blkalign emulate start --physical 4096 --lowest-aligned 7 --size 1GiB")]
    Start(StartArgs),
    /// List emulated drives (exit 1 when one is not running).
    #[command(after_help = "Examples:
  blkalign emulate list
  blkalign emulate list --json | jq -r '.drives[].device'")]
    List {
        /// Print JSON: {"version": 1, "drives": [...]}.
        #[arg(long)]
        json: bool,
    },
    /// Flush and stop a drive (its --file keeps the data).
    #[command(after_help = "Examples:
  blkalign emulate stop emu4242
  blkalign emulate stop --all")]
    Stop {
        /// The drive's id, as `start` or `list` printed it.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Stop every drive, including half-started ones.
        #[arg(long)]
        all: bool,
    },
    /// End a drive at once, as a power cut would: its volatile cache is lost.
    ///
    /// Nothing is flushed: writes still in the drive's volatile cache are
    /// lost, and what reached the platter (and its --file) stays. For
    /// crash-safety trials such as scripts/realign-crash-trials.
    #[command(after_help = "Examples:
  blkalign emulate start --preset wd-ears --file disk.img --volatile-cache
  blkalign emulate power-cut emu4242")]
    PowerCut {
        /// The drive's id, as `start` or `list` printed it.
        id: String,
    },
}

#[derive(clap::Args)]
pub struct StartArgs {
    /// wd-ears, wd-ears-jumper, 4kn or native-512 (see docs/emulate.md).
    #[arg(long, required_unless_present = "physical")]
    preset: Option<String>,
    /// Size seen by the host: bytes, or K/M/G/T or KiB/MiB/GiB (powers of
    /// 1024), KB/MB/GB (powers of 1000) [default: the file's size, else 1GiB].
    #[arg(long, value_parser = parse_size)]
    size: Option<u64>,
    /// Physical sector size in bytes [default: the preset's, else 512].
    #[arg(long)]
    physical: Option<u32>,
    /// Logical sector size in bytes [default: the preset's, else 512].
    #[arg(long)]
    logical: Option<u32>,
    /// The lowest LBA that starts a physical sector (7 for the XP jumper).
    #[arg(long)]
    lowest_aligned: Option<u32>,
    /// Delay of each request reaching the emulated platter, in milliseconds.
    #[arg(long, default_value_t = emulate::DEFAULT_LATENCY_MS)]
    latency_ms: u32,
    /// Keep the drive's data in this file; it survives stop and power-cut.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Hold writes in a cache that only a flush writes to the platter.
    #[arg(long)]
    volatile_cache: bool,
    /// Logical sectors that fail with EIO, e.g. 1000-1999.
    #[arg(long)]
    fail_lba: Option<LbaRange>,
    /// The --fail-lba sectors are pending, as on a worn drive: reads fail
    /// until a write of the whole physical sector remaps it.
    #[arg(long, requires = "fail_lba")]
    until_written: bool,
    /// Print the drive as JSON: true geometry and what the kernel reports.
    #[arg(long)]
    json: bool,
}

fn parse_size(text: &str) -> Result<u64, EmulateError> {
    emulate::parse_size(text)
}

pub fn run(cmd: Command) -> anyhow::Result<u8> {
    match cmd {
        Command::Start(args) => start(args),
        Command::List { json } => list(json),
        Command::Stop { id: Some(id), .. } => {
            emulate::stop(&id).with_context(|| format!("stopping {id}"))?;
            Ok(EXIT_OK)
        }
        Command::Stop { id: None, .. } => stop_all(),
        Command::PowerCut { id } => {
            emulate::power_cut(&id).with_context(|| format!("cutting power to {id}"))?;
            Ok(EXIT_OK)
        }
    }
}

fn start(args: StartArgs) -> anyhow::Result<u8> {
    let json = args.json;
    let spec = spec(args)?;
    let drive = emulate::start(&spec).context("starting an emulated drive")?;
    let summary = Summary::of(&drive);
    if json {
        super::emit_json(&summary)?;
    } else {
        super::emit(&(summary.line() + "\n"))?;
    }
    Ok(EXIT_OK)
}

/// A preset, changed by any custom option given; "custom" once the
/// geometry differs from the preset's.
fn spec(args: StartArgs) -> anyhow::Result<Spec> {
    let base = match &args.preset {
        Some(name) => emulate::preset(name)?,
        None => {
            EmulatedGeometry { logical: 512, physical: 512, alignment_offset: 0, latency_ms: 0 }
        }
    };
    let mut geometry = EmulatedGeometry {
        logical: args.logical.unwrap_or(base.logical),
        physical: args.physical.unwrap_or(base.physical),
        latency_ms: args.latency_ms,
        ..base
    };
    if let Some(lba) = args.lowest_aligned {
        geometry = geometry.with_lowest_aligned(lba)?;
    }
    let same_shape = EmulatedGeometry { latency_ms: base.latency_ms, ..geometry } == base;
    let preset = match args.preset {
        Some(name) if same_shape => name,
        _ => "custom".to_string(),
    };
    Ok(Spec {
        preset,
        geometry,
        size: args.size,
        file: args.file,
        volatile_cache: args.volatile_cache,
        fail_lba: args.fail_lba,
        until_written: args.until_written,
    })
}

fn list(json: bool) -> anyhow::Result<u8> {
    let drives = emulate::list().context("listing emulated drives")?;
    let summaries: Vec<Summary> = drives.iter().map(Summary::of).collect();
    if json {
        super::emit_json(&serde_json::json!({ "drives": summaries }))?;
    } else {
        super::emit(&summaries.iter().map(|s| s.line() + "\n").collect::<String>())?;
    }
    let broken = summaries.iter().any(|s| !s.running);
    Ok(if broken { EXIT_PROBLEM } else { EXIT_OK })
}

/// Stops what it can; drives in use (or failing to stop) are named on
/// stderr and make the exit status an error.
fn stop_all() -> anyhow::Result<u8> {
    let done = emulate::stop_all().context("stopping all emulated drives")?;
    super::emit(&done.stopped.iter().map(|id| format!("stopped {id}\n")).collect::<String>())?;
    for (id, err) in &done.failed {
        eprintln!("blkalign: not stopped: {id}: {err}");
    }
    Ok(if done.failed.is_empty() { EXIT_OK } else { EXIT_ERROR })
}

/// What `start --json` and `list --json` print: the true geometry, and
/// the physical sector size the kernel reports (a loop device reports its
/// logical size, which is how wd-ears lies).
#[derive(Serialize)]
struct Summary {
    id: String,
    device: Option<PathBuf>,
    preset: String,
    logical_sector_size: u32,
    physical_sector_size: u32,
    alignment_offset: u32,
    reported_physical_sector_size: u32,
    latency_ms: u32,
    size: u64,
    file: Option<PathBuf>,
    volatile_cache: bool,
    fail_lba: Option<LbaRange>,
    until_written: bool,
    running: bool,
}

impl Summary {
    fn of(drive: &EmulatedDrive) -> Summary {
        let g = drive.geometry;
        Summary {
            id: drive.id.clone(),
            device: drive.device.clone(),
            preset: drive.preset.clone(),
            logical_sector_size: g.logical,
            physical_sector_size: g.physical,
            alignment_offset: g.alignment_offset,
            reported_physical_sector_size: drive.reported_physical_sector_size.unwrap_or(g.logical),
            latency_ms: g.latency_ms,
            size: drive.size,
            file: drive.file.clone(),
            volatile_cache: drive.volatile_cache,
            fail_lba: drive.fail_lba,
            until_written: drive.until_written,
            running: emulate::healthy(drive),
        }
    }

    fn line(&self) -> String {
        let device = self.device.as_ref().map_or("-".into(), |d| d.display().to_string());
        let state = if self.running { "" } else { " [not running: stop it]" };
        format!(
            "{device}\t{}\t{}: {}/{} bytes, alignment offset {}, kernel reports {}{state}",
            self.id,
            self.preset,
            self.logical_sector_size,
            self.physical_sector_size,
            self.alignment_offset,
            self.reported_physical_sector_size,
        )
    }
}
