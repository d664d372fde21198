//! The io_uring engine: up to `depth` requests in flight, each timed from
//! its submission to its completion (fio's `lat`). The file and the arena
//! holding every buffer are registered once, outside the timing, so a
//! request costs the kernel no file lookup and no page pinning.
//!
//! At shallow depths, completions are awaited by polling for up to
//! [`POLL`] before sleeping, as the kernel's hybrid polling does: waking a
//! sleeping task can take longer than a fast device takes per request (an
//! idle virtual CPU is halted and must be woken), and a benchmark that
//! sleeps between completions measures that wakeup rather than the device.
//! A slow device's requests still end with the task asleep, so the CPU
//! spent stays small. How deep polling pays depends on how fast idle CPUs
//! wake: see [`poll_depth`].

use super::request::{BenchError, IoRequest};
use crate::io::AlignedBuf;
use io_uring::{cqueue, opcode, squeue, types, IoUring, Submitter};
use std::fs::File;
use std::io::IoSliceMut;
use std::mem::ManuallyDrop;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Whether a ring of `depth` entries can be set up here: seccomp profiles
/// of containers and some kernels refuse io_uring.
pub fn check(depth: u32) -> std::io::Result<()> {
    IoUring::new(depth).map(drop)
}

/// What a chunk's requests do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Read,
    Write,
    /// Reads of what the writes will put back.
    Backup,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Backup => "backup read",
        }
    }
}

/// A ring with the file registered as fixed file 0 and, where the locked
/// memory limit allows, the arena as fixed buffer 0.
pub(crate) struct Ring {
    ring: ManuallyDrop<IoUring>,
    arena: ManuallyDrop<AlignedBuf>,
    depth: usize,
    /// Whether waits poll before sleeping.
    poll: bool,
    fixed_buffer: bool,
    /// Submitted and not yet completed. Should the ring fail with any, the
    /// ring and the arena are leaked rather than freed under the kernel.
    inflight: usize,
    /// When each request of the current chunk was submitted.
    started: Vec<Instant>,
}

/// How long a wait polls for a completion before sleeping: several times
/// the wakeup it saves on a virtual machine (see docs/performance.md).
const POLL: Duration = Duration::from_micros(100);

/// The deepest queue that polls, given the CPU latency limit in force.
/// Deeper, one wakeup reaps several completions and polling takes CPU from
/// the kernel's completion work. Where idle CPUs only poll (a limit of 0,
/// as bench holds by default) a wakeup is cheap, and at depth 32 polling
/// gives 0.9 × the sleeping rate; where they halt, it gives 1.2 × (two
/// virtual CPUs; see docs/performance.md). Both depths come from that one
/// machine, and a limit of 0 is taken to mean polling idle CPUs, which
/// holds wherever a cpuidle driver honours it.
fn poll_depth(cpu_latency_us: Option<u32>) -> usize {
    if cpu_latency_us == Some(0) {
        8
    } else {
        32
    }
}

/// The kernel's IORING_ENTER_GETEVENTS: post the completions deferred to
/// this task (DEFER_TASKRUN) and wait for `min_complete` of them.
const GETEVENTS: u32 = 1;

fn ring_error(e: std::io::Error) -> BenchError {
    BenchError::Invalid(format!("io_uring: {e}"))
}

impl Ring {
    pub(crate) fn new(file: &File, mut arena: AlignedBuf, depth: u32) -> Result<Ring, BenchError> {
        let ring = build(depth).map_err(ring_error)?;
        ring.submitter().register_files(&[file.as_raw_fd()]).map_err(ring_error)?;
        // Unprivileged users may lack the RLIMIT_MEMLOCK to pin the arena;
        // the requests then pin their own pages, as plain writes do.
        let fixed_buffer = register(&ring, &mut arena).is_ok();
        let depth = depth.max(1) as usize;
        Ok(Ring {
            ring: ManuallyDrop::new(ring),
            arena: ManuallyDrop::new(arena),
            depth,
            poll: depth <= poll_depth(super::cpu_latency::in_force()),
            fixed_buffer,
            inflight: 0,
            started: Vec::new(),
        })
    }

