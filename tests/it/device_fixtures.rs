//! The device layer over the sysfs fixture trees in tests/fixtures/sysfs.

use blkalign::device::{
    kernel_partitions, list_disks, resolve, validate_overrides, DeviceError, KernelPartition,
    Overrides, Source, Sourced, SysRoot, Target, TargetKind, Topology,
};
use blkalign::open::topology;
use std::fs;
use std::path::{Path, PathBuf};

tests![
    sata_512e,
    lying_wd_ears_gets_its_real_physical_size_from_the_quirk_table,
    jumpered_drive_keeps_its_alignment_offset,
    native_4k,
    nvme_optimal_io_is_kept,
    usb_bridge_bogus_optimal_io_is_neutralised,
    list_disks_skips_ram_zram_and_unattached_loops,
    serial_is_the_one_lsblk_shows_on_every_driver,
    list_disks_keeps_backed_loops_and_drops_empty_drives,
    list_disks_without_sysfs_is_an_error,
    kernel_partitions_are_in_bytes,
    resolve_disks_and_partitions_in_a_fixture,
    resolve_images_missing_paths_and_directories,
    image_sector_size_comes_from_the_gpt_header,
    image_without_gpt_assumes_512,
    overrides_beat_everything,
    reported_offset_is_reduced_under_a_smaller_physical_override,
    invalid_overrides_are_rejected,
    malformed_sysfs_values_are_noted_and_ignored,
    disk_without_sysfs_entry_is_described_as_such,
    open_reads_fixture_nodes_and_reports_missing_ones,
];

fn fixture(name: &str) -> SysRoot {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs").join(name);
    SysRoot::fixture(dir.join("sys"))
}

fn disk(root: &SysRoot, name: &str) -> Target {
    resolve(root, &root.dev.join(name)).expect("fixture node resolves")
}

fn topo(fixture_name: &str, disk_name: &str) -> Topology {
    topo_with(fixture_name, disk_name, &Overrides::default()).expect("topology")
}

fn topo_with(fixture_name: &str, disk_name: &str, o: &Overrides) -> Result<Topology, DeviceError> {
    let root = fixture(fixture_name);
    topology(&root, &disk(&root, disk_name), None, o)
}

fn kernel(value: u64) -> Sourced<u64> {
    Sourced::new(value, Source::Kernel)
}

fn names(targets: &[Target]) -> Vec<&str> {
    targets.iter().filter_map(|t| t.name.as_deref()).collect()
}

fn sata_512e() {
    let t = topo("sata-512e", "sda");
    assert_eq!(t.logical_sector_size, kernel(512));
    assert_eq!(t.physical_sector_size, kernel(4096));
    assert_eq!(t.alignment_offset, kernel(0));
    assert_eq!(t.minimum_io_size, Some(kernel(4096)));
    assert_eq!(t.optimal_io_size, None);
    assert_eq!(t.size_bytes, 3_907_029_168 * 512);
    assert_eq!(t.rotational, Some(true));
    assert_eq!(t.vendor.as_deref(), Some("ATA"));
    assert_eq!(t.model.as_deref(), Some("ST2000DM008-2FR102"));
    assert_eq!(t.serial, None);
    assert!(t.notes.is_empty(), "{:?}", t.notes);
}

fn lying_wd_ears_gets_its_real_physical_size_from_the_quirk_table() {
    let t = topo("wd-ears-lying", "sda");
    assert_eq!(t.logical_sector_size, kernel(512));
    assert_eq!(t.physical_sector_size, Sourced::new(4096, Source::Quirk));
    assert_eq!(t.notes.len(), 1, "{:?}", t.notes);
    assert!(
        t.notes[0].contains("WDC WD20EARS-00MVWB0") && t.notes[0].contains("EARS"),
        "{}",
        t.notes[0]
    );
}

fn jumpered_drive_keeps_its_alignment_offset() {
    let t = topo("jumpered", "sda");
    assert_eq!(t.physical_sector_size, kernel(4096), "reported 4096: no quirk needed");
    assert_eq!(t.alignment_offset, kernel(3584));
    assert!(t.notes.is_empty(), "{:?}", t.notes);
}

