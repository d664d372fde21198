//! One realign run as a library call: open a target, say what would move
//! ([`Session::plan`]), move ([`Session::move_all`]), finish or report an
//! unfinished move. The CLI parses arguments and prints; every crash-critical
//! ordering is here, where unit tests reach it on an in-memory disk.
//!
//! The orderings: a move's state record is written before its journal
//! ([`Session::create_journal`]); finishing runs copy → verify → table →
//! tell the kernel → commit Done → remove the record ([`Session::finish`]).

use super::copy::{self, MoveError};
use super::disk::Disk;
use super::journal::{Journal, JournalError, Phase};
use super::layers::{self, LayerShift};
use super::place::{self, PlaceError, Placement, Request};
use super::prepare::{prepare, PrepareError, Prepared};
use super::rescue::{self, Map};
use super::scan::{self, Scan};
use super::state::{self, Store};
use super::undo::{self, BeginError};
use super::{guard, Direction, Identity, Move};
use crate::align::{Class, Geometry};
use crate::device::exclusive::{self, ExclusiveError};
use crate::device::kernel::{self, KernelPart, PartTable};
use crate::device::vmimage::{Access, Export, Format};
use crate::device::{self, DeviceError, Overrides, SysRoot, Target, TargetKind, Topology};
use crate::io::ReadAt;
use crate::open::Opened;
use crate::plan::Align;
use crate::table::{self, Layout, PartKind, Partition, TableError};
use crate::units::human_size;
use serde::Serialize;
use std::cell::{Cell, RefCell};
use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    InUse(#[from] ExclusiveError),
    #[error("reading {path}: {source}")]
    Table { path: PathBuf, source: TableError },
    /// Refused before anything was written.
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Guard(#[from] guard::GuardError),
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Prepare(#[from] PrepareError),
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("{source}\nthe move stopped; the journal {} is intact. {way_on}", journal.display())]
    Move { source: MoveError, journal: PathBuf, way_on: String },
    /// The read check found sectors the move could not read: nothing was
    /// written and no move is left unfinished.
    #[error(
        "partition {partition}: {} cannot be read{}: the move was refused before anything was \
         written, and nothing is left to finish. Copy off what can be read first (GNU ddrescue \
         reads around bad sectors); --no-read-check moves it anyway, stopping half-way at the \
         first of them",
        scan::describe(bad), holders.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
    )]
    Unreadable { partition: u32, bad: Vec<Range<u64>>, holders: Option<String> },
}

/// Why a move was refused before anything was written, for a caller to
/// match.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("{} is partition {number}: name its disk instead (`blkalign realign /dev/{disk} {number}`)", path.display())]
    PartitionNamed { path: PathBuf, number: u32, disk: String },
    #[error(
        "the journal {} records a move on another disk (size, serial or table differ): refusing \
         to apply it to {}",
        journal.display(),
        target.display()
    )]
    OtherDisk { journal: PathBuf, target: PathBuf },
    #[error("there is no partition {number} on {}", disk.display())]
    NoSuchPartition { number: u32, disk: PathBuf },
    /// `why` adds what would make room (a shrink) to `error`.
    #[error("{why}")]
    Unplaceable { error: PlaceError, why: String },
    #[error("partition {0} vanished")]
    Vanished(u32),
    #[error("{} holds another unfinished move: finish it or pass another --journal", .0.display())]
    JournalTaken(PathBuf),
    #[error(
        "the move of partition {partition} is being undone (journal {}): finish the undo with \
         `{finish} --undo`",
        journal.display()
    )]
    BeingUndone { partition: u32, journal: PathBuf, finish: String },
    #[error(transparent)]
    Undo(#[from] undo::UndoError),
    /// The device cannot be opened O_DIRECT (and exclusively, a block
    /// device): a move must not go through a cache, nor beside another user.
    #[error(transparent)]
    OpenDirect(crate::bench::BenchError),
    /// At boot, where nothing asks a move to stop, it stopped.
    #[error("{0}")]
    Stopped(String),
}

fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SessionError {
    let what = what.into();
    move |source| SessionError::Io { what, source }
}

/// What a move needs from the world beyond the bytes it reads: the in-use
/// check, a writer and the kernel. [`Device`] is the real one; tests inject
/// failures through their own.
pub trait Host {
    /// Refuse a target that is mounted, held, attached or locked, naming
    /// the partitions in `asked` first where they are the ones in use.
    fn check_unused(&self, asked: &[u32]) -> Result<(), SessionError>;
    /// Refuse a journal where a crash of the target would take it along
    /// (for the move of the partitions `moved`).
    fn check_journal(&self, journal: &Path, moved: &[u32]) -> Result<(), SessionError>;
    /// The target opened for the move's writes.
    fn writer(&self) -> Result<Box<dyn Writer>, SessionError>;
    /// Bytes per second reading the target at `offset`: the estimate's basis.
    fn read_rate(&self, offset: u64, bytes: u64) -> Option<f64>;
    /// The target for reading what is on it, not in a cache (O_DIRECT).
    fn direct_reader(&self) -> Result<Box<dyn ReadAt>, SessionError>;
}

/// The target as the copy writes it, and the kernel's view of it.
pub trait Writer: Disk {
    /// Make the kernel's partition match the moved one; a warning when it
    /// cannot (the table on the disk is already right).
    fn tell_kernel(&self, m: &Move) -> Option<String>;
}

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
    fn finished(&mut self, _done: &Done) {}
    /// A move was undone: the partition is back where it started.
    fn undone(&mut self, _status: &Status) {}
}

/// What a partition's move would do, or why it cannot be made.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Planned {
    pub partition: u32,
    pub contents: Option<String>,
    pub old_start: Option<u64>,
    pub new_start: Option<u64>,
    pub sectors: Option<u64>,
    pub direction: Option<Direction>,
    pub bytes: u64,
    pub shift_bytes: u64,
    /// Each chunk passes through the journal (the shift is under a chunk).
    pub journaled: bool,
    /// First and last free LBA the partition may use.
    pub room: Option<[u64; 2]>,
    pub journal: Option<PathBuf>,
    pub read_rate_bytes_per_second: Option<f64>,
    pub estimated_seconds: Option<f64>,
    pub notes: Vec<String>,
    /// Each layer inside, judged where it is and where the move puts it.
    pub layers: Vec<LayerShift>,
    /// Why this partition cannot be moved.
    pub refused: Option<String>,
}

impl Planned {
    /// The plan for this partition in words, as `realign` prints it.
    pub fn describe(&self, target: &Path) -> String {
        let mut text = String::new();
        let head = format!("{}: partition {}", target.display(), self.partition);
        if let Some(why) = &self.refused {
            // A placement's refusal already names the partition.
            let own = format!("partition {} cannot be moved: ", self.partition);
            text += &format!("{head}: cannot move: {}\n", why.strip_prefix(&own).unwrap_or(why));
            return text;
        }
        if self.direction.is_none() {
            text += &format!("{head}: {}\n", self.notes.join("; "));
            return text;
        }
        let (Some(old_start), Some(new_start), Some(sectors)) =
            (self.old_start, self.new_start, self.sectors)
        else {
            return text;
        };
        let contents = self.contents.as_deref().unwrap_or("contents not recognised");
        let shift = new_start.abs_diff(old_start);
        let direction = if new_start > old_start { "right" } else { "left" };
        text += &format!(
            "{head} ({contents}, {}): LBA {} -> {} ({direction} by {shift} sector{})\n",
            human_size(self.bytes),
            old_start,
            new_start,
            if shift == 1 { "" } else { "s" }
        );
        if let Some([first, last]) = self.room {
            text += &format!(
                "  room: LBA {first}-{last} is free for it; it needs LBA {}-{}\n",
                new_start,
                new_start.saturating_add(sectors).saturating_sub(1)
            );
        }
        text += if self.journaled {
            "  the shift is smaller than a chunk: each chunk is saved in the journal before it is written\n"
        } else {
            "  the shift is at least a chunk: chunks go straight to their destination\n"
        };
        if let Some(j) = &self.journal {
            text += &format!("  journal: {}\n", j.display());
        }
        if let (Some(secs), Some(rate)) = (self.estimated_seconds, self.read_rate_bytes_per_second)
        {
            text += &format!(
                "  estimated {secs:.1} s (the partition reads at {}/s here)\n",
                human_size(rate as u64)
            );
        }
        for note in &self.notes {
            text += &format!("  note: {note}\n");
        }
        text
    }
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
    /// [`Events::stop_requested`] stopped it; what state it left, in words.
    Stopped(String),
}

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

/// What to move and how.
#[derive(Clone, Debug)]
pub struct Options {
    /// An explicit destination LBA (one partition only).
    pub to: Option<u64>,
    pub align: Align,
    /// Overwrite non-zero gap bytes, or move what a boot loader records.
    pub force: bool,
    /// Move even when a layer inside that is aligned today would not be.
    pub misalign_layers: bool,
    /// Read every sector the move will read before writing any.
    pub read_check: bool,
    /// Write zeros for sectors that stay unreadable, listing them in a map.
    pub rescue: bool,
    /// The journal to use instead of the default place.
    pub journal: Option<PathBuf>,
}

/// The safe defaults: the optimal grain, nothing forced, the read check.
impl Default for Options {
    fn default() -> Options {
        Options {
            to: None,
            align: Align::Optimal,
            force: false,
            misalign_layers: false,
            read_check: true,
            rescue: false,
            journal: None,
        }
    }
}

