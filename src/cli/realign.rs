//! `blkalign realign`: move misaligned partitions to aligned starts in
//! place. A dry run unless --yes; rerun after any interruption to finish.

use super::{plan::parse_align, GeometryArgs, EXIT_ERROR, EXIT_OK, EXIT_PROBLEM};
use anyhow::{bail, Context};
use blkalign::align::{Class, Geometry};
use blkalign::bench::io::{open_direct, Mode};
use blkalign::device::exclusive::{self, KernelPart};
use blkalign::device::{self, SysRoot, Target, TargetKind, Topology};
use blkalign::realign::copy::{self, MoveError};
use blkalign::realign::journal::{Journal, Phase};
use blkalign::realign::place::{self, PlaceError, Placement, Request};
use blkalign::realign::prepare::{prepare, Prepared};
use blkalign::realign::{guard, state, Identity, Move};
use blkalign::report::human_size;
use blkalign::table::{self, Layout, PartKind};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::fs::File;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Instant;

#[derive(clap::Args)]
#[command(after_help = "Examples:
  blkalign realign /dev/sdb                 # the plan: what moves, how long
  blkalign realign /dev/sdb --yes           # move every misaligned partition
  blkalign realign disk.img 2 --to 2048 --yes
  blkalign realign --status /var/lib/blkalign/journals/sdb-p2.journal
  blkalign realign --clean disk.img --yes   # delete finished journals

A killed or power-cut move resumes when the same command is run again. Ctrl-C
(SIGINT) or SIGTERM stops it between chunks: it says how far it got and the
command that finishes it, and exits 130 (143 for SIGTERM).")]
pub struct Args {
    /// The whole disk (/dev/sda) or disk-image file holding the partitions.
    #[arg(required_unless_present_any = ["status", "clean"])]
    target: Option<PathBuf>,

    /// Partitions to move, numbered as `audit` numbers them. Default: every
    /// misaligned partition.
    partitions: Vec<u32>,

    /// Move the one named partition to this LBA (it must be physically aligned).
    #[arg(long, value_name = "LBA")]
    to: Option<u64>,

    /// Destination grain: optimal (1 MiB, optimal I/O and physical sector,
    /// falling back to the physical sector when there is no room), minimal
    /// (the physical sector) or a size.
    #[arg(long, default_value = "optimal", value_name = "optimal|minimal|SIZE")]
    align: String,

    /// The journal file: outside the target, on persistent storage [default:
    /// IMAGE.blkalign-pN.journal beside an image; /var/lib/blkalign/journals/
    /// for a block device].
    #[arg(long, value_name = "FILE")]
    journal: Option<PathBuf>,

    /// Move. Without it, only the plan is printed.
    #[arg(long)]
    yes: bool,

    /// Overwrite non-zero bytes before the first partition, or move
    /// sectors a boot loader records (reinstall it afterwards).
    #[arg(long)]
    force: bool,

    /// Print the plan or the result as JSON.
    #[arg(long)]
    json: bool,

    /// Say where the move recorded in this journal stands, and exit.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["target", "yes"])]
    status: Option<PathBuf>,

    /// Delete the journals of finished moves (about 32 MiB each): TARGET's,
    /// and those under /var/lib/blkalign/journals/. Lists them unless --yes;
    /// a journal of an unfinished move is never deleted.
    #[arg(long, conflicts_with_all = ["status", "to", "partitions", "json"])]
    clean: bool,

    #[command(flatten)]
    geometry: GeometryArgs,
}

