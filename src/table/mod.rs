//! Partition tables we own end to end: MBR with its EBR chain, and GPT.
//! Readers never panic on what they read: they return the layout and every
//! problem seen, or an error when no usable copy of the table exists.

pub mod amiga;
pub mod apm;
pub mod atari;
pub mod bsd;
pub mod edit;
pub mod foreign;
pub mod gpt;
pub mod mbr;
pub mod sgi;
pub mod sun;
pub mod types;
pub mod write;

use crate::stack::Contents;
use serde::Serialize;
use std::io;

/// Which kind of table a target holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Label {
    Mbr,
    Gpt,
    /// BSD disklabel on the whole disk (partitions nested in an MBR slice
    /// keep the MBR label).
    Bsd,
    Sun,
    /// SGI disk volume header.
    Sgi,
    /// Apple partition map.
    Mac,
    /// Amiga Rigid Disk Block.
    Amiga,
    /// Atari AHDI root sector (with XGM chains or ICD entries).
    Atari,
    /// A scheme we recognise but do not audit (`Layout::scheme` names it).
    Unsupported,
    None,
}

/// Random access to a disk or image, in bytes.
pub trait ReadAt {
    /// Fill all of `buf` from byte `offset`; a short read is an error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl ReadAt for std::fs::File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
}

impl ReadAt for [u8] {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let end = start.checked_add(buf.len()).ok_or(io::ErrorKind::UnexpectedEof)?;
        let src = self.get(start..end).ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// `&[u8]` cannot become `&dyn ReadAt` (unsized), so in-memory images
/// are passed as `&Vec<u8>`.
impl ReadAt for Vec<u8> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.as_slice().read_exact_at(buf, offset)
    }
}

/// What role a partition plays in its table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PartKind {
    /// An MBR primary partition.
    Primary,
    /// The MBR extended container holding the EBR chain.
    Extended,
    /// An MBR logical partition (numbered from 5).
    Logical,
    /// A GPT entry.
    Gpt,
    /// A BSD disklabel partition, alone or nested in an MBR slice.
    Bsd,
    Sun,
    Sgi,
    /// An Apple partition map entry.
    Mac,
    /// An Amiga RDB partition block.
    Amiga,
    /// An Atari AHDI, XGM or ICD entry.
    Atari,
    /// Known only from the kernel's view (the table could not be read).
    Unknown,
}

/// One partition, in logical sectors of the table's sector size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Partition {
    /// As the kernel numbers it: MBR primaries 1-4 by slot, logicals from 5
    /// in chain order, GPT by entry slot (1-based).
    pub number: u32,
    pub start: u64,
    pub size: u64,
    pub kind: PartKind,
    /// MBR type as "0x83", or the GPT type GUID in upper case.
    pub type_id: String,
    /// GPT partition name, when non-empty.
    pub name: Option<String>,
    /// For logical partitions: LBA of the EBR that describes it.
    pub ebr: Option<u64>,
}

/// How much a problem matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; nothing is wrong.
    Info,
    /// Something to fix, but every partition is where the table says.
    Warning,
    /// Data is unreachable or not where the table says, for Linux or for
    /// the table's own rules: counts toward exit code 1.
    Error,
}

impl Severity {
    /// The severity of each problem code; codes not listed are warnings.
    pub fn of(code: &str) -> Severity {
        match code {
            "beyond_end"
            | "overlap"
            | "logical_outside_extended"
            | "ebr_loop"
            | "ebr_link_outside"
            | "ebr_beyond_end"
            | "ebr_bad_signature"
            | "ebr_unreadable"
            | "ebr_chain_too_long"
            | "gpt_without_protective_mbr"
            | "pmbr_bad_start"
            | "gpt_primary_invalid"
            | "gpt_ignored_by_linux"
            | "gpt_entry_size"
            | "gpt_entry_inverted"
            | "position_overflow"
            | "label_bad_checksum"
            | "kernel_reads_boot_code"
            | "start_not_whole_sector"
            | "label_ignored_by_linux"
            | "bsd_outside_slice"
            | "bsd_unreadable"
            | "rdb_unreadable"
            | "rdb_loop"
            | "rdb_chain_too_long"
            | "rdb_partition_skipped"
            | "rdb_geometry_overflow"
            | "rdb_partition_inverted"
            | "atari_xgm_unreadable"
            | "atari_xgm_broken"
            | "atari_xgm_loop"
            | "atari_too_many"
            | "realign_unfinished" => Severity::Error,
            "hybrid_iso" | "iso_nested" | "too_small" | "libblkid_differs" => Severity::Info,
            _ => Severity::Warning,
        }
    }
}

/// Something wrong or noteworthy found while reading a table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Stable, machine-readable, snake_case (e.g. "gpt_primary_header_crc").
    pub code: &'static str,
    pub severity: Severity,
    pub message: String,
}

impl Problem {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self { code, severity: Severity::of(code), message: message.into() }
    }
}

/// GPT facts that matter for alignment and repair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GptInfo {
    /// LBA of the header the layout was taken from (1, or the backup's).
    pub header_lba: u64,
    /// LBA of the other header, as recorded.
    pub alternate_lba: u64,
    pub used_backup: bool,
    pub first_usable_lba: u64,
    pub last_usable_lba: u64,
    pub entries_lba: u64,
    pub entry_count: u32,
    pub entry_size: u32,
    pub disk_guid: String,
}

/// MBR facts that matter for alignment and repair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MbrInfo {
    pub disk_signature: u32,
    /// A single 0xEE entry guarding a GPT.
    pub protective: bool,
    /// 0xEE beside other entries: a hybrid MBR.
    pub hybrid: bool,
    /// EBR LBAs in chain order.
    pub ebrs: Vec<u64>,
}