/// A target opened for moving its partitions.
pub struct Session {
    target: Target,
    topology: Topology,
    geometry: Geometry,
    identity: Identity,
    /// Read-only, for tables and checks.
    reader: Box<dyn ReadAt>,
    host: Box<dyn Host>,
    store: Store,
    /// A VM image's format, and the export its guest disk is moved
    /// through (last: it goes once the reader has).
    image: Option<(&'static str, Export)>,
}

impl Session {
    /// Open the disk or image at `path` (not a partition of it).
    pub fn open(
        root: SysRoot,
        path: &Path,
        overrides: &Overrides,
        trust_kernel: bool,
    ) -> Result<Session, SessionError> {
        let opened = match crate::open::open(&root, path, overrides, trust_kernel) {
            Err(DeviceError::VmImage { format, .. }) => {
                return Session::open_image(root, path, &format, overrides, trust_kernel)
            }
            other => other?,
        };
        let Opened { target, file, topology, geometry } = opened;
        if let (Some(n), Some(name)) = (target.selected_partition, &target.name) {
            let (path, disk) = (path.to_path_buf(), name.clone());
            return Err(Refusal::PartitionNamed { path, number: n, disk }.into());
        }
        let identity = device::identity(&root, &target, &topology);
        let host = Box::new(Device { root, target: target.clone(), export: false, at_boot: false });
        Ok(Session::with(target, topology, geometry, identity, Box::new(file), host))
    }

    /// The disk at `path` for a move in the initramfs (see
    /// [`Device::at_boot`]).
    pub fn open_at_boot(root: SysRoot, path: &Path) -> Result<Session, SessionError> {
        let mut session = Session::open(root.clone(), path, &Overrides::default(), false)?;
        let target = session.target.clone();
        session.host = Box::new(Device { root, target, export: false, at_boot: true });
        Ok(session)
    }

    /// The guest disk of a VM image, exported read-write by QEMU (which
    /// refuses while a VM holds the image's lock), moved under the image's
    /// own name: journals go beside it, and the finish command names it.
    fn open_image(
        root: SysRoot,
        path: &Path,
        format: &Format,
        overrides: &Overrides,
        trust_kernel: bool,
    ) -> Result<Session, SessionError> {
        let export = Export::start(path, format, Access::Write).map_err(DeviceError::from)?;
        let opened = crate::open::open(&root, export.file(), overrides, trust_kernel)?;
        let Opened { target: guest, file, topology, geometry } = opened;
        let identity = device::identity(&root, &guest, &topology);
        let target = Target { path: path.to_path_buf(), ..guest.clone() };
        let host = Box::new(Device { root, target: guest, export: true, at_boot: false });
        let session = Session::with(target, topology, geometry, identity, Box::new(file), host);
        Ok(Session { image: Some((format.name(), export)), ..session })
    }

    /// A session over any reader and host (an embedder's, or a test's).
    pub fn with(
        target: Target,
        topology: Topology,
        geometry: Geometry,
        identity: Identity,
        reader: Box<dyn ReadAt>,
        host: Box<dyn Host>,
    ) -> Session {
        let store = Store::default();
        Session { target, topology, geometry, identity, reader, host, store, image: None }
    }

