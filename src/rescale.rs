//! Rewrite an MBR or GPT for another logical sector size, every partition
//! keeping its byte range: a disk partitioned behind a USB bridge that
//! presents 4096-byte sectors shows no partitions on SATA at 512, and the
//! reverse. The table is read with the crate's reader at `from`, rebuilt as
//! [`TableBytes`] at `to`, encoded by the crate's writer, and read back in
//! memory at `to`: only a table whose partitions cover the same bytes is
//! returned.

use crate::io::ReadAt;
use crate::stack::{self, Details};
use crate::table::edit::{self, EditError};
use crate::table::write::{self, Chunk, GptBytes, MbrBytes, TableBytes};
use crate::table::{self, gpt, mbr, Label, Layout, PartKind, Severity, TableError};
use std::io;

#[derive(Debug, thiserror::Error)]
pub enum RescaleError {
    #[error(transparent)]
    Table(#[from] TableError),
    #[error(transparent)]
    Edit(#[from] EditError),
    #[error("cannot read the disk: {0}")]
    Io(#[from] io::Error),
    #[error("--from {0} and --to {1}: both must be sector sizes from 512 to 4096, and differ")]
    Sizes(u64, u64),
    /// The table cannot be expressed at the new sector size, or is not one
    /// to rewrite.
    #[error("cannot rescale: {0}")]
    Refused(#[from] RescaleRefusal),
    #[error("the rescaled table does not read back as the same partitions: {0}")]
    Verify(Mismatch),
}

/// Why a table is not rescaled: nothing was written. Each names the
/// partition (or record) and byte offset in its message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RescaleRefusal {
    #[error("the size, {size_bytes} bytes, is not a whole number of {sector_bytes}-byte sectors")]
    SizeNotWhole { size_bytes: u64, sector_bytes: u64 },
    /// A write of the new table (`what`, as [`Chunk::what`] names it).
    #[error("the {what} would lie past the end of the disk")]
    PastTheEnd { what: &'static str },
    #[error("no partition table found at {sector_bytes}-byte sectors")]
    NoTable { sector_bytes: u64 },
    #[error("only MBR and GPT partition tables can be rescaled")]
    NotMbrOrGpt,
    #[error("a hybrid MBR (0xEE beside other entries) is not rescaled")]
    HybridMbr,
    /// The errors the reader found, each as its message.
    #[error("the table at {sector_bytes}-byte sectors has errors; fix them first: {}", errors.join("; "))]
    TableErrors { sector_bytes: u64, errors: Vec<String> },
    #[error(
        "the GPT entry array ({array_bytes} bytes) is not a whole number of {to}-byte sectors"
    )]
    GptArrayNotWhole { array_bytes: u64, to: u64 },
    #[error("the disk is too small for a GPT at the new sector size")]
    TooSmallForGpt,
    #[error("GPT entries of {entry_bytes} bytes")]
    GptEntrySize { entry_bytes: usize },
    #[error(
        "{entry} starts at byte {start_bytes}, not a multiple of {to}: it cannot start on a \
         {to}-byte sector (move it first)"
    )]
    StartNotWhole { entry: RefusedEntry, start_bytes: u64, to: u64 },
    #[error(
        "partition {partition} ends at byte {end_bytes}, not a multiple of {to}: its size is not \
         whole {to}-byte sectors (shrink it first)"
    )]
    EndNotWhole { partition: u32, end_bytes: u64, to: u64 },
    #[error(
        "{entry} (at byte {start_bytes}) is {size_bytes} bytes long, not whole {to}-byte sectors \
         (shrink it first)"
    )]
    SizeNotWholeSectors { entry: RefusedEntry, start_bytes: u64, size_bytes: u64, to: u64 },
    /// A GPT entry whose last LBA overflows or precedes its first.
    #[error("partition {partition}: bad end")]
    BadEnd { partition: u32 },
    #[error(
        "partition {partition} starts at byte {start_bytes}, inside the GPT at {to}-byte sectors \
         (its header and {array_bytes}-byte entry array need bytes 0..{gpt_end_bytes}): move it \
         first"
    )]
    InsideTheGpt { partition: u32, start_bytes: u64, to: u64, array_bytes: u64, gpt_end_bytes: u64 },
    #[error(
        "partition {partition} ends at byte {end_bytes}, over the backup GPT at {to}-byte sectors \
         (which starts at byte {backup_bytes}): shrink it first"
    )]
    OverTheBackupGpt { partition: u32, end_bytes: u64, to: u64, backup_bytes: u64 },
    #[error("short protective MBR")]
    ShortProtectiveMbr,
    #[error("sector size")]
    SectorSize,
    /// The EBR at byte `at`, of logical partition `partition` when one
    /// starts there.
    #[error(
        "the EBR{} at byte {at} is not on a {to}-byte sector boundary (move it first)",
        partition.map_or_else(String::new, |n| format!(" of partition {n}"))
    )]
    EbrNotOnASector { partition: Option<u32>, at: u64, to: u64 },
    /// `field` ("start" or "size") would be `sectors` sectors of `to` bytes.
    #[error(
        "{entry} (at byte {start_bytes}): its {field} would be {sectors} {to}-byte sectors, \
         beyond the MBR's 32-bit limit (2^32 sectors = {} bytes); convert the disk to GPT first",
        (1u64 << 32).saturating_mul(*to)
    )]
    PastTheMbrLimit {
        entry: RefusedEntry,
        start_bytes: u64,
        field: &'static str,
        sectors: u64,
        to: u64,
    },
    #[error("short boot record")]
    ShortBootRecord,
}

