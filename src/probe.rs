//! `probe`: infer the physical sector size and alignment offset of a drive
//! from how long writes take, since the kernel's answer is often wrong.
//!
//! On a read-modify-write drive a write of S bytes at offset O is fast
//! exactly when S is a multiple of the physical sector P and O ≡ A (mod P),
//! A being the alignment offset. So:
//! 1. locate: 64 KiB writes at every logical-sector offset of a window
//!    growing from 4 KiB until some offset is fast (none up to 64 KiB: no
//!    measurable penalty);
//! 2. knee: at that fast offset, every power-of-two size from the logical
//!    sector to 64 KiB; the smallest fast size is P;
//! 3. sweep: P-byte writes at every logical-sector offset below P; the one
//!    fast offset is A (this finds the XP jumper's 3584).
//!
//! Each stage measures its cells in rounds (one write per cell, at random
//! positions, in random order), splits the cell medians at the widest gap,
//! and stops once two rounds in a row agree. Writes are non-destructive:
//! each writes back the bytes read there before the round.

use crate::bench::{
    self, io::execute, rng::Rng, stats, BenchPhase, Engine, IoRequest, KernelView, Mode, Progress,
};
use serde::Serialize;
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Errors are those of measuring: opening, I/O, a device in use.
pub(crate) use crate::bench::BenchError as ProbeError;

/// The largest physical sector considered, and the largest write.
const LARGEST: u64 = 65536;
/// Positions are k * GRID + offset: room for any offset plus any size, and
/// a multiple of every candidate sector size.
const GRID: u64 = 2 * LARGEST;
/// Writes go to the first GiB: short seeks on a disk, any size of emulator.
const REGION: u64 = 1 << 30;
/// Grid slots needed, so random positions do not all coincide.
const MIN_SLOTS: u64 = 4;
const MIN_ROUNDS: usize = 4;
const MAX_ROUNDS: usize = 12;

#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// For reproducible runs; from the clock when None.
    pub seed: Option<u64>,
    /// sysfs, for the kernel's view and the in-use check; device nodes are
    /// in /dev for "/sys", else in a fixture's ROOT/dev next to ROOT/sys.
    pub sys: PathBuf,
    /// Byte ranges the writes must stay inside (e.g. unallocated space);
    /// None for the first GiB.
    pub within: Option<Vec<Range<u64>>>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions { seed: None, sys: PathBuf::from("/sys"), within: None }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbeResult {
    /// As measured; the logical sector size when there is no penalty.
    pub physical_sector_size: u64,
    pub alignment_offset: u64,
    pub lowest_aligned_lba: u64,
    /// 0..1: how cleanly fast and slow writes separate, and whether the
    /// stages agreed.
    pub confidence: f64,
    /// None for regular files.
    pub kernel: Option<KernelView>,
    /// False when the kernel's physical size or offset differs from what
    /// was measured; true when no penalty contradicts it.
    pub agrees_with_kernel: bool,
    pub elapsed_s: f64,
    pub logical_sector_size: u64,
    /// Median misaligned ÷ aligned latency of 64 KiB writes; None when no
    /// penalty was measured.
    pub penalty: Option<f64>,
    pub writes: u64,
}

/// Probes the device behind `dev` (any descriptor: it is reopened
/// read-write with O_DIRECT, exclusively for a block device). Refuses a
/// device that is mounted, held or claimed, and an image attached to a
/// loop device.
pub fn probe(dev: &File, opts: &ProbeOptions) -> Result<ProbeResult, ProbeError> {
    probe_with(dev, opts, &Progress::new(0, BenchPhase::Locate))
}

/// [`probe`], counting writes in `progress`: its total is the writes
/// expected, assuming every stage still to come is needed and each settles
/// in one round past the minimum.
pub fn probe_with(
    dev: &File,
    opts: &ProbeOptions,
    progress: &Progress,
) -> Result<ProbeResult, ProbeError> {
    let begin = Instant::now();
    let link = PathBuf::from(format!("/proc/self/fd/{}", dev.as_raw_fd()));
    let path = std::fs::read_link(&link).unwrap_or(link);
    // Checked before the exclusive reopen, which would itself look like a
    // claim; that open then keeps anyone from mounting it meanwhile.
    bench::safety::check_unused(dev, &path, &bench::safety::root_of(&opts.sys))?;
    // Our own description: finding the size seeks, which would move the
    // caller's file offset.
    let file = bench::reopen_direct(dev)?;
    let info = bench::device_info(&file, &opts.sys)?;
    let whole = 0..info.size.min(REGION);
    let slots = slots(opts.within.as_deref().unwrap_or(std::slice::from_ref(&whole)), info.size);
    if (slots.len() as u64) < MIN_SLOTS {
        return Err(ProbeError::Invalid(format!(
            "too little room to probe: needs {} aligned {GRID}-byte slots, found {}",
            MIN_SLOTS,
            slots.len()
        )));
    }
    let seed = opts.seed.map_or_else(Rng::from_clock, Rng::new);
    let mut meter = Meter { file: &file, rng: seed, slots, writes: 0, progress, ahead: 0 };
    let found = infer(&mut meter, info.logical)?;
    Ok(conclude(found, info.logical, info.kernel, begin, meter.writes))
}

