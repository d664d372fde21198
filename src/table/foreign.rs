//! Partition schemes blkalign names but does not audit, and what the
//! readers of the other schemes (BSD, Sun, SGI, Apple) share: reads that
//! may find the device too short, and positions counted in 512-byte units.

use super::{apm, bsd, mbr, sgi, sun, types, Layout, PartKind, Partition, Problem};

use crate::io::{le_u16, le_u32, ReadAt};
use std::io;

/// `len` bytes from byte `offset`, or None when the device ends first.
pub(crate) fn read_bytes(dev: &dyn ReadAt, offset: u64, len: usize) -> io::Result<Option<Vec<u8>>> {
    let mut buf = vec![0u8; len];
    match dev.read_exact_at(&mut buf, offset) {
        Ok(()) => Ok(Some(buf)),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

/// `p`, whose start and size count 512-byte units as Linux counts them, in
/// the layout's logical sectors. A start inside a logical sector is
/// reported (no sector of the disk begins there); None when it overflows.
pub(crate) fn in_logical_sectors(mut p: Partition, layout: &mut Layout) -> Option<Partition> {
    let ss = layout.sector_size;
    let Some(start) = p.start.checked_mul(512) else {
        let msg =
            format!("partition {} starts at 512-byte unit {}: past any device", p.number, p.start);
        layout.problems.push(Problem::new("position_overflow", msg));
        return None;
    };
    if start % ss != 0 {
        let msg = format!(
            "partition {} starts at byte {start}, inside a {ss}-byte logical sector: \
             it cannot be aligned",
            p.number
        );
        layout.problems.push(Problem::new("start_not_whole_sector", msg));
    }
    p.start = start / ss;
    p.size = p.size.saturating_mul(512) / ss;
    Some(p)
}

/// A note that libblkid (blkid, partx, lsblk, udev) lists other partitions
/// than Linux creates: `theirs` as (number, start, size) in logical sectors.
pub(crate) fn libblkid_differs(
    scheme: &str,
    ours: &[Partition],
    theirs: &[(u32, u64, u64)],
    why: &str,
) -> Option<Problem> {
    let mine: Vec<(u32, u64, u64)> = ours.iter().map(|p| (p.number, p.start, p.size)).collect();
    if mine == theirs {
        return None;
    }
    let list = |parts: &[(u32, u64, u64)]| {
        let items: Vec<String> = parts.iter().map(|(n, s, l)| format!("{n} ({s}+{l})")).collect();
        if items.is_empty() {
            "none".to_string()
        } else {
            items.join(", ")
        }
    };
    Some(Problem::new(
        "libblkid_differs",
        format!(
            "{why}: Linux makes partitions {} of this {scheme} label, libblkid (blkid, partx, \
             udev) lists {}; the numbers here are the kernel's",
            list(&mine),
            list(theirs)
        ),
    ))
}

/// An entry that holds no data of its own by its label's custom: Sun's
/// whole-disk entry, SGI's volume, a BSD raw partition (unused type, on the
/// whole disk), Apple's map and free entries. Linux makes partitions of
/// them, but they overlap the others by design or hold nothing to align.
pub fn holds_no_data(p: &Partition) -> bool {
    match p.kind {
        PartKind::Sun => p.type_id == sun::WHOLE_DISK,
        PartKind::Sgi => p.type_id == sgi::VOLUME,
        PartKind::Bsd => p.type_id == bsd::UNUSED,
        PartKind::Mac => apm::NO_DATA.contains(&p.type_id.as_str()),
        _ => false,
    }
}

/// The name of a partition scheme on the whole of `dev` that we recognise
/// but do not audit (as libblkid names it, or the kernel where libblkid
/// has none), or None. Tried after every scheme we audit.
pub fn recognise(dev: &dyn ReadAt, sector_size: u64, size_bytes: u64) -> Option<&'static str> {
    let sector0 = read_bytes(dev, 0, 512).ok()??;
    before_mbr_in(dev, &sector0, sector_size).or_else(|| {
        let probes: [Probe; 3] = [ultrix, karma, sysv68];
        probes.iter().find_map(|probe| probe(dev, &sector0, size_bytes))
    })
}

/// A recogniser: the device, its first 512 bytes and its size in bytes.
type Probe = fn(&dyn ReadAt, &[u8], u64) -> Option<&'static str>;

/// Schemes whose sector 0 may pass for an MBR (0x55AA, boot indicators 0
/// or 0x80), which must be looked for before reading one: AIX (libblkid
/// and the kernel check it first), Windows dynamic disks (the kernel's LDM
/// parser runs before its MBR one) and NEC PC-98 (its table is in sector 1;
/// Linux sees an empty MBR).
pub fn before_mbr(dev: &dyn ReadAt, sector_size: u64) -> Option<&'static str> {
    let sector0 = read_bytes(dev, 0, 512).ok()??;
    before_mbr_in(dev, &sector0, sector_size)
}

