//! Editing a table that is on a disk: read the bytes that hold it, move
//! one partition's start, and hand the result to the writer. Every byte
//! the edit does not mean to change (boot code, GUIDs, names, attributes,
//! flags, unknown fields) stays as it was read.

use super::write::{GptBytes, MbrBytes, TableBytes};
use super::{gpt, mbr, Label, Layout, PartKind, Partition};
use crate::io::{read_lba, read_sectors, ReadAt};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EditError {
    #[error("cannot read the table's sectors: {0}")]
    Io(String),
    #[error("the table cannot be edited safely: there is no partition table")]
    NoTable,
    #[error("the table cannot be edited safely: only MBR and GPT partition tables can be edited")]
    NotMbrOrGpt,
    #[error("the table cannot be edited safely: no GPT header")]
    NoGptHeader,
    #[error("the table cannot be edited safely: the primary GPT is damaged; repair it first")]
    PrimaryGptDamaged,
    #[error("the table cannot be edited safely: the backup GPT is damaged; repair it first")]
    BackupGptDamaged,
    #[error("the table cannot be edited safely: LBA {lba}: {why}")]
    GptHeader { lba: u64, why: String },
    #[error("the table cannot be edited safely: an entry array of {0} bytes")]
    EntryArray(u64),
    #[error(
        "the table cannot be edited safely: the backup GPT's entry array ({backup} bytes) is not \
         the primary's ({primary} bytes); repair it first"
    )]
    EntryArraysDiffer { primary: u64, backup: u64 },
    #[error("the table cannot be edited safely: partition {0} cannot be moved")]
    NotMovable(u32),
    #[error("the table cannot be edited safely: partition {0} has no EBR")]
    NoEbr(u32),
    #[error("the table cannot be edited safely: partition {0}'s EBR is the extended partition's first sector")]
    FirstEbr(u32),
    #[error(
        "the table cannot be edited safely: partition {0}'s EBR describes more than that partition"
    )]
    SharedEbr(u32),
    #[error("partition {0} is not where the table says it is")]
    Stale(u32),
    #[error("partition {0} cannot start at LBA {1}: {2}")]
    Range(u32, u64, &'static str),
}

fn io(e: std::io::Error) -> EditError {
    EditError::Io(e.to_string())
}

/// The bytes of the table `layout` was read from.
pub fn read_bytes(dev: &dyn ReadAt, layout: &Layout) -> Result<TableBytes, EditError> {
    let ss = layout.sector_size;
    match layout.label {
        Label::Gpt => read_gpt(dev, layout).map(TableBytes::Gpt),
        Label::Mbr => {
            let ebrs = layout.mbr.as_ref().map(|m| m.ebrs.clone()).unwrap_or_default();
            let ebrs = ebrs
                .into_iter()
                .map(|lba| Ok((lba, read_lba(dev, lba, ss).map_err(io)?)))
                .collect::<Result<_, EditError>>()?;
            let mbr = read_lba(dev, 0, ss).map_err(io)?;
            Ok(TableBytes::Mbr(MbrBytes { sector_size: ss, mbr, ebrs, wipes: Vec::new() }))
        }
        Label::None => Err(EditError::NoTable),
        Label::Bsd
        | Label::Sun
        | Label::Sgi
        | Label::Mac
        | Label::Amiga
        | Label::Atari
        | Label::Unsupported => Err(EditError::NotMbrOrGpt),
    }
}

