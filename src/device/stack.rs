//! Where a stacked device (md, device-mapper, bcache) lies on the disks
//! under it: sysfs `slaves/` down to whole disks, with md's member data
//! offsets (md/dev-*/offset), device-mapper's table (DM_TABLE_STATUS) and
//! bcache's backing device and size, which alone say where its bytes go. The kernel folds all of it into one
//! `alignment_offset`, and says -1 when the ways down disagree.

use super::ioctl;
use super::sysfs::{read_number, read_text, SysRoot};
use serde::Serialize;
use std::fs;
use std::path::{Path, PathBuf};

/// Deeper stacks are not real (and sysfs cannot loop, but be sure).
const MAX_DEPTH: u32 = 8;
const SECTOR: u64 = 512;

/// One way a stacked device's bytes reach a disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Origin {
    /// The whole disk (sda).
    pub disk: String,
    /// The devices from the stacked one down to the disk as lsblk's NAME
    /// says them (a device-mapper device by its dm name, not dm-N): vg-lv,
    /// md0, sda1.
    pub via: Vec<String>,
    /// The stacked device's byte this way starts at: 0, or where a later
    /// device-mapper target begins.
    pub device_offset_bytes: u64,
    /// Where that byte lies on the disk; None when the mapping cannot be
    /// read (a device-mapper target other than linear, striped or crypt;
    /// the table unreadable without CAP_SYS_ADMIN).
    pub disk_offset_bytes: Option<u64>,
}

/// The ways block device `name` reaches whole disks; empty unless it has
/// slaves. For a mirror every member is one; for a striped md array each
/// member's data area start (whole chunks go there).
pub(crate) fn origins(root: &SysRoot, name: &str) -> Vec<Origin> {
    kernel_origins(root, name).into_iter().map(|o| named(root, o)).collect()
}

/// [`origins`] with `via` in kernel names.
fn kernel_origins(root: &SysRoot, name: &str) -> Vec<Origin> {
    if slaves(&class_dir(root, name)).is_empty() {
        return Vec::new();
    }
    down(root, name, 0)
}

/// `via` as lsblk names the devices: dm-N by its sysfs `dm/name`.
fn named(root: &SysRoot, mut origin: Origin) -> Origin {
    for n in &mut origin.via {
        if let Some(dm) = read_text(&root.block(n).join("dm/name")) {
            *n = dm;
        }
    }
    origin
}

fn class_dir(root: &SysRoot, name: &str) -> PathBuf {
    root.sys.join("class/block").join(name)
}

fn slaves(dir: &Path) -> Vec<String> {
    let entries = fs::read_dir(dir.join("slaves")).into_iter().flatten().flatten();
    let mut names: Vec<String> = entries.filter_map(|e| e.file_name().into_string().ok()).collect();
    names.sort();
    names
}

fn down(root: &SysRoot, name: &str, depth: u32) -> Vec<Origin> {
    let dir = class_dir(root, name);
    let slaves = slaves(&dir);
    if slaves.is_empty() || depth >= MAX_DEPTH {
        return vec![leaf(&dir, name)];
    }
    // (this device's byte, slave, that slave's byte) for each mapping.
    let maps: Vec<(u64, String, Option<u64>)> = if dir.join("md").is_dir() {
        slaves
            .into_iter()
            .map(|s| {
                let offset = dir.join("md").join(format!("dev-{s}/offset"));
                (0, s, read_number(&offset).and_then(|o| o.checked_mul(SECTOR)))
            })
            .collect()
    } else if let Some(map) = bcache_map(root, &dir, &slaves) {
        vec![map]
    } else if dir.join("dm").is_dir() {
        dm_maps(root, &dir).unwrap_or_else(|| slaves.into_iter().map(|s| (0, s, None)).collect())
    } else {
        slaves.into_iter().map(|s| (0, s, None)).collect()
    };
    let mut out = Vec::new();
    for (at, slave, slave_at) in maps {
        let below = down(root, &slave, depth + 1);
        // The ways down from the slave that hold its byte `slave_at`: those
        // starting last at or before it (every mirror of that part).
        let first = below.iter().map(|o| o.device_offset_bytes).min().unwrap_or(0);
        let from = slave_at.map_or(first, |s| {
            below.iter().map(|o| o.device_offset_bytes).filter(|&d| d <= s).max().unwrap_or(first)
        });
        for o in below.into_iter().filter(|o| o.device_offset_bytes == from) {
            let disk_offset =
                slave_at.and_then(|s| o.disk_offset_bytes?.checked_add(s.checked_sub(from)?));
            let mut via = vec![name.to_string()];
            via.extend(o.via);
            out.push(Origin {
                disk: o.disk,
                via,
                device_offset_bytes: at,
                disk_offset_bytes: disk_offset,
            });
        }
    }
    out
}