/// Starts of the GRID-aligned slots lying whole inside `ranges` and the
/// device, at most a REGION's worth: the last slot of a range is left out so
/// that offset + size never crosses its end.
fn slots(ranges: &[Range<u64>], size: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for r in ranges {
        let end = r.end.min(size);
        let mut at = r.start.div_ceil(GRID).saturating_mul(GRID);
        while at.saturating_add(2 * GRID) <= end && (out.len() as u64) < REGION / GRID {
            out.push(at);
            at += GRID;
        }
    }
    out
}

#[cfg(test)]
#[test]
#[allow(clippy::single_range_in_vec_init)] // slices of one range each
fn slots_stay_whole_inside_their_ranges() {
    assert_eq!(slots(&[0..4 * GRID], u64::MAX), [0, GRID, 2 * GRID]);
    assert_eq!(slots(&[1..4 * GRID + 5], 3 * GRID), [GRID]);
    assert_eq!(slots(&[GRID - 1..3 * GRID], u64::MAX), [GRID]);
    assert!(slots(&[GRID - 1..3 * GRID - 1], u64::MAX).is_empty());
    assert!(slots(&[0..GRID], u64::MAX).is_empty());
    assert_eq!(slots(&[0..u64::MAX], u64::MAX).len() as u64, REGION / GRID);
}

/// What the stages concluded, before comparing with the kernel.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Found {
    physical: u64,
    offset: u64,
    confidence: f64,
    penalty: Option<f64>,
}

/// Below this a result is noise rather than a finding: `infer` tries
/// again after a "no penalty" this unsure, and `audit --probe` judges by
/// the reported geometry rather than by a measured one this unsure.
pub const MIN_CONFIDENCE: f64 = 0.5;
/// Locate-then-knee attempts before giving up as too noisy.
const ATTEMPTS: usize = 2;

fn infer(meter: &mut Meter, logical: u64) -> Result<Found, ProbeError> {
    for _ in 0..ATTEMPTS {
        let (first, locate) = match locate(meter, logical)? {
            Located::At(first, outcome) => (first, outcome),
            Located::Nowhere(confidence) if confidence >= MIN_CONFIDENCE => {
                return Ok(Found { physical: logical, offset: 0, confidence, penalty: None })
            }
            Located::Nowhere(_) => continue,
        };
        // None: the located offset was a fluke, every size costs the same there.
        if let Some((physical, knee_confidence)) = knee(meter, logical, first)? {
            let (offset, sweep_confidence) = sweep(meter, logical, physical, first)?;
            return Ok(Found {
                physical,
                offset,
                confidence: locate.confidence.min(knee_confidence).min(sweep_confidence),
                penalty: Some(locate.penalty),
            });
        }
    }
    Err(ProbeError::Invalid(
        "inconclusive: the timings were too noisy to tell fast writes from slow ones; \
         retry when the disk and the machine are idle"
            .to_string(),
    ))
}

enum Located {
    /// The first fast offset, and the stage's outcome.
    At(u64, Outcome),
    /// No fast offset up to 64 KiB; how uniform the latencies were.
    Nowhere(f64),
}

/// Stage 1a: a fast offset for the largest write, in windows doubling up
/// to 64 KiB.
fn locate(meter: &mut Meter, logical: u64) -> Result<Located, ProbeError> {
    let mut window = (2 * logical).max(4096);
    loop {
        let cells = offsets(logical, window).map(|o| (LARGEST, o)).collect::<Vec<_>>();
        // Were this window to find nothing, every larger one would follow.
        let larger = std::iter::successors(Some(window * 2), |w| Some(w * 2))
            .take_while(|&w| w <= LARGEST)
            .map(|w| w / logical);
        meter.plan(BenchPhase::Locate, larger.sum());
        let out = meter.classify(&cells)?;
        // Fast offsets recur every P >= 2 sectors, so they are at most half:
        // a larger "fast" cluster means a few slow outliers, not a penalty.
        let minority =
            out.fast.as_ref().filter(|m| 2 * m.iter().filter(|&&f| f).count() <= m.len());
        if let Some(i) = minority.and_then(|m| m.iter().position(|&f| f)) {
            return Ok(Located::At(cells[i].1, out));
        }
        if window >= LARGEST {
            return Ok(Located::Nowhere(out.confidence));
        }
        window *= 2;
    }
}

