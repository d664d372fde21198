//! `blkalign restore`: put back the sectors `partition` saved before it
//! wrote a table, on the disk they came from. Dry run unless --yes.

use super::EXIT_OK;
use anyhow::bail;
use blkalign::backup::{self, Backup};
use blkalign::commit::Held;
use blkalign::device::{self, SysRoot, TargetKind};
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(after_help = "Examples:
  blkalign restore ./blkalign-backup-sdb-1763800000.bin    # what goes back
  blkalign restore ./blkalign-backup-sdb-1763800000.bin --yes
  blkalign restore ./blkalign-backup-sdb-1763800000.bin /dev/sdc --yes # renamed

The disk's size, sector size, serial and WWN must match the backup's, and
the sectors must still hold what `partition` wrote.")]
pub struct Args {
    /// The backup file `partition` saved (its .json sidecar sits beside it).
    backup: PathBuf,

    /// The disk or image to restore to, when its name changed since (a
    /// disk renamed at boot); by default the one the sidecar names.
    target: Option<PathBuf>,

    /// Write. Without it, only what would be put back is printed.
    #[arg(long)]
    yes: bool,
}

pub fn run(args: Args, root: SysRoot) -> anyhow::Result<u8> {
    let backup = Backup::open(&args.backup)?;
    let sidecar = &backup.sidecar;
    let target = device::resolve(&root, args.target.as_deref().unwrap_or(&sidecar.target))?;
    if let Some(n) = target.selected_partition {
        bail!("{} is partition {n}; name the whole disk", target.path.display());
    }
    let held = if args.yes { Some(Held::take(&root, &target)?) } else { None };
    let opened;
    let disk = match &held {
        Some(held) => held.reader(),
        None => {
            opened = device::open(&target)?;
            &opened
        }
    };
    let topology =
        blkalign::open::topology(&root, &target, Some(disk.file()), &Default::default())?;
    let now = device::identity(&root, &target, &topology);
    if let Some(notice) = backup.same_disk(&target, &topology, &now)? {
        eprintln!("{notice}");
    }
    let todo = backup.to_restore(disk, &target.path)?;
    let path = target.path.display();
    if todo.is_empty() {
        eprintln!("{path} already holds every sector of the backup: nothing to do");
        return Ok(EXIT_OK);
    }
    for &i in &todo {
        let r = &sidecar.regions[i];
        let verb = if args.yes { "putting back" } else { "would put back" };
        eprintln!("{verb} {} bytes at byte {} ({})", r.length, r.offset, r.what);
    }
    let Some(held) = &held else {
        eprintln!("dry run: nothing written; add --yes to restore");
        return Ok(EXIT_OK);
    };
    backup.put_back(held.file(), &target.path, &todo)?;
    if target.kind == TargetKind::Disk {
        match backup::tell_restored(&root, &target, disk, sidecar.sector_size, topology.size_bytes)
        {
            Ok(told) => told.messages().iter().for_each(|m| eprintln!("{m}")),
            Err(e) => eprintln!(
                "warning: the restored table does not read back ({e}); run `partprobe {path}`"
            ),
        }
    }
    eprintln!("restored {} regions of {} from {}", todo.len(), path, backup.bin.display());
    Ok(EXIT_OK)
}
