//! Partition schemes blkalign names but does not audit: Linux reads them,
//! and `Layout::scheme` says which one a disk holds. Each is a [`Named`]
//! scheme in the one list `detect` tries, at its place in the kernel's
//! order.

use super::common::read_bytes;
use super::error::TableError;
use super::mbr::Mbr;
use super::scheme::{Found, Scheme, SchemeDisk};
use super::{Label, Layout};
use crate::io::{le_u16, le_u32};

/// A scheme recognised by its signature alone (as libblkid names it, or
/// the kernel where libblkid has none).
pub struct Named {
    name: &'static str,
    probe: fn(&SchemeDisk<'_>) -> bool,
}

impl Scheme for Named {
    fn name(&self) -> &'static str {
        self.name
    }

    fn audited(&self) -> bool {
        false
    }

    fn read(&self, disk: &SchemeDisk<'_>, layout: &mut Layout) -> Result<Found, TableError> {
        if !(self.probe)(disk) {
            return Ok(Found::No);
        }
        layout.label = Label::Unsupported;
        layout.scheme = Some(self.name);
        Ok(Found::Table)
    }
}

// AIX, Windows dynamic disks and NEC PC-98 have a sector 0 that may pass
// for an MBR (0x55AA, boot indicators 0 or 0x80): they are looked for
// before one is read. libblkid and the kernel check AIX first; the
// kernel's LDM parser runs before its MBR one; PC-98 keeps its table in
// sector 1, and Linux sees an empty MBR.

/// AIX: "IBMA" in EBCDIC.
pub static AIX: Named =
    Named { name: "aix", probe: |disk| disk.sector0.starts_with(&[0xC9, 0xC2, 0xD4, 0xC1]) };

/// A Windows dynamic disk: a 0x42 entry and the LDM private header in
/// sector 6.
pub static LDM: Named = Named { name: "ldm", probe: ldm };

/// NEC PC-98, by parted's test: 512-byte sectors and a PC-98 boot
/// loader's signature.
pub(crate) static PC98: Named = Named { name: "pc98", probe: pc98 };

/// A DEC Ultrix label at the end of sector 31.
pub(crate) static ULTRIX: Named = Named { name: "ultrix", probe: ultrix };

/// A Rio Karma label (magic 0xAB56 at byte 510) with a partition the
/// kernel would create.
pub(crate) static KARMA: Named = Named { name: "karma", probe: karma };

/// A Motorola SYSV68 volume id.
pub(crate) static SYSV68: Named =
    Named { name: "sysv68", probe: |disk| disk.sector0.get(248..256) == Some(b"MOTOROLA") };

fn ldm(disk: &SchemeDisk<'_>) -> bool {
    Mbr::parse(&disk.sector0).is_some_and(|mbr| mbr.entries.iter().any(|e| e.kind == 0x42))
        && read_bytes(disk.dev, 6 * 512, 8).ok().flatten().is_some_and(|h| h == b"PRIVHEAD")
}

fn pc98(disk: &SchemeDisk<'_>) -> bool {
    let ipl = [&b"IPL1"[..], b"Linux 98", b"GRUB/98 "];
    disk.sector_size == 512
        && Mbr::parse(&disk.sector0).is_some()
        && ipl.iter().any(|sig| disk.sector0.get(4..4 + sig.len()) == Some(*sig))
}

fn ultrix(disk: &SchemeDisk<'_>) -> bool {
    let Ok(Some(s)) = read_bytes(disk.dev, 31 * 512, 512) else { return false };
    le_u32(&s, 440) == Some(0x0003_2957) && le_u32(&s, 444) == Some(1)
}

fn karma(disk: &SchemeDisk<'_>) -> bool {
    let s = &disk.sector0;
    let used = |at: usize| s.get(at + 4) == Some(&0x4D) && le_u32(s, at + 12) > Some(0);
    le_u16(s, 510) == Some(0xAB56) && (used(270) || used(286))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::detect::disk;
    use crate::table::fixtures::mbr_entry;
    use proptest::prelude::*;

    const ALL: [&Named; 6] = [&AIX, &LDM, &PC98, &ULTRIX, &KARMA, &SYSV68];

    fn scheme(img: &[u8], ss: u64) -> Option<&'static str> {
        let img = img.to_vec();
        let disk = disk(&img, ss, img.len() as u64).unwrap();
        let mut layout = Layout::blank(ss);
        let found = ALL.iter().find(|s| s.read(&disk, &mut layout).unwrap() == Found::Table);
        assert_eq!(found.map(|s| s.name()), layout.scheme);
        layout.scheme
    }

    #[test]
    fn whole_disk_schemes() {
        let blank = vec![0u8; 64 * 512];
        assert_eq!(scheme(&blank, 512), None);
        let mut aix = blank.clone();
        aix[..4].copy_from_slice(&[0xC9, 0xC2, 0xD4, 0xC1]);
        assert_eq!(scheme(&aix, 512), Some("aix"));

        let mut ultrix = blank.clone();
        ultrix[31 * 512 + 440..31 * 512 + 448].copy_from_slice(&[0x57, 0x29, 3, 0, 1, 0, 0, 0]);
        assert_eq!(scheme(&ultrix, 512), Some("ultrix"));

        let mut karma = blank.clone();
        karma[510..512].copy_from_slice(&[0x56, 0xAB]);
        assert_eq!(scheme(&karma, 512), None);
        karma[270 + 4] = 0x4D;
        karma[270 + 12] = 8;
        assert_eq!(scheme(&karma, 512), Some("karma"));

        let mut sysv68 = blank;
        sysv68[248..256].copy_from_slice(b"MOTOROLA");
        assert_eq!(scheme(&sysv68, 512), Some("sysv68"));
    }

    #[test]
    fn schemes_behind_an_mbr() {
        let mut ldm = vec![0u8; 64 * 512];
        mbr_entry(&mut ldm, 0, 0, 0x42, 63, 1000);
        assert_eq!(scheme(&ldm, 512), None);
        ldm[6 * 512..6 * 512 + 8].copy_from_slice(b"PRIVHEAD");
        assert_eq!(scheme(&ldm, 512), Some("ldm"));

        let mut pc98 = vec![0u8; 64 * 512];
        crate::table::mbr::sign(&mut pc98);
        pc98[4..8].copy_from_slice(b"IPL1");
        assert_eq!(scheme(&pc98, 512), Some("pc98"));
        assert_eq!(scheme(&pc98, 4096), None);
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..20_000),
            ss in prop_oneof![Just(512u64), Just(4096)],
        ) {
            let _ = scheme(&bytes, ss);
        }
    }
}
