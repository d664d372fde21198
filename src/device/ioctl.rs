//! Block-device ioctls: the kernel's answer for an open device node, which
//! can differ from sysfs for stacked or misbehaving drivers.

use rustix::ioctl::{ioctl, opcode, Getter, Opcode, Updater};
use std::fs::File;

/// Raw values from one source (these ioctls, or sysfs), in bytes; None
/// when not reported.
#[derive(Debug, Default)]
pub(crate) struct Reported {
    pub logical: Option<u64>,
    pub physical: Option<u64>,
    pub minimum_io: Option<u64>,
    pub optimal_io: Option<u64>,
    pub alignment_offset: Option<u64>,
    pub size_bytes: Option<u64>,
}

// From linux/fs.h. The "_IO" ones still write their answer through the
// pointer argument, hence Getter.
const BLKSSZGET: Opcode = opcode::none(0x12, 104);
const BLKGETSIZE64: Opcode = opcode::read::<usize>(0x12, 114);
const BLKIOMIN: Opcode = opcode::none(0x12, 120);
const BLKIOOPT: Opcode = opcode::none(0x12, 121);
const BLKALIGNOFF: Opcode = opcode::none(0x12, 122);
const BLKPBSZGET: Opcode = opcode::none(0x12, 123);

/// What the ioctls report for a block device; failed ioctls are None.
pub(crate) fn query(file: &File) -> Reported {
    Reported {
        logical: logical_block_size(file),
        physical: get::<BLKPBSZGET, u32>(file).map(u64::from),
        minimum_io: get::<BLKIOMIN, u32>(file).map(u64::from),
        optimal_io: get::<BLKIOOPT, u32>(file).map(u64::from),
        // -1 means the device cannot be aligned; treated as unreported.
        alignment_offset: get::<BLKALIGNOFF, i32>(file).and_then(|v| u64::try_from(v).ok()),
        size_bytes: get::<BLKGETSIZE64, u64>(file),
    }
}

/// The logical block size, which O_DIRECT offsets and lengths are multiples of.
pub(crate) fn logical_block_size(file: &File) -> Option<u64> {
    get::<BLKSSZGET, i32>(file).and_then(|v| u64::try_from(v).ok())
}

fn get<const OP: Opcode, T>(file: &File) -> Option<T> {
    // SAFETY: every opcode passed here is a block-layer getter whose kernel
    // handler (block/ioctl.c) writes exactly one T through the pointer:
    // put_int for BLKSSZGET/BLKALIGNOFF, put_uint for BLKPBSZGET/BLKIOMIN/
    // BLKIOOPT, put_u64 for BLKGETSIZE64. Callers pair them accordingly.
    unsafe { ioctl(file, Getter::<OP, T>::new()) }.ok()
}

/// LOOP_GET_STATUS64 from linux/loop.h: a plain number, not _IOR.
const LOOP_GET_STATUS64: Opcode = opcode::none(0x4C, 0x05);

/// struct loop_info64 from linux/loop.h; the kernel fills all of it.
#[repr(C)]
#[allow(dead_code)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// The file a loop device reads from, as the kernel holds it: its
/// (st_dev, st_ino) and, for a block device node, the device's number
/// (st_rdev, 0 for a regular file). None when the device is unbound or
/// the ioctl fails.
pub(crate) fn loop_backing(file: &File) -> Option<(u64, u64, u64)> {
    // SAFETY: loop_get_status64 (drivers/block/loop.c) copies exactly one
    // struct loop_info64 to the pointer.
    let info = unsafe { ioctl(file, Getter::<LOOP_GET_STATUS64, LoopInfo64>::new()) }.ok()?;
    Some((info.lo_device, info.lo_inode, info.lo_rdevice))
}

/// DM_TABLE_STATUS from linux/dm-ioctl.h: _IOWR(0xfd, 12, struct dm_ioctl),
/// struct dm_ioctl being 312 bytes; its answer follows it in the buffer.
const DM_TABLE_STATUS: Opcode =
    opcode::from_components(rustix::ioctl::Direction::ReadWrite, 0xfd, 12, DM_IOCTL_BYTES);
const DM_IOCTL_BYTES: usize = 312;
/// Version 4.0.0 of the interface: every kernel since 2.6 speaks it.
const DM_VERSION: [u32; 3] = [4, 0, 0];
/// Return the table (the constructor's arguments), not the status.
const DM_STATUS_TABLE_FLAG: u32 = 1 << 4;
const DM_BUFFER_FULL_FLAG: u32 = 1 << 8;
/// struct dm_target_spec: sector_start, length, status, next, type[16].
const DM_SPEC_BYTES: usize = 40;

/// A struct dm_ioctl and room for the table after it, 8-byte aligned as
/// the kernel lays the answer out.
#[repr(C, align(8))]
struct DmBuffer([u8; 16384]);

/// One target of a device-mapper table: where it starts in the mapped
/// device (512-byte sectors), its type and its constructor's arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DmTarget {
    pub start_sectors: u64,
    pub kind: String,
    pub params: String,
}

/// The live table of the device-mapper device `major:minor`, asked of
/// `control` (/dev/mapper/control; the kernel wants CAP_SYS_ADMIN). None
/// when the ioctl fails or the answer does not parse.
pub(crate) fn dm_table(control: &File, major: u32, minor: u32) -> Option<Vec<DmTarget>> {
    let mut buf = DmBuffer([0; 16384]);
    let b = &mut buf.0;
    for (i, v) in DM_VERSION.iter().enumerate() {
        b[i * 4..i * 4 + 4].copy_from_slice(&v.to_ne_bytes());
    }
    let size = u32::try_from(b.len()).ok()?;
    b[12..16].copy_from_slice(&size.to_ne_bytes());
    b[16..20].copy_from_slice(&(DM_IOCTL_BYTES as u32).to_ne_bytes());
    b[28..32].copy_from_slice(&DM_STATUS_TABLE_FLAG.to_ne_bytes());
    // huge_encode_dev: the device is looked up by number (name and uuid empty).
    let dev = u64::from(minor & 0xff) | u64::from(major) << 8 | u64::from(minor & !0xff) << 12;
    b[40..48].copy_from_slice(&dev.to_ne_bytes());
    // SAFETY: dm_ctl_ioctl (drivers/md/dm-ioctl.c) reads data_size bytes
    // from the pointer, which the buffer holds, and writes back at most as
    // many; the opcode's size is struct dm_ioctl's, as in the C header.
    unsafe { ioctl(control, Updater::<DM_TABLE_STATUS, DmBuffer>::new(&mut buf)) }.ok()?;
    let b = &buf.0;
    let word = |at: usize| Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?));
    if word(28)? & DM_BUFFER_FULL_FLAG != 0 {
        return None;
    }
    let count = word(20)?;
    let data = usize::try_from(word(16)?).ok()?;
    let mut at = data;
    let mut targets = Vec::new();
    for _ in 0..count {
        let spec = b.get(at..at.checked_add(DM_SPEC_BYTES)?)?;
        let start_sectors = u64::from_ne_bytes(spec.get(..8)?.try_into().ok()?);
        let next = usize::try_from(u32::from_ne_bytes(spec.get(20..24)?.try_into().ok()?)).ok()?;
        let kind = c_string(spec.get(24..40)?);
        let params = c_string(b.get(at + DM_SPEC_BYTES..)?);
        targets.push(DmTarget { start_sectors, kind, params });
        // `next` counts from the start of the answer; it must move on.
        at = data.checked_add(next).filter(|&n| n > at)?;
    }
    Some(targets)
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}
