//! Fields in which FAT, NTFS and exFAT record where their partition starts,
//! and the patches that keep them true when a partition moves: Windows and
//! fsck check them, and boot code uses them to find the volume.

use super::region::{Kind, Region};
use super::signature::{fat_bpb, identify};
use crate::io::{le_u16, le_u32, le_u64, ReadAt};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Bytes to replace at `offset` (relative to the partition's first byte);
/// `old` is what is there now (checked again before writing), `new` what
/// goes there. Always whole sectors of the table's sector size, `offset` a
/// multiple of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Patch {
    pub offset: u64,
    pub old: Vec<u8>,
    pub new: Vec<u8>,
    pub what: String,
}

#[derive(Debug, thiserror::Error)]
pub enum StackError {
    #[error("cannot read the partition's contents: {0}")]
    Io(#[from] std::io::Error),
    #[error("inconsistent header: {0}")]
    Header(String),
}

fn header(message: impl Into<String>) -> StackError {
    StackError::Header(message.into())
}

/// The patches that make the contents of a partition agree with a move from
/// `old_start` to `new_start` (LBAs in `sector_size` units of the partition
/// table). `offset`/`size` locate the partition at its OLD position in
/// `dev`. Returns the patches and notes in words.
pub fn start_fixups(
    dev: &dyn ReadAt,
    offset: u64,
    size: u64,
    sector_size: u64,
    old_start: u64,
    new_start: u64,
) -> Result<(Vec<Patch>, Vec<String>), StackError> {
    if !crate::units::is_sector_size(sector_size, 4096) {
        return Err(header(format!("unsupported sector size {sector_size}")));
    }
    let Some(contents) = identify(dev, offset, size)? else { return Ok((Vec::new(), Vec::new())) };
    let mut fix = Fixup {
        edits: Editor::new(Region { dev, offset, size }, sector_size),
        start: Move { old: old_start, new: new_start, sector_size },
        notes: Vec::new(),
    };
    match contents.kind {
        Kind::Fat => fix.fat()?,
        Kind::Ntfs => fix.ntfs()?,
        Kind::Exfat => fix.exfat()?,
        _ => {}
    }
    Ok((fix.edits.patches(), fix.notes))
}

/// A partition's start before and after, in table sectors.
struct Move {
    old: u64,
    new: u64,
    sector_size: u64,
}

/// What to do with a recorded start.
enum Verdict {
    Set(u64),
    Zero,
    Other,
}

impl Move {
    /// The recorded `value`, in units of `unit` bytes, judged against the
    /// old start: in table sectors (some tools write those whatever the
    /// volume's own sector size) or converted to `unit`.
    fn judge(&self, value: u64, unit: u64) -> Result<Verdict, StackError> {
        if value == self.old {
            return Ok(Verdict::Set(self.new));
        }
        let old_bytes = self.old.checked_mul(self.sector_size);
        if unit > 0 && old_bytes.is_some_and(|b| b % unit == 0 && b / unit == value) {
            let new_bytes = self.new.checked_mul(self.sector_size).filter(|b| b % unit == 0);
            let new_bytes = new_bytes.ok_or_else(|| {
                header(format!("new start LBA {} is not a whole {unit}-byte sector", self.new))
            })?;
            return Ok(Verdict::Set(new_bytes / unit));
        }
        Ok(if value == 0 { Verdict::Zero } else { Verdict::Other })
    }
}

struct Fixup<'a> {
    edits: Editor<'a>,
    start: Move,
    notes: Vec<String>,
}

