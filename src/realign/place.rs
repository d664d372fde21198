//! Where a partition goes: the nearest aligned start with room for it,
//! never over another partition, an EBR, the GPT's arrays, or boot-loader
//! bytes in the gap before the first partition.

use crate::align::{align_down, align_up, lcm, Geometry};
use crate::plan::{self, Align};
use crate::stack::{Details, Layer};
use crate::table::{Label, Layout, PartKind, Partition};
use std::ops::Range;

/// What the user asked for one partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlaceRequest {
    pub partition: u32,
    /// An explicit destination LBA.
    pub to: Option<u64>,
    pub align: Align,
    /// Overwrite non-zero bytes in the gap before the first partition.
    pub force: bool,
}

/// Where the partition will go, and why there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub partition: Partition,
    pub new_start: u64,
    pub grain_bytes: u64,
    /// The free run of LBAs the partition may occupy.
    pub room: Range<u64>,
    /// Where a logical's EBR goes when the new start covers it (or lies
    /// before it): the sector just before the new start.
    pub ebr: Option<u64>,
    /// Why the preferred grain was not used, when it was not.
    pub note: Option<String>,
}

#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlaceError {
    #[error("there is no partition {0} in the table")]
    NotFound(u32),
    #[error("partition {0} cannot be moved: {1}")]
    CannotMove(u32, String),
    #[error("partition {0} already starts on a {1}-byte boundary at LBA {2}: nothing to move")]
    AlreadyAligned(u32, u64, u64),
    #[error("partition {partition} does not fit at an aligned start: {why}")]
    NoRoom {
        partition: u32,
        why: String,
        /// Sectors the partition would have to lose to fit, when shrinking helps.
        missing_sectors: Option<u64>,
    },
}

/// Choose the destination of `req` in `layout`. `gap_nonzero(lbas)` says
/// whether any of those sectors before the first partition holds data.
pub fn place(
    layout: &Layout,
    geometry: &Geometry,
    disk_sectors: u64,
    req: &PlaceRequest,
    gap_nonzero: &dyn Fn(Range<u64>) -> bool,
) -> Result<Placement, PlaceError> {
    let n = req.partition;
    let p = layout.partitions.iter().find(|p| p.number == n).ok_or(PlaceError::NotFound(n))?;
    let cannot = |why: &str| PlaceError::CannotMove(n, why.to_string());
    match p.kind {
        PartKind::Primary | PartKind::Logical | PartKind::Gpt => {}
        PartKind::Extended => return Err(cannot("it is an extended container; move its logicals")),
        PartKind::Unknown => return Err(cannot("the table could not be read")),
        PartKind::Bsd
        | PartKind::Sun
        | PartKind::Sgi
        | PartKind::Mac
        | PartKind::Amiga
        | PartKind::Atari => return Err(cannot("only MBR and GPT partitions can be moved")),
    }
    let room = room(layout, p, disk_sectors).map_err(|why| cannot(&why))?;
    let first = p.kind != PartKind::Logical
        && layout.partitions.iter().all(|q| q.number == n || q.start > p.start);
    let ebr = movable_ebr(layout, p);
    let fit = Fit { p, room: room.clone(), first, ebr, force: req.force, gap_nonzero };
    if let Some(to) = req.to {
        return fit.explicit(to, geometry).map(|new_start| Placement {
            partition: p.clone(),
            new_start,
            grain_bytes: geometry.physical,
            room,
            ebr: fit.new_ebr(new_start),
            note: None,
        });
    }
    let grains = grains(geometry, req.align).map_err(|e| cannot(&e))?;
    let mut failures = Vec::new();
    for (i, &grain) in grains.iter().enumerate() {
        let offset = geometry.alignment_offset;
        let start_bytes = p.start.saturating_mul(geometry.logical);
        if align_down(start_bytes, grain, offset) == Some(start_bytes) {
            return Err(PlaceError::AlreadyAligned(n, grain, p.start));
        }
        let lba =
            |b: Option<u64>| b.filter(|b| b % geometry.logical == 0).map(|b| b / geometry.logical);
        let up = lba(align_up(start_bytes, grain, offset));
        let down = lba(align_down(start_bytes, grain, offset));
        for candidate in [up, down].into_iter().flatten() {
            match fit.check(candidate) {
                Ok(()) => {
                    let note = (i > 0).then(|| {
                        format!(
                            "no room at a {}-byte boundary; using the {grain}-byte physical \
                             sector grain instead",
                            grains[0]
                        )
                    });
                    return Ok(Placement {
                        partition: p.clone(),
                        new_start: candidate,
                        grain_bytes: grain,
                        room,
                        ebr: fit.new_ebr(candidate),
                        note,
                    });
                }
                Err(f) => failures.push(f),
            }
        }
    }
    Err(no_room(n, failures))
}

