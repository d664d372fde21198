//! `blkalign realign --at-boot`: a move of partitions the running system
//! holds (its root), made at the next boot from the initramfs. Scheduling,
//! cancelling and finishing run on the installed system; `--at-boot-run`
//! is what the initramfs runs.

use super::args::{open_session, options, Args};
use super::words;
use crate::cli::{emit, EXIT_ERROR, EXIT_OK, EXIT_PROBLEM};
use anyhow::{bail, Context};
use blkalign::device::{SysRoot, TargetKind};
use blkalign::realign::boot::{
    self, Action, BootPlan, BootResult, BootState, MoveState, Ran, Shift, Slot,
};
use blkalign::realign::initramfs::{self, Hook};
use blkalign::realign::journal::Phase;
use blkalign::realign::session::{Done, Events, Session};
use blkalign::realign::state::Store;
use blkalign::realign::Move;
use blkalign::units::human_size;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the initramfs mounts the journal's file system.
const MOUNT: &str = "/run/blkalign-journal";
const UNIT: &str = "blkalign-at-boot.service";

fn sysroot(args: &Args) -> PathBuf {
    args.sysroot.clone().unwrap_or_else(|| PathBuf::from("/"))
}

/// The state directory of the system at `sysroot`.
fn store(sysroot: &Path) -> Store {
    if sysroot == Path::new("/") {
        Store::default()
    } else {
        Store::new(sysroot.join("var/lib/blkalign"))
    }
}

/// The journal directory as the installed system sees it.
fn journal_dir(sysroot: &Path, plan: &BootPlan) -> PathBuf {
    let point = plan.journal.mountpoint.strip_prefix("/").unwrap_or(&plan.journal.mountpoint);
    sysroot.join(point).join(boot::DIR)
}