/// Both headers must be sound: an edit rewrites both copies from the primary.
fn read_gpt(dev: &dyn ReadAt, layout: &Layout) -> Result<GptBytes, EditError> {
    let ss = layout.sector_size;
    let info = layout.gpt.as_ref().ok_or(EditError::NoGptHeader)?;
    if info.used_backup || info.header_lba != 1 {
        return Err(EditError::PrimaryGptDamaged);
    }
    // The backup is rewritten where its header says: one that is not a
    // usable table may point anywhere, past the end or into a partition.
    let backup_damaged = ["gpt_backup_invalid", "gpt_alternate_lba_wrong"];
    if layout.problems.iter().any(|p| backup_damaged.contains(&p.code)) {
        return Err(EditError::BackupGptDamaged);
    }
    let header = |lba: u64| -> Result<gpt::Header, EditError> {
        let sector = read_lba(dev, lba, ss).map_err(io)?;
        gpt::Header::parse(&sector).map_err(|e| EditError::GptHeader { lba, why: e.to_string() })
    };
    let primary = header(1)?;
    let backup = header(primary.alternate_lba)?;
    let bytes = primary.entries_bytes();
    if bytes == 0 || bytes % ss != 0 || bytes > gpt::MAX_ENTRIES_BYTES {
        return Err(EditError::EntryArray(bytes));
    }
    // The primary's array goes where the backup's is: it must be as long.
    if backup.entries_bytes() != bytes {
        return Err(EditError::EntryArraysDiffer {
            primary: bytes,
            backup: backup.entries_bytes(),
        });
    }
    let entries = read_sectors(dev, primary.entries_lba, bytes / ss, ss).map_err(io)?;
    Ok(GptBytes {
        sector_size: ss,
        disk_guid: primary.disk_guid.0,
        first_usable_lba: primary.first_usable_lba,
        last_usable_lba: primary.last_usable_lba,
        entry_size: primary.entry_size,
        entries,
        primary_entries_lba: primary.entries_lba,
        backup_header_lba: primary.alternate_lba,
        backup_entries_lba: backup.entries_lba,
        mbr: read_lba(dev, 0, ss).map_err(io)?,
    })
}

impl TableBytes {
    /// Move `p` (as read from this table) to start at `new_start`, keeping
    /// its size and everything else in its entry.
    pub fn move_start(&mut self, p: &Partition, new_start: u64) -> Result<(), EditError> {
        let end = new_start.checked_add(p.size).filter(|_| p.size > 0);
        let end = end.ok_or(EditError::Range(p.number, new_start, "its end overflows"))?;
        match (self, p.kind) {
            (TableBytes::Gpt(g), PartKind::Gpt) => move_gpt(g, p, new_start, end - 1),
            (TableBytes::Mbr(m), PartKind::Primary) => move_primary(m, p, new_start),
            (TableBytes::Mbr(m), PartKind::Logical) => move_logical(m, p, new_start),
            _ => Err(EditError::NotMovable(p.number)),
        }
    }
}

fn move_gpt(g: &mut GptBytes, p: &Partition, first: u64, last: u64) -> Result<(), EditError> {
    let size = g.entry_size as usize;
    let at = (p.number as usize).checked_sub(1).and_then(|slot| slot.checked_mul(size));
    let raw = at.and_then(|at| g.entries.get_mut(at..at.checked_add(size)?));
    let raw = raw.ok_or(EditError::Stale(p.number))?;
    let mut entry = gpt::GptEntry::parse(raw).filter(|e| e.first_lba == p.start);
    let entry = entry.as_mut().ok_or(EditError::Stale(p.number))?;
    if first < g.first_usable_lba || last > g.last_usable_lba {
        return Err(EditError::Range(p.number, first, "outside the GPT's usable area"));
    }
    (entry.first_lba, entry.last_lba) = (first, last);
    let encoded = entry.encode();
    raw[..encoded.len()].copy_from_slice(&encoded);
    Ok(())
}

fn move_primary(m: &mut MbrBytes, p: &Partition, new_start: u64) -> Result<(), EditError> {
    let slot = (p.number as usize).checked_sub(1).filter(|&s| s < 4);
    let slot = slot.ok_or(EditError::Stale(p.number))?;
    let mut e = mbr::entry_at(&m.mbr, slot).filter(|e| u64::from(e.start_lba) == p.start);
    let e = e.as_mut().ok_or(EditError::Stale(p.number))?;
    let stored = mbr_u32(p, new_start.checked_add(p.size).map(|_| new_start))?;
    e.place(stored, new_start);
    mbr::put_entry(&mut m.mbr, slot, e);
    Ok(())
}