/// The MBR or EBR entry a refusal names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusedEntry {
    /// A partition by its number (GPT, MBR primary or logical).
    Partition(u32),
    /// The link to the next EBR in the EBR at byte `ebr_at`.
    EbrLink { ebr_at: u64 },
    /// Entry `slot` (1-4) of the EBR at byte `ebr_at`, no partition's.
    EbrEntry { slot: usize, ebr_at: u64 },
}

impl std::fmt::Display for RefusedEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefusedEntry::Partition(n) => write!(f, "partition {n}"),
            RefusedEntry::EbrLink { ebr_at } => write!(f, "the link in the EBR at byte {ebr_at}"),
            RefusedEntry::EbrEntry { slot, ebr_at } => {
                write!(f, "entry {slot} of the EBR at byte {ebr_at}")
            }
        }
    }
}

/// How a table read back differs from the one it should equal.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("read back as {new:?}, not {old:?}")]
    Label { old: Label, new: Label },
    /// The first error the read-back found.
    #[error("{} ({})", .0.message, .0.code)]
    Problem(table::Problem),
    #[error("{new} partitions read back, not {old}")]
    Count { old: usize, new: usize },
    #[error("partition {0}: overflow")]
    Overflow(u32),
    /// Partition `number` at `old` (start, size in bytes) read back as
    /// partition `became` at `new`, or with another kind, type or name.
    #[error(
        "partition {number}: bytes {}+{} became partition {became} at bytes {}+{}",
        old.0, old.1, new.0, new.1
    )]
    Moved { number: u32, old: (u64, u64), became: u32, new: (u64, u64) },
}

/// A GPT header field that changes: (name, old, new).
pub(crate) type HeaderChange = (&'static str, u64, u64);

/// One partition before and after, in sectors of each size.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Moved {
    pub number: u32,
    pub kind: PartKind,
    pub old_start: u64,
    pub old_size: u64,
    pub new_start: u64,
    pub new_size: u64,
    /// Unchanged by the rescale.
    pub start_bytes: u64,
    pub size_bytes: u64,
}

/// Something inside a partition that records its own sector size.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ContentNote {
    pub partition: u32,
    /// libblkid's TYPE name.
    pub name: &'static str,
    pub sector_bytes: u64,
    /// True when Linux will not use it at the new sector size: `--yes` refuses.
    pub blocks: bool,
    pub message: String,
}

