//! `blkalign partition`: write what `plan` prints. Dry run unless --yes;
//! the sectors it overwrites are saved to a backup file first.

use super::{plan as planning, EXIT_OK};
use anyhow::{bail, Context};
use blkalign::device::exclusive::{self, KernelPart};
use blkalign::device::{self, SysRoot, Target, TargetKind};
use blkalign::plan::{Plan, Role};
use blkalign::table::write::{self, Chunk, Ids};
use serde::Serialize;
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(clap::Args)]
#[group(skip)]
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

    /// Where to save the sectors about to be overwritten
    /// [default: ./blkalign-backup-NAME-UNIXTIME.bin].
    #[arg(long, value_name = "FILE")]
    backup: Option<PathBuf>,
}

pub fn run(args: Args, sysfs_root: Option<PathBuf>) -> anyhow::Result<u8> {
    let root = sysfs_root.map_or_else(SysRoot::real, SysRoot::fixture);
    let (target, plan) = planning::make(&args.plan, &root)?;
    if !args.yes {
        planning::print(&target, &plan, args.plan.json)?;
        eprintln!("dry run: nothing written; add --yes to write this table");
        return Ok(EXIT_OK);
    }
    exclusive::check_unused(&root, &target)?;
    let file = exclusive::open_for_writing(&target)?;
    let chunks = write::encode(&plan.table(&Ids::random(plan.partitions.len())?)?);
    let old = read_regions(&file, &chunks)
        .with_context(|| format!("reading {}", target.path.display()))?;
    if !args.wipe && old.iter().any(|bytes| bytes.iter().any(|&b| b != 0)) {
        bail!(
            "{} already holds data where the table goes ({}); pass --wipe to replace it \
             (the old sectors are saved to a backup file first)",
            target.path.display(),
            existing_label(&file, &plan)
        );
    }
    let backup = save_backup(args.backup.as_deref(), &target, &plan, &chunks, &old)?;
    eprintln!(
        "saved the sectors to be overwritten to {} (restore: see {}.json)",
        backup.display(),
        backup.display()
    );
    write_chunks(&file, &chunks).with_context(|| format!("writing {}", target.path.display()))?;
    if target.kind == TargetKind::Disk {
        tell_kernel(&root, &target, &file, &plan);
    }
    planning::print(&target, &plan, args.plan.json)?;
    eprintln!("wrote the {} table to {}", label_text(&plan), target.path.display());
    Ok(EXIT_OK)
}

fn read_regions(file: &File, chunks: &[Chunk]) -> std::io::Result<Vec<Vec<u8>>> {
    chunks
        .iter()
        .map(|c| {
            let mut buf = vec![0u8; c.bytes.len()];
            file.read_exact_at(&mut buf, c.offset)?;
            Ok(buf)
        })
        .collect()
}

/// Names what is there, for the refusal message.
fn existing_label(file: &File, plan: &Plan) -> String {
    let size = plan.total_sectors * plan.sector_size;
    match blkalign::table::read(file, plan.sector_size, size).map(|l| l.label) {
        Ok(blkalign::table::Label::Gpt) => "a GPT".into(),
        Ok(blkalign::table::Label::Mbr) => "an MBR partition table".into(),
        _ => "non-zero bytes".into(),
    }
}

/// ./blkalign-backup-NAME-UNIXTIME.bin, with .N added while taken.
fn default_backup(target: &Target, attempt: u32) -> PathBuf {
    let name = target
        .name
        .clone()
        .or_else(|| target.path.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "disk".into());
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let extra = if attempt == 0 { String::new() } else { format!(".{attempt}") };
    PathBuf::from(format!("blkalign-backup-{name}-{now}{extra}.bin"))
}

/// The sidecar describing the backup: where each saved region goes back.
#[derive(Serialize)]
struct Sidecar<'a> {
    target: &'a Path,
    sector_size: u64,
    size_bytes: u64,
    regions: Vec<Region>,
}

#[derive(Serialize)]
struct Region {
    what: &'static str,
    /// Byte offset on the target.
    offset: u64,
    length: u64,
    /// Byte offset in the backup file.
    backup_offset: u64,
    restore: String,
}

