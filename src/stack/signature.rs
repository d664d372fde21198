//! Recognising what a partition holds from its own headers, at the places
//! libblkid looks, so that our names agree with `blkid -p`.

use super::region::{has, text, Contents, Kind, Region};
use crate::io::{be_u16, be_u32, be_u64, le_u16, le_u32, le_u64, ReadAt};
use std::io;

/// The md superblock magic, little-endian on disk.
pub(crate) const MD_MAGIC: u32 = 0xa92b_4efc;
const LUKS_MAGIC: &[u8] = b"LUKS\xba\xbe";

/// What `dev` holds at byte `offset` (a partition of `size` bytes): None for
/// nothing recognised. Reads at most ~128 KiB near the start plus, for md
/// 1.0/0.90, near the end. Short/failed reads past the first sector mean
/// "not that signature"; an I/O error reading the first sector is returned.
pub fn identify(dev: &dyn ReadAt, offset: u64, size: u64) -> io::Result<Option<Contents>> {
    if size < 512 {
        return Ok(None);
    }
    let mut first = [0u8; 512];
    dev.read_exact_at(&mut first, offset)?;
    let region = Region { dev, offset, size };
    // libblkid's order: RAID and volume managers first, since a member's
    // data area may itself start with a file system.
    let probes: [Probe; 13] =
        [md, bcache, lvm, luks, exfat, ntfs, fat, swap, xfs, ext, btrfs, zfs, iso9660];
    Ok(probes.iter().find_map(|probe| probe(&region, &first)))
}

/// A recogniser, given the region and its first sector.
type Probe = fn(&Region, &[u8]) -> Option<Contents>;

fn md(region: &Region, first: &[u8]) -> Option<Contents> {
    md_superblock(region, first).map(|(_, _, found)| found)
}

/// Where an md superblock lies in the region (bytes), its version ("0.90",
/// "1.0", "1.1", "1.2": a 1.x version follows from the place) and what it
/// says.
pub(crate) fn md_superblock(
    region: &Region,
    first: &[u8],
) -> Option<(u64, &'static str, Contents)> {
    let sectors = region.size / 512;
    // 1.0 sits 8-16 KiB before the end on a 4 KiB boundary; 0.90 in the
    // last whole 64 KiB block; 1.1 at 0; 1.2 at 4 KiB.
    // Like blkid, look at the end only of regions over 64 KiB.
    let big = region.size > 65536;
    let v10 = sectors.checked_sub(16).map(|s| (s & !7) * 512).filter(|_| big);
    let v090 = (region.size / 65536).checked_sub(1).map(|blocks| blocks * 65536).filter(|_| big);
    let at_end = |at: Option<u64>| at.and_then(|at| region.bytes(at, 512).map(|sb| (at, sb)));
    if let Some((at, _)) = at_end(v090).filter(|(at, sb)| md090(sb, *at)) {
        return Some((at, "0.90", Contents::new(Kind::Md, "linux_raid_member")));
    }
    let start = || Some((0, first.to_vec()));
    let v12 = || region.bytes(4096, 512).map(|sb| (4096, sb));
    [at_end(v10), start(), v12()].into_iter().flatten().find_map(|(at, sb)| {
        let version = match at {
            0 => "1.1",
            4096 => "1.2",
            _ => "1.0",
        };
        md1(&sb, at).map(|found| (at, version, found))
    })
}

/// An md 0.90 superblock at byte `at`, written in its host's byte order;
/// the KiB it records as used must fit before it.
fn md090(sb: &[u8], at: u64) -> bool {
    let read = if le_u32(sb, 0) == Some(MD_MAGIC) {
        le_u32
    } else if be_u32(sb, 0) == Some(MD_MAGIC) {
        be_u32
    } else {
        return false;
    };
    let used = read(sb, 32).map(|kib| u64::from(kib) << 10);
    read(sb, 4) == Some(0) && used.is_some_and(|used| used <= at)
}

/// An md 1.x superblock found at byte `at`: it records its own position.
fn md1(sb: &[u8], at: u64) -> Option<Contents> {
    if le_u32(sb, 0)? != MD_MAGIC || le_u32(sb, 4)? != 1 || le_u64(sb, 144)? != at / 512 {
        return None;
    }
    // Members with the superblock in front hold data_offset + data_size.
    let size = match at {
        0 | 4096 => le_u64(sb, 128)?.checked_add(le_u64(sb, 136)?).and_then(|s| s.checked_mul(512)),
        _ => None,
    };
    // set_name is "host:name"; blkid's LABEL is all of it.
    Some(Contents::new(Kind::Md, "linux_raid_member").label(text(sb, 32, 32)).size(size))
}