fn native_4k() {
    let t = topo("4kn", "sda");
    assert_eq!(t.logical_sector_size, kernel(4096));
    assert_eq!(t.physical_sector_size, kernel(4096));
    assert_eq!(t.size_bytes, 7_814_037_168 * 512, "sysfs size is in 512-byte units");
    assert_eq!(t.vendor.as_deref(), Some("SEAGATE"));
}

fn nvme_optimal_io_is_kept() {
    let t = topo("nvme-optimal", "nvme0n1");
    assert_eq!(t.optimal_io_size, Some(kernel(131_072)));
    assert_eq!(t.minimum_io_size, Some(kernel(512)));
    assert_eq!(t.rotational, Some(false));
    assert_eq!(t.vendor, None);
    assert_eq!(t.model.as_deref(), Some("Samsung SSD 970 EVO Plus 1TB"));
    assert_eq!(t.serial.as_deref(), Some("S4EWNF0M123456K"));
    assert!(t.notes.is_empty(), "{:?}", t.notes);
}

fn usb_bridge_bogus_optimal_io_is_neutralised() {
    let t = topo("usb-bridge", "sdb");
    assert_eq!(t.optimal_io_size, None);
    assert_eq!(t.physical_sector_size, kernel(4096));
    assert_eq!(t.notes.len(), 1, "{:?}", t.notes);
    assert!(t.notes[0].contains("33553920") && t.notes[0].contains("USB"), "{}", t.notes[0]);
}

fn list_disks_skips_ram_zram_and_unattached_loops() {
    let root = fixture("sata-512e");
    let disks = list_disks(&root).expect("list");
    assert_eq!(names(&disks), ["sda"]);
    assert_eq!(disks[0].path, root.dev.join("sda"));
    assert_eq!(disks[0].kind, TargetKind::Disk);
    assert_eq!(names(&list_disks(&fixture("nvme-optimal")).expect("list")), ["nvme0n1"]);
}

/// A scratch sysfs tree: ROOT/sys/block/NAME/FILE = VALUE for each entry.
fn scratch(files: &[(&str, &str)]) -> (tempfile::TempDir, SysRoot) {
    let dir = tempfile::tempdir().expect("tempdir");
    for (path, value) in files {
        let path = dir.path().join("sys/block").join(path);
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(&path, format!("{value}\n")).expect("write");
    }
    let root = SysRoot::fixture(dir.path().join("sys"));
    (dir, root)
}

