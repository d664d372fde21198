//! blkalign's reading of a corpus of images that the peers build afresh
//! (sfdisk, sgdisk, parted, xorriso, mkfs.*, pvcreate, hand-patched bytes)
//! against Linux's userspace readings of the same images: libblkid
//! (`blkid -p`, `partx -s`), `sfdisk --json` and parted. Same table type,
//! same partition numbers, starts and sizes, the same file system on a
//! disk without a table; parted's `align-check opt` agrees with
//! `aligned_1mib`; and each case's own expectations of blkalign: problem
//! codes and severities, exit code, sector size.
//!
//! Which oracle the test follows where they disagree:
//! - libblkid first: it applies the kernel's rules (block/partitions/
//!   msdos.c, efi.c) and is what udev, mount and lsblk see.
//! - Where the kernel and libblkid differ, blkalign reads as libblkid does
//!   and reports the kernel's reading as a problem: a FAT/NTFS boot sector
//!   whose boot code passes msdos.c's checks (libblkid sees the file system,
//!   the kernel an MBR: kernel_reads_boot_code); a GPT with a corrupt
//!   primary header (libblkid reads the backup, the kernel only when booted
//!   with `gpt`: gpt_primary_invalid).
//! - Where a table holds entries Linux drops (past the end of the device or
//!   its usable area, a GPT without protective MBR), blkalign lists what the
//!   table says and flags it: the case names libblkid as differing and why,
//!   and the partitions are still checked against sfdisk.
//! - sfdisk and parted quirks are named per case.
//!
//! A case is one line: a name, where it is built (an image file or a loop
//! device), bash build steps (functions in tests/it/common/corpus.rs) and what
//! blkalign should say. Every mismatch of every case is printed before the
//! test fails. BLKALIGN_LINUX_VIEW_DIR=DIR keeps the images in DIR/CASE/
//! (scripts/linux-view-corpus).

use crate::common;

use common::corpus::{self, Dev, View};
use common::{blkalign, lab, needs, parted_aligned};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