/// A cache device says its size; a backing device's data runs to its end.
fn bcache(region: &Region, _: &[u8]) -> Option<Contents> {
    let sb = super::bcache::present(region)?;
    let parsed = super::bcache::parse(&sb).ok();
    let label = parsed.as_ref().and_then(|s| s.label.clone());
    Some(
        Contents::new(Kind::Bcache, "bcache").label(label).size(parsed.and_then(|s| s.cache_bytes)),
    )
}

fn lvm(region: &Region, first: &[u8]) -> Option<Contents> {
    lvm_label(region, first).and_then(|label| lvm_contents(&label))
}

/// The sector holding a valid LVM2 label, one of the first four: it
/// records its own sector and carries a CRC.
pub(crate) fn lvm_label(region: &Region, first: &[u8]) -> Option<Vec<u8>> {
    (0..4u64).find_map(|sector| {
        let buf = if sector == 0 { Some(first.to_vec()) } else { region.bytes(sector * 512, 512) };
        buf.filter(|buf| lvm_label_valid(buf, sector))
    })
}

fn lvm_label_valid(buf: &[u8], sector: u64) -> bool {
    has(buf, 0, b"LABELONE")
        && has(buf, 24, b"LVM2 001")
        && le_u64(buf, 8) == Some(sector)
        && buf.get(20..).map(lvm_crc).is_some_and(|crc| le_u32(buf, 16) == Some(crc))
}

fn lvm_contents(buf: &[u8]) -> Option<Contents> {
    let header = usize::try_from(le_u32(buf, 20)?).ok()?;
    // The PV header: a 32-byte UUID, then the device size it was made for.
    let size = le_u64(buf, header.checked_add(32)?).filter(|&s| s > 0);
    Some(Contents::new(Kind::LvmPv, "LVM2_member").size(size))
}

/// LVM's CRC-32: the IEEE polynomial seeded with 0xf597a6cf, no final XOR.
/// crc32fast inverts on the way in and out, so invert around it.
pub(crate) fn lvm_crc(data: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new_with_initial(!0xf597_a6cf);
    hasher.update(data);
    !hasher.finalize()
}

fn luks(_: &Region, first: &[u8]) -> Option<Contents> {
    if !has(first, 0, LUKS_MAGIC) {
        return None;
    }
    // Only LUKS2 has a label; the mapping takes the whole partition.
    let label = if be_u16(first, 6)? == 2 { text(first, 24, 48) } else { None };
    Some(Contents::new(Kind::Luks, "crypto_LUKS").label(label))
}

fn exfat(_: &Region, first: &[u8]) -> Option<Contents> {
    if !has(first, 3, b"EXFAT   ") || !has(first, 510, &[0x55, 0xAA]) {
        return None;
    }
    let shift = *first.get(108)?;
    if !(9..=12).contains(&shift) {
        return None;
    }
    let size = le_u64(first, 72)?.checked_mul(1 << shift);
    // The label lives in the root directory, which we do not walk.
    Some(Contents::new(Kind::Exfat, "exfat").size(size))
}

fn ntfs(_: &Region, first: &[u8]) -> Option<Contents> {
    if !has(first, 3, b"NTFS    ") {
        return None;
    }
    let bps = u64::from(le_u16(first, 11)?);
    if !bps.is_power_of_two() || !(256..=4096).contains(&bps) {
        return None;
    }
    // The backup boot sector lies in the sector just past the volume.
    let size = le_u64(first, 40)?.checked_add(1).and_then(|s| s.checked_mul(bps));
    // The label lives in the $Volume MFT record, which we do not walk.
    Some(Contents::new(Kind::Ntfs, "ntfs").size(size))
}

/// A FAT boot sector's BPB, checked hard enough that an MBR (also 0x55AA,
/// often with boot code at byte 0) never passes.
pub(crate) struct FatBpb {
    pub(crate) bytes_per_sector: u64,
    pub(crate) fat32: bool,
    pub(crate) total_sectors: u64,
    pub(crate) sectors_per_cluster: u64,
    /// Sectors before the data region: reserved, FATs, root directory.
    pub(crate) data_start_sectors: u64,
}

