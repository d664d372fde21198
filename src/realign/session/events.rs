//! What a run tells its caller: progress and stops through [`Events`], how
//! it ended ([`Outcome`]), and a finished move ([`Done`], [`Rescued`]).

use super::error::Stop;
use super::status::Status;
use crate::realign::journal::{JournalError, Phase};
use crate::realign::{scan, Move};
use crate::units::human_size;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// How a run reports progress and is asked to stop; every method may do
/// nothing.
pub trait Events {
    fn resumed(&mut self, _m: &Move, _phase: Phase, _chunks_done: u64) {}
    /// A move starts: `total` bytes will be copied and verified.
    fn started(&mut self, _total: u64) {}
    fn progress(&mut self, _bytes: u64) {}
    fn stopped(&mut self) {}
    /// Polled between chunks.
    fn stop_requested(&self) -> bool {
        false
    }
    fn note(&mut self, _text: &str) {}
    /// A finished move's journal could not be scrubbed (`why`): it may
    /// still hold the partition's bytes it saved.
    fn unscrubbed(&mut self, journal: &Path, why: &JournalError) {
        let at = journal.display();
        self.note(&format!(
            "warning: {why}: the finished journal {at} may still hold the bytes it saved"
        ));
    }
    fn finished(&mut self, _done: &Done) {}
    /// A move was undone: the partition is back where it started.
    fn undone(&mut self, _status: &Status) {}
}

/// A finished move.
#[derive(Clone, Debug, Serialize)]
pub struct Done {
    pub target: PathBuf,
    pub partition: u32,
    pub old_start: u64,
    pub new_start: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub contents: Option<String>,
    pub journal: PathBuf,
    pub verified: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rescued: Option<Rescued>,
    /// What stays misaligned inside the partition after the move.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

impl Done {
    /// The result in words, warnings included.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "{}: moved partition {} from LBA {} to {} ({} in {:.1} s), verified, table written\n",
            self.target.display(),
            self.partition,
            self.old_start,
            self.new_start,
            human_size(self.bytes),
            self.seconds
        );
        if let Some(r) = &self.rescued {
            text += &r.describe();
        }
        for w in &self.warnings {
            text += &format!("  warning: {w}\n");
        }
        text
    }
}

/// What `--rescue` wrote as zeros.
#[derive(Clone, Debug, Serialize)]
pub struct Rescued {
    /// The GNU ddrescue mapfile listing them (byte positions on the disk,
    /// at the partition's old place).
    pub map: PathBuf,
    /// First and last LBA of each range, at the partition's old place.
    pub zero_filled: Vec<[u64; 2]>,
    /// What they held, where a peer tool could say.
    pub holders: Option<String>,
    /// Reads of each after the first.
    pub retries: u32,
    /// Time spent reading around them in the last run.
    pub seconds: f64,
}

impl Rescued {
    fn describe(&self) -> String {
        if self.zero_filled.is_empty() {
            return format!(
                "  rescue: every sector was read; nothing was written as zeros (map: {})\n",
                self.map.display()
            );
        }
        let ranges: Vec<std::ops::Range<u64>> =
            self.zero_filled.iter().map(|[a, b]| *a..b + 1).collect();
        format!(
            "  rescue: {} stayed unreadable after {} retries each and {} written as zeros at \
             the new place{} ({:.1} s spent on them); map: {} (GNU ddrescue format)\n",
            scan::describe(&ranges),
            self.retries,
            if ranges.iter().map(|r| r.end - r.start).sum::<u64>() == 1 { "was" } else { "were" },
            self.holders.as_ref().map(|h| format!("; {h}")).unwrap_or_default(),
            self.seconds,
            self.map.display()
        )
    }
}

/// How a run that did not fail ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Finished,
    /// [`Events::stop_requested`] stopped it; the state it left.
    Stopped(Stop),
}