/// What a move leaves misaligned inside the partition: a FAT data area
/// sits a fixed distance from the partition's start, so when that distance
/// is not a whole number of physical sectors no start aligns both the
/// partition and the clusters. `layers` are the partition's, `dev` names
/// it, `size_bytes` is its size.
pub(crate) fn fat_data_warning(
    layers: &[Layer],
    physical: u64,
    dev: &str,
    size_bytes: u64,
) -> Option<String> {
    let (bits, sector, cluster, data) = layers.iter().find_map(|l| match l.details {
        Details::Fat { bits, sector_bytes, cluster_bytes, data_start_bytes } if l.depth == 0 => {
            Some((bits, sector_bytes, cluster_bytes, data_start_bytes))
        }
        _ => None,
    })?;
    let off = data.checked_rem(physical).filter(|&r| r != 0)?;
    let (command, _) = crate::advise::mkfs_vfat(dev, size_bytes, sector, physical);
    Some(format!(
        "the FAT{bits} data area starts {data} bytes into the partition, {off} bytes past a \
         {physical}-byte boundary: after the move its {cluster}-byte clusters will still straddle \
         physical sectors (audit still calls that layer misaligned). Moving cannot fix it: a \
         start that aligned the clusters would misalign the partition. Back the files up, \
         recreate the file system (`{command}`: without -a, mkfs.fat aligns the data area to \
         the cluster size) and restore"
    ))
}

/// Why one candidate start does not work.
struct Failure {
    why: String,
    missing_sectors: Option<u64>,
}

fn no_room(n: u32, failures: Vec<Failure>) -> PlaceError {
    let missing_sectors = failures.iter().filter_map(|f| f.missing_sectors).min();
    let why: Vec<String> = failures.into_iter().map(|f| f.why).collect();
    PlaceError::NoRoom { partition: n, why: why.join("; "), missing_sectors }
}

struct Fit<'a> {
    p: &'a Partition,
    room: Range<u64>,
    first: bool,
    /// The EBR of a logical that may move with it.
    ebr: Option<u64>,
    force: bool,
    gap_nonzero: &'a dyn Fn(Range<u64>) -> bool,
}

impl Fit<'_> {
    /// Where the EBR goes for a start at or before it.
    fn new_ebr(&self, start: u64) -> Option<u64> {
        self.ebr.filter(|&ebr| start <= ebr).map(|_| start.saturating_sub(1))
    }

    fn check(&self, start: u64) -> Result<(), Failure> {
        let fail = |why: String, missing_sectors| Err(Failure { why, missing_sectors });
        let end = start.saturating_add(self.p.size);
        if start < self.room.start {
            return fail(
                format!("LBA {start} lies before the first free sector {}", self.room.start),
                None,
            );
        }
        if end > self.room.end {
            let missing = end - self.room.end;
            return fail(
                format!(
                    "LBA {start} needs {missing} more sector(s) after the partition (free space \
                     ends at LBA {})",
                    self.room.end
                ),
                Some(missing),
            );
        }
        if let Some(ebr) = self.new_ebr(start) {
            if ebr < self.room.start {
                return fail(
                    format!(
                        "LBA {start} leaves no free sector before it for the EBR (free space \
                         begins at LBA {})",
                        self.room.start
                    ),
                    None,
                );
            }
            if !self.force && (self.gap_nonzero)(ebr..start) {
                return fail(
                    format!(
                        "LBA {start}: sector {ebr}, where its EBR would go, holds data; --force \
                         overwrites it"
                    ),
                    None,
                );
            }
        }
        if self.first
            && start < self.p.start
            && !self.force
            && (self.gap_nonzero)(start..self.p.start)
        {
            return fail(
                format!(
                    "LBA {start}: sectors {start}-{} before the first partition hold data (boot \
                     loaders such as GRUB's core.img live there); --force overwrites them",
                    self.p.start - 1
                ),
                None,
            );
        }
        Ok(())
    }

    fn explicit(&self, to: u64, geometry: &Geometry) -> Result<u64, PlaceError> {
        let n = self.p.number;
        if to == self.p.start {
            return Err(PlaceError::AlreadyAligned(n, geometry.physical, to));
        }
        let judged = geometry.judge(to, self.p.size);
        if !judged.is_some_and(|v| v.aligned_physical) {
            return Err(PlaceError::CannotMove(
                n,
                format!(
                    "--to {to} is not on a {}-byte physical sector boundary",
                    geometry.physical
                ),
            ));
        }
        self.check(to).map(|()| to).map_err(|f| no_room(n, vec![f]))
    }
}