/// `realign DISK [N...] --at-boot [--yes]`: the plan and what the boot will
/// do; with --yes, record it, install the hook and rebuild the initramfs.
pub fn schedule(args: &Args, root: SysRoot, path: &Path) -> anyhow::Result<u8> {
    let sysroot = sysroot(args);
    let store = store(&sysroot);
    let session = open_session(root.clone(), path, args)?;
    if session.target().kind != TargetKind::Disk {
        bail!(
            "{} is not a disk of this system: a move at boot is for the disks a system runs \
             from; an image or an unused disk is moved now with `blkalign realign {} --yes`",
            path.display(),
            path.display()
        );
    }
    let wanted = session.wanted(&args.partitions)?;
    if wanted.is_empty() {
        eprintln!("nothing to move: no partition's data is off a physical sector boundary");
        return Ok(EXIT_OK);
    }
    let disk = session.target().name.clone().unwrap_or_default();
    let place = boot::choose_place(&root, &sysroot, &disk, &wanted, args.journal_on.as_deref())
        .map_err(anyhow::Error::msg)?;
    let opts = options(args)?;
    let mut planned = session.plan(&opts, &wanted)?;
    // What the boot uses, not the default place the plan names.
    let point = place.mountpoint.strip_prefix("/").unwrap_or(&place.mountpoint);
    for p in planned.iter_mut().filter(|p| p.journal.is_some()) {
        p.journal = Some(BootPlan::journal(&sysroot.join(point).join(boot::DIR), p.partition));
    }
    let generator = initramfs::detect(&sysroot)?;
    emit(&planned.iter().map(|m| m.describe(path)).collect::<String>())?;
    if planned.iter().any(|m| m.refused.is_some()) {
        eprintln!("refused: nothing scheduled");
        return Ok(EXIT_ERROR);
    }
    let moves: Vec<Shift> = planned
        .iter()
        .filter_map(|p| {
            Some(Shift { partition: p.partition, from: p.old_start?, to: p.new_start? })
        })
        .collect();
    if moves.is_empty() {
        return Ok(EXIT_OK);
    }
    if let Some(n) = session.hibernation_image()? {
        bail!(
            "partition {n} holds a hibernation image: resuming it after a move would bring back a \
             kernel that knows the old layout. Resume (or discard it with `swapoff`/`mkswap`) \
             first"
        );
    }
    let moved: Vec<u32> = moves.iter().map(|s| s.partition).collect();
    let grub_redirect = boot::boot_moves(&root, &sysroot, &disk, &moved);
    let cmdline = match grub_redirect {
        true => Some(grub_for_the_move(path, &sysroot)?),
        false => None,
    };
    let kernel = match &args.kernel {
        Some(k) => k.clone(),
        None => initramfs::next_kernel(&sysroot)?,
    };
    // Refused now, before anything is written, where there is no image.
    initramfs::image(&sysroot, generator, &kernel)?;
    let layout = session.layout()?;
    let plan = BootPlan {
        disk: path.to_path_buf(),
        identity: session.identity().clone(),
        kernel_serial: boot::kernel_serial(&root, &disk, session.identity()),
        table: layout
            .partitions
            .iter()
            .map(|p| Slot { partition: p.number, start: p.start, size: p.size })
            .collect(),
        moves,
        journal: place,
        generator,
        kernel,
        grub_redirect,
        scheduled: boot::now(),
    };
    let gpt = layout.label == blkalign::table::Label::Gpt;
    let dir = journal_dir(&sysroot, &plan);
    eprintln!(
        "at the next boot of kernel {}, {} moves {}, journaled in {} ({} {}, UUID {}). \
         It refuses, writing nothing and booting on, if the disk is not this one (size, serial, \
         WWN) or its table changed; an I/O error stops the boot in the initramfs shell with the \
         commands that finish or undo the move",
        plan.kernel,
        plan.generator.hook_point(),
        describe_moves(&plan.moves),
        dir.display(),
        plan.journal.fstype,
        plan.journal.device.display(),
        plan.journal.uuid
    );
    if plan.grub_redirect {
        eprintln!(
            "/boot is on a partition that moves: until the move is finished GRUB is installed \
             onto {} (`grub-install --boot-directory`) with copies of the kernel and the \
             initramfs, so that a power cut mid-move still boots; --finish installs it back to \
             /boot",
            dir.display()
        );
    }
    if !args.yes {
        eprintln!("dry run: nothing scheduled; add --yes to schedule it and rebuild the initramfs");
        return Ok(EXIT_OK);
    }
    let plan_path = store.boot_plan();
    if plan_path.exists() {
        bail!(
            "a move is already scheduled ({}): `blkalign realign --at-boot --cancel --yes` first",
            plan_path.display()
        );
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    BootResult::remove(&dir)?;
    write_plan(&plan_path, &plan)?;
    let binary = std::env::current_exe().context("finding the blkalign binary")?;
    let setup =
        Setup { sysroot: &sysroot, plan: &plan, plan_path: &plan_path, dir: &dir, disk: path };
    let command = match setup.install(&binary, cmdline.as_deref(), gpt) {
        Ok(c) => c,
        Err(e) => {
            setup.undo().with_context(|| {
                format!(
                    "scheduling failed ({e:#}), and taking it back failed too: the plan stays at \
                     {}, and the initramfs may still carry the hook; once the cause is fixed, \
                     `blkalign realign --at-boot --cancel --yes`",
                    plan_path.display()
                )
            })?;
            return Err(e.context(
                "nothing is scheduled (the initramfs is rebuilt without the hook, GRUB as it was)",
            ));
        }
    };
    let unit = install_unit(&sysroot, &binary)?;
    eprintln!("rebuilt the initramfs: {command}");
    emit(&format!(
        "scheduled: {} at the next boot of kernel {}. {}\n",
        describe_moves(&plan.moves),
        plan.kernel,
        match unit {
            true => format!(
                "Once booted, {UNIT} runs `blkalign realign --at-boot --finish`, which reports \
                 the result and takes the hook out of the initramfs again"
            ),
            false => "Once booted, run `blkalign realign --at-boot --finish`: it reports the \
                      result and takes the hook out of the initramfs again"
                .into(),
        }
    ))?;
    Ok(EXIT_OK)
}

/// GRUB for BIOS in the MBR, which a move can redirect, and the command
/// line it boots with; else why a move of /boot cannot be made safe.
fn grub_for_the_move(disk: &Path, sysroot: &Path) -> anyhow::Result<String> {
    let mut mbr = [0u8; 512];
    fs::File::open(disk)
        .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut mbr, 0))
        .with_context(|| format!("reading {}", disk.display()))?;
    if !blkalign::realign::grub::in_mbr(&mbr) {
        bail!(
            "/boot is on a partition that moves, and the boot loader is not GRUB for BIOS in the \
             MBR (UEFI, or another loader): a power cut mid-move would leave it unable to load \
             the kernel. Put /boot (or a copy) on another partition first"
        );
    }
    blkalign::realign::grub::cmdline(sysroot).context(
        "no kernel command line found in /boot/grub/grub.cfg: needed to boot from the journal's \
         file system during the move",
    )
}

