//! The layers inside a partition, judged by the peers that made them:
//! mkfs.* with dumpe2fs, xfs_db, btrfs, fsck.vfat, dump.exfat and ntfsinfo;
//! pvcreate/vgcreate/lvcreate with pvs and lvs; cryptsetup luksFormat with
//! luksDump; md superblocks laid out from the published format with
//! mdadm --examine; make-bcache with bcache-super-show; ZFS labels with
//! blkid. blkalign must find exactly
//! where each layer's data starts, at aligned and misaligned partition
//! starts, in images and on 512 and 4096-byte sector loop devices.

use crate::common;

use blkalign::align::Class;
use blkalign::stack::{judge, walk, Details, Kind, Layer};
use common::{needs, run, run_stdin, Image, Loop};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

tests![
    file_systems_in_partitions_at_aligned_and_misaligned_starts,
    file_systems_on_loop_devices_at_512_and_4096_bytes_per_sector,
    lvm_pe_start_and_logical_volumes,
    luks_payload_offsets,
    md_superblocks_and_what_they_hold,
    md_then_lvm_then_ext4,
    zfs_ashift_from_the_vdev_label,
    findings_at_aligned_offsets,
    damaged_real_headers_never_panic,
    audit_and_advise_judge_the_layers_inside_partitions,
    a_whole_disk_file_system_is_judged_as_the_targets_layer,
    an_opened_luks_partition_is_followed_through_its_dm_crypt_holder,
    advise_runs_as_printed_on_an_image_and_fits_the_partition_type,
    shrink_advice_for_an_image_runs_as_printed,
    layers_off_only_because_their_partition_is_get_realign_first,
    a_move_never_misaligns_a_layer_that_is_aligned,
    a_fat_off_the_grid_inside_its_partition_gets_the_right_mkfs,
    audit_and_advise_see_a_file_system_made_through_the_partition_node,
    bcache_superblocks_and_what_they_hold,
    file_system_uuids_match_blkid,
];

const MIB: u64 = 1 << 20;

/// A peer's standard output.
fn out(program: &str, args: &[&str]) -> String {
    String::from_utf8_lossy(&run(program, args).stdout).into_owned()
}

/// The first word after `key` on the line naming it, as `key: value`,
/// `key = value` or `key<whitespace>value`.
fn field(text: &str, key: &str) -> String {
    text.lines()
        .find_map(|line| {
            let line = line.trim();
            let (name, rest) = match line.find([':', '=']) {
                Some(at) if line[..at].trim() == key => (key, &line[at + 1..]),
                _ => (line.split_whitespace().next()?, line.split_once(char::is_whitespace)?.1),
            };
            (name == key).then(|| rest.split_whitespace().next().unwrap_or("").to_string())
        })
        .unwrap_or_else(|| panic!("no {key:?} in:\n{text}"))
}

/// `field` as a number, its unit suffix ("B", "K") dropped.
fn number(text: &str, key: &str) -> u64 {
    let value = field(text, key);
    let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("{key}: {value:?} is not a number"))
}

/// The number a peer prints alone, as `pvs --noheadings` does ("1048576B").
fn bare(text: &str) -> u64 {
    let digits: String = text.trim().chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("not a number: {text:?}"))
}

/// The number right after `prefix` anywhere in `text`.
fn after(text: &str, prefix: &str) -> u64 {
    let at = text.find(prefix).unwrap_or_else(|| panic!("no {prefix:?} in:\n{text}"));
    let digits: String =
        text[at + prefix.len()..].trim_start().chars().take_while(char::is_ascii_digit).collect();
    digits.parse().expect("number")
}

fn layers(path: &Path, offset: u64, size: u64) -> Vec<Layer> {
    walk(&File::open(path).expect("open"), offset, size)
}

/// Copy the data (not the holes) of sparse file `src` into `dst` at byte `at`.
fn embed(src: &Path, dst: &Path, at: u64) {
    use rustix::fs::{seek, SeekFrom};
    let (src, dst) =
        (File::open(src).expect("src"), File::options().write(true).open(dst).unwrap());
    let mut buf = vec![0u8; MIB as usize];
    let mut pos = 0;
    // No more data past `pos` is ENXIO.
    while let Ok(data) = seek(&src, SeekFrom::Data(pos)) {
        let hole = seek(&src, SeekFrom::Hole(data)).expect("SEEK_HOLE");
        pos = data;
        while pos < hole {
            let n = (hole - pos).min(MIB) as usize;
            src.read_exact_at(&mut buf[..n], pos).expect("read");
            dst.write_all_at(&buf[..n], at + pos).expect("write");
            pos += n as u64;
        }
    }
}

/// A kind of contents: how its tool makes it on a path (a file or a
/// partition node), and the checks of the layer found against what the
/// peers say about that path.
struct Case {
    tool: &'static str,
    oracle: &'static str,
    size: u64,
    make: fn(&str, u64),
    check: fn(&str, &Layer),
}

const CASES: &[Case] = &[
    Case { tool: "mkfs.ext4", oracle: "dumpe2fs", size: 32 * MIB, make: ext4, check: ext4_check },
    Case { tool: "mkfs.xfs", oracle: "xfs_db", size: 1024 * MIB, make: xfs, check: xfs_check },
    Case { tool: "mkfs.btrfs", oracle: "btrfs", size: 128 * MIB, make: btrfs, check: btrfs_check },
    Case { tool: "mkfs.vfat", oracle: "fsck.vfat", size: 64 * MIB, make: vfat, check: vfat_check },
    Case {
        tool: "mkfs.vfat",
        oracle: "fsck.vfat",
        size: 300 * MIB,
        make: vfat32,
        check: vfat_check,
    },
    Case {
        tool: "mkfs.exfat",
        oracle: "dump.exfat",
        size: 32 * MIB,
        make: exfat,
        check: exfat_check,
    },
    Case { tool: "mkntfs", oracle: "ntfsinfo", size: 32 * MIB, make: ntfs, check: ntfs_check },
    Case { tool: "mkswap", oracle: "mkswap", size: 16 * MIB, make: swap, check: swap_check },
];

fn ext4(path: &str, _: u64) {
    run("mkfs.ext4", &["-q", "-F", "-b", "4096", "-E", "stride=16,stripe_width=64", path]);
}

fn ext4_check(path: &str, layer: &Layer) {
    let dump = out("dumpe2fs", &["-h", path]);
    let details = Details::Ext {
        block_bytes: number(&dump, "Block size"),
        stride_blocks: Some(number(&dump, "RAID stride")),
        stripe_width_blocks: Some(number(&dump, "RAID stripe width")),
    };
    assert_eq!((layer.kind, layer.offset_bytes, &layer.details), (Kind::Ext, 0, &details));
    assert_eq!(layer.unit_bytes, Some(4096));
}

/// 512-byte sectors where the device allows them: the case to flag. With
/// a stripe unit mkfs.xfs wants a 64 MiB log: 1 GiB holds it.
fn xfs(path: &str, logical: u64) {
    let sector = format!("size={}", logical.max(512));
    run("mkfs.xfs", &["-q", "-f", "-s", &sector, "-d", "su=64k,sw=4", path]);
}

fn xfs_check(path: &str, layer: &Layer) {
    let sb = out("xfs_db", &["-r", "-c", "sb", "-c", "p", path]);
    let details = Details::Xfs {
        sector_bytes: number(&sb, "sectsize"),
        block_bytes: number(&sb, "blocksize"),
        sunit_blocks: number(&sb, "unit"),
        swidth_blocks: number(&sb, "width"),
    };
    assert_eq!((layer.kind, layer.offset_bytes, &layer.details), (Kind::Xfs, 0, &details));
    assert_eq!((number(&sb, "unit"), number(&sb, "width")), (16, 64), "su=64k,sw=4");
    assert_eq!(layer.unit_bytes, Some(number(&sb, "blocksize")));
}

fn btrfs(path: &str, _: u64) {
    run("mkfs.btrfs", &["-q", "-f", path]);
}

fn btrfs_check(path: &str, layer: &Layer) {
    let sb = out("btrfs", &["inspect-internal", "dump-super", path]);
    let sector = number(&sb, "sectorsize");
    let details = Details::Btrfs { sector_bytes: sector, node_bytes: number(&sb, "nodesize") };
    assert_eq!((layer.kind, layer.offset_bytes, &layer.details), (Kind::Btrfs, 0, &details));
    assert_eq!(layer.unit_bytes, Some(sector));
}