/// A logical's start is stored relative to its EBR, which stays put; the
/// link in the EBR before it spans from that EBR to the logical's end, so
/// it follows when it did before.
fn move_logical(m: &mut MbrBytes, p: &Partition, new_start: u64) -> Result<(), EditError> {
    let ebr_lba = p.ebr.ok_or(EditError::Stale(p.number))?;
    let index = m.ebrs.iter().position(|(lba, _)| *lba == ebr_lba);
    let index = index.ok_or(EditError::Stale(p.number))?;
    let relative = new_start.checked_sub(ebr_lba).filter(|&r| r > 0);
    let relative =
        relative.ok_or(EditError::Range(p.number, new_start, "it must follow its EBR"))?;
    let stored = mbr_u32(p, Some(relative))?;
    let sector = &mut m.ebrs[index].1;
    let (slot, mut e) = logical_entry(sector, p, ebr_lba)?;
    e.place(stored, new_start);
    mbr::put_entry(sector, slot, &e);
    if let Some(previous) = index.checked_sub(1) {
        relink(&mut m.ebrs[previous].1, p, ebr_lba, None, new_start)?;
    }
    Ok(())
}

/// `p`'s entry in the EBR `sector` at `ebr_lba`, found by start and size:
/// an EBR's third or fourth slot may hold an entry at the same start that
/// the reader dropped (it overruns its link).
fn logical_entry(
    sector: &[u8],
    p: &Partition,
    ebr_lba: u64,
) -> Result<(usize, mbr::MbrEntry), EditError> {
    let found = (0..4).find_map(|s| {
        let e = mbr::entry_at(sector, s)?;
        let here = u64::from(e.start_lba).checked_add(ebr_lba) == Some(p.start);
        let same = here && u64::from(e.sectors) == p.size;
        (!e.is_empty() && !e.is_extended() && same).then_some((s, e))
    });
    found.ok_or(EditError::Stale(p.number))
}

/// Point the link entry at the EBR at `ebr_lba` to `moved_to` (the EBR's
/// new LBA, relative to the extended partition at `ext_start`), and resize
/// it to span to the logical's end at `new_start` when it spanned to its
/// old end.
fn relink(
    sector: &mut [u8],
    p: &Partition,
    ebr_lba: u64,
    moved_to: Option<(u64, u64)>,
    new_start: u64,
) -> Result<(), EditError> {
    let new_ebr = moved_to.map_or(ebr_lba, |(to, _)| to);
    let old_span = p.start.checked_add(p.size).and_then(|e| e.checked_sub(ebr_lba));
    let new_span = new_start.checked_add(p.size).and_then(|e| e.checked_sub(new_ebr));
    let new_span = mbr_u32(p, new_span)?;
    let mut found = false;
    for slot in 0..4 {
        let Some(mut e) = mbr::entry_at(sector, slot).filter(|e| e.is_extended()) else {
            continue;
        };
        if Some(u64::from(e.sectors)) == old_span {
            e.sectors = new_span;
        }
        if let Some((to, ext_start)) = moved_to {
            if u64::from(e.start_lba).checked_add(ext_start) != Some(ebr_lba) {
                continue;
            }
            e.place(mbr_u32(p, to.checked_sub(ext_start))?, to);
            found = true;
        }
        mbr::put_entry(sector, slot, &e);
    }
    if moved_to.is_some() && !found {
        return Err(EditError::Stale(p.number));
    }
    Ok(())
}