/// The grains to try, best first: the requested one, and for `optimal`
/// the physical sector when the optimal one finds no room.
fn grains(g: &Geometry, align: Align) -> Result<Vec<u64>, String> {
    let chosen = plan::grain(g, align).map_err(|e| e.to_string())?;
    let minimal = lcm(g.physical, g.logical).ok_or("no physical sector grain")?;
    Ok(if align == Align::Optimal && chosen != minimal {
        vec![chosen, minimal]
    } else {
        vec![chosen]
    })
}

/// The free run of LBAs around `p`: bounded by the table's usable area and
/// the nearest other partition (or EBR) on either side.
fn room(layout: &Layout, p: &Partition, disk_sectors: u64) -> Result<Range<u64>, String> {
    let (lo, hi) = bounds(layout, p, disk_sectors)?;
    let end = p.start.checked_add(p.size).ok_or("its end overflows")?;
    let mut left = lo;
    let mut right = hi;
    for o in obstacles(layout, p) {
        if o.start < end && p.start < o.end {
            return Err(format!("it overlaps sectors {}-{} in use", o.start, o.end - 1));
        }
        if o.end <= p.start {
            left = left.max(o.end);
        } else {
            right = right.min(o.start);
        }
    }
    if p.start < left || end > right {
        return Err("it lies outside the area its table allows".into());
    }
    Ok(left..right)
}

/// The area a partition of its kind may use, as [lo, hi).
fn bounds(layout: &Layout, p: &Partition, disk_sectors: u64) -> Result<(u64, u64), String> {
    match (layout.label, p.kind) {
        (Label::Gpt, _) => {
            let g = layout.gpt.as_ref().ok_or("no GPT header")?;
            Ok((g.first_usable_lba, g.last_usable_lba.saturating_add(1).min(disk_sectors)))
        }
        (_, PartKind::Logical) => {
            let ext = extended(layout, p).ok_or("no extended partition holds it")?;
            let ebr = p.ebr.ok_or("its EBR is unknown")?;
            // An EBR that moves with its logical needs a sector before it.
            let lo =
                if movable_ebr(layout, p).is_some() { ext.start } else { ebr }.saturating_add(1);
            Ok((lo, ext.start.saturating_add(ext.size).min(disk_sectors)))
        }
        _ => Ok((1, disk_sectors.min(u64::from(u32::MAX)))),
    }
}

/// The extended partition holding logical `p`'s EBR.
pub(super) fn extended<'a>(layout: &'a Layout, p: &Partition) -> Option<&'a Partition> {
    let ebr = p.ebr?;
    layout
        .partitions
        .iter()
        .find(|q| q.kind == PartKind::Extended && q.start <= ebr && ebr - q.start < q.size)
}

/// The EBR of logical `p` when it may move with it: any but the first,
/// the extended partition's own first sector, to which every link is
/// relative, and one that describes another logical too.
fn movable_ebr(layout: &Layout, p: &Partition) -> Option<u64> {
    let ebr = p.ebr.filter(|_| p.kind == PartKind::Logical)?;
    let shared = layout.partitions.iter().any(|q| q.number != p.number && q.ebr == Some(ebr));
    (extended(layout, p)?.start != ebr && !shared).then_some(ebr)
}