fn vfat(path: &str, _: u64) {
    run("mkfs.vfat", &[path]);
}

/// FAT32 leaves its data area where the FATs end, 4 KiB-aligned or not.
fn vfat32(path: &str, _: u64) {
    run("mkfs.vfat", &["-F", "32", path]);
}

fn vfat_check(path: &str, layer: &Layer) {
    let fsck = out("fsck.vfat", &["-n", "-v", path]);
    let start = after(&fsck, "Data area starts at byte");
    let cluster = fsck
        .lines()
        .find_map(|l| l.trim().strip_suffix("bytes per cluster")?.trim().parse().ok())
        .expect("bytes per cluster");
    let sector = fsck
        .lines()
        .find_map(|l| l.trim().strip_suffix("bytes per logical sector")?.trim().parse().ok())
        .expect("bytes per logical sector");
    let bits = after(&fsck, "FATs,") as u8;
    let details = Details::Fat {
        bits,
        sector_bytes: sector,
        cluster_bytes: cluster,
        data_start_bytes: start,
    };
    assert_eq!((layer.kind, layer.offset_bytes, &layer.details), (Kind::Fat, start, &details));
    assert_eq!(layer.unit_bytes, Some(cluster));
}

fn exfat(path: &str, _: u64) {
    run("mkfs.exfat", &[path]);
}

fn exfat_check(path: &str, layer: &Layer) {
    let dump = out("dump.exfat", &[path]);
    let sector = 1 << number(&dump, "Sector Size Bits");
    let start = number(&dump, "Cluster Heap Offset (sector offset)") * sector;
    let cluster = number(&dump, "Cluster size");
    let details =
        Details::Exfat { sector_bytes: sector, cluster_bytes: cluster, data_start_bytes: start };
    assert_eq!((layer.kind, layer.offset_bytes, &layer.details), (Kind::Exfat, start, &details));
    assert_eq!(layer.unit_bytes, Some(cluster));
}

fn ntfs(path: &str, _: u64) {
    run("mkntfs", &["-Q", "-F", "-q", path]);
}

fn ntfs_check(path: &str, layer: &Layer) {
    let info = out("ntfsinfo", &["-m", path]);
    let cluster = number(&info, "Cluster Size");
    let details =
        Details::Ntfs { sector_bytes: number(&info, "Sector Size"), cluster_bytes: cluster };
    assert_eq!((layer.kind, layer.offset_bytes, &layer.details), (Kind::Ntfs, 0, &details));
    assert_eq!(layer.unit_bytes, Some(cluster));
}

/// mkswap writes its magic at the end of the page size it is given.
fn swap(path: &str, _: u64) {
    run("mkswap", &["-q", "-p", "16384", path]);
}

fn swap_check(_: &str, layer: &Layer) {
    let details = Details::Swap { page_bytes: 16384 };
    assert_eq!((layer.kind, layer.offset_bytes, &layer.details), (Kind::Swap, 0, &details));
}

/// Each file system in partitions of an sfdisk-made image, one on a 1 MiB
/// boundary and one an odd sector past it: the layer moves with the
/// partition and the verdict follows its absolute offset.
fn file_systems_in_partitions_at_aligned_and_misaligned_starts() {
    for case in CASES {
        if !needs(false, &["sfdisk", case.tool, case.oracle]) {
            continue;
        }
        let fs = Image::new(case.size);
        (case.make)(fs.str(), 512);
        let sectors = case.size / 512;
        let odd = 2048 + sectors + 2049;
        let script =
            format!("label: gpt\nstart=2048, size={sectors}\nstart={odd}, size={sectors}\n");
        let disk = Image::sfdisk(2 * case.size + 8 * MIB, &script);
        for start in [2048, odd] {
            embed(&fs.path, &disk.path, start * 512);
            let found = layers(&disk.path, start * 512, case.size);
            assert_eq!(found.len(), 1, "{}: {found:?}", case.tool);
            let layer = &found[0];
            (case.check)(fs.str(), layer);
            assert_eq!(layer.absolute_offset_bytes, start * 512 + layer.offset_bytes);
            assert_eq!(layer.depth, 0);
            let verdict = judge(layer, 4096, 0, None);
            assert_eq!(verdict.aligned_physical, layer.absolute_offset_bytes % 4096 == 0);
            if start == odd {
                assert_eq!(verdict.verdict, Class::Misaligned, "{}", case.tool);
                assert!(verdict.cost.expect("cost").contains("physical sector"));
            }
        }
    }
}

/// The tools run on partition nodes of 512 and 4096-byte sector loop
/// devices (each picks its sector size from the device), the peers read
/// the nodes, and blkalign reads the image behind them.
fn file_systems_on_loop_devices_at_512_and_4096_bytes_per_sector() {
    let tools: Vec<&str> = CASES.iter().flat_map(|c| [c.tool, c.oracle]).collect();
    if !needs(true, &[&["losetup", "sfdisk", "partx"][..], &tools[..]].concat()) {
        return;
    }
    for ss in [512u64, 4096] {
        let image = Image::new(CASES.iter().map(|c| c.size + 2 * MIB).sum::<u64>() + 4 * MIB);
        let lo = Loop::attach(&image.path, ss as u32);
        // Every other partition one sector off the 1 MiB grid.
        let mut start = MIB / ss;
        let mut script = String::from("label: gpt\n");
        let mut starts = Vec::new();
        for (i, case) in CASES.iter().enumerate() {
            let at = start + (i as u64 % 2);
            script.push_str(&format!("start={at}, size={}\n", case.size / ss));
            starts.push(at);
            start += (case.size + MIB) / ss;
        }
        run_stdin("sfdisk", &["-q", "--no-reread", lo.str()], Some(&script));
        lo.add_partitions(CASES.len() as u32);
        for (i, case) in CASES.iter().enumerate() {
            let node = lo.partition(i as u32 + 1);
            let node = node.to_str().expect("utf-8");
            (case.make)(node, ss);
            let found = layers(&image.path, starts[i] * ss, case.size);
            assert_eq!(found.len(), 1, "{ss}: {}: {found:?}", case.tool);
            (case.check)(node, &found[0]);
            assert_eq!(found[0].absolute_offset_bytes, starts[i] * ss + found[0].offset_bytes);
        }
    }
}

fn pvs_pe_start(dev: &str) -> u64 {
    bare(&lvm("pvs", &["--noheadings", "-o", "pe_start", "--units", "b", dev]))
}

/// The physical extent where `lvs` says the LV's first segment starts.
fn lvs_first_pe(vg: &str, lv: &str) -> u64 {
    let ranges = lvm("lvs", &["--noheadings", "-o", "seg_pe_ranges", &format!("{vg}/{lv}")]);
    // "/dev/loop0p1:0-1"
    let first = ranges.trim().rsplit(':').next().expect("range");
    first.split('-').next().expect("start").parse().expect("extent")
}

/// Keeps /etc/lvm free of our test volume groups' backups.
const NO_BACKUP: [&str; 2] = ["--config", "backup { backup = 0 archive = 0 }"];

/// An LVM command's output; even reports may archive the metadata.
fn lvm(command: &str, args: &[&str]) -> String {
    out(command, &[&NO_BACKUP[..], args].concat())
}

/// A volume group, removed however the test ends.
struct VolumeGroup(String);

impl VolumeGroup {
    fn create(name: String, pv: &str) -> VolumeGroup {
        lvm("vgcreate", &["-q", "-s", "4m", &name, pv]);
        VolumeGroup(name)
    }

    /// A logical volume laid out in the metadata only: no device-mapper here.
    fn lv(&self, name: &str, size: &str) {
        let args =
            ["-q", "--driverloaded", "n", "-an", "-Zn", "-y", "-L", size, "-n", name, &self.0];
        lvm("lvcreate", &args);
    }
}

impl Drop for VolumeGroup {
    fn drop(&mut self) {
        let _ = std::process::Command::new("vgremove")
            .args(NO_BACKUP)
            .args(["-q", "-f", "--driverloaded", "n", &self.0])
            .output();
    }
}

fn lvm_ready() -> bool {
    let tools = ["losetup", "sfdisk", "partx", "pvcreate", "vgcreate", "lvcreate", "pvs", "vgs"];
    needs(true, &[&tools[..], &["lvs", "mkfs.ext4"]].concat())
}

