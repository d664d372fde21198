//! The options that keep the layers above a partition aligned: file
//! systems, LVM, LUKS and ZFS, derived from the disk's I/O sizes. Commands
//! that create a layer destroy what is there, so they are offered only for
//! a partition holding nothing recognised; one that holds something gets
//! what checks or tunes it in place.

mod shrink;

pub use shrink::shrink_node;

use crate::align::Class;
use crate::device::drive::Format;
use crate::device::{Target, TargetKind};
use crate::io::ReadAt;
use crate::stack::{self, Contents, Details, Kind, Layer, LayerVerdict};
use crate::table::types;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A partition as commands name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// Its device node: /dev/sdb1, /dev/nvme0n1p1.
    Device(String),
    /// AdvisedPartition `number` of an image file, which has no node until
    /// `losetup -fP --show` attaches it: commands run on that node.
    Image { image: PathBuf, number: u32 },
}

impl Node {
    /// AdvisedPartition `number` of `target`.
    pub fn of(target: &Target, number: u32) -> Node {
        match (target.kind, target.partition_node(number)) {
            (TargetKind::Disk, Some(node)) => Node::Device(node.display().to_string()),
            // A disk without a kernel name: the path typed, by the same rule.
            (TargetKind::Disk, None) => {
                let path = target.path.display().to_string();
                Node::Device(crate::device::partition_name(&path, number))
            }
            (TargetKind::Image, _) => Node::Image { image: target.path.clone(), number },
        }
    }

    /// The node as a command types it: an image's is the shell variable
    /// [`Node::command`] sets (`${dev}p1`).
    pub fn shell(&self) -> String {
        match self {
            Node::Device(node) => node.clone(),
            Node::Image { number, .. } => format!("${{dev}}p{number}"),
        }
    }

    /// For an image: what attaches it, setting `$dev` for [`Node::shell`].
    pub fn attach(&self) -> Option<String> {
        self.losetup().map(|losetup| format!("{losetup} && {PARTX}"))
    }

    fn losetup(&self) -> Option<String> {
        match self {
            Node::Device(_) => None,
            Node::Image { image, .. } => {
                Some(format!("dev=$(losetup -fP --show {})", shell_word(image)))
            }
        }
    }

    /// `cmd`, naming the node as [`Node::shell`] does, made runnable as
    /// typed: for an image, attached first and detached after, whether
    /// `cmd` succeeds or not, its exit status kept.
    pub fn command(&self, cmd: &str) -> String {
        match self.losetup() {
            None => cmd.to_string(),
            Some(losetup) => format!(
                "{losetup} && {{ {PARTX} && {cmd}; ok=$?; losetup -d $dev; test $ok = 0; }}"
            ),
        }
    }
}

/// Where the kernel has no partition parsers, `losetup -P` makes no
/// partition nodes: partx adds them (a no-op where it does).
const PARTX: &str = "partx -u $dev";

/// What prose calls it: the node, or "partition 1 of disk.img".
impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Node::Device(node) => f.write_str(node),
            Node::Image { image, number } => write!(f, "partition {number} of {}", image.display()),
        }
    }
}

/// `path` as one shell word: quoted unless it needs no quoting.
pub(crate) fn shell_word(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+,:@%=".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        return text;
    }
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The partition advice is given for.
#[derive(Clone, Debug)]
pub struct AdvisedPartition<'a> {
    pub node: &'a Node,
    pub number: u32,
    /// The disk or image it is on, as `blkalign realign` takes it.
    pub disk: &'a Path,
    /// Its type as its table stores it ("0x83" or a GPT type GUID).
    pub type_id: &'a str,
    pub start_bytes: u64,
    pub size_bytes: u64,
    /// The disk's logical sector, which mkfs.fat counts clusters in.
    pub logical: u64,
    /// Bytes its start lies past a physical sector boundary; 0 when aligned.
    pub misalignment_bytes: u64,
    /// Its contents put every data area on a boundary all the same
    /// ([`crate::stack::compensates`]): moving it would misalign them.
    pub compensated: bool,
}

/// What the advice is computed from, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoSizes {
    /// The effective physical sector.
    pub physical: u64,
    /// RAID chunk (minimum I/O) when larger than the physical sector.
    pub minimum_io: Option<u64>,
    /// Full stripe (optimal I/O) when reported and sane.
    pub optimal_io: Option<u64>,
    /// The disk sits behind a USB bridge.
    pub usb: bool,
}

/// One command for one layer, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Advice {
    pub layer: &'static str,
    /// None when there is nothing to run, only something to know. Runnable
    /// as it is: an image's partition is attached by the command itself.
    pub command: Option<String>,
    /// For an image's partition: the command as run after
    /// [`Node::attach`], shorter, for a listing that says that step once.
    #[serde(skip)]
    pub attached: Option<String>,
    pub why: String,
    /// Running the command destroys whatever the partition holds.
    pub destroys_data: bool,
}

impl Advice {
    fn run(layer: &'static str, command: String, why: String) -> Advice {
        Advice { layer, command: Some(command), attached: None, why, destroys_data: false }
    }

