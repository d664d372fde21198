//! The device layer against real loop devices (root only).

use crate::common;

use blkalign::device::{open, resolve, Overrides, Source, Sourced, SysRoot, TargetKind};
use blkalign::open::topology;
use common::{Image, Loop};

tests![
    loop_with_4096_byte_sectors,
    a_4096_byte_loop_reads_any_range,
    loop_partition_resolves_to_its_parent,
    every_disk_on_this_machine_has_a_topology,
];

const MIB: u64 = 1024 * 1024;

fn loop_with_4096_byte_sectors() {
    if !common::needs(true, &["losetup"]) {
        return;
    }
    let image = Image::new(64 * MIB);
    let dev = Loop::attach(&image.path, 4096);
    let root = SysRoot::real();
    let target = resolve(&root, &dev.dev).expect("resolve");
    assert_eq!(target.kind, TargetKind::Disk);
    assert_eq!(target.path, dev.dev);
    assert_eq!(target.selected_partition, None);

    let file = open(&target).expect("root can open a loop device");
    let t = topology(&root, &target, Some(file.file()), &Overrides::default()).expect("topology");
    // sysfs and BLKSSZGET agree, so the kernel keeps the credit and no note.
    assert_eq!(t.logical_sector_size, Sourced::new(4096, Source::Kernel));
    assert!(t.physical_sector_size.value >= 4096);
    assert_eq!(t.size_bytes, 64 * MIB);
    assert!(t.notes.is_empty(), "{:?}", t.notes);
}

/// Reads of a disk with 4096-byte logical sectors go past its page cache
/// in whole sectors, yet any range reads as it is in the backing file;
/// past the end is UnexpectedEof, as for a File.
fn a_4096_byte_loop_reads_any_range() {
    if !common::needs(true, &["losetup"]) {
        return;
    }
    use blkalign::io::ReadAt;
    let image = Image::new(MIB);
    let bytes: Vec<u8> = (0..MIB as usize).map(|i| (i % 251) as u8).collect();
    std::fs::write(&image.path, &bytes).expect("fill the image");
    let dev = Loop::attach(&image.path, 4096);
    let disk = open(&resolve(&SysRoot::real(), &dev.dev).expect("resolve")).expect("open");
    for (offset, len) in [(0, 1), (511, 2), (4095, 4098), (MIB - 3, 3), (1, MIB - 1)] {
        let mut buf = vec![0u8; len as usize];
        disk.read_exact_at(&mut buf, offset).expect("read");
        assert!(buf[..] == bytes[offset as usize..(offset + len) as usize], "{offset}+{len}");
    }
    let err = disk.read_exact_at(&mut [0u8; 2], MIB - 1).expect_err("past the end");
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
}

fn loop_partition_resolves_to_its_parent() {
    if !common::needs(true, &["losetup", "sfdisk", "partx"]) {
        return;
    }
    let image = Image::sfdisk(64 * MIB, "label: gpt\nstart=2048, size=4096\n");
    let dev = Loop::attach(&image.path, 512);
    let node = dev.partition(1);
    dev.add_partitions(1);
    let target = resolve(&SysRoot::real(), &node).expect("resolve partition");
    assert_eq!(target.path, dev.dev);
    assert_eq!(target.kind, TargetKind::Disk);
    assert_eq!(target.selected_partition, Some(1));
    let name = dev.dev.file_name().and_then(|n| n.to_str()).expect("loop name");
    assert_eq!(target.name.as_deref(), Some(name));

    let parts = blkalign::device::kernel_partitions(&SysRoot::real(), name);
    assert_eq!(parts.len(), 1);
    assert_eq!((parts[0].start_bytes, parts[0].size_bytes), (2048 * 512, 4096 * 512));
}

/// Whatever disks this machine has: listing and describing them must work,
/// and sysfs alone must be enough when a device cannot be opened. Loop
/// devices are skipped (other tests attach and detach them concurrently)
/// except one of our own, attached when we can so there is always a disk.
fn every_disk_on_this_machine_has_a_topology() {
    let image = Image::new(16 * MIB);
    let can_attach = common::is_root()
        && std::path::Path::new("/dev/loop-control").exists()
        && common::which("losetup").is_some();
    let own = can_attach.then(|| Loop::attach(&image.path, 512));
    let own_name = own.as_ref().and_then(|l| l.dev.file_name()).and_then(|n| n.to_str());
    let root = SysRoot::real();
    let disks = blkalign::device::list_disks(&root).expect("list /sys/block");
    let checked: Vec<_> = disks
        .iter()
        .filter(|t| match t.name.as_deref() {
            Some(name) if name.starts_with("loop") => Some(name) == own_name,
            _ => true,
        })
        .collect();
    assert!(
        !checked.is_empty(),
        "no disk to check: /sys/block lists {:?} and we cannot attach a loop device",
        disks.iter().map(|t| t.path.display().to_string()).collect::<Vec<_>>()
    );
    assert!(own_name.is_none_or(|n| checked.iter().any(|t| t.name.as_deref() == Some(n))));
    for target in checked {
        let file = open(target).ok();
        let file = file.as_ref().map(|f| f.file());
        let t = topology(&root, target, file, &Overrides::default()).expect("topology");
        eprintln!("{}: {t:?}", target.path.display());
        assert!(t.logical_sector_size.value >= 512, "{}", target.path.display());
        assert!(t.physical_sector_size.value >= t.logical_sector_size.value);
        assert!(t.size_bytes > 0);
    }
}
