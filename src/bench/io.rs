//! O_DIRECT access: aligned buffers, opening, device facts, and running a
//! list of timed requests without changing the data on the device.

use super::engine::Engine;
use super::progress::Progress;
use super::request::{BenchError, IoRequest, Mode, CHUNK_BYTES};
#[cfg(feature = "io_uring")]
use super::uring::Op;
use crate::device::sysfs::{block_dir, read_number};
use crate::device::{self, DeviceError};
use crate::io::{AlignedBuf, BUF_ALIGN};
use crate::units::is_sector_size;
use rustix::fs::OFlags;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Threads reading backups: the reads are untimed, so overlap them.
const READERS: usize = 4;

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
pub(crate) fn reopen_direct(file: &File) -> Result<File, BenchError> {
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
/// destructive). Each request and each backup is counted in `progress`.
/// One engine serves the whole run: a ring set up per chunk would be torn
/// down by a kernel worker while the next chunk is timed.
pub fn execute(
    file: &File,
    requests: &[IoRequest],
    mode: Mode,
    engine: Engine,
    progress: &Progress,
) -> Result<Executed, BenchError> {
    check_sizes(requests)?;
    let chunks = chunks(requests);
    let fill = if mode == Mode::Destructive { 0xA5 } else { 0 };
    // One arena serves every chunk; it and the engine are set up untimed.
    let arena = AlignedBuf::new(arena_len(&chunks, mode), fill);
    let mut issuer = match engine {
        Engine::Psync => Issuer::Psync(arena),
        #[cfg(feature = "io_uring")]
        Engine::IoUring { depth } => {
            Issuer::IoUring(Box::new(super::uring::Ring::new(file, arena, depth)?))
        }
    };
    let mut latencies = vec![Duration::ZERO; requests.len()];
    let mut wall = Duration::ZERO;
    let mut first = 0;
    for chunk in chunks {
        let slots = layout(chunk, mode);
        if mode == Mode::Write {
            progress.start_backup();
            issuer.back_up(file, chunk, &slots)?;
        }
        let timings = &mut latencies[first..first + chunk.len()];
        let begin = Instant::now();
        issuer.run(file, chunk, &slots, mode, timings, &mut || progress.finish_one())?;
        wall += begin.elapsed();
        first += chunk.len();
    }
    Ok(Executed { latencies, wall })
}

/// An engine with the arena its requests' buffers live in.
enum Issuer {
    Psync(AlignedBuf),
    #[cfg(feature = "io_uring")]
    IoUring(Box<super::uring::Ring>),
}

impl Issuer {
    /// Reads what `chunk` will write back into its buffers, untimed.
    fn back_up(
        &mut self,
        file: &File,
        chunk: &[IoRequest],
        slots: &[Range<usize>],
    ) -> Result<(), BenchError> {
        match self {
            Issuer::Psync(arena) => back_up(file, chunk, &mut split(arena.bytes_mut(), slots)),
            #[cfg(feature = "io_uring")]
            Issuer::IoUring(ring) => ring.back_up(chunk, slots),
        }
    }

    /// Issues `chunk` (buffers at `slots`) and stores each latency in
    /// `timings`.
    fn run(
        &mut self,
        file: &File,
        chunk: &[IoRequest],
        slots: &[Range<usize>],
        mode: Mode,
        timings: &mut [Duration],
        done: &mut dyn FnMut(),
    ) -> Result<(), BenchError> {
        match self {
            Issuer::Psync(arena) => {
                let arena = arena.bytes_mut();
                for ((req, slot), timing) in chunk.iter().zip(slots).zip(timings) {
                    *timing = timed(file, req, &mut arena[slot.clone()], mode)?;
                    done();
                }
                Ok(())
            }
            #[cfg(feature = "io_uring")]
            Issuer::IoUring(ring) => {
                let op = if mode == Mode::Read { Op::Read } else { Op::Write };
                ring.run_chunk(chunk, slots, op, timings, done)
            }
        }
    }
}

/// Refuses any request larger than CHUNK_BYTES before memory is set aside.
fn check_sizes(requests: &[IoRequest]) -> Result<(), BenchError> {
    match requests.iter().find(|r| r.size > CHUNK_BYTES) {
        Some(r) => Err(BenchError::Invalid(format!(
            "a request of {} bytes is larger than the {CHUNK_BYTES}-byte limit",
            r.size
        ))),
        None => Ok(()),
    }
}

/// Memory a request's buffer takes in the arena: its size up to a page.
fn footprint(req: &IoRequest) -> u64 {
    req.size.checked_next_multiple_of(BUF_ALIGN as u64).unwrap_or(u64::MAX)
}

/// Consecutive slices whose buffers take at most CHUNK_BYTES, with at
/// least one request each.
fn chunks(requests: &[IoRequest]) -> Vec<&[IoRequest]> {
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

/// Bytes of the largest chunk's buffers, hence of the arena; at most
/// CHUNK_BYTES once [`check_sizes`] passed.
fn arena_len(chunks: &[&[IoRequest]], mode: Mode) -> usize {
    let bytes = |chunk: &&[IoRequest]| {
        let each = chunk.iter().map(footprint);
        if mode == Mode::Destructive {
            each.max().unwrap_or(0)
        } else {
            each.sum()
        }
    };
    let most = chunks.iter().map(bytes).max().unwrap_or(0);
    usize::try_from(most.min(CHUNK_BYTES)).unwrap_or(0)
}

/// Each request's buffer in the arena. Data to put back or read needs one
/// per request: one after another, each starting on a page. A pattern is
/// the same for all, so destructive writes share one buffer (as fio's
/// requests share a few), which stays in the CPU caches. Sizes were checked
/// by [`check_sizes`], so nothing overflows.
fn layout(chunk: &[IoRequest], mode: Mode) -> Vec<Range<usize>> {
    let mut at = 0;
    chunk
        .iter()
        .map(|req| {
            let slot = at..at + req.size as usize;
            if mode != Mode::Destructive {
                at += footprint(req) as usize;
            }
            slot
        })
        .collect()
}

/// The arena cut into the buffers at `slots` (ascending, disjoint).
fn split<'a>(mut arena: &'a mut [u8], slots: &[Range<usize>]) -> Vec<&'a mut [u8]> {
    let mut consumed = 0;
    slots
        .iter()
        .map(|slot| {
            let (_, rest) = std::mem::take(&mut arena).split_at_mut(slot.start - consumed);
            let (buf, rest) = rest.split_at_mut(slot.len());
            (arena, consumed) = (rest, slot.end);
            buf
        })
        .collect()
}