/// A disk, or a partition at its start on its disk.
fn leaf(dir: &Path, name: &str) -> Origin {
    let disk = fs::canonicalize(dir).ok().and_then(|real| {
        read_number(&real.join("partition"))?;
        Some(real.parent()?.file_name()?.to_str()?.to_string())
    });
    let start = match &disk {
        Some(_) => read_number(&dir.join("start")).and_then(|s| s.checked_mul(SECTOR)),
        None => Some(0),
    };
    Origin {
        disk: disk.unwrap_or_else(|| name.to_string()),
        via: vec![name.to_string()],
        device_offset_bytes: 0,
        disk_offset_bytes: start,
    }
}

/// A bcache device maps its backing device (`bcache/` links into the
/// backing device's own `bcache/`) from `data_offset`, which sysfs does not
/// show: the kernel sizes bcacheN as the backing device less it. Its other
/// slaves are cache devices, which hold only copies. None for anything
/// else, a flash-only volume (whose `bcache/` is its own) among them.
fn bcache_map(root: &SysRoot, dir: &Path, slaves: &[String]) -> Option<(u64, String, Option<u64>)> {
    let backing = fs::canonicalize(dir.join("bcache")).ok()?;
    let name = backing.parent()?.file_name()?.to_str()?.to_string();
    if !slaves.contains(&name) {
        return None;
    }
    let size = |dir: &Path| read_number(&dir.join("size"));
    let offset = size(&class_dir(root, &name))
        .and_then(|whole| whole.checked_sub(size(dir)?))
        .and_then(|sectors| sectors.checked_mul(SECTOR));
    Some((0, name, offset))
}

/// The mappings of a device-mapper device from its live table: linear and
/// crypt map one device from an offset; striped maps each stripe's device
/// from its offset. None when the table cannot be read.
fn dm_maps(root: &SysRoot, dir: &Path) -> Option<Vec<(u64, String, Option<u64>)>> {
    let table = live_table(root, dir)?;
    let mut maps = Vec::new();
    for target in table {
        let at = target.start_sectors.checked_mul(SECTOR)?;
        let args: Vec<&str> = target.params.split_whitespace().collect();
        let pairs: Vec<(&str, &str)> = match (target.kind.as_str(), args.as_slice()) {
            ("linear", [dev, offset, ..]) => vec![(dev, offset)],
            // cipher key iv_offset device offset [features]
            ("crypt", [_, _, _, dev, offset, ..]) => vec![(dev, offset)],
            // stripes chunk (device offset)...
            ("striped", [n, _, rest @ ..]) => {
                let n: usize = n.parse().ok()?;
                rest.chunks_exact(2).take(n).map(|p| (p[0], p[1])).collect()
            }
            _ => {
                // Not known where it maps: every slave, offset unknown.
                maps.extend(slaves(dir).into_iter().map(|s| (at, s, None)));
                continue;
            }
        };
        for (dev, offset) in pairs {
            let name = dev_name(root, dev)?;
            let offset = offset.parse::<u64>().ok().and_then(|o| o.checked_mul(SECTOR));
            maps.push((at, name, offset));
        }
    }
    Some(maps)
}

/// The live table of the device-mapper device of sysfs directory `dir`
/// (DM_TABLE_STATUS, as `dmsetup table`); None without /dev/mapper/control
/// or CAP_SYS_ADMIN.
fn live_table(root: &SysRoot, dir: &Path) -> Option<Vec<ioctl::DmTarget>> {
    let (major, minor) = read_text(&dir.join("dev"))?
        .split_once(':')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))?;
    let control = fs::File::open(root.dev.join("mapper/control")).ok()?;
    ioctl::dm_table(&control, major, minor)
}

