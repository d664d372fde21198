//! What the readers of several schemes share: reads that may find the
//! device too short, positions counted in 512-byte units, notes on where
//! libblkid differs from Linux. A leaf: it imports no scheme.

use super::{Layout, Partition, Problem};
use crate::io::ReadAt;
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

/// The VTOC sanity word of Sun, Solaris x86 and UnixWare labels.
pub(crate) const VTOC_SANE: u32 = 0x600D_DEEE;

/// An ISO 9660 file system from byte 0: a hybrid ISO image.
pub(super) fn holds_iso(dev: &dyn ReadAt, size_bytes: u64) -> bool {
    let found = crate::stack::identify(dev, 0, size_bytes).ok().flatten();
    found.is_some_and(|c| c.kind == crate::stack::Kind::Iso9660)
}

/// What the tests of the other schemes' readers share.
#[cfg(test)]
pub(crate) mod test_support {
    use crate::io::ReadAt;
    use crate::table::{read, Label, Layout, TableError};

    type ReadInto = fn(&dyn ReadAt, &mut Layout) -> Result<bool, TableError>;
    /// Recomputes a label's checksum after it was changed.
    pub(crate) type Seal<'a> = &'a dyn Fn(&mut [u8]);

    /// What a scheme's `read_into` makes of `img`, before the checks all
    /// tables get; panics unless it finds `label`.
    pub(crate) fn read_alone(read_into: ReadInto, img: &[u8], ss: u64, label: Label) -> Layout {
        let mut layout = Layout::blank(ss);
        assert!(read_into(&img.to_vec(), &mut layout).unwrap());
        assert_eq!(layout.label, label);
        layout
    }

    /// `img` with `muts` applied (then `seal`, if any), read at `ss` and as
    /// a device larger than the image: whatever it holds, nothing panics.
    pub(crate) fn read_mutated(
        mut img: Vec<u8>,
        muts: &[(usize, u8)],
        seal: Option<Seal>,
        ss: u64,
    ) {
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