/// The serial lsblk's SERIAL column shows, on every driver: udev's
/// ID_SCSI_SERIAL, ID_SERIAL_SHORT or ID_SERIAL first, then the kernel's
/// `serial` (virtio-blk), `device/serial` (NVMe) or Unit Serial Number page
/// (`device/vpd_pg80`) when udev has no record.
fn serial_is_the_one_lsblk_shows_on_every_driver() {
    let (dir, root) = scratch(&[
        ("sda/size", "2048"),
        ("sda/dev", "8:0"),
        ("sdb/size", "2048"),
        ("sdb/dev", "8:16"),
        ("sdc/size", "2048"),
        ("sdc/dev", "8:32"),
        ("sdd/size", "2048"),
        ("sdd/dev", "8:48"),
        ("vda/size", "2048"),
        ("vda/dev", "254:0"),
        ("vda/serial", "vd-serial"),
        ("vdb/size", "2048"),
        ("vdb/dev", "254:16"),
        ("vdb/serial", "vdb-serial"),
        ("nvme0n1/size", "2048"),
        ("nvme0n1/device/serial", "S4EWNF0M123456K     "),
    ]);
    let page = |serial: &str| {
        let mut page = vec![0, 0x80, 0, u8::try_from(serial.len()).expect("short")];
        page.extend(serial.bytes());
        page
    };
    for (disk, serial) in [("sda", "ZFL0ABCD    "), ("sdb", "  drive-b"), ("sdd", "scsi-d")] {
        let device = root.sys.join("block").join(disk).join("device");
        fs::create_dir_all(&device).expect("mkdir");
        fs::write(device.join("vpd_pg80"), page(serial)).expect("write");
    }
    let udev = dir.path().join("run/udev/data");
    fs::create_dir_all(&udev).expect("mkdir");
    for (number, record) in [
        // AHCI: ata_id's IDENTIFY serial.
        ("8:0", "E:ID_SERIAL=ST2000DM008_ZFL0ABCD\nE:ID_SERIAL_SHORT=ZFL0ABCD\n"),
        // virtio-scsi: scsi_id's page 0x80 beats the short form.
        ("8:32", "E:ID_SCSI_SERIAL=scsi-c\nE:ID_SERIAL_SHORT=0QEMU_QEMU_HARDDISK_scsi-c\n"),
        // USB: usb_id's iSerial, not the drive's page behind the bridge.
        ("8:48", "S:disk/by-id/usb-x\nE:ID_SERIAL_SHORT=usb-d\nE:ID_SERIAL=QEMU_usb-d-0:0\n"),
        // virtio-blk: udev sets ID_SERIAL alone.
        ("254:16", "E:ID_SERIAL=vdb-serial\n"),
    ] {
        fs::write(udev.join(format!("b{number}")), record).expect("write");
    }
    let serial = |name: &str| {
        let target = Target {
            path: root.dev.join(name),
            name: Some(name.into()),
            kind: TargetKind::Disk,
            selected_partition: None,
        };
        topology(&root, &target, None, &Overrides::default()).expect("topology").serial
    };
    let got: Vec<(&str, Option<String>)> =
        ["sda", "sdb", "sdc", "sdd", "vda", "vdb", "nvme0n1"].map(|n| (n, serial(n))).into();
    let want = [
        ("sda", Some("ZFL0ABCD")),
        ("sdb", Some("drive-b")),
        ("sdc", Some("scsi-c")),
        ("sdd", Some("usb-d")),
        ("vda", Some("vd-serial")),
        ("vdb", Some("vdb-serial")),
        ("nvme0n1", Some("S4EWNF0M123456K")),
    ]
    .map(|(n, s)| (n, s.map(String::from)));
    assert_eq!(got, want);
}

fn list_disks_keeps_backed_loops_and_drops_empty_drives() {
    let (_dir, root) = scratch(&[
        ("loop1/size", "131072"),
        ("loop1/loop/backing_file", "/var/tmp/disk.img"),
        ("loop0/size", "0"),
        ("sr0/size", "0"),
        ("sdb/size", "1000"),
        ("sda/size", "1000"),
    ]);
    assert_eq!(names(&list_disks(&root).expect("list")), ["loop1", "sda", "sdb"]);
}

fn list_disks_without_sysfs_is_an_error() {
    let root = SysRoot::fixture(PathBuf::from("/nonexistent/sys"));
    assert!(matches!(list_disks(&root), Err(DeviceError::NotFound(_))));
}

fn kernel_partitions_are_in_bytes() {
    let root = fixture("sata-512e");
    assert_eq!(
        kernel_partitions(&root, "sda"),
        [
            KernelPartition { number: 1, start_bytes: 2048 * 512, size_bytes: 1_048_576 * 512 },
            KernelPartition {
                number: 2,
                start_bytes: 1_050_624 * 512,
                size_bytes: 2_097_152 * 512
            },
        ]
    );
    // 512-byte units even on a 4Kn-free NVMe namespace and a misaligned MBR disk.
    assert_eq!(kernel_partitions(&fixture("nvme-optimal"), "nvme0n1")[0].start_bytes, 2048 * 512);
    assert_eq!(kernel_partitions(&fixture("wd-ears-lying"), "sda")[0].start_bytes, 63 * 512);
    assert!(kernel_partitions(&fixture("usb-bridge"), "sdb").is_empty());
    assert!(kernel_partitions(&root, "nosuchdisk").is_empty());
}

