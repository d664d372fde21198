//! Where a run stands, for a progress display on another thread.

use super::plan::Plan;
use super::request::Mode;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

/// What a run is doing, for a progress display.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
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

const PHASES: [Phase; 5] = [Phase::Backup, Phase::Timed, Phase::Locate, Phase::Knee, Phase::Sweep];

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
    pub fn new(total: u64, phase: Phase) -> Progress {
        Progress {
            done: AtomicU64::new(0),
            total: AtomicU64::new(total),
            phase: AtomicU8::new(phase as u8),
        }
    }

    /// For [`run`] of `plan` in `mode`: a write first reads what it will
    /// put back.
    pub fn of(plan: &Plan, mode: Mode) -> Progress {
        let total = plan.cells.iter().map(|c| c.positions.len() as u64).sum();
        Progress::new(total, if mode == Mode::Write { Phase::Backup } else { Phase::Timed })
    }

    /// Requests finished, and requests planned (probe's plan grows as its
    /// stages find what they need).
    pub fn counts(&self) -> (u64, u64) {
        (self.done.load(Relaxed), self.total.load(Relaxed))
    }

    pub fn phase(&self) -> Phase {
        PHASES[usize::from(self.phase.load(Relaxed)).min(PHASES.len() - 1)]
    }

    pub(crate) fn set_total(&self, total: u64) {
        self.total.store(total, Relaxed);
    }

    pub(crate) fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Relaxed);
    }

    /// A backup starts: the timed phase pauses (probe's stages stay shown).
    pub(crate) fn start_backup(&self) {
        if self.phase.load(Relaxed) == Phase::Timed as u8 {
            self.set_phase(Phase::Backup);
        }
    }

    /// A request finished: any backup before it is over.
    pub(crate) fn finish_one(&self) {
        if self.phase.load(Relaxed) == Phase::Backup as u8 {
            self.set_phase(Phase::Timed);
        }
        self.done.fetch_add(1, Relaxed);
    }
}
