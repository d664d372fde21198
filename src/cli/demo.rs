//! `blkalign demo`: the articles' story end to end on things it builds
//! itself: a disk partitioned the old way (LBA 63), found misaligned,
//! moved, found aligned, with its data checked before and after. As root
//! with nbdkit, the same on an emulated WD Green with the write penalty
//! measured before and after.

use super::EXIT_OK;
use anyhow::{bail, Context};
use blkalign::bench::rng::Rng;
use blkalign::table::write::{boot_sector, mbr_entry};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Old fdisk ended partitions on a 255 × 63 cylinder.
const CYLINDER: u64 = 255 * 63;
const OLD_START: u64 = 63;
const SECTOR: u64 = 512;

#[derive(clap::Args)]
#[command(after_help = "Examples:
  blkalign demo                     # in a temporary directory, removed after
  sudo blkalign demo --dir /tmp/d   # root and nbdkit: the emulated WD Green too")]
pub struct Args {
    /// Keep the demo's files here [default: a temporary directory, removed
    /// afterwards].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,

    /// Size of the disk to build.
    #[arg(long, default_value = "128MiB", value_parser = blkalign::units::size_arg)]
    size: u64,

    /// Skip the emulated drive even when root and nbdkit allow it.
    #[arg(long)]
    no_drive: bool,
}

pub fn run(args: Args) -> anyhow::Result<u8> {
    let _temp;
    let dir = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            let d = state_friendly_tmp().join(format!("blkalign-demo-{}", std::process::id()));
            std::fs::create_dir(&d).with_context(|| format!("creating {}", d.display()))?;
            _temp = Removed(d.clone());
            d
        }
    };
    image_story(&dir, args.size)?;
    match drive_unavailable(&args) {
        Some(why) => println!("\n(the emulated-drive part is skipped: {why})"),
        None => drive_story(&dir, args.size)?,
    }
    Ok(EXIT_OK)
}

/// A directory removed when dropped.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// /var/tmp survives reboots and is seldom tmpfs, which the journal refuses.
fn state_friendly_tmp() -> PathBuf {
    ["/var/tmp", "/tmp"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_dir())
        .unwrap_or_else(|| ".".into())
}

fn image_story(dir: &Path, size: u64) -> anyhow::Result<()> {
    let image = dir.join("disk.img");
    let sectors = size / SECTOR;
    let part_sectors = old_partition_sectors(sectors)?;
    println!(
        "== A {} disk image, partitioned as fdisk did before 2010 ==",
        blkalign::units::human_size(size)
    );
    let file = File::create(&image)?;
    file.set_len(sectors * SECTOR)?;
    write_old_table(&file, part_sectors)?;
    let contents = fill_partition(&image, dir, OLD_START, part_sectors)?;
    println!("partition 1 at LBA {OLD_START}, {part_sectors} sectors, holding {contents}");
    let before = partition_sha256(&image, OLD_START, part_sectors)?;
    println!("sha256 of its bytes: {before}\n");
    show(&["audit"], &image)?;
    show(&["realign"], &image)?;
    show(&["realign", "--yes"], &image)?;
    show(&["audit"], &image)?;
    let new_start = start_of(&image)?;
    let after = partition_sha256(&image, new_start, part_sectors)?;
    println!("sha256 of its bytes at LBA {new_start}: {after}");
    if before != after {
        bail!("the partition's bytes changed during the move");
    }
    println!("the same bytes, now on a 4 KiB boundary");
    if contents.starts_with("an ext4") {
        fsck(&image, new_start)?;
    }
    Ok(())
}

/// From LBA 63 to the last whole cylinder, as old fdisk made it.
fn old_partition_sectors(sectors: u64) -> anyhow::Result<u64> {
    let end = sectors / CYLINDER * CYLINDER;
    end.checked_sub(OLD_START).filter(|&n| n > 0).context("--size is too small: give at least 8MiB")
}

/// An MBR with one Linux partition from LBA 63 to the last whole cylinder.
fn write_old_table(file: &File, part_sectors: u64) -> anyhow::Result<()> {
    let mut mbr = boot_sector(SECTOR);
    let size = u32::try_from(part_sectors).context("--size too large for an MBR")?;
    mbr_entry(&mut mbr, 0, 0x83, OLD_START as u32, size, OLD_START);
    file.write_all_at(&mbr, 0)?;
    Ok(file.sync_all()?)
}

/// A real ext4 with files when mkfs.ext4 is there, else random bytes.
fn fill_partition(image: &Path, dir: &Path, start: u64, sectors: u64) -> anyhow::Result<String> {
    let files = dir.join("files");
    std::fs::create_dir_all(&files)?;
    let mut rng = Rng::new(0x2545_F491_4F6C_DD1D);
    let mut random = |len: u64| -> Vec<u8> { (0..len).map(|_| rng.next_u64() as u8).collect() };
    for i in 0..8 {
        std::fs::write(files.join(format!("file{i}.bin")), random(1 << 20))?;
    }
    let mkfs = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-d"])
        .arg(&files)
        .arg("-E")
        .arg(format!("offset={}", start * SECTOR))
        .arg(image)
        .arg(format!("{}k", sectors * SECTOR / 1024))
        .output();
    if mkfs.as_ref().is_ok_and(|o| o.status.success()) {
        return Ok("an ext4 file system with 8 MiB of files".into());
    }
    let file = File::options().write(true).open(image)?;
    file.write_all_at(&random(sectors * SECTOR), start * SECTOR)?;
    Ok("random data (mkfs.ext4 not found)".into())
}