/// A rescale ready to write.
#[derive(Clone, Debug)]
pub struct Rescaled {
    pub from: u64,
    pub to: u64,
    pub old: Layout,
    /// The table as read back, in memory, at `to`.
    pub new: Layout,
    pub table: TableBytes,
    /// The writes, in the order the crate's writer makes them.
    pub chunks: Vec<Chunk>,
    pub moved: Vec<Moved>,
    /// GPT header fields that change: (name, old, new).
    pub header_changes: Vec<HeaderChange>,
    pub notes: Vec<ContentNote>,
}

/// `v` sectors of `from` bytes as sectors of `to` bytes; None unless whole.
fn scale(v: u64, from: u64, to: u64) -> Option<u64> {
    let bytes = v.checked_mul(from)?;
    (bytes % to == 0).then(|| bytes / to)
}

fn refused(why: RescaleRefusal) -> RescaleError {
    RescaleError::Refused(why)
}

/// Plan the rescale of the table on `dev` (`size_bytes` long) from
/// `from`-byte to `to`-byte logical sectors. Reads only.
pub fn plan_rescale(
    dev: &dyn ReadAt,
    size_bytes: u64,
    from: u64,
    to: u64,
) -> Result<Rescaled, RescaleError> {
    let valid = |s| crate::units::is_sector_size(s, 4096);
    if !valid(from) || !valid(to) || from == to {
        return Err(RescaleError::Sizes(from, to));
    }
    // A device's size is whole sectors of its logical size; an image that
    // is not would lose its tail (and the backup GPT) on one of the two.
    let unit = from.max(to);
    if size_bytes % unit != 0 || size_bytes == 0 {
        return Err(refused(RescaleRefusal::SizeNotWhole { size_bytes, sector_bytes: unit }));
    }
    let old = table::read(dev, from, size_bytes)?;
    check_readable(&old)?;
    let bytes = edit::read_bytes(dev, &old)?;
    let (table, header_changes) = match &bytes {
        TableBytes::Gpt(g) => {
            let (new, changes) = rescale_gpt(g, &old, size_bytes, from, to)?;
            (TableBytes::Gpt(new), changes)
        }
        TableBytes::Mbr(m) => (TableBytes::Mbr(rescale_mbr(dev, m, &old, from, to)?), Vec::new()),
    };
    let chunks = write::encode_table(&table);
    for c in &chunks {
        let end = c.offset.checked_add(c.bytes.len() as u64);
        if end.is_none_or(|end| end > size_bytes) {
            return Err(refused(RescaleRefusal::PastTheEnd { what: c.what }));
        }
    }
    let new = table::read(&Overlay { base: dev, chunks: &chunks }, to, size_bytes)?;
    let moved = same_bytes(&old, &new).map_err(RescaleError::Verify)?;
    let notes = contents(dev, &old, to);
    Ok(Rescaled { from, to, old, new, table, chunks, moved, header_changes, notes })
}

/// Only a sound MBR or GPT is rewritten: a table with errors would carry
/// them over, and the read-back comparison would prove nothing.
fn check_readable(old: &Layout) -> Result<(), RescaleError> {
    let ss = old.sector_size;
    match old.label {
        Label::Mbr | Label::Gpt => {}
        Label::None => {
            return Err(refused(RescaleRefusal::NoTable { sector_bytes: ss }));
        }
        _ => return Err(refused(RescaleRefusal::NotMbrOrGpt)),
    }
    if old.mbr.as_ref().is_some_and(|m| m.hybrid) {
        return Err(refused(RescaleRefusal::HybridMbr));
    }
    let errors: Vec<String> = old
        .problems
        .iter()
        .filter(|p| p.severity == Severity::Error)
        .map(|p| format!("{} ({})", p.message, p.code))
        .collect();
    if !errors.is_empty() {
        return Err(refused(RescaleRefusal::TableErrors { sector_bytes: ss, errors }));
    }
    Ok(())
}