tests![
    blkalign_reads_disks_as_linux_does,
    long(
        the_kernel_reads_disks_as_blkalign_does = 55,
    ),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Oracle {
    Libblkid,
    Sfdisk,
    Parted,
}

/// What blkalign should say of a case's image.
#[derive(Clone, Debug)]
struct Expect {
    table: &'static str,
    /// The file system on a disk without a table (libblkid's TYPE name).
    contents: Option<&'static str>,
    /// Codes that must be among the problems; no other error may be.
    problems: Vec<&'static str>,
    exit: i32,
    /// The logical sector size blkalign reads the image with.
    sector: u64,
    /// Oracles that read this image differently, and why.
    differ: Vec<(Oracle, &'static str)>,
    /// Words some note must hold.
    note: Option<&'static str>,
}

fn table(table: &'static str) -> Expect {
    Expect {
        table,
        contents: None,
        problems: Vec::new(),
        exit: 0,
        sector: 512,
        differ: Vec::new(),
        note: None,
    }
}

fn mbr() -> Expect {
    table("mbr")
}

fn gpt() -> Expect {
    table("gpt")
}

/// No table and nothing recognised.
fn blank() -> Expect {
    table("none")
}

/// A file system on the whole disk.
fn fs(name: &'static str) -> Expect {
    Expect { contents: Some(name), ..table("none") }
}

/// A file system whose boot sector ends in 0x55AA, as an MBR does.
fn boot_sector(name: &'static str) -> Expect {
    fs(name).differ(
        Oracle::Sfdisk,
        "libfdisk checks only the 0x55AA signature: it reads a boot sector as an MBR",
    )
}

impl Expect {
    fn problems(mut self, codes: &[&'static str]) -> Self {
        self.problems.extend_from_slice(codes);
        self
    }

    fn exit(mut self, code: i32) -> Self {
        self.exit = code;
        self
    }

    fn sector(mut self, size: u64) -> Self {
        self.sector = size;
        self
    }

    fn differ(mut self, oracle: Oracle, why: &'static str) -> Self {
        self.differ.push((oracle, why));
        self
    }

    fn note(mut self, words: &'static str) -> Self {
        self.note = Some(words);
        self
    }
}

struct Case {
    name: String,
    dev: Dev,
    steps: String,
    expect: Expect,
}

fn case(name: impl Into<String>, dev: Dev, steps: impl Into<String>, expect: Expect) -> Case {
    Case { name: name.into(), dev, steps: steps.into(), expect }
}

const DISK: Dev = Dev::File("64M");
/// A 4Kn disk: built on a 4096-byte loop device, audited as a plain file.
const DISK_4KN: Dev = Dev::Loop("64M", 4096);
/// xorriso writes the image itself.
const ISO: Dev = Dev::File("");

const NO_PMBR: &str = "no protective MBR: like the kernel, it ignores the GPT";
const READ_AS_4KN: &str = "it reads the 4096-byte loop device; nothing in the image alone \
                          tells its sector size, so blkalign reads 512 and says which option changes it";
const PARTED_NO_TABLE: &str = "parted refuses the table";
const PARTED_TYPE_0: &str =
    "parted skips entries of type 0x00; the kernel and libblkid skip only those of size 0";
const NO_AMIGA: &str = "it reads no Amiga RDB (libblkid has no prober for it)";
const NO_ATARI: &str = "libfdisk reads no Atari table";
const ISO_MBR: &str = "-isohybrid-mbr mbr432 -e efi.img -no-emul-boot -isohybrid-gpt-basdat";
const EXFAT_DOS: &str = "libblkid 2.38's dos prober does not rule out exFAT as it does FAT \
                         and NTFS: an MBR beside TYPE=exfat";

#[rustfmt::skip]
fn cases() -> Vec<Case> {
    use Oracle::*;
    let mut cases = vec![
        // MBR by sfdisk, and hand-patched where sfdisk refuses.
        case("dos_63_2048", DISK, r"dos 'start=63,size=1985\nstart=2048,size=4096'", mbr().exit(1)),
        case("dos_logicals_odd", DISK, r"dos 'start=63,size=900\nstart=1001,size=60000,type=5\nstart=1065,size=1001\nstart=3333,size=777'", mbr().exit(1)),
        case("dos_type_0", DISK, r"dos 'start=2048,size=1000,type=0\nstart=4096,size=1000'", mbr().differ(Parted, PARTED_TYPE_0)),
        case("dos_size_0", DISK, r"dos 'start=2048,size=1000'; entry 0 2 00 83 8192 0", mbr().differ(Sfdisk, "libfdisk lists an entry of size 0 that has a type; the kernel and libblkid skip it")),
        case("dos_two_extended", DISK, r"dos 'start=2048,size=10000,type=5'; entry 0 2 00 0f 20480 10000; entry 2048 1 00 83 2048 4096; sig 2048; entry 20480 1 00 83 2048 4096; sig 20480", mbr().differ(Sfdisk, "libfdisk follows only the first extended partition").differ(Parted, "parted refuses a second extended partition")),
        case("dos_ebr_two_entries", DISK, r"dos 'start=2048,size=30000,type=5\nstart=4096,size=1000'; entry 2048 3 00 83 8192 1000", mbr().differ(Sfdisk, "libfdisk reads one data entry per EBR")),
        case("dos_beyond_end", DISK, r"dos 'start=2048,size=1000'; entry 0 2 00 83 200000 5000; entry 0 3 00 83 130000 5000", mbr().problems(&["beyond_end"]).exit(1).differ(Parted, PARTED_NO_TABLE)),
        case("dos_overlap", DISK, r"dos 'start=2048,size=10000'; entry 0 2 00 83 8192 10000", mbr().problems(&["overlap"]).exit(1).differ(Parted, PARTED_NO_TABLE)),
        case("dos_bootable", DISK, r"dos 'start=2048,size=1000,bootable\nstart=4096,size=1000'; poke 462 '\x80'", mbr()),
        case("dos_stale_gpt", DISK, r#"sgdisk -n 1:0:+4M "$DEV" >/dev/null; dos 'start=2048,size=8192' --wipe never"#, mbr().problems(&["stale_gpt"])),
        // 4Kn disks: the MBR gives no sector size away; the EBRs, or what
        // the partitions hold, do.
        case("dos_4kn_logicals", DISK_4KN, r"dos 'start=256,size=1000\nstart=2048,size=8000,type=5\nstart=2304,size=1000\nstart=4096,size=500'", mbr().sector(4096)),
        case("dos_4kn_ext4", DISK_4KN, r#"dos 'start=256,size=4096'; mkfs.ext4 -q -F -E offset=1048576 "$DEV" 16M"#, mbr().sector(4096)),
        case("dos_4kn_unsure", DISK_4KN, r"dos 'start=256,size=1000\nstart=2048,size=8000'", mbr().note("--logical-sector-size 4096").differ(Libblkid, READ_AS_4KN).differ(Sfdisk, READ_AS_4KN).differ(Parted, READ_AS_4KN)),
        case("gpt_4kn", DISK_4KN, r#"sgdisk -n 1:0:+4M -n 2:0:+8M "$DEV""#, gpt().sector(4096)),
        // Tiny images: what they hold is read, and lies past their end.
        case("mbr_only_512", DISK, r#"dos 'start=2048,size=1000'; truncate -s 512 "$IMG""#, mbr().problems(&["beyond_end"]).exit(1).differ(Libblkid, "libblkid reads no table on a one-sector device (the kernel reads it and drops the partition past the end)").differ(Parted, PARTED_NO_TABLE)),
        case("bytes_300", DISK, r#"dos 'start=2048,size=1000'; truncate -s 300 "$IMG""#, blank().problems(&["too_small"])),
        case("empty", Dev::File("0"), "true", blank().problems(&["too_small"])),
        // GPT by sgdisk and sfdisk, then damaged.
        case("gpt_sfdisk", DISK, r"gpt 'size=4M\nsize=8M, name=root'", gpt()),
        case("gpt_sgdisk", DISK, r#"sgdisk -n 1:0:+4M -n 2:0:+8M "$DEV""#, gpt()),
        case("gpt_start_34", DISK, r#"sgdisk -a 1 -n 1:34:+1M -n 2:0:+2M "$DEV""#, gpt().exit(1)),
        case("gpt_8_entries", DISK, r#"sgdisk -S 8 -n 1:0:+1M -n 2:0:+2M "$DEV""#, gpt()),
        case("gpt_200_entries", DISK, r#"sgdisk -S 200 -n 1:0:+1M -n 150:0:+2M "$DEV""#, gpt()),
        case("gpt_32_entries_sfdisk", DISK, r"gpt 'table-length: 32\nsize=1M\nsize=2M'", gpt()),
        case("gpt_truncated", DISK, r#"sgdisk -n 1:0:+1M -n 2:0:0 "$DEV"; truncate -s 48M "$IMG""#, gpt().problems(&["gpt_ignored_by_linux", "beyond_end"]).exit(1).differ(Libblkid, "libblkid, like the kernel, rejects a GPT whose usable area runs past the end (PTTYPE=PMBR)").differ(Sfdisk, "libfdisk falls back to the protective MBR").differ(Parted, PARTED_NO_TABLE)),
        case("gpt_grown", DISK, r#"sgdisk -n 1:0:+1M -n 2:0:0 "$DEV"; truncate -s 96M "$IMG""#, gpt().problems(&["gpt_backup_not_at_end"])),
        case("gpt_primary_corrupt", DISK, r#"sgdisk -n 1:0:+1M -n 2:0:+2M "$DEV"; poke $((SS + 40)) '\xff'"#, gpt().problems(&["gpt_primary_invalid"]).exit(1)),
        case("gpt_backup_corrupt", DISK, r#"sgdisk -n 1:0:+1M -n 2:0:+2M "$DEV"; poke $(( $(stat -c %s "$IMG") - SS + 40 )) '\xff'"#, gpt().problems(&["gpt_backup_invalid"])),
        case("gpt_no_protective_mbr", DISK, r#"sgdisk -n 1:0:+1M -n 2:0:+2M "$DEV"; dd if=/dev/zero of="$DEV" bs=$SS count=1 conv=notrunc status=none"#, gpt().problems(&["gpt_without_protective_mbr"]).exit(1).differ(Libblkid, NO_PMBR).differ(Sfdisk, NO_PMBR).differ(Parted, NO_PMBR)),
        case("gpt_hybrid_mbr", DISK, r#"sgdisk -n 1:0:+1M -n 2:0:+2M -n 3:0:+4M "$DEV"; sgdisk -h 1:3 "$DEV""#, gpt().problems(&["hybrid_mbr"])),
        case("gpt_beyond_end", DISK, r#"sgdisk -n 1:0:+1M -n 2:0:+2M "$DEV"; gpt_end 2 200000"#, gpt().problems(&["beyond_end"]).exit(1).differ(Libblkid, "libblkid drops entries outside the usable area, as the kernel drops those past the end").differ(Parted, PARTED_NO_TABLE)),
        case("gpt_past_last_usable", DISK, r#"sgdisk -n 1:0:+1M -n 2:0:+2M "$DEV"; gpt_end 2 131050"#, gpt().problems(&["outside_usable"]).differ(Libblkid, "libblkid drops entries outside the usable area; the kernel keeps those inside the device")),
        case("gpt_overlap", DISK, r#"sgdisk -n 1:0:+1M -n 2:0:+2M "$DEV"; gpt_end 1 5000"#, gpt().problems(&["overlap"]).exit(1).differ(Parted, PARTED_NO_TABLE)),
        // parted.
        case("parted_msdos", DISK, r#"parted -s "$DEV" mklabel msdos mkpart primary 1MiB 10MiB mkpart extended 10MiB 60MiB mkpart logical 11MiB 20MiB mkpart logical 21MiB 30MiB"#, mbr()),
        case("parted_msdos_63", DISK, r#"parted -s -a none "$DEV" mklabel msdos mkpart primary 63s 10000s mkpart primary 10001s 20000s"#, mbr().exit(1)),
        case("parted_gpt", DISK, r#"parted -s "$DEV" mklabel gpt mkpart a 1MiB 5MiB mkpart b 5MiB 20MiB"#, gpt()),
        case("parted_gpt_34", DISK, r#"parted -s -a none "$DEV" mklabel gpt mkpart a 34s 4000s"#, gpt().exit(1)),
        // Amiga RDB and Atari AHDI by parted, then patched where parted
        // writes no such shape: Linux's amiga.c and atari.c read them.
        case("parted_amiga", DISK, r#"parted -s "$DEV" mklabel amiga mkpart primary ext2 4MiB 9MiB mkpart primary ext2 9MiB 20MiB"#, table("amiga").differ(Libblkid, NO_AMIGA).differ(Sfdisk, NO_AMIGA)),
        case("amiga_odd_cylinders", DISK, r#"parted -s "$DEV" mklabel amiga mkpart primary ext2 4MiB 9MiB mkpart primary ext2 9MiB 20MiB; amiga_env 3 3 1; amiga_env 3 5 63; amiga_env 3 9 65; amiga_env 3 10 120"#, table("amiga").exit(1).differ(Libblkid, NO_AMIGA).differ(Sfdisk, NO_AMIGA).differ(Parted, "parted counts cylinders of the RDB's rdb_CylBlocks, Linux those of the partition's own DosEnvec")),
        case("amiga_loop", DISK, r#"parted -s "$DEV" mklabel amiga mkpart primary ext2 4MiB 9MiB mkpart primary ext2 9MiB 20MiB; amiga_long 4 16 3"#, table("amiga").problems(&["rdb_loop", "rdb_chain_too_long", "overlap"]).exit(1).differ(Libblkid, NO_AMIGA).differ(Sfdisk, NO_AMIGA).differ(Parted, "parted refuses a partition list that loops")),
        case("amiga_4kn", DISK_4KN, r#"parted -s "$DEV" mklabel amiga"#, blank().differ(Parted, "parted puts the RDB in its block 2, byte 8192: past the 16 blocks of 512 bytes where Linux looks")),
        case("parted_atari", DISK, r#"parted -s "$DEV" mklabel atari mkpart primary ext2 4MiB 9MiB mkpart primary ext2 9MiB 20MiB"#, table("atari").differ(Sfdisk, NO_ATARI)),
        case("parted_atari_misaligned", DISK, r#"parted -s -a none "$DEV" mklabel atari mkpart primary ext2 8193s 18431s mkpart primary ext2 18432s 40959s"#, table("atari").exit(1).differ(Sfdisk, NO_ATARI)),
        case("atari_xgm", DISK, r"atari_entry 0 0 GEM 2048 6144; atari_entry 0 1 XGM 8192 40000; atari_entry 8192 0 LNX 2048 4096; atari_entry 8192 1 XGM 8192 10000; atari_entry 16384 0 LNX 63 4096; atari_entry 0 2 BGM 50000 2048; atari_size", table("atari").exit(1).differ(Sfdisk, NO_ATARI).differ(Parted, "parted lists the XGM container as partition 0")),
        case("atari_icd", DISK, r"atari_entry 0 0 GEM 2048 6144; atari_entry 0 4 BGM 8192 4096; atari_entry 0 5 XYZ 12288 4096; atari_entry 0 6 LNX 16384 4096; atari_size", table("atari").differ(Sfdisk, NO_ATARI).differ(Parted, "parted numbers ICD entries on from the last in use; Linux and libblkid by slot, from 5")),
        // Hybrid ISOs by xorriso: MBR and GPT both intended, and so is the
        // nesting of the EFI image's partition inside the one covering the
        // whole ISO: no overlap error expected (every install ISO has it).
        case("iso_hybrid", ISO, format!("iso {ISO_MBR}"), mbr().problems(&["hybrid_iso", "iso_nested"]).differ(Parted, PARTED_TYPE_0)),
        case("iso_hybrid_appended", ISO, format!("iso {ISO_MBR} -append_partition 2 0xef efi.img"), mbr().problems(&["hybrid_iso"]).differ(Parted, PARTED_TYPE_0)),
        case("iso_appended_gpt_offset16", ISO, format!("iso {ISO_MBR} -append_partition 2 0xef efi.img -appended_part_as_gpt -partition_offset 16"), gpt().problems(&["iso_nested"]).differ(Parted, PARTED_NO_TABLE)),
        case("iso_gpt_offset16", ISO, "iso -e efi.img -no-emul-boot -append_partition 2 0xef efi.img -appended_part_as_gpt -partition_offset 16", gpt().exit(1)),
        // File systems on the whole disk.
        case("fat12", Dev::File("8M"), r#"mkfs.vfat -F 12 "$DEV""#, boot_sector("vfat")),
        case("fat16", DISK, r#"mkfs.vfat -F 16 "$DEV""#, boot_sector("vfat")),
        case("fat32", DISK, r#"mkfs.vfat -F 32 "$DEV""#, boot_sector("vfat")),
        case("exfat", DISK, r#"mkfs.exfat "$DEV""#, boot_sector("exfat").differ(Libblkid, EXFAT_DOS).differ(Parted, "parted reads an empty msdos table")),
        case("ntfs", DISK, r#"mkntfs -F -Q "$DEV""#, boot_sector("ntfs")),
        case("ext4", DISK, r#"mkfs.ext4 -q -F "$DEV""#, fs("ext4")),
        case("swap", DISK, r#"mkswap "$DEV""#, fs("swap")),
        case("lvm_pv", Dev::Loop("64M", 512), r#"pvcreate -qq --devicesfile '' "$DEV""#, fs("LVM2_member")),
    ];
    // 1 to 6 logical partitions in an extended partition of type 0x05 or 0x0f.
    for n in 1..=6 {
        for kind in ["5", "f"] {
            let logicals: String =
                (1..=n).map(|k| format!(r"\nstart={},size=2048", 4096 * k)).collect();
            let steps = format!("dos 'start=2048,size=100000,type={kind}{logicals}'");
            cases.push(case(format!("dos_{n}_logicals_0x0{kind}"), DISK, steps, mbr()));
        }
    }
    // Boot code over 446..509: invalid boot indicators; valid ones over
    // garbage that starts past the end (the kernel's msdos.c reads an MBR
    // but makes no partition); and over garbage inside the disk.
    let mkfs = [
        ("fat16", r#"mkfs.vfat -F 16 "$DEV""#, "vfat"),
        ("fat32", r#"mkfs.vfat -F 32 "$DEV""#, "vfat"),
        ("ntfs", r#"mkntfs -F -Q "$DEV""#, "ntfs"),
        ("exfat", r#"mkfs.exfat "$DEV""#, "exfat"),
    ];
    for (name, mkfs, fs) in mkfs {
        let exfat = |e: Expect| if fs == "exfat" { e.differ(Libblkid, EXFAT_DOS) } else { e };
        cases.push(case(format!("{name}_boot_code"), DISK, format!("{mkfs}; boot_code"), boot_sector(fs)));
        cases.push(case(format!("{name}_kernel_mbr_past_end"), DISK, format!("{mkfs}; kernel_mbr"), exfat(boot_sector(fs))));
        let kernel = boot_sector(fs).problems(&["kernel_reads_boot_code"]).exit(1);
        cases.push(case(format!("{name}_kernel_mbr"), DISK, format!("{mkfs}; kernel_mbr 2048 4096"), exfat(kernel)));
    }
    cases
}

/// The severities the issue fixes for the codes it names.
const SEVERITY: &[(&str, &str)] = &[
    ("hybrid_iso", "info"),
    ("too_small", "info"),
    ("kernel_reads_boot_code", "error"),
    ("gpt_without_protective_mbr", "error"),
    ("gpt_primary_invalid", "error"),
    ("gpt_ignored_by_linux", "error"),
    ("beyond_end", "error"),
    ("overlap", "error"),
];

/// Every mismatch found for one case, and what was only noted.
#[derive(Default)]
struct Report {
    mismatches: Vec<String>,
    lines: Vec<String>,
}

impl Report {
    fn mismatch(&mut self, what: String) {
        self.lines.push(format!("  ✗ {what}"));
        self.mismatches.push(what);
    }
}

/// blkalign's reading from `audit --json`.
struct Audit {
    exit: i32,
    target: Value,
    view: View,
}

fn audit(image: &Path) -> Result<Audit, String> {
    let path = image.to_str().expect("utf-8 path");
    let out = blkalign().args(["audit", "--json", path]).output().map_err(|e| e.to_string())?;
    let doc: Value = serde_json::from_slice(&out.stdout).map_err(|e| {
        format!("audit printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stderr))
    })?;
    let target = doc["targets"][0].clone();
    let parts = target["partitions"].as_array().cloned().unwrap_or_default();
    let mut parts: Vec<_> = parts.iter().map(|p| in_bytes(&target, p)).collect();
    parts.sort_unstable();
    let view = View {
        table: target["table"].as_str().unwrap_or("?").to_string(),
        parts,
        fs: target["contents"]["name"].as_str().map(str::to_string),
    };
    Ok(Audit { exit: out.status.code().unwrap_or(-1), target, view })
}

/// A partition of blkalign's JSON `target` as (number, start, size) in bytes.
fn in_bytes(target: &Value, p: &Value) -> (u32, u64, u64) {
    let sector = target["logical_sector_size"].as_u64().unwrap_or(0);
    let field = |k: &str| p[k].as_u64().unwrap_or(u64::MAX).saturating_mul(sector);
    let number = p["number"].as_u64().and_then(|n| u32::try_from(n).ok()).unwrap_or(u32::MAX);
    (number, field("start"), field("size"))
}

fn check(case: &Case, keep: Option<&Path>) -> Report {
    let mut report = Report::default();
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = keep.map_or_else(|| tmp.path().to_path_buf(), |d| d.join(&case.name));
    if keep.is_some() {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create case directory");
    }
    let built = match corpus::build(&dir, case.dev, &case.steps) {
        Ok(built) => built,
        Err(e) => {
            report.mismatch(e);
            return report;
        }
    };
    let ours = match audit(&built.image) {
        Ok(audit) => audit,
        Err(e) => {
            report.mismatch(e);
            return report;
        }
    };
    // parted last: it opens the image read-write.
    let theirs = [
        (Oracle::Libblkid, corpus::libblkid(&built.dev)),
        (Oracle::Sfdisk, corpus::sfdisk(&built.dev, built.sector)),
        (Oracle::Parted, corpus::parted(&built.dev)),
    ];
    compare_views(case, built.sector, &ours, &theirs, &mut report);
    check_expectations(&case.expect, &ours, &mut report);
    check_align(&built.dev, &ours, &theirs[2].1, &mut report);
    report
}

/// blkalign against each oracle, shown in `unit`-byte sectors.
fn compare_views(
    case: &Case,
    unit: u64,
    ours: &Audit,
    oracles: &[(Oracle, View)],
    report: &mut Report,
) {
    report.lines.push(format!("  {:<9} {}", "blkalign", ours.view.show(unit)));
    for (oracle, theirs) in oracles {
        let oracle = *oracle;
        let name = format!("{oracle:?}").to_lowercase();
        let known = case.expect.differ.iter().find(|(o, _)| *o == oracle).map(|(_, why)| *why);
        let same = agrees(&ours.view, theirs, oracle);
        let line = format!("  {name:<9} {}", theirs.show(unit));
        match (same, known) {
            (true, None) => report.lines.push(line),
            (false, Some(why)) => report.lines.push(format!("{line}   (differs as known: {why})")),
            (false, None) => report.mismatch(format!("{name} reads {}", theirs.show(unit))),
            (true, Some(why)) => {
                report.mismatch(format!("{name} agrees now: drop the known difference ({why})"))
            }
        }
    }
}

/// Partitions always; the file system only without a table, and only
/// where the oracle names one (parted does not name every one).
fn agrees(ours: &View, theirs: &View, oracle: Oracle) -> bool {
    let fs = ours.table != "none"
        || ours.fs == theirs.fs
        || (oracle != Oracle::Libblkid && theirs.fs.is_none());
    ours.table == theirs.table && ours.parts == theirs.parts && fs
}

fn check_expectations(expect: &Expect, ours: &Audit, report: &mut Report) {
    let t = &ours.target;
    if ours.view.table != expect.table {
        report.mismatch(format!("table {}, expected {}", ours.view.table, expect.table));
    }
    if ours.view.fs.as_deref() != expect.contents {
        report.mismatch(format!("contents {:?}, expected {:?}", ours.view.fs, expect.contents));
    }
    // Layers inside (tests/it/stack_peers.rs checks them) have verdicts of
    // their own: a FAT whose data region is off 4 KiB is misaligned.
    let layers = t["partitions"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["layers"].as_array().into_iter().flatten());
    let layer_misaligned = layers
        .chain(t["layers"].as_array().into_iter().flatten())
        .any(|l| l["verdict"] == "misaligned");
    let expected = if layer_misaligned { expect.exit.max(1) } else { expect.exit };
    if ours.exit != expected {
        report.mismatch(format!("exit {}, expected {expected}", ours.exit));
    }
    if !t["error"].is_null() {
        report.mismatch(format!("error: {}", t["error"]));
    }
    let sector = t["logical_sector_size"].as_u64();
    let source = t["logical_sector_source"].as_str().unwrap_or("?");
    if sector != Some(expect.sector) || (expect.sector != 512 && source != "table") {
        report.mismatch(format!(
            "logical sector {sector:?} ({source}), expected {} (table)",
            expect.sector
        ));
    }
    let notes = t["notes"].as_array().cloned().unwrap_or_default();
    let noted = |words: &str| notes.iter().any(|n| n.as_str().is_some_and(|n| n.contains(words)));
    if let Some(words) = expect.note.filter(|w| !noted(w)) {
        report.mismatch(format!("no note says {words:?}: {notes:?}"));
    }
    let problems = t["problems"].as_array().cloned().unwrap_or_default();
    for p in &problems {
        let code = p["code"].as_str().unwrap_or("?");
        let severity = p["severity"].as_str().unwrap_or("?");
        let message = p["message"].as_str().unwrap_or("");
        report.lines.push(format!("  problem {code} ({severity}): {message}"));
        let fixed = SEVERITY.iter().find(|(c, _)| *c == code).map(|(_, s)| *s);
        if !["info", "warning", "error"].contains(&severity) || message.is_empty() {
            report.mismatch(format!("problem {code}: severity {severity:?}, message {message:?}"));
        } else if fixed.is_some_and(|s| s != severity) {
            report.mismatch(format!(
                "problem {code} is {severity}, expected {}",
                fixed.unwrap_or("")
            ));
        } else if severity == "error" && !expect.problems.contains(&code) {
            report.mismatch(format!("unexpected error {code}: {message}"));
        }
    }
    for code in &expect.problems {
        if !problems.iter().any(|p| p["code"] == *code) {
            report.mismatch(format!("no {code} problem"));
        }
    }
}

/// parted's `align-check opt` is blkalign's `aligned_1mib`, wherever parted
/// reads the same partition.
fn check_align(dev: &str, ours: &Audit, parted: &View, report: &mut Report) {
    if !["mbr", "gpt"].contains(&parted.table.as_str()) {
        return;
    }
    let parts = ours.target["partitions"].as_array().cloned().unwrap_or_default();
    let mut checked = Vec::new();
    for p in &parts {
        let number = p["number"].as_u64().unwrap_or(0);
        if p["kind"] == "extended" || !parted.parts.contains(&in_bytes(&ours.target, p)) {
            continue;
        }
        let aligned = parted_aligned(dev, number);
        checked.push(format!("{number}:{aligned}"));
        if p["aligned_1mib"] != aligned {
            report.mismatch(format!(
                "partition {number}: aligned_1mib {}, parted align-check opt says {aligned}",
                p["aligned_1mib"]
            ));
        }
    }
    report.lines.push(format!("  parted align-check opt: {}", checked.join(" ")));
}

/// Run every case on two threads (the machine has two cores).
fn run_all(cases: &[Case], keep: Option<&Path>) -> Vec<Report> {
    let next = AtomicUsize::new(0);
    let done = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while let Some(case) = cases.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let report = check(case, keep);
                    done.lock().expect("reports").push((case.name.clone(), report));
                }
            });
        }
    });
    let mut done = done.into_inner().expect("reports");
    done.sort_by_key(|(name, _)| cases.iter().position(|c| c.name == *name));
    done.into_iter().map(|(_, report)| report).collect()
}

fn blkalign_reads_disks_as_linux_does() {
    let tools = [
        "sfdisk",
        "sgdisk",
        "parted",
        "partx",
        "blkid",
        "blockdev",
        "xorriso",
        "mkfs.vfat",
        "mkfs.exfat",
        "mkntfs",
        "mkfs.ext4",
        "mkswap",
        "pvcreate",
        "gzip",
        "od",
    ];
    if !needs(true, &tools) {
        return;
    }
    let keep = std::env::var_os("BLKALIGN_LINUX_VIEW_DIR").map(PathBuf::from);
    // BLKALIGN_LINUX_VIEW_ONLY=WORD: only the cases whose name holds WORD.
    let only = std::env::var("BLKALIGN_LINUX_VIEW_ONLY").unwrap_or_default();
    let cases: Vec<Case> = cases().into_iter().filter(|c| c.name.contains(&only)).collect();
    let reports = run_all(&cases, keep.as_deref());
    let mut failed = Vec::new();
    for (case, report) in cases.iter().zip(&reports) {
        let verdict = if report.mismatches.is_empty() { "ok" } else { "MISMATCH" };
        println!("{verdict:<8} {} [{}]\n{}", case.name, case.steps, report.lines.join("\n"));
        if !report.mismatches.is_empty() {
            failed.push(format!("{}:\n    {}", case.name, report.mismatches.join("\n    ")));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} cases disagree (full readings above):\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
}

/// The same corpus on the real kernel (tests/it/common/lab.rs): each image on
/// a loop device with partition scanning, so the kernel's own parsers
/// (block/partitions/msdos.c, efi.c) make its partitions; blkalign's audit
/// of that loop device lists the same ones, except where one of its
/// problems says why the kernel's differ, and never blames a difference on
/// a table the kernel has not re-read: it has just read it.
fn the_kernel_reads_disks_as_blkalign_does() {
    if !needs(
        true,
        &["sfdisk", "sgdisk", "parted", "xorriso", "mkfs.vfat", "mkfs.exfat", "mkntfs", "pvcreate"],
    ) || !lab::ready()
    {
        return;
    }
    let dir = lab::Dir::new();
    let corpus = dir.path().join("corpus");
    let cases = cases();
    for case in &cases {
        let case_dir = corpus.join(&case.name);
        std::fs::create_dir_all(&case_dir).expect("case directory");
        let built = corpus::build(&case_dir, case.dev, &case.steps)
            .unwrap_or_else(|e| panic!("{}: {e}", case.name));
        std::fs::write(case_dir.join("sector"), built.sector.to_string()).expect("sector file");
    }
    let args = [corpus.display().to_string(), dir.rw().display().to_string()];
    lab::run(&dir, &[], "tables.sh", &args);
    let results: std::collections::HashMap<String, Value> = dir.results().into_iter().collect();
    let mut failed = Vec::new();
    for case in &cases {
        let mismatches = match results.get(&case.name) {
            Some(r) => kernel_mismatches(r),
            None => vec!["the guest wrote no result".to_string()],
        };
        let r = results.get(&case.name).unwrap_or(&Value::Null);
        let verdict = if mismatches.is_empty() { "ok" } else { "MISMATCH" };
        println!("{verdict:<8} {}: kernel {}", case.name, r["kernel"]);
        if !mismatches.is_empty() {
            failed.push(format!("{}:\n    {}", case.name, mismatches.join("\n    ")));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} cases disagree with the kernel:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
}

/// Problems that say the kernel ignores a GPT (it is booted without `gpt`).
const KERNEL_IGNORES_GPT: &[&str] =
    &["gpt_primary_invalid", "gpt_ignored_by_linux", "gpt_without_protective_mbr"];

/// How the kernel's partitions (sysfs) differ from what blkalign's audit
/// of the same loop device says the kernel should have.
fn kernel_mismatches(r: &Value) -> Vec<String> {
    if !r["error"].is_null() {
        return vec![format!("the guest could not attach it: {}", r["stderr"])];
    }
    let t = &r["audit"]["targets"][0];
    let codes: Vec<&str> =
        t["problems"].as_array().into_iter().flatten().filter_map(|p| p["code"].as_str()).collect();
    let mut out = Vec::new();
    if codes.contains(&"kernel_differs") {
        out.push(format!("blkalign says the kernel has not re-read the table: {}", t["problems"]));
    }
    let mut kernel: Vec<(u64, u64, u64)> = r["kernel"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|k| {
            (
                k[0].as_u64().unwrap_or(0),
                k[1].as_u64().unwrap_or(0) * 512,
                k[2].as_u64().unwrap_or(0) * 512,
            )
        })
        .collect();
    kernel.sort_unstable();
    if codes.contains(&"kernel_reads_boot_code") {
        if kernel.is_empty() {
            out.push("kernel_reads_boot_code, but the kernel made no partition".to_string());
        }
        return out;
    }
    let expected = if codes.iter().any(|c| KERNEL_IGNORES_GPT.contains(c)) {
        Vec::new()
    } else {
        kernel_view(t, r["size_512"].as_u64().unwrap_or(0) * 512)
    };
    if kernel != expected {
        out.push(format!(
            "the kernel has {kernel:?}, blkalign expects {expected:?} (problems {codes:?})"
        ));
    }
    out
}

/// The partitions (number, start, length in bytes) the kernel makes of
/// blkalign's reading: an extended partition is a node of max(1 KiB, one
/// sector) (msdos.c), a GPT entry ending past the last LBA is dropped
/// (efi.c, is_pte_valid), any other start past the end is dropped and an
/// end past it cut (block/partitions/core.c, blk_add_partition).
fn kernel_view(t: &Value, disk: u64) -> Vec<(u64, u64, u64)> {
    let ss = t["logical_sector_size"].as_u64().unwrap_or(0);
    let gpt = t["table"] == "gpt";
    let mut parts: Vec<(u64, u64, u64)> = t["partitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let start = p["start"].as_u64()? * ss;
            let size = p["size"].as_u64()? * ss;
            let len = if p["kind"] == "extended" { size.min(ss.max(1024)) } else { size };
            let past_end = start + size > disk;
            let dropped = start >= disk || (past_end && gpt);
            (!dropped).then(|| (p["number"].as_u64().unwrap_or(0), start, len.min(disk - start)))
        })
        .collect();
    parts.sort_unstable();
    parts
}