fn timed(file: &File, req: &IoRequest, buf: &mut [u8], mode: Mode) -> Result<Duration, BenchError> {
    let begin = Instant::now();
    let result = match mode {
        Mode::Read => file.read_exact_at(buf, req.pos),
        Mode::Write | Mode::Destructive => file.write_all_at(buf, req.pos),
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

/// Reads every range in parallel: untimed, so only wall time is at stake.
fn back_up(file: &File, chunk: &[IoRequest], bufs: &mut [&mut [u8]]) -> Result<(), BenchError> {
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

fn read_each(file: &File, reqs: &[IoRequest], bufs: &mut [&mut [u8]]) -> Result<(), BenchError> {
    reqs.iter().zip(bufs).try_for_each(|(req, buf)| {
        file.read_exact_at(buf, req.pos).map_err(|e| io_error("backup read", req.pos, req.size, e))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::BenchPhase;

    fn req(size: u64) -> IoRequest {
        IoRequest { cell: 0, pos: 0, size }
    }

    fn idle() -> Progress {
        Progress::new(0, BenchPhase::Timed)
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
    fn small_requests_take_a_page_each() {
        let per = (CHUNK_BYTES / BUF_ALIGN as u64) as usize;
        let many = vec![req(512); per + 1];
        assert_eq!(chunks(&many).iter().map(|c| c.len()).collect::<Vec<_>>(), [per, 1]);
        assert_eq!(arena_len(&chunks(&many), Mode::Write), CHUNK_BYTES as usize);
    }

    #[test]
    fn oversized_requests_are_refused_not_allocated() {
        let file = tempfile::tempfile().unwrap();
        for size in [CHUNK_BYTES + 512, u64::MAX] {
            let err = execute(&file, &[req(size)], Mode::Read, Engine::Psync, &idle());
            assert!(err.unwrap_err().to_string().contains("limit"), "{size}");
        }
    }

    #[test]
    fn layout_starts_every_buffer_on_a_page() {
        let chunk = [req(512), req(4096), req(6144), req(512)];
        for mode in [Mode::Read, Mode::Write] {
            let slots = layout(&chunk, mode);
            assert_eq!(slots, [0..512, 4096..8192, 8192..14336, 16384..16896]);
            assert_eq!(arena_len(&[&chunk], mode), 20480);
            assert_eq!(arena_len(&[], mode), 0);
        }
    }

    #[test]
    fn destructive_writes_share_one_buffer() {
        let chunk = [req(512), req(4096), req(6144), req(512)];
        let slots = layout(&chunk, Mode::Destructive);
        assert_eq!(slots, [0..512, 0..4096, 0..6144, 0..512]);
        assert_eq!(arena_len(&[&chunk], Mode::Destructive), 8192);
    }

    #[test]
    fn split_cuts_the_arena_at_the_slots() {
        let mut arena = vec![0u8; 20480];
        let chunk = [req(512), req(4096), req(6144), req(512)];
        for (i, buf) in split(&mut arena, &layout(&chunk, Mode::Write)).into_iter().enumerate() {
            buf.fill(i as u8 + 1);
        }
        let runs = [(0, 512, 1), (512, 4096, 0), (4096, 8192, 2), (8192, 14336, 3)];
        for (from, to, byte) in runs.into_iter().chain([(14336, 16384, 0), (16384, 16896, 4)]) {
            assert!(arena[from..to].iter().all(|&b| b == byte), "{from}..{to}");
        }
    }

    /// A file of `len` bytes, each its offset's low byte.
    fn numbered(len: usize) -> (File, Vec<u8>) {
        let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let file = tempfile::tempfile().unwrap();
        file.write_all_at(&bytes, 0).unwrap();
        (file, bytes)
    }

    fn engines() -> Vec<Engine> {
        #[cfg(feature = "io_uring")]
        if crate::bench::uring::check(4).is_ok() {
            let deep = |depth| Engine::IoUring { depth };
            return vec![Engine::Psync, deep(1), deep(2), deep(4)];
        }
        vec![Engine::Psync]
    }

    fn scattered() -> Vec<IoRequest> {
        let at = |pos, size| IoRequest { cell: 0, pos, size };
        vec![at(8192, 512), at(0, 4096), at(20480, 8192), at(4096, 1024), at(12288, 512)]
    }

    #[test]
    fn writes_put_back_what_was_there_with_either_engine() {
        for engine in engines() {
            let (file, bytes) = numbered(32768);
            let progress = Progress::new(5, BenchPhase::Backup);
            let run = execute(&file, &scattered(), Mode::Write, engine, &progress);
            assert_eq!(run.unwrap().latencies.len(), 5, "{engine:?}");
            assert_eq!(progress.counts(), (5, 5), "{engine:?}: counted once per request");
            let mut now = vec![0; bytes.len()];
            file.read_exact_at(&mut now, 0).unwrap();
            assert!(now == bytes, "{engine:?} changed the data");
        }
    }

    #[test]
    fn destructive_writes_land_where_asked_with_either_engine() {
        for engine in engines() {
            let (file, bytes) = numbered(32768);
            execute(&file, &scattered(), Mode::Destructive, engine, &idle()).unwrap();
            let mut now = vec![0; bytes.len()];
            file.read_exact_at(&mut now, 0).unwrap();
            let hit = |i: usize| {
                scattered().iter().any(|r| (r.pos..r.pos + r.size).contains(&(i as u64)))
            };
            for (i, (&was, &is)) in bytes.iter().zip(&now).enumerate() {
                assert_eq!(is, if hit(i) { 0xA5 } else { was }, "{engine:?} at byte {i}");
            }
        }
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
