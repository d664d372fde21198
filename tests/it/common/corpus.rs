//! A corpus of disk images that the peers build afresh in a temporary
//! directory, and Linux's userspace readings of them: libblkid (`blkid -p`
//! for the table type and the file system at byte 0, `partx -s` for the
//! partitions), `sfdisk --json` and parted. The kernel itself is no oracle
//! here: its partition parsers may be missing (see tests/it/common/mod.rs).

use super::{sfdisk_json, which, Loop};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Bash functions for build steps. `$IMG` is the image file, `$DEV` what
/// the peers write to (the image or its loop device), `$SS` its sector size.
pub const PRELUDE: &str = r#"
set -euo pipefail
# le32 N: N as 4 little-endian bytes, in printf escapes
le32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 & 255)) $(($1 >> 8 & 255)) $(($1 >> 16 & 255)) $(($1 >> 24 & 255)); }
# poke OFFSET ESCAPES: write bytes (printf escapes) at byte OFFSET
poke() { printf "$2" | dd of="$DEV" bs=1 seek="$1" conv=notrunc,fsync status=none; }
# entry SECTOR SLOT BOOT TYPE START SIZE: a hand-written MBR or EBR entry (hex BOOT, TYPE)
entry() { poke $(( $1 * SS + 446 + 16 * ($2 - 1) )) "\\x$3\\x00\\x00\\x00\\x$4\\x00\\x00\\x00$(le32 $5)$(le32 $6)"; }
# sig SECTOR: the 0x55AA signature of an MBR or EBR at SECTOR
sig() { poke $(( $1 * SS + 510 )) '\x55\xaa'; }
# dos SCRIPT / gpt SCRIPT: a new table by sfdisk (SCRIPT's \n are newlines)
dos() { printf "label: dos\n$1" | sfdisk -q --no-reread --no-tell-kernel "${@:2}" "$DEV" >/dev/null; }
gpt() { printf "label: gpt\n$1" | sfdisk -q --no-reread --no-tell-kernel "${@:2}" "$DEV" >/dev/null; }
u32() { od -An -tu4 -j "$1" -N4 "$DEV" | tr -d ' '; }
u64() { od -An -tu8 -j "$1" -N8 "$DEV" | tr -d ' '; }
# crc32 OFFSET LEN: the CRC-32 of those bytes, in printf escapes (gzip's trailer holds it)
crc32() { dd if="$DEV" bs=1 skip="$1" count="$2" status=none | gzip -c | tail -c8 | head -c4 | od -An -tx1 | tr -s ' ' '\n' | grep . | sed 's/^/\\x/' | tr -d '\n'; }
# gpt_crc LBA: recompute the CRCs of the GPT header at LBA and of its entries
gpt_crc() {
  local h=$(( $1 * SS ))
  local entries=$(( $(u64 $((h + 72))) * SS )) len=$(( $(u32 $((h + 80))) * $(u32 $((h + 84))) ))
  poke $((h + 88)) "$(crc32 $entries $len)"
  poke $((h + 16)) '\x00\x00\x00\x00'
  poke $((h + 16)) "$(crc32 $h $(u32 $((h + 12))))"
}
# gpt_end N LBA: make GPT entry N end at LBA, in both copies, CRCs mended
gpt_end() {
  local h
  for h in 1 "$(u64 $(( SS + 32 )))"; do
    poke $(( $(u64 $(( h * SS + 72 ))) * SS + ($1 - 1) * 128 + 40 )) "$(le32 $(( $2 & 0xffffffff )))$(le32 $(( $2 >> 32 )))"
    gpt_crc "$h"
  done
}
# boot_code: fill bytes 446..509 with a boot message, as boot code spills
# into the partition table area of a file system's boot sector
boot_code() { printf 'Non-system disk or disk error\r\nReplace and press any key when ready\r\n' | head -c 64 | dd of="$DEV" bs=1 seek=446 conv=notrunc,fsync status=none; }
# kernel_mbr [START SIZE]: boot code whose four boot indicators happen to
# be 0x00/0x80; with START SIZE its first "entry" lies inside the disk
kernel_mbr() {
  boot_code; poke 446 '\x80'; poke 462 '\x00'; poke 478 '\x00'; poke 494 '\x80'
  [ $# -eq 0 ] || poke 454 "$(le32 $1)$(le32 $2)"
}
# be32 N: N as 4 big-endian bytes, in printf escapes
be32() { printf '\\x%02x\\x%02x\\x%02x\\x%02x' $(($1 >> 24 & 255)) $(($1 >> 16 & 255)) $(($1 >> 8 & 255)) $(($1 & 255)); }
# amiga_long BLOCK OFFSET VALUE: set a long of the Amiga RDB or partition
# block at 512-byte BLOCK and reseal it (its first SummedLongs longs sum to 0)
amiga_long() {
  local at=$(( $1 * 512 )) n v sum=0
  poke $(( at + $2 )) "$(be32 $3)"
  poke $(( at + 8 )) '\x00\x00\x00\x00'
  n=$(( $(od -An -tu4 --endian=big -j $(( at + 4 )) -N4 "$DEV" | tr -d ' ') & 127 ))
  for v in $(od -An -v -tu4 --endian=big -j $at -N $(( n * 4 )) "$DEV"); do sum=$(( (sum + v) & 0xffffffff )); done
  poke $(( at + 8 )) "$(be32 $(( (0x100000000 - sum) & 0xffffffff )))"
}
# amiga_env BLOCK INDEX VALUE: set DosEnvec long INDEX of a partition block
amiga_env() { amiga_long "$1" $(( 128 + 4 * $2 )) "$3"; }
# atari_entry SECTOR SLOT ID START SIZE: an in-use AHDI entry (slot 0-3) of
# the root sector at 512-byte SECTOR, or an ICD one (slot 4-11)
atari_entry() {
  local at=$(( $1 * 512 + ($2 < 4 ? 0x1c6 + 12 * $2 : 0x156 + 12 * ($2 - 4)) ))
  poke $at "\\x01$3$(be32 $4)$(be32 $5)"
}
# atari_size: the disk's size in the root sector (hd_siz), which libblkid
# and parted want and Linux ignores
atari_size() { poke $((0x1c2)) "$(be32 $(( $(stat -c %s "$IMG") / 512 )))"; }
# iso ARGS: xorriso's hybrid ISO of a small tree; mbr432 is an MBR template,
# efi.img an EFI FAT image (also in the tree, for -e)
iso() {
  mkdir -p root && echo hello > root/hello.txt
  head -c 432 /dev/zero | tr '\0' '\220' > mbr432
  mkfs.vfat -C efi.img 2048 >/dev/null && cp efi.img root/
  xorriso -as mkisofs -o "$IMG" -R -V T "$@" root/
}
"#;

/// Where a case's peers write and its oracles read.
#[derive(Clone, Copy, Debug)]
pub enum Dev {
    /// The image file, made this size first (`truncate -s`), or left to
    /// the build step when "".
    File(&'static str),
    /// A loop device with this logical sector size on an image of this
    /// size: for a 4Kn disk, or peers that want a block device (pvcreate).
    Loop(&'static str, u32),
}

/// An image built by a case's steps, with its loop device if any.
pub struct Built {
    pub image: PathBuf,
    /// What the peers wrote to and the oracles read.
    pub dev: String,
    /// The logical sector size of `dev`.
    pub sector: u64,
    _loop: Option<Loop>,
}

/// Build `dir`/disk.img by running `steps` (bash, after [`PRELUDE`]) in
/// `dir`; Err holds the step's output when it fails.
pub fn build(dir: &Path, dev: Dev, steps: &str) -> Result<Built, String> {
    let image = dir.join("disk.img");
    let size = match dev {
        Dev::File(size) | Dev::Loop(size, _) => size,
    };
    if !size.is_empty() {
        let file = image.to_str().expect("utf-8 path");
        try_run("truncate", &["-s", size, file]).ok_or("truncate failed")?;
    }
    let (dev_path, sector, guard) = match dev {
        Dev::File(_) => (image.to_str().expect("utf-8 path").to_string(), 512, None),
        Dev::Loop(_, sector) => {
            let lo = Loop::attach(&image, sector);
            (lo.str().to_string(), u64::from(sector), Some(lo))
        }
    };
    let script = format!("{PRELUDE}\n{steps}\n");
    let out = Command::new("bash")
        .args(["-c", &script])
        .current_dir(dir)
        .env("IMG", &image)
        .env("DEV", &dev_path)
        .env("SS", sector.to_string())
        .env("LVM_SUPPRESS_FD_WARNINGS", "1")
        .output()
        .map_err(|e| format!("cannot run bash: {e}"))?;
    if !out.status.success() {
        return Err(format!("build step failed: {}", text(&out.stderr).trim()));
    }
    if guard.is_some() {
        // Steps may write the file directly: drop the loop device's cache.
        try_run("blockdev", &["--flushbufs", &dev_path]).ok_or("blockdev --flushbufs failed")?;
    }
    Ok(Built { image, dev: dev_path, sector, _loop: guard })
}

/// One reading of a disk, in bytes so that readings in different sector
/// sizes compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    /// blkalign's names: "mbr", "gpt", "none", ...; libblkid's others as is
    /// (e.g. "PMBR": a protective MBR whose GPT libblkid rejects).
    pub table: String,
    /// (number, start, size) in bytes, by number.
    pub parts: Vec<(u32, u64, u64)>,
    /// The file system (libblkid's TYPE name) at byte 0 of the whole disk.
    pub fs: Option<String>,
}

impl View {
    /// "mbr 1:63+2000 5:2113+1001 fs=vfat", in `unit`-byte sectors.
    pub fn show(&self, unit: u64) -> String {
        let sectors = |b: u64| {
            if b % unit == 0 {
                (b / unit).to_string()
            } else {
                format!("{b}B")
            }
        };
        let mut out = self.table.clone();
        for (n, start, size) in &self.parts {
            out += &format!(" {n}:{}+{}", sectors(*start), sectors(*size));
        }
        if let Some(fs) = &self.fs {
            out += &format!(" fs={fs}");
        }
        out
    }
}

/// A table's name in blkalign's terms, from libblkid's, libfdisk's or parted's.
pub fn table_name(name: &str) -> String {
    match name {
        "dos" | "msdos" => "mbr",
        "dvh" => "sgi",
        "loop" | "unknown" | "" => "none",
        other => other,
    }
    .to_string()
}

/// libblkid's view: `blkid -p` for the table and file system types,
/// `partx -s` (always in 512-byte units) for the partitions.
pub fn libblkid(dev: &str) -> View {
    let probe = try_output("blkid", &["-p", "-o", "export", dev]);
    let value = |key: &str| {
        probe.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('=')).map(str::to_string)
    };
    let list = try_output("partx", &["-s", "-g", "-o", "NR,START,SECTORS", dev]);
    let parts = list.lines().filter_map(|line| {
        let mut field = line.split_whitespace().map(str::parse::<u64>);
        let (n, start, size) = (field.next()?.ok()?, field.next()?.ok()?, field.next()?.ok()?);
        Some((u32::try_from(n).ok()?, start * 512, size * 512))
    });
    View {
        table: table_name(value("PTTYPE").as_deref().unwrap_or("none")),
        parts: sorted(parts.collect()),
        fs: value("TYPE"),
    }
}

/// `sfdisk --json`'s view (libfdisk), with `dev`'s logical sector size.
pub fn sfdisk(dev: &str, sector: u64) -> View {
    if try_run("sfdisk", &["--json", dev]).is_none() {
        return View { table: "none".into(), parts: Vec::new(), fs: None };
    }
    let (label, parts) = sfdisk_json(dev);
    let parts = parts.into_iter().map(|(n, start, size, _)| (n, start * sector, size * sector));
    View { table: table_name(&label), parts: sorted(parts.collect()), fs: None }
}

/// parted's view from `parted -m unit s print`. Its "loop" label is a file
/// system on the whole disk: no table, and partition 1 names the file system.
pub fn parted(dev: &str) -> View {
    let out = try_output("parted", &["-s", "-m", dev, "unit", "s", "print"]);
    let mut lines = out.lines().skip_while(|l| *l != "BYT;").skip(1);
    let disk: Vec<&str> = lines.next().unwrap_or("").split(':').collect();
    let sector: u64 = disk.get(3).and_then(|s| s.parse().ok()).unwrap_or(512);
    let label = disk.get(5).copied().unwrap_or("unknown");
    let rows: Vec<Vec<&str>> =
        lines.map(|l| l.trim_end_matches(';').split(':').collect()).collect();
    if label == "loop" {
        let fs = rows.first().and_then(|r| r.get(4)).map(|f| fs_name(f));
        return View { table: "none".into(), parts: Vec::new(), fs };
    }
    let sectors = |f: &str| f.strip_suffix('s').and_then(|n| n.parse::<u64>().ok());
    let parts = rows.iter().filter_map(|r| {
        let n = r.first()?.parse().ok()?;
        Some((n, sectors(r.get(1)?)? * sector, sectors(r.get(3)?)? * sector))
    });
    View { table: table_name(label), parts: sorted(parts.collect()), fs: None }
}

/// parted's file system names in libblkid's terms.
fn fs_name(parted: &str) -> String {
    match parted {
        "fat12" | "fat16" | "fat32" => "vfat",
        "linux-swap(v1)" | "linux-swap(v0)" => "swap",
        other => other,
    }
    .to_string()
}

fn sorted(mut parts: Vec<(u32, u64, u64)>) -> Vec<(u32, u64, u64)> {
    parts.sort_unstable();
    parts
}

/// Run `program`; its output, successful or not (None when it cannot start).
fn output(program: &str, args: &[&str]) -> Option<Output> {
    let exe = which(program).unwrap_or_else(|| PathBuf::from(program));
    Command::new(exe).args(args).output().ok()
}

/// Stdout of `program` when it succeeds.
fn try_run(program: &str, args: &[&str]) -> Option<String> {
    output(program, args).filter(|o| o.status.success()).map(|o| text(&o.stdout))
}

/// Stdout of `program`, whatever its exit code: oracles exit non-zero when
/// they find nothing.
fn try_output(program: &str, args: &[&str]) -> String {
    output(program, args).map(|o| text(&o.stdout)).unwrap_or_default()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