/// The partitions of `old` and `new`, matched by number: same kind, type,
/// name and byte range, or the reason they are not.
pub fn same_bytes(old: &Layout, new: &Layout) -> Result<Vec<Moved>, Mismatch> {
    if old.label != new.label {
        return Err(Mismatch::Label { old: old.label, new: new.label });
    }
    if let Some(p) = new.problems.iter().find(|p| p.severity == Severity::Error) {
        return Err(Mismatch::Problem(p.clone()));
    }
    if old.partitions.len() != new.partitions.len() {
        return Err(Mismatch::Count { old: old.partitions.len(), new: new.partitions.len() });
    }
    let bytes = |v: u64, ss: u64, n: u32| v.checked_mul(ss).ok_or(Mismatch::Overflow(n));
    let mut moved = Vec::new();
    for (a, b) in old.partitions.iter().zip(&new.partitions) {
        let n = a.number;
        let range_a = (bytes(a.start, old.sector_size, n)?, bytes(a.size, old.sector_size, n)?);
        let range_b = (bytes(b.start, new.sector_size, n)?, bytes(b.size, new.sector_size, n)?);
        if (b.number, b.kind, &b.type_id, &b.name) != (n, a.kind, &a.type_id, &a.name)
            || range_a != range_b
        {
            return Err(Mismatch::Moved {
                number: n,
                old: range_a,
                became: b.number,
                new: range_b,
            });
        }
        moved.push(Moved {
            number: n,
            kind: a.kind,
            old_start: a.start,
            old_size: a.size,
            new_start: b.start,
            new_size: b.size,
            start_bytes: range_a.0,
            size_bytes: range_a.1,
        });
    }
    Ok(moved)
}

