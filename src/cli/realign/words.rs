//! What a stopped or failed move says next: the commands that lead on,
//! said the same way wherever a move is left unfinished. The library
//! returns the data (`Stop`, `WayOn`, `MoveRefusal::BeingUndone`); the
//! sentences with `blkalign` commands in them are the CLI's, here.

use blkalign::realign::copy::MoveError;
use blkalign::realign::session::{GoneDisk, MoveRefusal, SessionError, Stop, WayOn};
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
        WayOn::Vanished(gone) => {
            let GoneDisk { target, partition, identity, undoing } = &**gone;
            let known: Vec<String> = [
                Some(format!("size {} bytes", identity.size_bytes)),
                identity.serial.as_ref().map(|s| format!("serial {s}")),
                identity.wwid.as_ref().map(|w| format!("WWN {w}")),
            ]
            .into_iter()
            .flatten()
            .collect();
            let (finish, other) = match undoing {
                true => ("--undo --yes", "finishes the undo"),
                false => ("--yes", "finishes the move; `--undo --yes` puts the partition back"),
            };
            format!(
                "{} is gone (unplugged, or dropped by its controller); the move is journaled \
                 where it stopped. Once the disk is back, under whatever name, `blkalign realign \
                 DISK {partition} {finish}` (DISK: its node then) {other}. The journal knows \
                 the disk by its {}, not by its name",
                target.display(),
                known.join(", ")
            )
        }
    }
}

/// `err` with the way on, when it has one to say.
pub(super) fn session_error(err: &SessionError) -> Option<String> {
    match err {
        SessionError::Move {
            source: MoveError::Journal(_),
            way_on: WayOn::Rerun { target, partition },
            ..
        } => Some(format!(
            "{err} It cannot take writes now, so the move stopped before writing the disk \
                 again. Once its file system does (room freed, or checked with fsck and \
                 mounted read-write), rerun the same command to finish the move, or put the \
                 partition back as it was with `{} --undo`",
            finish_command(target, *partition)
        )),
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
    use blkalign::device::Identity;

    #[test]
    fn a_vanished_disk_is_found_again_by_what_it_is() {
        let identity =
            Identity { size_bytes: 1 << 30, serial: Some("S1".into()), wwid: Some("naa.5".into()) };
        let gone = GoneDisk { target: "/dev/sdb".into(), partition: 1, identity, undoing: false };
        let way = WayOn::Vanished(Box::new(gone));
        let words = way_on(&way);
        assert!(words.starts_with("/dev/sdb is gone"), "{words}");
        assert!(words.contains("`blkalign realign DISK 1 --yes`"), "{words}");
        assert!(words.contains("size 1073741824 bytes, serial S1, WWN naa.5"), "{words}");
    }

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
