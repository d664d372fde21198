//! `blkalign rescale`: rewrite an MBR or GPT for another logical sector
//! size, every partition keeping its bytes. Dry run unless --yes; the
//! sectors it overwrites are saved first, in the sidecar format
//! `blkalign restore` reads.

use super::{emit, emit_json, restore_hint, saved_line, EXIT_OK, EXIT_PROBLEM};
use anyhow::{bail, Context};
use blkalign::backup::{self, ToSave};
use blkalign::commit::{self, Commit, Held, Kernel};
use blkalign::device::{self, exclusive, kernel, SysRoot, TargetKind};
use blkalign::io::ReadAt;
use blkalign::open::Opened;
use blkalign::rescale::{self, ContentNote, Moved, Overlay, Rescaled};
use blkalign::table;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(after_help = "Examples:
  blkalign rescale disk.img --from 4096 --to 512       what would change
  blkalign rescale disk.img --from 4096 --to 512 --yes
  blkalign rescale /dev/sdb --from 4096 --yes          to the disk's own size
  blkalign restore blkalign-backup-sdb-1763800000.bin  undo it

Every partition keeps its byte range. Refused when a start or size is not
whole sectors of the new size, when an MBR value passes 2^32 sectors, when
a GPT's arrays would cover a partition, or (with --yes) when a file system
or LUKS records a sector smaller than the new one.")]
pub struct Args {
    /// The whole disk or image file whose table to rewrite.
    target: PathBuf,

    /// The logical sector size the table was written for (bytes).
    #[arg(long, value_name = "BYTES")]
    from: u64,

    /// The logical sector size to rewrite it for (bytes); for a disk,
    /// by default its own.
    #[arg(long, value_name = "BYTES")]
    to: Option<u64>,

    /// Write the table. Without it, only what would change is printed.
    #[arg(long)]
    yes: bool,

    /// Write a table for a sector size this disk does not present: its
    /// partitions vanish here until it is attached where it presents
    /// --to (a USB enclosure, another bridge). Refused without it.
    #[arg(long)]
    for_another_attachment: bool,

    /// Print the plan as JSON.
    #[arg(long)]
    json: bool,

    /// Where to save the sectors about to be overwritten
    /// [default: ./blkalign-backup-NAME-UNIXTIME.bin].
    #[arg(long, value_name = "FILE")]
    backup: Option<PathBuf>,
}

pub fn run(args: Args, root: SysRoot) -> anyhow::Result<u8> {
    let opened = blkalign::open::open_target(&root, &args.target, &Default::default(), false)?;
    let Opened { target, file, topology, .. } = opened;
    if let Some(n) = target.selected_partition {
        bail!("{} is partition {n}; name the whole disk", target.path.display());
    }
    let to = match (args.to, target.kind) {
        (Some(to), _) => to,
        (None, TargetKind::Disk) => topology.logical_sector_size.value,
        (None, TargetKind::Image) => bail!("an image has no sector size to ask for: give --to"),
    };
    let path = target.path.display().to_string();
    let size = topology.size_bytes;
    let plan = rescale::plan_rescale(&file, size, args.from, to).with_context(|| path.clone())?;
    if args.json {
        print_json(&plan)?;
    } else {
        emit(&text(&path, &plan, size))?;
    }
    let blocking: Vec<&ContentNote> = plan.notes.iter().filter(|n| n.blocks).collect();
    for note in &plan.notes {
        eprintln!("warning: {path}: {}", note.message);
    }
    let presents = topology.logical_sector_size.value;
    let elsewhere = target.kind == TargetKind::Disk && to != presents;
    if elsewhere {
        eprintln!(
            "warning: {path} presents {presents}-byte sectors: a table for {to}-byte ones makes \
             every partition vanish on this device (the kernel reads it at the wrong places) \
             until the disk is attached where it presents {to}-byte sectors; {}",
            if args.for_another_attachment {
                "--for-another-attachment given"
            } else {
                "--yes refuses without --for-another-attachment"
            }
        );
    }
    if !args.yes {
        exclusive::check_unused(&root, &target, &[])?;
        if !blocking.is_empty() {
            eprintln!("dry run: nothing written; --yes refuses while what is named above is there");
            return Ok(EXIT_PROBLEM);
        }
        eprintln!("dry run: nothing written; add --yes to write this table");
        return Ok(EXIT_OK);
    }
    if let Some(note) = blocking.first() {
        bail!("{path}: refusing to rescale: {}", note.message);
    }
    if elsewhere && !args.for_another_attachment {
        bail!(
            "{path}: refusing to write a table for {to}-byte sectors on a device presenting \
             {presents}: add --for-another-attachment if the disk will be attached where it \
             presents {to}"
        );
    }
    let held = Held::take(&root, &target)?;
    let disk = held.reader();
    // Planned again through the handle that writes: nothing may have
    // changed in between, and this is what is checked and written.
    let plan = rescale::plan_rescale(disk, size, args.from, to).with_context(|| path.clone())?;
    let ss = match target.kind {
        TargetKind::Disk => topology.logical_sector_size.value,
        TargetKind::Image => to,
    };
    let done = commit::commit_table(
        &root,
        &held,
        Commit {
            chunks: &plan.chunks,
            saves: Some(to_save(disk, &plan)?),
            backup: args.backup.as_deref(),
            sector_size: ss,
            identity: device::identity(&root, &target, &topology),
            // Told below, once the table reads back as the same partitions.
            kernel: Kernel::Untold,
        },
    )
    .map_err(restore_hint)?;
    eprintln!("{}", saved_line(&done.backup));
    let after = table::read(disk, to, size).with_context(|| format!("re-reading {path}"))?;
    if let Err(e) = rescale::same_bytes(&plan.old, &after) {
        bail!(
            "{path}: the table written does not read back as the same partitions ({e}); \
             `blkalign restore {} --yes` puts the old one back",
            done.backup.bin.display()
        );
    }
    if presents == to {
        let told = kernel::tell(&root, &target, held.file(), &backup::kernel_parts(&after));
        told.messages().iter().for_each(|m| eprintln!("{m}"));
    }
    eprintln!("wrote the table for {to}-byte sectors to {path}; read back, every partition's bytes unchanged");
    Ok(EXIT_OK)
}

fn text(path: &str, r: &Rescaled, size: u64) -> String {
    let (from, to) = (r.from, r.to);
    let label = format!("{:?}", r.old.label).to_uppercase();
    let mut out = format!(
        "{path}: {label} for {from}-byte sectors -> {to}-byte sectors ({size} bytes); \
         byte ranges unchanged\n"
    );
    let rows: Vec<[String; 6]> = r
        .moved
        .iter()
        .map(|m: &Moved| {
            [
                m.number.to_string(),
                format!("{:?}", m.kind).to_lowercase(),
                format!("{}+{}", m.old_start, m.old_size),
                format!("{}+{}", m.new_start, m.new_size),
                m.start_bytes.to_string(),
                m.size_bytes.to_string(),
            ]
        })
        .collect();
    let head = [
        "NR".to_string(),
        "KIND".into(),
        format!("START+SIZE@{from}"),
        format!("START+SIZE@{to}"),
        "BYTE START".into(),
        "BYTES".into(),
    ];
    let widths: Vec<usize> = (0..6)
        .map(|i| rows.iter().map(|r| r[i].len()).chain([head[i].len()]).max().unwrap_or(0))
        .collect();
    for row in std::iter::once(&head).chain(&rows) {
        let cells: Vec<String> =
            row.iter().zip(&widths).map(|(c, w)| format!("{c:>w$}", w = *w)).collect();
        let _ = writeln!(out, "{}", cells.join("  "));
    }
    for (name, old, new) in &r.header_changes {
        let _ = writeln!(out, "GPT {name}: {old} -> {new}");
    }
    if !r.header_changes.is_empty() {
        let _ = writeln!(out, "GPT header and entry-array CRCs recomputed; protective MBR resized");
    }
    out
}

fn print_json(r: &Rescaled) -> anyhow::Result<()> {
    #[derive(serde::Serialize)]
    struct Change {
        field: &'static str,
        old: u64,
        new: u64,
    }
    #[derive(serde::Serialize)]
    struct Doc<'a> {
        label: table::Label,
        from: u64,
        to: u64,
        partitions: &'a [Moved],
        gpt_header_changes: Vec<Change>,
        contents: &'a [ContentNote],
    }
    let changes =
        r.header_changes.iter().map(|&(field, old, new)| Change { field, old, new }).collect();
    emit_json(&Doc {
        label: r.old.label,
        from: r.from,
        to: r.to,
        partitions: &r.moved,
        gpt_header_changes: changes,
        contents: &r.notes,
    })
}

