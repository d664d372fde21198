//! `blkalign partition`: write what `plan` prints. Dry run unless --yes;
//! the sectors it overwrites are saved to a backup file first.

use super::{planning, restore_hint, saved_line, EXIT_OK};
use anyhow::bail;
use blkalign::advise::{self, Holds};
use blkalign::commit::{self, Commit, Held, Kernel};
use blkalign::device::kernel::KernelPart;
use blkalign::device::{self, exclusive, SysRoot, Target};
use blkalign::io::ReadAt;
use blkalign::plan::{Plan, PlannedPartition, Role};
use blkalign::stack::Contents;
use blkalign::table::write::{self, Ids};
use blkalign::table::{PartKind, Partition};
use std::path::PathBuf;

#[derive(clap::Args)]
#[group(skip)]
#[command(after_help = "Examples:
  blkalign partition /dev/sdb --part 512MiB:efi --part rest:linux     # the plan
  blkalign partition /dev/sdb --part 512MiB:efi --part rest:linux --yes
  sfdisk -d /dev/sda | blkalign partition disk.img --script - --yes
  blkalign restore ./blkalign-backup-sdb-1763800000.bin                   # undo

The sectors it overwrites are saved first; `blkalign restore` puts them back.")]
pub struct Args {
    #[command(flatten)]
    plan: planning::Args,

    /// Write the table. Without it, only the plan is printed.
    #[arg(long)]
    yes: bool,

    /// Overwrite an existing table or other data where the table goes (the
    /// old sectors are still saved to the backup file first).
    #[arg(long)]
    wipe: bool,

    /// Write even when partitions the new table deletes, moves or shrinks
    /// hold a file system, swap, LVM, LUKS, md or other signature.
    #[arg(long)]
    force: bool,

    /// Where to save the sectors about to be overwritten
    /// [default: ./blkalign-backup-NAME-UNIXTIME.bin].
    #[arg(long, value_name = "FILE")]
    backup: Option<PathBuf>,
}

pub fn run(args: Args, root: SysRoot) -> anyhow::Result<u8> {
    if planning::printed_output_help(&args.plan)? {
        return Ok(EXIT_OK);
    }
    let (target, plan) = planning::make(&args.plan, &root)?;
    if !args.yes {
        planning::print(&target, &plan, &args.plan)?;
        match device::open(&target) {
            Ok(file) => warn_lost(&target, &lost_contents(&file, &plan), args.force),
            Err(e) => eprintln!("note: what the partitions hold was not checked ({e})"),
        }
        // The same refusal --yes would give, so a clean dry run means --yes works.
        exclusive::check_unused(&root, &target, &[])?;
        eprintln!("dry run: nothing written; add --yes to write this table");
        return Ok(EXIT_OK);
    }
    let held = Held::take(&root, &target)?;
    let disk = held.reader();
    if !args.force {
        refuse_lost(&target, &lost_contents(disk, &plan))?;
    }
    let chunks = write::encode_table(&plan.table(&Ids::random(plan.partitions.len())?)?);
    let old = commit::old_bytes(disk, &target.path, &chunks)?;
    if !args.wipe && old.iter().any(|bytes| bytes.iter().any(|&b| b != 0)) {
        bail!(
            "{} already holds data where the table goes ({}); pass --wipe to replace it \
             (the old sectors are saved to a backup file first)",
            target.path.display(),
            existing_label(disk, &plan)
        );
    }
    let topology = blkalign::open::topology(
        &root,
        &target,
        Some(disk.file()),
        &args.plan.geometry.overrides(),
    )?;
    let done = commit::commit_table(
        &root,
        &held,
        Commit {
            chunks: &chunks,
            saves: None,
            backup: args.backup.as_deref(),
            sector_size: plan.sector_size,
            identity: device::identity(&root, &target, &topology),
            kernel: Kernel::Parts(planned_kernel_parts(&plan)),
        },
    )
    .map_err(restore_hint)?;
    eprintln!("{}", saved_line(&done.backup));
    if let Some(told) = done.told {
        told.messages().iter().for_each(|m| eprintln!("{m}"));
    }
    planning::print(&target, &plan, &args.plan)?;
    eprintln!("wrote the {} table to {}", label_text(&plan), target.path.display());
    Ok(EXIT_OK)
}