impl TableBytes {
    /// Move the EBR of logical `p` to `new_ebr`, inside the extended
    /// partition `ext` and before the logical, which stays where it is: the
    /// EBR's copy goes to its new place and the link before it (relative to
    /// `ext`'s start) points there. The first EBR, at `ext`'s start, stays:
    /// every link is relative to it.
    pub fn move_ebr(
        &mut self,
        p: &Partition,
        new_ebr: u64,
        ext: &Partition,
    ) -> Result<(), EditError> {
        let ext_start = ext.start;
        let TableBytes::Mbr(m) = self else {
            return Err(EditError::NoEbr(p.number));
        };
        let ebr_lba = p.ebr.ok_or(EditError::Stale(p.number))?;
        let index = m.ebrs.iter().position(|(lba, _)| *lba == ebr_lba);
        let previous = index.and_then(|i| i.checked_sub(1));
        let (Some(index), Some(previous)) = (index, previous) else {
            return Err(EditError::FirstEbr(p.number));
        };
        let inside = new_ebr > ext_start && new_ebr - ext_start < ext.size;
        if !inside || new_ebr >= p.start || m.ebrs.iter().any(|(l, _)| *l == new_ebr) {
            return Err(EditError::Range(p.number, new_ebr, "its EBR cannot go there"));
        }
        let mut sector = m.ebrs[index].1.clone();
        let (slot, mut e) = logical_entry(&sector, p, ebr_lba)?;
        // Other entries are relative to the EBR too: they would move with it.
        let mut others = (0..4).filter(|&s| s != slot).filter_map(|s| mbr::entry_at(&sector, s));
        if others.any(|o| !o.is_empty() && !o.is_extended()) {
            return Err(EditError::SharedEbr(p.number));
        }
        e.start_lba = mbr_u32(p, p.start.checked_sub(new_ebr))?;
        mbr::put_entry(&mut sector, slot, &e);
        relink(&mut m.ebrs[previous].1, p, ebr_lba, Some((new_ebr, ext_start)), p.start)?;
        m.ebrs[index] = (new_ebr, sector);
        Ok(())
    }
}

