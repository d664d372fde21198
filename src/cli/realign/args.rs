//! `realign`'s options, and what the run and `--at-boot` both make of
//! them: a leaf of `cli/realign`, so that `atboot` and `mod.rs` need not
//! import each other for them.

use crate::cli::GeometryArgs;
use blkalign::device::SysRoot;
use blkalign::plan::Align;
use blkalign::realign::session::{MoveOptions, Session};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
#[command(after_help = "Examples:
  blkalign realign /dev/sdb                 # the plan: what moves, how long
  blkalign realign /dev/sdb --yes           # move every misaligned partition
  blkalign realign disk.img 2 --to 2048 --yes
  blkalign realign --status /var/lib/blkalign/journals/sdb-p2.journal
  blkalign realign --clean disk.img --yes   # delete finished journals
  blkalign realign /dev/sdb --undo --yes    # undo a stopped move
  blkalign realign /dev/sdb --rescue --yes  # finish it over bad sectors
  blkalign realign /dev/sda 1 --at-boot --yes  # the root, at next boot

A killed or power-cut move resumes when the same command is run again. Ctrl-C
(SIGINT) or SIGTERM stops it between chunks: it says how far it got and the
command that finishes it, and exits 130 (143 for SIGTERM).")]
pub struct Args {
    /// The whole disk (/dev/sda) or disk-image file holding the partitions.
    #[arg(required_unless_present_any = ["status", "clean", "at_boot", "at_boot_run"])]
    pub(super) target: Option<PathBuf>,

    /// Partitions to move, numbered as `audit` numbers them. Default: every
    /// misaligned partition.
    pub(super) partitions: Vec<u32>,

    /// Move the one named partition to this LBA (it must be physically aligned).
    #[arg(long, value_name = "LBA")]
    pub(super) to: Option<u64>,

    /// Destination grain: optimal (1 MiB, optimal I/O and physical sector,
    /// falling back to the physical sector when there is no room), minimal
    /// (the physical sector) or a size.
    #[arg(long, default_value = "optimal", value_name = "optimal|minimal|SIZE")]
    pub(super) align: String,

    /// The journal file: outside the target, on persistent storage [default:
    /// IMAGE.blkalign-pN.journal beside an image; /var/lib/blkalign/journals/
    /// for a block device].
    #[arg(long, value_name = "FILE")]
    pub(super) journal: Option<PathBuf>,

    /// Move. Without it, only the plan is printed.
    #[arg(long)]
    pub(super) yes: bool,

    /// Overwrite non-zero bytes before the first partition, or move
    /// sectors a boot loader records (reinstall it afterwards).
    #[arg(long)]
    pub(super) force: bool,

    /// Move a partition even when that misaligns a layer inside that is
    /// aligned today (a LUKS payload or LVM data area placed to make up
    /// for the partition's start). Without it such a move is refused.
    #[arg(long)]
    pub(super) misalign_layers: bool,

    /// Skip reading every sector of the partition before the move writes
    /// any. Without that pass an unreadable sector stops the move half-way.
    #[arg(long)]
    pub(super) no_read_check: bool,

    /// The most bytes copied at a time, a multiple of 4 KiB up to 64 MiB
    /// (a shift of one to two chunks is copied in chunks of half the
    /// shift). The move holds four chunks in memory and, for a shift under
    /// a chunk, up to three in its journal: smaller ones need less of both.
    /// Not with --at-boot, whose move uses 16 MiB chunks.
    #[arg(long, value_name = "SIZE", default_value = "16MiB", value_parser = chunk_size)]
    pub(super) chunk_size: u64,

    /// Undo an unfinished move instead of finishing it: move back the
    /// bytes already moved, journaled like the move, so the partition is
    /// exactly as before it (its table entry never changed).
    #[arg(long, conflicts_with_all = ["to", "clean", "rescue"])]
    pub(super) undo: bool,

    /// Finish a move over sectors that cannot be read: each is read again
    /// (twice), then written as zeros; their LBAs go to a GNU ddrescue map
    /// beside the journal, with the files they hit. Without it an
    /// unreadable sector refuses (or stops) the move and nothing is
    /// zero-filled.
    #[arg(long, conflicts_with = "clean")]
    pub(super) rescue: bool,