impl Fixup<'_> {
    fn fat(&mut self) -> Result<(), StackError> {
        let boot = self.edits.read(0, 512)?;
        let bpb = fat_bpb(&boot).ok_or_else(|| header("FAT boot sector no longer valid"))?;
        let name = if bpb.fat32 { "FAT32" } else { "FAT" };
        let Some((hidden, new)) = self.hidden_sectors(&boot, name, bpb.bytes_per_sector)? else {
            return Ok(());
        };
        let field = format!("{name}: hidden sectors");
        self.edits.write(0x1C, &new.to_le_bytes(), &field)?;
        let mut note = format!("{field} {hidden} → {new} in the boot sector");
        if bpb.fat32 {
            let backup = read_u16(&boot, 0x32)?;
            let at = u64::from(backup).checked_mul(bpb.bytes_per_sector);
            match at.filter(|&at| at > 0 && self.same_boot_sector(&boot, at)) {
                None if backup == 0 => note.push_str("; it has no backup boot sector"),
                Some(at) => {
                    self.edits.write(
                        at.saturating_add(0x1C),
                        &new.to_le_bytes(),
                        &format!("{field} (backup)"),
                    )?;
                    note.push_str(&format!(" and its backup at sector {backup}"));
                }
                None => note.push_str(&format!(
                    "; the backup boot sector (sector {backup}) does not match it: left as it is"
                )),
            }
        }
        self.notes.push(note);
        Ok(())
    }

    /// The boot sector's hidden-sectors field (the BPB's, in `unit`-byte
    /// sectors) now and after the move, when it must change.
    fn hidden_sectors(
        &mut self,
        boot: &[u8],
        fs: &str,
        unit: u64,
    ) -> Result<Option<(u32, u32)>, StackError> {
        let hidden = read_u32(boot, 0x1C)?;
        match self.start.judge(u64::from(hidden), unit)? {
            Verdict::Set(new) => {
                let new = u32::try_from(new).map_err(|_| {
                    header(format!("{fs}: hidden sectors {new} does not fit in 32 bits"))
                })?;
                Ok((new != hidden).then_some((hidden, new)))
            }
            verdict => {
                self.leave(fs, "hidden sectors", hidden.into(), verdict);
                Ok(None)
            }
        }
    }

    /// Whether the sector at byte `at` is a copy of `boot` (FAT32 BPB
    /// through the extended fields, and the signature).
    fn same_boot_sector(&self, boot: &[u8], at: u64) -> bool {
        let Ok(copy) = self.edits.read(at, 512) else { return false };
        copy.get(..0x5A) == boot.get(..0x5A) && copy.get(510..) == boot.get(510..)
    }

    fn ntfs(&mut self) -> Result<(), StackError> {
        let boot = self.edits.read(0, 512)?;
        let bps = u64::from(read_u16(&boot, 11)?);
        let Some((hidden, new)) = self.hidden_sectors(&boot, "NTFS", bps)? else { return Ok(()) };
        self.edits.write(0x1C, &new.to_le_bytes(), "NTFS: hidden sectors")?;
        let mut note = format!("NTFS: hidden sectors {hidden} → {new} in the boot sector");
        let total = le_u64(&boot, 0x28).unwrap_or_default();
        let backup = total.checked_mul(bps);
        let found = backup.filter(|&at| {
            self.edits.read(at, 512).is_ok_and(|copy| copy.get(3..11) == Some(b"NTFS    "))
        });
        match found {
            Some(at) => {
                self.edits.write(
                    at.saturating_add(0x1C),
                    &new.to_le_bytes(),
                    "NTFS: hidden sectors (backup)",
                )?;
                note.push_str(&format!(" and its backup at sector {total}"));
            }
            None => note.push_str(&format!(
                "; no backup boot sector at sector {total} (past the partition or not NTFS)"
            )),
        }
        self.notes.push(note);
        Ok(())
    }

    fn exfat(&mut self) -> Result<(), StackError> {
        let boot = self.edits.read(0, 512)?;
        let shift = *boot.get(108).ok_or_else(|| header("exFAT: short boot sector"))?;
        if !(9..=12).contains(&shift) {
            return Err(header(format!("exFAT: bytes-per-sector shift {shift} out of 9..12")));
        }
        let unit = 1u64 << shift;
        let recorded = le_u64(&boot, 64).ok_or_else(|| header("exFAT: short boot sector"))?;
        let new = match self.start.judge(recorded, unit)? {
            Verdict::Set(new) if new != recorded => new,
            Verdict::Set(_) => return Ok(()),
            verdict => {
                self.leave("exFAT", "PartitionOffset", recorded, verdict);
                return Ok(());
            }
        };
        let mut regions = vec![0];
        let backup = self.edits.read(12 * unit, 512).ok().and_then(|b| le_u64(&b, 64));
        if backup == Some(recorded) {
            regions.push(12);
        }
        for &region in &regions {
            let at = region * unit;
            let what = if region == 0 {
                "exFAT: PartitionOffset"
            } else {
                "exFAT: backup PartitionOffset"
            };
            self.edits.write(at + 64, &new.to_le_bytes(), what)?;
            let sum = exfat_checksum(&self.edits.read(at, 11 * unit)?, unit);
            let sums: Vec<u8> = (0..unit / 4).flat_map(|_| sum.to_le_bytes()).collect();
            self.edits.write(at + 11 * unit, &sums, "exFAT: boot checksum")?;
        }
        let place = if regions.len() == 2 {
            "in the main and backup boot regions (checksums recomputed)"
        } else {
            "in the main boot region (checksum recomputed; the backup region differs: left as it is)"
        };
        self.notes.push(format!("exFAT: PartitionOffset {recorded} → {new} {place}"));
        Ok(())
    }

    /// Note a start field left alone.
    fn leave(&mut self, fs: &str, field: &str, value: u64, verdict: Verdict) {
        let old = self.start.old;
        self.notes.push(match verdict {
            Verdict::Zero => format!("{fs}: {field} is 0 (made on an image): left as it is"),
            _ => format!("{fs}: {field} is {value}, not the old start {old}: left as it is"),
        });
    }
}