/// The byte spans the writes touch, widened to whole sectors of both sizes
/// (so `restore` can put them back whichever size the disk then has) and
/// merged where they meet.
fn spans(r: &Rescaled) -> Vec<(u64, u64, String)> {
    let unit = r.from.max(r.to);
    let mut spans: Vec<(u64, u64, String)> = r
        .chunks
        .iter()
        .filter_map(|c| {
            let end = c.offset.checked_add(c.bytes.len() as u64)?;
            let end = end.checked_next_multiple_of(unit)?;
            Some((c.offset - c.offset % unit, end, c.what.to_string()))
        })
        .collect();
    spans.sort_by_key(|s| s.0);
    let mut merged: Vec<(u64, u64, String)> = Vec::new();
    for (start, end, what) in spans {
        match merged.last_mut() {
            Some(last) if start <= last.1 => {
                last.1 = last.1.max(end);
                last.2 = format!("{} + {what}", last.2);
            }
            _ => merged.push((start, end, what)),
        }
    }
    merged
}

/// What the writes overwrite, in `spans`, with the bytes there now and
/// the hash of what will be there after.
fn to_save(file: &dyn ReadAt, r: &Rescaled) -> anyhow::Result<Vec<ToSave>> {
    let after = Overlay { base: file, chunks: &r.chunks };
    spans(r)
        .into_iter()
        .map(|(start, end, what)| {
            let len = usize::try_from(end - start).context("backup region too large")?;
            let mut old = vec![0u8; len];
            file.read_exact_at(&mut old, start)?;
            let mut new = vec![0u8; len];
            after.read_exact_at(&mut new, start)?;
            Ok(ToSave::new(format!("rescale: {what}"), start, old, &new))
        })
        .collect()
}