/// The GPT at `to`: primary header at LBA 1, its array from LBA 2, the
/// backup header at the last LBA with its array just before; the usable
/// range is what lies between. Every used entry's LBAs are scaled; names,
/// GUIDs and attributes stay. The writer computes both CRCs.
fn rescale_gpt(
    g: &GptBytes,
    old: &Layout,
    size_bytes: u64,
    from: u64,
    to: u64,
) -> Result<(GptBytes, Vec<HeaderChange>), RescaleError> {
    let array_bytes = g.entries.len() as u64;
    if array_bytes % to != 0 {
        return Err(refused(RescaleRefusal::GptArrayNotWhole { array_bytes, to }));
    }
    let array = array_bytes / to;
    let small = || refused(RescaleRefusal::TooSmallForGpt);
    let last_lba = (size_bytes / to).checked_sub(1).ok_or_else(small)?;
    let backup_entries_lba = last_lba.checked_sub(array).ok_or_else(small)?;
    let first_usable = array.checked_add(2).ok_or_else(small)?;
    let last_usable = backup_entries_lba.checked_sub(1).ok_or_else(small)?;
    if first_usable > last_usable {
        return Err(small());
    }
    let mut entries = g.entries.clone();
    let size = usize::try_from(g.entry_size).map_err(|_| small())?;
    if size < gpt::ENTRY_SIZE as usize {
        return Err(refused(RescaleRefusal::GptEntrySize { entry_bytes: size }));
    }
    for (slot, raw) in entries.chunks_exact_mut(size).enumerate() {
        let Some(mut entry) = gpt::GptEntry::parse(raw).filter(gpt::GptEntry::is_used) else {
            continue; // unused: Linux ignores its LBAs
        };
        let n = u32::try_from(slot).unwrap_or(u32::MAX).saturating_add(1);
        let (first, last) = (entry.first_lba, entry.last_lba);
        let start_bytes = first.saturating_mul(from);
        let new_first = scale(first, from, to).ok_or_else(|| {
            let entry = RefusedEntry::Partition(n);
            refused(RescaleRefusal::StartNotWhole { entry, start_bytes, to })
        })?;
        let end =
            last.checked_add(1).ok_or_else(|| refused(RescaleRefusal::BadEnd { partition: n }))?;
        let new_end = scale(end, from, to).ok_or_else(|| {
            let end_bytes = end.saturating_mul(from);
            refused(RescaleRefusal::EndNotWhole { partition: n, end_bytes, to })
        })?;
        let new_last = new_end
            .checked_sub(1)
            .ok_or_else(|| refused(RescaleRefusal::BadEnd { partition: n }))?;
        if new_first < first_usable {
            let gpt_end_bytes = first_usable.saturating_mul(to);
            return Err(refused(RescaleRefusal::InsideTheGpt {
                partition: n,
                start_bytes,
                to,
                array_bytes,
                gpt_end_bytes,
            }));
        }
        if new_last > last_usable {
            return Err(refused(RescaleRefusal::OverTheBackupGpt {
                partition: n,
                end_bytes: end.saturating_mul(from),
                to,
                backup_bytes: backup_entries_lba.saturating_mul(to),
            }));
        }
        (entry.first_lba, entry.last_lba) = (new_first, new_last);
        let encoded = entry.encode();
        raw[..encoded.len()].copy_from_slice(&encoded);
    }
    // The protective MBR keeps boot code, signature and flags; bytes past
    // 512 (the old header and array, going up) are zeroed.
    let mut pmbr = vec![0u8; usize::try_from(to).map_err(|_| small())?];
    let keep = g.mbr.get(..512).ok_or_else(|| refused(RescaleRefusal::ShortProtectiveMbr))?;
    pmbr[..512].copy_from_slice(keep);
    let guard =
        (0..4).find(|&slot| mbr::entry_at(&pmbr, slot).is_some_and(|e| e.kind == mbr::TYPE_GPT));
    if let Some(slot) = guard {
        let covered = u32::try_from(last_lba).unwrap_or(u32::MAX);
        write::mbr_entry(&mut pmbr, slot, mbr::TYPE_GPT, 1, covered, 1);
    }
    let new = GptBytes {
        sector_size: to,
        disk_guid: g.disk_guid,
        first_usable_lba: first_usable,
        last_usable_lba: last_usable,
        entry_size: g.entry_size,
        entries,
        primary_entries_lba: 2,
        backup_header_lba: last_lba,
        backup_entries_lba,
        mbr: pmbr,
    };
    let info = old.gpt.as_ref();
    let was = |f: fn(&table::GptInfo) -> u64| info.map_or(0, f);
    let changes = vec![
        ("backup header LBA", g.backup_header_lba, last_lba),
        ("first usable LBA", was(|i| i.first_usable_lba), first_usable),
        ("last usable LBA", was(|i| i.last_usable_lba), last_usable),
        ("entry array LBA", g.primary_entries_lba, 2),
        ("backup entry array LBA", g.backup_entries_lba, backup_entries_lba),
    ];
    Ok((new, changes.into_iter().filter(|(_, a, b)| a != b).collect()))
}

/// The MBR and every EBR at `to`: each boot record stays at its byte
/// offset and keeps the bytes around its entries (boot code, a boot
/// loader in the gap); every LBA field, absolute or relative to an EBR or
/// the extended partition, is scaled, since their anchors scale alike.
/// CHS fields are recomputed by the crate's writer as sfdisk does: 255
/// heads × 63 sectors, 1023/254/63 (0xFE,0xFF,0xFF) past cylinder 1023.
fn rescale_mbr(
    dev: &dyn ReadAt,
    m: &MbrBytes,
    old: &Layout,
    from: u64,
    to: u64,
) -> Result<MbrBytes, RescaleError> {
    let sector = |offset: u64| -> Result<Vec<u8>, RescaleError> {
        let mut buf =
            vec![0u8; usize::try_from(to).map_err(|_| refused(RescaleRefusal::SectorSize))?];
        dev.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    };
    let mut boot = sector(0)?;
    let extended_starts: Vec<u64> = (0..4)
        .filter_map(|slot| mbr::entry_at(&m.mbr, slot))
        .filter(|e| e.is_extended() && !e.is_empty())
        .map(|e| u64::from(e.start_lba))
        .collect();
    rescale_record(&mut boot, &m.mbr, Record::Mbr, old, from, to)?;
    let mut ebrs = Vec::with_capacity(m.ebrs.len());
    let mut base = 0u64;
    for (lba, old_sector) in &m.ebrs {
        if extended_starts.contains(lba) {
            base = *lba;
        }
        let at = lba.saturating_mul(from);
        let partition = logical_of(old, *lba);
        let new_lba = scale(*lba, from, to)
            .ok_or_else(|| refused(RescaleRefusal::EbrNotOnASector { partition, at, to }))?;
        let mut new_sector = sector(at)?;
        let record = Record::Ebr { lba: *lba, base };
        rescale_record(&mut new_sector, old_sector, record, old, from, to)?;
        ebrs.push((new_lba, new_sector));
    }
    Ok(MbrBytes { sector_size: to, mbr: boot, ebrs, wipes: Vec::new() })
}