fn resolve_disks_and_partitions_in_a_fixture() {
    let root = fixture("sata-512e");
    let sda = disk(&root, "sda");
    assert_eq!(sda.name.as_deref(), Some("sda"));
    assert_eq!((sda.kind, sda.selected_partition), (TargetKind::Disk, None));
    let sda2 = disk(&root, "sda2");
    assert_eq!((sda2.name.as_deref(), sda2.selected_partition), (Some("sda"), Some(2)));
    assert_eq!(sda2.path, root.dev.join("sda"));

    let nvme = fixture("nvme-optimal");
    let p1 = disk(&nvme, "nvme0n1p1");
    assert_eq!((p1.name.as_deref(), p1.selected_partition), (Some("nvme0n1"), Some(1)));
}

fn resolve_images_missing_paths_and_directories() {
    let root = fixture("sata-512e");
    let dir = tempfile::tempdir().expect("tempdir");
    let image = dir.path().join("disk.img");
    fs::write(&image, [0u8; 4096]).expect("write");
    let target = resolve(&root, &image).expect("image");
    assert_eq!((target.kind, target.name, target.path), (TargetKind::Image, None, image));
    assert!(matches!(resolve(&root, &dir.path().join("absent")), Err(DeviceError::NotFound(_))));
    assert!(matches!(resolve(&root, dir.path()), Err(DeviceError::NotBlockOrFile { .. })));
}

fn image_topology(bytes: &[u8], o: &Overrides) -> Result<Topology, DeviceError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("disk.img");
    fs::write(&path, bytes).expect("write");
    let root = SysRoot::real();
    let target = resolve(&root, &path).expect("image");
    let file = fs::File::open(&path).expect("open");
    topology(&root, &target, Some(&file), o)
}

fn image_with_gpt_at(offset: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; 64 * 1024];
    bytes[offset..offset + 8].copy_from_slice(b"EFI PART");
    bytes
}

fn image_sector_size_comes_from_the_gpt_header() {
    let t = image_topology(&image_with_gpt_at(4096), &Overrides::default()).expect("topology");
    assert_eq!(t.logical_sector_size, Sourced::new(4096, Source::Table));
    assert_eq!(t.physical_sector_size, Sourced::new(4096, Source::Assumed));
    assert_eq!(t.size_bytes, 64 * 1024);
    let t = image_topology(&image_with_gpt_at(512), &Overrides::default()).expect("topology");
    assert_eq!(t.logical_sector_size, Sourced::new(512, Source::Table));
}

fn image_without_gpt_assumes_512() {
    let t = image_topology(&[0u8; 8192], &Overrides::default()).expect("topology");
    assert_eq!(t.logical_sector_size, Sourced::new(512, Source::Assumed));
    assert_eq!(t.physical_sector_size, Sourced::new(512, Source::Assumed));
    assert_eq!(t.alignment_offset, Sourced::new(0, Source::Assumed));
    assert_eq!((t.minimum_io_size, t.optimal_io_size, t.rotational), (None, None, None));
    assert!(t.notes.is_empty());
}

fn overrides(logical: Option<u64>, physical: Option<u64>, offset: Option<u64>) -> Overrides {
    Overrides {
        logical_sector_size: logical,
        physical_sector_size: physical,
        alignment_offset: offset,
    }
}

fn overrides_beat_everything() {
    let o = overrides(None, Some(4096), Some(0));
    let t = topo_with("jumpered", "sda", &o).expect("topology");
    assert_eq!(t.physical_sector_size, Sourced::new(4096, Source::Override));
    assert_eq!(t.alignment_offset, Sourced::new(0, Source::Override));
    // Beats the quirk too.
    let t =
        topo_with("wd-ears-lying", "sda", &overrides(None, Some(8192), None)).expect("topology");
    assert_eq!(t.physical_sector_size, Sourced::new(8192, Source::Override));
    // And the GPT of an image.
    let t = image_topology(&image_with_gpt_at(512), &overrides(Some(4096), None, None))
        .expect("topology");
    assert_eq!(t.logical_sector_size, Sourced::new(4096, Source::Override));
    assert_eq!(t.physical_sector_size.value, 4096, "raised to the logical size");
}