/// What `--at-boot --yes` sets up on the installed system, and takes back.
struct Setup<'a> {
    sysroot: &'a Path,
    plan: &'a BootPlan,
    plan_path: &'a Path,
    dir: &'a Path,
    disk: &'a Path,
}

impl Setup<'_> {
    /// The hook, the rebuilt initramfs, GRUB on the journal's file system
    /// where /boot moves; then the room left for the journal.
    fn install(&self, binary: &Path, cmdline: Option<&str>, gpt: bool) -> anyhow::Result<String> {
        let modules = [boot::fs_module(&self.plan.journal.fstype)];
        let hook = Hook { binary, plan: self.plan_path, modules: &modules };
        let generator = self.plan.generator;
        initramfs::install(self.sysroot, generator, &hook)?;
        let command = initramfs::rebuild(self.sysroot, generator, &self.plan.kernel)?;
        if let Some(cmdline) = cmdline {
            let grub = blkalign::realign::grub::redirect(&blkalign::realign::grub::Redirect {
                sysroot: self.sysroot,
                disk: self.disk,
                dir: self.dir,
                uuid: &self.plan.journal.uuid,
                fstype: &self.plan.journal.fstype,
                gpt,
                kernel: &self.plan.kernel,
                cmdline,
            })?;
            eprintln!("installed GRUB for the move: {grub}");
        }
        boot::room_for_journal(self.dir).map_err(anyhow::Error::msg)?;
        Ok(command)
    }

    /// Everything `install` may have done, taken back.
    fn undo(&self) -> anyhow::Result<()> {
        take_out(self.sysroot, self.plan, Some(self.disk), self.dir)?;
        fs::remove_file(self.plan_path).ok();
        Ok(())
    }
}

/// The hook out, the initramfs rebuilt, GRUB back to /boot (on `disk`,
/// where the plan had moved it), the unit gone. Returns the rebuild.
fn take_out(
    sysroot: &Path,
    plan: &BootPlan,
    disk: Option<&Path>,
    dir: &Path,
) -> anyhow::Result<String> {
    initramfs::remove(sysroot)?;
    let command = initramfs::rebuild(sysroot, plan.generator, &plan.kernel)?;
    if let (true, Some(disk)) = (plan.grub_redirect, disk) {
        let grub = blkalign::realign::grub::restore(sysroot, disk, dir, &plan.kernel)?;
        eprintln!("installed GRUB back to /boot: {grub}");
    }
    remove_unit(sysroot);
    Ok(command)
}

fn describe_moves(moves: &[Shift]) -> String {
    let each: Vec<String> = moves
        .iter()
        .map(|s| format!("partition {} from LBA {} to {}", s.partition, s.from, s.to))
        .collect();
    each.join(", ")
}

fn write_plan(path: &Path, plan: &BootPlan) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = path.with_extension("json.tmp");
    fs::write(&tmp, serde_json::to_vec_pretty(plan)?)
        .and_then(|()| fs::File::open(&tmp)?.sync_all())
        .and_then(|()| fs::rename(&tmp, path))
        .and_then(|()| blkalign::device::exclusive::sync_parent(path))
        .with_context(|| format!("writing {}", path.display()))
}