pub fn run(args: Args, sysfs_root: Option<PathBuf>) -> anyhow::Result<u8> {
    if let Some(journal) = &args.status {
        return status(journal, args.json);
    }
    if args.to.is_some() && args.partitions.len() != 1 {
        bail!("--to needs exactly one partition number");
    }
    let root = sysfs_root.map_or_else(SysRoot::real, SysRoot::fixture);
    if args.clean {
        return clean(&args, root);
    }
    let path = args.target.as_deref().context("name the disk or image")?;
    if args.yes {
        catch_interrupts();
    }
    let disk = Disk::open(root, path, &args)?;
    if let Some(journal) = disk.unfinished(args.journal.as_deref())? {
        let n = journal.record.partition;
        if !args.partitions.is_empty() && !args.partitions.contains(&n) {
            bail!(
                "partition {n} of {} has an unfinished move (journal {}): finish it first with \
                 `{}`",
                path.display(),
                journal.path().display(),
                state::finish_command(path, n)
            );
        }
        if !args.yes {
            print_status(&journal, args.json)?;
            exclusive::check_unused(&disk.root, &disk.target)?;
            eprintln!("dry run: rerun with --yes to finish this move");
            return Ok(EXIT_OK);
        }
        let code = disk.finish(journal, args.json)?;
        if code != EXIT_OK {
            return Ok(code);
        }
    }
    let wanted = disk.wanted(&args.partitions)?;
    if wanted.is_empty() {
        if args.json {
            print_plan(&PlanOutput { target: path, dry_run: !args.yes, moves: Vec::new() }, true)?;
        }
        eprintln!("nothing to move: every partition starts on a physical sector boundary");
        return Ok(EXIT_OK);
    }
    if args.yes {
        disk.move_all(&args, wanted)
    } else {
        disk.dry_run(&args, &wanted)
    }
}

/// The target, what we know of it, and how to judge it.
struct Disk {
    root: SysRoot,
    target: Target,
    topology: Topology,
    geometry: Geometry,
    identity: Identity,
    /// Buffered and read-only: for table reads and checks.
    reader: File,
}

impl Disk {
    fn open(root: SysRoot, path: &Path, args: &Args) -> anyhow::Result<Disk> {
        let target = device::resolve(&root, path)?;
        if let (Some(n), Some(name)) = (target.selected_partition, &target.name) {
            bail!(
                "{} is partition {n}: name its disk instead (`blkalign realign /dev/{name} {n}`)",
                path.display()
            );
        }
        let reader = device::open(&target)?;
        let overrides = args.geometry.overrides();
        let topology = device::topology(&root, &target, Some(&reader), &overrides)?;
        let geometry = topology.geometry(args.geometry.trust_kernel);
        let identity = guard::identity(&root, &target, &topology);
        Ok(Disk { root, target, topology, geometry, identity, reader })
    }

    fn layout(&self) -> anyhow::Result<Layout> {
        let ss = self.topology.logical_sector_size.value;
        let layout = table::read(&self.reader, ss, self.topology.size_bytes)
            .with_context(|| format!("reading {}", self.target.path.display()))?;
        guard::table_problems(&layout).map_err(anyhow::Error::msg)?;
        Ok(layout)
    }

    /// The unfinished move on this target: the one in `--journal`, or the
    /// one a state record points at whose identity matches.
    fn unfinished(&self, journal: Option<&Path>) -> anyhow::Result<Option<Journal>> {
        if let Some(path) = journal.filter(|p| p.exists()) {
            let j = Journal::open(path)?;
            if j.state.phase == Phase::Done {
                return Ok(None);
            }
            if !state::applies(&j.record, &self.reader, &self.identity) {
                bail!(
                    "the journal {} records a move on another disk (size, serial or table \
                     differ): refusing to apply it to {}",
                    path.display(),
                    self.target.path.display()
                );
            }
            return Ok(Some(j));
        }
        if let Some((_, j)) = state::unfinished_on(&self.reader, &self.identity) {
            return Ok(Some(j));
        }
        // A kill between creating the journal and recording it leaves a
        // journal at its default place with no record pointing at it.
        Ok(self.default_journals().into_iter().find_map(|path| {
            let j = Journal::open(&path).ok()?;
            let applies = state::applies(&j.record, &self.reader, &self.identity);
            (j.state.phase != Phase::Done && applies).then_some(j)
        }))
    }