    /// Something to know, with nothing to run.
    fn note(layer: &'static str, why: impl Into<String>) -> Advice {
        Advice { layer, command: None, attached: None, why: why.into(), destroys_data: false }
    }

    fn destroys(self) -> Advice {
        Advice { destroys_data: true, ..self }
    }

    /// Its command, which names `node`, made runnable as typed.
    fn on(self, node: &Node) -> Advice {
        match (&self.command, node) {
            (Some(cmd), Node::Image { .. }) => {
                Advice { command: Some(node.command(cmd)), attached: Some(cmd.clone()), ..self }
            }
            _ => self,
        }
    }
}

/// What a partition holds, as far as its headers tell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holds {
    /// No recognised signature: empty, new, or something we do not know.
    Nothing,
    Contents(Contents),
    /// Its first sector could not be read.
    Unreadable(String),
}

/// What the partition of `sectors` logical sectors of `ss` bytes at
/// `start` holds, on a disk of `disk_bytes`. Only the part inside the disk
/// is looked at: one starting past the end holds nothing.
pub fn holds(dev: &dyn ReadAt, start: u64, sectors: u64, ss: u64, disk_bytes: u64) -> Holds {
    let Some(offset) = start.checked_mul(ss).filter(|&o| o < disk_bytes) else {
        return Holds::Nothing;
    };
    let room = disk_bytes - offset;
    let len = sectors.checked_mul(ss).map_or(room, |l| l.min(room));
    match stack::identify(dev, offset, len) {
        Ok(Some(c)) => Holds::Contents(c),
        Ok(None) => Holds::Nothing,
        Err(e) => Holds::Unreadable(e.to_string()),
    }
}

const FS_BLOCK: u64 = 4096;

/// Advice for partition `part` on disk `disk` (its kernel name) with `io`,
/// given what the partition holds: moving it first when its start is
/// misaligned, since nothing inside can be aligned before.
pub fn advise(part: &AdvisedPartition, disk: &str, io: &IoSizes, holds: &Holds) -> Vec<Advice> {
    let dev = &part.node.shell();
    let mut out = Vec::new();
    match holds {
        Holds::Nothing => out.extend(empty(part, io).into_iter().map(Advice::destroys)),
        // Recreating is not the way when moving the partition is.
        Holds::Contents(c) => out
            .extend(Some(in_place(dev, io, c)).filter(|a| {
                a.command.is_some() || realign(part).and_then(|r| r.command).is_none()
            })),
        Holds::Unreadable(e) => out.push(Advice::note(
            "?",
            format!(
                "could not read it ({e}): check what it holds (`blkid -p {dev}`) before \
                 creating anything on it"
            ),
        )),
    };
    let mut out: Vec<Advice> = out.into_iter().map(|a| a.on(part.node)).collect();
    // The move names the disk, not the partition's node.
    out.splice(0..0, realign(part));
    if io.usb {
        out.push(Advice::run(
            "usb",
            format!("echo 2048 > /sys/block/{disk}/device/max_sectors"),
            "USB bridges often cap requests far below 1 MiB; 2048 sectors (1 MiB) keeps large \
             writes whole (a positive multiple of 8, not much above 2048)"
                .to_string(),
        ));
    }
    out
}

/// For an NVMe namespace: the LBA format with 4096-byte (or larger)
/// sectors and no metadata that the drive rates better than the one in
/// use, if any. Formatting erases the namespace: an install-time choice.
pub fn nvme_format(disk: &str, formats: &[Format]) -> Option<Advice> {
    let rank = |f: &Format| {
        ["best", "better", "good", "degraded"]
            .iter()
            .position(|p| *p == f.relative_performance)
            .unwrap_or(usize::MAX)
    };
    let in_use = formats.iter().find(|f| f.in_use)?;
    let better = formats
        .iter()
        .filter(|f| f.data_size >= 4096 && f.metadata_size == 0 && rank(f) < rank(in_use))
        .min_by_key(|f| (rank(f), f.data_size, f.index))?;
    let why = format!(
        "the namespace's LBA format #{} ({}-byte sectors) is rated {}, the one in use (#{}, \
         {}-byte) {}: `nvme format` erases every byte of the namespace and changes its logical \
         sector size, so choose it when installing, before anything is written",
        better.index,
        better.data_size,
        better.relative_performance,
        in_use.index,
        in_use.data_size,
        in_use.relative_performance
    );
    Some(Advice::run("nvme", format!("nvme format {disk} --lbaf={}", better.index), why).destroys())
}

const RECREATE: &str = "changing it means recreating it: copy the data off first";

/// For a partition starting off a physical boundary: the move that aligns
/// it, keeping its data.
fn realign(part: &AdvisedPartition) -> Option<Advice> {
    if part.compensated {
        return Some(Advice::note(
            "partition",
            format!(
                "partition {} starts {} bytes past a physical sector boundary, but what it holds \
                 puts every data area on one (compensated): nothing to move, and moving it would \
                 misalign the data",
                part.number, part.misalignment_bytes
            ),
        ));
    }
    (part.misalignment_bytes > 0).then(|| {
        Advice::run(
            "partition",
            format!("blkalign realign {} {}", shell_word(part.disk), part.number),
            format!(
                "partition {} starts {} bytes past a physical sector boundary, and so does \
                 everything a whole number of physical sectors into it: moving it (its data \
                 kept) comes first (add --yes to move)",
                part.number, part.misalignment_bytes
            ),
        )
    })
}