    /// Keep state records in `store` instead of the default.
    pub fn store(mut self, store: Store) -> Session {
        self.store = store;
        self
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// What the disk is recognised by, whatever it is called.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The partition holding a hibernation image, if any: resuming it after
    /// a move would bring back a kernel that knows the old layout.
    pub fn hibernation_image(&self) -> Result<Option<u32>, SessionError> {
        let layout = self.layout()?;
        let ss = self.topology.logical_sector_size.value;
        Ok(layout
            .partitions
            .iter()
            .find(|p| guard::hibernation(&*self.reader, p, ss))
            .map(|p| p.number))
    }

    /// The in-use guard, for a move of the partitions `asked`.
    pub fn check_unused(&self, asked: &[u32]) -> Result<(), SessionError> {
        self.host.check_unused(asked)
    }

    pub fn layout(&self) -> Result<Layout, SessionError> {
        let ss = self.topology.logical_sector_size.value;
        let layout = table::read(&*self.reader, ss, self.topology.size_bytes)
            .map_err(|source| SessionError::Table { path: self.target.path.clone(), source })?;
        guard::table_problems(&layout)?;
        Ok(layout)
    }

    /// The unfinished move on this target: the one in `journal`, or the
    /// one a state record points at whose identity matches.
    pub fn unfinished(&self, journal: Option<&Path>) -> Result<Option<Journal>, SessionError> {
        if let Some(path) = journal.filter(|p| p.exists()) {
            let j = Journal::open(path)?;
            if j.state.phase.finished() {
                return Ok(None);
            }
            if !state::applies(&j.record, &*self.reader, &self.identity) {
                let (journal, target) = (path.to_path_buf(), self.target.path.clone());
                return Err(Refusal::OtherDisk { journal, target }.into());
            }
            return Ok(Some(j));
        }
        if let Some((_, j)) = self.store.unfinished_on(&*self.reader, &self.identity) {
            return Ok(Some(j));
        }
        // A kill between creating the journal and recording it leaves a
        // journal at its default place with no record pointing at it.
        Ok(self.default_journals().into_iter().find_map(|path| {
            let j = Journal::open(&path).ok()?;
            let applies = state::applies(&j.record, &*self.reader, &self.identity);
            (!j.state.phase.finished() && applies).then_some(j)
        }))
    }

    /// The journals of moves on this target, with `explicit` (if a
    /// journal): at its partitions' default places, or in the journal
    /// directory recording a move on this disk; never another disk's.
    pub fn journals(&self, explicit: Option<&Path>) -> Vec<Journal> {
        let mine = self.default_journals();
        let explicit: Vec<PathBuf> = explicit.map(Path::to_path_buf).into_iter().collect();
        let ours = |j: &Journal| {
            let at = j.path();
            mine.iter().chain(&explicit).any(|p| p == at)
                || state::applies(&j.record, &*self.reader, &self.identity)
        };
        let listed = self.store.journals(mine.iter().chain(&explicit).cloned());
        listed.into_iter().filter(ours).collect()
    }

    /// Journals at the default places of this target's partitions.
    fn default_journals(&self) -> Vec<PathBuf> {
        let pattern = self.default_journal(0);
        let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name()) else {
            return Vec::new();
        };
        let name = name.to_string_lossy();
        let (prefix, suffix) = name.split_once("-p0").unwrap_or((&name, ""));
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
        entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                n.strip_prefix(prefix)
                    .and_then(|rest| rest.strip_prefix("-p"))
                    .and_then(|rest| rest.strip_suffix(suffix))
                    .is_some_and(|num| num.parse::<u32>().is_ok())
            })
            .map(|n| pattern.with_file_name(n))
            .collect()
    }

    /// The partitions to move: those named, or every misaligned one whose
    /// contents do not make up for its start (see [`Session::compensated`]).
    pub fn wanted(&self, named: &[u32]) -> Result<Vec<u32>, SessionError> {
        let layout = self.layout()?;
        if !named.is_empty() {
            if let Some(n) =
                named.iter().find(|n| !layout.partitions.iter().any(|p| p.number == **n))
            {
                let disk = self.target.path.clone();
                return Err(Refusal::NoSuchPartition { number: *n, disk }.into());
            }
            return Ok(named.to_vec());
        }
        let compensated = self.compensated()?;
        let misaligned = self.misaligned(&layout).filter(|p| !compensated.contains(&p.number));
        Ok(misaligned.map(|p| p.number).collect())
    }

    /// The partitions whose start is off a physical boundary while every
    /// data area inside is on one: a move would misalign their data, so
    /// they are moved only when named, with `misalign_layers`.
    pub fn compensated(&self) -> Result<Vec<u32>, SessionError> {
        let layout = self.layout()?;
        let ss = self.geometry.logical;
        let kept = self
            .misaligned(&layout)
            .filter(|p| layers::compensated(&layers::of(&*self.reader, p, ss), &self.geometry));
        Ok(kept.map(|p| p.number).collect())
    }

    fn misaligned<'a>(&self, layout: &'a Layout) -> impl Iterator<Item = &'a Partition> + 'a {
        let geometry = self.geometry;
        layout.partitions.iter().filter(move |p| {
            p.kind != PartKind::Extended
                && geometry.judge(p.start, p.size).is_some_and(|v| v.verdict == Class::Misaligned)
        })
    }

    /// What moving `wanted` would do, refusals included, after every check
    /// a real move makes first: `Err` only for what refuses the whole run.
    pub fn plan(&self, opts: &Options, wanted: &[u32]) -> Result<Vec<Planned>, SessionError> {
        let layout = self.layout()?;
        let mut report = Vec::new();
        for placed in self.place_all(opts, wanted)? {
            report.push(match placed {
                Ok(placement) => self.planned(opts, &layout, &placement)?,
                Err(err @ PlaceError::AlreadyAligned(n, _, start)) => Planned {
                    partition: n,
                    old_start: Some(start),
                    notes: vec![err.to_string()],
                    ..Planned::default()
                },
                Err(err) => self.refusal(&layout, err),
            });
        }
        Ok(report)
    }

    /// What a move refuses before anything is written (the dry run asks
    /// too): a journal where a crash would lose it, a target in use.
    /// Returns the first journal's path.
    pub fn preflight(&self, opts: &Options, wanted: &[u32]) -> Result<PathBuf, SessionError> {
        let first = self.journal_path(opts, wanted.first().copied().unwrap_or(1));
        self.host.check_journal(&first, wanted)?;
        self.host.check_unused(wanted)?;
        Ok(first)
    }

    /// Move each of `wanted` in turn, each to the end (or to where `events`
    /// asked to stop).
    pub fn move_all(
        &self,
        opts: &Options,
        wanted: &[u32],
        events: &mut dyn Events,
    ) -> Result<Outcome, SessionError> {
        // Every refusal comes before any journal exists, so none leaves an
        // "unfinished" move behind. All journals of a run share a directory.
        let first = self.preflight(opts, wanted)?;
        if let Some(dir) = first.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(io_error(format!("creating {}", dir.display())))?;
        }
        for placed in self.place_all(opts, wanted)? {
            let placement = match placed {
                Ok(p) => p,
                Err(err @ PlaceError::AlreadyAligned(..)) => {
                    events.note(&err.to_string());
                    continue;
                }
                Err(error) => {
                    let why =
                        self.refusal(&self.layout()?, error.clone()).refused.unwrap_or_default();
                    return Err(Refusal::Unplaceable { error, why }.into());
                }
            };
            // The table changed after each move: read it again.
            let layout = self.layout()?;
            let n = placement.partition.number;
            let Some(current) = layout.partitions.iter().find(|p| p.number == n) else {
                return Err(Refusal::Vanished(n).into());
            };
            let placement = Placement { partition: current.clone(), ..placement };
            if events.stop_requested() {
                return Ok(Outcome::Stopped(format!(
                    "interrupted: partition {n} of {} was not touched; rerun the same command \
                     to move it",
                    self.target.path.display()
                )));
            }
            let prepared = prepare(
                &*self.reader,
                &self.target.path,
                &layout,
                &placement,
                self.identity.clone(),
            )?;
            if opts.read_check && self.read_check(opts, &prepared.record, events)? == Scan::Stopped
            {
                return Ok(Outcome::Stopped(format!(
                    "interrupted: partition {n} of {} was not touched; rerun the same command \
                     to move it",
                    self.target.path.display()
                )));
            }
            let journal = self.create_journal(opts, &prepared)?;
            for note in placement.note.iter().chain(&prepared.notes) {
                events.note(&format!("note: {note}"));
            }
            if let Outcome::Stopped(why) = self.finish(journal, opts.rescue, events)? {
                return Ok(Outcome::Stopped(why));
            }
        }
        Ok(Outcome::Finished)
    }

    /// Read every sector `m` will read, before any journal exists: an
    /// unreadable one refuses the move with nothing written, unless
    /// rescuing (then it is said, and the move reads around it).
    fn read_check(
        &self,
        opts: &Options,
        m: &Move,
        events: &mut dyn Events,
    ) -> Result<Scan, SessionError> {
        let reader = self.host.direct_reader()?;
        events.note(&format!(
            "reading every sector of partition {} ({}) before writing any",
            m.partition,
            human_size(m.bytes())
        ));
        events.started(m.bytes());
        let started = Instant::now();
        let found = {
            let shared = RefCell::new(&mut *events);
            let stop = || shared.borrow().stop_requested();
            let mut progress = |n| shared.borrow_mut().progress(n);
            scan::scan(&*reader, m.old_start, m.sectors, m.sector_size, &mut progress, &stop)
        };
        events.stopped();
        let found = found.map_err(io_error(format!("reading partition {}", m.partition)))?;
        if let Scan::Done(bad) = &found {
            let seconds = started.elapsed().as_secs_f64();
            events.note(&format!(
                "read check: {} read in {seconds:.2} s ({}/s), {}",
                human_size(m.bytes()),
                human_size((m.bytes() as f64 / seconds.max(1e-6)) as u64),
                if bad.is_empty() { "every sector readable".into() } else { scan::describe(bad) }
            ));
        }
        match found {
            Scan::Done(bad) if !bad.is_empty() => {
                let holders = self.holders(m, &bad);
                if !opts.rescue {
                    return Err(SessionError::Unreadable { partition: m.partition, holders, bad });
                }
                events.note(&format!(
                    "partition {}: {} cannot be read{}: --rescue reads each {} more times during \
                     the move and writes zeros where it still fails",
                    m.partition,
                    scan::describe(&bad),
                    holders.map(|h| format!(" ({h})")).unwrap_or_default(),
                    rescue::RETRIES
                ));
                Ok(Scan::Done(bad))
            }
            other => Ok(other),
        }
    }

    /// What the unreadable `bad` sectors of `m`'s partition hold: files by
    /// name in an ext2/3/4 (debugfs), else the bytes of the partition.
    fn holders(&self, m: &Move, bad: &[Range<u64>]) -> Option<String> {
        let ss = m.sector_size;
        let at = m.old_start.checked_mul(ss)?;
        let layers = crate::stack::walk(&*self.reader, at, m.bytes());
        let ext = layers.iter().find_map(|l| match l.details {
            crate::stack::Details::Ext { block_bytes, .. } if l.depth == 0 => Some(block_bytes),
            _ => None,
        });
        if self.image.is_none() {
            let path = &self.target.path;
            if let Some(said) = ext.and_then(|b| scan::ext_holders(path, at, ss, b, bad)) {
                return Some(said);
            }
        }
        let first = bad.first()?;
        let byte = first.start.checked_sub(m.old_start)?.checked_mul(ss)?;
        Some(format!("the first at byte {byte} of partition {}", m.partition))
    }

    /// The state record first, then the journal: a record pointing at a
    /// journal not yet made is ignored, while a journal with no record
    /// could be missed.
    fn create_journal(&self, opts: &Options, prepared: &Prepared) -> Result<Journal, SessionError> {
        let path = self.journal_path(opts, prepared.record.partition);
        if path.exists() {
            if !Journal::open(&path)?.state.phase.finished() {
                return Err(Refusal::JournalTaken(path).into());
            }
            std::fs::remove_file(&path)
                .map_err(io_error(format!("removing {}", path.display())))?;
        }
        // Left by a crash after an undo recorded itself finished.
        let stale = undo::path(&path);
        if stale.exists() {
            std::fs::remove_file(&stale)
                .map_err(io_error(format!("removing {}", stale.display())))?;
        }
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let absolute = std::fs::canonicalize(dir)
            .map_err(io_error(format!("finding {}", dir.display())))?
            .join(path.file_name().unwrap_or_default());
        self.store
            .add(&absolute, &prepared.record)
            .map_err(io_error("recording the move in the state directory"))?;
        Ok(Journal::create(&path, prepared.record.clone())?)
    }

    /// Run (or resume) the move in `journal` to the end: copy, verify,
    /// table, tell the kernel, mark it done, forget its record.
    /// With `rescue`, sectors that stay unreadable are written as zeros and
    /// listed in a map beside the journal.
    pub fn finish(
        &self,
        mut journal: Journal,
        rescue: bool,
        events: &mut dyn Events,
    ) -> Result<Outcome, SessionError> {
        self.host.check_unused(&[journal.record.partition])?;
        let undoing = undo::path(journal.path());
        if undoing.exists() {
            let partition = journal.record.partition;
            let finish = state::finish_command(&self.target.path, partition);
            return Err(Refusal::BeingUndone { partition, journal: undoing, finish }.into());
        }
        let writer = self.host.writer()?;
        let m = journal.record.clone();
        if journal.state.sequence > 1 {
            events.resumed(&m, journal.state.phase, journal.state.cursor);
        }
        let mut map = match rescue {
            true => Some(Map::open(rescue::map_path(journal.path()), &m).map_err(io_error(
                format!("reading {}", rescue::map_path(journal.path()).display()),
            ))?),
            false => None,
        };
        events.started(2 * m.bytes());
        let started = Instant::now();
        let result = {
            // Called in turn, never at once: one RefCell serves both.
            let shared = RefCell::new(&mut *events);
            let stop = || shared.borrow().stop_requested();
            let mut tick = |n| shared.borrow_mut().progress(n);
            copy::run_until(&*writer, &mut journal, &mut tick, &stop, map.as_mut())
        };
        events.stopped();
        match result {
            Err(MoveError::Interrupted { verifying, chunks }) => {
                return Ok(Outcome::Stopped(self.stopped_message(&journal, verifying, chunks)));
            }
            Err(source) => return Err(self.move_error(source, &journal)),
            Ok(()) => {}
        }
        if let Some(warning) = writer.tell_kernel(&m) {
            events.note(&format!("warning: {warning}"));
        }
        journal.commit(Phase::Done, m.chunks(), None)?;
        let absolute = std::fs::canonicalize(journal.path())
            .map_err(io_error(format!("finding {}", journal.path().display())))?;
        self.store.remove(&absolute).map_err(io_error("removing the move's state record"))?;
        // After the record goes: a kill while scrubbing leaves a done
        // journal (which --clean removes), never a record to trip over.
        if let Err(e) = journal.scrub() {
            events.note(&format!(
                "warning: {e}: the finished journal may still hold the bytes it saved; \
                 `blkalign realign --clean --yes` deletes it"
            ));
        }
        // Direct writes dropped the reader's cached pages: this sees the moved bytes.
        let warnings = self.fat_warning(m.partition, m.new_start, m.sectors).into_iter().collect();
        events.finished(&Done {
            target: self.target.path.clone(),
            partition: m.partition,
            old_start: m.old_start,
            new_start: m.new_start,
            bytes: m.bytes(),
            seconds: started.elapsed().as_secs_f64(),
            contents: m.contents.clone(),
            journal: journal.path().to_path_buf(),
            verified: true,
            rescued: map.map(|map| self.rescued(&m, &map)),
            warnings,
        });
        Ok(Outcome::Finished)
    }

    /// Move back what the unfinished move in `forward` has moved, so the
    /// partition is as it was before it: its own journaled move (resumed
    /// where an earlier undo stopped), then the first journal marked
    /// undone and its record forgotten.
    pub fn undo(
        &self,
        mut forward: Journal,
        events: &mut dyn Events,
    ) -> Result<Outcome, SessionError> {
        self.host.check_unused(&[forward.record.partition])?;
        let writer = self.host.writer()?;
        let undo_path = undo::path(forward.path());
        let back = if undo_path.exists() {
            Some(Journal::open(&undo_path)?)
        } else {
            undo::begin(&forward, &*writer).map_err(|e| match e {
                BeginError::Undo(e) => Refusal::Undo(e).into(),
                BeginError::Journal(e) => SessionError::Journal(e),
                BeginError::Io { lba, source } => SessionError::Move {
                    source: MoveError::Io { what: "writing", lba, source },
                    journal: forward.path().to_path_buf(),
                    way_on: self.undo_way_on(forward.record.partition),
                },
            })?
        };
        if let Some(mut back) = back {
            if back.state.sequence > 1 {
                events.note(&format!(
                    "resuming the undo at {} of {} chunks",
                    back.state.cursor,
                    back.record.chunks()
                ));
            }
            events.started(2 * back.record.bytes());
            let result = {
                let shared = RefCell::new(&mut *events);
                let stop = || shared.borrow().stop_requested();
                let mut tick = |n| shared.borrow_mut().progress(n);
                copy::run_until(&*writer, &mut back, &mut tick, &stop, None)
            };
            events.stopped();
            match result {
                Err(MoveError::Interrupted { .. }) => {
                    return Ok(Outcome::Stopped(format!(
                        "interrupted: the undo of partition {}'s move is journaled in {};                          finish it with `{} --undo`",
                        forward.record.partition,
                        undo_path.display(),
                        state::finish_command(&self.target.path, forward.record.partition)
                    )));
                }
                Err(source) => {
                    let way_on = self.undo_way_on(forward.record.partition);
                    return Err(SessionError::Move { source, journal: undo_path, way_on });
                }
                Ok(()) => back.commit(Phase::Done, back.record.chunks(), None)?,
            }
        }
        let cursor = forward.state.cursor;
        forward.commit(Phase::Undone, cursor, None)?;
        let absolute = std::fs::canonicalize(forward.path())
            .map_err(io_error(format!("finding {}", forward.path().display())))?;
        self.store.remove(&absolute).map_err(io_error("removing the move's state record"))?;
        let scrubbed = forward.scrub().and_then(|()| match Journal::open(&undo_path) {
            Ok(mut back) => back.scrub(),
            Err(_) => Ok(()),
        });
        if let Err(e) = scrubbed {
            events.note(&format!("warning: {e}: a journal may still hold the bytes it saved"));
        }
        match std::fs::remove_file(&undo_path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                events.note(&format!("warning: removing {}: {e}", undo_path.display()));
            }
            _ => {}
        }
        events.undone(&Status::of(&forward));
        Ok(Outcome::Finished)
    }

    /// What `--rescue` wrote as zeros, and the files they hit (the file
    /// system read where the move put it).
    fn rescued(&self, m: &Move, map: &Map) -> Rescued {
        let bad = map.bad();
        // The map keeps only ranges inside the partition: no underflow.
        let at_new = |lba: u64| lba.saturating_sub(m.old_start).saturating_add(m.new_start);
        let moved: Vec<Range<u64>> = bad.iter().map(|r| at_new(r.start)..at_new(r.end)).collect();
        let at_new = Move { old_start: m.new_start, ..m.clone() };
        Rescued {
            map: map.path().to_path_buf(),
            zero_filled: bad.iter().map(|r| [r.start, r.end - 1]).collect(),
            holders: if bad.is_empty() { None } else { self.holders(&at_new, &moved) },
            retries: rescue::RETRIES,
            seconds: map.spent.as_secs_f64(),
        }
    }

    /// A move that stopped on an error, with the ways on: an unreadable
    /// sector stays unreadable, so a rerun alone would stop there again.
    fn move_error(&self, source: MoveError, journal: &Journal) -> SessionError {
        let m = &journal.record;
        let finish = state::finish_command(&self.target.path, m.partition);
        let (_, moved) = undo::moved(m, journal.state.phase, journal.state.cursor);
        let way_on = match &source {
            MoveError::Io { what: "reading", source: e, .. } if scan::unreadable(e) => format!(
                "A sector that cannot be read stays so; two ways end in a usable partition:\n  \
                 {finish} --undo    moves the {} already moved back: the partition exactly as \
                 before the move\n  {finish} --rescue  finishes the move, reading each \
                 unreadable sector {} more times and writing zeros where it still fails (listed \
                 in a GNU ddrescue map beside the journal, with the files they hit)",
                human_size(moved),
                rescue::RETRIES
            ),
            _ => format!(
                "Once the cause is fixed, rerun the same command to finish it (a drive remaps a \
                 sector that failed a write when it is written again), or put the partition back \
                 as it was with `{finish} --undo`"
            ),
        };
        SessionError::Move { source, journal: journal.path().to_path_buf(), way_on }
    }

    fn undo_way_on(&self, n: u32) -> String {
        let finish = state::finish_command(&self.target.path, n);
        format!("Once the cause is fixed, finish the undo with `{finish} --undo`")
    }

    /// What a stopped move left: the disk's state and how to finish it.
    fn stopped_message(&self, journal: &Journal, verifying: bool, chunks: u64) -> String {
        let m = &journal.record;
        let head =
            format!("interrupted: partition {} of {}", m.partition, self.target.path.display());
        let state = if verifying {
            format!("is copied ({}) but not yet verified", human_size(m.bytes()))
        } else {
            let done = chunks.saturating_mul(m.chunk_bytes).min(m.bytes());
            format!("is half-moved: {} of {} copied", human_size(done), human_size(m.bytes()))
        };
        format!(
            "{head} {state}; its data is safe (each byte at its old or new place or in the \
             journal {}), but it is unusable until the move is finished.\nFinish with: {}",
            journal.path().display(),
            state::finish_command(&self.target.path, m.partition)
        )
    }

    /// Place each partition in turn, in an order that makes room: the first
    /// that fits goes, and the others are placed against the table as it
    /// will be after it.
    fn place_all(
        &self,
        opts: &Options,
        wanted: &[u32],
    ) -> Result<Vec<Result<Placement, PlaceError>>, SessionError> {
        let mut layout = self.layout()?;
        let mut pending: Vec<u32> = wanted.to_vec();
        let mut out = Vec::new();
        while !pending.is_empty() {
            let tries: Vec<(usize, Result<Placement, PlaceError>)> = pending
                .iter()
                .enumerate()
                .map(|(i, &n)| (i, self.place_one(&layout, opts, n)))
                .collect();
            let Some((i, Ok(placement))) = tries.iter().find(|(_, r)| r.is_ok()).cloned() else {
                out.extend(tries.into_iter().map(|(_, r)| r));
                break;
            };
            pending.remove(i);
            let moved =
                layout.partitions.iter_mut().find(|p| p.number == placement.partition.number);
            if let Some(p) = moved {
                p.start = placement.new_start;
                p.ebr = placement.ebr.or(p.ebr);
            }
            if let (Some(mbr), Some(from), Some(to)) =
                (layout.mbr.as_mut(), placement.partition.ebr, placement.ebr)
            {
                mbr.ebrs.iter_mut().filter(|e| **e == from).for_each(|e| *e = to);
            }
            out.push(Ok(placement));
        }
        Ok(out)
    }

    fn place_one(&self, layout: &Layout, opts: &Options, n: u32) -> Result<Placement, PlaceError> {
        let req = request(opts, n);
        let ss = layout.sector_size;
        let part = layout.partitions.iter().find(|p| p.number == n);
        // Bytes an earlier move of this very partition left behind are ours
        // to overwrite, not a boot loader's.
        let stale = Cell::new(None);
        let nonzero = |lbas: Range<u64>| {
            if !holds_data(&*self.reader, lbas.clone(), ss) {
                return false;
            }
            let ours = part.is_some_and(|p| stale_copy(&*self.reader, lbas.clone(), p, ss));
            if ours {
                stale.set(Some(lbas));
            }
            !ours
        };
        let sectors = self.topology.size_bytes / ss.max(1);
        let mut placed = place::place(layout, &self.geometry, sectors, &req, &nonzero)?;
        if let Some(gap) = stale.take().filter(|g| placed.new_start <= g.start) {
            let note = format!(
                "sectors {}-{} hold a stale copy of partition {n}'s first sectors, left by an \
                 earlier move: not boot-loader data, overwritten",
                gap.start,
                gap.end.saturating_sub(1)
            );
            placed.note = Some(match placed.note.take() {
                Some(first) => format!("{first}; {note}"),
                None => note,
            });
        }
        if !req.force {
            if let Some(why) = guard::boot_loader(
                &*self.reader,
                &placed.partition,
                self.geometry.logical,
                &self.target.path,
            ) {
                return Err(PlaceError::CannotMove(n, format!("{why}; --force moves it anyway")));
            }
        }
        if !opts.misalign_layers {
            let shifts = self.layer_shifts(&placed);
            if let Some(why) = layers::refusal(n, placed.new_start, &shifts) {
                return Err(PlaceError::CannotMove(n, why));
            }
        }
        Ok(placed)
    }

    /// What moving the partition as `placed` says does to each layer in it.
    fn layer_shifts(&self, placed: &Placement) -> Vec<LayerShift> {
        let p = &placed.partition;
        let found = layers::of(&*self.reader, p, self.geometry.logical);
        layers::shifts(&found, &self.geometry, p.start, placed.new_start)
    }

    fn planned(
        &self,
        opts: &Options,
        layout: &Layout,
        placement: &Placement,
    ) -> Result<Planned, SessionError> {
        let prepared =
            prepare(&*self.reader, &self.target.path, layout, placement, self.identity.clone())?;
        let m = &prepared.record;
        let journaled = m.shift_bytes() < m.chunk_bytes && m.chunks() > 0;
        let rate = self.host.read_rate(m.old_start * m.sector_size, m.bytes());
        let passes = if journaled { 4.0 } else { 3.0 } + f64::from(u8::from(opts.read_check));
        let mut notes: Vec<String> = placement.note.iter().cloned().collect();
        if let (Some(to), Some(from)) = (placement.ebr, placement.partition.ebr) {
            notes.push(format!(
                "its EBR moves from LBA {from} to LBA {to}, just before the new start, ahead of \
                 the copy (the partition stays where it is until the copy is done)"
            ));
        }
        notes.extend(prepared.notes.iter().cloned());
        notes.extend(self.image.as_ref().map(|(format, _)| growth(format, m)));
        notes.extend(self.fat_warning(m.partition, m.old_start, m.sectors));
        if self.image.is_none() && self.target.kind == TargetKind::Disk {
            let health = crate::device::drive::smart::read(&self.target.path);
            notes.extend(health.and_then(|h| h.warning()));
        }
        if opts.read_check {
            let cost = rate.map(|r| format!(", about {:.1} s here", m.bytes() as f64 / r));
            notes.push(format!(
                "before writing, every sector it will read is read once ({}{}): {} \
                 (--no-read-check skips this)",
                human_size(m.bytes()),
                cost.unwrap_or_default(),
                if opts.rescue {
                    "unreadable ones are named, then read around and written as zeros (--rescue)"
                } else {
                    "an unreadable one refuses the move with nothing written"
                }
            ));
        }
        let shifts = self.layer_shifts(placement);
        let changed = shifts.iter().filter(|s| s.off_before != s.off_after);
        notes.extend(changed.map(LayerShift::describe));
        Ok(Planned {
            partition: m.partition,
            contents: m.contents.clone(),
            old_start: Some(m.old_start),
            new_start: Some(m.new_start),
            sectors: Some(m.sectors),
            direction: Some(m.direction()),
            bytes: m.bytes(),
            shift_bytes: m.shift_bytes(),
            journaled,
            room: Some([placement.room.start, placement.room.end.saturating_sub(1)]),
            journal: Some(self.journal_path(opts, m.partition)),
            read_rate_bytes_per_second: rate,
            estimated_seconds: rate.map(|r| passes * m.bytes() as f64 / r),
            notes,
            layers: shifts,
            refused: None,
        })
    }

    /// What stays misaligned inside partition `n` (at LBA `start`) whatever
    /// its start: a FAT data area off the physical sector grid.
    fn fat_warning(&self, n: u32, start: u64, sectors: u64) -> Option<String> {
        let ss = self.topology.logical_sector_size.value;
        let (at, len) = (start.checked_mul(ss)?, sectors.checked_mul(ss)?);
        let layers = crate::stack::walk(&*self.reader, at, len);
        let dev = crate::advise::Node::of(&self.target, n).shell();
        place::fat_data_warning(&layers, self.geometry.physical, &dev, len)
    }

    fn refusal(&self, layout: &Layout, err: PlaceError) -> Planned {
        let mut why = err.to_string();
        let (partition, missing) = match &err {
            PlaceError::NoRoom { partition, missing_sectors, .. } => (*partition, *missing_sectors),
            PlaceError::NotFound(n)
            | PlaceError::CannotMove(n, _)
            | PlaceError::AlreadyAligned(n, ..) => (*n, None),
        };
        let p = layout.partitions.iter().find(|p| p.number == partition);
        if let (Some(p), Some(missing)) = (p, missing) {
            let ss = layout.sector_size;
            let (at, len) = (p.start.saturating_mul(ss), p.size.saturating_mul(ss));
            let contents = crate::stack::identify(&*self.reader, at, len).ok().flatten();
            let node = crate::advise::Node::of(&self.target, partition);
            why += &format!(
                ". To make room, shrink it by at least {} ({missing} sectors): {}; then shrink \
                 partition {partition} to match and rerun",
                human_size(missing.saturating_mul(ss)),
                crate::advise::shrink_node(
                    contents.as_ref(),
                    &node,
                    len,
                    missing.saturating_mul(ss)
                )
            );
        }
        Planned {
            partition,
            old_start: p.map(|p| p.start),
            sectors: p.map(|p| p.size),
            refused: Some(why),
            ..Planned::default()
        }
    }

    fn journal_path(&self, opts: &Options, n: u32) -> PathBuf {
        opts.journal.clone().unwrap_or_else(|| self.default_journal(n))
    }

    /// A block device's journal is named by the kernel name, a
    /// device-mapper device's by its mapper name (dm-N is renumbered at
    /// boot; the journal must be found under the name the rerun uses).
    fn default_journal(&self, n: u32) -> PathBuf {
        let mapper = self.target.path.file_name().filter(|_| self.target.is_mapper());
        match (&self.target.kind, &self.target.name) {
            (TargetKind::Disk, Some(name)) => {
                let name = mapper.map_or(name.clone(), |m| m.to_string_lossy().into_owned());
                self.store.journal_dir().join(format!("{name}-p{n}.journal"))
            }
            _ => {
                let mut p = self.target.path.as_os_str().to_owned();
                p.push(format!(".blkalign-p{n}.journal"));
                PathBuf::from(p)
            }
        }
    }
}