    /// Reads what `chunk` will write back into its buffers, untimed. Through
    /// the ring, at depth: helper threads would leave the timed phase that
    /// follows measurably slower (placed anew beside the device's workers).
    pub(crate) fn back_up(
        &mut self,
        chunk: &[IoRequest],
        slots: &[Range<usize>],
    ) -> Result<(), BenchError> {
        let mut untimed = vec![Duration::ZERO; chunk.len()];
        self.run_chunk(chunk, slots, Op::Backup, &mut untimed, &mut || {})
    }

    /// Runs `chunk`, request i with the arena's bytes at `slots[i]`, and
    /// stores each latency in `timings`. The queue is kept full: every
    /// wakeup reaps all completions, refills, and submits them in one call.
    pub(crate) fn run_chunk(
        &mut self,
        chunk: &[IoRequest],
        slots: &[Range<usize>],
        op: Op,
        timings: &mut [Duration],
        done: &mut dyn FnMut(),
    ) -> Result<(), BenchError> {
        // Everything is checked before the first submission: an early return
        // once requests are in flight would leak the arena.
        let lens = lengths(chunk, slots, self.arena.bytes().len())?;
        if timings.len() != chunk.len() {
            return Err(BenchError::Invalid("io_uring: one timing per request needed".into()));
        }
        self.started.clear();
        self.started.resize(chunk.len(), Instant::now());
        let base = self.arena.bytes_mut().as_mut_ptr();
        let (submitter, mut sq, mut cq) = self.ring.split();
        let (write, mut failed) = (op == Op::Write, None);
        let mut next = 0;
        loop {
            if failed.is_none() && next < chunk.len() && self.inflight < self.depth {
                let end = chunk.len().min(next + self.depth - self.inflight);
                let now = Instant::now();
                sq.sync(); // learn how much the kernel consumed
                while next < end {
                    let buf = base.wrapping_add(slots[next].start);
                    let entry = request(write, self.fixed_buffer, buf, lens[next], chunk[next].pos);
                    // SAFETY: the arena outlives the request: it is only
                    // freed once nothing is in flight, and is leaked should
                    // the ring fail before that.
                    if unsafe { sq.push(&entry.user_data(next as u64)) }.is_err() {
                        break; // the kernel has not consumed the queue yet
                    }
                    self.started[next] = now;
                    next += 1;
                    self.inflight += 1;
                }
                sq.sync();
            }
            if self.inflight == 0 {
                break;
            }
            let queued = u32::try_from(sq.len()).unwrap_or(u32::MAX);
            let poll = if self.poll { POLL } else { Duration::ZERO };
            submit_and_wait(&submitter, &mut cq, queued, poll).map_err(ring_error)?;
            let now = Instant::now();
            for cqe in &mut cq {
                let i = usize::try_from(cqe.user_data()).unwrap_or(usize::MAX);
                let Some(req) = chunk.get(i) else { continue };
                timings[i] = now.duration_since(self.started[i]);
                self.inflight -= 1;
                done();
                if u64::try_from(cqe.result()).ok() != Some(req.size) && failed.is_none() {
                    failed = Some(short(cqe.result(), req, op));
                }
            }
            cq.sync();
        }
        failed.map_or(Ok(()), Err)
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if self.inflight == 0 {
            // Closing the ring releases what it holds only later, on a kernel
            // worker: unregistered now, the file is closed with our own
            // descriptor, and an exclusive claim on a device ends with us.
            let submitter = self.ring.submitter();
            let _ = submitter.unregister_files();
            let _ = submitter.unregister_buffers();
            // SAFETY: neither is used again; the ring goes first.
            unsafe {
                ManuallyDrop::drop(&mut self.ring);
                ManuallyDrop::drop(&mut self.arena);
            }
        }
    }
}