/// What to create on an empty partition, by its type: a file system for
/// data, FAT for an ESP, swap for swap, and so on.
fn empty(part: &AdvisedPartition, io: &IoSizes) -> Vec<Advice> {
    let dev = &part.node.shell();
    match types::name_of(part.type_id) {
        Some("efi" | "fat32" | "fat32-chs" | "fat16") => vec![vfat(part, io)],
        Some("swap") => vec![swap(dev, io)],
        Some("lvm") => vec![lvm(dev, io), luks(dev, io)],
        Some("luks") => vec![luks(dev, io)],
        Some("zfs") => vec![zfs(dev, io)],
        Some("raid") => vec![md(dev, io)],
        Some("windows") => vec![ntfs(dev, io)],
        Some("bios-boot") => vec![Advice::note(
            "bios-boot",
            "GRUB's core image goes here (grub-install writes it): nothing to create",
        )],
        _ => vec![ext4(dev, io), xfs(dev, io), lvm(dev, io), luks(dev, io), zfs(dev, io)],
    }
}

/// What to do about a layer found inside partition `part` whose verdict is
/// not aligned, from what its header says. None for an aligned layer.
pub fn for_layer(
    part: &AdvisedPartition,
    io: &IoSizes,
    layer: &Layer,
    verdict: &LayerVerdict,
) -> Option<Advice> {
    layer_fix(part, io, layer, verdict).map(|a| a.on(part.node))
}

fn layer_fix(
    part: &AdvisedPartition,
    io: &IoSizes,
    layer: &Layer,
    verdict: &LayerVerdict,
) -> Option<Advice> {
    if verdict.verdict == Class::Aligned {
        return None;
    }
    let dev = &part.node.shell();
    let at = layer.absolute_offset_bytes;
    let inside = at.checked_sub(part.start_bytes).filter(|b| b % io.physical == 0);
    if let (Some(inside), false) = (inside, verdict.aligned_physical) {
        if part.misalignment_bytes > 0 && verdict.finding.is_none() {
            return Some(Advice::note(
                layer.name,
                format!(
                    "{} is off only because partition {} is: its data sits {inside} bytes into \
                     the partition, a whole number of physical sectors, so moving the partition \
                     (blkalign realign) aligns it too",
                    layer.name, part.number
                ),
            ));
        }
    }
    let off = if verdict.aligned_physical {
        String::new()
    } else {
        format!(" starts at byte {at}, {} bytes off a physical sector;", verdict.misalignment_bytes)
    };
    let finding = verdict.finding.as_deref().map(|f| format!(" {f};")).unwrap_or_default();
    let said = format!("{}{off}{finding}", layer.name);
    Some(match &layer.details {
        Details::LvmPv { vg, .. } => {
            let vg = vg.as_deref().unwrap_or("VG");
            Advice::run(
                "lvm",
                format!("pvmove {dev} NEWPV"),
                format!(
                    "{said} its data area (pe_start) is fixed when the PV is made: first make an \
                     aligned PV on a new device (`pvcreate --dataalignment {}b NEWPV`, which \
                     destroys what NEWPV holds; `vgextend {vg} NEWPV`), move the extents to it \
                     live, then `vgreduce {vg} {dev}`",
                    lvm_alignment(io)
                ),
            )
        }
        Details::LvmLv { vg, lv, .. } => Advice::note(
            "lvm",
            format!("{said} {vg}/{lv} sits on a misaligned data area: fix the PV (see its line)"),
        ),
        Details::Luks { .. } => Advice::note(
            "luks",
            format!(
                "{said} the payload offset is fixed in the header: reformat with `cryptsetup \
                 luksFormat --type luks2 --offset SECTORS` on an aligned number of 512-byte \
                 sectors (copy the data off first), or shift it with `cryptsetup reencrypt \
                 --reduce-device-size`"
            ),
        ),
        Details::Md { .. } => Advice::note(
            "md",
            format!("{said} recreate the array with `mdadm --create --data-offset=` a multiple of {} KiB; {RECREATE}", io.physical / 1024),
        ),
        Details::Bcache { device: "backing", .. } => Advice::note(
            "bcache",
            format!(
                "{said} the data offset and block size are fixed when the backing device is made: \
                 stop /dev/bcacheN, copy its data off, `make-bcache -B --data-offset {} -w {} \
                 --wipe-bcache {dev}` (sectors of 512 bytes; block size in bytes), copy it back",
                lvm_alignment(io).max(io.physical) / 512,
                io.physical
            ),
        ),
        Details::Bcache { .. } => Advice::note(
            "bcache",
            format!(
                "{said} a cache device holds only copies: detach it from its cache set (dirty \
                 data is written back first), `make-bcache -C -w {} --wipe-bcache {dev}`, attach \
                 it again",
                io.physical
            ),
        ),
        Details::Zfs { .. } => Advice::note(
            "zfs",
            format!(
                "{said} ashift cannot change on an existing vdev: `zpool replace`/`attach` onto a \
                 vdev added with -o ashift=12, or recreate the pool"
            ),
        ),
        Details::Ext { .. } if verdict.aligned_physical => ext4_in_place(dev, io),
        Details::Fat { .. } if inside.is_none() && !verdict.aligned_physical => {
            let (command, why) = mkfs_vfat(dev, part.size_bytes, part.logical, io.physical);
            let into = at.saturating_sub(part.start_bytes);
            Advice::run(
                "vfat",
                command,
                format!(
                    "{said} its data area sits {into} bytes into the partition, off the physical \
                     grid wherever the partition starts: only recreating it helps (copy the \
                     files off first): {why}"
                ),
            )
            .destroys()
        }
        _ => Advice::note(layer.name, format!("{said} fix the layer below it, or {RECREATE}")),
    })
}