/// The old bytes, back to back, and a JSON sidecar naming their offsets;
/// both flushed, with the directory holding them, before anything on the
/// target changes. Never overwrites.
fn save_backup(
    chosen: Option<&Path>,
    target: &Target,
    plan: &Plan,
    chunks: &[Chunk],
    old: &[Vec<u8>],
) -> anyhow::Result<PathBuf> {
    let (path, mut file) = match chosen {
        Some(path) => (path.to_path_buf(), create_new(path)?),
        None => (0..100)
            .map(|n| default_backup(target, n))
            .find_map(|p| {
                File::options().write(true).create_new(true).open(&p).ok().map(|f| (p, f))
            })
            .context("cannot create a backup file in the current directory")?,
    };
    let ss = plan.sector_size;
    let mut regions = Vec::new();
    let mut data = Vec::new();
    for (c, bytes) in chunks.iter().zip(old) {
        regions.push(Region {
            what: c.what,
            offset: c.offset,
            length: bytes.len() as u64,
            backup_offset: data.len() as u64,
            restore: format!(
                "dd if={} of={} bs={ss} skip={} seek={} count={} conv=notrunc",
                path.display(),
                target.path.display(),
                data.len() as u64 / ss,
                c.offset / ss,
                bytes.len() as u64 / ss
            ),
        });
        data.extend_from_slice(bytes);
    }
    let sidecar = Sidecar {
        target: &target.path,
        sector_size: ss,
        size_bytes: plan.total_sectors * ss,
        regions,
    };
    let mut sidecar_path = path.as_os_str().to_owned();
    sidecar_path.push(".json");
    let mut json = create_new(Path::new(&sidecar_path))?;
    for (f, bytes) in [(&mut file, data), (&mut json, serde_json::to_vec_pretty(&sidecar)?)] {
        f.write_all(&bytes)?;
        f.sync_all()?;
    }
    // The sidecar sits beside the backup: one directory flush covers both.
    exclusive::sync_parent(&path).context("flushing the backup's directory")?;
    Ok(path)
}

fn create_new(path: &Path) -> anyhow::Result<File> {
    let file = File::options().write(true).create_new(true).open(path);
    file.with_context(|| format!("creating backup {}", path.display()))
}

/// In order, each flushed before the next: the encoder orders them so a
/// crash leaves the old table or a repairable new one.
fn write_chunks(file: &File, chunks: &[Chunk]) -> std::io::Result<()> {
    for c in chunks {
        file.write_all_at(&c.bytes, c.offset)?;
        file.sync_data()?;
    }
    Ok(())
}

/// Make the kernel see the new partitions; only warn if it cannot, since
/// the table on the disk is already right.
fn tell_kernel(root: &SysRoot, target: &Target, file: &File, plan: &Plan) {
    let Some(name) = target.name.as_deref() else {
        return;
    };
    let numbers =
        || -> Vec<u32> { device::kernel_partitions(root, name).iter().map(|k| k.number).collect() };
    let wanted: Vec<u32> = plan.partitions.iter().map(|p| p.number).collect();
    let result = match exclusive::rescan(file, &target.path) {
        Ok(true) if numbers() == wanted => Ok(()),
        Ok(_) => {
            eprintln!(
                "the kernel did not take the whole table; adding the partitions one by one (BLKPG)"
            );
            exclusive::update_partitions(file, &target.path, &numbers(), &kernel_parts(plan))
        }
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        eprintln!(
            "warning: the kernel did not re-read the table ({e}); run `partprobe {}` or reboot",
            target.path.display()
        );
    }
}

fn kernel_parts(plan: &Plan) -> Vec<KernelPart> {
    let ss = plan.sector_size;
    let part = |p: &blkalign::plan::Planned| KernelPart {
        number: p.number,
        start: p.start * ss,
        // The kernel shows an extended partition as its first 1 KiB or sector.
        length: if p.role == Role::Extended { ss.max(1024) } else { p.size * ss },
    };
    plan.partitions.iter().map(part).collect()
}

fn label_text(plan: &Plan) -> &'static str {
    match plan.label {
        blkalign::plan::Label::Gpt => "GPT",
        blkalign::plan::Label::Mbr => "MBR",
    }
}