/// A oneshot unit that finishes after the boot, where systemd is the init.
fn install_unit(sysroot: &Path, binary: &Path) -> anyhow::Result<bool> {
    let units = sysroot.join("etc/systemd/system");
    if !units.is_dir() {
        return Ok(false);
    }
    let text = format!(
        "[Unit]\n\
         Description=Finish the partition move blkalign made at boot\n\
         ConditionPathExists=/var/lib/blkalign/at-boot.json\n\
         After=local-fs.target\n\n\
         [Service]\n\
         Type=oneshot\n\
         ExecStart={} realign --at-boot --finish\n\
         SuccessExitStatus=1\n\n\
         [Install]\n\
         WantedBy=multi-user.target\n",
        binary.display()
    );
    fs::write(units.join(UNIT), text)?;
    let wants = units.join("multi-user.target.wants");
    fs::create_dir_all(&wants)?;
    let link = wants.join(UNIT);
    if !link.exists() {
        std::os::unix::fs::symlink(Path::new("/etc/systemd/system").join(UNIT), link)?;
    }
    Ok(true)
}

fn remove_unit(sysroot: &Path) {
    let units = sysroot.join("etc/systemd/system");
    fs::remove_file(units.join("multi-user.target.wants").join(UNIT)).ok();
    fs::remove_file(units.join(UNIT)).ok();
}

/// The scheduled plan, or the last one finished.
fn read_plan(store: &Store) -> anyhow::Result<Option<(BootPlan, bool)>> {
    for (path, scheduled) in [(store.boot_plan(), true), (store.last_boot_plan(), false)] {
        if path.exists() {
            return Ok(Some((BootPlan::read(&path)?, scheduled)));
        }
    }
    Ok(None)
}

/// `realign --at-boot`: where the scheduled (or last) move at boot stands.
pub fn status(args: &Args) -> anyhow::Result<u8> {
    let sysroot = sysroot(args);
    let Some((plan, scheduled)) = read_plan(&store(&sysroot))? else {
        eprintln!("no move is scheduled for boot");
        return Ok(EXIT_OK);
    };
    let dir = journal_dir(&sysroot, &plan);
    let states = plan.states(&dir);
    let result = BootResult::read(&dir);
    let mut text = format!(
        "{} move at boot on {} (kernel {}), journals in {}:\n",
        if scheduled { "scheduled" } else { "finished" },
        plan.disk.display(),
        plan.kernel,
        dir.display()
    );
    for (s, state) in &states {
        text += &format!(
            "  partition {} from LBA {} to {}: {}\n",
            s.partition,
            s.from,
            s.to,
            match state {
                MoveState::Scheduled => "not begun",
                MoveState::Unfinished => "unfinished (the next boot resumes it)",
                MoveState::Done => "done",
                MoveState::Undone => "undone",
            }
        );
    }
    text += &match &result {
        None => "  no boot has run it yet\n".to_string(),
        Some(r) => format!(
            "  last boot: {}{} ({} boot{})\n",
            state_word(r.state),
            r.reason.as_ref().map(|w| format!(": {w}")).unwrap_or_default(),
            r.boots,
            if r.boots == 1 { "" } else { "s" }
        ),
    };
    emit(&text)?;
    let all_done = states.iter().all(|(_, s)| *s == MoveState::Done);
    Ok(if all_done { EXIT_OK } else { EXIT_PROBLEM })
}

fn state_word(s: BootState) -> &'static str {
    match s {
        BootState::Moving => "moving (cut off: the next boot resumes)",
        BootState::Done => "done",
        BootState::Refused => "refused, nothing written",
        BootState::Stopped => "stopped on an error",
        BootState::Undone => "undone from the initramfs shell",
    }
}

/// The move scheduled for boot on the system of `args`, with where its
/// plan and journals are; None (said) when there is none.
struct Scheduled {
    sysroot: PathBuf,
    store: Store,
    plan_path: PathBuf,
    plan: BootPlan,
    dir: PathBuf,
}