/// For a partition that already holds `c`: what tunes it in place, or
/// checks it, and what changing the rest would take.
fn in_place(dev: &str, io: &IoSizes, c: &Contents) -> Advice {
    match c.kind {
        Kind::Ext => ext4_in_place(dev, io),
        Kind::Xfs => xfs_in_place(dev, io),
        Kind::LvmPv => Advice::run(
            "lvm",
            format!("pvs -o pv_name,pe_start --units b {dev}"),
            format!(
                "the first extent (pe_start) should be a multiple of {} bytes; moving it means \
                 pvmove, pvremove and pvcreate --dataalignment",
                lvm_alignment(io)
            ),
        ),
        Kind::Luks => {
            let sector = luks_sector(io);
            Advice::run(
                "luks",
                format!("cryptsetup luksDump {dev}"),
                format!(
                    "LUKS2 should show sector: {sector}; `cryptsetup reencrypt --sector-size \
                     {sector} {dev}` changes it in place (back up first); LUKS1 is always 512"
                ),
            )
        }
        Kind::Md => Advice::run(
            "md",
            format!("mdadm --examine {dev}"),
            format!("the Data Offset should be a multiple of {} bytes; {RECREATE}", io.physical),
        ),
        Kind::Bcache => Advice::run(
            "bcache",
            format!("bcache-super-show {dev}"),
            format!(
                "dev.data.first_sector (dev.cache.first_sector for a cache) times 512 should be a \
                 multiple of {0} bytes and dev.sectors_per_block at least {1}; both are fixed \
                 by make-bcache (--data-offset, -w {0}); {RECREATE}",
                io.physical,
                io.physical / 512
            ),
        ),
        Kind::Swap => Advice::note("swap", "swap has no alignment settings: nothing to change"),
        _ => Advice::note(c.name, format!("{} fixes its layout when made; {RECREATE}", c.name)),
    }
}

/// An existing ext2/3/4: RAID hints can change in place, the block size
/// cannot.
fn ext4_in_place(dev: &str, io: &IoSizes) -> Advice {
    let block = ext_block(io);
    match stripe(io) {
        Some((chunk, width)) => Advice::run(
            "ext4",
            format!("tune2fs -E stride={},stripe_width={} {dev}", chunk / block, width / block),
            format!(
                "sets the allocator's RAID hints in place (for {block}-byte blocks; see \
                 `tune2fs -l {dev}`); the data stays"
            ),
        ),
        None => Advice::run(
            "ext4",
            format!("tune2fs -l {dev}"),
            format!(
                "no RAID geometry, so nothing to tune; \"Block size\" should be at least \
                 {block}: a smaller one means recreating the file system (copy the data off first)"
            ),
        ),
    }
}

/// An existing XFS takes new stripe hints at mount time; its sector size
/// is fixed.
fn xfs_in_place(dev: &str, io: &IoSizes) -> Advice {
    match stripe(io) {
        Some((chunk, width)) => Advice::run(
            "xfs",
            format!("mount -o sunit={},swidth={} {dev} MOUNTPOINT", chunk / 512, width / 512),
            "XFS takes new stripe hints at mount time (in 512-byte units); the data stays".into(),
        ),
        None => Advice::run(
            "xfs",
            format!("xfs_info {dev}"),
            format!("check sectsz={}: fixed when XFS is made; {RECREATE}", xfs_sector(io)),
        ),
    }
}

/// (chunk, stripe width) in bytes when the disk reports a RAID geometry.
fn stripe(io: &IoSizes) -> Option<(u64, u64)> {
    let chunk = io.minimum_io.filter(|&m| m > io.physical && m % FS_BLOCK == 0)?;
    let width = io.optimal_io.filter(|&o| o >= chunk && o % chunk == 0)?;
    Some((chunk, width))
}

/// The ext4 block: at least the physical sector, at most what ext4 takes.
fn ext_block(io: &IoSizes) -> u64 {
    io.physical.clamp(FS_BLOCK, 65536)
}