#[derive(Clone, Copy)]
enum Record {
    Mbr,
    /// An EBR at `lba`, in the chain of the extended partition at `base`.
    Ebr {
        lba: u64,
        base: u64,
    },
}

/// The number of the logical partition whose EBR is at `lba`.
fn logical_of(old: &Layout, lba: u64) -> Option<u32> {
    old.partitions
        .iter()
        .find(|p| p.kind == PartKind::Logical && p.ebr == Some(lba))
        .map(|p| p.number)
}

/// Scale the four entries of `old_sector` into `sector` (same layout).
fn rescale_record(
    sector: &mut [u8],
    old_sector: &[u8],
    record: Record,
    old: &Layout,
    from: u64,
    to: u64,
) -> Result<(), RescaleError> {
    for slot in 0..4 {
        let Some(e) = mbr::entry_at(old_sector, slot) else {
            continue;
        };
        if e.is_empty() {
            continue; // Linux skips it; its fields stay as they were
        }
        let (start, size) = (u64::from(e.start_lba), u64::from(e.sectors));
        let (entry, anchor) = match record {
            Record::Mbr => (RefusedEntry::Partition(u32::try_from(slot).unwrap_or(0) + 1), 0),
            Record::Ebr { lba, base } if e.is_extended() => {
                (RefusedEntry::EbrLink { ebr_at: lba.saturating_mul(from) }, base)
            }
            Record::Ebr { lba, .. } => {
                let abs = lba.saturating_add(start);
                let n = old
                    .partitions
                    .iter()
                    .find(|p| p.kind == PartKind::Logical && p.ebr == Some(lba) && p.start == abs);
                let entry = n.map_or(
                    RefusedEntry::EbrEntry { slot: slot + 1, ebr_at: lba.saturating_mul(from) },
                    |p| RefusedEntry::Partition(p.number),
                );
                (entry, lba)
            }
        };
        let abs_start = anchor.saturating_add(start);
        let start_bytes = abs_start.saturating_mul(from);
        let new_start = scale(start, from, to).filter(|_| scale(anchor, from, to).is_some());
        let new_start = new_start
            .ok_or_else(|| refused(RescaleRefusal::StartNotWhole { entry, start_bytes, to }))?;
        let new_size = scale(size, from, to).ok_or_else(|| {
            let size_bytes = size.saturating_mul(from);
            refused(RescaleRefusal::SizeNotWholeSectors { entry, start_bytes, size_bytes, to })
        })?;
        let limit = |sectors: u64, field: &'static str| {
            u32::try_from(sectors).map_err(|_| {
                refused(RescaleRefusal::PastTheMbrLimit { entry, start_bytes, field, sectors, to })
            })
        };
        let (start32, size32) = (limit(new_start, "start")?, limit(new_size, "size")?);
        let new_anchor = scale(anchor, from, to).unwrap_or(0);
        // Only for CHS, which tops out far below this.
        let new_abs = new_anchor.saturating_add(new_start).min(1 << 40);
        if sector.len() < 512 {
            return Err(refused(RescaleRefusal::ShortBootRecord));
        }
        write::mbr_entry(sector, slot, e.kind, start32, size32, new_abs);
    }
    Ok(())
}