fn scheduled(args: &Args) -> anyhow::Result<Option<Scheduled>> {
    let sysroot = sysroot(args);
    let store = store(&sysroot);
    let plan_path = store.boot_plan();
    if !plan_path.exists() {
        eprintln!("no move is scheduled for boot: nothing to do");
        return Ok(None);
    }
    let plan = BootPlan::read(&plan_path)?;
    let dir = journal_dir(&sysroot, &plan);
    Ok(Some(Scheduled { sysroot, store, plan_path, plan, dir }))
}

/// `realign --at-boot --finish`: after the boot, report what it did and,
/// once nothing is left for a boot to do, take the hook out again.
pub fn finish(args: &Args, root: SysRoot) -> anyhow::Result<u8> {
    let Some(Scheduled { sysroot, store, plan_path, plan, dir }) = scheduled(args)? else {
        return Ok(EXIT_OK);
    };
    let states = plan.states(&dir);
    let result = BootResult::read(&dir);
    if let Some((s, _)) = states.iter().find(|(_, st)| *st == MoveState::Unfinished) {
        eprintln!(
            "the move of partition {} is unfinished (journal {}): the next boot resumes it; the \
             hook stays",
            s.partition,
            BootPlan::journal(&dir, s.partition).display()
        );
        return Ok(EXIT_PROBLEM);
    }
    let refused =
        result.as_ref().filter(|r| matches!(r.state, BootState::Refused | BootState::Undone));
    let all_done = states.iter().all(|(_, s)| *s == MoveState::Done);
    if !all_done && refused.is_none() {
        eprintln!(
            "no boot has run the move yet (the initramfs of kernel {} carries it): nothing to \
             finish",
            plan.kernel
        );
        return Ok(EXIT_PROBLEM);
    }
    let command = take_out(&sysroot, &plan, grub_disk(&root, &plan, &dir)?.as_deref(), &dir)?;
    fs::rename(&plan_path, store.last_boot_plan())
        .with_context(|| format!("renaming {}", plan_path.display()))?;
    eprintln!("took the hook out and rebuilt the initramfs: {command}");
    if let Some(r) = refused {
        emit(&match r.state {
            BootState::Undone => "the move at boot was undone: the partition is as it was\n".into(),
            _ => format!(
                "the move at boot was refused and nothing was written: {}\n",
                r.reason.as_deref().unwrap_or("no reason recorded")
            ),
        })?;
        return Ok(EXIT_PROBLEM);
    }
    emit(&format!("moved at boot: {}\n", describe_moves(&plan.moves)))?;
    Ok(EXIT_OK)
}

/// The disk whose GRUB the plan moved to the journal's directory, found by
/// its identity; None where GRUB was not moved.
fn grub_disk(root: &SysRoot, plan: &BootPlan, dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    if !plan.grub_redirect {
        return Ok(None);
    }
    let [disk] = boot::find_disks(root, plan).try_into().map_err(|found: Vec<PathBuf>| {
        anyhow::anyhow!(
            "{} disks are the one the move was scheduled on: GRUB still boots from {} until \
                 this runs with that disk attached",
            found.len(),
            dir.display()
        )
    })?;
    Ok(Some(disk))
}

/// `realign --at-boot --cancel`: take back a move no boot has begun.
pub fn cancel(args: &Args, root: SysRoot) -> anyhow::Result<u8> {
    let Some(Scheduled { sysroot, plan_path, plan, dir, .. }) = scheduled(args)? else {
        return Ok(EXIT_OK);
    };
    if let Some((s, st)) = plan.states(&dir).into_iter().find(|(_, st)| *st != MoveState::Scheduled)
    {
        bail!(
            "a boot already began the move of partition {} ({st:?}): it can no longer be \
             cancelled; `blkalign realign --at-boot --finish` once it is done",
            s.partition
        );
    }
    if !args.yes {
        eprintln!(
            "dry run: --cancel --yes removes the plan and the hook and rebuilds the initramfs of \
             kernel {}",
            plan.kernel
        );
        return Ok(EXIT_OK);
    }
    let command = take_out(&sysroot, &plan, grub_disk(&root, &plan, &dir)?.as_deref(), &dir)?;
    fs::remove_file(&plan_path).with_context(|| format!("removing {}", plan_path.display()))?;
    eprintln!("rebuilt the initramfs: {command}");
    emit(&format!("cancelled: {}\n", describe_moves(&plan.moves)))?;
    Ok(EXIT_OK)
}

