//! `blkalign realign`: move misaligned partitions to aligned starts in
//! place. A dry run unless --yes; rerun after any interruption to finish.

mod args;
mod atboot;
mod words;

pub use args::Args;
use args::{open_session, options};

use super::{EXIT_ERROR, EXIT_OK, EXIT_PROBLEM};
use anyhow::{bail, Context};
use blkalign::device::SysRoot;
use blkalign::realign::journal::{Journal, JournalError, Phase};
use blkalign::realign::session::{
    Done, Events, MoveOptions, Outcome, PlannedMove, Session, Status, Stop,
};
use blkalign::realign::state::Store;
use blkalign::realign::{undo, Move};
use blkalign::units::human_size;
use indicatif::ProgressBar;
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

pub fn run(args: Args, root: SysRoot) -> anyhow::Result<u8> {
    realign(args, root).map_err(words::in_words)
}

fn realign(args: Args, root: SysRoot) -> anyhow::Result<u8> {
    if let Some(plan) = &args.at_boot_run {
        return atboot::run_in_initramfs(plan, &args, root);
    }
    if args.at_boot {
        return match (&args.target, args.cancel, args.finish) {
            (_, true, _) => atboot::cancel(&args, root),
            (_, _, true) => atboot::finish(&args, root),
            (Some(path), _, _) => atboot::schedule(&args, root, path),
            (None, _, _) => atboot::status(&args),
        };
    }
    if let Some(journal) = &args.status {
        return status(journal, args.json);
    }
    if args.to.is_some() && args.partitions.len() != 1 {
        bail!("--to needs exactly one partition number");
    }
    if args.clean {
        return clean(&args, root);
    }
    let path = args.target.as_deref().context("name the disk or image")?;
    if args.yes {
        catch_interrupts();
    }
    let session = open_session(root, path, &args)?;
    if args.yes {
        atboot::check_not_scheduled(&session, &args)?;
    }
    let mut events = Terminal::new(args.json);
    let mut resumed = None;
    if args.undo {
        return undo(&session, path, &args, &mut events);
    }
    if let Some(journal) = session.unfinished(args.journal.as_deref())? {
        let n = journal.record.partition;
        if !args.partitions.is_empty() && !args.partitions.contains(&n) {
            bail!(
                "partition {n} of {} has an unfinished move (journal {}): finish it first with \
                 `{}`",
                path.display(),
                journal.path().display(),
                words::finish_command(path, n)
            );
        }
        if !args.yes {
            print_status(&journal, args.json)?;
            session.check_unused(&[n])?;
            let rescuing = if args.rescue {
                " (sectors that stay unreadable are written as zeros)"
            } else {
                ""
            };
            eprintln!("dry run: rerun with --yes to finish this move{rescuing}");
            return Ok(EXIT_OK);
        }
        if let Outcome::Stopped(why) = session.finish(journal, args.rescue, &mut events)? {
            return stopped(&why);
        }
        std::mem::replace(&mut events.result, Ok(()))?;
        resumed = Some(n);
    }
    // The resumed partition is moved now; naming it asked for nothing more.
    let asked: Vec<u32> = args.partitions.iter().copied().filter(|&p| Some(p) != resumed).collect();
    let wanted = match (asked.is_empty(), args.partitions.is_empty()) {
        (true, false) => Vec::new(),
        _ => session.wanted(&asked)?,
    };
    if args.partitions.is_empty() {
        for n in session.compensated()? {
            eprintln!(
                "partition {n} stays: its start is off a physical boundary, but what it holds \
                 puts its data on one, and a move would misalign that (name it and add \
                 --misalign-layers to move it anyway)"
            );
        }
    }
    if wanted.is_empty() {
        if resumed.is_none() {
            if args.json {
                print_plan(path, !args.yes, &[], true)?;
            }
            eprintln!("nothing to move: no partition's data is off a physical sector boundary");
        }
        return Ok(EXIT_OK);
    }
    let opts = options(&args)?;
    if !args.yes {
        return dry_run(&session, &opts, &wanted, args.json);
    }
    let outcome = session.move_all(&opts, &wanted, &mut events)?;
    events.result?;
    match outcome {
        Outcome::Stopped(why) => stopped(&why),
        Outcome::Finished => Ok(EXIT_OK),
    }
}

