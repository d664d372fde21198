//! `blkalign probe`: measure the physical sector size and alignment offset.

use super::{EXIT_OK, EXIT_PROBLEM};
use anyhow::Context;
use blkalign::bench::{BenchPhase, Progress};
use blkalign::device::{self, Overrides, SysRoot};
use blkalign::probe::{probe_with, ProbeOptions};
use blkalign::table;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  blkalign probe /dev/sdb                  physical sector and alignment offset
  blkalign probe /dev/sdb --where free     write only where no partition is
  blkalign probe /dev/sdb --json | jq .physical_sector_size
  blkalign audit --probe --yes /dev/sdb    judge partitions by what was measured

Exit status: 0 when the kernel reports the geometry measured (or no penalty
shows), 1 when the kernel is wrong about the drive, 2 on an error or when
the result is inconclusive (timings too noisy to tell: retry when idle).

Every write puts back the bytes read there just before, so no data changes,
even when Ctrl-C ends the probe (it ends at once; exit status 130 in a
shell). On a terminal, stderr shows a progress bar with an ETA; the number of
writes grows when a stage needs more rounds or more offsets than expected.")]
pub struct Args {
    /// A disk, partition or image. It is written to, each write putting back
    /// the bytes read there; a mounted or held device is refused.
    target: PathBuf,

    /// Print the result as JSON (schema: docs/schema/probe.schema.json).
    #[arg(long)]
    json: bool,

    /// Seed the random positions and order, to reproduce a run.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,

    /// Where the writes go.
    #[arg(long = "where", value_enum, default_value_t = Where::Start)]
    place: Where,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Where {
    /// The first GiB of the target.
    Start,
    /// Only space no partition claims, as the partition table says (a
    /// whole disk with a table).
    Free,
}

/// Exit 1 when the kernel is wrong about the drive.
pub fn run(args: Args, root: SysRoot) -> anyhow::Result<u8> {
    let target = &args.target;
    if std::fs::metadata(target).is_ok_and(|m| m.is_file()) {
        // Its writes land in the page cache and the host's file system: no
        // penalty can show, and "none found" would be a confident lie.
        anyhow::bail!(
            "{}: a regular file has no drive of its own to time; probe the disk it lives on, \
             or attach it as an emulated drive (blkalign emulate start --file {} --preset \
             wd-ears) and probe that",
            target.display(),
            target.display()
        );
    }
    let file = device::open_path(target)?;
    let within = match args.place {
        Where::Start => None,
        Where::Free => Some(
            free_ranges(&root, target)
                .with_context(|| format!("finding free space on {}", target.display()))?,
        ),
    };
    let opts = ProbeOptions { seed: args.seed, sys: root.sys, within };
    let progress = Progress::new(0, BenchPhase::Locate);
    let result = super::output::with_progress(&progress, "writes", || {
        probe_with(file.file(), &opts, &progress)
    })
    .with_context(|| format!("probing {}", target.display()))?;
    if args.json {
        super::emit_json(&result)?;
    } else {
        super::emit(&format!(
            "{}\nconfidence {:.2}, {} writes in {:.1} s\n",
            result.sentence(target),
            result.confidence,
            result.writes,
            result.elapsed_s
        ))?;
    }
    Ok(if result.agrees_with_kernel { EXIT_OK } else { EXIT_PROBLEM })
}

/// Unallocated byte ranges of the table on `target`.
fn free_ranges(root: &SysRoot, target: &Path) -> anyhow::Result<Vec<std::ops::Range<u64>>> {
    let target = device::resolve(root, target)?;
    if target.selected_partition.is_some() {
        anyhow::bail!("--where free needs the whole disk, whose table says what is free");
    }
    let file = device::open(&target)?;
    let topology =
        blkalign::open::topology(root, &target, Some(file.file()), &Overrides::default())?;
    let layout = table::read(&file, topology.logical_sector_size.value, topology.size_bytes)?;
    if layout.label == table::Label::None {
        anyhow::bail!("no partition table, so no space is known to be free");
    }
    Ok(layout.free_ranges(topology.size_bytes))
}
