//! `blkalign advise`: per partition, the mkfs/LVM/LUKS/ZFS options that
//! keep the layers above aligned; for one that already holds something,
//! what tunes or checks it in place instead.

use super::output::OutputArgs;
use super::EXIT_OK;
use anyhow::Context;
use blkalign::advise::{self, Advice, Holds, IoSizes, Node};
use blkalign::audit::LayerAudit;
use blkalign::device::{SysRoot, Target};
use blkalign::open::Opened;
use blkalign::report::table::{self, fill, Column, ColumnKind, Style};
use blkalign::report::{partition_name, PARTITION_NAME_ABOUT};
use blkalign::table::{self as layout, PartKind};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  blkalign advise /dev/sdb
  blkalign advise /dev/sdb -o NAME,COMMAND       the commands alone
  blkalign advise disk.img -rn -o NAME,DESTROYS,COMMAND
  blkalign advise /dev/sdb --json")]
pub struct Args {
    /// Whole disk (/dev/sdb) or disk-image file.
    #[arg(required_unless_present = "columns")]
    target: Option<PathBuf>,

    /// Print JSON instead of text (docs/schema/advise.schema.json).
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    output: OutputArgs,

    #[command(flatten)]
    geometry: super::GeometryArgs,
}

/// What `advise --json` prints.
#[derive(Serialize)]
struct Document<'a> {
    target: &'a Path,
    /// For the whole disk: an NVMe namespace's better LBA format.
    disk: &'a [Advice],
    partitions: &'a [PartitionAdvice],
}

#[derive(Serialize)]
struct PartitionAdvice {
    number: u32,
    /// As the commands name it: for an image, `${dev}pN`.
    node: String,
    #[serde(skip)]
    named: Node,
    /// What it holds; null when nothing is recognised.
    contents: Option<blkalign::stack::Contents>,
    /// Why what it holds is unknown.
    error: Option<String>,
    advice: Vec<Advice>,
}

pub fn run(args: Args, root: SysRoot) -> anyhow::Result<u8> {
    let all = columns();
    let Some(columns) = args.output.columns(&all)? else { return Ok(EXIT_OK) };
    let path = args.target.as_deref().context("name the disk or image to advise on")?;
    let trust_kernel = args.geometry.trust_kernel;
    let opened =
        blkalign::open::open_target(&root, path, &args.geometry.overrides(), trust_kernel)?;
    let Opened { target, file, topology, geometry } = opened;
    let logical = topology.logical_sector_size.value;
    let layout = layout::read(&file, logical, topology.size_bytes)
        .with_context(|| format!("reading the table of {}", target.path.display()))?;
    let io = IoSizes {
        physical: geometry.physical,
        minimum_io: topology.minimum_io_size.map(|s| s.value),
        optimal_io: geometry.optimal_io,
        usb: behind_usb(&root, &target),
    };
    let disk = target.name.clone().unwrap_or_else(|| "DISK".into());
    let formats = topology.drive.as_ref().map(|d| d.lba_formats.as_slice()).unwrap_or_default();
    let whole: Vec<Advice> =
        advise::nvme_format(&target.path.to_string_lossy(), formats).into_iter().collect();
    let advice: Vec<PartitionAdvice> = layout
        .partitions
        .iter()
        .filter(|p| p.kind != PartKind::Extended)
        .map(|p| {
            let named = Node::of(&target, p.number);
            let (start_bytes, size_bytes) =
                (p.start.saturating_mul(logical), p.size.saturating_mul(logical));
            let layers = blkalign::audit::layers_at(&file, start_bytes, size_bytes, &geometry);
            let misalignment_bytes =
                geometry.judge(p.start, p.size).map_or(0, |v| v.misalignment_bytes);
            let judged = layers.iter().map(|l| (&l.layer, &l.verdict));
            let part = advise::AdvisedPartition {
                node: &named,
                number: p.number,
                disk: &target.path,
                type_id: &p.type_id,
                start_bytes,
                size_bytes,
                logical,
                misalignment_bytes,
                compensated: misalignment_bytes > 0 && blkalign::stack::compensates(judged),
            };
            let holds = advise::holds(&file, p.start, p.size, logical, topology.size_bytes);
            let mut advice = advise::advise(&part, &disk, &io, &holds);
            for more in layer_advice(&layers, &part, &io) {
                // A layer's own advice may repeat what its contents gave.
                if !advice.contains(&more) {
                    advice.push(more);
                }
            }
            let (contents, error) = match holds {
                Holds::Nothing => (None, None),
                Holds::Contents(c) => (Some(c), None),
                Holds::Unreadable(e) => (None, Some(e)),
            };
            PartitionAdvice {
                number: p.number,
                node: named.shell(),
                named,
                contents,
                error,
                advice,
            }
        })
        .collect();
    if args.json {
        super::emit_json(&Document { target: &target.path, disk: &whole, partitions: &advice })?;
    } else {
        super::emit(&text(&target, &whole, &advice, &columns, &args.output.style()))?;
    }
    Ok(EXIT_OK)
}

