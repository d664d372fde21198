//! ZFS vdev labels: the XDR-encoded nvlist at 16 KiB into each of the two
//! leading 256 KiB labels, walked just far enough to find the pool name
//! and the top-level vdev's `ashift`.

use super::region::Region;
use crate::io::{be_u32, be_u64};

const LABEL_BYTES: u64 = 256 << 10;
const NVLIST_AT: u64 = 16 << 10;
const NVLIST_BYTES: usize = 112 << 10;
/// Allocations start past two labels and the 3.5 MiB boot area.
pub(crate) const DATA_START: u64 = 4 << 20;
/// `vdev_tree` sits one level down; anything deeper is not needed.
const MAX_NEST: u32 = 4;

const ENCODE_XDR: u8 = 1;
const TYPE_UINT64: u32 = 8;
const TYPE_STRING: u32 = 9;
const TYPE_NVLIST: u32 = 19;

/// What a vdev label says about the pool and this vdev's sector shift.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Label {
    pub(crate) pool: Option<String>,
    pub(crate) ashift: Option<u64>,
}

/// The first of labels L0 and L1 whose nvlist decodes and has a
/// `vdev_tree`.
pub(crate) fn label(region: &Region) -> Option<Label> {
    [0, LABEL_BYTES].into_iter().find_map(|at| {
        let at = at.checked_add(NVLIST_AT)?;
        // The stream header: encoding, endianness, two reserved bytes.
        if region.bytes(at, 4)?.first() != Some(&ENCODE_XDR) {
            return None;
        }
        let buf = region.bytes(at, NVLIST_BYTES)?;
        let top = Nvlist::parse(&buf, 4, 0)?;
        let tree = top.nvlist("vdev_tree")?;
        Some(Label { pool: top.string("name"), ashift: tree.uint64("ashift") })
    })
}

/// One decoded nvlist: each pair's name, type and where its value starts
/// in `buf`.
struct Nvlist<'a> {
    buf: &'a [u8],
    pairs: Vec<(String, u32, usize)>,
    depth: u32,
}

impl<'a> Nvlist<'a> {
    /// The nvlist whose version word is at `at`: version, flags, then
    /// pairs (encoded size, decoded size, name, type, element count,
    /// value) up to a pair of zero sizes.
    fn parse(buf: &'a [u8], at: usize, depth: u32) -> Option<Nvlist<'a>> {
        if depth > MAX_NEST {
            return None;
        }
        let mut pos = at.checked_add(8)?;
        let mut pairs = Vec::new();
        loop {
            let encoded = usize::try_from(be_u32(buf, pos)?).ok()?;
            if encoded == 0 {
                return Some(Nvlist { buf, pairs, depth });
            }
            let (name, after_name) = xdr_string(buf, pos.checked_add(8)?)?;
            let kind = be_u32(buf, after_name)?;
            // The encoded size covers the whole pair, nested lists included.
            let value = after_name.checked_add(8)?;
            let next = pos.checked_add(encoded)?;
            if value > next || next > buf.len() {
                return None;
            }
            pairs.push((name, kind, value));
            pos = next;
        }
    }

    fn find(&self, name: &str, kind: u32) -> Option<usize> {
        self.pairs.iter().find(|(n, k, _)| n == name && *k == kind).map(|&(_, _, at)| at)
    }

    fn uint64(&self, name: &str) -> Option<u64> {
        be_u64(self.buf, self.find(name, TYPE_UINT64)?)
    }

    fn string(&self, name: &str) -> Option<String> {
        xdr_string(self.buf, self.find(name, TYPE_STRING)?).map(|(s, _)| s)
    }

    fn nvlist(&self, name: &str) -> Option<Nvlist<'a>> {
        Nvlist::parse(self.buf, self.find(name, TYPE_NVLIST)?, self.depth.checked_add(1)?)
    }
}

/// An XDR string at `at` (length, bytes, padding to 4) and the position
/// just past it.
fn xdr_string(buf: &[u8], at: usize) -> Option<(String, usize)> {
    let len = usize::try_from(be_u32(buf, at)?).ok()?;
    let start = at.checked_add(4)?;
    let bytes = buf.get(start..start.checked_add(len)?)?;
    let next = start.checked_add(len.checked_add(3)? & !3)?;
    Some((String::from_utf8_lossy(bytes).into_owned(), next))
}