fn before_mbr_in(dev: &dyn ReadAt, sector0: &[u8], sector_size: u64) -> Option<&'static str> {
    if sector0.starts_with(&[0xC9, 0xC2, 0xD4, 0xC1]) {
        return Some("aix"); // "IBMA" in EBCDIC
    }
    let mbr = mbr::Mbr::parse(sector0)?;
    // A 0x42 entry and the LDM private header in sector 6.
    let ldm = mbr.entries.iter().any(|e| e.kind == 0x42)
        && read_bytes(dev, 6 * 512, 8).ok().flatten().is_some_and(|h| h == b"PRIVHEAD");
    if ldm {
        return Some("ldm");
    }
    // parted's test: 512-byte sectors and a PC-98 boot loader's signature.
    let ipl = [&b"IPL1"[..], b"Linux 98", b"GRUB/98 "];
    let pc98 =
        sector_size == 512 && ipl.iter().any(|sig| sector0.get(4..4 + sig.len()) == Some(*sig));
    pc98.then_some("pc98")
}

/// A table nested in MBR primary `slice` that Linux reads but we do not
/// audit: Minix subpartitions (type 0x81), a UnixWare slice table (0x63)
/// or a Solaris x86 VTOC (0x82, 0xBF). Linux numbers their partitions
/// after the logicals, as it does BSD ones.
pub fn nested(dev: &dyn ReadAt, slice: &Partition, sector_size: u64) -> Option<&'static str> {
    let kind = types::parse_mbr_code(&slice.type_id)?;
    let base = slice.start.checked_mul(sector_size)?;
    let at =
        |sector: u64, len: usize| read_bytes(dev, base.checked_add(sector * 512)?, len).ok()?;
    match kind {
        0x81 => {
            let s = at(0, 512)?;
            mbr::Mbr::parse(&s).filter(|m| m.entries[0].kind == 0x81).map(|_| "minix")
        }
        0x63 => {
            let s = at(29, 512)?;
            (le_u32(&s, 4) == Some(0xCA5E_600D) && le_u32(&s, 156) == Some(VTOC_SANE))
                .then_some("unixware")
        }
        0x82 | 0xBF => {
            let s = at(1, 512)?;
            (le_u32(&s, 12) == Some(VTOC_SANE) && le_u32(&s, 16) == Some(1)).then_some("solaris")
        }
        _ => None,
    }
}

/// The VTOC sanity word of Sun, Solaris x86 and UnixWare labels.
pub(crate) const VTOC_SANE: u32 = 0x600D_DEEE;

/// A DEC Ultrix label at the end of sector 31.
fn ultrix(dev: &dyn ReadAt, _sector0: &[u8], _size_bytes: u64) -> Option<&'static str> {
    let s = read_bytes(dev, 31 * 512, 512).ok()??;
    (le_u32(&s, 440) == Some(0x0003_2957) && le_u32(&s, 444) == Some(1)).then_some("ultrix")
}

/// A Rio Karma label (magic 0xAB56 at byte 510) with a partition the
/// kernel would create.
fn karma(_dev: &dyn ReadAt, sector0: &[u8], _size_bytes: u64) -> Option<&'static str> {
    let used = |at: usize| sector0.get(at + 4) == Some(&0x4D) && le_u32(sector0, at + 12) > Some(0);
    (le_u16(sector0, 510) == Some(0xAB56) && (used(270) || used(286))).then_some("karma")
}

/// A Motorola SYSV68 volume id.
fn sysv68(_dev: &dyn ReadAt, sector0: &[u8], _size_bytes: u64) -> Option<&'static str> {
    (sector0.get(248..256) == Some(b"MOTOROLA")).then_some("sysv68")
}

/// What the tests of the other schemes' readers share.
#[cfg(test)]
pub(crate) mod test_support {
    use crate::io::ReadAt;
    use crate::table::{read, Label, Layout, TableError};

    type ReadInto = fn(&dyn ReadAt, &mut Layout) -> Result<bool, TableError>;
    /// Recomputes a label's checksum after it was changed.
    pub type Seal<'a> = &'a dyn Fn(&mut [u8]);

    /// What a scheme's `read_into` makes of `img`, before the checks all
    /// tables get; panics unless it finds `label`.
    pub fn read_alone(read_into: ReadInto, img: &[u8], ss: u64, label: Label) -> Layout {
        let mut layout = Layout::blank(ss);
        assert!(read_into(&img.to_vec(), &mut layout).unwrap());
        assert_eq!(layout.label, label);
        layout
    }