/// Sectors other than `p`'s that a move must not touch.
fn obstacles(layout: &Layout, p: &Partition) -> Vec<Range<u64>> {
    let logical = p.kind == PartKind::Logical;
    let mut out = Vec::new();
    for q in layout.partitions.iter().filter(|q| q.number != p.number && q.size > 0) {
        let in_scope = match (logical, q.kind) {
            (true, PartKind::Logical) => true,
            (true, _) => false,
            (false, PartKind::Logical) => false,
            (false, _) => true,
        };
        if in_scope {
            out.push(q.start..q.start.saturating_add(q.size));
        }
    }
    // Every EBR of the chain, also one that holds no logical: a link runs
    // through it. (place_all keeps the list in step with EBRs it moves.)
    let chain = layout.mbr.as_ref().map(|m| m.ebrs.as_slice()).unwrap_or_default();
    for &ebr in chain.iter().filter(|&&ebr| logical && Some(ebr) != p.ebr) {
        out.push(ebr..ebr.saturating_add(1));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::fixtures::{gpt_image, mbr_entry, mbr_extended};
    use crate::table::read;

    fn geometry() -> Geometry {
        Geometry::new(512, 4096, 0, None, false)
    }

    fn req(partition: u32) -> PlaceRequest {
        PlaceRequest { partition, to: None, align: Align::Optimal, force: false }
    }

    fn fdisk_63(sectors: u64, size: u32) -> Layout {
        let mut img = vec![0u8; (sectors * 512) as usize];
        mbr_entry(&mut img, 0, 0, 0x83, 63, size);
        read(&img, 512, img.len() as u64).unwrap()
    }

    #[test]
    fn a_fat_data_area_off_the_physical_grid_is_said_with_its_fix() {
        let fat = |data_start_bytes, depth| Layer {
            kind: crate::stack::Kind::Fat,
            name: "vfat",
            label: None,
            depth,
            offset_bytes: data_start_bytes,
            absolute_offset_bytes: data_start_bytes,
            size_bytes: None,
            unit_bytes: Some(4096),
            details: Details::Fat {
                bits: 32,
                sector_bytes: 512,
                cluster_bytes: 4096,
                data_start_bytes,
            },
            note: None,
        };
        let gib = 1 << 30;
        let said = fat_data_warning(&[fat(549_888, 0)], 4096, "/dev/sdb1", gib).unwrap();
        assert!(said.contains("549888 bytes into the partition, 1024 bytes past"), "{said}");
        assert!(said.contains("`mkfs.vfat -F 32 -s 8 /dev/sdb1`"), "{said}");
        // 100 MiB holds 25,600 clusters of 4 KiB: FAT32 needs 65,525.
        let small = fat_data_warning(&[fat(549_888, 0)], 4096, "/dev/sdb1", 100 << 20).unwrap();
        assert!(small.contains("`mkfs.vfat -s 8 /dev/sdb1`"), "{small}");
        assert_eq!(fat_data_warning(&[fat(548_864, 0)], 4096, "x", gib), None);
        assert_eq!(
            fat_data_warning(&[fat(549_888, 1)], 4096, "x", gib),
            None,
            "not the partition's own"
        );
        assert_eq!(fat_data_warning(&[fat(549_888, 0)], 512, "x", gib), None);
    }

    #[test]
    fn the_articles_disk_goes_to_2048_when_there_is_room_else_64_else_56() {
        let zero = |_: Range<u64>| false;
        let roomy = fdisk_63(100_000, 50_000);
        let got = place(&roomy, &geometry(), 100_000, &req(1), &zero).unwrap();
        assert_eq!((got.new_start, got.grain_bytes, got.note), (2048, 1 << 20, None));
        let tight = fdisk_63(100_000, 100_000 - 64);
        let got = place(&tight, &geometry(), 100_000, &req(1), &zero).unwrap();
        assert_eq!((got.new_start, got.grain_bytes), (64, 4096));
        assert!(got.note.unwrap().contains("1048576-byte"));
        let full = fdisk_63(100_000, 100_000 - 63);
        let got = place(&full, &geometry(), 100_000, &req(1), &zero).unwrap();
        assert_eq!(got.new_start, 56);
    }

    #[test]
    fn boot_loader_bytes_before_the_first_partition_are_kept_unless_forced() {
        let grub = |r: Range<u64>| r.start < 63;
        let full = fdisk_63(100_000, 100_000 - 63);
        let err = place(&full, &geometry(), 100_000, &req(1), &grub).unwrap_err();
        let PlaceError::NoRoom { why, missing_sectors, .. } = &err else { panic!("{err}") };
        assert_eq!(*missing_sectors, Some(1), "{why}");
        assert!(why.contains("GRUB") && why.contains("LBA 64 needs 1 more sector"), "{why}");
        let forced = PlaceRequest { force: true, ..req(1) };
        assert_eq!(place(&full, &geometry(), 100_000, &forced, &grub).unwrap().new_start, 56);
    }

    #[test]
    fn logicals_stay_after_their_ebr_and_before_the_next() {
        let mut img = mbr_extended();
        let layout = read(&img, 512, img.len() as u64).unwrap();
        // Logical 6 at 129+63 between EBR 128 and EBR 192: 136 fits, 128 is the EBR.
        let got = place(
            &layout,
            &geometry(),
            512,
            &PlaceRequest { align: Align::Minimal, ..req(6) },
            &|_| false,
        );
        assert!(matches!(got, Err(PlaceError::NoRoom { .. })), "{got:?}");
        mbr_entry(&mut img, 128 * 512, 0, 0x83, 1, 50);
        let layout = read(&img, 512, img.len() as u64).unwrap();
        let got = place(&layout, &geometry(), 512, &req(6), &|_| false).unwrap();
        assert_eq!((got.new_start, got.room, got.ebr), (136, 128..192, None));
    }

    #[test]
    fn a_logical_takes_its_ebr_along_into_free_space_before_it() {
        let mut img = mbr_extended();
        // Logical 5 shrunk to 65+55: sectors 120-127 free before EBR 128.
        mbr_entry(&mut img, 64 * 512, 0, 0x83, 1, 55);
        let layout = read(&img, 512, img.len() as u64).unwrap();
        let to = |lba| PlaceRequest { to: Some(lba), ..req(6) };
        let got = place(&layout, &geometry(), 512, &to(128), &|_| false).unwrap();
        assert_eq!((got.new_start, got.room, got.ebr), (128, 120..192, Some(127)));
        let err = place(&layout, &geometry(), 512, &to(112), &|_| false).unwrap_err();
        assert!(err.to_string().contains("before the first free sector 120"), "{err}");
        let err = place(&layout, &geometry(), 512, &to(120), &|_| false);
        assert!(format!("{err:?}").contains("no free sector before it for the EBR"), "{err:?}");
        let err = place(&layout, &geometry(), 512, &to(128), &|r| r == (127..128));
        assert!(format!("{err:?}").contains("sector 127, where its EBR would go"), "{err:?}");
        // The first EBR is the extended partition's start: it stays.
        let got =
            place(&layout, &geometry(), 512, &PlaceRequest { to: Some(72), ..req(5) }, &|_| true);
        assert_eq!(got.map(|g| (g.room.start, g.ebr)), Ok((65, None)));
        // An EBR holding no logical is in the way too: a link runs through it.
        let mut empty = mbr_extended();
        mbr_entry(&mut empty, 64 * 512, 0, 0x83, 1, 50);
        empty[128 * 512 + 446..128 * 512 + 462].fill(0);
        let layout = read(&empty, 512, empty.len() as u64).unwrap();
        let err =
            place(&layout, &geometry(), 512, &PlaceRequest { to: Some(120), ..req(6) }, &|_| false);
        assert!(format!("{err:?}").contains("before the first free sector 129"), "{err:?}");
    }

    #[test]
    fn gpt_34_goes_to_2048_or_40_and_explicit_targets_are_checked() {
        let img = gpt_image(512, 8192, 128, &[(34, 7000, "a")]);
        let layout = read(&img, 512, img.len() as u64).unwrap();
        let got = place(&layout, &geometry(), 8192, &req(1), &|_| true).unwrap();
        assert_eq!(got.new_start, 40, "the room after it is too small for 2048");
        let to = |to| {
            place(&layout, &geometry(), 8192, &PlaceRequest { to: Some(to), ..req(1) }, &|_| false)
        };
        assert_eq!(to(48).unwrap().new_start, 48);
        assert!(matches!(to(41), Err(PlaceError::CannotMove(1, _))));
        assert!(matches!(to(8000), Err(PlaceError::NoRoom { .. })));
        let aligned = gpt_image(512, 8192, 128, &[(2048, 4000, "a")]);
        let layout = read(&aligned, 512, aligned.len() as u64).unwrap();
        let err = place(&layout, &geometry(), 8192, &req(1), &|_| false).unwrap_err();
        assert_eq!(err, PlaceError::AlreadyAligned(1, 1 << 20, 2048));
        assert_eq!(
            place(&layout, &geometry(), 8192, &req(9), &|_| false),
            Err(PlaceError::NotFound(9))
        );
    }
}