/// What would be lost, in words: every recognised signature (file system,
/// swap, LVM, LUKS, md, ...) in an existing partition the plan does not
/// keep with the same start and size, or, on a disk without partitions, at
/// offset 0. A partition that cannot be read counts too.
fn lost_contents(file: &dyn ReadAt, plan: &Plan) -> Vec<String> {
    let ss = plan.sector_size;
    let size = plan.total_sectors.saturating_mul(ss);
    let parts = blkalign::table::read(file, ss, size).map_or_else(|_| Vec::new(), |l| l.partitions);
    let kept =
        |p: &Partition| plan.partitions.iter().any(|q| (q.start, q.size) == (p.start, p.size));
    let mut lost: Vec<(String, Holds)> = parts
        .iter()
        .filter(|p| p.kind != PartKind::Extended && !kept(p))
        .map(|p| {
            let name = format!("partition {} (sectors {}+{})", p.number, p.start, p.size);
            (name, advise::holds(file, p.start, p.size, ss, size))
        })
        .collect();
    if parts.is_empty() {
        lost.push((
            "the disk (no partitions)".into(),
            advise::holds(file, 0, plan.total_sectors, ss, size),
        ));
    }
    lost.into_iter()
        .filter_map(|(name, holds)| match holds {
            Holds::Nothing => None,
            Holds::Contents(c) => Some(format!("{name} {}", contains(&c))),
            Holds::Unreadable(e) => Some(format!("{name} cannot be read ({e})")),
        })
        .collect()
}

/// Refuse, naming what would be lost, unless nothing would.
fn refuse_lost(target: &Target, lost: &[String]) -> anyhow::Result<()> {
    if lost.is_empty() {
        return Ok(());
    }
    bail!(
        "{}: refusing to write: the new table deletes, moves or shrinks what holds data:\n  {}\n\
         its bytes stay where they are, but no partition points at them any more; copy the data \
         off first, or pass --force (the table sectors are saved first, and `blkalign restore` \
         puts them back)",
        target.path.display(),
        lost.join("\n  ")
    )
}

/// "contains an ext4 signature (label "root")", as sfdisk warns.
fn contains(c: &Contents) -> String {
    let vowel_sound = c.name.starts_with(['e', 'i', 'x', 'n']) || c.name.starts_with("LVM");
    let label = c.label.as_ref().map_or_else(String::new, |l| format!(" (label {l:?})"));
    format!("contains {} {} signature{label}", if vowel_sound { "an" } else { "a" }, c.name)
}

/// The dry run's warning: what --yes would refuse to destroy.
fn warn_lost(target: &Target, lost: &[String], force: bool) {
    for what in lost {
        eprintln!("warning: {}: {what}", target.path.display());
    }
    if !lost.is_empty() {
        let then = if force { "--force writes it anyway" } else { "--yes refuses without --force" };
        eprintln!("the new table no longer points at that data: {then}");
    }
}

/// Names what is there, for the refusal message.
fn existing_label(file: &dyn ReadAt, plan: &Plan) -> String {
    let size = plan.total_sectors * plan.sector_size;
    match blkalign::table::read(file, plan.sector_size, size).map(|l| l.label) {
        Ok(blkalign::table::Label::Gpt) => "a GPT".into(),
        Ok(blkalign::table::Label::Mbr) => "an MBR partition table".into(),
        _ => "non-zero bytes".into(),
    }
}

/// The planned partitions, for the kernel.
fn planned_kernel_parts(plan: &Plan) -> Vec<KernelPart> {
    let ss = plan.sector_size;
    let part = |p: &PlannedPartition| {
        KernelPart::from_sectors(p.number, p.start, p.size, p.role == Role::Extended, ss)
    };
    plan.partitions.iter().filter_map(part).collect()
}

fn label_text(plan: &Plan) -> &'static str {
    match plan.label {
        blkalign::plan::NewLabel::Gpt => "GPT",
        blkalign::plan::NewLabel::Mbr => "MBR",
    }
}