/// pvcreate's data alignment options against `pvs -o pe_start`, in
/// partitions on and off the grid; logical volumes from lvcreate against
/// `lvs -o seg_pe_ranges`, and an ext4 that mkfs.ext4 wrote where the
/// peers say the second one starts.
fn lvm_pe_start_and_logical_volumes() {
    if !lvm_ready() {
        return;
    }
    for ss in [512u64, 4096] {
        let image = Image::new(200 * MIB);
        let lo = Loop::attach(&image.path, ss as u32);
        let part = 40 * MIB / ss;
        let starts = [MIB / ss, 42 * MIB / ss + 1, 84 * MIB / ss, 126 * MIB / ss + 3];
        let script: String = starts.iter().map(|s| format!("start={s}, size={part}\n")).collect();
        run_stdin(
            "sfdisk",
            &["-q", "--no-reread", lo.str()],
            Some(&format!("label: gpt\n{script}")),
        );
        lo.add_partitions(4);
        let options: [&[&str]; 4] = [
            &[],
            &[],
            &["--dataalignment", "192k"],
            &["--dataalignment", "1m", "--dataalignmentoffset", "7s"],
        ];
        for (i, opts) in options.iter().enumerate() {
            let node = lo.partition(i as u32 + 1);
            let node = node.to_str().expect("utf-8");
            lvm("pvcreate", &[&["-q", "-y"][..], opts, &[node]].concat());
            let pe_start = pvs_pe_start(node);
            let found = layers(&image.path, starts[i] * ss, part * ss);
            assert_eq!(found.len(), 1, "{ss} {opts:?}: {found:?}");
            let pv = &found[0];
            assert_eq!((pv.kind, pv.offset_bytes), (Kind::LvmPv, pe_start), "{ss} {opts:?}");
            assert_eq!(pv.absolute_offset_bytes, starts[i] * ss + pe_start);
            let aligned = judge(pv, 4096, 0, None).aligned_physical;
            assert_eq!(aligned, (starts[i] * ss + pe_start) % 4096 == 0, "{ss} {opts:?}");
        }
        // A volume group on the first PV, two LVs, an ext4 in the second.
        let node = lo.partition(1);
        let node = node.to_str().expect("utf-8");
        let vg = VolumeGroup::create(format!("blkalign{}x{ss}", std::process::id()), node);
        vg.lv("one", "8m");
        vg.lv("two", "12m");
        let pe_start = pvs_pe_start(node);
        let extent =
            bare(&lvm("vgs", &["--noheadings", "-o", "vg_extent_size", "--units", "b", &vg.0]));
        let second = lvs_first_pe(&vg.0, "two");
        let fs_at = pe_start + second * extent;
        run(
            "mkfs.ext4",
            &["-q", "-F", "-b", "4096", "-E", &format!("offset={fs_at}"), node, "12M"],
        );
        let found = layers(&image.path, starts[0] * ss, part * ss);
        let summary: Vec<(Kind, u32, u64)> =
            found.iter().map(|l| (l.kind, l.depth, l.absolute_offset_bytes)).collect();
        let base = starts[0] * ss;
        assert_eq!(
            summary,
            [
                (Kind::LvmPv, 0, base + pe_start),
                (Kind::LvmLv, 1, base + pe_start + lvs_first_pe(&vg.0, "one") * extent),
                (Kind::LvmLv, 1, base + fs_at),
                (Kind::Ext, 2, base + fs_at),
            ]
        );
        assert_eq!(
            (found[0].unit_bytes, found[1].label.as_deref()),
            (Some(extent), Some(&*format!("{}/one", vg.0)))
        );
        assert_eq!(found[2].offset_bytes, second * extent, "counted from the PV's data start");
        survives_damage(&image.path, base, part * ss);
    }
}

/// cryptsetup with a key file and a cheap key derivation.
fn luks_format(path: &str, extra: &[&str]) {
    let key = tempfile::NamedTempFile::new().expect("key");
    std::fs::write(key.path(), b"blkalign test key").expect("write key");
    let fast = ["--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000"];
    let key = key.path().to_str().expect("utf-8");
    let args =
        [&["luksFormat", "-q", "--batch-mode", "--key-file", key][..], &fast, extra, &[path]];
    run("cryptsetup", &args.concat());
}

/// LUKS1 payload offsets and LUKS2 segment offsets and sector sizes, as
/// `cryptsetup luksDump` reports them; the walk stops at the ciphertext.
fn luks_payload_offsets() {
    if !needs(false, &["cryptsetup", "sfdisk"]) {
        return;
    }
    let cases: [(&[&str], u64); 4] = [
        (&["--type", "luks1", "--align-payload", "4096"], 512),
        (&["--type", "luks1", "--align-payload", "4097"], 512),
        (&["--type", "luks2", "--offset", "32768", "--sector-size", "4096"], 4096),
        (&["--type", "luks2", "--offset", "32776"], 512),
    ];
    for (args, sector) in cases {
        let luks = Image::new(32 * MIB);
        luks_format(luks.str(), args);
        let dump = out("cryptsetup", &["luksDump", luks.str()]);
        let payload = if args[1] == "luks1" {
            // Key slot 0 alone is active: its material ends the header.
            let material = number(&dump, "MK bits") / 8 * number(&dump, "AF stripes");
            let end = number(&dump, "Key material offset") * 512 + material.next_multiple_of(512);
            let found = &layers(&luks.path, 0, 32 * MIB)[0];
            assert!(
                matches!(found.details, Details::Luks { key_material_end_bytes: Some(e), .. } if e == end)
            );
            number(&dump, "Payload offset") * 512
        } else {
            assert_eq!(number(&dump, "sector"), sector);
            number(&dump, "offset")
        };
        let disk = Image::sfdisk(40 * MIB, "label: gpt\nstart=2048, size=65536\n");
        embed(&luks.path, &disk.path, MIB);
        let found = layers(&disk.path, MIB, 32 * MIB);
        assert_eq!(found.len(), 1, "{args:?}: encrypted contents are not followed");
        let layer = &found[0];
        assert_eq!(
            (layer.kind, layer.offset_bytes, layer.unit_bytes),
            (Kind::Luks, payload, Some(sector))
        );
        assert_eq!(layer.absolute_offset_bytes, MIB + payload);
        assert!(layer.note.as_deref().is_some_and(|n| n.contains("encrypted")));
        let misaligned = judge(layer, 4096, 0, None).verdict == Class::Misaligned;
        assert_eq!(misaligned, payload % 4096 != 0, "{args:?}");
        // The same, as a whole disk without a table.
        assert_eq!(layers(&luks.path, 0, 32 * MIB)[0].absolute_offset_bytes, payload);
    }
}

/// An md member laid out from the published superblock formats.
#[derive(Clone, Copy)]
struct Md {
    level: i32,
    layout: u32,
    chunk_sectors: u32,
    raid_disks: u32,
    role: u16,
    data_offset_sectors: u64,
}

impl Md {
    /// A 1.x superblock at byte `at` of `img` (whose length is the member's).
    fn v1(&self, img: &mut [u8], at: usize) {
        let sectors = img.len() as u64 / 512;
        let data =
            if at >= 8192 { at as u64 / 512 - 8 } else { sectors - self.data_offset_sectors };
        let sb = &mut img[at..at + 1024];
        sb.fill(0);
        put(sb, 0, &0xa92b_4efcu32.to_le_bytes());
        put(sb, 4, &1u32.to_le_bytes());
        put(sb, 16, &[7; 16]);
        put(sb, 32, b"host:stack");
        put(sb, 72, &self.level.to_le_bytes());
        put(sb, 76, &self.layout.to_le_bytes());
        put(sb, 80, &data.to_le_bytes());
        put(sb, 88, &self.chunk_sectors.to_le_bytes());
        put(sb, 92, &self.raid_disks.to_le_bytes());
        put(sb, 128, &self.data_offset_sectors.to_le_bytes());
        put(sb, 136, &data.to_le_bytes());
        put(sb, 144, &(at as u64 / 512).to_le_bytes());
        put(sb, 160, &u32::from(self.role).to_le_bytes()); // dev_number
        put(sb, 168, &[9; 16]);
        put(sb, 220, &self.raid_disks.to_le_bytes()); // max_dev
        for slot in 0..self.raid_disks as usize {
            put(sb, 256 + 2 * slot, &(slot as u16).to_le_bytes());
        }
        // The checksum: 32-bit words over 256 bytes plus the role table, folded.
        let len = 256 + 2 * self.raid_disks as usize;
        let mut sum: u64 = sb[..len / 4 * 4]
            .chunks(4)
            .map(|w| u64::from(u32::from_le_bytes(w.try_into().unwrap())))
            .sum();
        if len % 4 == 2 {
            sum += u64::from(u16::from_le_bytes([sb[len - 2], sb[len - 1]]));
        }
        put(sb, 216, &(((sum & 0xffff_ffff) + (sum >> 32)) as u32).to_le_bytes());
    }

