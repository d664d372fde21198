//! Where a journaled move stands, as `--status` reports it.

use crate::realign::journal::{Journal, Phase};
use crate::realign::undo;
use crate::units::human_size;
use serde::Serialize;
use std::path::PathBuf;

/// Where a journaled move stands.
#[derive(Clone, Debug, Serialize)]
pub struct Status {
    pub journal: PathBuf,
    pub target: PathBuf,
    pub partition: u32,
    pub old_start: u64,
    pub new_start: u64,
    pub phase: Phase,
    pub chunks_done: u64,
    pub chunks: u64,
    pub bytes: u64,
    pub finished: bool,
    /// An undo under way: chunks moved back, of how many.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub undoing: Option<[u64; 2]>,
}

impl Status {
    pub fn of(j: &Journal) -> Status {
        let m = &j.record;
        Status {
            journal: j.path().to_path_buf(),
            target: m.target.clone(),
            partition: m.partition,
            old_start: m.old_start,
            new_start: m.new_start,
            phase: j.state.phase,
            chunks_done: j.state.cursor,
            chunks: m.chunks(),
            bytes: m.bytes(),
            finished: j.state.phase.finished(),
            undoing: Journal::open(&undo::path(j.path()))
                .ok()
                .filter(|_| !j.state.phase.finished())
                .map(|u| [u.state.cursor, u.record.chunks()]),
        }
    }

    /// Where the move stands, in words.
    pub fn describe(&self) -> String {
        let stage = match self.phase {
            Phase::Copying => {
                format!("copying: {} of {} chunks moved", self.chunks_done, self.chunks)
            }
            Phase::Verified => "copied and verified; the new table is not written yet".into(),
            Phase::TableWritten => "table written; the kernel has not been told yet".into(),
            Phase::Done => "finished".into(),
            Phase::Undone => format!("undone: the partition is back at LBA {}", self.old_start),
        };
        let stage = match self.undoing {
            Some([done, of]) => format!("{stage}; being undone: {done} of {of} chunks moved back"),
            None => stage,
        };
        format!(
            "{}: partition {} of {} from LBA {} to {} ({}): {stage}\n",
            self.journal.display(),
            self.partition,
            self.target.display(),
            self.old_start,
            self.new_start,
            human_size(self.bytes)
        )
    }
}
