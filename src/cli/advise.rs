//! `blkalign advise`: per partition, the mkfs/LVM/LUKS/ZFS options that
//! keep the layers above aligned.

use super::EXIT_OK;
use anyhow::Context;
use blkalign::advise::{self, Advice, IoSizes};
use blkalign::align::Geometry;
use blkalign::device::{self, SysRoot, Target, TargetKind};
use blkalign::table::{self, PartKind};
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Whole disk (/dev/sdb) or disk-image file.
    target: PathBuf,

    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    geometry: super::GeometryArgs,
}

#[derive(Serialize)]
struct PartitionAdvice {
    number: u32,
    node: String,
    advice: Vec<Advice>,
}

pub fn run(args: Args, sysfs_root: Option<PathBuf>) -> anyhow::Result<u8> {
    let root = sysfs_root.map_or_else(SysRoot::real, SysRoot::fixture);
    let target = device::resolve(&root, &args.target)?;
    let file = device::open(&target)?;
    let topology = device::topology(&root, &target, Some(&file), &args.geometry.overrides())?;
    let logical = topology.logical_sector_size.value;
    let layout = table::read(&file, logical, topology.size_bytes)
        .with_context(|| format!("reading the table of {}", target.path.display()))?;
    let geometry = Geometry::new(
        logical,
        topology.physical_sector_size.value,
        topology.alignment_offset.value,
        topology.optimal_io_size.map(|s| s.value),
        args.geometry.trust_kernel,
    );
    let io = IoSizes {
        physical: geometry.physical,
        minimum_io: topology.minimum_io_size.map(|s| s.value),
        optimal_io: geometry.optimal_io,
        usb: behind_usb(&root, &target),
    };
    let disk = target.name.clone().unwrap_or_else(|| "DISK".into());
    let advice: Vec<PartitionAdvice> = layout
        .partitions
        .iter()
        .filter(|p| p.kind != PartKind::Extended)
        .map(|p| {
            let node = node(&target, p.number);
            PartitionAdvice { number: p.number, advice: advise::advise(&node, &disk, &io), node }
        })
        .collect();
    let text =
        if args.json { serde_json::to_string_pretty(&advice)? + "\n" } else { text(&advice) };
    super::emit(&text)?;
    Ok(EXIT_OK)
}

fn text(advice: &[PartitionAdvice]) -> String {
    if advice.is_empty() {
        return "no partitions: partition the disk first (blkalign partition)\n".into();
    }
    let mut out = String::new();
    for p in advice {
        out += &format!("partition {} ({}):\n", p.number, p.node);
        for a in &p.advice {
            out += &format!("  {:<5} {}\n        # {}\n", a.layer, a.command, a.why);
        }
    }
    out
}

/// /dev/sda -> /dev/sda1, /dev/nvme0n1 -> /dev/nvme0n1p1; images have no
/// partition nodes, so name the loop device partition to expect.
fn node(target: &Target, number: u32) -> String {
    let path = target.path.display().to_string();
    match target.kind {
        TargetKind::Image => format!("/dev/loopXp{number}"),
        _ if path.ends_with(|c: char| c.is_ascii_digit()) => format!("{path}p{number}"),
        _ => format!("{path}{number}"),
    }
}

/// The disk's sysfs device path runs through a USB host.
fn behind_usb(root: &SysRoot, target: &Target) -> bool {
    let Some(name) = &target.name else {
        return false;
    };
    std::fs::canonicalize(root.sys.join("block").join(name))
        .is_ok_and(|p| p.components().any(|c| c.as_os_str().to_string_lossy().starts_with("usb")))
}