/// `--undo`: the unfinished move on `path`, put back.
fn undo(session: &Session, path: &Path, args: &Args, events: &mut Terminal) -> anyhow::Result<u8> {
    let Some(journal) = session.unfinished(args.journal.as_deref())? else {
        return undone_already(session, path, args, events);
    };
    let n = journal.record.partition;
    if !args.partitions.is_empty() && args.partitions != [n] {
        bail!(
            "the unfinished move on {} is partition {n}'s: only it can be undone",
            path.display()
        );
    }
    if !args.yes {
        print_status(&journal, args.json)?;
        session.check_unused(&[n])?;
        let reversed = undo::reverse(&journal)?;
        let bytes = reversed.as_ref().map_or(0, Move::bytes);
        eprintln!(
            "dry run: --undo --yes moves the {} already moved back to where partition {n} \
             started (LBA {}), journaled and verified like the move; the table is left as it \
             was",
            human_size(bytes),
            journal.record.old_start
        );
        return Ok(EXIT_OK);
    }
    let outcome = session.undo(journal, events)?;
    std::mem::replace(&mut events.result, Ok(()))?;
    match outcome {
        Outcome::Stopped(why) => stopped(&why),
        Outcome::Finished => Ok(EXIT_OK),
    }
}

/// `--undo` with no move unfinished: all is well when the last move on the
/// disk was undone (a rerun after the undo finished, or crashed at its very
/// end, which the rerun then finishes forgetting).
fn undone_already(
    session: &Session,
    path: &Path,
    args: &Args,
    events: &mut Terminal,
) -> anyhow::Result<u8> {
    let wanted =
        |j: &Journal| args.partitions.is_empty() || args.partitions == [j.record.partition];
    let Some(journal) = session.last_undone(args.journal.as_deref()).filter(wanted) else {
        bail!("there is no unfinished move on {} to undo", path.display());
    };
    eprintln!(
        "nothing to undo: the move of partition {} was undone already (journal {})",
        journal.record.partition,
        journal.path().display()
    );
    if !args.yes {
        print_status(&journal, args.json)?;
        return Ok(EXIT_OK);
    }
    session.undo(journal, events)?;
    std::mem::replace(&mut events.result, Ok(()))?;
    Ok(EXIT_OK)
}

fn dry_run(
    session: &Session,
    opts: &MoveOptions,
    wanted: &[u32],
    json: bool,
) -> anyhow::Result<u8> {
    let report = session.plan(opts, wanted)?;
    print_plan(&session.target().path, true, &report, json)?;
    if report.iter().any(|m| m.refused.is_some()) {
        eprintln!("refused: nothing written");
        return Ok(EXIT_ERROR);
    }
    session.preflight(opts, wanted)?;
    eprintln!("dry run: nothing written; add --yes to move");
    Ok(EXIT_OK)
}

/// A move a signal stopped: what state it is in, and the signal's exit code.
fn stopped(why: &Stop) -> anyhow::Result<u8> {
    eprintln!("{}", words::stop(why));
    Ok(interrupted().unwrap_or(EXIT_ERROR))
}

/// Progress on the terminal, results on stdout as each move finishes.
struct Terminal {
    json: bool,
    bar: ProgressBar,
    /// The first failure to print a result: reported once the move is safe.
    result: anyhow::Result<()>,
}

impl Terminal {
    fn new(json: bool) -> Terminal {
        Terminal { json, bar: ProgressBar::hidden(), result: Ok(()) }
    }
}

impl Events for Terminal {
    fn resumed(&mut self, m: &Move, phase: Phase, chunks_done: u64) {
        let n = m.partition;
        match phase {
            Phase::Copying => eprintln!(
                "resuming the copy of partition {n} at {chunks_done} of {} chunks",
                m.chunks()
            ),
            Phase::Verified => eprintln!(
                "resuming the move of partition {n}: copied and verified; writing the new table"
            ),
            Phase::TableWritten => eprintln!(
                "resuming the move of partition {n}: the new table is written; telling the kernel"
            ),
            Phase::Done | Phase::Undone => {
                eprintln!("finishing the move of partition {n}: nothing is left to do")
            }
        }
    }

    fn started(&mut self, total: u64) {
        self.bar = progress(total);
    }

    fn progress(&mut self, bytes: u64) {
        self.bar.inc(bytes);
    }

    fn stopped(&mut self) {
        self.bar.finish_and_clear();
    }

    fn stop_requested(&self) -> bool {
        interrupted().is_some()
    }

    fn note(&mut self, text: &str) {
        eprintln!("{text}");
    }

