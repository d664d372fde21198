//! The bottom layer: random access to a disk or image, fixed-width fields
//! in on-disk structures, and page-aligned buffers for O_DIRECT. It imports
//! nothing from the crate; every layer above reads disks through it.

use std::fs::File;
use std::io;
use std::path::Path;

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

/// Read `count` sectors from `lba`, failing cleanly on offsets that overflow.
pub fn read_sectors(
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

pub fn read_lba(dev: &dyn ReadAt, lba: u64, sector_size: u64) -> io::Result<Vec<u8>> {
    read_sectors(dev, lba, 1, sector_size)
}

/// Little-endian fields at fixed offsets; None when `buf` is too short.
pub fn le_u16(buf: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(buf.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

pub fn le_u32(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(buf.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

pub fn le_u64(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(buf.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// Big-endian fields (Sun, SGI, Apple, BSD on big-endian hosts, LUKS, ZFS).
pub fn be_u16(buf: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(buf.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

pub fn be_u32(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(buf.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

pub fn be_u64(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(buf.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// O_DIRECT needs buffers aligned to the logical sector; a page covers all.
pub const BUF_ALIGN: usize = 4096;

/// A heap buffer whose start is page-aligned.
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn new(len: usize, fill: u8) -> AlignedBuf {
        let storage = vec![fill; len + BUF_ALIGN];
        let start = storage.as_ptr().align_offset(BUF_ALIGN);
        AlignedBuf { storage, start, len }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// Opens `path` for O_DIRECT writing without any in-use checks: for files
/// the caller has already vetted or created (the realign journal).
pub fn open_direct_write(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let direct = rustix::fs::OFlags::DIRECT.bits() as i32;
    File::options().write(true).custom_flags(direct).open(path)
}
