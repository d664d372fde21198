//! Where a run stands, for a progress display on another thread.

use super::plan::IoPlan;
use super::request::Mode;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

/// What a run is doing, for a progress display.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchPhase {
    /// Reading what the writes will put back: untimed.
    Backup,
    /// Timed requests.
    Timed,
    /// probe's stages: where writes are fast, the smallest fast size, and
    /// the fast offset at that size.
    Locate,
    Knee,
    Sweep,
}

const PHASES: [BenchPhase; 5] = [
    BenchPhase::Backup,
    BenchPhase::Timed,
    BenchPhase::Locate,
    BenchPhase::Knee,
    BenchPhase::Sweep,
];

/// Where a run stands, read by a progress display on another thread while
/// the run goes on. Atomics only: counting must cost a request nothing
/// measurable.
#[derive(Debug)]
pub struct Progress {
    done: AtomicU64,
    total: AtomicU64,
    phase: AtomicU8,
}

impl Progress {
    pub fn new(total: u64, phase: BenchPhase) -> Progress {
        Progress {
            done: AtomicU64::new(0),
            total: AtomicU64::new(total),
            phase: AtomicU8::new(phase as u8),
        }
    }

    /// For [`run`] of `plan` in `mode`: a write first reads what it will
    /// put back.
    pub fn of(plan: &IoPlan, mode: Mode) -> Progress {
        let total = plan.cells.iter().map(|c| c.positions.len() as u64).sum();
        Progress::new(
            total,
            if mode == Mode::Write { BenchPhase::Backup } else { BenchPhase::Timed },
        )
    }

    /// Requests finished, and requests planned (probe's plan grows as its
    /// stages find what they need).
    pub fn counts(&self) -> (u64, u64) {
        (self.done.load(Relaxed), self.total.load(Relaxed))
    }

    pub fn phase(&self) -> BenchPhase {
        PHASES[usize::from(self.phase.load(Relaxed)).min(PHASES.len() - 1)]
    }

    pub(crate) fn set_total(&self, total: u64) {
        self.total.store(total, Relaxed);
    }

    pub(crate) fn set_phase(&self, phase: BenchPhase) {
        self.phase.store(phase as u8, Relaxed);
    }

    /// A backup starts: the timed phase pauses (probe's stages stay shown).
    pub(crate) fn start_backup(&self) {
        if self.phase.load(Relaxed) == BenchPhase::Timed as u8 {
            self.set_phase(BenchPhase::Backup);
        }
    }

    /// A request finished: any backup before it is over.
    pub(crate) fn finish_one(&self) {
        if self.phase.load(Relaxed) == BenchPhase::Backup as u8 {
            self.set_phase(BenchPhase::Timed);
        }
        self.done.fetch_add(1, Relaxed);
    }
}