/// How much a move may grow a VM image: data landing on clusters the
/// format has not allocated takes new ones; zeros stay unallocated.
fn growth(format: &str, m: &Move) -> String {
    format!(
        "{format} image: the move writes {} through QEMU; where data lands on clusters the \
         image has not allocated it grows, by at most that, usually about the shift ({}); \
         zeros are written as unallocated clusters",
        human_size(m.bytes()),
        human_size(m.shift_bytes().min(m.bytes()))
    )
}

fn request(opts: &Options, partition: u32) -> Request {
    Request { partition, to: opts.to, align: opts.align, force: opts.force }
}

/// A real disk or image.
pub struct Device {
    pub root: SysRoot,
    pub target: Target,
    /// A VM image's guest disk exported by qemu-storage-daemon over FUSE.
    pub export: bool,
    /// In the initramfs, with the journal's file system mounted from
    /// another partition of this disk: only the partitions moved must be
    /// unused, and the disk is opened without O_EXCL (the mount holds it).
    pub at_boot: bool,
}

impl Host for Device {
    fn check_unused(&self, asked: &[u32]) -> Result<(), SessionError> {
        if self.at_boot {
            return Ok(exclusive::check_partitions_unused(&self.root, &self.target, asked)?);
        }
        Ok(exclusive::check_unused(&self.root, &self.target, asked)?)
    }