pub(crate) fn fat_bpb(boot: &[u8]) -> Option<FatBpb> {
    let jump_ok = matches!(boot.first()?, 0xEB | 0xE9);
    let bps = le_u16(boot, 11)?;
    let spc = *boot.get(13)?;
    let reserved = le_u16(boot, 14)?;
    let fats = *boot.get(16)?;
    let media = *boot.get(21)?;
    let sane = jump_ok
        && bps.is_power_of_two()
        && (512..=4096).contains(&bps)
        && spc.is_power_of_two()
        && reserved > 0
        && matches!(fats, 1 | 2)
        && (media == 0xF0 || media >= 0xF8)
        && has(boot, 510, &[0x55, 0xAA]);
    if !sane {
        return None;
    }
    let total16 = le_u16(boot, 19)?;
    let total = if total16 == 0 { le_u32(boot, 32)? } else { u32::from(total16) };
    let fat16_size = le_u16(boot, 22)?;
    let fat_size = if fat16_size == 0 { le_u32(boot, 36)? } else { u32::from(fat16_size) };
    // The root directory's 32-byte entries, in whole sectors.
    let root_sectors = (u64::from(le_u16(boot, 17)?) * 32).div_ceil(u64::from(bps));
    let data_start = u64::from(reserved) + u64::from(fats) * u64::from(fat_size) + root_sectors;
    Some(FatBpb {
        bytes_per_sector: u64::from(bps),
        fat32: fat16_size == 0,
        total_sectors: u64::from(total),
        sectors_per_cluster: u64::from(spc),
        data_start_sectors: data_start,
    })
}

fn fat(_: &Region, first: &[u8]) -> Option<Contents> {
    let bpb = fat_bpb(first)?;
    // The boot sector's copy of the label: blkid prefers the root
    // directory's, which mkfs and fatlabel keep equal.
    let label_at = if bpb.fat32 { 0x47 } else { 0x2B };
    let label = text(first, label_at, 11).filter(|l| l != "NO NAME");
    let size = bpb.total_sectors.checked_mul(bpb.bytes_per_sector);
    Some(Contents::new(Kind::Fat, "vfat").label(label).size(size))
}

fn swap(region: &Region, _: &[u8]) -> Option<Contents> {
    swap_page(region).and_then(|page| swap_at(region, page))
}

/// The page size a swap area was made for: where its magic ends.
pub(crate) fn swap_page(region: &Region) -> Option<u64> {
    [4096u64, 8192, 16384, 32768, 65536].into_iter().find(|&page| {
        region.bytes(page - 10, 10).is_some_and(|m| m == b"SWAPSPACE2" || m == b"SWAP-SPACE")
    })
}

fn swap_at(region: &Region, page: u64) -> Option<Contents> {
    let magic = region.bytes(page - 10, 10)?;
    // Version 1 header after 1 KiB of boot space: version, last_page,
    // nr_badpages, uuid, label.
    let header = region.bytes(1024, 44).unwrap_or_default();
    let v1 = magic == b"SWAPSPACE2" && le_u32(&header, 0) == Some(1);
    let (label, size) = if v1 {
        let last_page = le_u32(&header, 4).map(u64::from);
        (text(&header, 28, 16), last_page.and_then(|p| p.checked_add(1)?.checked_mul(page)))
    } else {
        (None, None)
    };
    Some(Contents::new(Kind::Swap, "swap").label(label).size(size))
}

fn xfs(_: &Region, first: &[u8]) -> Option<Contents> {
    if !has(first, 0, b"XFSB") {
        return None;
    }
    let block = be_u32(first, 4)?;
    if !block.is_power_of_two() || !(512..=65536).contains(&block) {
        return None;
    }
    let size = be_u64(first, 8)?.checked_mul(u64::from(block));
    Some(Contents::new(Kind::Xfs, "xfs").label(text(first, 108, 12)).size(size))
}