fn ext4(dev: &str, io: &IoSizes) -> Advice {
    let block = ext_block(io);
    match stripe(io) {
        Some((chunk, width)) => Advice::run(
            "ext4",
            format!("mkfs.ext4 -b {block} -E stride={},stripe-width={} {dev}", chunk / block, width / block),
            format!("{block}-byte blocks on {}-byte sectors; stride = chunk {chunk} / block, stripe-width = stripe {width} / block", io.physical),
        ),
        None => Advice::run(
            "ext4",
            format!("mkfs.ext4 -b {block} {dev}"),
            format!("blocks of at least the {}-byte physical sector, so no block straddles two", io.physical),
        ),
    }
}

/// The XFS sector: the physical sector, within what XFS takes.
fn xfs_sector(io: &IoSizes) -> u64 {
    io.physical.clamp(512, 32768)
}

fn xfs(dev: &str, io: &IoSizes) -> Advice {
    let sector = xfs_sector(io);
    let geometry = stripe(io)
        .map_or(String::new(), |(chunk, width)| format!(" -d su={chunk},sw={}", width / chunk));
    Advice::run(
        "xfs",
        format!("mkfs.xfs -s size={sector}{geometry} {dev}"),
        format!("metadata and log written in whole {sector}-byte physical sectors"),
    )
}

/// Bytes the first physical extent should align to.
fn lvm_alignment(io: &IoSizes) -> u64 {
    io.optimal_io.filter(|&o| o > 0 && (1 << 20) % o != 0).unwrap_or(1 << 20)
}

fn lvm(dev: &str, io: &IoSizes) -> Advice {
    Advice::run(
        "lvm",
        format!("pvcreate --dataalignment {}k {dev}", lvm_alignment(io) / 1024),
        "the first physical extent on the partition's grain, so every logical volume inherits it"
            .to_string(),
    )
}

/// The LUKS2 encryption sector: the physical sector, within what LUKS takes.
fn luks_sector(io: &IoSizes) -> u64 {
    io.physical.clamp(512, 4096)
}

fn luks(dev: &str, io: &IoSizes) -> Advice {
    let sector = luks_sector(io);
    Advice::run(
        "luks",
        format!("cryptsetup luksFormat --sector-size {sector} {dev}"),
        format!(
            "encrypt in {sector}-byte units so the mapped device presents whole physical sectors"
        ),
    )
}

/// FAT32's fewest clusters: below, mkfs.fat makes FAT16 (or FAT12).
const FAT32_MIN_CLUSTERS: u64 = 65525;

/// FAT with clusters of a whole physical sector, which mkfs.fat aligns to
/// the partition's start by default; FAT32 (what an ESP should be) when
/// the partition holds enough such clusters.
fn vfat(part: &AdvisedPartition, io: &IoSizes) -> Advice {
    let (command, why) = mkfs_vfat(&part.node.shell(), part.size_bytes, part.logical, io.physical);
    Advice::run("vfat", command, why)
}

/// The mkfs.vfat command for `dev` of `size_bytes` in `logical`-byte
/// sectors on `physical`-byte physical sectors, and why: FAT32 only where
/// the clusters are enough for it (the spec's minimum; `-F 32` below it
/// makes a FAT32 that Windows and the firmware may refuse).
pub(crate) fn mkfs_vfat(
    dev: &str,
    size_bytes: u64,
    logical: u64,
    physical: u64,
) -> (String, String) {
    let cluster = physical.clamp(FS_BLOCK, 32768).max(logical);
    // Room for the FATs and reserved sectors besides the clusters.
    let fat32 = size_bytes / cluster > FAT32_MIN_CLUSTERS + 1024;
    let (flag, which) = if fat32 {
        ("-F 32 ", "FAT32".to_string())
    } else {
        ("", format!("too small for FAT32 in {cluster}-byte clusters: mkfs.fat picks FAT16"))
    };
    let command = format!("mkfs.vfat {flag}-s {} {dev}", cluster.checked_div(logical).unwrap_or(1));
    let why = format!(
        "{which}; {cluster}-byte clusters, which mkfs.fat aligns to the partition's start, so \
         none straddles a physical sector"
    );
    (command, why)
}

fn swap(dev: &str, io: &IoSizes) -> Advice {
    Advice::run(
        "swap",
        format!("mkswap {dev}"),
        format!(
            "swap pages are 4096 bytes from the partition's start, so an aligned partition keeps \
             them on its {}-byte physical sectors; swap has nothing to set",
            io.physical
        ),
    )
}

/// The data offset of an md member: a whole physical sector and, like
/// mdadm's default, at least 1 MiB.
fn md(dev: &str, io: &IoSizes) -> Advice {
    let offset = lvm_alignment(io).max(io.physical);
    Advice::run(
        "md",
        format!(
            "mdadm --create /dev/mdN --level=LEVEL --raid-devices=COUNT --data-offset={}K {dev} \
             OTHER_MEMBERS",
            offset / 1024
        ),
        format!("the array's data starts {offset} bytes in, on the partition's grain"),
    )
}

fn ntfs(dev: &str, io: &IoSizes) -> Advice {
    let cluster = io.physical.clamp(FS_BLOCK, 65536);
    Advice::run(
        "ntfs",
        format!("mkfs.ntfs --fast --cluster-size {cluster} {dev}"),
        format!("{cluster}-byte clusters from the partition's start, so none straddles a physical sector"),
    )
}

