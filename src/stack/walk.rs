//! The layers a partition holds, outermost first, each with where its data
//! starts inside its container and on the disk: partition → md → bcache →
//! LVM PV → logical volume → file system, or partition → LUKS (encrypted:
//! the walk stops). Found from the on-disk headers alone, so it works on images.

use super::layers::{Found, Layer};
use super::region::{Kind, Region};
use super::signature::identify;
use super::{bcache, fs, luks, lvm, md};
use crate::io::ReadAt;

/// Deeper or wider stacks than these are not real: guards against crafted
/// headers (a PV in each of a thousand LVs, each with a thousand LVs…).
const MAX_DEPTH: u32 = 8;
const MAX_LAYERS: usize = 512;

/// The layers in the `size` bytes at `offset` of `dev` (a partition, or a
/// whole disk without a table), outermost first and depth-first: a PV's
/// logical volumes each followed by what they hold. Never fails: what
/// cannot be read or parsed ends that branch.
pub fn walk(dev: &dyn ReadAt, offset: u64, size: u64) -> Vec<Layer> {
    let mut layers = Vec::new();
    descend(dev, Span { offset, size }, 0, &mut layers);
    layers
}

/// A byte range of the disk.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Span {
    offset: u64,
    size: u64,
}

impl Span {
    /// The `size` bytes from `start` (absolute), cut to end with `self`;
    /// None unless it lies inside `self` and is strictly smaller or later,
    /// so that every step of the walk makes progress.
    fn inner(self, start: u64, size: u64) -> Option<Span> {
        let end = self.offset.checked_add(self.size)?;
        let size = size.min(end.checked_sub(start)?);
        let inner = Span { offset: start, size };
        (start >= self.offset && inner != self).then_some(inner)
    }
}

fn descend(dev: &dyn ReadAt, span: Span, depth: u32, out: &mut Vec<Layer>) {
    if depth >= MAX_DEPTH || out.len() >= MAX_LAYERS {
        return;
    }
    let Ok(Some(contents)) = identify(dev, span.offset, span.size) else { return };
    let region = Region { dev, offset: span.offset, size: span.size };
    if contents.kind == Kind::LvmPv {
        // Logical volumes are placed in the PV's data area, in extents.
        let (pv, lvs) = lvm::found(&region, &contents);
        let Some(data) = place(pv, span, span.offset, depth, out) else { return };
        for lv in lvs {
            if out.len() >= MAX_LAYERS {
                break;
            }
            if let Some(inner) = place(lv, data, data.offset, depth + 1, out) {
                descend(dev, inner, depth + 2, out);
            }
        }
        return;
    }
    let found = match contents.kind {
        Kind::Md => md::found(&region, &contents),
        Kind::Bcache => bcache::found(&region, &contents),
        Kind::Luks => luks::found(&region, &contents),
        _ => fs::found(&region, &contents),
    };
    if let Some(inner) = place(found, span, span.offset, depth, out) {
        descend(dev, inner, depth + 1, out);
    }
}

/// Record `found` at `depth`, its offset counted from `base`; returns the
/// part of `span` its data area covers when that holds more layers.
fn place(found: Found, span: Span, base: u64, depth: u32, out: &mut Vec<Layer>) -> Option<Span> {
    let mut layer = found.layer;
    layer.depth = depth;
    let Some(absolute) = base.checked_add(layer.offset_bytes) else {
        out.push(layer.note("its data offset lies past the end of the address space"));
        return None;
    };
    layer.absolute_offset_bytes = absolute;
    out.push(layer);
    span.inner(absolute, found.inner?).filter(|inner| inner.size > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::signature::lvm_crc;
    use proptest::prelude::*;

    /// Headers that pass each recogniser, so the deeper parsers see the
    /// random bytes around them.
    fn plant(bytes: &mut [u8], which: usize) {
        let mut put = |at: usize, b: &[u8]| {
            if let Some(dst) = bytes.get_mut(at..at + b.len()) {
                dst.copy_from_slice(b);
            }
        };
        match which {
            0 => put(0, b"LUKS\xba\xbe\x00\x01"),
            1 => {
                put(0, b"LUKS\xba\xbe\x00\x02\x00\x00\x00\x00\x00\x00\x40\x00");
                put(4096, b"{\"segments\":{\"0\":{\"offset\":\"4096\",\"sector_size\":4096}}}\0");
            }
            2 => {
                put(4096, &[0xfc, 0x4e, 0x2b, 0xa9, 1, 0, 0, 0]);
                put(4096 + 144, &8u64.to_le_bytes());
            }
            3 => put(0x10000 + 0x40, b"_BHRfS_M"),
            4 => put(16384, &[1, 1, 0, 0]),
            5 => put(4086, b"SWAPSPACE2"),
            _ => {}
        }
        if which == 6 {
            // An LVM label in sector 1 whose CRC holds over the random rest.
            if let Some(label) = bytes.get_mut(512..1024) {
                label[..8].copy_from_slice(b"LABELONE");
                label[8..16].copy_from_slice(&1u64.to_le_bytes());
                label[20..24].copy_from_slice(&32u32.to_le_bytes());
                label[24..32].copy_from_slice(b"LVM2 001");
                let crc = lvm_crc(&label[20..]);
                label[16..20].copy_from_slice(&crc.to_le_bytes());
            }
        }
    }

    proptest! {
        #[test]
        fn random_headers_never_panic(
            len in 0usize..300 * 1024,
            seed in any::<u64>(),
            which in 0usize..8,
            offset in 0u64..1 << 20,
            size in 0u64..1 << 40,
        ) {
            let mut bytes = crate::stack::random_bytes(len, seed);
            plant(&mut bytes, which);
            let len = bytes.len() as u64;
            for (off, sz) in [(0, len), (offset % (len + 1), len), (offset, size), (u64::MAX - 512, size)] {
                let _ = walk(&bytes, off, sz);
            }
        }
    }
}