fn ext(region: &Region, _: &[u8]) -> Option<Contents> {
    let sb = region.bytes(1024, 512)?;
    if le_u16(&sb, 56)? != 0xEF53 {
        return None;
    }
    let compat = le_u32(&sb, 92)?;
    let incompat = le_u32(&sb, 96)?;
    let ro_compat = le_u32(&sb, 100)?;
    const HAS_JOURNAL: u32 = 0x4;
    const JOURNAL_DEV: u32 = 0x8;
    // What ext2 and ext3 understand: sparse_super, large_file, btree_dir
    // read-only features; filetype, meta_bg (and for ext3, recover).
    const RO_SUPP: u32 = 0x1 | 0x2 | 0x4;
    const EXT2_INCOMPAT_SUPP: u32 = 0x2 | 0x10;
    const EXT3_INCOMPAT_SUPP: u32 = EXT2_INCOMPAT_SUPP | 0x4;
    if incompat & JOURNAL_DEV != 0 {
        return None;
    }
    let journal = compat & HAS_JOURNAL != 0;
    let beyond = |incompat_supp: u32| ro_compat & !RO_SUPP != 0 || incompat & !incompat_supp != 0;
    let name = match journal {
        false if !beyond(EXT2_INCOMPAT_SUPP) => "ext2",
        true if !beyond(EXT3_INCOMPAT_SUPP) => "ext3",
        _ => "ext4",
    };
    const INCOMPAT_64BIT: u32 = 0x80;
    let lo = u64::from(le_u32(&sb, 4)?);
    let hi = if incompat & INCOMPAT_64BIT != 0 { u64::from(le_u32(&sb, 0x150)?) } else { 0 };
    let log = le_u32(&sb, 24)?;
    let block_size = (log <= 6).then(|| 1024u64 << log);
    let size = block_size.and_then(|b| (hi << 32 | lo).checked_mul(b));
    Some(Contents::new(Kind::Ext, name).label(text(&sb, 120, 16)).size(size))
}

fn btrfs(region: &Region, _: &[u8]) -> Option<Contents> {
    let sb = region.bytes(65536, 4096)?;
    if !has(&sb, 0x40, b"_BHRfS_M") {
        return None;
    }
    // dev_item.total_bytes: this device's share; the top-level total_bytes
    // covers every device of a multi-device file system.
    let size = le_u64(&sb, 0xc9 + 8).filter(|&s| s > 0);
    Some(Contents::new(Kind::Btrfs, "btrfs").label(text(&sb, 0x12b, 256)).size(size))
}

/// libblkid looks for ZFS only on regions of 64 MiB or more.
const ZFS_MIN: u64 = 64 << 20;

fn zfs(region: &Region, _: &[u8]) -> Option<Contents> {
    if region.size < ZFS_MIN {
        return None;
    }
    let label = super::zfs::label(region)?;
    Some(Contents::new(Kind::Zfs, "zfs_member").label(label.pool))
}

fn iso9660(region: &Region, _: &[u8]) -> Option<Contents> {
    let pvd = region.bytes(32768, 2048)?;
    if !has(&pvd, 1, b"CD001") {
        return None;
    }
    let blocks = u64::from(le_u32(&pvd, 80)?);
    let block = u64::from(le_u16(&pvd, 128)?);
    let size = blocks.checked_mul(block).filter(|&s| s > 0);
    Some(Contents::new(Kind::Iso9660, "iso9660").label(text(&pvd, 40, 32)).size(size))
}

/// The file system at `offset` and its UUID as blkid prints it (ext*,
/// XFS, btrfs: 8-4-4-4-12 hex; FAT: the volume serial, XXXX-XXXX): what
/// finds it again under any device name, as `root=UUID=` does.
pub fn fs_uuid(dev: &dyn ReadAt, offset: u64, size: u64) -> io::Result<Option<(Contents, String)>> {
    let Some(found) = identify(dev, offset, size)? else { return Ok(None) };
    let region = Region { dev, offset, size };
    let uuid = match found.kind {
        Kind::Ext => region.bytes(1024 + 0x68, 16).map(|b| dashed(&b)),
        Kind::Xfs => region.bytes(32, 16).map(|b| dashed(&b)),
        Kind::Btrfs => region.bytes(65536 + 0x20, 16).map(|b| dashed(&b)),
        Kind::Fat => region.bytes(0, 512).and_then(|b| {
            let at = if fat_bpb(&b)?.fat32 { 0x43 } else { 0x27 };
            let id = le_u32(&b, at)?;
            Some(format!("{:04X}-{:04X}", id >> 16, id & 0xffff))
        }),
        _ => None,
    };
    Ok(uuid.filter(|u| u.chars().any(|c| c != '0' && c != '-')).map(|u| (found, u)))
}

