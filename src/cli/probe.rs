//! `blkalign probe`: measure the physical sector size and alignment offset.

use super::{EXIT_OK, EXIT_PROBLEM};
use anyhow::Context;
use blkalign::device::{self, Overrides, SysRoot};
use blkalign::probe::{probe, ProbeOptions};
use blkalign::table;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// A disk, partition or image. It is written to, each write putting back
    /// the bytes read there; a mounted or held device is refused.
    target: PathBuf,

    /// Print the result as JSON.
    #[arg(long)]
    json: bool,

    /// Seed the random positions and order, to reproduce a run.
    #[arg(long)]
    seed: Option<u64>,

    /// Where the writes go: `start` (the first GiB) or `free` (only space
    /// no partition claims, read from the partition table).
    #[arg(long = "where", value_enum, default_value_t = Where::Start)]
    place: Where,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Where {
    Start,
    Free,
}

/// Exit 1 when the kernel is wrong about the drive.
pub fn run(args: Args, sysfs_root: Option<PathBuf>) -> anyhow::Result<u8> {
    let root = sysfs_root.map_or_else(SysRoot::real, SysRoot::fixture);
    let target = &args.target;
    let file = device::open_path(target)?;
    let within = match args.place {
        Where::Start => None,
        Where::Free => Some(
            free_ranges(&root, target)
                .with_context(|| format!("finding free space on {}", target.display()))?,
        ),
    };
    let opts = ProbeOptions { seed: args.seed, sys: root.sys, within };
    let result = probe(&file, &opts).with_context(|| format!("probing {}", target.display()))?;
    let text = if args.json {
        serde_json::to_string(&result)? + "\n"
    } else {
        format!(
            "{}\nconfidence {:.2}, {} writes in {:.1} s\n",
            result.sentence(target),
            result.confidence,
            result.writes,
            result.elapsed_s
        )
    };
    super::emit(&text)?;
    Ok(if result.agrees_with_kernel { EXIT_OK } else { EXIT_PROBLEM })
}

/// Unallocated byte ranges of the table on `target`.
fn free_ranges(root: &SysRoot, target: &Path) -> anyhow::Result<Vec<std::ops::Range<u64>>> {
    let target = device::resolve(root, target)?;
    if target.selected_partition.is_some() {
        anyhow::bail!("--where free needs the whole disk, whose table says what is free");
    }
    let file = device::open(&target)?;
    let topology = device::topology(root, &target, Some(&file), &Overrides::default())?;
    let layout = table::read(&file, topology.logical_sector_size.value, topology.size_bytes)?;
    if layout.label == table::Label::None {
        anyhow::bail!("no partition table, so no space is known to be free");
    }
    Ok(layout.free_ranges(topology.size_bytes))
}