    /// A 0.90 superblock in the last whole 64 KiB of `img`.
    fn v090(&self, img: &mut [u8]) -> usize {
        let at = (img.len() & !0xffff) - 0x10000;
        let words: &[(usize, u32)] = &[
            (0, 0xa92b_4efc),
            (2, 90),
            (7, self.level as u32),
            (8, (at / 1024) as u32),
            (9, self.raid_disks),
            (10, self.raid_disks),
            (64, self.layout),
            (65, self.chunk_sectors * 512),
            (995, u32::from(self.role)),
        ];
        let sb = &mut img[at..at + 4096];
        sb.fill(0);
        for &(word, value) in words {
            put(sb, word * 4, &value.to_le_bytes());
        }
        let sum: u64 =
            sb.chunks(4).map(|w| u64::from(u32::from_le_bytes(w.try_into().unwrap()))).sum();
        put(sb, 38 * 4, &(((sum & 0xffff_ffff) + (sum >> 32)) as u32).to_le_bytes());
        at
    }
}

fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
    buf[at..at + bytes.len()].copy_from_slice(bytes);
}

/// `mdadm --examine`, when mdadm is here (it is required under strict).
fn examine(path: &str) -> Option<String> {
    needs(false, &["mdadm"]).then(|| out("mdadm", &["--examine", path]))
}

/// Each superblock place and level, cross-checked with `mdadm --examine`
/// where it is installed; an ext4 that mkfs.ext4 wrote at the data offset
/// of a raid1 member is found above it.
fn md_superblocks_and_what_they_hold() {
    let len = 64 * MIB as usize;
    let raid1 = Md {
        level: 1,
        layout: 0,
        chunk_sectors: 0,
        raid_disks: 2,
        role: 1,
        data_offset_sectors: 2048,
    };
    let raid5 = Md {
        level: 5,
        layout: 2,
        chunk_sectors: 128,
        raid_disks: 3,
        role: 0,
        data_offset_sectors: 264,
    };
    let raid5_second = Md { role: 1, ..raid5 };
    for (md, at, version) in [
        (&raid1, 4096, "1.2"),
        (&raid5, 4096, "1.2"),
        (&raid5_second, 0, "1.1"),
        (&Md { data_offset_sectors: 0, ..raid1 }, (len / 512 - 16) / 8 * 8 * 512, "1.0"),
    ] {
        let img = Image::new(len as u64);
        let mut bytes = vec![0u8; len];
        md.v1(&mut bytes, at);
        std::fs::write(&img.path, &bytes).expect("write");
        check_md(&img, md, version, md.data_offset_sectors * 512);
    }
    let img = Image::new(len as u64);
    let mut bytes = vec![0u8; len];
    raid5.v090(&mut bytes);
    std::fs::write(&img.path, &bytes).expect("write");
    check_md(&img, &raid5, "0.90", 0);

    // raid1 1.2 holding an ext4 made by mkfs.ext4 at the data offset.
    if needs(false, &["mkfs.ext4", "dumpe2fs"]) {
        let img = Image::new(len as u64);
        run("mkfs.ext4", &["-q", "-F", "-b", "4096", "-E", "offset=1048576", img.str(), "16M"]);
        let mut bytes = std::fs::read(&img.path).expect("read");
        raid1.v1(&mut bytes, 4096);
        std::fs::write(&img.path, &bytes).expect("write");
        let found = layers(&img.path, 0, len as u64);
        let summary: Vec<(Kind, u32, u64)> =
            found.iter().map(|l| (l.kind, l.depth, l.absolute_offset_bytes)).collect();
        assert_eq!(summary, [(Kind::Md, 0, MIB), (Kind::Ext, 1, MIB)]);
    }
}

fn check_md(img: &Image, md: &Md, version: &str, data_offset: u64) {
    let found = layers(&img.path, 0, img.path.metadata().unwrap().len());
    assert_eq!(found.len(), 1, "{version}: {found:?}");
    let layer = &found[0];
    let Details::Md { version: v, level, raid_disks, role, chunk_bytes, data_offset_bytes, .. } =
        &layer.details
    else {
        panic!("{version}: not md: {layer:?}")
    };
    assert_eq!(*v, version);
    assert_eq!(
        (*raid_disks, *role, *data_offset_bytes),
        (md.raid_disks, Some(u32::from(md.role)), data_offset)
    );
    assert_eq!(*chunk_bytes, u64::from(md.chunk_sectors) * 512);
    assert_eq!(layer.offset_bytes, data_offset);
    assert_eq!(layer.unit_bytes, (md.level == 5).then_some(u64::from(md.chunk_sectors) * 512));
    // A raid5 member in slot 1 does not hold the array's first chunk.
    assert_eq!(
        layer.note.as_deref().is_some_and(|n| n.contains("another member")),
        md.role == 1 && md.level == 5
    );
    let Some(examine) = examine(img.str()) else { return };
    assert!(field(&examine, "Version").starts_with(version), "0.90 is 0.90.00");
    assert_eq!(field(&examine, "Raid Level"), *level);
    assert_eq!(number(&examine, "Raid Devices"), u64::from(md.raid_disks));
    // mdadm leaves out a zero data offset (0.90, 1.0).
    let offset = examine.contains("Data Offset").then(|| number(&examine, "Data Offset") * 512);
    assert_eq!(offset.unwrap_or(0), data_offset);
    if md.level == 5 {
        assert_eq!(number(&examine, "Chunk Size") * 1024, *chunk_bytes);
    }
}

/// md 1.2 → LVM → ext4: pvcreate on a loop device that starts at the md
/// data offset of a member image, an LV from lvcreate, mkfs.ext4 where
/// lvs says it lies; then the md superblock is written around it.
fn md_then_lvm_then_ext4() {
    if !lvm_ready() {
        return;
    }
    let member = Image::new(96 * MIB);
    let data_offset = 2048u64 * 512;
    let out_dev = out("losetup", &["-f", "--show", "-o", &data_offset.to_string(), member.str()]);
    let lo = Loop { dev: out_dev.trim().into() };
    lvm("pvcreate", &["-q", "-y", lo.str()]);
    let pe_start = pvs_pe_start(lo.str());
    let vg = VolumeGroup::create(format!("blkaligned{}", std::process::id()), lo.str());
    vg.lv("data", "16m");
    let fs_at = pe_start + lvs_first_pe(&vg.0, "data") * 4 * MIB;
    run(
        "mkfs.ext4",
        &["-q", "-F", "-b", "4096", "-E", &format!("offset={fs_at}"), lo.str(), "16M"],
    );
    let mut bytes = std::fs::read(&member.path).expect("read");
    Md { level: 1, layout: 0, chunk_sectors: 0, raid_disks: 2, role: 0, data_offset_sectors: 2048 }
        .v1(&mut bytes, 4096);
    std::fs::write(&member.path, &bytes).expect("write");
    let found = layers(&member.path, 0, 96 * MIB);
    let summary: Vec<(Kind, u32, u64)> =
        found.iter().map(|l| (l.kind, l.depth, l.absolute_offset_bytes)).collect();
    assert_eq!(
        summary,
        [
            (Kind::Md, 0, data_offset),
            (Kind::LvmPv, 1, data_offset + pe_start),
            (Kind::LvmLv, 2, data_offset + fs_at),
            (Kind::Ext, 3, data_offset + fs_at),
        ]
    );
    survives_damage(&member.path, 0, 96 * MIB);
}

/// XDR nvlist encoding, as OpenZFS's nvpair.c writes it.
enum Nv<'a> {
    U64(u64),
    Str(&'a str),
    List(Vec<(&'a str, Nv<'a>)>),
}

fn xdr_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    out.resize(out.len() + (4 - s.len() % 4) % 4, 0);
}