fn dashed(b: &[u8]) -> String {
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    [&hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]].join("-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::peers::{blkid_type, have, image, run, skip, try_run};

    /// Make an image of `len` bytes with `tool`, whose `args` may name the
    /// image as `{img}` and the scratch directory as `{dir}`; check that we
    /// and `blkid -p` both call it `expect`, and return what we found.
    fn peer(len: u64, tool: &str, args: &[&str], expect: &str) -> Option<Contents> {
        if !have(&[tool, "blkid"]) {
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let img = image(dir.path(), "img", len);
        let dir_str = dir.path().to_str().expect("UTF-8");
        let args: Vec<String> =
            args.iter().map(|a| a.replace("{img}", &img).replace("{dir}", dir_str)).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run(tool, &args);
        assert_eq!(blkid_type(&img), expect, "blkid disagrees with the test");
        let file = std::fs::File::open(&img).expect("open image");
        let found = identify(&file, 0, len).expect("identify").expect("recognised");
        assert_eq!(found.name, expect);
        Some(found)
    }

    const MIB: u64 = 1 << 20;

    #[test]
    fn ext_by_features() {
        for (tool, name) in [("mkfs.ext2", "ext2"), ("mkfs.ext3", "ext3"), ("mkfs.ext4", "ext4")] {
            let Some(c) = peer(64 * MIB, tool, &["-q", "-F", "-L", "root", "{img}"], name) else {
                return;
            };
            assert_eq!(
                (c.kind, c.label.as_deref(), c.size_bytes),
                (Kind::Ext, Some("root"), Some(64 * MIB))
            );
        }
    }

    #[test]
    fn xfs_and_btrfs() {
        if let Some(c) = peer(320 * MIB, "mkfs.xfs", &["-q", "-L", "data", "{img}"], "xfs") {
            assert_eq!((c.label.as_deref(), c.size_bytes), (Some("data"), Some(320 * MIB)));
        }
        if let Some(c) = peer(128 * MIB, "mkfs.btrfs", &["-q", "-L", "pool", "{img}"], "btrfs") {
            assert_eq!((c.label.as_deref(), c.size_bytes), (Some("pool"), Some(128 * MIB)));
        }
    }

    #[test]
    fn fat_12_16_32() {
        for bits in ["12", "16", "32"] {
            let args = ["-F", bits, "-h", "63", "-n", "BOOT", "{img}"];
            let Some(c) = peer(64 * MIB, "mkfs.vfat", &args, "vfat") else { return };
            assert_eq!((c.kind, c.label.as_deref()), (Kind::Fat, Some("BOOT")), "FAT{bits}");
            let size = c.size_bytes.expect("FAT size");
            assert!(size <= 64 * MIB && size > 63 * MIB, "FAT{bits}: {size}");
        }
    }

    #[test]
    fn exfat_and_ntfs() {
        if let Some(c) = peer(16 * MIB, "mkfs.exfat", &["{img}"], "exfat") {
            assert_eq!(c.size_bytes, Some(16 * MIB));
        }
        let args = ["-F", "-Q", "-q", "-p", "63", "-H", "255", "-S", "63", "{img}"];
        if let Some(c) = peer(16 * MIB, "mkntfs", &args, "ntfs") {
            assert_eq!(c.size_bytes, Some(16 * MIB));
        }
    }

    #[test]
    fn swap() {
        if let Some(c) = peer(16 * MIB, "mkswap", &["-L", "sw", "{img}"], "swap") {
            assert_eq!((c.label.as_deref(), c.size_bytes), (Some("sw"), Some(16 * MIB)));
        }
    }

    #[test]
    fn luks_1_and_2() {
        for version in ["luks1", "luks2"] {
            let args = [
                "luksFormat",
                "-q",
                "--type",
                version,
                "--pbkdf",
                "pbkdf2",
                "--pbkdf-force-iterations",
                "1000",
                "--key-file",
                "/etc/hostname",
                "{img}",
            ];
            let Some(c) = peer(32 * MIB, "cryptsetup", &args, "crypto_LUKS") else { return };
            assert_eq!((c.kind, c.size_bytes), (Kind::Luks, None));
        }
    }

    /// Detaches a loop device however the test ends.
    struct Loop(String);

    impl Drop for Loop {
        fn drop(&mut self) {
            let _ = try_run("losetup", &["-d", &self.0]);
        }
    }

    #[test]
    fn lvm_pv() {
        if !have(&["pvcreate", "losetup", "blkid"]) {
            return;
        }
        if !rustix::process::geteuid().is_root() {
            skip("root (pvcreate wants a loop device)");
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let img = image(dir.path(), "pv", 32 * MIB);
        let (ok, out) = try_run("losetup", &["-f", "--show", &img]);
        if !ok {
            skip(&format!("a loop device ({})", out.trim()));
            return;
        }
        let dev = Loop(out.trim().to_string());
        run("pvcreate", &["-q", &dev.0]);
        drop(dev);
        assert_eq!(blkid_type(&img), "LVM2_member");
        let file = std::fs::File::open(&img).expect("open");
        let c = identify(&file, 0, 32 * MIB).expect("identify").expect("recognised");
        assert_eq!((c.kind, c.name, c.size_bytes), (Kind::LvmPv, "LVM2_member", Some(32 * MIB)));
    }

    /// An md 1.x superblock at byte `at`, as mdadm writes it.
    fn md1_sb(img: &mut [u8], at: usize) {
        let sb = &mut img[at..at + 256];
        sb[0..4].copy_from_slice(&MD_MAGIC.to_le_bytes());
        sb[4..8].copy_from_slice(&1u32.to_le_bytes());
        sb[32..38].copy_from_slice(b"host:0");
        sb[128..136].copy_from_slice(&2048u64.to_le_bytes());
        sb[136..144].copy_from_slice(&1000u64.to_le_bytes());
        sb[144..152].copy_from_slice(&(at as u64 / 512).to_le_bytes());
    }

    fn md_090_sb(img: &mut [u8], at: usize) {
        img[at..at + 4].copy_from_slice(&MD_MAGIC.to_le_bytes());
        img[at + 8..at + 12].copy_from_slice(&90u32.to_le_bytes());
        img[at + 32..at + 36].copy_from_slice(&100u32.to_le_bytes());
    }

    /// Hand-built headers, with blkid as the oracle where it is installed.
    fn check_built(img: &[u8], expect: &str) -> Contents {
        if crate::emulate::which("blkid").is_some() {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("img");
            std::fs::write(&path, img).expect("write");
            assert_eq!(blkid_type(path.to_str().expect("UTF-8")), expect);
        }
        let found = identify(&img.to_vec(), 0, img.len() as u64).expect("identify");
        let found = found.unwrap_or_else(|| panic!("{expect} not recognised"));
        assert_eq!(found.name, expect);
        found
    }

    #[test]
    fn md_every_superblock_place() {
        // blkid looks for RAID only on regions over 1440 KiB.
        let len = 2 << 20;
        // 1.0 at (sectors - 16) & !7, 1.1 at 0, 1.2 at 4 KiB, 0.90 in the last 64 KiB.
        for (at, size) in [(len - 8192, None), (0, Some(3048 * 512)), (4096, Some(3048 * 512))] {
            let mut img = vec![0u8; len];
            md1_sb(&mut img, at);
            let c = check_built(&img, "linux_raid_member");
            assert_eq!((c.label.as_deref(), c.size_bytes), (Some("host:0"), size), "at {at}");
        }
        let mut img = vec![0u8; len + 4096];
        md_090_sb(&mut img, len - 65536);
        check_built(&img, "linux_raid_member");
        // A 1.x superblock must record its own place.
        let mut img = vec![0u8; len];
        md1_sb(&mut img, 4096);
        img[4096 + 144] = 7;
        assert_eq!(identify(&img, 0, len as u64).expect("identify"), None);
    }

    #[test]
    fn iso9660_primary_descriptor() {
        let mut img = vec![0u8; 40 * 2048];
        let pvd = &mut img[16 * 2048..17 * 2048];
        pvd[0] = 1;
        pvd[1..7].copy_from_slice(b"CD001\x01");
        pvd[40..72].copy_from_slice(&[b' '; 32]);
        pvd[40..46].copy_from_slice(b"DISC_1");
        pvd[80..84].copy_from_slice(&40u32.to_le_bytes());
        pvd[84..88].copy_from_slice(&40u32.to_be_bytes());
        pvd[128..130].copy_from_slice(&2048u16.to_le_bytes());
        pvd[130..132].copy_from_slice(&2048u16.to_be_bytes());
        let end = &mut img[17 * 2048..17 * 2048 + 7];
        end.copy_from_slice(b"\xffCD001\x01");
        let c = check_built(&img, "iso9660");
        assert_eq!((c.label.as_deref(), c.size_bytes), (Some("DISC_1"), Some(40 * 2048)));
    }

    #[test]
    fn lvm_label_in_sector_one() {
        let mut img = vec![0u8; 2 << 20];
        let label = &mut img[512..1024];
        label[0..8].copy_from_slice(b"LABELONE");
        label[8..16].copy_from_slice(&1u64.to_le_bytes());
        label[20..24].copy_from_slice(&32u32.to_le_bytes());
        label[24..32].copy_from_slice(b"LVM2 001");
        label[64..72].copy_from_slice(&(2u64 << 20).to_le_bytes());
        let crc = lvm_crc(&label[20..]);
        label[16..20].copy_from_slice(&crc.to_le_bytes());
        let c = check_built(&img, "LVM2_member");
        assert_eq!(c.size_bytes, Some(2 << 20));
        img[600] ^= 1;
        assert_eq!(identify(&img, 0, 2 << 20).expect("identify"), None, "bad CRC");
    }

    #[test]
    fn mbr_is_not_fat() {
        // GRUB's MBR starts with a short jump, as a FAT boot sector does.
        let mut img = vec![0u8; 1 << 20];
        img[..3].copy_from_slice(&[0xEB, 0x63, 0x90]);
        img[446 + 4] = 0x83;
        img[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
        img[446 + 12..446 + 16].copy_from_slice(&2048u32.to_le_bytes());
        img[510..512].copy_from_slice(&[0x55, 0xAA]);
        assert_eq!(identify(&img, 0, 1 << 20).expect("identify"), None);
    }

    #[test]
    fn found_at_an_offset_and_not_past_the_region() {
        if !have(&["mkfs.ext4"]) {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let path = image(dir.path(), "img", 8 * MIB);
        run("mkfs.ext4", &["-q", "-F", &path]);
        let fs = std::fs::read(&path).expect("read");
        let mut disk = vec![0xA5u8; 63 * 512];
        disk.extend_from_slice(&fs);
        let c = identify(&disk, 63 * 512, 8 * MIB).expect("identify").expect("recognised");
        assert_eq!(c.name, "ext4");
        // The superblock lies past a 1 KiB region: nothing, and no error.
        assert_eq!(identify(&disk, 63 * 512, 1024).expect("identify"), None);
        assert_eq!(identify(&disk, 0, 8 * MIB).expect("identify"), None);
    }

    #[test]
    fn unreadable_first_sector_is_an_error() {
        let img = vec![0u8; 100];
        assert!(identify(&img, 0, 4096).is_err());
        assert_eq!(identify(&img, 0, 100).expect("too small"), None);
        assert_eq!(identify(&vec![0u8; 1 << 17], 0, 1 << 17).expect("zeros"), None);
    }

    mod prop {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn random_bytes_never_panic(
                len in 0usize..200 * 1024,
                seed in any::<u64>(),
                offset in 0u64..1 << 50,
                size in 0u64..1 << 50,
                magic in 0usize..6,
            ) {
                let mut bytes = crate::stack::random_bytes(len, seed);
                // Plant a magic now and then so the deeper parsers run.
                let plant: &[(usize, &[u8])] = &[
                    (3, b"NTFS    "), (3, b"EXFAT   "), (0, b"XFSB"), (0, b"LUKS\xba\xbe"),
                    (1080, b"\x53\xef"), (4096, b"\xfc\x4e\x2b\xa9\x01\x00\x00\x00"),
                ];
                let (at, m) = plant[magic];
                if let Some(dst) = bytes.get_mut(at..at + m.len()) {
                    dst.copy_from_slice(m);
                }
                let len = bytes.len() as u64;
                for (off, sz) in [(0, len), (0, size), (offset % (len + 1), len), (offset, size)] {
                    let _ = identify(&bytes, off, sz);
                }
            }
        }
    }
}
