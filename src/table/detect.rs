//! Which table a disk holds, tried in the kernel's order, and which
//! logical sector size an image's table implies.

use super::checks::{check_bounds, check_overlaps, holds_iso};
use super::{amiga, apm, atari, bsd, foreign, gpt, mbr, sgi, sun};
use super::{Label, Layout, PartKind, Partition, Problem};
use crate::device::SectorGuess;
use crate::io::ReadAt;
use std::io;

#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("cannot read the partition table: {0}")]
    Io(#[from] io::Error),
    /// Neither copy of a GPT can be used: why not, each.
    #[error(
        "corrupt partition table with no usable copy: primary GPT at LBA 1: {primary}; \
         backup GPT at LBA {backup_lba}: {backup}"
    )]
    Unusable { primary: gpt::CopyError, backup_lba: u64, backup: gpt::CopyError },
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

/// For a block device presenting `logical`-byte sectors: the other size
/// (512 or 4096) when the table was plainly written for it (a disk taken
/// out of the USB bridge that presented 4096-byte sectors, or an image
/// attached with `losetup -b`): its GPT header sits only where that size
/// puts it, or its MBR fits (or holds recognisable contents) only read in
/// that size. The kernel reads such a table at the wrong places.
pub fn written_for(dev: &dyn ReadAt, size_bytes: u64, logical: u64) -> Option<u64> {
    let other = match logical {
        512 => 4096,
        4096 => 512,
        _ => return None,
    };
    let gpt_at = |offset: u64| {
        let mut sig = [0u8; 8];
        offset + 8 <= size_bytes
            && dev.read_exact_at(&mut sig, offset).is_ok()
            && &sig == gpt::SIGNATURE
    };
    if gpt_at(logical) {
        return None;
    }
    if gpt_at(other) {
        return Some(other);
    }
    let mbr = |ss| read(dev, ss, size_bytes).ok().filter(|l| l.label == Label::Mbr);
    let (Some(ours), Some(theirs)) = (mbr(logical), mbr(other)) else { return None };
    if implausible(&theirs) || theirs.partitions.is_empty() {
        return None;
    }
    let found = (recognised(dev, &ours), recognised(dev, &theirs));
    (implausible(&ours) || (found.0 == 0 && found.1 > 0)).then_some(other)
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