    fn check_journal(&self, journal: &Path, moved: &[u32]) -> Result<(), SessionError> {
        let spared = self.at_boot.then_some(moved);
        Ok(guard::journal_location(&self.root, &self.target, journal, spared)?)
    }

    /// O_DIRECT where the file system allows it (tmpfs does not),
    /// exclusive for block devices. Through a FUSE export, writes are
    /// buffered (QEMU 7.2 corrupts O_DIRECT writes over 1 MiB there; fsync
    /// still reaches the image) and reads O_DIRECT, so verification reads
    /// the image, not the page cache.
    fn writer(&self) -> Result<Box<dyn Writer>, SessionError> {
        use crate::bench::{open_direct, Mode};
        let (root, target) = (self.root.clone(), self.target.clone());
        if self.export {
            let file = exclusive::open_for_writing(&self.target)?;
            let reads =
                open_direct(&self.target.path, Mode::Read, false).map_err(Refusal::OpenDirect)?;
            return Ok(Box::new(DeviceWriter { file, reads: Some(reads), root, target }));
        }
        if self.at_boot {
            let flags = rustix::fs::OFlags::RDWR | rustix::fs::OFlags::DIRECT;
            let file = device::open_checked(&self.target.path, flags)?;
            return Ok(Box::new(DeviceWriter { file, reads: None, root, target }));
        }
        let file = match open_direct(&self.target.path, Mode::Write, false) {
            Ok(f) => f,
            Err(_) if self.target.kind == TargetKind::Image => {
                exclusive::open_for_writing(&self.target)?
            }
            Err(e) => return Err(Refusal::OpenDirect(e).into()),
        };
        Ok(Box::new(DeviceWriter { file, reads: None, root, target }))
    }

    /// O_DIRECT, or buffered where the file system refuses it (tmpfs).
    fn direct_reader(&self) -> Result<Box<dyn ReadAt>, SessionError> {
        let path = &self.target.path;
        let file = crate::bench::open_direct(path, crate::bench::Mode::Read, false)
            .or_else(|_| File::open(path))
            .map_err(io_error(format!("opening {}", path.display())))?;
        Ok(Box::new(file))
    }

