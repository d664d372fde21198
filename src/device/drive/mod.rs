//! Asking the drive itself: ATA IDENTIFY DEVICE, SCSI READ CAPACITY(16) and
//! the Block Limits VPD page, NVMe Identify Namespace and Controller. The
//! kernel's sector sizes come from what its driver chose to ask (RC10 on
//! USB, the atomic write unit on NVMe), so the drive's own answer is kept
//! beside them.

pub mod ata;
mod error;
pub mod nvme;
pub mod scsi;
pub mod sgio;
pub mod smart;

pub(crate) use error::ParseError;
use serde::Serialize;
use sgio::Command;
use std::fs::File;
use std::path::{Path, PathBuf};

/// The command set a drive answered in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Ata,
    Scsi,
    Nvme,
}

/// A value the drive gave, and the command (or field) it came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Answer {
    pub value: u64,
    pub via: &'static str,
}

/// A command that got no answer, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unanswered {
    pub command: &'static str,
    pub reason: String,
}

/// The USB device a disk is behind: its bridge.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UsbBridge {
    /// idVendor:idProduct, as lsusb prints it.
    pub id: String,
    pub manufacturer: Option<String>,
    pub product: Option<String>,
}

/// One NVMe LBA format, as `nvme id-ns` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Format {
    pub index: u8,
    pub data_size: u64,
    pub metadata_size: u16,
    pub relative_performance: &'static str,
    pub in_use: bool,
}

/// What a drive says about itself, read-only, beside what the kernel says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Drive {
    /// The command set that answered; None when nothing did.
    pub protocol: Option<Protocol>,
    pub logical_sector_size: Option<Answer>,
    pub physical_sector_size: Option<Answer>,
    pub alignment_offset: Option<Answer>,
    pub optimal_io_size: Option<Answer>,
    pub vendor: Option<String>,
    pub model: Option<String>,
    pub serial: Option<String>,
    pub firmware: Option<String>,
    /// ATA word 217: 0 for a solid-state drive, else revolutions a minute.
    pub rpm: Option<u16>,
    pub usb_bridge: Option<UsbBridge>,
    /// NVMe: every LBA format the namespace can be formatted to.
    pub lba_formats: Vec<Format>,
    pub unanswered: Vec<Unanswered>,
}

/// Ask the drive under the whole-disk block device `file`, whose sysfs
/// directory is `sys`. None for a device with no drive under it (loop,
/// device-mapper, md, zram: no `device` link in sysfs).
pub fn ask(file: &File, sys: &Path) -> Option<Drive> {
    let device = std::fs::canonicalize(sys.join("device")).ok()?;
    let mut drive = Drive { usb_bridge: usb_bridge(&device), ..Drive::default() };
    match crate::device::sysfs::read_text(&sys.join("nsid")).and_then(|n| n.parse().ok()) {
        Some(nsid) => {
            ask_nvme(file, nsid, &mut drive);
            identify_controller(file, &mut drive);
        }
        None => ask_scsi(file, &mut drive),
    }
    Some(drive)
}

impl Drive {
    fn run(&mut self, file: &File, command: Command) -> Option<Vec<u8>> {
        sgio::ask(file, command).map_err(|e| self.failed(command.name(), e)).ok()
    }

    fn failed(&mut self, command: &'static str, reason: impl std::fmt::Display) {
        self.unanswered.push(Unanswered { command, reason: reason.to_string() });
    }

    fn parsed<T>(&mut self, command: Command, answer: Result<T, ParseError>) -> Option<T> {
        answer.map_err(|e| self.failed(command.name(), e)).ok()
    }
}

fn ask_scsi(file: &File, drive: &mut Drive) {
    let Some(data) = drive.run(file, Command::Inquiry) else { return };
    let Some(inquiry) = drive.parsed(Command::Inquiry, scsi::parse_inquiry(&data)) else { return };
    drive.protocol = Some(Protocol::Scsi);
    drive.vendor = Some(inquiry.vendor.clone()).filter(|v| !v.is_empty());
    drive.model = Some(inquiry.product).filter(|v| !v.is_empty());
    drive.firmware = Some(inquiry.revision).filter(|v| !v.is_empty());
    let logical = read_capacity(file, drive);
    block_limits(file, drive, logical);
    // libata answers IDENTIFY for its disks (vendor "ATA"); a USB bridge
    // may pass it through to the drive (SAT), which is the point of asking.
    if inquiry.vendor == "ATA" || drive.usb_bridge.is_some() {
        identify(file, drive);
    }
}

/// RC16: the sizes and lowest aligned LBA; the logical size, for B0.
fn read_capacity(file: &File, drive: &mut Drive) -> Option<u64> {
    let command = Command::ReadCapacity16;
    let data = drive.run(file, command)?;
    let cap = drive.parsed(command, scsi::parse_read_capacity16(&data))?;
    let via = command.name();
    drive.logical_sector_size = Some(Answer { value: cap.logical_block_size, via });
    drive.physical_sector_size = Some(Answer { value: cap.physical_block_size, via });
    let offset = cap.lowest_aligned_lba.checked_mul(cap.logical_block_size)?;
    drive.alignment_offset = Some(Answer { value: offset, via });
    Some(cap.logical_block_size)
}