/// One piece of advice for one partition.
struct Row<'a> {
    target: &'a Target,
    part: &'a PartitionAdvice,
    advice: &'a Advice,
    /// An image's commands as run once it is attached (the listing says
    /// how once); raw output keeps each runnable alone.
    attached: bool,
}

/// The columns `advise` can print (`-o`).
fn columns<'a>() -> Vec<Column<Row<'a>>> {
    use ColumnKind::{Command, Free, Number, Text};
    let column = Column::<Row<'a>>::new;
    vec![
        column("NAME", PARTITION_NAME_ABOUT, Text, |r, _| {
            partition_name(r.target.name.as_deref(), &r.target.path, r.part.number)
        })
        .on_request(),
        column("NR", "partition number", Number, |r, _| r.part.number.to_string()).on_request(),
        column("FSTYPE", "what the partition holds (libblkid's TYPE)", Text, |r, _| {
            r.part.contents.as_ref().map_or(String::new(), |c| c.name.to_string())
        })
        .on_request(),
        column(
            "LAYER",
            "the layer the advice is for: ext4, xfs, lvm, luks, zfs, ...",
            Text,
            |r, _| r.advice.layer.to_string(),
        ),
        column(
            "DESTROYS",
            "yes when the command destroys what the partition holds",
            Text,
            |r, _| (if r.advice.destroys_data { "yes" } else { "no" }).to_string(),
        ),
        column("COMMAND", "what to run (empty for something only to know)", Command, |r, _| {
            let attached = r.advice.attached.as_ref().filter(|_| r.attached);
            attached.or(r.advice.command.as_ref()).cloned().unwrap_or_default()
        }),
        column("WHY", "why, in words", Free, |r, _| r.advice.why.clone()),
    ]
}

/// A heading per partition and a table of its advice; raw output is one
/// table for all.
fn text<'a>(
    target: &'a Target,
    whole: &[Advice],
    advice: &'a [PartitionAdvice],
    columns: &[&Column<Row<'a>>],
    style: &Style,
) -> String {
    let attached = !style.raw;
    let rows = |part: &'a PartitionAdvice| {
        part.advice.iter().map(move |a| Row { target, part, advice: a, attached })
    };
    if style.raw {
        let all: Vec<Row> = advice.iter().flat_map(rows).collect();
        return table::render(columns, &all, style, 0, |_| false);
    }
    let mut out = String::new();
    for a in whole {
        let command = a.command.as_deref().unwrap_or("-");
        out += &fill("", 4, &format!("{}: {command}", target.path.display()), style.width);
        out += &fill("  # DESTROYS DATA: ", 4, &a.why, style.width);
    }
    if advice.is_empty() {
        return out + "no partitions: partition the disk first (blkalign partition)\n";
    }
    if let Some(attach) = advice.first().and_then(|p| p.named.attach()) {
        let text = format!(
            "{} is an image: the commands naming ${{dev}}pN run on its partitions once the \
             line below attaches it; detach it (losetup -d $dev) when done, and before any \
             `blkalign realign`:",
            target.path.display()
        );
        out += &fill("", 2, &text, style.width);
        out += &format!("  {attach}\n");
    }
    for p in advice {
        let holds = match (&p.contents, &p.error) {
            (Some(c), _) => match &c.label {
                Some(label) => format!("holds {} (label {label:?})", c.name),
                None => format!("holds {}", c.name),
            },
            (None, Some(_)) => "unreadable".into(),
            (None, None) => "empty (no signature found)".into(),
        };
        let name = match &p.named {
            Node::Device(node) => format!("partition {} ({node})", p.number),
            image => image.to_string(),
        };
        out += &fill("", 4, &format!("{name}: {holds}"), style.width);
        if p.advice.iter().any(|a| a.destroys_data) {
            let warning = format!(
                "DESTROYS DATA on {}: a command with DESTROYS yes replaces what it holds",
                p.named
            );
            out += &fill("  # ", 4, &warning, style.width);
        }
        out += &table::render(columns, &rows(p).collect::<Vec<_>>(), style, 2, |_| false);
    }
    out
}

/// Advice from the layers found inside partition `part`: what fixes each
/// one that is not aligned.
fn layer_advice(
    layers: &[LayerAudit],
    part: &advise::AdvisedPartition,
    io: &IoSizes,
) -> Vec<Advice> {
    layers.iter().filter_map(|l| advise::for_layer(part, io, &l.layer, &l.verdict)).collect()
}

/// The disk's sysfs device path runs through a USB host.
fn behind_usb(root: &SysRoot, target: &Target) -> bool {
    let Some(name) = &target.name else {
        return false;
    };
    std::fs::canonicalize(root.sys.join("block").join(name))
        .is_ok_and(|p| p.components().any(|c| c.as_os_str().to_string_lossy().starts_with("usb")))
}