fn read_u16(buf: &[u8], at: usize) -> Result<u16, StackError> {
    le_u16(buf, at).ok_or_else(|| header("short boot sector"))
}

fn read_u32(buf: &[u8], at: usize) -> Result<u32, StackError> {
    le_u32(buf, at).ok_or_else(|| header("short boot sector"))
}

/// The exFAT boot checksum over sectors 0-10 of a boot region (`sectors`),
/// skipping VolumeFlags (106, 107) and PercentInUse (112), which change
/// without the checksum being rewritten.
fn exfat_checksum(sectors: &[u8], unit: u64) -> u32 {
    let span = usize::try_from(unit.saturating_mul(11)).unwrap_or(usize::MAX);
    sectors.iter().take(span).enumerate().fold(0u32, |sum, (i, &byte)| {
        if matches!(i, 106 | 107 | 112) {
            sum
        } else {
            sum.rotate_right(1).wrapping_add(u32::from(byte))
        }
    })
}

/// Pending changes to a partition, kept per table sector so that edits to
/// one sector (two fields, or a field and a checksum) merge into one patch.
struct Editor<'a> {
    region: Region<'a>,
    sector_size: u64,
    sectors: BTreeMap<u64, Sector>,
}

struct Sector {
    old: Vec<u8>,
    new: Vec<u8>,
    what: Vec<String>,
}

impl<'a> Editor<'a> {
    fn new(region: Region<'a>, sector_size: u64) -> Self {
        Self { region, sector_size, sectors: BTreeMap::new() }
    }

    /// The table sectors covering `len` bytes at `at`, loaded.
    fn load(&mut self, at: u64, len: u64) -> Result<std::ops::RangeInclusive<u64>, StackError> {
        let span = self.span(at, len)?;
        for lba in span.clone() {
            if let std::collections::btree_map::Entry::Vacant(slot) = self.sectors.entry(lba) {
                let old = self.region.bytes_or_err(lba * self.sector_size, self.sector_size)?;
                slot.insert(Sector { new: old.clone(), old, what: Vec::new() });
            }
        }
        Ok(span)
    }

    fn span(&self, at: u64, len: u64) -> Result<std::ops::RangeInclusive<u64>, StackError> {
        let end = at.checked_add(len).filter(|&end| len > 0 && end <= self.region.size);
        let end =
            end.ok_or_else(|| header(format!("{len} bytes at {at} lie past the partition")))?;
        Ok(at / self.sector_size..=(end - 1) / self.sector_size)
    }

    /// `len` bytes at `at`, with pending edits applied.
    fn read(&self, at: u64, len: u64) -> Result<Vec<u8>, StackError> {
        let span = self.span(at, len)?;
        let mut out = Vec::new();
        for lba in span.clone() {
            match self.sectors.get(&lba) {
                Some(sector) => out.extend_from_slice(&sector.new),
                None => {
                    out.extend(self.region.bytes_or_err(lba * self.sector_size, self.sector_size)?)
                }
            }
        }
        let skip = usize::try_from(at - span.start() * self.sector_size).unwrap_or(usize::MAX);
        let want = usize::try_from(len).unwrap_or(usize::MAX);
        out.get(skip..skip.saturating_add(want))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| header("short read"))
    }

    fn write(&mut self, at: u64, bytes: &[u8], what: &str) -> Result<(), StackError> {
        let len = u64::try_from(bytes.len()).map_err(|_| header("edit too long"))?;
        let span = self.load(at, len)?;
        let ss = self.sector_size;
        for lba in span {
            let Some(sector) = self.sectors.get_mut(&lba) else { continue };
            let first = lba * ss;
            // The part of `bytes` that falls in this sector.
            let from = at.max(first);
            let to = (at + len).min(first.saturating_add(ss));
            let src = bytes.get(idx(from - at)?..idx(to - at)?);
            let dst = sector.new.get_mut(idx(from - first)?..idx(to - first)?);
            match (src, dst) {
                (Some(src), Some(dst)) => dst.copy_from_slice(src),
                _ => return Err(header("edit out of range")),
            }
            if !sector.what.iter().any(|w| w == what) {
                sector.what.push(what.to_string());
            }
        }
        Ok(())
    }

    /// One patch per changed sector, in disk order.
    fn patches(self) -> Vec<Patch> {
        let ss = self.sector_size;
        self.sectors
            .into_iter()
            .filter(|(_, s)| s.old != s.new)
            .map(|(lba, s)| Patch {
                offset: lba * ss,
                old: s.old,
                new: s.new,
                what: s.what.join("; "),
            })
            .collect()
    }
}