fn nvlist(pairs: &[(&str, Nv)]) -> Vec<u8> {
    let mut out = vec![0, 0, 0, 0, 0, 0, 0, 1]; // version, NV_UNIQUE_NAME
    for (name, value) in pairs {
        let mut pair = Vec::new();
        xdr_string(&mut pair, name);
        let (kind, body): (u32, Vec<u8>) = match value {
            Nv::U64(v) => (8, v.to_be_bytes().to_vec()),
            Nv::Str(s) => {
                let mut body = Vec::new();
                xdr_string(&mut body, s);
                (9, body)
            }
            Nv::List(inner) => (19, nvlist(inner)),
        };
        pair.extend_from_slice(&kind.to_be_bytes());
        pair.extend_from_slice(&1u32.to_be_bytes());
        pair.extend_from_slice(&body);
        let encoded = (pair.len() + 8) as u32;
        out.extend_from_slice(&encoded.to_be_bytes());
        out.extend_from_slice(&(encoded * 2).to_be_bytes());
        out.extend_from_slice(&pair);
    }
    out.extend_from_slice(&[0; 8]);
    out
}

/// A vdev image as `zpool create -o ashift=N` lays out its two leading
/// labels: nvlist at 16 KiB, uberblocks from 128 KiB.
fn zfs_image(len: usize, ashift: u64) -> Vec<u8> {
    let tree = vec![
        ("type", Nv::Str("disk")),
        ("id", Nv::U64(0)),
        ("guid", Nv::U64(77)),
        ("path", Nv::Str("/dev/sdb1")),
        ("whole_disk", Nv::U64(1)),
        ("metaslab_array", Nv::U64(256)),
        ("metaslab_shift", Nv::U64(29)),
        ("ashift", Nv::U64(ashift)),
        ("asize", Nv::U64(len as u64 - 4 * MIB)),
    ];
    let label = vec![
        ("version", Nv::U64(5000)),
        ("name", Nv::Str("tank")),
        ("state", Nv::U64(0)),
        ("txg", Nv::U64(4)),
        ("pool_guid", Nv::U64(1234)),
        ("hostname", Nv::Str("host")),
        ("top_guid", Nv::U64(77)),
        ("guid", Nv::U64(77)),
        ("vdev_children", Nv::U64(1)),
        ("vdev_tree", Nv::List(tree)),
    ];
    let mut nv = vec![1, 1, 0, 0]; // XDR encoding
    nv.extend(nvlist(&label));
    let mut img = vec![0u8; len];
    for label in [0, 256 << 10] {
        put(&mut img, label + (16 << 10), &nv);
        for slot in 0..4 {
            let ub = label + (128 << 10) + slot * 1024;
            put(&mut img, ub, &0x00ba_b10cu64.to_le_bytes());
            put(&mut img, ub + 8, &5000u64.to_le_bytes());
        }
    }
    img
}

/// ashift from the label, judged against the drive's physical sector.
fn zfs_ashift_from_the_vdev_label() {
    for ashift in [9, 12] {
        let img = Image::new(80 * MIB);
        std::fs::write(&img.path, zfs_image(80 * MIB as usize, ashift)).expect("write");
        if needs(false, &["blkid"]) {
            let blkid = out("blkid", &["-p", "-o", "value", "-s", "TYPE", img.str()]);
            assert_eq!(blkid.trim(), "zfs_member");
        }
        let found = layers(&img.path, 0, 80 * MIB);
        assert_eq!(found.len(), 1);
        let layer = &found[0];
        assert_eq!(
            (layer.kind, layer.label.as_deref(), &layer.details),
            (Kind::Zfs, Some("tank"), &Details::Zfs { ashift })
        );
        assert_eq!((layer.offset_bytes, layer.unit_bytes), (4 * MIB, Some(1 << ashift)));
        let verdict = judge(layer, 4096, 0, None);
        assert_eq!(verdict.finding.is_some(), ashift == 9, "{verdict:?}");
        assert_eq!(verdict.verdict, if ashift == 9 { Class::Suboptimal } else { Class::Aligned });
    }
}

/// Settings that cost even at an aligned offset: XFS with 512-byte
/// sectors on a 4096-byte drive, ext4 without stride on a RAID.
fn findings_at_aligned_offsets() {
    if !needs(false, &["mkfs.xfs", "mkfs.ext4"]) {
        return;
    }
    let img = Image::new(320 * MIB);
    run("mkfs.xfs", &["-q", "-f", "-s", "size=512", img.str()]);
    let xfs = &layers(&img.path, 0, 320 * MIB)[0];
    let on_4k = judge(xfs, 4096, 0, None);
    assert!(
        on_4k.aligned_physical && on_4k.finding.as_deref().unwrap().contains("512-byte sectors")
    );
    assert_eq!(on_4k.verdict, Class::Suboptimal);
    assert_eq!(judge(xfs, 512, 0, None).verdict, Class::Aligned, "a genuine 512-byte drive");

    let img = Image::new(32 * MIB);
    run("mkfs.ext4", &["-q", "-F", "-b", "4096", img.str()]);
    let plain = &layers(&img.path, 0, 32 * MIB)[0];
    let raid = judge(plain, 4096, 0, Some(256 << 10));
    assert!(raid.finding.as_deref().unwrap().contains("stripe_width=64"), "{raid:?}");
    assert_eq!(judge(plain, 4096, 0, None).verdict, Class::Aligned);
    run("mkfs.ext4", &["-q", "-F", "-b", "4096", "-E", "stride=16,stripe_width=64", img.str()]);
    let tuned = &layers(&img.path, 0, 32 * MIB)[0];
    assert_eq!(judge(tuned, 4096, 0, Some(256 << 10)).verdict, Class::Aligned);
}

/// A file read through byte flips: the peers' real headers, damaged.
struct Flipped<'a> {
    file: &'a File,
    flips: &'a [(u64, u8)],
}

impl blkalign::io::ReadAt for Flipped<'_> {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        FileExt::read_exact_at(self.file, buf, offset)?;
        for &(at, x) in self.flips {
            if let Some(i) = at.checked_sub(offset).filter(|&i| i < buf.len() as u64) {
                buf[i as usize] ^= x;
            }
        }
        Ok(())
    }
}

/// Real headers from the peers (and the md and ZFS layouts), with bytes
/// flipped where the parsers read: the walk never panics.
fn damaged_real_headers_never_panic() {
    let mut images: Vec<Image> = Vec::new();
    for case in CASES {
        if needs(false, &[case.tool]) {
            let img = Image::new(case.size);
            (case.make)(img.str(), 512);
            images.push(img);
        }
    }
    if needs(false, &["cryptsetup"]) {
        for version in ["luks1", "luks2"] {
            let img = Image::new(32 * MIB);
            luks_format(img.str(), &["--type", version]);
            images.push(img);
        }
    }
    let md = Image::new(64 * MIB);
    let mut bytes = vec![0u8; 64 * MIB as usize];
    Md {
        level: 5,
        layout: 2,
        chunk_sectors: 128,
        raid_disks: 3,
        role: 0,
        data_offset_sectors: 2048,
    }
    .v1(&mut bytes, 4096);
    std::fs::write(&md.path, bytes).expect("write");
    images.push(md);
    let zfs = Image::new(80 * MIB);
    std::fs::write(&zfs.path, zfs_image(80 * MIB as usize, 9)).expect("write");
    images.push(zfs);

    for img in &images {
        survives_damage(&img.path, 0, img.path.metadata().expect("len").len());
    }
}

/// Walk the `len` bytes at `offset` of `path` with random bytes flipped,
/// mostly in its first 2 MiB where headers live, some near its end.
fn survives_damage(path: &Path, offset: u64, len: u64) {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let file = File::open(path).expect("open");
    let place =
        prop_oneof![4 => offset..offset + 2 * MIB, 1 => (offset + len - 256 * 1024)..offset + len];
    let flips = proptest::collection::vec((place, 1u8..=255), 1..48);
    let config = Config { cases: 48, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    runner
        .run(&flips, |flips| {
            let _ = walk(&Flipped { file: &file, flips: &flips }, offset, len);
            Ok(())
        })
        .expect("never panics");
}

/// `audit` judges every layer where its data starts on the disk: a PV made
/// with `--dataalignmentoffset 7s` in an aligned partition makes the exit
/// code 1, at the byte `pvs` puts its first extent; `advise` moves its
/// extents away instead of recreating anything. A plain PV beside it is fine.
fn audit_and_advise_judge_the_layers_inside_partitions() {
    if !lvm_ready() {
        return;
    }
    let image = Image::sfdisk(64 * MIB, "label: dos\nstart=2048, size=40960\nstart=43008\n");
    let disk = Loop::attach(&image.path, 512);
    disk.add_partitions(2);
    let (bad, good) = (format!("{}p1", disk.str()), format!("{}p2", disk.str()));
    lvm("pvcreate", &["-q", "--dataalignmentoffset", "7s", &bad]);
    lvm("pvcreate", &["-q", &good]);
    let pe_start = pvs_pe_start(&bad);
    let (code, target) = common::audit_json(&[disk.str()]);
    assert_eq!(code, 1, "{target}");
    let layers = |n: usize| target["partitions"][n]["layers"].as_array().expect("layers").clone();
    let (bad_layers, good_layers) = (layers(0), layers(1));
    assert_eq!(bad_layers[0]["kind"], "lvm_pv", "{target}");
    assert_eq!(bad_layers[0]["absolute_offset_bytes"], 2048 * 512 + pe_start);
    assert_eq!(bad_layers[0]["verdict"], "misaligned");
    assert_eq!(target["partitions"][0]["verdict"], "aligned");
    assert_eq!(good_layers[0]["verdict"], "aligned", "{target}");
    let human = common::blkalign().args(["audit", disk.str()]).output().expect("audit");
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("└ LVM2_member") && text.contains("1 layer inside misaligned"), "{text}");
    let advice = common::blkalign().args(["advise", "--json", disk.str()]).output().expect("run");
    let advice: serde_json::Value = serde_json::from_slice(&advice.stdout).expect("json");
    let first = advice["partitions"][0]["advice"].to_string();
    assert!(first.contains("pvmove") && !first.contains("\"destroys_data\":true"), "{first}");
}

