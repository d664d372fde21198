//! `blkalign advise`: per partition, the mkfs/LVM/LUKS/ZFS options that
//! keep the layers above aligned; for one that already holds something,
//! what tunes or checks it in place instead.

use super::EXIT_OK;
use anyhow::Context;
use blkalign::advise::{self, Advice, Holds, IoSizes};
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
    /// What it holds; null when nothing is recognised.
    contents: Option<blkalign::stack::Contents>,
    /// Why what it holds is unknown.
    error: Option<String>,
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
            let holds = advise::holds(&file, p.start, p.size, logical, topology.size_bytes);
            let mut advice = advise::advise(&node, &disk, &io, &holds);
            advice.extend(layer_advice(&file, p, logical, &geometry, &io, &node));
            let (contents, error) = match holds {
                Holds::Nothing => (None, None),
                Holds::Contents(c) => (Some(c), None),
                Holds::Unreadable(e) => (None, Some(e)),
            };
            PartitionAdvice { number: p.number, node, contents, error, advice }
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
        let holds = match (&p.contents, &p.error) {
            (Some(c), _) => match &c.label {
                Some(label) => format!("holds {} (label {label:?})", c.name),
                None => format!("holds {}", c.name),
            },
            (None, Some(_)) => "unreadable".into(),
            (None, None) => "empty (no signature found)".into(),
        };
        out += &format!("partition {} ({}): {holds}\n", p.number, p.node);
        for a in &p.advice {
            if a.destroys_data {
                out += &format!("  # DESTROYS DATA on {}\n", p.node);
            }
            match &a.command {
                Some(command) => {
                    out += &format!("  {:<5} {command}\n        # {}\n", a.layer, a.why)
                }
                None => out += &format!("  {:<5} # {}\n", a.layer, a.why),
            }
        }
    }
    out
}

/// Advice from the layers found inside partition `p`: what fixes each one
/// that is not aligned.
fn layer_advice(
    file: &std::fs::File,
    p: &blkalign::table::Partition,
    logical: u64,
    geometry: &Geometry,
    io: &IoSizes,
    node: &str,
) -> Vec<Advice> {
    let (Some(at), Some(len)) = (p.start.checked_mul(logical), p.size.checked_mul(logical)) else {
        return Vec::new();
    };
    blkalign::audit::layers_at(file, at, len, geometry)
        .iter()
        .filter_map(|l| advise::for_layer(node, io, &l.layer, &l.verdict))
        .collect()
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