/// A table as read from a disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Layout {
    pub label: Label,
    pub sector_size: u64,
    pub partitions: Vec<Partition>,
    pub problems: Vec<Problem>,
    pub gpt: Option<GptInfo>,
    pub mbr: Option<MbrInfo>,
    /// For `Label::Unsupported`: the scheme found, as libblkid or the
    /// kernel names it ("aix", "ultrix", ...).
    pub scheme: Option<&'static str>,
    /// For `Label::None`: the file system (or other contents) that starts
    /// at byte 0 of the whole disk.
    pub contents: Option<Contents>,
}

impl Layout {
    /// A disk with no table, before anything is read.
    pub fn blank(sector_size: u64) -> Layout {
        Layout {
            label: Label::None,
            sector_size,
            partitions: Vec::new(),
            problems: Vec::new(),
            gpt: None,
            mbr: None,
            scheme: None,
            contents: None,
        }
    }

    /// Byte ranges no partition claims: the gaps between partitions and
    /// after the last, up to the last usable LBA. Space before the first
    /// partition is never free (boot loaders live there), nor is an extended
    /// partition (EBRs live there). A disk without a table has none: it may
    /// hold a file system directly.
    pub fn free_ranges(&self, size_bytes: u64) -> Vec<std::ops::Range<u64>> {
        let ss = self.sector_size;
        let end = match &self.gpt {
            Some(g) => g.last_usable_lba.saturating_add(1).saturating_mul(ss).min(size_bytes),
            None => size_bytes,
        };
        let mut used: Vec<(u64, u64)> = self
            .partitions
            .iter()
            .map(|p| {
                (p.start.saturating_mul(ss), p.start.saturating_add(p.size).saturating_mul(ss))
            })
            .collect();
        used.sort_unstable();
        let mut free = Vec::new();
        let Some(&(_, mut cursor)) = used.first() else { return free };
        for &(start, stop) in &used[1..] {
            if start > cursor {
                free.push(cursor..start);
            }
            cursor = cursor.max(stop);
        }
        if end > cursor {
            free.push(cursor..end);
        }
        free
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("cannot read the partition table: {0}")]
    Io(#[from] io::Error),
    #[error("corrupt partition table with no usable copy: {0}")]
    Unusable(String),
    #[error("unsupported sector size {0} (must be a power of two from 512 to 4096)")]
    SectorSize(u64),
}

/// Read whatever table `dev` holds. `sector_size` is the logical sector
/// size (512..=4096, power of two); `size_bytes` the device or image size.
/// Schemes are tried in the kernel's order (block/partitions/core.c): GPT,
/// SGI, MBR, BSD, Sun, Amiga, Atari, Apple; then schemes we only name; then contents
/// that start at byte 0 of a disk without a table.
pub fn read(dev: &dyn ReadAt, sector_size: u64, size_bytes: u64) -> Result<Layout, TableError> {
    if !crate::units::is_sector_size(sector_size, 4096) {
        return Err(TableError::SectorSize(sector_size));
    }
    let sectors = size_bytes / sector_size;
    let mut layout = Layout::blank(sector_size);
    if size_bytes < 512 {
        layout.problems.push(Problem::new(
            "too_small",
            format!("{size_bytes} bytes: too small to hold a partition table"),
        ));
        return Ok(layout);
    }
    let lba0 = read_prefix(dev, sector_size, size_bytes)?;
    let mbr = mbr::Mbr::parse(&lba0);
    let mbr_in_use = mbr.as_ref().is_some_and(mbr::Mbr::in_use);
    let guarded = mbr.as_ref().is_some_and(mbr::Mbr::guards_gpt);
    if guarded || (!mbr_in_use && sectors > 2 && gpt::primary_valid(dev, sector_size, sectors)) {
        if let Some(mbr) = &mbr {
            layout.mbr = Some(mbr.gpt_guard_info(&mut layout.problems));
        }
        if !guarded {
            layout.problems.push(Problem::new(
                "gpt_without_protective_mbr",
                "valid GPT at LBA 1 but no protective MBR (type 0xEE): \
                 Linux ignores this GPT unless booted with `gpt`",
            ));
        }
        gpt::read_into(dev, sectors, &mut layout)?;
    } else if let Some(scheme) = foreign::before_mbr(dev, sector_size) {
        layout.label = Label::Unsupported;
        layout.scheme = Some(scheme);
    } else if !sgi::read_into(dev, &mut layout)? {
        let is_mbr = match mbr.as_ref().filter(|m| m.boot_indicators_valid()) {
            Some(mbr) => mbr::read_with_checks(dev, mbr, sectors, size_bytes, &mut layout)?,
            None => false,
        };
        // A file system's boot sector, already named, is not another scheme.
        if !is_mbr && layout.contents.is_none() {
            read_other(dev, size_bytes, &mut layout)?;
        }
    }
    layout.partitions.sort_by_key(|p| p.number);
    check_bounds(&mut layout, sectors);
    check_overlaps(&mut layout, || holds_iso(dev, size_bytes));
    Ok(layout)
}

/// A disk with neither GPT nor MBR: another scheme, or contents at byte 0.
fn read_other(dev: &dyn ReadAt, size_bytes: u64, layout: &mut Layout) -> Result<(), TableError> {
    for read in [bsd::read_into, sun::read_into] {
        if read(dev, layout)? {
            return Ok(());
        }
    }
    // Linux's amiga.c gives way to the parsers after it when it makes no
    // partition (an RDB without any, or one it cannot follow): a later
    // scheme found then wins, else the RDB is reported.
    let before = layout.clone();
    let rdb = amiga::read_into(dev, layout)?;
    if rdb && !layout.partitions.is_empty() {
        return Ok(());
    }
    let rdb = rdb.then(|| std::mem::replace(layout, before));
    let atari = |dev: &dyn ReadAt, layout: &mut Layout| atari::read_into(dev, size_bytes, layout);
    for read in [&atari as &dyn Fn(&dyn ReadAt, &mut Layout) -> _, &apm::read_into] {
        if read(dev, layout)? {
            return Ok(());
        }
    }
    if let Some(rdb) = rdb {
        *layout = rdb;
        return Ok(());
    }
    if let Some(scheme) = foreign::recognise(dev, layout.sector_size, size_bytes) {
        layout.label = Label::Unsupported;
        layout.scheme = Some(scheme);
        return Ok(());
    }
    layout.contents = crate::stack::identify(dev, 0, size_bytes)?;
    Ok(())
}

/// The first sector, zero-padded when the device is shorter than one: a
/// file holding just an MBR is read for what it holds.
fn read_prefix(dev: &dyn ReadAt, sector_size: u64, size_bytes: u64) -> io::Result<Vec<u8>> {
    let len = sector_size.min(size_bytes);
    let mut buf = vec![0u8; usize::try_from(sector_size).unwrap_or(4096)];
    let have = buf.get_mut(..usize::try_from(len).unwrap_or(0)).unwrap_or_default();
    dev.read_exact_at(have, 0)?;
    Ok(buf)
}

/// For images: the logical sector size the table implies, and why. A GPT
/// header sits at byte 512 or byte 4096 (512 wins if both). An MBR says
/// nothing of its sector size, but an image from a 4Kn disk read as 512-byte
/// sectors puts partitions and EBRs past its end: when only the 4096-byte
/// reading fits, or only it holds recognisable contents, it is the one.
pub fn detect_sector_size(dev: &dyn ReadAt, size_bytes: u64) -> SectorGuess {
    let gpt = [512, 4096].into_iter().find(|&offset| {
        let mut sig = [0u8; 8];
        offset + 8 <= size_bytes
            && dev.read_exact_at(&mut sig, offset).is_ok()
            && &sig == gpt::SIGNATURE
    });
    if let Some(size) = gpt {
        return SectorGuess::Known(size, None);
    }
    let mbr = |ss| read(dev, ss, size_bytes).ok().filter(|l| l.label == Label::Mbr);
    let (Some(small), Some(large)) = (mbr(512), mbr(4096)) else { return SectorGuess::Unknown };
    if implausible(&large) {
        return SectorGuess::Unknown;
    }
    let found = (recognised(dev, &small), recognised(dev, &large));
    if implausible(&small) || (found.0 == 0 && found.1 > 0) {
        return SectorGuess::Known(
            4096,
            Some(
                "read as 512-byte sectors the MBR's EBRs or partitions run past the image's end \
                 or hold nothing recognisable; as 4096-byte sectors they fit and hold what they \
                 should: an image of a 4Kn disk",
            ),
        );
    }
    if found.0 == 0 {
        return SectorGuess::Unsure(
            "an MBR does not record its sector size: read as 512-byte sectors; if this image \
             comes from a 4Kn disk, pass --logical-sector-size 4096",
        );
    }
    SectorGuess::Unknown
}

/// Problems that a wrong sector size produces in an MBR reading.
fn implausible(layout: &Layout) -> bool {
    layout.problems.iter().any(|p| {
        matches!(p.code, "beyond_end" | "ebr_beyond_end" | "ebr_bad_signature" | "ebr_unreadable")
    })
}

/// How many data partitions start with contents we recognise.
fn recognised(dev: &dyn ReadAt, layout: &Layout) -> usize {
    let ss = layout.sector_size;
    let holds = |p: &&Partition| {
        let (Some(at), Some(len)) = (p.start.checked_mul(ss), p.size.checked_mul(ss)) else {
            return false;
        };
        crate::stack::identify(dev, at, len).ok().flatten().is_some()
    };
    layout.partitions.iter().filter(|p| p.kind != PartKind::Extended).filter(holds).count()
}

/// What an image's table tells of its logical sector size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectorGuess {
    /// This size, with a note when it was inferred rather than read.
    Known(u64, Option<&'static str>),
    /// Both sizes read as a plausible table.
    Unsure(&'static str),
    Unknown,
}

/// Read `count` sectors from `lba`, failing cleanly on offsets that overflow.
pub(crate) fn read_sectors(
    dev: &dyn ReadAt,
    lba: u64,
    count: u64,
    sector_size: u64,
) -> io::Result<Vec<u8>> {
    let bad = || io::Error::new(io::ErrorKind::InvalidInput, "sector range overflows");
    let offset = lba.checked_mul(sector_size).ok_or_else(bad)?;
    let len = count.checked_mul(sector_size).ok_or_else(bad)?;
    let mut buf = vec![0u8; usize::try_from(len).map_err(|_| bad())?];
    dev.read_exact_at(&mut buf, offset)?;
    Ok(buf)
}

pub(crate) fn read_lba(dev: &dyn ReadAt, lba: u64, sector_size: u64) -> io::Result<Vec<u8>> {
    read_sectors(dev, lba, 1, sector_size)
}

/// Little-endian fields at fixed offsets; None when `buf` is too short.
pub(crate) fn le_u16(buf: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(buf.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

pub(crate) fn le_u32(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(buf.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

pub(crate) fn le_u64(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(buf.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// Big-endian fields (Sun, SGI, Apple, BSD on big-endian hosts, LUKS, ZFS).
pub(crate) fn be_u16(buf: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(buf.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

pub(crate) fn be_u32(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(buf.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

pub(crate) fn be_u64(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(buf.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// One past the last sector of `p`, or None if that overflows.
fn end_of(p: &Partition) -> Option<u64> {
    p.start.checked_add(p.size)
}

fn check_bounds(layout: &mut Layout, sectors: u64) {
    for p in &layout.partitions {
        if end_of(p).is_none_or(|end| end > sectors) {
            layout.problems.push(Problem::new(
                "beyond_end",
                format!(
                    "partition {} (sectors {}+{}) extends past the end of the device ({} sectors)",
                    p.number, p.start, p.size, sectors
                ),
            ));
        }
    }
}

/// Report overlapping partitions. A sweep in start order keeps this linear
/// for GPTs with many entries; the extended container is checked apart,
/// since it holds its logicals by design.
fn check_overlaps(layout: &mut Layout, is_iso: impl FnOnce() -> bool) {
    let mut pairs = Vec::new();
    let nested = layout.partitions.iter().any(|p| p.kind == PartKind::Bsd);
    // Containers hold their logicals or BSD partitions by design.
    let container = |p: &Partition| {
        p.kind == PartKind::Extended
            || (nested
                && p.kind == PartKind::Primary
                && types::parse_mbr_code(&p.type_id).is_some_and(|c| mbr::BSD_TYPES.contains(&c)))
    };
    let mut sorted: Vec<&Partition> = layout
        .partitions
        .iter()
        .filter(|p| p.size > 0 && !container(p) && !foreign::holds_no_data(p))
        .collect();
    sorted.sort_by_key(|p| (p.start, p.number));
    let mut reach: Option<(&Partition, u64)> = None;
    for p in sorted {
        let end = end_of(p).unwrap_or(u64::MAX);
        if let Some((q, q_end)) = reach {
            if p.start < q_end {
                pairs.push((q, p));
            }
            if end <= q_end {
                continue;
            }
        }
        reach = Some((p, end));
    }
    // At most four MBR slots, so pairwise is cheap.
    let slots: Vec<&Partition> = layout
        .partitions
        .iter()
        .filter(|p| matches!(p.kind, PartKind::Primary | PartKind::Extended))
        .collect();
    for (i, a) in slots.iter().enumerate() {
        for b in slots.iter().skip(i + 1) {
            let has_ext = container(a) || container(b);
            if has_ext && intersects(a, b) {
                pairs.push((a, b));
            }
        }
    }
    // xorriso puts a hybrid ISO's EFI image partition inside the one
    // covering the ISO, on purpose: noted, not an error. Partial overlaps
    // stay errors.
    let iso = pairs.iter().any(|&(a, b)| inside(a, b) || inside(b, a)) && is_iso();
    let found: Vec<Problem> = pairs
        .into_iter()
        .map(|(a, b)| match (iso, inside(a, b), inside(b, a)) {
            (true, true, _) => iso_nested(b, a),
            (true, _, true) => iso_nested(a, b),
            _ => overlap(a, b),
        })
        .collect();
    layout.problems.extend(found);
}

/// `a` lies wholly inside `b`.
fn inside(a: &Partition, b: &Partition) -> bool {
    a.start >= b.start && end_of(a).zip(end_of(b)).is_some_and(|(ae, be)| ae <= be)
}

fn iso_nested(outer: &Partition, inner: &Partition) -> Problem {
    Problem::new(
        "iso_nested",
        format!(
            "partition {} lies inside partition {}: a hybrid ISO's boot image, a file of the \
             ISO that firmware finds through the table (intentional)",
            inner.number, outer.number
        ),
    )
}

fn intersects(a: &Partition, b: &Partition) -> bool {
    let a_end = end_of(a).unwrap_or(u64::MAX);
    let b_end = end_of(b).unwrap_or(u64::MAX);
    a.size > 0 && b.size > 0 && a.start < b_end && b.start < a_end
}

/// An ISO 9660 file system from byte 0: a hybrid ISO image.
pub(crate) fn holds_iso(dev: &dyn ReadAt, size_bytes: u64) -> bool {
    let found = crate::stack::identify(dev, 0, size_bytes).ok().flatten();
    found.is_some_and(|c| c.kind == crate::stack::Kind::Iso9660)
}

fn overlap(a: &Partition, b: &Partition) -> Problem {
    let (a, b) = if a.number <= b.number { (a, b) } else { (b, a) };
    Problem::new(
        "overlap",
        format!(
            "partitions {} (sectors {}+{}) and {} (sectors {}+{}) overlap",
            a.number, a.start, a.size, b.number, b.start, b.size
        ),
    )
}

/// Hand-built images for tests. Test fixtures only, not a table writer.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::gpt::header_crc_of;

    /// Linux filesystem data, 0FC63DAF-8483-4772-8E79-3D69D8477DE4, as stored.
    pub const LINUX: [u8; 16] = [
        0xAF, 0x3D, 0xC6, 0x0F, 0x83, 0x84, 0x72, 0x47, 0x8E, 0x79, 0x3D, 0x69, 0xD8, 0x47, 0x7D,
        0xE4,
    ];
    pub const DISK_GUID: [u8; 16] = [7; 16];

    fn put(img: &mut [u8], at: usize, bytes: &[u8]) {
        img[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn at(lba: u64, ss: u64) -> usize {
        usize::try_from(lba * ss).unwrap()
    }

    /// Write entry `slot` of the boot record at byte `base`, and sign it.
    pub fn mbr_entry(img: &mut [u8], base: usize, slot: usize, kind: u8, start: u32, sectors: u32) {
        let e = base + 446 + slot * 16;
        img[e + 4] = kind;
        put(img, e + 8, &start.to_le_bytes());
        put(img, e + 12, &sectors.to_le_bytes());
        put(img, base + 510, &[0x55, 0xAA]);
    }

    /// 512 sectors: primary 1 (1+63), extended 2 (64+256) holding EBRs at
    /// 64, 128, 192 that describe logicals 65+63, 129+63, 193+100.
    pub fn mbr_extended() -> Vec<u8> {
        let mut img = vec![0u8; 512 * 512];
        mbr_entry(&mut img, 0, 0, 0x83, 1, 63);
        mbr_entry(&mut img, 0, 1, 0x05, 64, 256);
        for (ebr, size, next) in [(64, 63, 64), (128, 63, 128), (192, 100, 0)] {
            mbr_entry(&mut img, ebr * 512, 0, 0x83, 1, size);
            if next != 0 {
                mbr_entry(&mut img, ebr * 512, 1, 0x05, next, 64);
            }
        }
        img
    }

    /// A GPT image with `sectors` sectors, 128 entries of `entry_size`
    /// bytes, and partitions (first, last, name) in slots 1, 2, ...
    pub fn gpt_image(
        ss: u64,
        sectors: u64,
        entry_size: u32,
        parts: &[(u64, u64, &str)],
    ) -> Vec<u8> {
        let mut img = vec![0u8; at(sectors, ss)];
        mbr_entry(&mut img, 0, 0, 0xEE, 1, u32::try_from(sectors - 1).unwrap_or(u32::MAX));
        let mut array = vec![0u8; 128 * entry_size as usize];
        for (i, (first, last, name)) in parts.iter().enumerate() {
            let e = i * entry_size as usize;
            put(&mut array, e, &LINUX);
            put(&mut array, e + 16, &[i as u8 + 1; 16]);
            put(&mut array, e + 32, &first.to_le_bytes());
            put(&mut array, e + 40, &last.to_le_bytes());
            let name: Vec<u8> = name.encode_utf16().flat_map(u16::to_le_bytes).collect();
            put(&mut array, e + 56, &name);
        }
        let array_sectors = (array.len() as u64).div_ceil(ss);
        let last = sectors - 1;
        let usable = (2 + array_sectors, last - 1 - array_sectors);
        let crc = crc32fast::hash(&array);
        put(&mut img, at(2, ss), &array);
        put(&mut img, at(last - array_sectors, ss), &array);
        let header = |my: u64, alt: u64, entries: u64| {
            let mut h = vec![0u8; 92];
            put(&mut h, 0, b"EFI PART");
            put(&mut h, 8, &0x0001_0000u32.to_le_bytes());
            put(&mut h, 12, &92u32.to_le_bytes());
            put(&mut h, 24, &my.to_le_bytes());
            put(&mut h, 32, &alt.to_le_bytes());
            put(&mut h, 40, &usable.0.to_le_bytes());
            put(&mut h, 48, &usable.1.to_le_bytes());
            put(&mut h, 56, &DISK_GUID);
            put(&mut h, 72, &entries.to_le_bytes());
            put(&mut h, 80, &128u32.to_le_bytes());
            put(&mut h, 84, &entry_size.to_le_bytes());
            put(&mut h, 88, &crc.to_le_bytes());
            h
        };
        put(&mut img, at(1, ss), &header(1, last, 2));
        put(&mut img, at(last, ss), &header(last, 1, last - array_sectors));
        reseal(&mut img, ss, 1);
        reseal(&mut img, ss, last);
        img
    }

    /// Recompute the CRC of the 92-byte header at `lba`.
    pub fn reseal(img: &mut [u8], ss: u64, lba: u64) {
        let h = at(lba, ss);
        if let Some(raw) = img.get(h..h + 92) {
            let crc = header_crc_of(raw);
            put(img, h + 16, &crc.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    fn problems(layout: &Layout) -> Vec<&'static str> {
        layout.problems.iter().map(|p| p.code).collect()
    }

    fn read_img(img: &[u8], ss: u64) -> Layout {
        read(&img.to_vec(), ss, img.len() as u64).unwrap()
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // a list of one range
    fn free_ranges_skip_partitions_extended_and_the_boot_gap() {
        let mbr = read_img(&mbr_extended(), 512);
        assert_eq!(mbr.free_ranges(512 * 512), [320 * 512..512 * 512]);
        let gpt =
            read_img(&gpt_image(512, 4096, 128, &[(2048, 2099, "a"), (3000, 3099, "b")]), 512);
        let last = gpt.gpt.as_ref().unwrap().last_usable_lba;
        assert_eq!(
            gpt.free_ranges(4096 * 512),
            [2100 * 512..3000 * 512, 3100 * 512..(last + 1) * 512]
        );
        assert!(read_img(&[0u8; 8192], 512).free_ranges(8192).is_empty());
    }

    #[test]
    fn blank_disk_has_no_label() {
        let layout = read_img(&[0u8; 8192], 512);
        assert_eq!(layout.label, Label::None);
        assert!(layout.partitions.is_empty() && layout.problems.is_empty());
        assert_eq!(read_img(&[], 512).label, Label::None);
    }

    #[test]
    fn bad_sector_size() {
        for ss in [0, 256, 768, 8192] {
            assert!(
                matches!(read(&vec![0u8; 512], ss, 512), Err(TableError::SectorSize(s)) if s == ss)
            );
        }
    }

    #[test]
    fn mbr_primaries_keep_slot_numbers() {
        let mut img = vec![0u8; 4096 * 512];
        mbr_entry(&mut img, 0, 0, 0x83, 2048, 1000);
        mbr_entry(&mut img, 0, 2, 0x07, 3048, 1048);
        img[440..444].copy_from_slice(&0xDEAD_BEEFu32.to_le_bytes());
        let layout = read_img(&img, 512);
        assert_eq!(layout.label, Label::Mbr);
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        let got: Vec<_> = layout
            .partitions
            .iter()
            .map(|p| (p.number, p.start, p.size, p.type_id.as_str()))
            .collect();
        assert_eq!(got, [(1, 2048, 1000, "0x83"), (3, 3048, 1048, "0x07")]);
        assert_eq!(layout.mbr.unwrap().disk_signature, 0xDEAD_BEEF);
    }

    #[test]
    fn mbr_overlap_and_beyond_end() {
        let mut img = vec![0u8; 4096 * 512];
        mbr_entry(&mut img, 0, 0, 0x83, 2048, 1000);
        mbr_entry(&mut img, 0, 1, 0x83, 2500, 1000);
        mbr_entry(&mut img, 0, 2, 0x83, 4000, 1000);
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["beyond_end", "overlap"]);
        assert!(layout.problems[1].message.contains("partitions 1 "));
    }

    #[test]
    fn extended_with_three_logicals() {
        let layout = read_img(&mbr_extended(), 512);
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        let got: Vec<_> =
            layout.partitions.iter().map(|p| (p.number, p.start, p.size, p.kind, p.ebr)).collect();
        assert_eq!(
            got,
            [
                (1, 1, 63, PartKind::Primary, None),
                (2, 64, 256, PartKind::Extended, None),
                (5, 65, 63, PartKind::Logical, Some(64)),
                (6, 129, 63, PartKind::Logical, Some(128)),
                (7, 193, 100, PartKind::Logical, Some(192)),
            ]
        );
        assert_eq!(layout.partitions[1].type_id, "0x05");
        assert_eq!(layout.mbr.unwrap().ebrs, [64, 128, 192]);
    }

    #[test]
    fn extended_overlapping_primary() {
        let mut img = mbr_extended();
        mbr_entry(&mut img, 0, 2, 0x83, 300, 50);
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["overlap"]);
        assert!(layout.problems[0].message.contains("partitions 2 "));
    }

    #[test]
    fn ebr_loop_is_caught() {
        let mut img = mbr_extended();
        mbr_entry(&mut img, 192 * 512, 1, 0x05, 64, 64); // third EBR links to the second
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["ebr_loop"]);
        assert_eq!(layout.partitions.len(), 5);
    }

    #[test]
    fn logical_outside_extended() {
        let mut img = mbr_extended();
        mbr_entry(&mut img, 192 * 512, 0, 0x83, 1, 200);
        assert_eq!(problems(&read_img(&img, 512)), ["logical_outside_extended"]);
    }

    #[test]
    fn ebr_chain_too_long() {
        let n = mbr::MAX_EBRS + 10;
        let mut img = vec![0u8; (n + 2) * 512];
        mbr_entry(&mut img, 0, 0, 0x05, 1, n as u32);
        for i in 0..n {
            mbr_entry(&mut img, (i + 1) * 512, 1, 0x05, i as u32 + 1, 1);
        }
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["ebr_chain_too_long"]);
        assert_eq!(layout.mbr.unwrap().ebrs.len(), mbr::MAX_EBRS);
    }

    #[test]
    fn ebr_without_signature_stops_chain() {
        let mut img = mbr_extended();
        img[128 * 512 + 510] = 0;
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["ebr_bad_signature"]);
        assert_eq!(layout.mbr.unwrap().ebrs, [64]);
    }

    #[test]
    fn ebr_link_outside_extended() {
        let mut img = mbr_extended();
        mbr_entry(&mut img, 192 * 512, 1, 0x05, 4000, 64);
        // Linux follows the link anyway; here it leads past the end.
        assert_eq!(problems(&read_img(&img, 512)), ["ebr_link_outside", "ebr_beyond_end"]);
    }

    fn numbered(layout: &Layout) -> Vec<(u32, u64, u64)> {
        layout.partitions.iter().map(|p| (p.number, p.start, p.size)).collect()
    }

    #[test]
    fn type_zero_entries_with_sectors_are_partitions() {
        let mut img = vec![0u8; 4096 * 512];
        mbr_entry(&mut img, 0, 0, 0x00, 0, 2048);
        mbr_entry(&mut img, 0, 1, 0xEF, 2048, 1024);
        mbr_entry(&mut img, 0, 2, 0x00, 0, 0);
        let layout = read_img(&img, 512);
        assert_eq!(layout.label, Label::Mbr);
        assert_eq!(numbered(&layout), [(1, 0, 2048), (2, 2048, 1024)]);
    }

    #[test]
    fn ebr_with_two_data_entries_and_garbage_in_slot_four() {
        let mut img = mbr_extended();
        // The first EBR describes 65+30 and 100+20; slot 4 holds garbage
        // past the extended partition's end.
        mbr_entry(&mut img, 64 * 512, 0, 0x83, 1, 30);
        mbr_entry(&mut img, 64 * 512, 2, 0x83, 36, 20);
        mbr_entry(&mut img, 64 * 512, 3, 0x83, 5000, 20);
        let layout = read_img(&img, 512);
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        let logicals: Vec<_> = numbered(&layout).into_iter().filter(|&(n, _, _)| n >= 5).collect();
        assert_eq!(logicals, [(5, 65, 30), (6, 100, 20), (7, 129, 63), (8, 193, 100)]);
    }

    #[test]
    fn two_extended_partitions_number_on() {
        let mut img = mbr_extended();
        mbr_entry(&mut img, 0, 3, 0x0F, 320, 128);
        mbr_entry(&mut img, 320 * 512, 0, 0x83, 2, 100);
        let layout = read_img(&img, 512);
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        assert_eq!(
            numbered(&layout),
            [
                (1, 1, 63),
                (2, 64, 256),
                (4, 320, 128),
                (5, 65, 63),
                (6, 129, 63),
                (7, 193, 100),
                (8, 322, 100)
            ]
        );
        assert_eq!(layout.mbr.unwrap().ebrs, [64, 128, 192, 320]);
    }

    #[test]
    fn bad_boot_indicator_is_not_an_mbr() {
        let mut img = vec![0u8; 4096 * 512];
        mbr_entry(&mut img, 0, 0, 0x83, 2048, 1000);
        img[446 + 16] = 0x41; // boot code, not an indicator
        let layout = read_img(&img, 512);
        assert_eq!(layout.label, Label::None);
        assert!(layout.partitions.is_empty());
    }

    #[test]
    fn an_mbr_alone_is_read_for_what_it_holds() {
        let mut img = vec![0u8; 512];
        mbr_entry(&mut img, 0, 0, 0x83, 2048, 1000);
        let layout = read_img(&img, 512);
        assert_eq!(numbered(&layout), [(1, 2048, 1000)]);
        assert_eq!(problems(&layout), ["beyond_end"]);
        assert_eq!(read_img(&img, 4096).partitions.len(), 1);
        assert_eq!(problems(&read_img(&img[..300], 512)), ["too_small"]);
    }

    #[test]
    fn a_4kn_mbr_image_reads_as_4096() {
        // 1 MiB as 4096-byte sectors: an extended partition at 64 whose EBR
        // is at byte 64 * 4096; read as 512, LBA 64 holds no EBR.
        let mut img = vec![0u8; 1 << 20];
        mbr_entry(&mut img, 0, 0, 0x05, 64, 128);
        mbr_entry(&mut img, 64 * 4096, 0, 0x83, 1, 100);
        let guess = detect_sector_size(&img, img.len() as u64);
        assert!(matches!(guess, SectorGuess::Known(4096, Some(_))), "{guess:?}");
        let mut img = vec![0u8; 1 << 20];
        mbr_entry(&mut img, 0, 0, 0x83, 64, 128);
        let guess = detect_sector_size(&img, img.len() as u64);
        assert!(matches!(guess, SectorGuess::Unsure(_)), "{guess:?}");
    }

    #[test]
    fn empty_extended_is_fine() {
        let mut img = vec![0u8; 512 * 512];
        mbr_entry(&mut img, 0, 1, 0x0F, 64, 256);
        img[64 * 512 + 510..64 * 512 + 512].copy_from_slice(&[0x55, 0xAA]);
        let layout = read_img(&img, 512);
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        assert_eq!(layout.partitions.len(), 1);
        assert_eq!(layout.mbr.unwrap().ebrs, [64]);
    }

    #[test]
    fn gpt_valid_at_512_and_4096() {
        for ss in [512, 4096] {
            let img = gpt_image(ss, 256, 128, &[(40, 99, "root"), (100, 199, "")]);
            let layout = read_img(&img, ss);
            assert_eq!(layout.label, Label::Gpt);
            assert!(layout.problems.is_empty(), "{ss}: {:?}", layout.problems);
            let got: Vec<_> = layout
                .partitions
                .iter()
                .map(|p| (p.number, p.start, p.size, p.name.as_deref()))
                .collect();
            assert_eq!(got, [(1, 40, 60, Some("root")), (2, 100, 100, None)]);
            assert_eq!(layout.partitions[0].type_id, "0FC63DAF-8483-4772-8E79-3D69D8477DE4");
            let gpt = layout.gpt.unwrap();
            assert_eq!((gpt.header_lba, gpt.alternate_lba, gpt.used_backup), (1, 255, false));
            assert_eq!((gpt.entry_count, gpt.entry_size, gpt.entries_lba), (128, 128, 2));
            assert_eq!(gpt.disk_guid, "07070707-0707-0707-0707-070707070707");
            let mbr = layout.mbr.unwrap();
            assert!(mbr.protective && !mbr.hybrid);
        }
    }

    #[test]
    fn gpt_entry_size_256() {
        let img = gpt_image(512, 256, 256, &[(100, 149, "a"), (150, 159, "b")]);
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["gpt_entry_size"]);
        assert_eq!(layout.partitions.len(), 2);
        assert_eq!(layout.partitions[1].name.as_deref(), Some("b"));
    }

    #[test]
    fn corrupt_primary_uses_backup() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        img[512 + 40] ^= 1;
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["gpt_primary_invalid"]);
        assert!(
            layout.problems[0].message.contains("CRC mismatch"),
            "{}",
            layout.problems[0].message
        );
        assert!(layout.problems[0].message.contains("backup at LBA 255"));
        let gpt = layout.gpt.unwrap();
        assert!(gpt.used_backup);
        assert_eq!((gpt.header_lba, gpt.alternate_lba), (255, 1));
        assert_eq!(layout.partitions[0].start, 40);
    }

    #[test]
    fn both_corrupt_is_unusable() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        img[512 + 40] ^= 1;
        img[255 * 512 + 40] ^= 1;
        let err = read(&img, 512, img.len() as u64).unwrap_err();
        assert!(matches!(err, TableError::Unusable(ref m) if m.contains("LBA 255")), "{err}");
    }

    #[test]
    fn corrupt_entries_crc_uses_backup() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        img[2 * 512 + 33] ^= 1;
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["gpt_primary_invalid"]);
        assert!(layout.problems[0].message.contains("entry array CRC"));
    }

    #[test]
    fn corrupt_backup_is_reported() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        img[255 * 512] = b'X';
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["gpt_backup_invalid"]);
    }

    #[test]
    fn wrong_alternate_lba_does_not_hide_the_backup() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        img[512 + 32..512 + 40].copy_from_slice(&100u64.to_le_bytes());
        reseal(&mut img, 512, 1);
        let layout = read_img(&img, 512);
        assert!(problems(&layout).contains(&"gpt_alternate_lba_wrong"), "{:?}", layout.problems);
        assert!(!problems(&layout).contains(&"gpt_backup_invalid"));
    }

    #[test]
    fn ebr_slots_are_read_by_type_not_position() {
        let mut img = mbr_extended();
        mbr_entry(&mut img, 64 * 512, 0, 0x05, 64, 64);
        mbr_entry(&mut img, 64 * 512, 1, 0x83, 1, 63);
        assert_eq!(read_img(&img, 512).partitions, read_img(&mbr_extended(), 512).partitions);
    }

    #[test]
    fn differing_backup_is_reported() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        img[255 * 512 + 56] ^= 1;
        reseal(&mut img, 512, 255);
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["gpt_backup_differs"]);
        assert!(layout.problems[0].message.contains("disk GUID"));
    }

    #[test]
    fn grown_image_leaves_backup_behind() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        img.resize(512 * 512, 0);
        assert_eq!(problems(&read_img(&img, 512)), ["gpt_backup_not_at_end"]);
    }

    #[test]
    fn hybrid_mbr() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        mbr_entry(&mut img, 0, 1, 0x83, 40, 60);
        let layout = read_img(&img, 512);
        assert_eq!(problems(&layout), ["hybrid_mbr"]);
        let mbr = layout.mbr.unwrap();
        assert!(mbr.hybrid && !mbr.protective);
        assert_eq!(layout.partitions.len(), 1);
    }