    fn read_rate(&self, offset: u64, bytes: u64) -> Option<f64> {
        use std::os::unix::fs::FileExt;
        let path = &self.target.path;
        let file = crate::bench::open_direct(path, crate::bench::Mode::Read, false)
            .ok()
            .or_else(|| File::open(path).ok())?;
        let mut buf = crate::io::AlignedBuf::new(4 << 20, 0);
        let (started, mut done) = (Instant::now(), 0u64);
        while done < bytes.min(64 << 20) && started.elapsed().as_secs_f64() < 0.5 {
            let len = (bytes - done).min(4 << 20) as usize;
            FileExt::read_exact_at(&file, &mut buf.bytes_mut()[..len], offset.checked_add(done)?)
                .ok()?;
            done += len as u64;
        }
        let secs = started.elapsed().as_secs_f64();
        (done > 0 && secs > 0.0).then(|| done as f64 / secs)
    }
}

struct DeviceWriter {
    file: File,
    /// Where reads go when not to `file`.
    reads: Option<File>,
    root: SysRoot,
    target: Target,
}

impl Disk for DeviceWriter {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        Disk::read_at(self.reads.as_ref().unwrap_or(&self.file), buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        Disk::write_at(&self.file, buf, offset)
    }

    fn flush(&self) -> std::io::Result<()> {
        Disk::flush(&self.file)
    }
}

impl Writer for DeviceWriter {
    /// Swap the kernel's partition for the moved one, if it had it.
    fn tell_kernel(&self, m: &Move) -> Option<String> {
        let name = self.target.name.as_ref().filter(|_| self.target.kind == TargetKind::Disk)?;
        let known =
            device::kernel_partitions(&self.root, name).iter().any(|k| k.number == m.partition);
        let part = KernelPart {
            number: m.partition,
            start: m.new_start.saturating_mul(m.sector_size),
            length: m.sectors.saturating_mul(m.sector_size),
        };
        // Added even when the kernel lacks it: a rerun after a crash mid-table
        // finds a disk the kernel scanned while its table was torn (the kernel
        // lab's crash states). A disk that takes no partitions (device-mapper,
        // seen on 6.1 in the lab) refuses with EINVAL: nothing to tell it.
        let path = &self.target.path;
        match (kernel::Device { file: &self.file, path }).update(&part) {
            Err(e) if known || !e.is_no_partitions() => Some(format!(
                "the kernel still sees the old partition {} ({e}); run `partx -u {}` or reboot",
                m.partition,
                path.display()
            )),
            _ => None,
        }
    }
}

/// Whether any of sectors `lbas` holds a non-zero byte, read a MiB at a
/// time; unreadable counts as holding data.
fn holds_data(dev: &dyn ReadAt, lbas: Range<u64>, ss: u64) -> bool {
    let (Some(mut at), Some(end)) = (lbas.start.checked_mul(ss), lbas.end.checked_mul(ss)) else {
        return true;
    };
    let mut buf = vec![0u8; 1 << 20];
    while at < end {
        let len = (end - at).min(buf.len() as u64) as usize;
        if dev.read_exact_at(&mut buf[..len], at).is_err() || buf[..len].iter().any(|&b| b != 0) {
            return true;
        }
        at += len as u64;
    }
    false
}