fn offsets(logical: u64, below: u64) -> impl Iterator<Item = u64> {
    (0..below / logical).map(move |i| i * logical)
}

/// Stage 1b: the smallest fast size at a fast offset, and the confidence
/// (halved when sizes above it are not all fast); None when all sizes cost
/// the same.
fn knee(meter: &mut Meter, logical: u64, at: u64) -> Result<Option<(u64, f64)>, ProbeError> {
    let sizes: Vec<u64> = std::iter::successors(Some(logical), |s| Some(s * 2))
        .take_while(|&s| s <= LARGEST)
        .collect();
    let cells: Vec<(u64, u64)> = sizes.iter().map(|&s| (s, at)).collect();
    // The sweep after it, at the most common physical sector.
    meter.plan(BenchPhase::Knee, (4096 / logical).max(1));
    let out = meter.classify(&cells)?;
    let Some(mask) = out.fast else {
        return Ok(None);
    };
    let knee = mask.iter().position(|&f| f).unwrap_or(sizes.len() - 1);
    let monotonic = mask.iter().enumerate().all(|(i, &f)| f == (i >= knee));
    Ok(Some((sizes[knee], out.confidence * if monotonic { 1.0 } else { 0.5 })))
}

/// Stage 2: the one fast offset below `physical`; it must match the
/// located one, else that one is kept at half the confidence.
fn sweep(
    meter: &mut Meter,
    logical: u64,
    physical: u64,
    located: u64,
) -> Result<(u64, f64), ProbeError> {
    let cells: Vec<(u64, u64)> = offsets(logical, physical).map(|o| (physical, o)).collect();
    meter.plan(BenchPhase::Sweep, 0);
    let out = meter.classify(&cells)?;
    let fast: Vec<u64> = match &out.fast {
        Some(mask) => cells.iter().zip(mask).filter(|(_, &f)| f).map(|(c, _)| c.1).collect(),
        None => Vec::new(),
    };
    match fast[..] {
        [offset] if offset == located % physical => Ok((offset, out.confidence)),
        _ => Ok((located % physical, out.confidence * 0.5)),
    }
}

/// A stage's verdict on its cells.
struct Outcome {
    /// Which cells are fast; None when all cost the same.
    fast: Option<Vec<bool>>,
    confidence: f64,
    /// Median of slow cells' medians ÷ that of fast cells.
    penalty: f64,
}

struct Meter<'a> {
    file: &'a File,
    rng: Rng,
    /// Positions are one of these plus an offset below GRID.
    slots: Vec<u64>,
    writes: u64,
    progress: &'a Progress,
    /// Cells of the stages expected after the current one.
    ahead: u64,
}

/// Rounds a stage is expected to take: one past the minimum, or past the
/// rounds it has already had.
fn expected_rounds(done: usize) -> u64 {
    (MIN_ROUNDS.max(done) + 1).min(MAX_ROUNDS) as u64
}