/// What each partition holds that records its own sector size, judged
/// for `to`: a file system or LUKS sector smaller than the device's
/// logical sector cannot be used there.
fn contents(dev: &dyn ReadAt, old: &Layout, to: u64) -> Vec<ContentNote> {
    let ss = old.sector_size;
    let mut notes = Vec::new();
    for p in old.partitions.iter().filter(|p| p.kind != PartKind::Extended) {
        let (Some(start), Some(size)) = (p.start.checked_mul(ss), p.size.checked_mul(ss)) else {
            continue;
        };
        for layer in stack::walk(dev, start, size) {
            let (sector_bytes, fix) = match layer.details {
                Details::Fat { sector_bytes, .. } => (sector_bytes, format!("mkfs.vfat -S {to}")),
                Details::Exfat { sector_bytes, .. } => {
                    (sector_bytes, format!("mkfs.exfat (on the {to}-byte-sector device)"))
                }
                Details::Ntfs { sector_bytes, .. } => (sector_bytes, format!("mkfs.ntfs -s {to}")),
                Details::Xfs { sector_bytes, .. } => {
                    (sector_bytes, format!("mkfs.xfs -s size={to}"))
                }
                Details::Luks { sector_bytes, .. } => {
                    (sector_bytes, format!("cryptsetup reencrypt --sector-size {to}"))
                }
                _ => continue,
            };
            let n = p.number;
            let name = layer.name;
            let (blocks, message) = if sector_bytes < to {
                (
                    true,
                    format!(
                        "partition {n}: {name} records {sector_bytes}-byte sectors; on a \
                         {to}-byte-sector device Linux will not use it: copy its data off, \
                         rescale, re-create it ({fix}) and copy the data back"
                    ),
                )
            } else if sector_bytes != to && matches!(name, "vfat" | "exfat" | "ntfs") {
                (
                    false,
                    format!(
                        "partition {n}: {name} records {sector_bytes}-byte sectors; Linux uses \
                         it on {to}-byte sectors, Windows expects them to match the disk's"
                    ),
                )
            } else {
                continue;
            };
            notes.push(ContentNote { partition: n, name, sector_bytes, blocks, message });
        }
    }
    notes
}

/// `base` with `chunks` written over it, later chunks on top: the disk as
/// it will be, for reading back before anything is written.
pub struct Overlay<'a> {
    pub base: &'a dyn ReadAt,
    pub chunks: &'a [Chunk],
}