    /// Journals at the default places of this target's partitions.
    fn default_journals(&self) -> Vec<PathBuf> {
        let pattern = self.journal_path_default(0);
        let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name()) else {
            return Vec::new();
        };
        let name = name.to_string_lossy();
        let (prefix, suffix) = name.split_once("-p0").unwrap_or((&name, ""));
        let Ok(entries) =
            std::fs::read_dir(if dir.as_os_str().is_empty() { Path::new(".") } else { dir })
        else {
            return Vec::new();
        };
        entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| {
                n.strip_prefix(prefix)
                    .and_then(|rest| rest.strip_prefix("-p"))
                    .and_then(|rest| rest.strip_suffix(suffix))
                    .is_some_and(|num| num.parse::<u32>().is_ok())
            })
            .map(|n| dir.join(n))
            .collect()
    }

    /// The partitions to move: those named, or every misaligned one.
    fn wanted(&self, named: &[u32]) -> anyhow::Result<Vec<u32>> {
        let layout = self.layout()?;
        if !named.is_empty() {
            for n in named {
                if !layout.partitions.iter().any(|p| p.number == *n) {
                    bail!("there is no partition {n} on {}", self.target.path.display());
                }
            }
            return Ok(named.to_vec());
        }
        let misaligned = layout.partitions.iter().filter(|p| {
            p.kind != PartKind::Extended
                && self
                    .geometry
                    .judge(p.start, p.size)
                    .is_some_and(|v| v.verdict == Class::Misaligned)
        });
        Ok(misaligned.map(|p| p.number).collect())
    }

    fn request(&self, args: &Args, partition: u32) -> anyhow::Result<Request> {
        Ok(Request { partition, to: args.to, align: parse_align(&args.align)?, force: args.force })
    }

    /// Place each partition in turn, in an order that makes room: the first
    /// that fits goes, and the others are placed against the table as it
    /// will be after it.
    fn place_all(
        &self,
        args: &Args,
        wanted: &[u32],
    ) -> anyhow::Result<Vec<Result<Placement, PlaceError>>> {
        let mut layout = self.layout()?;
        let mut pending: Vec<u32> = wanted.to_vec();
        let mut out = Vec::new();
        while !pending.is_empty() {
            let tries: Vec<(usize, Result<Placement, PlaceError>)> = pending
                .iter()
                .enumerate()
                .map(|(i, &n)| Ok((i, self.place_one(&layout, self.request(args, n)?))))
                .collect::<anyhow::Result<_>>()?;
            let Some((i, Ok(placement))) = tries.iter().find(|(_, r)| r.is_ok()).cloned() else {
                out.extend(tries.into_iter().map(|(_, r)| r));
                break;
            };
            pending.remove(i);
            let moved =
                layout.partitions.iter_mut().find(|p| p.number == placement.partition.number);
            if let Some(p) = moved {
                p.start = placement.new_start;
            }
            out.push(Ok(placement));
        }
        Ok(out)
    }

    fn place_one(&self, layout: &Layout, req: Request) -> Result<Placement, PlaceError> {
        let ss = layout.sector_size;
        let n = req.partition;
        let part = layout.partitions.iter().find(|p| p.number == n);
        // Bytes an earlier move of this very partition left behind are ours
        // to overwrite, not a boot loader's.
        let stale = std::cell::Cell::new(None);
        let nonzero = |lbas: std::ops::Range<u64>| {
            if !holds_data(&self.reader, lbas.clone(), ss) {
                return false;
            }
            let ours = part.is_some_and(|p| stale_copy(&self.reader, lbas.clone(), p, ss));
            if ours {
                stale.set(Some(lbas));
            }
            !ours
        };
        let sectors = self.topology.size_bytes / ss;
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
            if let Some(why) =
                guard::boot_loader(&self.reader, &placed.partition, &self.target.path)
            {
                return Err(PlaceError::CannotMove(
                    req.partition,
                    format!("{why}; --force moves it anyway"),
                ));
            }
        }
        Ok(placed)
    }

    fn dry_run(&self, args: &Args, wanted: &[u32]) -> anyhow::Result<u8> {
        let layout = self.layout()?;
        let mut report = Vec::new();
        let mut refused = false;
        for placed in self.place_all(args, wanted)? {
            let item = match placed {
                Ok(placement) => self.planned(args, &layout, &placement)?,
                Err(err @ PlaceError::AlreadyAligned(n, _, start)) => Planned {
                    partition: n,
                    old_start: Some(start),
                    notes: vec![err.to_string()],
                    ..Planned::default()
                },
                Err(err) => {
                    refused = true;
                    self.refusal(&layout, err)
                }
            };
            report.push(item);
        }
        let out = PlanOutput { target: &self.target.path, dry_run: true, moves: report };
        print_plan(&out, args.json)?;
        if refused {
            eprintln!("refused: nothing written");
            return Ok(EXIT_ERROR);
        }
        self.preflight(args, wanted)?;
        eprintln!("dry run: nothing written; add --yes to move");
        Ok(EXIT_OK)
    }

    fn planned(
        &self,
        args: &Args,
        layout: &Layout,
        placement: &Placement,
    ) -> anyhow::Result<Planned> {
        let prepared =
            prepare(&self.reader, &self.target.path, layout, placement, self.identity.clone())?;
        let m = &prepared.record;
        let journaled = m.shift_bytes() < m.chunk_bytes && m.chunks() > 0;
        let rate = read_rate(&self.target.path, m.old_start * m.sector_size, m.bytes());
        let passes = if journaled { 4.0 } else { 3.0 };
        let mut notes: Vec<String> = placement.note.iter().cloned().collect();
        notes.extend(prepared.notes.iter().cloned());
        notes.extend(self.fat_warning(m.partition, m.old_start, m.sectors));
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
            room: Some([placement.room.start, placement.room.end - 1]),
            journal: Some(self.journal_path(args, m.partition)),
            read_rate_bytes_per_second: rate,
            estimated_seconds: rate.map(|r| passes * m.bytes() as f64 / r),
            notes,
            refused: None,
        })
    }

    /// What stays misaligned inside partition `n` (at LBA `start`) whatever
    /// its start: a FAT data area off the physical sector grid.
    fn fat_warning(&self, n: u32, start: u64, sectors: u64) -> Option<String> {
        let ss = self.topology.logical_sector_size.value;
        let (at, len) = (start.checked_mul(ss)?, sectors.checked_mul(ss)?);
        let layers = blkalign::stack::walk(&self.reader, at, len);
        let dev = blkalign::advise::Node::of(&self.target, n).shell();
        place::fat_data_warning(&layers, self.geometry.physical, &dev)
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
            let contents =
                blkalign::stack::identify(&self.reader, p.start * ss, p.size * ss).ok().flatten();
            let node = blkalign::advise::Node::of(&self.target, partition);
            why += &format!(
                ". To make room, shrink it by at least {} ({missing} sectors): {}; then shrink \
                 partition {partition} to match and rerun",
                human_size(missing * ss),
                blkalign::stack::shrink_node(contents.as_ref(), &node, p.size * ss, missing * ss)
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

    fn journal_path(&self, args: &Args, n: u32) -> PathBuf {
        args.journal.clone().unwrap_or_else(|| self.journal_path_default(n))
    }

    fn journal_path_default(&self, n: u32) -> PathBuf {
        match (&self.target.kind, &self.target.name) {
            (TargetKind::Disk, Some(name)) => {
                state::journal_dir().join(format!("{name}-p{n}.journal"))
            }
            _ => {
                let mut p = self.target.path.as_os_str().to_owned();
                p.push(format!(".blkalign-p{n}.journal"));
                PathBuf::from(p)
            }
        }
    }

    /// What --yes refuses before anything is written, the dry run refuses
    /// too: a journal where a crash would lose it, a disk in use. Returns
    /// the first journal's path.
    fn preflight(&self, args: &Args, wanted: &[u32]) -> anyhow::Result<PathBuf> {
        let first = self.journal_path(args, wanted.first().copied().unwrap_or(1));
        guard::journal_location(&self.root, &self.target, &first).map_err(anyhow::Error::msg)?;
        exclusive::check_unused(&self.root, &self.target)?;
        Ok(first)
    }

    fn move_all(&self, args: &Args, wanted: Vec<u32>) -> anyhow::Result<u8> {
        // Every refusal comes before any journal exists, so none leaves an
        // "unfinished" move behind. All journals of a run share a directory.
        let first = self.preflight(args, &wanted)?;
        if let Some(dir) = first.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        for placed in self.place_all(args, &wanted)? {
            let placement = match placed {
                Ok(p) => p,
                Err(err @ PlaceError::AlreadyAligned(..)) => {
                    eprintln!("{err}");
                    continue;
                }
                Err(err) => {
                    let layout = self.layout()?;
                    bail!("{}", self.refusal(&layout, err).refused.unwrap_or_default());
                }
            };
            // The table changed after each move: read it again.
            let layout = self.layout()?;
            let current = layout.partitions.iter().find(|p| p.number == placement.partition.number);
            let Some(current) = current else {
                bail!("partition {} vanished", placement.partition.number)
            };
            let placement = Placement { partition: current.clone(), ..placement };
            if let Some(code) = interrupted() {
                eprintln!(
                    "interrupted: partition {} of {} was not touched; rerun the same command to \
                     move it",
                    current.number,
                    self.target.path.display()
                );
                return Ok(code);
            }
            let prepared = prepare(
                &self.reader,
                &self.target.path,
                &layout,
                &placement,
                self.identity.clone(),
            )?;
            let journal = self.create_journal(args, &prepared)?;
            if let Some(note) = &placement.note {
                eprintln!("note: {note}");
            }
            for note in &prepared.notes {
                eprintln!("note: {note}");
            }
            let code = self.finish(journal, args.json)?;
            if code != EXIT_OK {
                return Ok(code);
            }
        }
        Ok(EXIT_OK)
    }

    fn create_journal(&self, args: &Args, prepared: &Prepared) -> anyhow::Result<Journal> {
        let path = self.journal_path(args, prepared.record.partition);
        if path.exists() {
            let old = Journal::open(&path)?;
            if old.state.phase != Phase::Done {
                bail!(
                    "{} holds another unfinished move: finish it or pass another --journal",
                    path.display()
                );
            }
            std::fs::remove_file(&path)?;
        }
        // The record first: one pointing at a journal not yet made is
        // ignored, while a journal with no record could be missed.
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let absolute = std::fs::canonicalize(dir)?.join(path.file_name().unwrap_or_default());
        state::add(&absolute, &prepared.record)
            .context("recording the move in the state directory")?;
        Ok(Journal::create(&path, prepared.record.clone())?)
    }

    /// Run (or resume) the move in `journal` to the end, or to the chunk
    /// where a SIGINT or SIGTERM stopped it (its exit code returned).
    fn finish(&self, mut journal: Journal, json: bool) -> anyhow::Result<u8> {
        exclusive::check_unused(&self.root, &self.target)?;
        let writer = open_writer(&self.target)?;
        let m = journal.record.clone();
        let resumed = journal.state;
        if resumed.sequence > 1 {
            eprintln!(
                "resuming the move of partition {} ({:?}, {} of {} chunks done)",
                m.partition,
                resumed.phase,
                resumed.cursor,
                m.chunks()
            );
        }
        let bar = progress(2 * m.bytes());
        let started = Instant::now();
        let stop = || interrupted().is_some();
        let result = copy::run_until(&writer, &mut journal, &mut |n| bar.inc(n), &stop);
        bar.finish_and_clear();
        match result {
            Err(MoveError::Interrupted { verifying, chunks }) => {
                eprintln!("{}", self.interrupted_message(&journal, verifying, chunks));
                return Ok(interrupted().unwrap_or(EXIT_ERROR));
            }
            Err(err) => return Err(moved_error(err, &journal)),
            Ok(()) => {}
        }
        if self.target.kind == TargetKind::Disk {
            self.tell_kernel(&writer, &m);
        }
        journal.commit(Phase::Done, m.chunks(), None)?;
        let absolute = std::fs::canonicalize(journal.path())?;
        state::remove(&absolute)?;
        let seconds = started.elapsed().as_secs_f64();
        // Direct writes dropped the reader's cached pages: this sees the moved bytes.
        let warnings: Vec<String> =
            self.fat_warning(m.partition, m.new_start, m.sectors).into_iter().collect();
        let done = Done {
            target: &self.target.path,
            partition: m.partition,
            old_start: m.old_start,
            new_start: m.new_start,
            bytes: m.bytes(),
            seconds,
            contents: m.contents.as_deref(),
            journal: journal.path(),
            verified: true,
        };
        if json {
            super::emit_json(&done)?;
            // The schema has no place for it; stderr is not the document.
            for w in &warnings {
                eprintln!("warning: {w}");
            }
        } else {
            super::emit(&format!(
                "{}: moved partition {} from LBA {} to {} ({} in {seconds:.1} s), verified, table written\n",
                self.target.path.display(),
                m.partition,
                m.old_start,
                m.new_start,
                human_size(m.bytes())
            ))?;
            for w in &warnings {
                super::emit(&format!("  warning: {w}\n"))?;
            }
        }
        Ok(EXIT_OK)
    }

    /// What a stopped move left: the disk's state and how to finish it.
    fn interrupted_message(&self, journal: &Journal, verifying: bool, chunks: u64) -> String {
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

    /// Swap the kernel's partition for the moved one, if it had it; the
    /// table on the disk is already right, so failure only warns.
    fn tell_kernel(&self, writer: &File, m: &Move) {
        let Some(name) = &self.target.name else { return };
        let known =
            device::kernel_partitions(&self.root, name).iter().any(|k| k.number == m.partition);
        let part = KernelPart {
            number: m.partition,
            start: m.new_start * m.sector_size,
            length: m.sectors * m.sector_size,
        };
        // Added even when the kernel lacks it: a rerun after a crash mid-table
        // finds a disk the kernel scanned while its table was torn (the kernel
        // lab's crash states). A disk that takes no partitions (device-mapper,
        // seen on 6.1 in the lab) refuses with EINVAL: nothing to tell it.
        let told = exclusive::update_partitions(writer, &self.target.path, &[m.partition], &[part]);
        match told {
            Err(e) if known || !e.is_no_partitions() => eprintln!(
                "warning: the kernel still sees the old partition {} ({e}); run `partx -u {}` or reboot",
                m.partition,
                self.target.path.display()
            ),
            _ => {}
        }
    }
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
    let mut paths: Vec<PathBuf> = std::fs::read_dir(state::journal_dir())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "journal"))
        .collect();
    if let Some(target) = &args.target {
        paths.extend(Disk::open(root, target, args)?.default_journals());
    }
    paths.extend(args.journal.clone());
    paths.sort();
    paths.dedup();
    let mut found = 0;
    for path in paths {
        // Not a journal, or unreadable: not ours to delete.
        let Ok(j) = Journal::open(&path) else { continue };
        let m = &j.record;
        let what = format!(
            "partition {} of {}, LBA {} -> {}",
            m.partition,
            m.target.display(),
            m.old_start,
            m.new_start
        );
        if j.state.phase != Phase::Done {
            eprintln!(
                "kept {}: its move ({what}) is unfinished: finish it with `{}`",
                path.display(),
                state::finish_command(&m.target, m.partition)
            );
            continue;
        }
        found += 1;
        drop(j);
        if !args.yes {
            super::emit(&format!("would remove {} ({what}, finished)\n", path.display()))?;
        } else if state::remove_finished(&path)?.is_some() {
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

/// O_DIRECT where the file system allows it (tmpfs does not), exclusive
/// for block devices.
fn open_writer(target: &Target) -> anyhow::Result<File> {
    match open_direct(&target.path, Mode::Write, false) {
        Ok(f) => Ok(f),
        Err(_) if target.kind == TargetKind::Image => Ok(exclusive::open_for_writing(target)?),
        Err(e) => Err(e.into()),
    }
}

fn moved_error(err: MoveError, journal: &Journal) -> anyhow::Error {
    anyhow::anyhow!(
        "{err}\nthe move stopped; the journal {} is intact: once the cause is fixed, rerun the \
         same command to finish it",
        journal.path().display()
    )
}

/// Whether any of sectors `lbas` holds a non-zero byte, read a MiB at a
/// time; unreadable counts as holding data.
fn holds_data(file: &File, lbas: std::ops::Range<u64>, ss: u64) -> bool {
    use std::os::unix::fs::FileExt;
    let (Some(mut at), Some(end)) = (lbas.start.checked_mul(ss), lbas.end.checked_mul(ss)) else {
        return true;
    };
    let mut buf = vec![0u8; 1 << 20];
    while at < end {
        let len = (end - at).min(buf.len() as u64) as usize;
        if file.read_exact_at(&mut buf[..len], at).is_err() || buf[..len].iter().any(|&b| b != 0) {
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
fn stale_copy(file: &File, gap: std::ops::Range<u64>, p: &table::Partition, ss: u64) -> bool {
    use std::os::unix::fs::FileExt;
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
        |buf: &mut [u8], at: Option<u64>| at.is_some_and(|at| file.read_exact_at(buf, at).is_ok());
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

/// Bytes per second reading up to 64 MiB (at most half a second) of the
/// partition: the estimate's basis. None when it cannot be read.
fn read_rate(path: &Path, offset: u64, bytes: u64) -> Option<f64> {
    use std::os::unix::fs::FileExt;
    let file = open_direct(path, Mode::Read, false).ok().or_else(|| File::open(path).ok())?;
    let mut buf = blkalign::bench::io::AlignedBuf::new(4 << 20, 0);
    let (started, mut done) = (Instant::now(), 0u64);
    while done < bytes.min(64 << 20) && started.elapsed().as_secs_f64() < 0.5 {
        let len = (bytes - done).min(4 << 20) as usize;
        file.read_exact_at(&mut buf.bytes_mut()[..len], offset + done).ok()?;
        done += len as u64;
    }
    let secs = started.elapsed().as_secs_f64();
    (done > 0 && secs > 0.0).then(|| done as f64 / secs)
}

fn progress(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let template = "{bar:40} {bytes}/{total_bytes} copied and verified, {bytes_per_sec}, ETA {eta}";
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar
}

#[derive(Serialize, Default)]
struct Planned {
    partition: u32,
    contents: Option<String>,
    old_start: Option<u64>,
    new_start: Option<u64>,
    sectors: Option<u64>,
    direction: Option<blkalign::realign::Direction>,
    bytes: u64,
    shift_bytes: u64,
    /// Each chunk passes through the journal (the shift is under a chunk).
    journaled: bool,
    /// First and last free LBA the partition may use.
    room: Option<[u64; 2]>,
    journal: Option<PathBuf>,
    read_rate_bytes_per_second: Option<f64>,
    estimated_seconds: Option<f64>,
    notes: Vec<String>,
    /// Why this partition cannot be moved.
    refused: Option<String>,
}

#[derive(Serialize)]
struct PlanOutput<'a> {
    target: &'a Path,
    dry_run: bool,
    moves: Vec<Planned>,
}

#[derive(Serialize)]
struct Done<'a> {
    target: &'a Path,
    partition: u32,
    old_start: u64,
    new_start: u64,
    bytes: u64,
    seconds: f64,
    contents: Option<&'a str>,
    journal: &'a Path,
    verified: bool,
}

fn print_plan(out: &PlanOutput, json: bool) -> anyhow::Result<()> {
    if json {
        return super::emit_json(out);
    }
    let mut text = String::new();
    for m in &out.moves {
        let head = format!("{}: partition {}", out.target.display(), m.partition);
        if let Some(why) = &m.refused {
            text += &format!("{head}: cannot move: {why}\n");
            continue;
        }
        if m.direction.is_none() {
            text += &format!("{head}: {}\n", m.notes.join("; "));
            continue;
        }
        let (Some(old_start), Some(new_start), Some(sectors)) =
            (m.old_start, m.new_start, m.sectors)
        else {
            continue;
        };
        let contents = m.contents.as_deref().unwrap_or("contents not recognised");
        let shift = new_start.abs_diff(old_start);
        let direction = if new_start > old_start { "right" } else { "left" };
        text += &format!(
            "{head} ({contents}, {}): LBA {} -> {} ({direction} by {shift} sector{})\n",
            human_size(m.bytes),
            old_start,
            new_start,
            if shift == 1 { "" } else { "s" }
        );
        if let Some([first, last]) = m.room {
            text += &format!(
                "  room: LBA {first}-{last} is free for it; it needs LBA {}-{}\n",
                new_start,
                new_start + sectors - 1
            );
        }
        text += if m.journaled {
            "  the shift is smaller than a chunk: each chunk is saved in the journal before it is written\n"
        } else {
            "  the shift is at least a chunk: chunks go straight to their destination\n"
        };
        if let Some(j) = &m.journal {
            text += &format!("  journal: {}\n", j.display());
        }
        if let (Some(secs), Some(rate)) = (m.estimated_seconds, m.read_rate_bytes_per_second) {
            text += &format!(
                "  estimated {secs:.1} s (the partition reads at {}/s here)\n",
                human_size(rate as u64)
            );
        }
        for note in &m.notes {
            text += &format!("  note: {note}\n");
        }
    }
    Ok(super::emit(&text)?)
}

#[derive(Serialize)]
struct Status<'a> {
    journal: &'a Path,
    target: &'a Path,
    partition: u32,
    old_start: u64,
    new_start: u64,
    phase: Phase,
    chunks_done: u64,
    chunks: u64,
    bytes: u64,
    finished: bool,
}

fn status(path: &Path, json: bool) -> anyhow::Result<u8> {
    let journal = Journal::open(path)?;
    print_status(&journal, json)?;
    Ok(if journal.state.phase == Phase::Done { EXIT_OK } else { EXIT_PROBLEM })
}

fn print_status(j: &Journal, json: bool) -> anyhow::Result<()> {
    let m = &j.record;
    let s = Status {
        journal: j.path(),
        target: &m.target,
        partition: m.partition,
        old_start: m.old_start,
        new_start: m.new_start,
        phase: j.state.phase,
        chunks_done: j.state.cursor,
        chunks: m.chunks(),
        bytes: m.bytes(),
        finished: j.state.phase == Phase::Done,
    };
    if json {
        return super::emit_json(&s);
    }
    let stage = match j.state.phase {
        Phase::Copying => format!("copying: {} of {} chunks moved", s.chunks_done, s.chunks),
        Phase::Verified => "copied and verified; the new table is not written yet".into(),
        Phase::TableWritten => "table written; the kernel has not been told yet".into(),
        Phase::Done => "finished".into(),
    };
    Ok(super::emit(&format!(
        "{}: partition {} of {} from LBA {} to {} ({}): {stage}\n",
        j.path().display(),
        m.partition,
        m.target.display(),
        m.old_start,
        m.new_start,
        human_size(m.bytes())
    ))?)
}