/// What stacked device `name` is, in words, for a refusal: device-mapper
/// by its uuid's prefix (what LVM, cryptsetup, multipath and kpartx
/// write) or else its live table's target types, md by its level, bcache.
pub(crate) fn what_holds(root: &SysRoot, name: &str) -> String {
    let dir = root.block(name);
    if dir.join("dm").is_dir() {
        let uuid = read_text(&dir.join("dm/uuid")).unwrap_or_default();
        let by_uuid = [
            ("LVM-", "LVM logical volume"),
            ("CRYPT-", "dm-crypt"),
            ("mpath-", "multipath"),
            ("part", "kpartx partition"),
        ];
        if let Some((_, what)) = by_uuid.iter().find(|(prefix, _)| uuid.starts_with(prefix)) {
            return what.to_string();
        }
        let mut kinds: Vec<String> =
            live_table(root, &dir).unwrap_or_default().into_iter().map(|t| t.kind).collect();
        kinds.dedup();
        return match kinds.is_empty() {
            true => "device-mapper".into(),
            false => format!("device-mapper {}", kinds.join("+")),
        };
    }
    if dir.join("md").is_dir() {
        let level = read_text(&dir.join("md/level"));
        return level.map_or("MD RAID".into(), |level| format!("MD RAID {level}"));
    }
    if dir.join("bcache").exists() {
        return "bcache".into();
    }
    "a stacked device".into()
}

/// The kernel name of device `major:minor`.
fn dev_name(root: &SysRoot, number: &str) -> Option<String> {
    let real = fs::canonicalize(root.sys.join("dev/block").join(number)).ok()?;
    Some(real.file_name()?.to_str()?.to_string())
}

/// The ways the stacked devices above partition `number` of disk `disk`
/// (or the whole disk, for None) reach it, found up its sysfs `holders/`
/// and each followed down again: an LV on md on the partition gives md's
/// way and the LV's, each landing on the partition where the kernel maps
/// it, which headers alone cannot say of a device-mapper table.
pub fn held(root: &SysRoot, disk: &str, number: Option<u32>) -> Vec<Origin> {
    let dir = root.block(disk);
    let below = match number {
        None => disk.to_string(),
        Some(n) => {
            let parts = super::sysfs::partition_dirs(&dir);
            let Some(part) = parts.iter().find(|p| super::sysfs::partition_number(p) == Some(n))
            else {
                return Vec::new();
            };
            let Some(name) = part.file_name().and_then(|n| n.to_str()) else { return Vec::new() };
            name.to_string()
        }
    };
    let mut above: Vec<String> = Vec::new();
    let mut next = vec![below.clone()];
    for _ in 0..MAX_DEPTH {
        let found: Vec<String> = next
            .iter()
            .flat_map(|n| holders(&class_dir(root, n)))
            .filter(|h| !above.contains(h))
            .collect();
        if found.is_empty() {
            break;
        }
        above.extend(found.iter().cloned());
        next = found;
    }
    above.sort();
    above.dedup();
    let mine = |o: &Origin| o.disk == disk && o.via.last() == Some(&below);
    let found = above.iter().flat_map(|h| kernel_origins(root, h).into_iter().filter(mine));
    found.map(|o| named(root, o)).collect()
}

/// Whether anything holds block device `name` (a kpartx mapping over a
/// dm device, an LV on a PV...).
pub(crate) fn is_held(root: &SysRoot, name: &str) -> bool {
    !holders(&class_dir(root, name)).is_empty()
}