/// The Block Limits page, when the device lists it: optimal transfer length.
fn block_limits(file: &File, drive: &mut Drive, logical: Option<u64>) {
    let pages = Command::Vpd(0x00);
    let Some(data) = drive.run(file, pages) else { return };
    let Some(list) = drive.parsed(pages, scsi::parse_supported_vpd_pages(&data)) else { return };
    if !list.contains(&0xB0) {
        return;
    }
    let command = Command::Vpd(0xB0);
    let Some(data) = drive.run(file, command) else { return };
    let Some(limits) = drive.parsed(command, scsi::parse_block_limits(&data)) else { return };
    let bytes = limits.optimal_transfer_blocks.zip(logical).and_then(|(b, l)| b.checked_mul(l));
    drive.optimal_io_size = bytes.map(|value| Answer { value, via: command.name() });
}

/// IDENTIFY DEVICE: the drive's own word, which beats the SCSI layer's
/// (a translation by libata or by a bridge).
fn identify(file: &File, drive: &mut Drive) {
    let command = Command::AtaIdentify;
    let Some(data) = drive.run(file, command) else { return };
    let Some(id) = drive.parsed(command, ata::parse_identify(&data)) else { return };
    let via = command.name();
    drive.protocol = Some(Protocol::Ata);
    drive.logical_sector_size = Some(Answer { value: id.logical_sector_size, via });
    if let Some(value) = id.physical_sector_size {
        drive.physical_sector_size = Some(Answer { value, via });
    }
    // Word 209 only means something with several logical per physical.
    let lowest = match id.physical_sector_size {
        Some(p) if p == id.logical_sector_size => Some(0),
        _ => id.lowest_aligned_lba,
    };
    if let Some(value) = lowest.and_then(|l| l.checked_mul(id.logical_sector_size)) {
        drive.alignment_offset = Some(Answer { value, via });
    }
    drive.vendor = None;
    drive.model = Some(id.model).filter(|v| !v.is_empty());
    drive.serial = Some(id.serial).filter(|v| !v.is_empty());
    drive.firmware = Some(id.firmware).filter(|v| !v.is_empty());
    drive.rpm = id.rotation.map(|r| match r {
        ata::Rotation::NonRotating => 0,
        ata::Rotation::Rpm(rpm) => rpm,
    });
}

fn ask_nvme(file: &File, nsid: u32, drive: &mut Drive) {
    let command = Command::NvmeIdentifyNamespace(nsid);
    let Some(data) = drive.run(file, command) else { return };
    let Some(ns) = drive.parsed(command, nvme::parse_id_ns(&data)) else { return };
    drive.protocol = Some(Protocol::Nvme);
    let size = ns.logical_sector_size();
    drive.logical_sector_size = size.map(|value| Answer { value, via: "NVMe LBA format" });
    let npwg = ns.preferred_write_bytes();
    drive.physical_sector_size = npwg.map(|value| Answer { value, via: "NVMe NPWG" });
    let nows = ns.nows.zip(size).and_then(|(n, s)| n.checked_mul(s));
    drive.optimal_io_size = nows.map(|value| Answer { value, via: "NVMe NOWS" });
    drive.lba_formats = ns
        .formats
        .iter()
        .map(|f| Format {
            index: f.index,
            data_size: f.data_size,
            metadata_size: f.metadata_size,
            relative_performance: f.performance_name(),
            in_use: f.index == ns.format_in_use,
        })
        .collect();
}

/// Identify Controller: the drive's vendor (its PCI vendor ID, as
/// `nvme id-ctrl` prints VID), serial, model and firmware.
fn identify_controller(file: &File, drive: &mut Drive) {
    let command = Command::NvmeIdentifyController;
    let Some(data) = drive.run(file, command) else { return };
    let Some(ctrl) = drive.parsed(command, nvme::parse_id_ctrl(&data)) else { return };
    drive.protocol = Some(Protocol::Nvme);
    drive.vendor = Some(format!("{:#06x}", ctrl.vendor_id));
    drive.serial = Some(ctrl.serial).filter(|v| !v.is_empty());
    drive.model = Some(ctrl.model).filter(|v| !v.is_empty());
    drive.firmware = Some(ctrl.firmware).filter(|v| !v.is_empty());
}

/// The nearest USB device above the disk in sysfs.
fn usb_bridge(device: &Path) -> Option<UsbBridge> {
    let read = |dir: &PathBuf, name: &str| crate::device::sysfs::read_text(&dir.join(name));
    device.ancestors().map(Path::to_path_buf).find_map(|dir| {
        let id = format!("{}:{}", read(&dir, "idVendor")?, read(&dir, "idProduct")?);
        Some(UsbBridge {
            id,
            manufacturer: read(&dir, "manufacturer"),
            product: read(&dir, "product"),
        })
    })
}