/// `realign --at-boot-run PLAN [--undo|--rescue]`, in the initramfs: 0
/// done (or nothing to do), 1 refused with nothing written or undone (the
/// boot goes on), 2 a move stopped (the boot script drops to the shell).
pub fn run_in_initramfs(plan_path: &Path, args: &Args, root: SysRoot) -> anyhow::Result<u8> {
    let plan = match BootPlan::read(plan_path) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("blkalign: no move at this boot: {e}");
            return Ok(EXIT_PROBLEM);
        }
    };
    let action = match (args.undo, args.rescue) {
        (true, _) => Action::Undo,
        (_, true) => Action::Rescue,
        _ => Action::Move,
    };
    eprintln!("blkalign: the move at boot of {}", describe_moves(&plan.moves));
    let mount = Path::new(MOUNT);
    let mut drivers = args.coldplug.then(|| Coldplug::new(&root));
    if let Err(why) = mount_journal(&root, &plan, mount, &mut drivers) {
        eprintln!("blkalign: refused, nothing written: {why:#}; booting on the old layout");
        return Ok(EXIT_PROBLEM);
    }
    let dir = mount.join(boot::DIR);
    let before = BootResult::read(&dir);
    let earlier = before.as_ref().map(|r| r.state);
    if action == Action::Move && matches!(earlier, Some(BootState::Done | BootState::Undone)) {
        eprintln!(
            "blkalign: nothing to do: the move was {} at an earlier boot",
            match earlier {
                Some(BootState::Done) => "done",
                _ => "undone",
            }
        );
        return unmount(mount, EXIT_OK);
    }
    let boots = before.map_or(0, |r| r.boots).saturating_add(1);
    let write = |state, reason: Option<String>| {
        BootResult { state, reason, boots, when: boot::now() }.write(&dir)
    };
    if let Err(e) = fs::create_dir_all(&dir).map_err(anyhow::Error::from).and_then(|()| {
        write(BootState::Moving, None)?;
        Ok(())
    }) {
        eprintln!("blkalign: refused, nothing written: {e:#}; booting on the old layout");
        return unmount(mount, EXIT_PROBLEM);
    }
    // Once the disk may have been written, a result that cannot be
    // recorded is said, not a reason to stop the boot.
    let record = |state, reason: Option<String>| {
        if let Err(e) = write(state, reason) {
            eprintln!("blkalign: warning: the result was not recorded: {e}");
        }
    };
    wait_for(&mut drivers, || (boot::find_disks(&root, &plan).len() == 1).then_some(()));
    match boot::run(&root, &plan, &dir, action, &mut Console::default()) {
        Ok(Ran::Done) => {
            record(BootState::Done, None);
            eprintln!("blkalign: {} done; booting on", describe_moves(&plan.moves));
            unmount(mount, EXIT_OK)
        }
        Ok(Ran::Undone) => {
            record(BootState::Undone, None);
            eprintln!("blkalign: the move is undone, the partition as it was; booting on");
            unmount(mount, EXIT_PROBLEM)
        }
        Ok(Ran::Refused(why)) => {
            record(BootState::Refused, Some(why.clone()));
            eprintln!("blkalign: refused, nothing written: {why}; booting on the old layout");
            unmount(mount, EXIT_PROBLEM)
        }
        Err(e) => {
            let e = words::session_error(&e).unwrap_or_else(|| e.to_string());
            let states = plan.states(&dir);
            if !states.iter().any(|(_, st)| *st == MoveState::Unfinished) {
                record(BootState::Refused, Some(e.clone()));
                eprintln!("blkalign: refused, nothing written: {e}; booting on the old layout");
                return unmount(mount, EXIT_PROBLEM);
            }
            record(BootState::Stopped, Some(e.clone()));
            // The journal's file system stays mounted for the commands.
            let again = format!("blkalign realign --at-boot-run {}", plan_path.display());
            eprintln!(
                "blkalign: {e}\nblkalign: from this shell, `{again}` finishes the move (once the \
                 cause is fixed), `{again} --undo` puts the partition back as it was, `{again} \
                 --rescue` finishes it writing zeros for sectors that stay unreadable; then \
                 `exit` boots on"
            );
            Ok(EXIT_ERROR)
        }
    }
}

