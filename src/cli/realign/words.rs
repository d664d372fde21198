//! What a stopped or failed move says next: the commands that lead on,
//! said the same way wherever a move is left unfinished. The library
//! returns the data (`Stop`, `WayOn`, `MoveRefusal::BeingUndone`); the
//! sentences with `blkalign` commands in them are the CLI's, here.

use blkalign::realign::session::{MoveRefusal, SessionError, Stop, WayOn};
use blkalign::units::human_size;
use std::path::Path;

/// The command that finishes the unfinished move of `partition` on
/// `target`.
pub(super) fn finish_command(target: &Path, partition: u32) -> String {
    format!("blkalign realign {} {partition} --yes", target.display())
}

/// What a stop left, and how to go on.
pub(super) fn stop(stop: &Stop) -> String {
    match stop {
        Stop::Untouched { .. } => format!("{stop}; rerun the same command to move it"),
        Stop::Moving { target, partition, .. } => {
            format!("{stop}\nFinish with: {}", finish_command(target, *partition))
        }
        Stop::Undoing { target, partition, .. } => {
            format!("{stop}; finish it with `{} --undo`", finish_command(target, *partition))
        }
    }
}

fn way_on(way: &WayOn) -> String {
    match way {
        WayOn::Unreadable { target, partition, moved, retries } => {
            let finish = finish_command(target, *partition);
            format!(
                "A sector that cannot be read stays so; two ways end in a usable partition:\n  \
                 {finish} --undo    moves the {} already moved back: the partition exactly as \
                 before the move\n  {finish} --rescue  finishes the move, reading each \
                 unreadable sector {retries} more times and writing zeros where it still fails \
                 (listed in a GNU ddrescue map beside the journal, with the files they hit)",
                human_size(*moved),
            )
        }
        WayOn::Rerun { target, partition } => format!(
            "Once the cause is fixed, rerun the same command to finish it (a drive remaps a \
             sector that failed a write when it is written again), or put the partition back as \
             it was with `{} --undo`",
            finish_command(target, *partition)
        ),
        WayOn::FinishUndo { target, partition } => format!(
            "Once the cause is fixed, finish the undo with `{} --undo`",
            finish_command(target, *partition)
        ),
    }
}

/// `err` with the way on, when it has one to say.
pub(super) fn session_error(err: &SessionError) -> Option<String> {
    match err {
        SessionError::Move { way_on: way, .. } => Some(format!("{err} {}", way_on(way))),
        SessionError::Refused(MoveRefusal::BeingUndone { target, partition, .. }) => Some(format!(
            "{err}: finish the undo with `{} --undo`",
            finish_command(target, *partition)
        )),
        SessionError::Refused(MoveRefusal::Stopped(s)) => Some(stop(s)),
        SessionError::Refused(MoveRefusal::PartitionNamed { number, disk, .. }) => {
            Some(format!("{err} (`blkalign realign /dev/{disk} {number}`)"))
        }
        _ => None,
    }
}

/// [`session_error`] over an error of the CLI: its words in front, the
/// error itself kept underneath (its causes, its type for a downcast).
pub(super) fn in_words(err: anyhow::Error) -> anyhow::Error {
    let words = err.downcast_ref::<SessionError>().and_then(session_error);
    match words {
        Some(words) => err.context(words),
        None => err,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_named_for_its_disk_gets_the_command_that_names_the_disk() {
        let refusal =
            MoveRefusal::PartitionNamed { path: "/dev/sdb2".into(), number: 2, disk: "sdb".into() };
        let words = session_error(&SessionError::Refused(refusal)).unwrap();
        assert_eq!(
            words,
            "/dev/sdb2 is partition 2 of /dev/sdb: name its disk instead \
             (`blkalign realign /dev/sdb 2`)"
        );
    }
}