fn holders(dir: &Path) -> Vec<String> {
    let entries = fs::read_dir(dir.join("holders")).into_iter().flatten().flatten();
    entries.filter_map(|e| e.file_name().into_string().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fixture sysfs: LV dm-0 (its table unreadable here) on md0, a
    /// mirror of sda1 (LBA 63) and sdb1 (LBA 2048), data offset 2048.
    fn fixture() -> (tempfile::TempDir, SysRoot) {
        let tmp = tempfile::tempdir().unwrap();
        let sys = tmp.path().join("sys");
        let put = |path: &str, text: &str| {
            let path = sys.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        };
        let dir = |path: &str| fs::create_dir_all(sys.join(path)).unwrap();
        for (disk, start) in [("sda", "63"), ("sdb", "2048")] {
            put(&format!("block/{disk}/{disk}1/partition"), "1");
            put(&format!("block/{disk}/{disk}1/start"), start);
            dir(&format!("block/{disk}/{disk}1/holders/md0"));
            put(&format!("block/md0/md/dev-{disk}1/offset"), "2048");
            dir(&format!("block/md0/slaves/{disk}1"));
        }
        dir("block/md0/holders/dm-0");
        dir("block/dm-0/slaves/md0");
        dir("block/dm-0/dm");
        put("block/dm-0/dm/name", "vg-lv");
        dir("class/block");
        for (name, at) in [("sda", "sda"), ("sdb", "sdb"), ("md0", "md0"), ("dm-0", "dm-0")] {
            symlink(format!("../../block/{at}"), sys.join("class/block").join(name)).unwrap();
        }
        for part in ["sda/sda1", "sdb/sdb1"] {
            let name = &part[4..];
            symlink(format!("../../block/{part}"), sys.join("class/block").join(name)).unwrap();
        }
        let root = SysRoot::fixture(sys);
        (tmp, root)
    }

    #[test]
    fn md_members_land_at_partition_start_plus_data_offset() {
        let (_tmp, root) = fixture();
        let found = origins(&root, "md0");
        let at: Vec<(&str, Option<u64>)> =
            found.iter().map(|o| (o.disk.as_str(), o.disk_offset_bytes)).collect();
        assert_eq!(at, [("sda", Some((63 + 2048) * 512)), ("sdb", Some(4096 * 512))]);
        assert_eq!(found[0].via, ["md0", "sda1"]);
        assert!(origins(&root, "sda").is_empty(), "a disk is not stacked");
    }

    #[test]
    fn an_unreadable_table_is_unknown_not_zero() {
        let (_tmp, root) = fixture();
        let found = origins(&root, "dm-0");
        assert_eq!(found.len(), 2);
        assert!(found.iter().all(|o| o.disk_offset_bytes.is_none()), "{found:?}");
        assert_eq!(found[1].via, ["vg-lv", "md0", "sdb1"], "lsblk's names, not dm-0");
    }

    #[test]
    fn bcache_lands_on_its_backing_device_at_its_data_offset() {
        let (tmp, root) = fixture();
        let sys = tmp.path().join("sys");
        let put = |path: &str, text: &str| {
            let path = sys.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        };
        // sda1 its backing device (40961 + 16 sectors), sdb1 its cache.
        put("block/sda/sda1/size", "300000");
        put("block/sda/sda1/bcache/running", "1");
        put("block/bcache0/size", "299984");
        for slave in ["sda1", "sdb1"] {
            fs::create_dir_all(sys.join("block/bcache0/slaves").join(slave)).unwrap();
        }
        symlink("../sda/sda1/bcache", sys.join("block/bcache0/bcache")).unwrap();
        symlink("../../block/bcache0", sys.join("class/block/bcache0")).unwrap();
        let found = origins(&root, "bcache0");
        let at: Vec<(&str, Option<u64>)> =
            found.iter().map(|o| (o.disk.as_str(), o.disk_offset_bytes)).collect();
        assert_eq!(at, [("sda", Some((63 + 16) * 512))]);
        assert_eq!(found[0].via, ["bcache0", "sda1"]);
        // A flash-only volume: its bcache/ is its own, its slave the cache.
        fs::create_dir_all(sys.join("block/bcache1/bcache")).unwrap();
        fs::create_dir_all(sys.join("block/bcache1/slaves/sdb1")).unwrap();
        symlink("../../block/bcache1", sys.join("class/block/bcache1")).unwrap();
        let found = origins(&root, "bcache1");
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            (found[0].via.as_slice(), found[0].disk_offset_bytes),
            (&["bcache1".to_string(), "sdb1".to_string()][..], None)
        );
    }

    #[test]
    fn holders_are_found_up_the_partition() {
        let (_tmp, root) = fixture();
        let held = held(&root, "sda", Some(1));
        let via: Vec<&str> = held.iter().map(|o| o.via[0].as_str()).collect();
        assert_eq!(via, ["vg-lv", "md0"], "dm-0 by its dm name");
        assert!(held.iter().all(|o| o.disk == "sda"));
        assert!(super::held(&root, "sda", None).is_empty());
    }
}