fn zfs(dev: &str, io: &IoSizes) -> Advice {
    let ashift = 63 - io.physical.max(4096).leading_zeros();
    Advice::run(
        "zfs",
        format!("zpool create -o ashift={ashift} POOL {dev}"),
        format!(
            "ZFS never changes ashift after creation; 2^{ashift} = the {}-byte physical sector",
            1u64 << ashift
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format(index: u8, data_size: u64, metadata_size: u16, perf: &'static str) -> Format {
        Format { index, data_size, metadata_size, relative_performance: perf, in_use: index == 0 }
    }

    /// Only a 4096-byte format without metadata rated strictly better than
    /// the one in use is offered, the best rated first, as destroying data.
    #[test]
    fn nvme_format_is_offered_only_when_rated_better() {
        // QEMU's table: every format rated best, so nothing to gain.
        let qemu: Vec<Format> = [(512, 0), (512, 8), (512, 16), (512, 64), (4096, 0), (4096, 8)]
            .iter()
            .enumerate()
            .map(|(i, &(d, m))| format(i as u8, d, m, "best"))
            .collect();
        assert_eq!(nvme_format("/dev/nvme0n1", &qemu), None);
        let drive = [
            format(0, 512, 0, "good"),
            format(1, 4096, 8, "best"),
            format(2, 4096, 0, "better"),
            format(3, 8192, 0, "better"),
        ];
        let advice = nvme_format("/dev/nvme0n1", &drive).expect("format 2 is better");
        assert_eq!(advice.command.as_deref(), Some("nvme format /dev/nvme0n1 --lbaf=2"));
        assert!(advice.destroys_data);
        assert!(
            advice.why.contains(
                "#2 (4096-byte sectors) is rated better, the one in use (#0, 512-byte) good"
            ),
            "{}",
            advice.why
        );
        let in_use_4k = [format(0, 4096, 0, "good"), format(1, 512, 0, "best")];
        assert_eq!(nvme_format("/dev/nvme0n1", &in_use_4k), None);
    }

    fn io(physical: u64, min: Option<u64>, opt: Option<u64>) -> IoSizes {
        IoSizes { physical, minimum_io: min, optimal_io: opt, usb: false }
    }

    /// An aligned Linux partition `dev` of 1 GiB.
    fn part<'a>(node: &'a Node, type_id: &'a str) -> AdvisedPartition<'a> {
        AdvisedPartition {
            node,
            number: 1,
            disk: Path::new("/dev/sda"),
            type_id,
            start_bytes: 1 << 20,
            size_bytes: 1 << 30,
            logical: 512,
            misalignment_bytes: 0,
            compensated: false,
        }
    }

    fn advise_on(dev: &str, disk: &str, io: &IoSizes, holds: &Holds) -> Vec<Advice> {
        advise(&part(&Node::Device(dev.into()), "0x83"), disk, io, holds)
    }

    fn command(advice: &[Advice], layer: &str) -> String {
        advice.iter().find(|a| a.layer == layer).and_then(|a| a.command.clone()).unwrap()
    }

    #[test]
    fn plain_512e_disk() {
        let a = advise_on("/dev/sda1", "sda", &io(4096, Some(4096), None), &Holds::Nothing);
        assert_eq!(command(&a, "ext4"), "mkfs.ext4 -b 4096 /dev/sda1");
        assert_eq!(command(&a, "xfs"), "mkfs.xfs -s size=4096 /dev/sda1");
        assert_eq!(command(&a, "lvm"), "pvcreate --dataalignment 1024k /dev/sda1");
        assert_eq!(command(&a, "luks"), "cryptsetup luksFormat --sector-size 4096 /dev/sda1");
        assert_eq!(command(&a, "zfs"), "zpool create -o ashift=12 POOL /dev/sda1");
        assert!(a.iter().all(|x| x.layer != "usb"));
        assert!(a.iter().all(|x| x.destroys_data), "creating a layer destroys what is there");
    }

    #[test]
    fn raid_geometry() {
        let a = advise_on(
            "/dev/md0p1",
            "md0",
            &io(4096, Some(65536), Some(4 * 65536)),
            &Holds::Nothing,
        );
        assert_eq!(
            command(&a, "ext4"),
            "mkfs.ext4 -b 4096 -E stride=16,stripe-width=64 /dev/md0p1"
        );
        assert_eq!(command(&a, "xfs"), "mkfs.xfs -s size=4096 -d su=65536,sw=4 /dev/md0p1");
        let odd =
            advise_on("/dev/md1", "md1", &io(4096, Some(65536), Some(3 * 65536)), &Holds::Nothing);
        assert_eq!(command(&odd, "lvm"), "pvcreate --dataalignment 192k /dev/md1");
    }

    #[test]
    fn big_sectors_and_usb() {
        let a = advise_on(
            "/dev/sdb1",
            "sdb",
            &IoSizes { usb: true, ..io(8192, None, None) },
            &Holds::Nothing,
        );
        assert_eq!(command(&a, "zfs"), "zpool create -o ashift=13 POOL /dev/sdb1");
        assert_eq!(command(&a, "luks"), "cryptsetup luksFormat --sector-size 4096 /dev/sdb1");
        assert_eq!(command(&a, "usb"), "echo 2048 > /sys/block/sdb/device/max_sectors");
    }

    fn holding(kind: Kind, name: &'static str) -> Holds {
        Holds::Contents(Contents { kind, name, label: None, size_bytes: None })
    }

    #[test]
    fn existing_contents_get_nothing_destructive() {
        let raid = io(4096, Some(65536), Some(4 * 65536));
        let ext = advise_on("/dev/md0p1", "md0", &raid, &holding(Kind::Ext, "ext4"));
        assert_eq!(command(&ext, "ext4"), "tune2fs -E stride=16,stripe_width=64 /dev/md0p1");
        let plain =
            advise_on("/dev/sda1", "sda", &io(4096, None, None), &holding(Kind::Ext, "ext4"));
        assert_eq!(command(&plain, "ext4"), "tune2fs -l /dev/sda1");
        let xfs = advise_on("/dev/md0p1", "md0", &raid, &holding(Kind::Xfs, "xfs"));
        assert_eq!(command(&xfs, "xfs"), "mount -o sunit=128,swidth=512 /dev/md0p1 MOUNTPOINT");
        for (kind, name) in [
            (Kind::LvmPv, "LVM2_member"),
            (Kind::Luks, "crypto_LUKS"),
            (Kind::Swap, "swap"),
            (Kind::Ntfs, "ntfs"),
            (Kind::Md, "linux_raid_member"),
            (Kind::Bcache, "bcache"),
        ] {
            let a = advise_on("/dev/sda1", "sda", &raid, &holding(kind, name));
            assert!(a.iter().all(|x| !x.destroys_data), "{name}: {a:?}");
            let text: String = a.iter().filter_map(|x| x.command.clone()).collect();
            assert!(!text.contains("mkfs") && !text.contains("Format") && !text.contains("create"));
        }
        let unread = advise_on("/dev/sda1", "sda", &raid, &Holds::Unreadable("EIO".into()));
        assert!(unread.iter().all(|x| !x.destroys_data && x.command.is_none()));
    }

    /// Found by a user: empty ESP and swap partitions were offered
    /// mkfs.ext4, xfs and pvcreate, never mkfs.vfat or mkswap.
    #[test]
    fn empty_partitions_get_what_fits_their_type() {
        let node = Node::Device("/dev/sda1".into());
        let plain = io(4096, None, None);
        let layers = |type_id: &str| -> Vec<(&'static str, String)> {
            let a = advise(&part(&node, type_id), "sda", &plain, &Holds::Nothing);
            a.into_iter().map(|x| (x.layer, x.command.unwrap_or_default())).collect()
        };
        let esp = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B";
        assert_eq!(layers(esp), [("vfat", "mkfs.vfat -F 32 -s 8 /dev/sda1".to_string())]);
        assert_eq!(layers("0xef"), layers(esp));
        assert_eq!(layers("0x82"), [("swap", "mkswap /dev/sda1".to_string())]);
        let swap = "0657FD6D-A4AB-43C4-84E5-0933C84B4F4F";
        assert_eq!(layers(swap), layers("0x82"));
        let lvm: Vec<_> = layers("0x8e").into_iter().map(|(l, _)| l).collect();
        assert_eq!(lvm, ["lvm", "luks"]);
        assert_eq!(layers("0x07")[0].1, "mkfs.ntfs --fast --cluster-size 4096 /dev/sda1");
        let data: Vec<_> = layers("0x83").into_iter().map(|(l, _)| l).collect();
        assert_eq!(data, ["ext4", "xfs", "lvm", "luks", "zfs"]);
        // A small ESP cannot hold FAT32's clusters at 4 KiB; 4Kn counts them in 4096s.
        let small = AdvisedPartition { size_bytes: 100 << 20, ..part(&node, esp) };
        let a = advise(&small, "sda", &plain, &Holds::Nothing);
        assert_eq!(command(&a, "vfat"), "mkfs.vfat -s 8 /dev/sda1");
        let native = AdvisedPartition { logical: 4096, ..part(&node, esp) };
        let a = advise(&native, "sda", &plain, &Holds::Nothing);
        assert_eq!(command(&a, "vfat"), "mkfs.vfat -F 32 -s 1 /dev/sda1");
    }

    /// Found by a user: an image's advice named `/dev/loopXp1`, a node
    /// nobody has.
    #[test]
    fn an_image_is_attached_by_each_command() {
        let node = Node::Image { image: "old disk.img".into(), number: 2 };
        let a = advise(&part(&node, "0x83"), "DISK", &io(4096, None, None), &Holds::Nothing);
        assert_eq!(
            command(&a, "ext4"),
            "dev=$(losetup -fP --show 'old disk.img') && { partx -u $dev && mkfs.ext4 -b 4096 \
             ${dev}p2; ok=$?; losetup -d $dev; test $ok = 0; }"
        );
        assert_eq!(node.to_string(), "partition 2 of old disk.img");
        let at63 = AdvisedPartition {
            disk: Path::new("old disk.img"),
            misalignment_bytes: 3584,
            compensated: false,
            ..part(&node, "0x83")
        };
        let a = advise(&at63, "DISK", &io(4096, None, None), &Holds::Nothing);
        assert_eq!(
            command(&a, "partition"),
            "blkalign realign 'old disk.img' 1",
            "the disk's move"
        );
        assert_eq!(shell_word(Path::new("a'b")), r"'a'\''b'");
        assert_eq!(shell_word(Path::new("/tmp/x-1.img")), "/tmp/x-1.img");
    }

    fn layer(kind: Kind, name: &'static str, at: u64, details: Details) -> Layer {
        Layer {
            kind,
            name,
            label: None,
            depth: 0,
            offset_bytes: 0,
            absolute_offset_bytes: at,
            size_bytes: None,
            unit_bytes: None,
            details,
            note: None,
        }
    }

    /// Found by a user: a PV, LUKS or NTFS in a partition at LBA 63 got
    /// pvmove, luksFormat or "fix the layer below", not the move that
    /// aligns it.
    #[test]
    fn a_layer_off_only_because_its_partition_is_gets_realign_first() {
        let node = Node::Device("/dev/sda1".into());
        let plain = io(4096, None, None);
        let at63 = AdvisedPartition {
            start_bytes: 63 * 512,
            misalignment_bytes: 3584,
            ..part(&node, "0x8e")
        };
        let pv = holding(Kind::LvmPv, "LVM2_member");
        let a = advise(&at63, "sda", &plain, &pv);
        assert_eq!(a[0].command.as_deref(), Some("blkalign realign /dev/sda 1"));
        assert!(!a[0].destroys_data);
        let off = LayerVerdict {
            aligned_physical: false,
            aligned_optimal: None,
            verdict: Class::Misaligned,
            misalignment_bytes: 3584,
            cost: None,
            finding: None,
        };
        let pe = Details::LvmPv { pe_start_bytes: 1 << 20, extent_bytes: None, vg: None };
        let luks = Details::Luks {
            version: 2,
            payload_offset_bytes: 16 << 20,
            sector_bytes: 4096,
            cipher: None,
            key_material_end_bytes: None,
        };
        let ntfs = Details::Ntfs { sector_bytes: 512, cluster_bytes: 4096 };
        for (kind, name, inside, details) in [
            (Kind::LvmPv, "LVM2_member", 1 << 20, pe.clone()),
            (Kind::Luks, "crypto_LUKS", 16 << 20, luks),
            (Kind::Ntfs, "ntfs", 0, ntfs),
        ] {
            let l = layer(kind, name, 63 * 512 + inside, details);
            let got = for_layer(&at63, &plain, &l, &off).expect("advice");
            assert!(got.command.is_none(), "{name}: {got:?}");
            assert!(got.why.contains("off only because partition 1 is"), "{name}: {got:?}");
            assert!(got.why.contains("blkalign realign"), "{name}: {got:?}");
        }
        // Off inside the partition too: the layer's own fix still follows.
        let l = layer(Kind::LvmPv, "LVM2_member", 63 * 512 + 1024, pe.clone());
        let got = for_layer(&at63, &plain, &l, &off).expect("advice");
        assert_eq!(got.command.as_deref(), Some("pvmove /dev/sda1 NEWPV"));
        // An aligned partition: no realign, the layer's own fix.
        let aligned = part(&node, "0x8e");
        let l = layer(Kind::LvmPv, "LVM2_member", (1 << 20) + 1024, pe);
        assert!(advise(&aligned, "sda", &plain, &pv).iter().all(|a| a.layer != "partition"));
        let got = for_layer(&aligned, &plain, &l, &off).expect("advice");
        assert_eq!(got.command.as_deref(), Some("pvmove /dev/sda1 NEWPV"));
        // Recreating NTFS is not the way when moving the partition is.
        let ntfs = advise(&at63, "sda", &plain, &holding(Kind::Ntfs, "ntfs"));
        assert_eq!(ntfs.len(), 1, "{ntfs:?}");
    }

    #[test]
    fn holds_reads_only_inside_the_disk() {
        let mut disk = vec![0u8; 1 << 20];
        // An XFS superblock (magic, 4096-byte blocks) at LBA 8.
        disk[8 * 512..8 * 512 + 4].copy_from_slice(b"XFSB");
        disk[8 * 512 + 4..8 * 512 + 8].copy_from_slice(&4096u32.to_be_bytes());
        let found = holds(&disk, 8, 1000, 512, 1 << 20);
        assert!(matches!(found, Holds::Contents(ref c) if c.kind == Kind::Xfs), "{found:?}");
        assert_eq!(holds(&disk, 9, 1000, 512, 1 << 20), Holds::Nothing);
        assert_eq!(holds(&disk, 4096, 8, 512, 1 << 20), Holds::Nothing, "past the end");
        assert_eq!(holds(&disk, u64::MAX, 8, 512, 1 << 20), Holds::Nothing);
    }
}