/// The journal's file system on `mount`, found by its UUID, unless a run
/// stopped earlier left it there (a rerun from the shell).
fn mount_journal(
    root: &SysRoot,
    plan: &BootPlan,
    mount: &Path,
    drivers: &mut Option<Coldplug>,
) -> anyhow::Result<()> {
    if blkalign::device::exclusive::mount_table().iter().any(|m| m.point == mount) {
        return Ok(());
    }
    let device =
        wait_for(drivers, || boot::find_fs(root, &plan.journal.uuid)).with_context(|| {
            format!("the journal's file system (UUID {}) was not found", plan.journal.uuid)
        })?;
    fs::create_dir_all(mount)?;
    let flags = rustix::mount::MountFlags::empty();
    rustix::mount::mount(&device, mount, plan.journal.fstype.as_str(), flags, None)
        .with_context(|| format!("mounting {} on {MOUNT}", device.display()))
}

fn unmount(mount: &Path, code: u8) -> anyhow::Result<u8> {
    rustix::fs::sync();
    rustix::mount::unmount(mount, rustix::mount::UnmountFlags::empty())
        .with_context(|| format!("unmounting {}", mount.display()))?;
    Ok(code)
}

/// Poll for as long as initramfs-tools waits for the root device, 30 s or
/// the kernel's `rootdelay=` if longer: a disk behind a slow controller or
/// USB may appear after udev settled. Before udev, `drivers` loads the
/// drivers of the devices that appeared since the last poll.
fn wait_for<T>(drivers: &mut Option<Coldplug>, mut find: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    let cmdline = fs::read_to_string("/proc/cmdline").unwrap_or_default();
    let bound = rootdelay(&cmdline).unwrap_or_default().max(Duration::from_secs(30));
    loop {
        if let Some(coldplug) = drivers.as_mut() {
            coldplug.load();
        }
        if let Some(found) = find() {
            return Some(found);
        }
        if start.elapsed() > bound {
            return None;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The kernel command line's `rootdelay=` seconds, the last given, as
/// initramfs-tools reads it: digits and dots, anything else counts as none.
fn rootdelay(cmdline: &str) -> Option<Duration> {
    let value =
        cmdline.split_whitespace().filter_map(|w| w.strip_prefix("rootdelay=")).next_back()?;
    if !value.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    Duration::try_from_secs_f64(value.parse().ok()?).ok()
}

/// What udev's coldplug does for drivers, before udev runs: dracut's
/// systemd would otherwise see the partitions, and a root partition that
/// goes away under its waiting mount (the move re-adds it at its new start)
/// fails the boot. Each device's modalias is given once to `modprobe -b`.
struct Coldplug {
    devices: PathBuf,
    seen: std::collections::HashSet<String>,
}

impl Coldplug {
    fn new(root: &SysRoot) -> Coldplug {
        Coldplug { devices: root.sys.join("devices"), seen: Default::default() }
    }

    fn load(&mut self) {
        let mut found = Vec::new();
        modaliases(&self.devices, &mut found);
        let new: Vec<String> = found.into_iter().filter(|a| self.seen.insert(a.clone())).collect();
        if !new.is_empty() {
            // Aliases no module claims are the common case, not an error.
            let _ =
                std::process::Command::new("modprobe").args(["-q", "-b", "-a"]).args(&new).status();
        }
    }
}

/// Every modalias under `dir`, its links not followed.
fn modaliases(dir: &Path, found: &mut Vec<String>) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        match entry.file_type() {
            Ok(t) if t.is_dir() => modaliases(&entry.path(), found),
            Ok(t) if t.is_file() && entry.file_name() == "modalias" => {
                if let Ok(alias) = fs::read_to_string(entry.path()) {
                    found.extend(Some(alias.trim().to_string()).filter(|a| !a.is_empty()));
                }
            }
            _ => {}
        }
    }
}

/// Progress for the console: a line every tenth, no terminal tricks; the
/// read check's and the move's told apart.
#[derive(Default)]
struct Console {
    total: u64,
    done: u64,
    said: u64,
    checking: bool,
}

impl Events for Console {
    fn resumed(&mut self, m: &Move, phase: Phase, chunks_done: u64) {
        eprintln!(
            "blkalign: resuming the move of partition {} ({phase:?}, {chunks_done} of {} chunks)",
            m.partition,
            m.chunks()
        );
    }

    fn started(&mut self, total: u64) {
        (self.total, self.done, self.said) = (total, 0, 0);
    }

    fn progress(&mut self, bytes: u64) {
        self.done = self.done.saturating_add(bytes);
        let tenth = self.done.saturating_mul(10).checked_div(self.total).unwrap_or(10);
        if tenth > self.said {
            self.said = tenth;
            let what = if self.checking { "read check" } else { "moved" };
            eprintln!("blkalign: {what} {}% of {}", tenth * 10, human_size(self.total));
        }
    }

    fn note(&mut self, text: &str) {
        if text.starts_with("reading every sector") {
            self.checking = true;
        } else if text.starts_with("read check:") {
            self.checking = false;
        }
        eprintln!("blkalign: {text}");
    }

    fn finished(&mut self, done: &Done) {
        eprint!("blkalign: {}", done.describe());
    }
}

/// A session is opened by the caller; this only checks nothing is
/// scheduled on the disk before a plain `realign --yes` moves it.
pub fn check_not_scheduled(session: &Session, args: &Args) -> anyhow::Result<()> {
    let store = store(&sysroot(args));
    let Some((plan, true)) = read_plan(&store)? else { return Ok(()) };
    if plan.identity == *session.identity() {
        bail!(
            "a move of {} on this disk is scheduled for the next boot: cancel it first \
             (`blkalign realign --at-boot --cancel --yes`)",
            describe_moves(&plan.moves)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{modaliases, rootdelay};
    use std::fs;
    use std::time::Duration;

    #[test]
    fn modaliases_are_read_from_the_device_tree_its_links_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let ahci = dir.path().join("pci0000:00/0000:00:1f.2");
        fs::create_dir_all(ahci.join("ata1/host0")).unwrap();
        fs::write(ahci.join("modalias"), "pci:v00008086d00002922sv\n").unwrap();
        fs::write(ahci.join("ata1/host0/modalias"), "\n").unwrap();
        std::os::unix::fs::symlink(&ahci, dir.path().join("pci0000:00/link")).unwrap();
        let mut found = Vec::new();
        modaliases(dir.path(), &mut found);
        assert_eq!(found, ["pci:v00008086d00002922sv"]);
    }

    #[test]
    fn rootdelay_is_the_last_given_and_a_number() {
        let secs = |s: f64| Some(Duration::from_secs_f64(s));
        assert_eq!(rootdelay("root=UUID=ab ro quiet"), None);
        assert_eq!(rootdelay("rootdelay=5 ro"), secs(5.0));
        assert_eq!(rootdelay("rootdelay=5 rootdelay=2.5"), secs(2.5));
        for odd in ["soon", "", "1e3", "-1", "inf", "1.2.3", "99999999999999999999999"] {
            assert_eq!(rootdelay(&format!("rootdelay=5 rootdelay={odd}")), None, "{odd}");
        }
        assert_eq!(rootdelay("xrootdelay=5"), None);
    }
}