/// A disk without a table: its layers are the target's own.
fn a_whole_disk_file_system_is_judged_as_the_targets_layer() {
    if !needs(false, &["mkfs.ext4"]) {
        return;
    }
    let image = Image::new(32 * MIB);
    run("mkfs.ext4", &["-q", "-F", "-b", "1024", image.str()]);
    let (code, target) = common::audit_json(&[image.str()]);
    assert_eq!(target["table"], "none");
    assert_eq!(target["contents"]["name"], "ext4");
    let layer = &target["layers"][0];
    assert_eq!((layer["name"].as_str(), layer["unit_bytes"].as_u64()), (Some("ext4"), Some(1024)));
    // 1 KiB blocks on a 4 KiB sector: suboptimal, not misaligned.
    assert_eq!(layer["verdict"], "suboptimal", "{target}");
    assert_eq!(code, 0, "{target}");
}

/// On a live system an opened LUKS partition's contents are read through
/// its dm-crypt device, found in the partition's sysfs `holders/`: a sysfs
/// fixture whose dm-0 (uuid CRYPT-LUKS2-…) is a file holding an ext4. The
/// ext4's data sits at the partition start plus the payload offset that
/// `cryptsetup luksDump` reports.
fn an_opened_luks_partition_is_followed_through_its_dm_crypt_holder() {
    if !needs(false, &["cryptsetup", "sfdisk", "mkfs.ext4"]) {
        return;
    }
    let root = tempfile::tempdir().expect("tempdir");
    let (sys, dev) = (root.path().join("sys/block"), root.path().join("dev"));
    let put = |path: &str, value: &str| {
        let path = sys.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, format!("{value}\n")).expect("write");
    };
    std::fs::create_dir_all(&dev).expect("dev");
    let disk = dev.join("sdz");
    File::create(&disk).and_then(|f| f.set_len(64 * MIB)).expect("disk");
    let disk_str = disk.to_str().expect("utf-8");
    run_stdin("sfdisk", &["-q", disk_str], Some("label: dos\nstart=2048, size=16384\n"));
    let header = tempfile::NamedTempFile::new().expect("header");
    File::options().write(true).open(header.path()).and_then(|f| f.set_len(8 * MIB)).expect("len");
    let header_path = header.path().to_str().expect("utf-8");
    luks_format(header_path, &["--type", "luks2", "--offset", "4096"]);
    let dump = out("cryptsetup", &["luksDump", header_path]);
    let payload = number(&dump, "offset");
    embed(header.path(), &disk, 2048 * 512);
    let opened = dev.join("dm-0");
    File::create(&opened).and_then(|f| f.set_len(8 * MIB - payload)).expect("dm-0");
    run("mkfs.ext4", &["-q", "-F", "-b", "4096", opened.to_str().expect("utf-8")]);
    for (path, value) in [
        ("sdz/dev", "8:240"),
        ("sdz/size", "131072"),
        ("sdz/queue/logical_block_size", "512"),
        ("sdz/queue/physical_block_size", "4096"),
        ("sdz/sdz1/partition", "1"),
        ("sdz/sdz1/start", "2048"),
        ("sdz/sdz1/size", "16384"),
        ("sdz/sdz1/dev", "8:241"),
        ("dm-0/dm/uuid", "CRYPT-LUKS2-0123-sdz1"),
        ("dm-0/size", &((8 * MIB - payload) / 512).to_string()),
    ] {
        put(path, value);
    }
    std::fs::create_dir_all(sys.join("sdz/sdz1/holders/dm-0")).expect("holder");
    let output = common::blkalign()
        .env("BLKALIGN_SYSFS_ROOT", root.path().join("sys"))
        .args(["audit", "--json", disk_str])
        .output()
        .expect("audit");
    let doc = common::json_of(&output.stdout);
    let found = doc["targets"][0]["partitions"][0]["layers"].clone();
    assert_eq!(found[0]["kind"], "luks", "{doc}");
    assert_eq!(found[1]["name"], "ext4", "{doc}");
    assert_eq!(found[1]["depth"], 1);
    assert_eq!(found[1]["absolute_offset_bytes"], 2048 * 512 + payload, "{doc}");
    assert_eq!(found[1]["verdict"], "aligned");
}

/// `advise --json` of `image`: each partition's advice as (layer, command).
fn advice(image: &str) -> Vec<Vec<(String, String)>> {
    let out = common::blkalign().args(["advise", "--json", image]).output().expect("advise");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let parts = doc["partitions"].as_array().expect("partitions");
    let pair = |a: &serde_json::Value| {
        let text = |k: &str| a[k].as_str().unwrap_or("").to_string();
        (text("layer"), text("command"))
    };
    parts
        .iter()
        .map(|p| p["advice"].as_array().expect("advice").iter().map(pair).collect())
        .collect()
}

