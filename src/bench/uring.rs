//! The io_uring engine: up to `depth` requests in flight, each timed from
//! its submission to its completion (fio's `lat`).

use super::io::AlignedBuf;
use super::{BenchError, Request};
use io_uring::{opcode, types, IoUring};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Whether a ring of `depth` entries can be set up here: seccomp profiles
/// of containers and some kernels refuse io_uring.
pub fn check(depth: u32) -> std::io::Result<()> {
    IoUring::new(depth).map(drop)
}

/// Runs `chunk` with `bufs` (one per request) and returns each latency.
/// Buffers are owned so that, should the ring fail with requests in
/// flight, they can be leaked rather than freed under the kernel's feet.
pub(crate) fn run_chunk(
    file: &File,
    chunk: &[Request],
    mut bufs: Vec<AlignedBuf>,
    write: bool,
    depth: u32,
    done: &mut dyn FnMut(),
) -> Result<Vec<Duration>, BenchError> {
    let ring_error = |e: std::io::Error| BenchError::Invalid(format!("io_uring: {e}"));
    // Every length is checked before the first submission: an early return
    // once requests are in flight would free their buffers under the kernel.
    let lens = chunk
        .iter()
        .map(|req| {
            u32::try_from(req.size).map_err(|_| {
                BenchError::Invalid(format!("{} bytes is too large for one request", req.size))
            })
        })
        .collect::<Result<Vec<u32>, BenchError>>()?;
    if bufs.len() != chunk.len() {
        return Err(BenchError::Invalid("io_uring: one buffer per request needed".into()));
    }
    let mut ring = IoUring::new(depth).map_err(ring_error)?;
    let fd = types::Fd(file.as_raw_fd());
    let mut started = vec![Instant::now(); chunk.len()];
    let mut latencies = vec![Duration::ZERO; chunk.len()];
    let (mut next, mut inflight, mut failed) = (0, 0, None);
    while next < chunk.len() || inflight > 0 {
        while failed.is_none() && next < chunk.len() && inflight < depth as usize {
            let (req, buf, len) = (&chunk[next], &mut bufs[next], lens[next]);
            let entry = if write {
                opcode::Write::new(fd, buf.bytes().as_ptr(), len).offset(req.pos).build()
            } else {
                opcode::Read::new(fd, buf.bytes_mut().as_mut_ptr(), len).offset(req.pos).build()
            };
            // SAFETY: the buffer outlives the request: `bufs` is only
            // dropped after every submitted request has completed, and is
            // leaked if the ring fails before that.
            let pushed = unsafe { ring.submission().push(&entry.user_data(next as u64)) };
            if pushed.is_err() {
                break; // the queue is full: reap first
            }
            started[next] = Instant::now();
            next += 1;
            inflight += 1;
        }
        if inflight == 0 {
            break;
        }
        if let Err(e) = submit(&ring) {
            std::mem::forget(bufs);
            std::mem::forget(ring);
            return Err(ring_error(e));
        }
        for cqe in ring.completion() {
            let i = usize::try_from(cqe.user_data()).unwrap_or(usize::MAX);
            let Some(req) = chunk.get(i) else { continue };
            latencies[i] = started[i].elapsed();
            inflight -= 1;
            done();
            if u64::try_from(cqe.result()).ok() != Some(req.size) && failed.is_none() {
                failed = Some(short(cqe.result(), req, write));
            }
        }
    }
    failed.map_or(Ok(latencies), Err)
}

/// Submits and waits for one completion, retrying when interrupted.
fn submit(ring: &IoUring) -> std::io::Result<usize> {
    loop {
        match ring.submit_and_wait(1) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

fn short(result: i32, req: &Request, write: bool) -> BenchError {
    let source = if result < 0 {
        std::io::Error::from_raw_os_error(-result)
    } else {
        std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("only {result} bytes transferred"),
        )
    };
    BenchError::Io {
        what: if write { "write" } else { "read" },
        pos: req.pos,
        size: req.size,
        error: source,
    }
}