    /// Print the plan or the result as JSON.
    #[arg(long)]
    pub(super) json: bool,

    /// Say where the move recorded in this journal stands, and exit.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["target", "yes"])]
    pub(super) status: Option<PathBuf>,

    /// Delete the journals of finished moves (a few KiB each): TARGET's
    /// (next to an image, or under /var/lib/blkalign/journals/ recording a
    /// move on it), or without TARGET all under /var/lib/blkalign/journals/.
    /// Lists them unless --yes; a journal of an unfinished move is never
    /// deleted.
    #[arg(long, conflicts_with_all = ["status", "to", "partitions", "json"])]
    pub(super) clean: bool,

    /// Move at the next boot, from the initramfs: for partitions the
    /// running system holds (its root). Prints what the boot will do; with
    /// --yes records the plan, installs a hook for the system's initramfs
    /// generator (initramfs-tools or dracut) and rebuilds the initramfs.
    /// Alone (no disk): where the scheduled or last such move stands.
    #[arg(long, conflicts_with_all = ["undo", "rescue", "clean", "status", "json", "journal", "chunk_size"])]
    pub(super) at_boot: bool,

    /// With --at-boot: take back a scheduled move no boot has begun.
    #[arg(long, requires = "at_boot", conflicts_with_all = ["target", "finish"])]
    pub(super) cancel: bool,

    /// With --at-boot: after the boot, report what it did and take the hook
    /// out of the initramfs again (run by blkalign-at-boot.service).
    #[arg(long, requires = "at_boot", conflicts_with = "target")]
    pub(super) finish: bool,

    /// With --at-boot: the installed system's root, when it is not / (an
    /// installer's target, an image mounted for a test).
    #[arg(long, value_name = "DIR", requires = "at_boot")]
    pub(super) sysroot: Option<PathBuf>,

    /// With --at-boot: the mount point of the file system to keep the
    /// journal on [default: /boot, /boot/efi, /efi, else another plain
    /// partition's file system not being moved].
    #[arg(long, value_name = "DIR", requires = "at_boot")]
    pub(super) journal_on: Option<PathBuf>,

    /// With --at-boot: the kernel whose initramfs carries the move
    /// [default: the newest in /boot].
    #[arg(long, value_name = "VERSION", requires = "at_boot")]
    pub(super) kernel: Option<String>,

    /// What the initramfs runs: the move recorded in PLAN.
    #[arg(long, value_name = "PLAN", hide = true, conflicts_with_all = ["target", "at_boot", "status", "clean", "to"])]
    pub(super) at_boot_run: Option<PathBuf>,

    /// With --at-boot-run, before udev runs: load the drivers of the
    /// devices found (their modalias) while waiting for the disks.
    #[arg(long, hide = true, requires = "at_boot_run")]
    pub(super) coldplug: bool,

    #[command(flatten)]
    pub(super) geometry: GeometryArgs,
}

pub(super) fn open_session(root: SysRoot, path: &Path, args: &Args) -> anyhow::Result<Session> {
    let overrides = args.geometry.overrides();
    Ok(Session::open(root, path, &overrides, args.geometry.trust_kernel)?)
}

pub(super) fn options(args: &Args) -> anyhow::Result<MoveOptions> {
    Ok(MoveOptions {
        to: args.to,
        align: args.align.parse::<Align>()?,
        force: args.force,
        misalign_layers: args.misalign_layers,
        read_check: !args.no_read_check,
        rescue: args.rescue,
        journal: args.journal.clone(),
        chunk_bytes: args.chunk_size,
    })
}

fn chunk_size(text: &str) -> Result<u64, String> {
    let bytes = blkalign::units::size_arg(text).map_err(|e| e.to_string())?;
    if bytes == 0 || bytes % 4096 != 0 || bytes > 64 << 20 {
        return Err(format!("{text}: a chunk is a multiple of 4 KiB, up to 64 MiB"));
    }
    Ok(bytes)
}