fn reported_offset_is_reduced_under_a_smaller_physical_override() {
    let t = topo_with("jumpered", "sda", &overrides(None, Some(512), None)).expect("topology");
    assert_eq!(t.alignment_offset, kernel(0));
    assert!(t.notes.iter().any(|n| n.contains("3584")), "{:?}", t.notes);
}

fn invalid_overrides_are_rejected() {
    for (o, words) in [
        (overrides(Some(1000), None, None), "logical sector size 1000"),
        (overrides(Some(8192), None, None), "logical sector size 8192"),
        (overrides(None, Some(256), None), "physical sector size 256"),
        (overrides(None, Some(131_072), None), "physical sector size 131072"),
        (overrides(Some(4096), Some(512), None), "smaller"),
        (overrides(None, Some(4096), Some(4096)), "alignment offset 4096"),
    ] {
        let err = validate_overrides(&o).expect_err("invalid");
        assert!(matches!(err, DeviceError::InvalidOverride(_)));
        assert!(err.to_string().contains(words), "{err}");
        assert!(topo_with("sata-512e", "sda", &o).is_err());
    }
    // Checked against the device's own values.
    for o in [
        overrides(None, None, Some(4096)),      // not below physical 4096
        overrides(None, None, Some(100)),       // not whole sectors
        overrides(Some(4096), None, Some(512)), // not whole 4096-byte sectors
        overrides(None, Some(512), Some(1024)), // not below physical 512
    ] {
        let err = topo_with("sata-512e", "sda", &o).expect_err("invalid");
        assert!(matches!(err, DeviceError::InvalidOverride(_)), "{err}");
    }
    // 4Kn: a 512-byte physical override under a 4096 logical sector.
    let err = topo_with("4kn", "sda", &overrides(None, Some(512), None)).expect_err("invalid");
    assert!(err.to_string().contains("smaller than the logical"), "{err}");
}

fn malformed_sysfs_values_are_noted_and_ignored() {
    let (_dir, root) = scratch(&[
        ("sdz/size", "2048"),
        ("sdz/queue/logical_block_size", "garbage"),
        ("sdz/queue/physical_block_size", "3000"),
        ("sdz/queue/optimal_io_size", "1000"),
        ("sdz/alignment_offset", "-1"),
    ]);
    let target = Target {
        path: root.dev.join("sdz"),
        name: Some("sdz".into()),
        kind: TargetKind::Disk,
        selected_partition: None,
    };
    let t = topology(&root, &target, None, &Overrides::default()).expect("topology");
    assert_eq!(t.logical_sector_size, Sourced::new(512, Source::Assumed));
    assert_eq!(t.physical_sector_size, Sourced::new(512, Source::Assumed));
    assert_eq!(t.alignment_offset, Sourced::new(0, Source::Assumed));
    assert_eq!(t.optimal_io_size, None, "1000 is not whole physical sectors");
    assert_eq!(t.size_bytes, 2048 * 512);
    for words in ["garbage", "3000", "1000", "-1"] {
        assert!(t.notes.iter().any(|n| n.contains(words)), "no note about {words}: {:?}", t.notes);
    }
}

fn disk_without_sysfs_entry_is_described_as_such() {
    let root = fixture("sata-512e");
    let target = Target {
        path: root.dev.join("sdq"),
        name: Some("sdq".into()),
        kind: TargetKind::Disk,
        selected_partition: None,
    };
    let t = topology(&root, &target, None, &Overrides::default()).expect("topology");
    assert_eq!(t.logical_sector_size, Sourced::new(512, Source::Assumed));
    assert!(t.notes.iter().any(|n| n.contains("no sysfs entry")), "{:?}", t.notes);
}

fn open_reads_fixture_nodes_and_reports_missing_ones() {
    let root = fixture("sata-512e");
    assert!(blkalign::device::open(&disk(&root, "sda")).is_ok());
    let gone = Target {
        path: root.dev.join("sdq"),
        name: Some("sdq".into()),
        kind: TargetKind::Disk,
        selected_partition: None,
    };
    let err = blkalign::device::open(&gone).expect_err("missing");
    assert!(matches!(err, DeviceError::NotFound(_)), "{err}");
}