/// A ring whose completions wait to be reaped by our own calls
/// (DEFER_TASKRUN, Linux 6.1), else one that at least does not interrupt us
/// to post them (COOP_TASKRUN, 5.19), else a plain one.
fn build(depth: u32) -> std::io::Result<IoUring> {
    IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .build(depth)
        .or_else(|_| IoUring::builder().setup_coop_taskrun().build(depth))
        .or_else(|_| IoUring::new(depth))
}

/// Registers the arena as fixed buffer 0.
fn register(ring: &IoUring, arena: &mut AlignedBuf) -> std::io::Result<()> {
    let iov = [IoSliceMut::new(arena.bytes_mut())];
    // SAFETY: IoSliceMut is documented to be ABI-compatible with iovec. The
    // arena outlives the registration: `Ring` drops the ring before it.
    unsafe { ring.submitter().register_buffers(std::slice::from_raw_parts(iov.as_ptr().cast(), 1)) }
}

/// Each request's length, once every buffer is known to lie in the arena.
fn lengths(
    chunk: &[IoRequest],
    slots: &[Range<usize>],
    arena: usize,
) -> Result<Vec<u32>, BenchError> {
    if slots.len() != chunk.len() {
        return Err(BenchError::Invalid("io_uring: one buffer per request needed".into()));
    }
    chunk
        .iter()
        .zip(slots)
        .map(|(req, slot)| {
            let len = u32::try_from(req.size)
                .ok()
                .filter(|&len| slot.len() == len as usize && slot.end <= arena);
            len.ok_or_else(|| {
                BenchError::Invalid(format!(
                    "io_uring: no buffer of {} bytes for the request at byte {}",
                    req.size, req.pos
                ))
            })
        })
        .collect()
}

/// The submission for one request on fixed file 0.
fn request(write: bool, fixed_buffer: bool, buf: *mut u8, len: u32, pos: u64) -> squeue::Entry {
    let file = types::Fixed(0);
    match (write, fixed_buffer) {
        (true, true) => opcode::WriteFixed::new(file, buf, len, 0).offset(pos).build(),
        (true, false) => opcode::Write::new(file, buf, len).offset(pos).build(),
        (false, true) => opcode::ReadFixed::new(file, buf, len, 0).offset(pos).build(),
        (false, false) => opcode::Read::new(file, buf, len).offset(pos).build(),
    }
}

/// Submits `queued` entries, then waits for a completion: polling until
/// `poll` has passed, then asleep. Returns with `cq` synced.
fn submit_and_wait(
    submitter: &Submitter,
    cq: &mut cqueue::CompletionQueue,
    queued: u32,
    poll: Duration,
) -> std::io::Result<()> {
    enter(submitter, queued, 0)?;
    let until = Instant::now() + poll;
    loop {
        cq.sync();
        if !cqueue::CompletionQueue::is_empty(cq) {
            return Ok(());
        }
        let sleep = Instant::now() >= until;
        enter(submitter, 0, u32::from(sleep))?;
        if sleep {
            cq.sync();
            return Ok(());
        }
    }
}

/// One io_uring_enter with GETEVENTS, retried when interrupted: an
/// interrupted call consumed nothing (the kernel reports any submission).
fn enter(submitter: &Submitter, to_submit: u32, min_complete: u32) -> std::io::Result<usize> {
    loop {
        // SAFETY: no argument is passed: no signal mask, no EXT_ARG.
        match unsafe { submitter.enter::<()>(to_submit, min_complete, GETEVENTS, None) } {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

fn short(result: i32, req: &IoRequest, op: Op) -> BenchError {
    let source = if result < 0 {
        std::io::Error::from_raw_os_error(-result)
    } else {
        std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("only {result} bytes transferred"),
        )
    };
    BenchError::Io { what: op.name(), pos: req.pos, size: req.size, error: source }
}

#[cfg(test)]
mod tests {
    use super::poll_depth;

    #[test]
    fn polls_deeper_where_idle_cpus_may_halt() {
        assert_eq!(poll_depth(Some(0)), 8);
        assert_eq!(poll_depth(None), 32);
        assert_eq!(poll_depth(Some(1)), 32, "a limit above 0 still lets a CPU halt");
    }
}