impl Meter<'_> {
    /// A stage begins, with `ahead` cells expected after it.
    fn plan(&mut self, phase: BenchPhase, ahead: u64) {
        self.progress.set_phase(phase);
        self.ahead = ahead;
    }

    /// Writes expected in all, `cells` being measured with `rounds` done.
    fn expect(&self, cells: usize, rounds: usize) {
        let stage = (cells as u64).saturating_mul(expected_rounds(rounds));
        let later = self.ahead.saturating_mul(expected_rounds(0));
        let done_before = self.writes.saturating_sub((cells as u64).saturating_mul(rounds as u64));
        self.progress.set_total(done_before.saturating_add(stage).saturating_add(later));
    }

    /// Measures (size, offset) cells in rounds until two consecutive
    /// splits agree (at least MIN_ROUNDS, at most MAX_ROUNDS).
    fn classify(&mut self, cells: &[(u64, u64)]) -> Result<Outcome, ProbeError> {
        let mut samples = vec![Vec::new(); cells.len()];
        let mut previous = None;
        for round in 1..=MAX_ROUNDS {
            self.expect(cells.len(), round - 1);
            self.round(cells, &mut samples)?;
            if round < MIN_ROUNDS {
                continue;
            }
            let medians: Vec<f64> = samples.iter().map(|s| stats::median(s)).collect();
            let fast = stats::split(&medians);
            let stable = previous.as_ref() == Some(&fast);
            if stable || round == MAX_ROUNDS {
                return Ok(outcome(fast, &samples, &medians, stable));
            }
            previous = Some(fast);
        }
        unreachable!("the last round returns")
    }

    /// One write per cell at a random grid slot, in random order.
    fn round(&mut self, cells: &[(u64, u64)], samples: &mut [Vec<f64>]) -> Result<(), ProbeError> {
        let mut requests: Vec<IoRequest> = cells
            .iter()
            .enumerate()
            .map(|(cell, &(size, offset))| {
                let slot = self.rng.below(self.slots.len() as u64) as usize;
                let pos = self.slots.get(slot).copied().unwrap_or(0) + offset;
                IoRequest { cell, pos, size }
            })
            .collect();
        self.rng.shuffle(&mut requests);
        let executed = execute(self.file, &requests, Mode::Write, Engine::Psync, self.progress)?;
        for (req, lat) in requests.iter().zip(executed.latencies) {
            samples[req.cell].push(lat.as_secs_f64() * 1e6);
        }
        self.writes += requests.len() as u64;
        Ok(())
    }
}

fn outcome(
    fast: Option<Vec<bool>>,
    samples: &[Vec<f64>],
    medians: &[f64],
    stable: bool,
) -> Outcome {
    let unstable = if stable { 1.0 } else { 0.5 };
    let Some(mask) = fast else {
        return Outcome {
            fast: None,
            confidence: stats::uniformity(medians) * unstable,
            penalty: 1.0,
        };
    };
    let pick = |want: bool| -> (Vec<f64>, Vec<f64>) {
        let cells = mask.iter().zip(samples).zip(medians).filter(|((&f, _), _)| f == want);
        let (s, m): (Vec<&Vec<f64>>, Vec<f64>) = cells.map(|((_, s), m)| (s, *m)).unzip();
        (s.into_iter().flatten().copied().collect(), m)
    };
    let (fast_samples, fast_medians) = pick(true);
    let (slow_samples, slow_medians) = pick(false);
    Outcome {
        confidence: stats::separation(&fast_samples, &slow_samples) * unstable,
        penalty: stats::median(&slow_medians) / stats::median(&fast_medians),
        fast: Some(mask),
    }
}

fn conclude(
    found: Found,
    logical: u64,
    kernel: Option<KernelView>,
    begin: Instant,
    writes: u64,
) -> ProbeResult {
    let agrees = match (found.penalty, kernel) {
        (None, _) => true,
        (Some(_), Some(k)) => {
            k.physical_sector_size == found.physical
                && k.alignment_offset % found.physical == found.offset
        }
        (Some(_), None) => false,
    };
    ProbeResult {
        physical_sector_size: found.physical,
        alignment_offset: found.offset,
        lowest_aligned_lba: found.offset / logical,
        confidence: (found.confidence * 100.0).round() / 100.0,
        kernel,
        agrees_with_kernel: agrees,
        elapsed_s: begin.elapsed().as_secs_f64(),
        logical_sector_size: logical,
        penalty: found.penalty,
        writes,
    }
}

impl ProbeResult {
    /// One sentence for a human, naming `path`.
    pub fn sentence(&self, path: &Path) -> String {
        let p = path.display();
        let (physical, offset, lba) =
            (self.physical_sector_size, self.alignment_offset, self.lowest_aligned_lba);
        let Some(penalty) = self.penalty else {
            return format!(
                "{p}: no measurable penalty at any offset for writes of {} to {LARGEST} bytes: nothing to align beyond the {}-byte logical sector",
                self.logical_sector_size, self.logical_sector_size
            );
        };
        let at =
            format!("aligned at byte {offset} (LBA {lba}), misaligned writes {penalty:.1}× slower");
        match self.kernel {
            Some(k) if k.physical_sector_size != physical => format!(
                "{p}: reports {}-byte physical sectors but behaves like {physical}, {at}: the kernel is wrong about this drive",
                k.physical_sector_size
            ),
            Some(k) if !self.agrees_with_kernel => format!(
                "{p}: {physical}-byte physical sectors as reported, but {at} where the kernel says byte {}: the kernel is wrong about this drive",
                k.alignment_offset
            ),
            Some(_) => format!("{p}: behaves like {physical}-byte physical sectors {at}, as the kernel reports"),
            None => format!("{p}: behaves like {physical}-byte physical sectors {at}"),
        }
    }
}