    /// `img` with `muts` applied (then `seal`, if any), read at `ss` and as
    /// a device larger than the image: whatever it holds, nothing panics.
    pub fn read_mutated(mut img: Vec<u8>, muts: &[(usize, u8)], seal: Option<Seal>, ss: u64) {
        for &(at, byte) in muts {
            img[at] = byte;
        }
        if let Some(seal) = seal {
            seal(&mut img);
        }
        let _ = read(&img, ss, img.len() as u64);
        let _ = read(&img, 512, 1 << 40);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::fixtures::mbr_entry;
    use proptest::prelude::*;

    fn scheme(img: &[u8]) -> Option<&'static str> {
        recognise(&img.to_vec(), 512, img.len() as u64)
    }

    #[test]
    fn whole_disk_schemes() {
        let blank = vec![0u8; 64 * 512];
        assert_eq!(scheme(&blank), None);
        let mut aix = blank.clone();
        aix[..4].copy_from_slice(&[0xC9, 0xC2, 0xD4, 0xC1]);
        assert_eq!(scheme(&aix), Some("aix"));

        let mut ultrix = blank.clone();
        ultrix[31 * 512 + 440..31 * 512 + 448].copy_from_slice(&[0x57, 0x29, 3, 0, 1, 0, 0, 0]);
        assert_eq!(scheme(&ultrix), Some("ultrix"));

        let mut karma = blank.clone();
        karma[510..512].copy_from_slice(&[0x56, 0xAB]);
        assert_eq!(scheme(&karma), None);
        karma[270 + 4] = 0x4D;
        karma[270 + 12] = 8;
        assert_eq!(scheme(&karma), Some("karma"));

        let mut sysv68 = blank;
        sysv68[248..256].copy_from_slice(b"MOTOROLA");
        assert_eq!(scheme(&sysv68), Some("sysv68"));
    }

    #[test]
    fn schemes_behind_an_mbr() {
        let mut ldm = vec![0u8; 64 * 512];
        mbr_entry(&mut ldm, 0, 0, 0x42, 63, 1000);
        assert_eq!(before_mbr(&ldm, 512), None);
        ldm[6 * 512..6 * 512 + 8].copy_from_slice(b"PRIVHEAD");
        assert_eq!(before_mbr(&ldm, 512), Some("ldm"));

        let mut pc98 = vec![0u8; 64 * 512];
        mbr::sign(&mut pc98);
        pc98[4..8].copy_from_slice(b"IPL1");
        assert_eq!(before_mbr(&pc98, 512), Some("pc98"));
        assert_eq!(before_mbr(&pc98, 4096), None);
    }

    #[test]
    fn tables_nested_in_slices() {
        let mut img = vec![0u8; 64 * 512];
        let slice = |kind: u8| Partition {
            number: 1,
            start: 8,
            size: 40,
            kind: PartKind::Primary,
            type_id: format!("0x{kind:02x}"),
            name: None,
            ebr: None,
        };
        assert_eq!(nested(&img, &slice(0x81), 512), None);
        mbr_entry(&mut img, 8 * 512, 0, 0x81, 1, 10);
        assert_eq!(nested(&img, &slice(0x81), 512), Some("minix"));
        img[9 * 512 + 12..9 * 512 + 20].copy_from_slice(&[0xEE, 0xDE, 0x0D, 0x60, 1, 0, 0, 0]);
        assert_eq!(nested(&img, &slice(0xBF), 512), Some("solaris"));
        assert_eq!(nested(&img, &slice(0x83), 512), None);
        let uw = 37 * 512;
        img[uw + 4..uw + 8].copy_from_slice(&0xCA5E_600Du32.to_le_bytes());
        img[uw + 156..uw + 160].copy_from_slice(&VTOC_SANE.to_le_bytes());
        assert_eq!(nested(&img, &slice(0x63), 512), Some("unixware"));
        // The slice's sector at 4096 bytes: nothing there.
        assert_eq!(nested(&img, &slice(0x63), 4096), None);
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

    proptest! {
        #[test]
        fn random_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..20_000),
            start in 0u64..40,
            kind in prop_oneof![Just(0x81u8), Just(0x63), Just(0x82), Just(0xBF)],
            ss in prop_oneof![Just(512u64), Just(4096)],
        ) {
            let _ = recognise(&bytes, ss, bytes.len() as u64);
            let _ = recognise(&bytes, ss, u64::MAX);
            let _ = before_mbr(&bytes, ss);
            let slice = Partition {
                number: 1,
                start,
                size: 8,
                kind: PartKind::Primary,
                type_id: format!("0x{kind:02x}"),
                name: None,
                ebr: None,
            };
            let _ = nested(&bytes, &slice, ss);
            let far = Partition { start: u64::MAX / 2, ..slice };
            let _ = nested(&bytes, &far, ss);
        }
    }
}