    #[test]
    fn mbr_with_partitions_wins_over_a_stale_gpt() {
        let mut img = gpt_image(512, 4096, 128, &[(2048, 2099, "a")]);
        mbr_entry(&mut img, 0, 0, 0x83, 63, 1000);
        let layout = read_img(&img, 512);
        assert_eq!(layout.label, Label::Mbr);
        assert_eq!((layout.partitions[0].start, layout.partitions[0].size), (63, 1000));
        assert_eq!(problems(&layout), ["stale_gpt"]);
    }

    #[test]
    fn gpt_without_protective_mbr() {
        let mut img = gpt_image(512, 256, 128, &[(40, 99, "root")]);
        img[..512].fill(0);
        let layout = read_img(&img, 512);
        assert_eq!(layout.label, Label::Gpt);
        assert_eq!(problems(&layout), ["gpt_without_protective_mbr"]);
        assert!(layout.mbr.is_none());
    }

    #[test]
    fn gpt_entry_problems() {
        let parts =
            [(40, 99, "a"), (90, 120, "b"), (10, 20, "c"), (150, 140, "d"), (200, 300, "e")];
        let layout = read_img(&gpt_image(512, 256, 128, &parts), 512);
        let mut codes = problems(&layout);
        codes.sort_unstable();
        assert_eq!(
            codes,
            ["beyond_end", "gpt_entry_inverted", "outside_usable", "outside_usable", "overlap"]
        );
        let numbers: Vec<_> = layout.partitions.iter().map(|p| p.number).collect();
        assert_eq!(numbers, [1, 2, 3, 5]);
    }