fn partition_sha256(image: &Path, start: u64, sectors: u64) -> anyhow::Result<String> {
    let file = File::open(image)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 4 << 20];
    let (mut at, end) = (start * SECTOR, (start + sectors) * SECTOR);
    while at < end {
        let len = (end - at).min(buf.len() as u64) as usize;
        file.read_exact_at(&mut buf[..len], at)?;
        hasher.update(&buf[..len]);
        at += len as u64;
    }
    Ok(blkalign::units::hex(&hasher.finalize()))
}

/// Where partition 1 starts now, as the table says.
fn start_of(image: &Path) -> anyhow::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let mut file = File::open(image)?;
    // A block device's metadata says 0 bytes; its end says its size.
    let size = file.seek(SeekFrom::End(0))?;
    let layout = blkalign::table::read(&file, SECTOR, size)?;
    let p = layout.partitions.iter().find(|p| p.number == 1).context("partition 1 is gone")?;
    Ok(p.start)
}

fn fsck(image: &Path, start: u64) -> anyhow::Result<()> {
    let spec = format!("{}?offset={}", image.display(), start * SECTOR);
    println!("$ e2fsck -fn '{spec}'");
    let out = Command::new("e2fsck").args(["-fn", &spec]).output()?;
    let summary = String::from_utf8_lossy(&out.stdout);
    println!("{}", summary.lines().last().unwrap_or_default());
    if !out.status.success() {
        bail!("e2fsck found problems after the move");
    }
    println!("e2fsck: clean");
    Ok(())
}

/// Run this binary as the user would, echoing the command and its output.
fn show(args: &[&str], target: &Path) -> anyhow::Result<i32> {
    let exe = std::env::current_exe()?;
    println!("$ blkalign {} {}", args.join(" "), target.display());
    let out = Command::new(exe).args(args).arg(target).output()?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    for line in String::from_utf8_lossy(&out.stderr).lines() {
        println!("{line}");
    }
    let code = out.status.code().unwrap_or(-1);
    println!("(exit {code})\n");
    if code == 2 {
        bail!("`blkalign {}` failed", args.join(" "));
    }
    Ok(code)
}

fn drive_unavailable(args: &Args) -> Option<String> {
    if args.no_drive {
        return Some("--no-drive".into());
    }
    if !rustix::process::geteuid().is_root() {
        return Some("it needs root".into());
    }
    ["nbdkit", "nbdfuse", "losetup", "partx"]
        .iter()
        .find(|tool| !on_path(tool))
        .map(|tool| format!("{tool} is not installed"))
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join(tool).is_file()))
}

/// The same on an emulated first-generation WD Green, which reports
/// 512-byte physical sectors: random 4 KiB writes through the partition
/// timed before and after the move.
fn drive_story(dir: &Path, size: u64) -> anyhow::Result<()> {
    let size = size.min(128 << 20);
    println!("\n== The same on an emulated WD Caviar Green (4 KiB inside, reports 512) ==");
    let drive = Drive::start(size)?;
    let dev = drive.device.clone();
    let sectors = size / SECTOR;
    let part_sectors = old_partition_sectors(sectors)?;
    write_old_table(&File::options().write(true).open(&dev)?, part_sectors)?;
    let contents = fill_partition(&dev, dir, OLD_START, part_sectors)?;
    let _ = Command::new("partx").arg("-a").arg(&dev).status();
    println!("partition 1 at LBA {OLD_START}, holding {contents}\n");
    let before = partition_sha256(&dev, OLD_START, part_sectors)?;
    let part = PathBuf::from(format!("{}p1", dev.display()));
    let bench = ["bench", "--pattern", "random", "--offset", "0", "--count", "300"];
    show(&bench, &part)?;
    show(&["realign", "--yes"], &dev)?;
    show(&bench, &part)?;
    show(&["audit"], &dev)?;
    let after = partition_sha256(&dev, start_of(&dev)?, part_sectors)?;
    if before != after {
        bail!("the partition's bytes changed during the move");
    }
    println!("sha256 before and after the move: {after} (the same)");
    Ok(())
}

/// An emulated drive, stopped on drop.
struct Drive {
    id: String,
    device: PathBuf,
}

impl Drive {
    fn start(size: u64) -> anyhow::Result<Drive> {
        let exe = std::env::current_exe()?;
        let out = Command::new(&exe)
            .args(["emulate", "start", "--preset", "wd-ears", "--json", "--size"])
            .arg(size.to_string())
            .output()?;
        if !out.status.success() {
            bail!("emulate start failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        let id = json["id"].as_str().context("no id")?.to_string();
        let device = PathBuf::from(json["device"].as_str().context("no device")?);
        println!("$ blkalign emulate start --preset wd-ears --size {size}\n{}", device.display());
        Ok(Drive { id, device })
    }
}

impl Drop for Drive {
    fn drop(&mut self) {
        let _ = Command::new("partx").arg("-d").arg(&self.device).status();
        if let Ok(exe) = std::env::current_exe() {
            let _ = Command::new(exe).args(["emulate", "stop", &self.id]).status();
        }
    }
}
