//! Which table a disk holds, tried in the kernel's order from one list of
//! schemes, and which logical sector size an image's table implies.

use super::checks::{check_bounds, check_overlaps};
use super::common::holds_iso;
use super::error::TableError;
use super::scheme::{Found, Scheme, SchemeDisk};
use super::{amiga, apm, atari, bsd, foreign, gpt, mbr, sgi, sun};
use super::{Label, Layout, PartKind, Partition, Problem};
use crate::device::SectorGuess;
use crate::io::ReadAt;
use std::io;

/// Every scheme, in the order Linux tries them (`check_part[]` of
/// block/partitions/core.c, once check.c): GPT, SGI, MBR, BSD, Sun, Amiga,
/// Atari, Apple, then Ultrix, Karma and SYSV68, which we only name. The
/// named schemes whose sector 0 may pass for an MBR (AIX, LDM, PC-98) are
/// looked for right after GPT, before anything reads an MBR.
pub static SCHEMES: [&dyn Scheme; 14] = [
    &gpt::Gpt,
    &foreign::AIX,
    &foreign::LDM,
    &foreign::PC98,
    &sgi::Sgi,
    &mbr::Dos,
    &bsd::Bsd,
    &sun::Sun,
    &amiga::Amiga,
    &atari::Atari,
    &apm::Apm,
    &foreign::ULTRIX,
    &foreign::KARMA,
    &foreign::SYSV68,
];

/// Read whatever table `dev` holds. `sector_size` is the logical sector
/// size (512..=4096, power of two); `size_bytes` the device or image size.
/// Schemes are tried in [`SCHEMES`]' order; a disk that holds none may
/// hold contents that start at byte 0.
pub fn read(dev: &dyn ReadAt, sector_size: u64, size_bytes: u64) -> Result<Layout, TableError> {
    if !crate::units::is_sector_size(sector_size, 4096) {
        return Err(TableError::SectorSize(sector_size));
    }
    let mut layout = Layout::blank(sector_size);
    if size_bytes < 512 {
        layout.problems.push(Problem::new(
            "too_small",
            format!("{size_bytes} bytes: too small to hold a partition table"),
        ));
        return Ok(layout);
    }
    let disk = disk(dev, sector_size, size_bytes)?;
    if !read_schemes(&disk, &mut layout)? && layout.contents.is_none() {
        layout.contents = crate::stack::identify(dev, 0, size_bytes)?;
    }
    layout.partitions.sort_by_key(|p| p.number);
    check_bounds(&mut layout, disk.sectors);
    check_overlaps(&mut layout, || holds_iso(dev, size_bytes), holds_no_data);
    Ok(layout)
}

/// What every scheme's reader is given of `dev`.
pub fn disk(dev: &dyn ReadAt, sector_size: u64, size_bytes: u64) -> io::Result<SchemeDisk<'_>> {
    let sectors = size_bytes / sector_size;
    Ok(SchemeDisk {
        dev,
        sector_size,
        size_bytes,
        sectors,
        sector0: read_prefix(dev, sector_size, size_bytes)?,
        gpt_at_lba1: sectors > 2 && gpt::primary_valid(dev, sector_size, sectors),
    })
}

/// Try each scheme in turn until one holds the disk, or names what is on
/// it (a file system's boot sector is not another scheme); false when none
/// does. A label without partitions (`Found::Empty`) stays unless an
/// audited scheme after it finds its table.
fn read_schemes(disk: &SchemeDisk<'_>, layout: &mut Layout) -> Result<bool, TableError> {
    let mut empty = None;
    for scheme in SCHEMES {
        if empty.is_some() && !scheme.audited() {
            break;
        }
        let before = layout.clone();
        match scheme.read(disk, layout)? {
            Found::Table => return Ok(true),
            Found::Empty => {
                let label = std::mem::replace(layout, before);
                empty = empty.or(Some(label));
            }
            Found::No if layout.contents.is_some() => return Ok(false),
            Found::No => {}
        }
    }
    let found = empty.is_some();
    if let Some(label) = empty {
        *layout = label;
    }
    Ok(found)
}

/// Whether `p` holds no data of its own by its scheme's custom (see
/// [`Scheme::holds_no_data`]).
pub fn holds_no_data(p: &Partition) -> bool {
    SCHEMES.iter().any(|s| s.holds_no_data(p))
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
pub(crate) fn written_for(dev: &dyn ReadAt, size_bytes: u64, logical: u64) -> Option<u64> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The list is check.c's order (LDM and PC-98 where sector 0 could
    /// pass for an MBR): a scheme moved in it changes what disks hold.
    #[test]
    fn schemes_in_the_kernels_order() {
        let names: Vec<&str> = SCHEMES.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            [
                "gpt", "aix", "ldm", "pc98", "sgi", "dos", "bsd", "sun", "amiga", "atari", "mac",
                "ultrix", "karma", "sysv68"
            ]
        );
        let named: Vec<&str> = SCHEMES.iter().filter(|s| !s.audited()).map(|s| s.name()).collect();
        assert_eq!(named, ["aix", "ldm", "pc98", "ultrix", "karma", "sysv68"]);
    }

    #[test]
    fn entries_without_data() {
        let entry = |kind: PartKind, type_id: &str| Partition {
            number: 3,
            start: 0,
            size: 64,
            kind,
            type_id: type_id.into(),
            name: None,
            ebr: None,
        };
        assert!(holds_no_data(&entry(PartKind::Sun, "0x05")));
        assert!(holds_no_data(&entry(PartKind::Sgi, "0x06")));
        assert!(holds_no_data(&entry(PartKind::Bsd, "0x00")));
        assert!(holds_no_data(&entry(PartKind::Mac, "Apple_Free")));
        assert!(!holds_no_data(&entry(PartKind::Sgi, "0x00")));
        assert!(!holds_no_data(&entry(PartKind::Primary, "0x05")));
        assert!(!holds_no_data(&entry(PartKind::Mac, "Apple_HFS")));
    }
}