fn idx(n: u64) -> Result<usize, StackError> {
    usize::try_from(n).map_err(|_| header("offset too large"))
}

impl Region<'_> {
    fn bytes_or_err(&self, at: u64, len: u64) -> Result<Vec<u8>, StackError> {
        let mut buf = vec![0u8; idx(len)?];
        let pos = self.offset.checked_add(at).ok_or_else(|| header("offset overflows"))?;
        self.dev.read_exact_at(&mut buf, pos)?;
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::peers::{have, image, run, try_run};

    const MIB: u64 = 1 << 20;

    /// An image made by `tool` (`args`, then the image path), read back.
    fn made(len: u64, tool: &str, args: &[&str]) -> Option<(tempfile::TempDir, String, Vec<u8>)> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = image(dir.path(), "img", len);
        let mut all = args.to_vec();
        all.push(&path);
        run(tool, &all);
        let bytes = std::fs::read(&path).expect("read image");
        Some((dir, path, bytes))
    }

    /// Apply patches as a writer would: `old` must still be there.
    fn apply(img: &mut [u8], patches: &[Patch], sector_size: u64) {
        for p in patches {
            assert_eq!(p.offset % sector_size, 0, "{p:?}");
            assert_eq!(p.new.len() as u64 % sector_size, 0);
            let at = p.offset as usize;
            let there = &mut img[at..at + p.new.len()];
            assert_eq!(there, &p.old[..], "{}", p.what);
            there.copy_from_slice(&p.new);
        }
    }

    #[allow(clippy::ptr_arg)] // &Vec<u8>, not &[u8], coerces to &dyn ReadAt
    fn fixups(img: &Vec<u8>, ss: u64, old: u64, new: u64) -> (Vec<Patch>, Vec<String>) {
        start_fixups(img, 0, img.len() as u64, ss, old, new).expect("fixups")
    }

    fn u32_at(img: &[u8], at: usize) -> u32 {
        le_u32(img, at).expect("in range")
    }

    /// Write the patched image back and run a checker that must be content.
    fn check_clean(path: &str, img: &[u8], tool: &str, args: &[&str]) {
        std::fs::write(path, img).expect("write image");
        let mut all = args.to_vec();
        all.push(path);
        let (ok, out) = try_run(tool, &all);
        assert!(ok, "{tool} unhappy:\n{out}");
        assert!(!out.to_lowercase().contains("differ"), "{tool}:\n{out}");
    }

    #[test]
    fn fat32_main_and_backup_boot_sector() {
        if !have(&["mkfs.vfat", "fsck.vfat"]) {
            return;
        }
        let Some((_dir, path, mut img)) = made(64 * MIB, "mkfs.vfat", &["-F", "32", "-h", "63"])
        else {
            return;
        };
        let (patches, notes) = fixups(&img, 512, 63, 64);
        assert_eq!(patches.iter().map(|p| p.offset).collect::<Vec<_>>(), [0, 6 * 512]);
        assert_eq!(
            notes,
            ["FAT32: hidden sectors 63 → 64 in the boot sector and its backup at sector 6"]
        );
        apply(&mut img, &patches, 512);
        assert_eq!((u32_at(&img, 0x1C), u32_at(&img, 6 * 512 + 0x1C)), (64, 64));
        check_clean(&path, &img, "fsck.vfat", &["-n"]);
        // Applied, nothing is left to do.
        assert!(fixups(&img, 512, 64, 64).0.is_empty());
    }

    #[test]
    fn fat16_and_hidden_zero() {
        if !have(&["mkfs.vfat", "fsck.vfat"]) {
            return;
        }
        let Some((_dir, path, mut img)) = made(32 * MIB, "mkfs.vfat", &["-F", "16", "-h", "63"])
        else {
            return;
        };
        let (patches, notes) = fixups(&img, 512, 63, 2048);
        assert_eq!(patches.len(), 1);
        assert_eq!(notes, ["FAT: hidden sectors 63 → 2048 in the boot sector"]);
        apply(&mut img, &patches, 512);
        assert_eq!(u32_at(&img, 0x1C), 2048);
        check_clean(&path, &img, "fsck.vfat", &["-n"]);

        img[0x1C..0x20].fill(0);
        let (patches, notes) = fixups(&img, 512, 63, 64);
        assert!(patches.is_empty());
        assert_eq!(notes, ["FAT: hidden sectors is 0 (made on an image): left as it is"]);
        let (patches, notes) = fixups(&img, 512, 0, 64);
        assert_eq!((patches.len(), notes.len()), (1, 1), "0 is the old start: {notes:?}");

        img[0x1C] = 5;
        let (patches, notes) = fixups(&img, 512, 63, 64);
        assert!(patches.is_empty());
        assert_eq!(notes, ["FAT: hidden sectors is 5, not the old start 63: left as it is"]);
    }

    #[test]
    fn fat32_on_4096_byte_table_sectors() {
        if !have(&["mkfs.vfat", "fsck.vfat"]) {
            return;
        }
        // 512-byte FAT sectors: the start is recorded in those, 8 × 8 = 64.
        let Some((_dir, path, mut img)) = made(64 * MIB, "mkfs.vfat", &["-F", "32", "-h", "64"])
        else {
            return;
        };
        let (patches, _) = fixups(&img, 4096, 8, 9);
        // Boot sector and backup (byte 3072) share table sector 0.
        assert_eq!(patches.len(), 1);
        assert_eq!(patches[0].new.len(), 4096);
        apply(&mut img, &patches, 4096);
        assert_eq!((u32_at(&img, 0x1C), u32_at(&img, 3072 + 0x1C)), (72, 72));
        check_clean(&path, &img, "fsck.vfat", &["-n"]);
    }

    #[test]
    fn fat_hidden_sectors_overflow() {
        if !have(&["mkfs.vfat"]) {
            return;
        }
        let Some((_dir, _, img)) = made(32 * MIB, "mkfs.vfat", &["-F", "16", "-h", "63"]) else {
            return;
        };
        let err = start_fixups(&img, 0, img.len() as u64, 512, 63, 1 << 32).unwrap_err();
        assert!(matches!(err, StackError::Header(ref m) if m.contains("32 bits")), "{err}");
    }

    /// Record `offset` as exFAT's PartitionOffset in both boot regions, as
    /// a formatter on a partition would.
    fn set_exfat_offset(img: &mut [u8], offset: u64) {
        for region in [0, 12 * 512] {
            img[region + 64..region + 72].copy_from_slice(&offset.to_le_bytes());
            let sum = exfat_checksum(&img[region..region + 11 * 512], 512);
            for word in img[region + 11 * 512..region + 12 * 512].chunks_mut(4) {
                word.copy_from_slice(&sum.to_le_bytes());
            }
        }
    }

    fn exfat_offsets(img: &[u8]) -> (u64, u64) {
        (le_u64(img, 64).expect("main"), le_u64(img, 12 * 512 + 64).expect("backup"))
    }

    #[test]
    fn exfat_partition_offset_and_checksums() {
        if !have(&["mkfs.exfat", "fsck.exfat"]) {
            return;
        }
        let Some((_dir, path, mut img)) = made(16 * MIB, "mkfs.exfat", &[]) else { return };
        // mkfs.exfat on a file records 0.
        assert_eq!(exfat_offsets(&img), (0, 0));
        let (patches, notes) = fixups(&img, 512, 63, 64);
        assert!(patches.is_empty());
        assert_eq!(notes, ["exFAT: PartitionOffset is 0 (made on an image): left as it is"]);

        set_exfat_offset(&mut img, 63);
        // fsck.exfat checks the boot checksum: this vets exfat_checksum too.
        check_clean(&path, &img, "fsck.exfat", &["-n"]);
        let (patches, notes) = fixups(&img, 512, 63, 64);
        let offsets: Vec<u64> = patches.iter().map(|p| p.offset / 512).collect();
        assert_eq!(offsets, [0, 11, 12, 23]);
        assert!(notes[0].starts_with("exFAT: PartitionOffset 63 → 64 in the main and backup"));
        apply(&mut img, &patches, 512);
        assert_eq!(exfat_offsets(&img), (64, 64));
        check_clean(&path, &img, "fsck.exfat", &["-n"]);

        // On 4096-byte table sectors the whole boot regions sit in sectors 0-2.
        let (patches, _) = fixups(&img, 4096, 8, 9);
        assert_eq!(patches.iter().map(|p| p.offset).collect::<Vec<_>>(), [0, 4096, 8192]);
        apply(&mut img, &patches, 4096);
        assert_eq!(exfat_offsets(&img), (72, 72));
        check_clean(&path, &img, "fsck.exfat", &["-n"]);
    }

    #[test]
    fn ntfs_main_and_backup_boot_sector() {
        if !have(&["mkntfs", "ntfsfix"]) {
            return;
        }
        let args = ["-F", "-Q", "-q", "-p", "63", "-H", "255", "-S", "63"];
        let Some((_dir, path, mut img)) = made(16 * MIB, "mkntfs", &args) else { return };
        let last = img.len() - 512;
        assert_eq!((u32_at(&img, 0x1C), u32_at(&img, last + 0x1C)), (63, 63));
        let (patches, notes) = fixups(&img, 512, 63, 64);
        assert_eq!(patches.iter().map(|p| p.offset).collect::<Vec<_>>(), [0, last as u64]);
        assert_eq!(
            notes,
            ["NTFS: hidden sectors 63 → 64 in the boot sector and its backup at sector 32767"]
        );
        apply(&mut img, &patches, 512);
        assert_eq!((u32_at(&img, 0x1C), u32_at(&img, last + 0x1C)), (64, 64));
        check_clean(&path, &img, "ntfsfix", &["-n"]);
    }

    #[test]
    fn others_need_nothing() {
        if !have(&["mkfs.ext4"]) {
            return;
        }
        let Some((_dir, _, img)) = made(8 * MIB, "mkfs.ext4", &["-q", "-F"]) else { return };
        assert_eq!(fixups(&img, 512, 63, 64), (vec![], vec![]));
        assert_eq!(fixups(&vec![0u8; 8192], 512, 63, 64), (vec![], vec![]));
    }

    #[test]
    fn bad_sector_size_is_refused() {
        let img = vec![0u8; 8192];
        assert!(matches!(start_fixups(&img, 0, 8192, 520, 63, 64), Err(StackError::Header(_))));
    }

    mod prop {
        use super::super::*;
        use proptest::prelude::*;

        /// A boot sector sane enough that the FAT, NTFS or exFAT path runs.
        fn plant(bytes: &mut [u8], which: u8) {
            let Some(boot) = bytes.get_mut(..512) else { return };
            boot[510..512].copy_from_slice(&[0x55, 0xAA]);
            match which % 3 {
                0 => {
                    boot[0] = 0xEB;
                    boot[11..14].copy_from_slice(&[0, 2, 1]);
                    boot[14] = boot[14].max(1);
                    boot[16] = 2;
                    boot[21] = 0xF8;
                }
                1 => boot[3..11].copy_from_slice(b"NTFS    "),
                _ => {
                    boot[3..11].copy_from_slice(b"EXFAT   ");
                    boot[108] = 9 + which % 4;
                }
            }
        }

        proptest! {
            #[test]
            fn random_bytes_never_panic(
                len in 0usize..200 * 1024,
                seed in any::<u64>(),
                which in any::<u8>(),
                offset in 0u64..1 << 50,
                size in 0u64..1 << 50,
                ss_shift in 9u32..13,
                old in prop_oneof![0u64..200, any::<u64>()],
                new in prop_oneof![0u64..200, any::<u64>()],
                hidden_is_old in any::<bool>(),
            ) {
                let mut bytes = crate::stack::random_bytes(len, seed);
                plant(&mut bytes, which);
                if hidden_is_old && bytes.len() >= 512 {
                    bytes[0x1C..0x20].copy_from_slice(&(old as u32).to_le_bytes());
                    bytes[64..72].copy_from_slice(&old.to_le_bytes());
                }
                let ss = 1u64 << ss_shift;
                let len = bytes.len() as u64;
                for (off, sz) in [(0, len), (0, size), (offset, size)] {
                    let _ = start_fixups(&bytes, off, sz, ss, old, new);
                }
            }
        }
    }
}