/// `command` through sh, as a user pastes it.
fn sh(command: &str) {
    let out = run_stdin("sh", &["-c", command], None);
    assert!(out.status.success(), "{command}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Found by a user: an image's advice named `/dev/loopXp1`, and empty ESP
/// and swap partitions were offered mkfs.ext4 and pvcreate. Each command
/// printed for an image attaches it itself, makes what fits the
/// partition's type, and leaves no loop device behind.
fn advise_runs_as_printed_on_an_image_and_fits_the_partition_type() {
    if !needs(true, &["losetup", "partx", "sfdisk", "mkfs.vfat", "mkswap", "fsck.vfat"]) {
        return;
    }
    let script = "label: gpt\nsize=300MiB, type=U\nsize=16MiB, type=S\nsize=16MiB\n";
    let image = Image::sfdisk(400 * MIB, script);
    let advised = advice(image.str());
    assert_eq!(advised[0].len(), 1, "{advised:?}");
    assert_eq!((advised[0][0].0.as_str(), advised[1][0].0.as_str()), ("vfat", "swap"));
    assert_eq!(advised[2][0].0, "ext4", "{advised:?}");
    for part in &advised[..2] {
        assert!(!part[0].1.contains("loopX"), "{advised:?}");
        sh(&part[0].1);
    }
    let attached = out("losetup", &["-j", image.str()]);
    assert!(attached.trim().is_empty(), "left attached: {attached}");
    let file = File::open(&image.path).expect("open");
    let (esp, swap) = (layers_in(&file, 2048, 300 * MIB), layers_in(&file, 2048 + 600 * 1024, MIB));
    assert!(matches!(esp.details, Details::Fat { bits: 32, cluster_bytes: 4096, .. }), "{esp:?}");
    assert_eq!(esp.absolute_offset_bytes % 4096, 0, "the data area is aligned: {esp:?}");
    assert_eq!(swap.kind, Kind::Swap);
}

/// The outermost layer at LBA `start` of `file`.
fn layers_in(file: &File, start: u64, len: u64) -> Layer {
    walk(file, start * 512, len).into_iter().next().expect("a layer")
}

/// Found by a user: shrink advice for an image read "e2fsck -f 4kn.img
/// partition 1 (attach it with `losetup -P`) && resize2fs ...". It runs as
/// printed, and the file system then fits.
fn shrink_advice_for_an_image_runs_as_printed() {
    if !needs(true, &["losetup", "partx", "sfdisk", "mkfs.ext4", "e2fsck", "resize2fs"]) {
        return;
    }
    let image = Image::sfdisk(64 * MIB, "label: dos\nstart=2048, size=40960\n");
    let fs = Image::new(20 * MIB);
    ext4(fs.str(), 512);
    embed(&fs.path, &image.path, 2048 * 512);
    let file = File::open(&image.path).expect("open");
    let contents = blkalign::stack::identify(&file, 2048 * 512, 20 * MIB).expect("read");
    let node = blkalign::advise::Node::Image { image: image.path.clone(), number: 1 };
    let missing = 4 * MIB;
    let command = blkalign::advise::shrink_node(contents.as_ref(), &node, 20 * MIB, missing);
    assert!(command.starts_with("dev=$(losetup -fP --show "), "{command}");
    sh(&command);
    let shrunk = blkalign::stack::identify(&file, 2048 * 512, 20 * MIB).expect("read");
    let size = shrunk.and_then(|c| c.size_bytes).expect("ext4 size");
    assert!(size <= 20 * MIB - missing, "{size}");
    // `losetup -d` of a device udev is still probing only marks it to go
    // at the last close (as common::Loop waits for): give that a moment.
    let attached = || !out("losetup", &["-j", image.str()]).trim().is_empty();
    for _ in 0..50 {
        if !attached() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(!attached(), "left attached");
}

/// Found by a user: a PV, LUKS or NTFS in a partition at LBA 63 got
/// pvmove, luksFormat/reencrypt or "fix the layer below"; moving the
/// partition is what aligns them, so `blkalign realign` comes first.
fn layers_off_only_because_their_partition_is_get_realign_first() {
    if !needs(false, &["sfdisk", "mkntfs", "cryptsetup"]) {
        return;
    }
    let image =
        Image::sfdisk(64 * MIB, "label: dos\nstart=63, size=40000\nstart=43008, size=40000\n");
    let ntfs_fs = Image::new(40000 * 512);
    ntfs(ntfs_fs.str(), 512);
    embed(&ntfs_fs.path, &image.path, 63 * 512);
    let luks = Image::new(40000 * 512);
    luks_format(luks.str(), &["--type", "luks2", "--sector-size", "512"]);
    embed(&luks.path, &image.path, 43008 * 512);
    let advised = advice(image.str());
    let realign = format!("blkalign realign {} 1", image.str());
    assert_eq!(advised[0][0], ("partition".to_string(), realign), "{advised:?}");
    let text = format!("{advised:?}");
    for never in ["pvmove", "luksFormat", "reencrypt", "fix the layer below"] {
        assert!(!text.contains(never), "{never}: {text}");
    }
    assert!(advised[1].iter().all(|(layer, _)| layer != "partition"), "aligned: {advised:?}");
}

/// Found on a real kernel: cryptsetup and LVM make up for a partition at an
/// odd LBA (a LUKS payload at 2 MiB + 512, a `pe_start` of 1 MiB + 3584),
/// and `realign --yes` moved those partitions, misaligning the data that
/// was aligned. Now audit calls them compensated (exit 0 for them), advise
/// offers no move, realign leaves them (refusing when named, the image
/// unchanged) and moves only the LUKS2 partition whose payload was off with
/// its start; cryptsetup and pvs read the same offsets afterwards.
fn a_move_never_misaligns_a_layer_that_is_aligned() {
    if !lvm_ready() || !needs(true, &["cryptsetup"]) {
        return;
    }
    let script = "label: dos\nstart=63, size=40000\nstart=40961, size=20480\n\
                  start=65537, size=40000\n";
    let image = Image::sfdisk(128 * MIB, script);
    let kept = Image::new(40000 * 512);
    // LUKS2 wants a 4 KiB multiple unless the device reports an alignment
    // offset (the lab's case); LUKS1 takes any alignment.
    luks_format(kept.str(), &["--type", "luks1", "--align-payload", "4097"]);
    let dump = out("cryptsetup", &["luksDump", kept.str()]);
    assert_eq!(number(&dump, "Payload offset"), 4097, "{dump}");
    embed(&kept.path, &image.path, 63 * 512);
    let pv = Image::new(20480 * 512);
    {
        let lo = Loop::attach(&pv.path, 512);
        lvm("pvcreate", &["-q", "-y", "--dataalignmentoffset", "7s", lo.str()]);
        assert_eq!(pvs_pe_start(lo.str()), MIB + 3584);
    }
    embed(&pv.path, &image.path, 40961 * 512);
    let off = Image::new(40000 * 512);
    luks_format(off.str(), &["--type", "luks2", "--sector-size", "512"]);
    embed(&off.path, &image.path, 65537 * 512);
    let img = image.str();

    let (code, target) = common::audit_json(&[img]);
    let verdicts: Vec<&str> =
        (0..3).map(|n| target["partitions"][n]["verdict"].as_str().unwrap()).collect();
    assert_eq!(verdicts, ["compensated", "compensated", "misaligned"], "{target}");
    assert_eq!(code, 1, "partition 3 is misaligned");
    let human = common::blkalign().args(["audit", img]).output().expect("audit");
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("└ crypto_LUKS") && text.contains("compensated"), "{text}");
    let advised = advice(img);
    assert!(!format!("{:?}", advised[0]).contains("blkalign realign"), "{advised:?}");
    assert!(format!("{:?}", advised[2]).contains("blkalign realign"), "{advised:?}");

    let before = std::fs::read(&image.path).expect("read");
    let state = tempfile::tempdir().expect("state");
    let realign = |args: &[&str]| {
        common::blkalign()
            .env("BLKALIGN_STATE_DIR", state.path())
            .arg("realign")
            .args(args)
            .output()
            .expect("realign")
    };
    for named in ["1", "2"] {
        let out = realign(&[img, named, "--yes"]);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{said}");
        assert!(said.contains("would misalign") && said.contains("aligned → "), "{said}");
    }
    assert!(std::fs::read(&image.path).expect("read") == before, "a refusal wrote nothing");
    let plan = realign(&[img, "--json"]);
    let doc = common::json_of(&plan.stdout);
    let moves = doc["moves"].as_array().expect("moves");
    assert_eq!(moves.len(), 1, "{doc}");
    assert_eq!(moves[0]["partition"], 3);
    assert_eq!(
        (moves[0]["layers"][0]["off_before"].as_u64(), moves[0]["layers"][0]["off_after"].as_u64()),
        (Some(512), Some(0)),
        "{doc}"
    );
    common::check_schema("realign", &doc.to_string());
    let moved = realign(&[img, "--yes"]);
    assert_eq!(moved.status.code(), Some(0), "{}", String::from_utf8_lossy(&moved.stderr));

    let (code, target) = common::audit_json(&[img]);
    assert_eq!(code, 0, "{target}");
    let third = &target["partitions"][2];
    assert_eq!(
        (third["verdict"].as_str(), third["layers"][0]["verdict"].as_str()),
        (Some("aligned"), Some("aligned")),
        "{target}"
    );
    // The peers read each layer where it was, relative to its partition.
    let disk = Loop::attach(&image.path, 512);
    disk.add_partitions(3);
    let dump = out("cryptsetup", &["luksDump", &format!("{}p3", disk.str())]);
    assert_eq!(after(&dump, "offset:"), 16 * MIB, "{dump}");
    assert_eq!(pvs_pe_start(&format!("{}p2", disk.str())), MIB + 3584);
    let start = |n: usize| target["partitions"][n]["start"].as_u64().unwrap();
    assert_eq!((start(0), start(1)), (63, 40961), "the compensated partitions stayed");
}

/// Found on a real kernel: a FAT made with its data area off the physical
/// grid inside a 100 MiB partition at LBA 63. realign's fix was `mkfs.vfat
/// -F 32 -s 8`, which makes a FAT32 of ~25,000 clusters (the spec's
/// minimum is 65,525), and advise said the data area was 3584 bytes off
/// (the partition's offset; it is 2560) with no command. Both now give the
/// command advise gives an empty partition of that size, and it makes a
/// file system fsck.fat accepts with its data area on the grid.
fn a_fat_off_the_grid_inside_its_partition_gets_the_right_mkfs() {
    if !needs(false, &["sfdisk", "mkfs.vfat", "fsck.vfat"]) {
        return;
    }
    let sectors = 204_800u64;
    let image =
        Image::sfdisk(200 * MIB, &format!("label: dos\nstart=63, size={sectors}, type=c\n"));
    let fat = Image::new(sectors * 512);
    run("mkfs.vfat", &["-a", "-F", "32", "-R", "38", fat.str()]);
    embed(&fat.path, &image.path, 63 * 512);
    let (_, target) = common::audit_json(&[image.str()]);
    let layer = &target["partitions"][0]["layers"][0];
    assert_eq!(layer["misalignment_bytes"], 2560, "{target}");
    let advised = advice(image.str());
    let vfat = advised[0].iter().find(|(l, _)| l == "vfat").expect("vfat advice");
    assert!(vfat.1.contains("&& mkfs.vfat -s 8 ${dev}p1;"), "{advised:?}");
    let plan = common::blkalign().args(["realign", image.str()]).output().expect("realign");
    let said = String::from_utf8_lossy(&plan.stdout);
    assert!(said.contains("`mkfs.vfat -s 8 ") && !said.contains("-F 32"), "{said}");
    // The command as advised, on a partition of that size.
    let remade = Image::new(sectors * 512);
    run("mkfs.vfat", &["-s", "8", remade.str()]);
    run("fsck.vfat", &["-n", remade.str()]);
    let found = &layers(&remade.path, 0, sectors * 512)[0];
    assert!(matches!(found.details, Details::Fat { bits: 16, .. }), "{found:?}");
    assert_eq!(found.offset_bytes % 4096, 0, "{found:?}");
}

/// Found by a user (issue 27): after `mkfs.ext4 sdc1` while the disk stayed
/// open, `audit /dev/sdc` showed sdc1 empty and `advise` offered mkfs for
/// it. A partition and its disk have separate page caches: what mkfs wrote
/// through the partition never reaches the disk's cached pages, so reads
/// through the disk's node must bypass them. The test holds the disk open
/// with the partition's first MiB cached, as a mounted sibling would.
fn audit_and_advise_see_a_file_system_made_through_the_partition_node() {
    if !needs(true, &["losetup", "partx", "sfdisk", "mkfs.ext4"]) {
        return;
    }
    let image = Image::sfdisk(64 * MIB, "label: gpt\nstart=2048, size=40960\nstart=43008\n");
    let disk = Loop::attach(&image.path, 512);
    disk.add_partitions(2);
    let held = File::open(&disk.dev).expect("open the disk");
    let mut cached = vec![0u8; MIB as usize];
    held.read_exact_at(&mut cached, 2048 * 512).expect("read the partition through the disk");
    assert!(cached.iter().all(|&b| b == 0), "the partition starts empty");
    run("mkfs.ext4", &["-q", "-F", &format!("{}p1", disk.str())]);

    let (_, target) = common::audit_json(&[disk.str()]);
    assert_eq!(target["partitions"][0]["layers"][0]["name"], "ext4", "{target}");
    let advised = advice(disk.str());
    assert!(advised[0].iter().all(|(_, command)| !command.contains("mkfs")), "{advised:?}");
    drop(held);
}

/// bcache superblocks made by make-bcache on partitions of a loop device
/// (backing devices with the default, an odd and a 1 MiB data offset, a
/// cache device), each read back by `bcache-super-show` and `blkid -p`; an ext4 in a
/// backing device's data area (what /dev/bcacheN shows) is found above it,
/// 512 bytes off in a partition at LBA 40961.
fn bcache_superblocks_and_what_they_hold() {
    if !needs(true, &["make-bcache", "bcache-super-show", "blkid", "sfdisk", "losetup", "partx"]) {
        return;
    }
    let cases: [&[&str]; 4] = [
        &["-B"],
        &["-B", "--data-offset", "17", "-w", "4096"],
        &["-B", "--data-offset", "2048", "-w", "4096"],
        &["-C", "-b", "256k", "-w", "4096"],
    ];
    let size = 32 * MIB / 512;
    let starts = [40961, 40961 + size + 7, 40961 + 2 * size + 15, 40961 + 3 * size + 23];
    let script: String = starts.iter().map(|s| format!("start={s}, size={size}\n")).collect();
    let image = Image::sfdisk(200 * MIB, &format!("label: dos\n{script}"));
    let lo = Loop::attach(&image.path, 512);
    lo.add_partitions(cases.len() as u32);
    for (i, (args, start)) in cases.iter().zip(starts).enumerate() {
        let node = lo.partition(i as u32 + 1);
        let node = node.to_str().expect("utf-8");
        run("make-bcache", &[*args, &[node]].concat());
        let show = out("bcache-super-show", &[node]);
        // libblkid checks the magic, the recorded sector and the checksum too.
        assert_eq!(out("blkid", &["-p", "-o", "value", "-s", "TYPE", node]).trim(), "bcache");
        let found = layers(&image.path, start * 512, size * 512);
        let layer = &found[0];
        let Details::Bcache {
            version,
            device,
            data_offset_bytes,
            block_bytes,
            bucket_bytes,
            uuid,
            set_uuid,
        } = &layer.details
        else {
            panic!("{args:?}: not bcache: {found:?}")
        };
        assert_eq!(*version, number(&show, "sb.version"), "{args:?}");
        let first =
            if args[0] == "-B" { "dev.data.first_sector" } else { "dev.cache.first_sector" };
        assert_eq!(*data_offset_bytes, number(&show, first) * 512, "{args:?}");
        assert_eq!(*block_bytes, number(&show, "dev.sectors_per_block") * 512, "{args:?}");
        assert_eq!(*bucket_bytes, number(&show, "dev.sectors_per_bucket") * 512, "{args:?}");
        assert_eq!((uuid, set_uuid), (&field(&show, "dev.uuid"), &field(&show, "cset.uuid")));
        assert_eq!(layer.absolute_offset_bytes, start * 512 + data_offset_bytes);
        if args[0] == "-C" {
            assert_eq!(*device, "cache");
            assert_eq!(layer.size_bytes, Some(number(&show, "dev.cache.total_sectors") * 512));
            assert_eq!(found.len(), 1, "a cache holds no layers: {found:?}");
        } else {
            assert_eq!(*device, "backing");
            assert_eq!(layer.size_bytes, Some(size * 512 - data_offset_bytes));
        }
    }
    drop(lo);
    // The issue's case: the default 16-sector data offset at LBA 40961.
    if needs(false, &["mkfs.ext4"]) {
        let at = (starts[0] + 16) * 512;
        run("mkfs.ext4", &["-q", "-F", "-E", &format!("offset={at}"), image.str(), "16M"]);
        let found = layers(&image.path, starts[0] * 512, size * 512);
        let summary: Vec<(Kind, u32, u64)> =
            found.iter().map(|l| (l.kind, l.depth, l.absolute_offset_bytes)).collect();
        assert_eq!(summary, [(Kind::Bcache, 0, at), (Kind::Ext, 1, at)]);
        let verdict = judge(&found[0], 4096, 0, None);
        assert_eq!((verdict.verdict, verdict.misalignment_bytes), (Class::Misaligned, 512));
        // make-bcache -B picked 512-byte blocks on a 512-byte loop device.
        assert!(verdict.finding.expect("finding").contains("make-bcache -w 4096"));
    }
}

/// The UUID a move at boot finds its journal's file system by (and
/// `root=UUID=` names) is the one blkid reads, for every file system the
/// initramfs may mount it as.
fn file_system_uuids_match_blkid() {
    let mkfs: [(&str, &[&str]); 5] = [
        ("mkfs.ext4", &["-q", "-F"]),
        ("mkfs.xfs", &["-q", "-f"]),
        ("mkfs.btrfs", &["-q", "-f"]),
        ("mkfs.vfat", &["-F", "32"]),
        ("mkfs.vfat", &["-F", "16"]),
    ];
    if !needs(false, &["blkid", "mkfs.ext4", "mkfs.xfs", "mkfs.btrfs", "mkfs.vfat"]) {
        return;
    }
    for (tool, args) in mkfs {
        let image = Image::new(300 * MIB);
        let mut all = args.to_vec();
        all.push(image.str());
        run(tool, &all);
        let blkid = out("blkid", &["-p", "-o", "value", "-s", "UUID", image.str()]);
        let file = File::open(&image.path).expect("open image");
        let found = blkalign::stack::fs_uuid(&file, 0, 300 * MIB).expect("read");
        let uuid = found.map(|(_, u)| u).unwrap_or_else(|| panic!("{tool} {args:?}: no UUID"));
        assert_eq!(uuid, blkid.trim(), "{tool} {args:?}");
    }
}