    fn unscrubbed(&mut self, journal: &Path, why: &JournalError) {
        eprintln!(
            "warning: {why}: the finished journal {} may still hold the bytes it saved; \
             `blkalign realign --clean --yes` deletes it",
            journal.display()
        );
    }

    fn finished(&mut self, done: &Done) {
        if self.result.is_ok() {
            self.result = print_done(done, self.json);
        }
    }

    fn undone(&mut self, status: &Status) {
        if self.result.is_ok() {
            self.result = if self.json {
                super::emit_json(status)
            } else {
                super::emit(&status.describe()).map_err(Into::into)
            };
        }
    }
}

fn print_done(done: &Done, json: bool) -> anyhow::Result<()> {
    if json {
        super::emit_json(done)?;
        // The schema has no place for them; stderr is not the document.
        for w in &done.warnings {
            eprintln!("warning: {w}");
        }
        return Ok(());
    }
    Ok(super::emit(&done.describe())?)
}

/// The signal that asked a move to stop, 0 for none.
static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop_signal(signal: libc::c_int) {
    STOP_SIGNAL.store(signal, Ordering::Relaxed);
}

/// Turn SIGINT and SIGTERM into a request the copy loop honours between
/// chunks: a kill is safe too, but then the user is told nothing.
fn catch_interrupts() {
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe);
        // glibc's signal() restarts interrupted system calls.
        unsafe {
            libc::signal(signal, on_stop_signal as extern "C" fn(libc::c_int) as libc::sighandler_t)
        };
    }
}

/// The exit code a caught signal asks for (128 + its number, the shell's
/// convention: 130 for SIGINT), if one was caught.
fn interrupted() -> Option<u8> {
    let signal = STOP_SIGNAL.load(Ordering::Relaxed);
    (signal != 0).then(|| u8::try_from(128 + signal).unwrap_or(EXIT_ERROR))
}

/// Delete (with --yes) or list the journals of finished moves.
fn clean(args: &Args, root: SysRoot) -> anyhow::Result<u8> {
    let store = Store::default();
    let journals = match &args.target {
        Some(target) => open_session(root, target, args)?.journals(args.journal.as_deref()),
        None => store.journals(args.journal.clone()),
    };
    let mut found = 0;
    for j in journals {
        let (m, path) = (&j.record, j.path().to_path_buf());
        let what = format!(
            "partition {} of {}, LBA {} -> {}",
            m.partition,
            m.target.display(),
            m.old_start,
            m.new_start
        );
        if !j.state.phase.finished() {
            eprintln!(
                "kept {}: its move ({what}) is unfinished: finish it with `{}`",
                path.display(),
                words::finish_command(&m.target, m.partition)
            );
            continue;
        }
        found += 1;
        drop(j);
        if !args.yes {
            super::emit(&format!("would remove {} ({what}, finished)\n", path.display()))?;
        } else if store.remove_finished(&path)?.is_some() {
            super::emit(&format!("removed {} ({what}, finished)\n", path.display()))?;
        }
    }
    if found == 0 {
        eprintln!("no journals of finished moves");
    } else if !args.yes {
        eprintln!("dry run: nothing removed; add --yes to remove them");
    }
    Ok(EXIT_OK)
}

fn progress(total: u64) -> ProgressBar {
    let template = "{bar:40} {bytes}/{total_bytes} copied and verified, {bytes_per_sec}, ETA {eta}";
    super::output::bar(total, template)
}

#[derive(Serialize)]
struct PlanOutput<'a> {
    target: &'a Path,
    dry_run: bool,
    moves: &'a [PlannedMove],
}

fn print_plan(
    target: &Path,
    dry_run: bool,
    moves: &[PlannedMove],
    json: bool,
) -> anyhow::Result<()> {
    if json {
        return super::emit_json(&PlanOutput { target, dry_run, moves });
    }
    Ok(super::emit(&moves.iter().map(|m| m.describe(target)).collect::<String>())?)
}

fn status(path: &Path, json: bool) -> anyhow::Result<u8> {
    let journal = Journal::open(path)?;
    print_status(&journal, json)?;
    Ok(if journal.state.phase.finished() { EXIT_OK } else { EXIT_PROBLEM })
}

fn print_status(j: &Journal, json: bool) -> anyhow::Result<()> {
    let s = Status::of(j);
    if json {
        return super::emit_json(&s);
    }
    Ok(super::emit(&s.describe())?)
}