fn mbr_u32(p: &Partition, v: Option<u64>) -> Result<u32, EditError> {
    let v = v.and_then(|v| u32::try_from(v).ok());
    v.ok_or(EditError::Range(p.number, p.start, "beyond what an MBR can address"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::fixtures::{edit_header, gpt_image, mbr_entry, mbr_extended};
    use crate::table::{read, write::encode_table};

    fn apply(img: &mut [u8], table: &TableBytes) {
        for c in encode_table(table) {
            img[c.offset as usize..c.offset as usize + c.bytes.len()].copy_from_slice(&c.bytes);
        }
    }

    fn moved(mut img: Vec<u8>, ss: u64, number: u32, to: u64) -> (Vec<u8>, Layout) {
        let before = read(&img, ss, img.len() as u64).unwrap();
        let p = before.partitions.iter().find(|p| p.number == number).unwrap().clone();
        let mut table = read_bytes(&img, &before).unwrap();
        table.move_start(&p, to).unwrap();
        apply(&mut img, &table);
        let after = read(&img, ss, img.len() as u64).unwrap();
        assert!(after.problems.is_empty(), "{:?}", after.problems);
        (img, after)
    }

    #[test]
    fn gpt_move_keeps_every_other_byte_of_the_entry() {
        for ss in [512, 4096] {
            let img = gpt_image(ss, 4096, 128, &[(40, 99, "root"), (200, 299, "b")]);
            let (out, after) = moved(img.clone(), ss, 1, 48);
            let p = &after.partitions[0];
            assert_eq!((p.start, p.size, p.name.as_deref()), (48, 60, Some("root")));
            let e = (2 * ss) as usize;
            assert_eq!(out[e..e + 32], img[e..e + 32], "type and unique GUIDs kept");
            assert_eq!(out[e + 48..e + 128], img[e + 48..e + 128], "attributes and name kept");
            assert_eq!(out[..ss as usize], img[..ss as usize], "protective MBR kept");
            assert_eq!(after.gpt, read(&img, ss, img.len() as u64).unwrap().gpt);
        }
    }

    #[test]
    fn mbr_primary_move_keeps_boot_code_and_flags() {
        let mut img = vec![0u8; 4096 * 512];
        mbr_entry(&mut img, 0, 0, 0x83, 63, 2000);
        img[..440].fill(0xB0);
        img[446] = 0x80;
        let (out, after) = moved(img.clone(), 512, 1, 64);
        assert_eq!((after.partitions[0].start, after.partitions[0].size), (64, 2000));
        assert_eq!(out[..446], img[..446]);
        assert_eq!(out[446], 0x80);
        assert_eq!(out[512..], img[512..]);
    }

    #[test]
    fn logical_move_relinks_the_previous_ebr() {
        let (img, _) = moved(mbr_extended(), 512, 7, 200);
        assert_eq!(
            mbr::entry_at(&img[128 * 512..], 1).unwrap().sectors,
            64,
            "a link of its own size stays"
        );
        let mut fdisk_style = mbr_extended();
        mbr_entry(&mut fdisk_style, 128 * 512, 1, 0x05, 128, 101);
        let (img, after) = moved(fdisk_style, 512, 7, 200);
        let got: Vec<_> = after.partitions.iter().map(|p| (p.number, p.start, p.size)).collect();
        assert_eq!(got, [(1, 1, 63), (2, 64, 256), (5, 65, 63), (6, 129, 63), (7, 200, 100)]);
        let link = mbr::entry_at(&img[128 * 512..129 * 512], 1).unwrap();
        assert_eq!((link.start_lba, link.sectors), (128, 108), "spans EBR 192 to the new end");
    }

    #[test]
    fn an_ebr_moves_before_its_logical_which_stays() {
        // Logical 6 (EBR 128, at 129+63) shrunk from the front: EBR 128,
        // logical at 140+52, so its EBR may go to 139. A span link (fdisk's)
        // follows: EBR 64's link to 128 spans to logical 6's end.
        let mut img = mbr_extended();
        mbr_entry(&mut img, 128 * 512, 0, 0x83, 12, 52);
        mbr_entry(&mut img, 64 * 512, 1, 0x05, 64, 64);
        let before = read(&img, 512, img.len() as u64).unwrap();
        let p = before.partitions.iter().find(|p| p.number == 6).unwrap().clone();
        let mut table = read_bytes(&img, &before).unwrap();
        table.move_ebr(&p, 139, &before.partitions[1]).unwrap();
        apply(&mut img, &table);
        let after = read(&img, 512, img.len() as u64).unwrap();
        assert!(after.problems.is_empty(), "{:?}", after.problems);
        let got: Vec<_> = after.partitions.iter().map(|p| (p.number, p.start, p.ebr)).collect();
        assert_eq!(
            got,
            [
                (1, 1, None),
                (2, 64, None),
                (5, 65, Some(64)),
                (6, 140, Some(139)),
                (7, 193, Some(192))
            ]
        );
        let link = mbr::entry_at(&img[64 * 512..], 1).unwrap();
        assert_eq!((link.start_lba, link.sectors), (75, 53), "points at 139, spans to 191");
        assert_eq!(mbr::entry_at(&img[139 * 512..], 1), mbr::entry_at(&img[128 * 512..], 1));
    }

    #[test]
    fn an_ebr_that_cannot_move_is_refused() {
        let img = mbr_extended();
        let layout = read(&img, 512, img.len() as u64).unwrap();
        let mut table = read_bytes(&img, &layout).unwrap();
        let ext = layout.partitions[1].clone();
        let first = layout.partitions[2].clone();
        let err = table.move_ebr(&first, 63, &ext).unwrap_err();
        assert!(err.to_string().contains("extended partition's first sector"), "{err}");
        let sixth = layout.partitions[3].clone();
        assert!(matches!(table.move_ebr(&sixth, 129, &ext), Err(EditError::Range(6, 129, _))));
        assert!(matches!(table.move_ebr(&sixth, 64, &ext), Err(EditError::Range(6, 64, _))));
        let mut shared = img.clone();
        mbr_entry(&mut shared, 128 * 512, 0, 0x83, 4, 60);
        mbr_entry(&mut shared, 128 * 512, 2, 0x83, 1, 2);
        let layout = read(&shared, 512, shared.len() as u64).unwrap();
        let p = layout.partitions.iter().find(|p| p.start == 132).unwrap().clone();
        let err = read_bytes(&shared, &layout).unwrap().move_ebr(&p, 127, &ext).unwrap_err();
        assert!(err.to_string().contains("describes more than"), "{err}");
    }

    #[test]
    fn stale_or_impossible_moves_are_refused() {
        let img = mbr_extended();
        let layout = read(&img, 512, img.len() as u64).unwrap();
        let mut table = read_bytes(&img, &layout).unwrap();
        let mut p = layout.partitions[2].clone();
        assert!(matches!(table.move_start(&p, 64), Err(EditError::Range(5, 64, _))));
        p.start = 70;
        assert_eq!(table.move_start(&p, 72), Err(EditError::Stale(5)));
        let ext = layout.partitions[1].clone();
        assert!(matches!(table.move_start(&ext, 72), Err(EditError::NotMovable(_))));
        let gpt = gpt_image(512, 256, 128, &[(40, 99, "a")]);
        let layout = read(&gpt, 512, gpt.len() as u64).unwrap();
        let mut table = read_bytes(&gpt, &layout).unwrap();
        let err = table.move_start(&layout.partitions[0], 250).unwrap_err();
        assert!(matches!(err, EditError::Range(1, 250, _)), "{err}");
    }

    /// Found by fuzz/ (target edit): an EBR whose third slot holds an
    /// entry at the logical's start that overruns the link (the reader
    /// drops it, as Linux does) had that entry moved instead.
    #[test]
    fn a_dropped_entry_at_the_same_start_is_not_the_one_moved() {
        let mut img = mbr_extended();
        img[128 * 512 + 446..128 * 512 + 462].fill(0);
        mbr_entry(&mut img, 128 * 512, 2, 0x83, 1, 1_000_000);
        mbr_entry(&mut img, 128 * 512, 3, 0x83, 1, 56);
        let (img, after) = moved(img, 512, 6, 136);
        assert_eq!((after.partitions[3].start, after.partitions[3].size), (136, 56));
        assert_eq!(mbr::entry_at(&img[128 * 512..], 2).unwrap().start_lba, 1, "left as it was");
    }

    /// Found by fuzz/ (target edit): a backup header whose CRC holds but
    /// whose entry array lies past the end was rewritten there.
    #[test]
    fn a_damaged_backup_is_not_rewritten() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "a")]);
        edit_header(&mut img, 512, 255, |h| h.entries_lba = 100_000);
        let layout = read(&img, 512, img.len() as u64).unwrap();
        assert_eq!(layout.problems[0].code, "gpt_backup_invalid");
        let err = read_bytes(&img, &layout).unwrap_err();
        assert!(matches!(err, EditError::BackupGptDamaged), "{err}");
    }

    /// Found by fuzz/ (target edit): the primary's entry array, longer than
    /// the backup's, was written over the backup header and past the end.
    #[test]
    fn a_backup_array_of_another_size_is_not_overwritten() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "a")]);
        let crc = crc32fast::hash(&img[223 * 512..223 * 512 + 64 * 128]);
        edit_header(&mut img, 512, 255, |h| (h.entry_count, h.entries_crc) = (64, crc));
        let layout = read(&img, 512, img.len() as u64).unwrap();
        assert_eq!(layout.problems[0].code, "gpt_backup_differs");
        let err = read_bytes(&img, &layout).unwrap_err();
        assert!(matches!(err, EditError::EntryArraysDiffer { primary: 16384, .. }), "{err}");
    }
}
