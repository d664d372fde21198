//! O_DIRECT access: aligned buffers, opening, device facts, and running a
//! list of timed requests without changing the data on the device.

use super::{BenchError, Engine, Request};
use crate::device::sysfs::{block_dir, read_number};
use crate::device::{self, DeviceError};
use crate::units::is_sector_size;
use rustix::fs::OFlags;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// O_DIRECT needs buffers aligned to the logical sector; a page covers all.
const BUF_ALIGN: usize = 4096;

/// Backups held in memory at once; larger workloads run in chunks, each
/// backed up before its own timed phase. Also the largest request.
pub(crate) const CHUNK_BYTES: u64 = 64 << 20;

/// Threads reading backups: the reads are untimed, so overlap them.
const READERS: usize = 4;

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

/// What the timed phase does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Read,
    /// Writes back what was read before the timed phase: nothing changes.
    Write,
    /// Writes a pattern over the data.
    Destructive,
}

/// Opens `path` for O_DIRECT I/O; read-write unless `mode` only reads. A
/// block device opened for writing is opened exclusively (O_EXCL), so that
/// nothing can mount or claim it between the in-use check and the last
/// write-back; one already claimed is refused as in use. Anything but a
/// block device or regular file is refused before it is opened.
pub fn open_direct(path: &Path, mode: Mode, sync: bool) -> Result<File, BenchError> {
    let mut flags = OFlags::DIRECT | OFlags::CLOEXEC;
    flags |= if mode == Mode::Read { OFlags::RDONLY } else { OFlags::RDWR };
    if sync {
        flags |= OFlags::SYNC;
    }
    // For a block device O_EXCL claims it; for a regular file without
    // O_CREAT it would be undefined, so it is only added for devices.
    if mode != Mode::Read && device::check_kind(path)?.file_type().is_block_device() {
        flags |= OFlags::EXCL;
    }
    match device::open_checked(path, flags) {
        Ok(file) => Ok(file),
        Err(DeviceError::Io { error, .. })
            if flags.contains(OFlags::EXCL)
                && error.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) =>
        {
            Err(BenchError::InUse {
                path: path.to_path_buf(),
                by: "open exclusively elsewhere (a file system, swap or another tool)".into(),
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// A new read-write O_DIRECT description of an already open file, so callers
/// may pass whatever descriptor they hold (audit opens read-only); exclusive
/// for a block device, as [`open_direct`].
pub fn reopen_direct(file: &File) -> Result<File, BenchError> {
    let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    open_direct(&path, Mode::Write, false)
}

/// What the kernel says about a block device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct KernelView {
    pub physical_sector_size: u64,
    pub alignment_offset: u64,
}

/// Facts about an open target needed to measure it.
#[derive(Clone, Copy, Debug)]
pub struct DeviceInfo {
    /// A power of two from 512 to 4096.
    pub logical: u64,
    pub size: u64,
    /// None for regular files.
    pub kernel: Option<KernelView>,
}

/// Sector sizes from sysfs (found by device number, so partitions and
/// aliases work); a regular file is taken as 512-byte sectors.
pub fn device_info(file: &File, sys: &Path) -> Result<DeviceInfo, BenchError> {
    let meta = file.metadata().map_err(|e| io_error("stat", 0, 0, e))?;
    let size = (&*file).seek(SeekFrom::End(0)).map_err(|e| io_error("seek", 0, 0, e))?;
    if !meta.file_type().is_block_device() {
        return Ok(DeviceInfo { logical: 512, size, kernel: None });
    }
    let dir = sysfs_dir(sys, meta.rdev())?;
    let (logical, kernel) = kernel_view(&dir)?;
    Ok(DeviceInfo { logical, size, kernel: Some(kernel) })
}

/// The logical sector size and the kernel's view from a device's sysfs
/// directory. The logical size divides every offset and size, so anything
/// but a sector size (0, 520, ...) is refused rather than trusted.
fn kernel_view(dir: &Path) -> Result<(u64, KernelView), BenchError> {
    // A partition has no queue/ of its own: its disk's applies.
    let queue = [dir.join("queue"), dir.join("../queue")]
        .into_iter()
        .find(|q| q.is_dir())
        .unwrap_or_else(|| dir.join("queue"));
    let logical = required_number(&queue.join("logical_block_size"))?;
    if !is_sector_size(logical, 4096) {
        return Err(BenchError::Invalid(format!(
            "{}: logical block size {logical} is not a power of two from 512 to 4096",
            queue.join("logical_block_size").display()
        )));
    }
    let physical = required_number(&queue.join("physical_block_size"))?;
    // "-1" is the kernel's "misaligned, offset unknown": nothing to report.
    let alignment_offset = read_number(&dir.join("alignment_offset")).unwrap_or(0);
    Ok((logical, KernelView { physical_sector_size: physical, alignment_offset }))
}

/// SYS/dev/block/MAJ:MIN, resolved to the real directory.
pub(crate) fn sysfs_dir(sys: &Path, rdev: u64) -> Result<PathBuf, BenchError> {
    block_dir(sys, rdev).ok_or_else(|| {
        let number = format!("{}:{}", rustix::fs::major(rdev), rustix::fs::minor(rdev));
        BenchError::Invalid(format!(
            "block device {number} has no entry under {}/dev/block",
            sys.display()
        ))
    })
}

fn required_number(path: &Path) -> Result<u64, BenchError> {
    read_number(path)
        .ok_or_else(|| BenchError::Invalid(format!("{}: missing or not a number", path.display())))
}

fn io_error(what: &'static str, pos: u64, size: u64, error: std::io::Error) -> BenchError {
    BenchError::Io { what, pos, size, error }
}

/// The latency of each request, and the wall time of the timed phases
/// (backups excluded).
#[derive(Clone, Debug, PartialEq)]
pub struct Executed {
    pub latencies: Vec<Duration>,
    pub wall: Duration,
}

/// Runs `requests` in order and times each. Writes are preceded, outside
/// the timing, by reads of the same ranges, and write that data back (unless
/// destructive). `done` is told after each request.
pub fn execute(
    file: &File,
    requests: &[Request],
    mode: Mode,
    engine: Engine,
    done: &mut dyn FnMut(),
) -> Result<Executed, BenchError> {
    let mut latencies = Vec::with_capacity(requests.len());
    let mut wall = Duration::ZERO;
    for chunk in chunks(requests) {
        let mut bufs = prepare(file, chunk, mode)?;
        let begin = Instant::now();
        match engine {
            Engine::Psync => {
                for (req, buf) in chunk.iter().zip(&mut bufs) {
                    latencies.push(timed(file, req, buf, mode)?);
                    done();
                }
            }
            #[cfg(feature = "io_uring")]
            Engine::IoUring { depth } => {
                let write = mode != Mode::Read;
                latencies.extend(super::uring::run_chunk(file, chunk, bufs, write, depth, done)?);
            }
        }
        wall += begin.elapsed();
    }
    Ok(Executed { latencies, wall })
}

/// Memory a request's buffer takes.
fn footprint(req: &Request) -> u64 {
    req.size.saturating_add(BUF_ALIGN as u64)
}

/// Consecutive slices whose buffers (alignment slack included) take at
/// most CHUNK_BYTES, with at least one request each.
fn chunks(requests: &[Request]) -> Vec<&[Request]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, req) in requests.iter().enumerate() {
        if i > start && bytes.saturating_add(footprint(req)) > CHUNK_BYTES {
            out.push(&requests[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes = bytes.saturating_add(footprint(req));
    }
    if start < requests.len() {
        out.push(&requests[start..]);
    }
    out
}

fn timed(
    file: &File,
    req: &Request,
    buf: &mut AlignedBuf,
    mode: Mode,
) -> Result<Duration, BenchError> {
    let begin = Instant::now();
    let result = match mode {
        Mode::Read => read_into(file, req, buf),
        Mode::Write | Mode::Destructive => file.write_all_at(buf.bytes(), req.pos),
    };
    let elapsed = begin.elapsed();
    result.map_err(|e| io_error(mode_name(mode), req.pos, req.size, e))?;
    Ok(elapsed)
}

fn mode_name(mode: Mode) -> &'static str {
    if mode == Mode::Read {
        "read"
    } else {
        "write"
    }
}

fn read_into(file: &File, req: &Request, buf: &mut AlignedBuf) -> std::io::Result<()> {
    file.read_exact_at(buf.bytes_mut(), req.pos)
}

/// One buffer per request: the backup to write back, a pattern, or (for
/// reads) room to read into. A request larger than CHUNK_BYTES is refused.
fn prepare(file: &File, chunk: &[Request], mode: Mode) -> Result<Vec<AlignedBuf>, BenchError> {
    let fill = if mode == Mode::Destructive { 0xA5 } else { 0 };
    let mut bufs: Vec<AlignedBuf> = chunk
        .iter()
        .map(|r| {
            let len = usize::try_from(r.size).ok().filter(|_| r.size <= CHUNK_BYTES);
            let len = len.ok_or_else(|| {
                BenchError::Invalid(format!(
                    "a request of {} bytes is larger than the {CHUNK_BYTES}-byte limit",
                    r.size
                ))
            })?;
            Ok(AlignedBuf::new(len, fill))
        })
        .collect::<Result<_, BenchError>>()?;
    if mode == Mode::Write {
        back_up(file, chunk, &mut bufs)?;
    }
    Ok(bufs)
}

/// Reads every range in parallel: untimed, so only wall time is at stake.
fn back_up(file: &File, chunk: &[Request], bufs: &mut [AlignedBuf]) -> Result<(), BenchError> {
    let per = chunk.len().div_ceil(READERS).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = chunk
            .chunks(per)
            .zip(bufs.chunks_mut(per))
            .map(|(reqs, bufs)| scope.spawn(move || read_each(file, reqs, bufs)))
            .collect();
        workers.into_iter().try_for_each(|w| {
            w.join().unwrap_or_else(|_| Err(BenchError::Invalid("a backup reader panicked".into())))
        })
    })
}

fn read_each(file: &File, reqs: &[Request], bufs: &mut [AlignedBuf]) -> Result<(), BenchError> {
    reqs.iter().zip(bufs).try_for_each(|(req, buf)| {
        read_into(file, req, buf).map_err(|e| io_error("backup read", req.pos, req.size, e))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(size: u64) -> Request {
        Request { cell: 0, pos: 0, size }
    }

    #[test]
    fn chunks_bound_memory_but_never_split_a_request() {
        let big = vec![req(CHUNK_BYTES / 2 + 1); 3];
        assert_eq!(chunks(&big).iter().map(|c| c.len()).collect::<Vec<_>>(), [1, 1, 1]);
        let small = vec![req(4096); 10];
        assert_eq!(chunks(&small).len(), 1);
        assert!(chunks(&[]).is_empty());
        let huge = vec![req(CHUNK_BYTES * 2)];
        assert_eq!(chunks(&huge).len(), 1);
    }

    #[test]
    fn small_requests_count_their_alignment_slack() {
        let per = (CHUNK_BYTES / (512 + BUF_ALIGN as u64)) as usize;
        let many = vec![req(512); per + 1];
        assert_eq!(chunks(&many).iter().map(|c| c.len()).collect::<Vec<_>>(), [per, 1]);
    }

    #[test]
    fn oversized_requests_are_refused_not_allocated() {
        let file = tempfile::tempfile().unwrap();
        let err = prepare(&file, &[req(CHUNK_BYTES + 512)], Mode::Read).err().unwrap();
        assert!(err.to_string().contains("limit"), "{err}");
        assert!(prepare(&file, &[req(u64::MAX)], Mode::Read).is_err());
    }

    fn queue(dir: &Path, logical: &str, offset: &str) {
        std::fs::create_dir_all(dir.join("queue")).unwrap();
        std::fs::write(dir.join("queue/logical_block_size"), logical).unwrap();
        std::fs::write(dir.join("queue/physical_block_size"), "4096\n").unwrap();
        std::fs::write(dir.join("alignment_offset"), offset).unwrap();
    }

    #[test]
    fn kernel_view_refuses_impossible_logical_sizes() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["0\n", "520\n", "256\n", "8192\n", "junk\n"] {
            queue(dir.path(), bad, "0\n");
            let err = kernel_view(dir.path()).expect_err(bad);
            assert!(matches!(err, BenchError::Invalid(_)), "{bad}: {err}");
        }
        queue(dir.path(), "512\n", "3584\n");
        let (logical, view) = kernel_view(dir.path()).unwrap();
        assert_eq!((logical, view.physical_sector_size, view.alignment_offset), (512, 4096, 3584));
    }

    #[test]
    fn unknown_alignment_offset_is_zero() {
        let dir = tempfile::tempdir().unwrap();
        queue(dir.path(), "512\n", "-1\n");
        assert_eq!(kernel_view(dir.path()).unwrap().1.alignment_offset, 0);
    }

    #[test]
    fn buffers_are_page_aligned() {
        let buf = AlignedBuf::new(4096, 1);
        assert_eq!(buf.bytes().as_ptr() as usize % BUF_ALIGN, 0);
        assert_eq!(buf.bytes().len(), 4096);
    }
}
