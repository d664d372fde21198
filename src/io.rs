//! The bottom layer: random access to a disk or image, fixed-width fields
//! in on-disk structures, page-aligned buffers for O_DIRECT and
//! [`DirectReader`], through which every block device is read. It imports
//! nothing from the crate; every layer above reads disks through it.

use std::fs::File;
use std::io;
use std::path::Path;

/// Random access to a disk or image, in bytes.
pub trait ReadAt {
    /// Fill all of `buf` from byte `offset`; a short read is an error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl<T: ReadAt + ?Sized> ReadAt for &T {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_exact_at(buf, offset)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for Box<T> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_exact_at(buf, offset)
    }
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
pub(crate) fn be_u16(buf: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(buf.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

pub fn be_u32(buf: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(buf.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

pub(crate) fn be_u64(buf: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(buf.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// O_DIRECT needs buffers aligned to the logical sector; a page covers all.
pub(crate) const BUF_ALIGN: usize = 4096;

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

/// A block device or image as commands read it: every read sees what is on
/// the device, never a page cache that may be stale. A partition and its
/// disk have separate caches: what `mkfs` writes through /dev/sdc1 never
/// reaches /dev/sdc's cached pages, which live as long as anything holds
/// the disk open (a mounted sibling partition does).
#[derive(Debug)]
pub struct DirectReader {
    /// As the caller opened it: ioctls and writes go here, reads never.
    file: File,
    reads: Reads,
}

#[derive(Debug)]
enum Reads {
    /// A regular file (an image): its page cache is its own, shared with no
    /// other node, so it reads as it is.
    Cached,
    /// Through an O_DIRECT descriptor, each read widened to whole logical
    /// blocks in an aligned bounce buffer, so parsers may read any range.
    Direct { file: File, block: u64 },
    /// A block device that refuses O_DIRECT: buffered, the range's cached
    /// pages dropped first. Only clean pages of that range go, which any
    /// other reader of the disk node simply reads again.
    Uncached,
}

/// The bounce buffer's largest size: a large read goes a MiB at a time.
const BOUNCE_BYTES: u64 = 1 << 20;

impl DirectReader {
    /// A regular file, read through its own page cache.
    pub fn cached(file: File) -> DirectReader {
        DirectReader { file, reads: Reads::Cached }
    }

    /// `file` read through `direct`, the same device opened with O_DIRECT,
    /// whose logical block size is `block` (a power of two).
    pub fn direct(file: File, direct: File, block: u64) -> io::Result<DirectReader> {
        if !block.is_power_of_two() {
            let message = format!("logical block size {block} is not a power of two");
            return Err(io::Error::new(io::ErrorKind::InvalidInput, message));
        }
        Ok(DirectReader { file, reads: Reads::Direct { file: direct, block } })
    }

    /// A block device without O_DIRECT, its cached pages dropped per read.
    pub(crate) fn uncached(file: File) -> DirectReader {
        DirectReader { file, reads: Reads::Uncached }
    }

    /// The descriptor as opened, for ioctls, metadata and writes; read
    /// through the reader itself.
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl ReadAt for DirectReader {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        match &self.reads {
            Reads::Cached => self.file.read_exact_at(buf, offset),
            Reads::Direct { file, block } => read_direct(file, *block, buf, offset),
            Reads::Uncached => {
                let len = std::num::NonZeroU64::new(buf.len() as u64);
                rustix::fs::fadvise(&self.file, offset, len, rustix::fs::Advice::DontNeed)?;
                self.file.read_exact_at(buf, offset)
            }
        }
    }
}

/// Fill `buf` from `offset` of an O_DIRECT `file` with `block`-byte
/// logical blocks, reading the covering blocks into an aligned buffer. A
/// read past the end fails with UnexpectedEof, as `File`'s does.
fn read_direct(file: &File, block: u64, buf: &mut [u8], offset: u64) -> io::Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    let eof = || io::Error::from(io::ErrorKind::UnexpectedEof);
    let end = offset.checked_add(buf.len() as u64).ok_or_else(eof)?;
    let stop = end.checked_next_multiple_of(block).ok_or_else(eof)?;
    let step = (BOUNCE_BYTES / block).max(1).saturating_mul(block);
    let mut at = offset - offset % block;
    let mut bounce = AlignedBuf::new(usize::try_from(step.min(stop - at)).map_err(|_| eof())?, 0);
    while at < end {
        let want = (stop - at).min(step) as usize;
        let chunk = &mut bounce.bytes_mut()[..want];
        let got = fill(file, chunk, at)?;
        // Both ends within this chunk and within `buf`.
        let (from, to) = (offset.max(at), end.min(at + got as u64));
        if from < to {
            let (lo, hi) = ((from - offset) as usize, (to - offset) as usize);
            buf[lo..hi].copy_from_slice(&chunk[(from - at) as usize..(to - at) as usize]);
        }
        if to < end && got < want {
            return Err(eof());
        }
        at += want as u64;
    }
    Ok(())
}

/// Read into all of `buf` from `at`, stopping early only at the end.
fn fill(file: &File, buf: &mut [u8], at: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// A disk whose 64 KiB windows are each read once while the cache is on:
/// the scheme probes and layer parsers ask for the same few sectors again
/// and again (an audit of an MBR disk made 165 reads, a move's planning as
/// many), and on a USB bridge, a failing drive or an emulated disk each
/// read is a command. Only over reads no write can come between: an audit
/// (on for its whole life, [`ReadCache::new`]) or a span of a move's
/// planning ([`ReadCache::off`], then [`ReadCache::keep`]). A window, once
/// read, is kept until the cache is turned off.
pub(crate) struct ReadCache<R> {
    dev: R,
    size: u64,
    /// None while off: reads go to the disk.
    windows: std::sync::Mutex<Option<std::collections::HashMap<u64, Vec<u8>>>>,
}

/// The unit read and kept.
const WINDOW: u64 = 64 << 10;
/// At most this many windows (16 MiB) are kept; past that, reads go
/// straight to the disk.
const MAX_WINDOWS: usize = 256;

impl<R: ReadAt> ReadCache<R> {
    /// `dev`, of `size` bytes, cached from the start.
    pub(crate) fn new(dev: R, size: u64) -> ReadCache<R> {
        ReadCache { dev, size, windows: std::sync::Mutex::new(Some(Default::default())) }
    }

    /// `dev`, of `size` bytes, read as it is until [`ReadCache::keep`].
    pub(crate) fn off(dev: R, size: u64) -> ReadCache<R> {
        ReadCache { dev, size, windows: std::sync::Mutex::new(None) }
    }

    /// Cache until the span returned is dropped (where it was off: a span
    /// inside another keeps what the outer one read).
    pub(crate) fn keep(&self) -> Span<'_, R> {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let turned_on = windows.is_none();
        if turned_on {
            *windows = Some(Default::default());
        }
        Span { cache: self, turned_on }
    }

    /// Copy `buf.len()` bytes at `offset` from the windows, reading those
    /// not kept yet; false when off, when a window cannot be read whole
    /// (the end of the disk, an unreadable sector in it) or when full.
    fn copy_windows(&self, buf: &mut [u8], offset: u64) -> bool {
        let Ok(mut guard) = self.windows.lock() else { return false };
        let Some(windows) = guard.as_mut() else { return false };
        let end = offset.saturating_add(buf.len() as u64);
        let mut at = offset;
        while at < end {
            let index = at / WINDOW;
            let start = index * WINDOW;
            if !windows.contains_key(&index) {
                if windows.len() >= MAX_WINDOWS {
                    return false;
                }
                let len = WINDOW.min(self.size.saturating_sub(start));
                let mut window = vec![0; len as usize];
                if self.dev.read_exact_at(&mut window, start).is_err() {
                    return false;
                }
                windows.insert(index, window);
            }
            // Offsets come from on-disk fields: near u64::MAX the window's
            // end saturates, and the read falls to the disk, which refuses it.
            let stop = end.min(start.saturating_add(WINDOW));
            let (from, to) = ((at - start) as usize, (stop - start) as usize);
            // Past the end of the disk: the disk says so.
            let Some(bytes) = windows.get(&index).and_then(|w| w.get(from..to)) else {
                return false;
            };
            buf[(at - offset) as usize..(stop - offset) as usize].copy_from_slice(bytes);
            at = stop;
        }
        true
    }
}

impl<R: ReadAt> ReadAt for ReadCache<R> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        // A large read gains nothing; a window that fails may fail for a
        // sector outside `buf`, which the disk itself then answers for.
        if buf.len() as u64 > WINDOW || !self.copy_windows(buf, offset) {
            return self.dev.read_exact_at(buf, offset);
        }
        Ok(())
    }
}

/// A [`ReadCache`] kept on: dropping it turns the cache off again (and
/// forgets what was read) if it was off before.
pub(crate) struct Span<'a, R> {
    cache: &'a ReadCache<R>,
    turned_on: bool,
}

impl<R> Drop for Span<'_, R> {
    fn drop(&mut self) {
        if self.turned_on {
            *self.cache.windows.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
}

/// Opens `path` for O_DIRECT writing without any in-use checks: for files
/// the caller has already vetted or created (the realign journal).
pub(crate) fn open_direct_write(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let direct = rustix::fs::OFlags::DIRECT.bits() as i32;
    File::options().write(true).custom_flags(direct).open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `len` bytes, each its offset's low byte mixed with the
    /// MiB it is in, read both through O_DIRECT in 4096-byte blocks and
    /// as is.
    fn pattern_file(len: usize) -> (tempfile::NamedTempFile, Vec<u8>, DirectReader) {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let bytes: Vec<u8> = (0..len).map(|i| (i ^ (i >> 20)) as u8).collect();
        let mut temp = tempfile::NamedTempFile::new().unwrap();
        temp.write_all(&bytes).unwrap();
        let direct_flag = rustix::fs::OFlags::DIRECT.bits() as i32;
        let direct = File::options().read(true).custom_flags(direct_flag).open(temp.path());
        let reader = DirectReader::direct(File::open(temp.path()).unwrap(), direct.unwrap(), 4096);
        (temp, bytes, reader.unwrap())
    }

    /// Any range reads as it is in the file, across block and bounce-buffer
    /// boundaries; past the end is UnexpectedEof, as for a File.
    #[test]
    fn direct_reads_serve_any_range() {
        let len = 3 * (1 << 20) + 10_000;
        let (_temp, bytes, reader) = pattern_file(len);
        for (offset, n) in
            [(0, 1), (511, 2), (4095, 2), (4096, 4096), (100, 9_900), (1, len - 1), (len - 1, 1)]
        {
            let mut buf = vec![0u8; n];
            reader.read_exact_at(&mut buf, offset as u64).unwrap();
            assert!(buf == bytes[offset..offset + n], "{offset}+{n}");
        }
        for (offset, n) in [(len - 1, 2), (len, 1), (len + 4096, 512), (0, len + 1)] {
            let err = reader.read_exact_at(&mut vec![0u8; n], offset as u64).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{offset}+{n}");
        }
        reader.read_exact_at(&mut [], len as u64 + 1).unwrap();
        let err = reader.read_exact_at(&mut [0u8; 2], u64::MAX).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    /// Without O_DIRECT the cached pages are dropped, and reads are as is.
    #[test]
    fn uncached_reads_read_as_is() {
        let (temp, bytes, _) = pattern_file(10_000);
        let reader = DirectReader::uncached(File::open(temp.path()).unwrap());
        let mut buf = vec![0u8; 5_000];
        reader.read_exact_at(&mut buf, 4_097).unwrap();
        assert!(buf == bytes[4_097..9_097]);
        let err = reader.read_exact_at(&mut buf, 6_000).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_block_size_must_be_a_power_of_two() {
        for block in [0, 520] {
            let (a, b) = (tempfile::tempfile().unwrap(), tempfile::tempfile().unwrap());
            assert!(DirectReader::direct(a, b, block).is_err(), "{block}");
        }
    }

    /// Bytes whose reads are counted; reads touching `bad` fail.
    struct Counted {
        bytes: Vec<u8>,
        bad: Option<u64>,
        reads: std::sync::atomic::AtomicUsize,
    }

    impl ReadAt for Counted {
        fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let end = offset.saturating_add(buf.len() as u64);
            if self.bad.is_some_and(|bad| offset <= bad && bad < end) {
                return Err(io::Error::other("unreadable"));
            }
            self.bytes.read_exact_at(buf, offset)
        }
    }

    fn counted(len: usize, bad: Option<u64>) -> Counted {
        let bytes = (0..len).map(|i| (i ^ (i >> 16)) as u8).collect();
        Counted { bytes, bad, reads: Default::default() }
    }

    /// Any range reads as it is on the disk, across windows and up to the
    /// end; past the end is the disk's own error.
    #[test]
    fn a_cache_reads_any_range_as_the_disk() {
        let len = 3 * WINDOW as usize + 1_000;
        let disk = counted(len, None);
        let cache = ReadCache::new(&disk, len as u64);
        for (offset, n) in
            [(0, 512), (65_000, 1_000), (3 * 65_536, 1_000), (len - 1, 1), (7, 65_536)]
        {
            let mut buf = vec![0u8; n];
            cache.read_exact_at(&mut buf, offset as u64).unwrap();
            assert!(buf == disk.bytes[offset..offset + n], "{offset}+{n}");
        }
        for (offset, n) in [(len - 1, 2), (len, 1)] {
            let err = cache.read_exact_at(&mut vec![0u8; n], offset as u64).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{offset}+{n}");
        }
        for offset in [u64::MAX - 100, u64::MAX - 1] {
            assert!(cache.read_exact_at(&mut [0u8; 2], offset).is_err(), "{offset}");
        }
    }

    /// The probes' repeated reads of the same sectors reach the disk once.
    #[test]
    fn a_cache_reads_each_window_once() {
        let disk = counted(4 * WINDOW as usize, None);
        let cache = ReadCache::new(&disk, 4 * WINDOW);
        for _ in 0..10 {
            for lba in [0, 1, 2, 34, 63] {
                cache.read_exact_at(&mut [0u8; 512], lba * 512).unwrap();
            }
        }
        assert_eq!(disk.reads.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    /// Off, every read goes to the disk; within a span each window is read
    /// once, and a span inside it keeps those; once the outer span ends,
    /// the disk is read again (it may have been written since).
    #[test]
    fn a_cache_off_reads_the_disk_and_a_span_keeps_its_windows() {
        use std::sync::atomic::Ordering::Relaxed;
        let disk = counted(4 * WINDOW as usize, None);
        let cache = ReadCache::off(&disk, 4 * WINDOW);
        let read = || cache.read_exact_at(&mut [0u8; 512], 512).unwrap();
        read();
        read();
        assert_eq!(disk.reads.load(Relaxed), 2);
        {
            let _outer = cache.keep();
            read();
            {
                let _inner = cache.keep();
                read();
            }
            read();
            assert_eq!(disk.reads.load(Relaxed), 3);
        }
        read();
        assert_eq!(disk.reads.load(Relaxed), 4);
        let _again = cache.keep();
        read();
        read();
        assert_eq!(disk.reads.load(Relaxed), 5, "a new span reads the disk again");
    }

    /// An unreadable sector fails only the reads that cover it, as on the
    /// disk itself: a window holding it is read by the range asked for.
    #[test]
    fn an_unreadable_sector_fails_only_its_own_reads() {
        let disk = counted(2 * WINDOW as usize, Some(4096));
        let cache = ReadCache::new(&disk, 2 * WINDOW);
        let mut buf = [0u8; 512];
        cache.read_exact_at(&mut buf, 0).unwrap();
        assert!(buf[..] == disk.bytes[..512]);
        assert!(cache.read_exact_at(&mut buf, 4096).is_err());
        cache.read_exact_at(&mut buf, WINDOW).unwrap();
        assert!(buf[..] == disk.bytes[WINDOW as usize..WINDOW as usize + 512]);
    }
}