/// Whether the non-zero sectors of `gap` (which ends where partition `p`
/// begins) are what a move to the right leaves: a copy of the partition's
/// own first sectors, in order, from some earlier start. Sectors a move
/// rewrites (the start fixups: boot sector, FAT32 backup boot sector) may
/// differ; any other mismatch means someone else's data.
fn stale_copy(dev: &dyn ReadAt, gap: Range<u64>, p: &Partition, ss: u64) -> bool {
    const FIXUP_SECTORS: usize = 16;
    const ANCHORS: usize = 32;
    // Each try reads the whole gap: a sector repeated all over the
    // partition (0xFF fill) must not make this quadratic.
    const TRIES: usize = 64;
    if ss == 0 {
        return false;
    }
    let Some(sectors) = p.start.checked_sub(gap.start).filter(|&s| gap.end == p.start && s > 0)
    else {
        return false;
    };
    // Gaps are a MiB or a few: more is not a leftover worth recognising.
    let Some(bytes) = sectors.checked_mul(ss).filter(|&b| b <= 64 << 20) else { return false };
    // The copy may begin before the gap: read twice its length of the partition.
    let head = p.size.min(sectors.saturating_mul(2)).saturating_mul(ss);
    let (Ok(len), Ok(head)) = (usize::try_from(bytes), usize::try_from(head)) else {
        return false;
    };
    let (mut old, mut new) = (vec![0u8; len], vec![0u8; head]);
    let ok =
        |buf: &mut [u8], at: Option<u64>| at.is_some_and(|at| dev.read_exact_at(buf, at).is_ok());
    if !ok(&mut old, gap.start.checked_mul(ss)) || !ok(&mut new, p.start.checked_mul(ss)) {
        return false;
    }
    let ss = ss as usize;
    let old: Vec<&[u8]> = old.chunks(ss).collect();
    let new: Vec<&[u8]> = new.chunks(ss).collect();
    let nonzero = |s: &[u8]| s.iter().any(|&b| b != 0);
    // Gap sector g is the partition's sector g + lag: lag < 0 when the
    // copy began inside the gap, whose sectors before it must be zero.
    let fits = |lag: isize| {
        let mut matched = false;
        for (g, was) in old.iter().enumerate() {
            let at = (g as isize).checked_add(lag).and_then(|i| usize::try_from(i).ok());
            match at.map(|i| (i, new.get(i))) {
                Some((i, Some(is))) if is == was => matched |= nonzero(was) && i >= FIXUP_SECTORS,
                Some((i, Some(_))) if i < FIXUP_SECTORS => {}
                _ if !nonzero(was) => {}
                _ => return false,
            }
        }
        matched
    };
    // Anchor on a few non-zero gap sectors: each equal partition sector
    // proposes a lag.
    let lags =
        old.iter().enumerate().filter(|(_, s)| nonzero(s)).take(ANCHORS).flat_map(|(g, was)| {
            new.iter().enumerate().filter(move |(_, is)| *is == was).map(move |(i, _)| {
                // Both below 2^18 sectors: no overflow.
                i as isize - g as isize
            })
        });
    let mut lags: Vec<isize> = lags.take(TRIES).collect();
    lags.dedup();
    lags.into_iter().any(fits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    const SS: usize = 512;
    const DISK: usize = 8 << 20;
    const OLD: u64 = 63;
    const SECTORS: u64 = 4096;

    /// An MBR disk with one partition at LBA 63 full of numbered sectors.
    fn image() -> Vec<u8> {
        let mut img = vec![0u8; DISK];
        let e = 0x1BE;
        img[e + 4] = 0x83;
        img[e + 8..e + 12].copy_from_slice(&(OLD as u32).to_le_bytes());
        img[e + 12..e + 16].copy_from_slice(&(SECTORS as u32).to_le_bytes());
        img[510..512].copy_from_slice(&[0x55, 0xAA]);
        for s in 0..SECTORS as usize {
            let at = (OLD as usize + s) * SS;
            img[at..at + SS].fill((s % 251) as u8 + 1);
            img[at..at + 8].copy_from_slice(&(s as u64).to_le_bytes());
        }
        img
    }

    fn partition(img: &[u8], start: u64) -> &[u8] {
        &img[start as usize * SS..(start + SECTORS) as usize * SS]
    }

    /// The disk in memory, with failures to inject: writes that fail after
    /// a count, a kernel that refuses.
    #[derive(Clone)]
    struct Mem {
        bytes: Arc<Mutex<Vec<u8>>>,
        writes_left: Arc<Mutex<Option<u32>>>,
        kernel_refuses: Arc<AtomicBool>,
        told: Arc<Mutex<Vec<u32>>>,
        /// Sectors whose reads fail with EIO until they are written.
        unreadable: Arc<Mutex<Vec<u64>>>,
    }

    impl ReadAt for Mem {
        fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            let lbas = offset / SS as u64..(offset + buf.len() as u64).div_ceil(SS as u64);
            if self.unreadable.lock().unwrap().iter().any(|b| lbas.contains(b)) {
                return Err(std::io::Error::from_raw_os_error(5));
            }
            self.bytes.lock().unwrap().read_exact_at(buf, offset)
        }
    }

    impl Disk for Mem {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
            self.read_exact_at(buf, offset)
        }

        fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
            // A failing write lands half-way, as a cut-off request may.
            let mut left = self.writes_left.lock().unwrap();
            let fails = *left == Some(0);
            let len = if fails { buf.len() / 2 } else { buf.len() };
            let at = offset as usize;
            self.bytes.lock().unwrap()[at..at + len].copy_from_slice(&buf[..len]);
            // A drive remaps a pending sector when it is written.
            let lbas = offset / SS as u64..(offset + len as u64) / SS as u64;
            self.unreadable.lock().unwrap().retain(|b| !lbas.contains(b));
            if fails {
                return Err(std::io::Error::other("injected write failure"));
            }
            if let Some(left) = left.as_mut() {
                *left -= 1;
            }
            Ok(())
        }

        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Writer for Mem {
        fn tell_kernel(&self, m: &Move) -> Option<String> {
            self.told.lock().unwrap().push(m.partition);
            self.kernel_refuses
                .load(Ordering::Relaxed)
                .then(|| "injected: the kernel refused".to_string())
        }
    }

    impl Host for Mem {
        fn check_unused(&self, _: &[u32]) -> Result<(), SessionError> {
            Ok(())
        }

        fn check_journal(&self, _: &Path, _: &[u32]) -> Result<(), SessionError> {
            Ok(())
        }

        fn writer(&self) -> Result<Box<dyn Writer>, SessionError> {
            Ok(Box::new(self.clone()))
        }

        fn read_rate(&self, _: u64, _: u64) -> Option<f64> {
            None
        }

        fn direct_reader(&self) -> Result<Box<dyn ReadAt>, SessionError> {
            Ok(Box::new(self.clone()))
        }
    }

    #[derive(Default)]
    struct Log {
        notes: Vec<String>,
        done: Vec<Done>,
        stop_after_progress: bool,
        progressed: bool,
    }

    impl Events for Log {
        fn progress(&mut self, _: u64) {
            self.progressed = true;
        }
        fn stop_requested(&self) -> bool {
            self.stop_after_progress && self.progressed
        }
        fn note(&mut self, text: &str) {
            self.notes.push(text.into());
        }
        fn finished(&mut self, done: &Done) {
            self.done.push(done.clone());
        }
    }

    struct Lab {
        dir: tempfile::TempDir,
        mem: Mem,
        session: Session,
    }

    /// A session on an in-memory 512e disk; the image file exists only to
    /// name the target (and place its journals beside it).
    fn lab() -> Lab {
        lab_with(image())
    }

    fn lab_with(img: Vec<u8>) -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk.img");
        std::fs::write(&path, []).unwrap();
        let root = SysRoot::real();
        let target = device::resolve(&root, &path).unwrap();
        let overrides = Overrides { physical_sector_size: Some(4096), ..Overrides::default() };
        let mut topology = crate::open::topology(&root, &target, None, &overrides).unwrap();
        topology.size_bytes = DISK as u64;
        let geometry = topology.geometry(false);
        let identity = Identity { size_bytes: DISK as u64, serial: None, wwid: None };
        let mem = Mem {
            bytes: Arc::new(Mutex::new(img)),
            writes_left: Arc::default(),
            kernel_refuses: Arc::default(),
            told: Arc::default(),
            unreadable: Arc::default(),
        };
        let session = Session::with(
            target,
            topology,
            geometry,
            identity,
            Box::new(mem.clone()),
            Box::new(mem.clone()),
        )
        .store(Store::new(dir.path().join("state")));
        Lab { dir, mem, session }
    }

    fn opts() -> Options {
        Options::default()
    }

    /// The partition moved whole, and the table says where.
    fn assert_moved(lab: &Lab) -> u64 {
        let img = lab.mem.bytes.lock().unwrap();
        let layout = table::read(&*img, 512, DISK as u64).unwrap();
        let new = layout.partitions[0].start;
        assert_eq!(new % 8, 0, "moved to a 4 KiB boundary");
        assert_ne!(new, OLD);
        assert_eq!(partition(&img, new), partition(&image(), OLD), "every byte moved");
        new
    }

    #[test]
    fn refusals_are_values_a_caller_can_match() {
        let lab = lab();
        let err = lab.session.wanted(&[9]).unwrap_err();
        assert!(
            matches!(err, SessionError::Refused(Refusal::NoSuchPartition { number: 9, .. })),
            "{err:?}"
        );
        assert_eq!(*lab.mem.bytes.lock().unwrap(), image(), "nothing written");
    }

    #[test]
    fn plan_then_move_finishes_and_forgets_the_record() {
        let lab = lab();
        let wanted = lab.session.wanted(&[]).unwrap();
        assert_eq!(wanted, [1]);
        let plan = lab.session.plan(&opts(), &wanted).unwrap();
        assert_eq!((plan[0].old_start, plan[0].refused.as_deref()), (Some(OLD), None));
        assert_eq!(*lab.mem.bytes.lock().unwrap(), image(), "planning writes nothing");
        let mut log = Log::default();
        let outcome = lab.session.move_all(&opts(), &wanted, &mut log).unwrap();
        assert_eq!(outcome, Outcome::Finished);
        let new = assert_moved(&lab);
        assert_eq!((log.done.len(), log.done[0].new_start), (1, new));
        assert_eq!(*lab.mem.told.lock().unwrap(), [1], "the kernel was told");
        assert!(lab.session.unfinished(None).unwrap().is_none());
        assert!(lab.session.store.unfinished().is_empty(), "the record is gone");
        assert!(lab.session.wanted(&[]).unwrap().is_empty(), "nothing left to move");
        // The journal keeps its record, not the partition's bytes it saved.
        let journal = std::fs::read(&log.done[0].journal).unwrap();
        assert!(journal.len() < 64 << 10, "{} bytes", journal.len());
        let original = image();
        let sector = &partition(&original, OLD)[SS..2 * SS];
        assert!(!journal.windows(SS).any(|w| w == sector), "a saved sector is left");
        assert!(Journal::open(&log.done[0].journal).unwrap().state.phase == Phase::Done);
    }

    /// An unreadable sector found by the read check refuses the move with
    /// nothing written and nothing left to finish; without the check the
    /// same disk stops the move half-way, leaving a journal.
    #[test]
    fn the_read_check_refuses_a_move_over_unreadable_sectors() {
        let lab = lab();
        *lab.mem.unreadable.lock().unwrap() = vec![OLD + 100, OLD + 101, OLD + 3000];
        let err = lab.session.move_all(&opts(), &[1], &mut Log::default()).unwrap_err();
        let SessionError::Unreadable { partition, bad, .. } = &err else { panic!("{err}") };
        assert_eq!(
            (*partition, bad.clone()),
            (1, vec![OLD + 100..OLD + 102, OLD + 3000..OLD + 3001])
        );
        assert!(err.to_string().contains("LBA 163-164, 3063 (3 sectors) cannot be read"), "{err}");
        assert_eq!(*lab.mem.bytes.lock().unwrap(), image(), "nothing written");
        assert!(lab.session.unfinished(None).unwrap().is_none(), "no move to finish");
        assert!(lab.session.store.unfinished().is_empty());
        let unchecked = Options { read_check: false, ..opts() };
        let err = lab.session.move_all(&unchecked, &[1], &mut Log::default()).unwrap_err();
        assert!(matches!(err, SessionError::Move { .. }), "{err}");
        assert!(lab.session.unfinished(None).unwrap().is_some(), "stopped half-way");
    }

    /// A failing write stops the move with its journal and record intact;
    /// the next run finds it by the record and finishes it.
    #[test]
    fn a_failed_copy_resumes_from_its_record() {
        let lab = lab();
        *lab.mem.writes_left.lock().unwrap() = Some(0);
        let err = lab.session.move_all(&opts(), &[1], &mut Log::default()).unwrap_err();
        assert!(matches!(err, SessionError::Move { .. }), "{err}");
        assert!(err.to_string().contains("rerun the same command"), "{err}");
        assert_eq!(lab.session.store.unfinished().len(), 1);
        *lab.mem.writes_left.lock().unwrap() = None;
        let journal = lab.session.unfinished(None).unwrap().expect("found by its record");
        let outcome = lab.session.finish(journal, false, &mut Log::default()).unwrap();
        assert_eq!(outcome, Outcome::Finished);
        assert_moved(&lab);
        assert!(lab.session.store.unfinished().is_empty());
    }

    /// A move stopped by a failing write (its chunk half-written over its
    /// own source, saved in the journal) is undone: every byte back, the
    /// table untouched, the move recorded undone and nothing left to
    /// finish. A rerun of the move is refused while an undo is under way.
    #[test]
    fn a_stopped_move_is_undone_exactly() {
        let lab = lab();
        let to_64 = Options { to: Some(64), ..opts() };
        *lab.mem.writes_left.lock().unwrap() = Some(0);
        let err = lab.session.move_all(&to_64, &[1], &mut Log::default()).unwrap_err();
        assert!(err.to_string().contains("--undo"), "names the way back: {err}");
        assert_ne!(*lab.mem.bytes.lock().unwrap(), image(), "the failed write landed half");
        let journal = lab.session.unfinished(None).unwrap().expect("stopped half-way");
        let path = journal.path().to_path_buf();
        // The undo itself stops on the same fault, then resumes.
        let err = lab.session.undo(journal, &mut Log::default()).unwrap_err();
        assert!(matches!(err, SessionError::Move { .. }), "{err}");
        *lab.mem.writes_left.lock().unwrap() = None;
        let journal = lab.session.unfinished(None).unwrap().expect("still unfinished");
        let mut log = Log::default();
        assert_eq!(lab.session.undo(journal, &mut log).unwrap(), Outcome::Finished);
        assert_eq!(*lab.mem.bytes.lock().unwrap(), image(), "every byte as before the move");
        assert!(lab.session.unfinished(None).unwrap().is_none());
        assert!(lab.session.store.unfinished().is_empty(), "the record is gone");
        assert_eq!(Journal::open(&path).unwrap().state.phase, Phase::Undone);
        assert!(!undo::path(&path).exists(), "the undo's journal is gone");
        assert!(std::fs::metadata(&path).unwrap().len() < 64 << 10, "saved chunks scrubbed");
    }

    /// An undo under way is finished by --undo, never by a rerun of the
    /// move, which would copy from sources the undo has overwritten.
    #[test]
    fn a_rerun_is_refused_while_an_undo_is_under_way() {
        let lab = lab();
        let to_64 = Options { to: Some(64), ..opts() };
        *lab.mem.writes_left.lock().unwrap() = Some(0);
        lab.session.move_all(&to_64, &[1], &mut Log::default()).unwrap_err();
        let journal = lab.session.unfinished(None).unwrap().unwrap();
        std::fs::write(undo::path(journal.path()), b"an undo's journal").unwrap();
        *lab.mem.writes_left.lock().unwrap() = None;
        let err = lab.session.finish(journal, false, &mut Log::default()).unwrap_err();
        assert!(err.to_string().contains("being undone"), "{err}");
    }

    /// With rescue, sectors that stay unreadable are written as zeros at
    /// the new place and listed in the map; every other byte moves.
    #[test]
    fn a_rescue_moves_around_unreadable_sectors_and_maps_them() {
        let lab = lab();
        let bad = [OLD + 100, OLD + 101, OLD + 3000];
        *lab.mem.unreadable.lock().unwrap() = bad.to_vec();
        let rescue = Options { rescue: true, ..opts() };
        let mut log = Log::default();
        assert_eq!(lab.session.move_all(&rescue, &[1], &mut log).unwrap(), Outcome::Finished);
        assert!(log.notes.iter().any(|n| n.contains("cannot be read")), "{:?}", log.notes);
        let done = &log.done[0];
        let rescued = done.rescued.as_ref().expect("rescued");
        assert_eq!(rescued.zero_filled, [[OLD + 100, OLD + 101], [OLD + 3000, OLD + 3000]]);
        let map = std::fs::read_to_string(&rescued.map).unwrap();
        let dashes: Vec<&str> = map.lines().filter(|l| l.ends_with(" -")).collect();
        assert_eq!(dashes, ["0x00014600  0x00000400  -", "0x0017EE00  0x00000200  -"], "{map}");
        let img = lab.mem.bytes.lock().unwrap();
        let mut expected = partition(&image(), OLD).to_vec();
        for lba in bad {
            let at = (lba - OLD) as usize * SS;
            expected[at..at + SS].fill(0);
        }
        assert_eq!(partition(&img, done.new_start), &expected[..]);
    }

    /// The kernel refusing is a warning: the disk is right, the move done.
    #[test]
    fn a_kernel_that_refuses_only_warns() {
        let lab = lab();
        lab.mem.kernel_refuses.store(true, Ordering::Relaxed);
        let mut log = Log::default();
        assert_eq!(lab.session.move_all(&opts(), &[1], &mut log).unwrap(), Outcome::Finished);
        assert!(log.notes.iter().any(|n| n.contains("warning: injected")), "{:?}", log.notes);
        assert_moved(&lab);
        assert!(lab.session.store.unfinished().is_empty());
    }

    /// A device-mapper device's journal goes by its mapper name, which a
    /// reboot keeps, not by dm-N, which it renumbers.
    #[test]
    fn a_device_mapper_journal_is_named_by_its_mapper_name() {
        let mut lab = lab();
        let name = |lab: &Lab| lab.session.default_journal(2).file_name().map(|n| n.to_owned());
        lab.session.target = Target {
            path: PathBuf::from("/dev/mapper/vg-lv"),
            name: Some("dm-7".into()),
            kind: TargetKind::Disk,
            selected_partition: None,
        };
        assert_eq!(name(&lab).as_deref(), Some("vg-lv-p2.journal".as_ref()));
        lab.session.target.path = PathBuf::from("/dev/sdb");
        lab.session.target.name = Some("sdb".into());
        assert_eq!(name(&lab).as_deref(), Some("sdb-p2.journal".as_ref()));
    }

    /// The two crash windows of "record, then journal": a record whose
    /// journal was never made is ignored; a journal at its default place
    /// whose record was lost is still found.
    #[test]
    fn both_sides_of_the_record_journal_ordering_are_safe() {
        let lab = lab();
        let placement = lab.session.place_all(&opts(), &[1]).unwrap().remove(0).unwrap();
        let layout = lab.session.layout().unwrap();
        let identity = lab.session.identity.clone();
        let reader = lab.mem.clone();
        let path = lab.dir.path().join("disk.img");
        let prepared = prepare(&reader, &path, &layout, &placement, identity).unwrap();
        let journal = lab.session.default_journal(1);
        lab.session.store.add(&journal, &prepared.record).unwrap();
        assert!(lab.session.unfinished(None).unwrap().is_none(), "a record with no journal");
        lab.session.store.remove(&journal).unwrap();
        Journal::create(&journal, prepared.record.clone()).unwrap();
        let found = lab.session.unfinished(None).unwrap().expect("a journal with no record");
        assert_eq!(found.path(), journal);
        lab.session.finish(found, false, &mut Log::default()).unwrap();
        assert_moved(&lab);
    }

    /// Asked to stop, a move says how far it got and how to finish; a
    /// rerun finishes it.
    #[test]
    fn a_stopped_move_says_how_to_finish_it() {
        let lab = lab();
        let mut log = Log { stop_after_progress: true, ..Log::default() };
        let Outcome::Stopped(why) = lab.session.move_all(&opts(), &[1], &mut log).unwrap() else {
            panic!("not stopped")
        };
        assert!(why.contains("Finish with: blkalign realign"), "{why}");
        let journal = lab.session.unfinished(None).unwrap().expect("unfinished");
        lab.session.finish(journal, false, &mut Log::default()).unwrap();
        assert_moved(&lab);
    }

    /// Extended 2048+7000: logical 5 at 2111+1000, then free space, then
    /// EBR 4100 and logical 6 at 4163 (in the EBR's `slot`, the link to it
    /// spanning to its end) holding numbered sectors. Its 1 MiB
    /// start, 4096, covers its EBR, and there is no room at 6144.
    fn extended_image(slot: usize) -> Vec<u8> {
        use crate::table::fixtures::mbr_entry;
        let mut img = vec![0u8; DISK];
        mbr_entry(&mut img, 0, 0, 0x05, 2048, 7000);
        mbr_entry(&mut img, 2048 * SS, 0, 0x83, 63, 1000);
        mbr_entry(&mut img, 2048 * SS, 1, 0x05, 4100 - 2048, 63 + SECTORS as u32);
        mbr_entry(&mut img, 4100 * SS, slot, 0x83, 63, SECTORS as u32);
        for s in 0..SECTORS as usize {
            let at = (4163 + s) * SS;
            img[at..at + SS].fill((s % 251) as u8 + 1);
            img[at..at + 8].copy_from_slice(&(s as u64).to_le_bytes());
        }
        img
    }

    /// (number, start, size, EBR) of each partition as a reader sees them.
    fn rows(img: &[u8]) -> Vec<(u32, u64, u64, Option<u64>)> {
        let layout = table::read(&img.to_vec(), 512, DISK as u64).unwrap();
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        layout.partitions.iter().map(|p| (p.number, p.start, p.size, p.ebr)).collect()
    }

    /// A logical whose destination covers its EBR takes the EBR along,
    /// written before the copy; a failure at any write leaves a table that
    /// reads clean with the logical at its old or new start, and the next
    /// run finishes the move.
    #[test]
    fn a_logical_moves_its_ebr_first_and_survives_a_failure_at_every_write() {
        let before = rows(&extended_image(0));
        let moved =
            [(1, 2048, 7000, None), (5, 2111, 1000, Some(2048)), (6, 4096, SECTORS, Some(4095))];
        for fail_at in 0.. {
            let lab = lab_with(extended_image(0));
            let plan = lab.session.plan(&opts(), &[6]).unwrap();
            assert_eq!(plan[0].new_start, Some(4096), "{:?}", plan[0]);
            assert!(plan[0]
                .notes
                .iter()
                .any(|n| n.contains("EBR moves from LBA 4100 to LBA 4095")));
            *lab.mem.writes_left.lock().unwrap() = Some(fail_at);
            let first = lab.session.move_all(&opts(), &[6], &mut Log::default());
            let finished = first.is_ok();
            if !finished {
                let now = rows(&lab.mem.bytes.lock().unwrap());
                let relinked = [before[0], before[1], (6, 4163, SECTORS, Some(4095))];
                assert!(now == before || now == relinked || now == moved, "{fail_at}: {now:?}");
                *lab.mem.writes_left.lock().unwrap() = None;
                let journal = lab.session.unfinished(None).unwrap().expect("an unfinished move");
                lab.session.finish(journal, false, &mut Log::default()).unwrap();
            }
            let img = lab.mem.bytes.lock().unwrap();
            assert_eq!(rows(&img), moved, "failing at write {fail_at}");
            let data = |start: usize| &img[start * SS..(start + SECTORS as usize) * SS];
            assert_eq!(data(4096), &extended_image(0)[4163 * SS..(4163 + SECTORS as usize) * SS]);
            if finished {
                assert!(fail_at > 3, "the move needs more than {fail_at} writes");
                break;
            }
        }
    }

    /// A logical in an EBR's third slot must fit its link: moving right,
    /// the link grows before the EBR says where the logical went, so a
    /// failure at any write leaves it readable at its old or new start.
    #[test]
    fn a_third_slot_logical_moving_right_is_readable_after_every_write() {
        let before = rows(&extended_image(2));
        let mut moved = before.clone();
        moved[2].1 = 4168;
        let to = Options { to: Some(4168), ..opts() };
        for fail_at in 0.. {
            let lab = lab_with(extended_image(2));
            *lab.mem.writes_left.lock().unwrap() = Some(fail_at);
            let finished = lab.session.move_all(&to, &[6], &mut Log::default()).is_ok();
            let now = rows(&lab.mem.bytes.lock().unwrap());
            assert!(now == before || now == moved, "failing at write {fail_at}: {now:?}");
            if finished {
                assert_eq!(now, moved);
                break;
            }
            *lab.mem.writes_left.lock().unwrap() = None;
            let journal = lab.session.unfinished(None).unwrap().expect("an unfinished move");
            lab.session.finish(journal, false, &mut Log::default()).unwrap();
            assert_eq!(
                rows(&lab.mem.bytes.lock().unwrap()),
                moved,
                "resumed after write {fail_at}"
            );
        }
    }
}
