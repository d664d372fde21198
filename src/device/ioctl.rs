//! Block-device ioctls: the kernel's answer for an open device node, which
//! can differ from sysfs for stacked or misbehaving drivers.

use super::topology::Reported;
use rustix::ioctl::{ioctl, opcode, Getter, Opcode};
use std::fs::File;

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
        logical: get::<BLKSSZGET, i32>(file).and_then(|v| u64::try_from(v).ok()),
        physical: get::<BLKPBSZGET, u32>(file).map(u64::from),
        minimum_io: get::<BLKIOMIN, u32>(file).map(u64::from),
        optimal_io: get::<BLKIOOPT, u32>(file).map(u64::from),
        // -1 means the device cannot be aligned; treated as unreported.
        alignment_offset: get::<BLKALIGNOFF, i32>(file).and_then(|v| u64::try_from(v).ok()),
        size_bytes: get::<BLKGETSIZE64, u64>(file),
    }
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