impl ReadAt for Overlay<'_> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.base.read_exact_at(buf, offset)?;
        let end = offset.checked_add(buf.len() as u64).ok_or(io::ErrorKind::InvalidInput)?;
        for c in self.chunks {
            let c_end = c.offset.saturating_add(c.bytes.len() as u64);
            let (lo, hi) = (offset.max(c.offset), end.min(c_end));
            if lo >= hi {
                continue;
            }
            let to_usize = |v: u64| usize::try_from(v).map_err(|_| io::ErrorKind::InvalidInput);
            let dst = to_usize(lo - offset)?..to_usize(hi - offset)?;
            let src = to_usize(lo - c.offset)?..to_usize(hi - c.offset)?;
            buf[dst].copy_from_slice(&c.bytes[src]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::fixtures::*;

    fn apply(img: &mut [u8], chunks: &[Chunk]) {
        for c in chunks {
            let at = c.offset as usize;
            img[at..at + c.bytes.len()].copy_from_slice(&c.bytes);
        }
    }

    #[test]
    fn gpt_4096_to_512_and_back() {
        let img = gpt_image(4096, 256, 128, &[(6, 99, "root"), (100, 199, "")]);
        let r = plan_rescale(&img, img.len() as u64, 4096, 512).unwrap();
        let got: Vec<_> = r.moved.iter().map(|m| (m.new_start, m.new_size)).collect();
        assert_eq!(got, [(48, 94 * 8), (800, 800)]);
        let mut small = img.clone();
        apply(&mut small, &r.chunks);
        let back = plan_rescale(&small, small.len() as u64, 512, 4096).unwrap();
        let mut again = small.clone();
        apply(&mut again, &back.chunks);
        let layout = table::read(&again, 4096, again.len() as u64).unwrap();
        assert_eq!(layout.partitions, r.old.partitions);
    }

    #[test]
    fn gpt_512_partition_inside_the_4096_array_is_refused() {
        let img = gpt_image(512, 4096, 128, &[(40, 103, "a")]);
        let err = plan_rescale(&img, img.len() as u64, 512, 4096).unwrap_err().to_string();
        assert!(err.contains("partition 1 starts at byte 20480"), "{err}");
    }

    #[test]
    fn mbr_with_logicals_512_to_4096_refuses_odd_starts() {
        let img = mbr_extended();
        let err = plan_rescale(&img, img.len() as u64, 512, 4096).unwrap_err().to_string();
        assert!(err.contains("partition 1 starts at byte 512"), "{err}");
    }

    #[test]
    fn mbr_with_logicals_4096_to_512() {
        let mut img = vec![0u8; 4096 * 512];
        mbr_entry(&mut img, 0, 0, 0x83, 8, 100);
        mbr_entry(&mut img, 0, 1, 0x05, 200, 300);
        mbr_entry(&mut img, 200 * 4096, 0, 0x83, 8, 50);
        mbr_entry(&mut img, 200 * 4096, 1, 0x05, 100, 100);
        mbr_entry(&mut img, 300 * 4096, 0, 0x83, 8, 40);
        let r = plan_rescale(&img, img.len() as u64, 4096, 512).unwrap();
        assert_eq!(r.moved.len(), 4);
        let mut small = img.clone();
        apply(&mut small, &r.chunks);
        let back = plan_rescale(&small, small.len() as u64, 512, 4096).unwrap();
        let mut again = small.clone();
        apply(&mut again, &back.chunks);
        let layout = table::read(&again, 4096, img.len() as u64).unwrap();
        assert_eq!(layout.partitions, r.old.partitions);
        // Only CHS (zero in the fixture) differs; a second round is a fixed point.
        assert_eq!(plan_rescale(&again, img.len() as u64, 4096, 512).unwrap().chunks, r.chunks);
    }

    #[test]
    fn mbr_beyond_32_bits_at_512_is_refused() {
        let mut img = vec![0u8; 64 * 4096];
        mbr_entry(&mut img, 0, 0, 0x83, 8, 40);
        // Only the table is read: a size far past the image is fine here.
        mbr_entry(&mut img, 0, 1, 0x83, 0x2000_0000, 0x1000_0000);
        let size = 0x4000_0000u64 * 4096;
        let err = plan_rescale(&img, size, 4096, 512).unwrap_err().to_string();
        assert!(err.contains("partition 2") && err.contains("32-bit"), "{err}");
    }

    #[test]
    fn mismatches_say_what_moved() {
        let img = gpt_image(512, 256, 128, &[(40, 99, "root"), (100, 199, "")]);
        let old = table::read(&img, 512, img.len() as u64).unwrap();
        assert_eq!(same_bytes(&old, &old).map(|m| m.len()), Ok(2));
        let mut new = old.clone();
        new.partitions[1].start += 8;
        let err = same_bytes(&old, &new).unwrap_err();
        let (old_range, new_range) = ((51200, 51200), (55296, 51200));
        let moved = Mismatch::Moved { number: 2, old: old_range, became: 2, new: new_range };
        assert_eq!(err, moved);
        assert_eq!(
            err.to_string(),
            "partition 2: bytes 51200+51200 became partition 2 at bytes 55296+51200"
        );
        new.partitions.pop();
        assert_eq!(same_bytes(&old, &new), Err(Mismatch::Count { old: 2, new: 1 }));
        new.label = Label::Mbr;
        let err = same_bytes(&old, &new).unwrap_err();
        assert_eq!(err.to_string(), "read back as Mbr, not Gpt");
    }

    #[test]
    fn bad_sizes() {
        let img = vec![0u8; 8192];
        assert!(matches!(plan_rescale(&img, 8192, 512, 512), Err(RescaleError::Sizes(512, 512))));
        assert!(matches!(plan_rescale(&img, 8192, 512, 8192), Err(RescaleError::Sizes(..))));
    }
}
