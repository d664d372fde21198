//! The fuzz input as a disk: a size, a few parameters, and the byte runs
//! that are not zero. A seed of a 64 MiB image is then a few KiB, and a
//! mutation can move a structure, grow the disk to 2^64 bytes or put a
//! backup header at its end without the fuzzer handling megabytes.
//!
//! Layout, little-endian: size u64, flags u8, a u32, b u32, then extents
//! (offset u64, length u32, bytes) to the end; a last extent may be cut
//! short. Flags: bits 0-1 the logical sector size (512 << n), bit 2 reseal
//! checksums. `a` and `b` are what a target wants them to be (a start to
//! move to, ...). `fuzz/pack.py` writes this format.

use blkalign::io::ReadAt;
use std::io;

const HEADER: usize = 17;
const RESEAL: u8 = 1 << 2;

/// A sparse disk image: zeros but for its extents, later ones on top.
#[derive(Clone, Debug, Default)]
pub struct Image {
    pub size: u64,
    pub flags: u8,
    pub a: u32,
    pub b: u32,
    extents: Vec<(u64, Vec<u8>)>,
}

impl Image {
    /// The image the fuzz input describes; None for an input too short
    /// to hold the header.
    pub fn parse(data: &[u8]) -> Option<Image> {
        let (header, mut rest) = data.split_at_checked(HEADER)?;
        let u32_at = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().unwrap());
        let mut image = Image {
            size: u64::from_le_bytes(header[..8].try_into().unwrap()),
            flags: header[8],
            a: u32_at(9),
            b: u32_at(13),
            extents: Vec::new(),
        };
        while let Some((head, tail)) = rest.split_at_checked(12) {
            let offset = u64::from_le_bytes(head[..8].try_into().unwrap());
            let len = u32::from_le_bytes(head[8..].try_into().unwrap()) as usize;
            let (bytes, next) = tail.split_at(len.min(tail.len()));
            image.extents.push((offset, bytes.to_vec()));
            rest = next;
        }
        Some(image)
    }

    /// A zeroed image of `size` bytes, to write a table into.
    pub fn blank(size: u64) -> Image {
        Image { size, ..Image::default() }
    }

    /// The logical sector size the flags choose.
    pub fn sector_size(&self) -> u64 {
        512 << (self.flags & 3)
    }

    /// Whether the target should fix up checksums before reading.
    pub fn reseal(&self) -> bool {
        self.flags & RESEAL != 0
    }

    /// Put `bytes` at `offset` (on top of what is there).
    pub fn write_at(&mut self, offset: u64, bytes: &[u8]) {
        self.extents.push((offset, bytes.to_vec()));
    }

    /// `len` bytes at `offset`, or None past the end of the image.
    pub fn bytes(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.read_exact_at(&mut buf, offset).ok()?;
        Some(buf)
    }
}

impl ReadAt for Image {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset.checked_add(buf.len() as u64).filter(|&end| end <= self.size);
        let end = end.ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.fill(0);
        for (at, bytes) in &self.extents {
            let from = offset.max(*at);
            let to = end.min(at.saturating_add(bytes.len() as u64));
            if from < to {
                let src = (from - at) as usize..(to - at) as usize;
                let dst = (from - offset) as usize..(to - offset) as usize;
                buf[dst].copy_from_slice(&bytes[src]);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(size: u64, extents: &[(u64, &[u8])]) -> Vec<u8> {
        let mut out = size.to_le_bytes().to_vec();
        out.extend_from_slice(&[0; 9]);
        for (at, bytes) in extents {
            out.extend_from_slice(&at.to_le_bytes());
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        out
    }

    #[test]
    fn extents_overlay_zeros_and_the_end_is_enforced() {
        let img = Image::parse(&input(16, &[(2, b"abcd"), (4, b"XY"), (14, b"tail!")])).unwrap();
        assert_eq!(img.bytes(0, 16).unwrap(), b"\0\0abXY\0\0\0\0\0\0\0\0ta");
        assert!(img.bytes(10, 7).is_none());
        assert!(img.bytes(u64::MAX, 2).is_none());
        assert_eq!(img.sector_size(), 512);
    }

    #[test]
    fn a_short_last_extent_takes_what_is_there() {
        let mut data = input(8, &[(0, b"ab")]);
        data.extend_from_slice(&1u64.to_le_bytes());
        data.extend_from_slice(&100u32.to_le_bytes());
        data.extend_from_slice(b"Z");
        assert_eq!(Image::parse(&data).unwrap().bytes(0, 3).unwrap(), b"aZ\0");
        assert!(Image::parse(&data[..16]).is_none());
    }
}
