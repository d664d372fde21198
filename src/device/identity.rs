//! How a disk is recognised across reboots and renames.

use super::drive::scsi::parse_unit_serial;
use super::sysfs::{read_text, SysRoot};
use super::{Target, Topology};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What a disk is recognised by when a write is undone or resumed: /dev
/// names change across reboots, so the path is never trusted alone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub size_bytes: u64,
    /// The drive's serial and WWN, when the kernel has them. A journal or
    /// backup without one (older versions found serials on NVMe only)
    /// matches any: a missing serial is unknown, not different.
    pub serial: Option<String>,
    pub wwid: Option<String>,
}

/// The identity of `target`, whose topology is `topology`.
pub fn identity(root: &SysRoot, target: &Target, topology: &Topology) -> Identity {
    let wwid = target.name.as_deref().and_then(|name| {
        let dir = root.block(name);
        read_text(&dir.join("wwid")).or_else(|| read_text(&dir.join("device/wwid")))
    });
    Identity { size_bytes: topology.size_bytes, serial: topology.serial.clone(), wwid }
}

/// The serial of the disk whose sysfs directory is `dir`, as lsblk's SERIAL
/// shows it: udev's ID_SCSI_SERIAL, ID_SERIAL_SHORT or ID_SERIAL (ata_id's
/// IDENTIFY serial on SATA, usb_id's on USB, the `serial` attribute on
/// NVMe and virtio-blk); without a udev record, the kernel's own: `serial`
/// (virtio-blk), `device/serial` (NVMe) or the Unit Serial Number page
/// (`device/vpd_pg80`: SCSI, and SATA through libata).
pub(crate) fn serial(root: &SysRoot, dir: &Path) -> Option<String> {
    let udev = root.udev_properties(dir);
    let property = |key: &str| udev.iter().find(|(k, v)| k == key && !v.is_empty());
    ["ID_SCSI_SERIAL", "ID_SERIAL_SHORT", "ID_SERIAL"]
        .iter()
        .find_map(|key| property(key))
        .map(|(_, v)| v.trim().to_string())
        .or_else(|| kernel_serial(dir))
}

/// The serial the kernel itself reports for the disk at `dir`, as the disk
/// is seen before udev runs: it may differ from udev's (usb_id reads the
/// USB descriptor, a bridge may answer another in its VPD page).
pub(crate) fn kernel_serial(dir: &Path) -> Option<String> {
    read_text(&dir.join("serial")).or_else(|| read_text(&dir.join("device/serial"))).or_else(|| {
        let page = std::fs::read(dir.join("device/vpd_pg80")).ok()?;
        parse_unit_serial(&page).ok().flatten()
    })
}