    #[test]
    fn sector_size_detection() {
        let img = gpt_image(512, 256, 128, &[]);
        assert_eq!(detect_sector_size(&img, img.len() as u64), SectorGuess::Known(512, None));
        let img = gpt_image(4096, 64, 128, &[]);
        assert_eq!(detect_sector_size(&img, img.len() as u64), SectorGuess::Known(4096, None));
        assert_eq!(detect_sector_size(&vec![0u8; 8192], 8192), SectorGuess::Unknown);
        assert_eq!(detect_sector_size(&vec![0u8; 100], 100), SectorGuess::Unknown);
    }

    #[test]
    fn wrong_sector_size_sees_no_gpt_header() {
        // A 4096-byte GPT read as 512: the 0xEE guard says GPT, LBA 1 holds nothing.
        let img = gpt_image(4096, 64, 128, &[]);
        assert!(matches!(read(&img, 512, img.len() as u64), Err(TableError::Unusable(_))));
    }
}

#[cfg(test)]
mod prop {
    use super::fixtures::*;
    use super::*;
    use proptest::prelude::*;

    fn sector_size() -> impl Strategy<Value = u64> {
        prop_oneof![Just(512u64), Just(1024), Just(2048), Just(4096)]
    }

    /// Offsets inside the boot records, headers and entry arrays, where a
    /// flipped byte changes what the reader does.
    fn hot_offset(len: usize) -> impl Strategy<Value = usize> {
        prop_oneof![0..1024usize, 1024..3072usize, (len - 512)..len, 0..len]
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..20_000),
            ss in sector_size(),
            extra in 0u64..1 << 40,
            signed in any::<bool>(),
        ) {
            let mut bytes = bytes;
            if signed && bytes.len() >= 512 {
                bytes[510..512].copy_from_slice(&[0x55, 0xAA]);
            }
            for size in [bytes.len() as u64, bytes.len() as u64 + extra, extra] {
                let _ = read(&bytes, ss, size);
                let _ = detect_sector_size(&bytes, size);
            }
        }

        #[test]
        fn mutated_gpt_never_panics(
            muts in proptest::collection::vec((hot_offset(128 * 512), any::<u8>()), 1..8),
            reseal_headers in any::<bool>(),
            ss in sector_size(),
        ) {
            let mut img = gpt_image(512, 128, 128, &[(34, 60, "a"), (61, 94, "b")]);
            for (at, byte) in muts {
                img[at] = byte;
            }
            if reseal_headers {
                reseal(&mut img, 512, 1);
                reseal(&mut img, 512, 127);
            }
            let _ = read(&img, ss, img.len() as u64);
            let _ = read(&img, 512, img.len() as u64);
        }

        #[test]
        fn mutated_mbr_never_panics(
            muts in proptest::collection::vec(
                (prop_oneof![Just(0usize), Just(64), Just(128), Just(192)], 440..512usize, any::<u8>()),
                1..8,
            ),
            ss in sector_size(),
        ) {
            let mut img = mbr_extended();
            for (sector, at, byte) in muts {
                img[sector * 512 + at] = byte;
            }
            let _ = read(&img, ss, img.len() as u64);
            let _ = read(&img, 512, img.len() as u64);
        }
    }
}
