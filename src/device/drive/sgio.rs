//! The only commands blkalign sends to a drive, and the two ioctls that
//! carry them (SG_IO, NVME_IOCTL_ADMIN_CMD). Every command is an inquiry
//! whose data flows from the device: the enum is the whole list, so no
//! path here can write.

use rustix::ioctl::{ioctl, opcode, Opcode, Updater};
use std::fs::File;

/// A read-only command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// SCSI INQUIRY, standard data.
    Inquiry,
    /// SCSI INQUIRY of a VPD page (0x00 supported pages, 0xB0 Block Limits).
    Vpd(u8),
    /// SCSI SERVICE ACTION IN(16) / READ CAPACITY(16).
    ReadCapacity16,
    /// ATA IDENTIFY DEVICE (0xEC) in an ATA PASS-THROUGH(16), PIO data-in.
    AtaIdentify,
    /// NVMe admin Identify (0x06), CNS 00h: the namespace.
    NvmeIdentifyNamespace(u32),
    /// NVMe admin Identify (0x06), CNS 01h: the controller.
    NvmeIdentifyController,
}

impl Command {
    /// How a report names it.
    pub fn name(self) -> &'static str {
        match self {
            Command::Inquiry => "SCSI INQUIRY",
            Command::Vpd(0xB0) => "SCSI VPD Block Limits",
            Command::Vpd(_) => "SCSI VPD",
            Command::ReadCapacity16 => "SCSI RC16",
            Command::AtaIdentify => "ATA IDENTIFY",
            Command::NvmeIdentifyNamespace(_) => "NVMe Identify Namespace",
            Command::NvmeIdentifyController => "NVMe Identify Controller",
        }
    }

    /// Bytes the answer takes.
    fn length(self) -> usize {
        match self {
            Command::Inquiry => 96,
            Command::Vpd(_) => 252,
            Command::ReadCapacity16 => 32,
            Command::AtaIdentify => 512,
            Command::NvmeIdentifyNamespace(_) | Command::NvmeIdentifyController => 4096,
        }
    }

    /// The SCSI CDB; None for NVMe.
    pub(crate) fn cdb(self) -> Option<Vec<u8>> {
        let len = u16::try_from(self.length()).ok()?.to_be_bytes();
        Some(match self {
            Command::Inquiry => vec![0x12, 0, 0, len[0], len[1], 0],
            Command::Vpd(page) => vec![0x12, 1, page, len[0], len[1], 0],
            Command::ReadCapacity16 => {
                let mut cdb = vec![0u8; 16];
                cdb[0] = 0x9E;
                cdb[1] = 0x10;
                cdb[12] = len[0];
                cdb[13] = len[1];
                cdb
            }
            Command::AtaIdentify => {
                let mut cdb = vec![0u8; 16];
                cdb[0] = 0x85;
                // Protocol 4: PIO data-in.
                cdb[1] = 4 << 1;
                // T_DIR from the device, BYT_BLOK blocks, T_LENGTH in the
                // sector count field: one 512-byte block.
                cdb[2] = 0x08 | 0x04 | 0x02;
                cdb[6] = 1;
                cdb[14] = 0xEC;
                cdb
            }
            Command::NvmeIdentifyNamespace(_) | Command::NvmeIdentifyController => return None,
        })
    }
}

/// Why a command got no answer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AskError {
    #[error("no pass-through on this device ({0})")]
    Unsupported(String),
    #[error("not permitted ({0}): needs root")]
    Denied(String),
    #[error(
        "the device rejected it ({}, ASC/ASCQ {asc:#04x}/{ascq:#04x}{})",
        sense_name(*key),
        if *key == 0x05 && *asc == 0x20 { ": it does not know the command" } else { "" }
    )]
    Rejected { key: u8, asc: u8, ascq: u8 },
    #[error("failed (SCSI status {status:#x}, host {host:#x}, driver {driver:#x})")]
    Failed { status: u8, host: u16, driver: u16 },
    #[error("the controller failed it (NVMe status {0:#x})")]
    Nvme(u32),
    #[error("{0}")]
    Io(String),
}

impl AskError {
    fn from_errno(e: rustix::io::Errno) -> AskError {
        let text = std::io::Error::from(e).to_string();
        match e {
            rustix::io::Errno::NOTTY | rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS => {
                AskError::Unsupported(text)
            }
            rustix::io::Errno::PERM | rustix::io::Errno::ACCESS => AskError::Denied(text),
            _ => AskError::Io(text),
        }
    }
}

/// Send `command` to the device `file` is open on; its answer, as long
/// as the device made it.
pub fn ask(file: &File, command: Command) -> Result<Vec<u8>, AskError> {
    match (command, command.cdb()) {
        (Command::NvmeIdentifyNamespace(nsid), _) => {
            nvme_identify(file, nsid, CNS_NAMESPACE, command.length())
        }
        // The controller's structure names no namespace (NSID 0).
        (Command::NvmeIdentifyController, _) => {
            nvme_identify(file, 0, CNS_CONTROLLER, command.length())
        }
        (_, Some(cdb)) => scsi(file, &cdb, command.length()),
        (_, None) => Err(AskError::Unsupported(command.name().into())),
    }
}

/// SG_IO from scsi/sg.h: _IO(0x22, 0x85) by number, struct sg_io_hdr
/// through the pointer.
const SG_IO: Opcode = opcode::none(0x22, 0x85);
const SG_DXFER_FROM_DEV: i32 = -3;
const TIMEOUT_MS: u32 = 10_000;

/// struct sg_io_hdr from scsi/sg.h.
#[repr(C)]
struct SgIoHdr {
    interface_id: i32,
    dxfer_direction: i32,
    cmd_len: u8,
    mx_sb_len: u8,
    iovec_count: u16,
    dxfer_len: u32,
    dxferp: *mut u8,
    cmdp: *const u8,
    sbp: *mut u8,
    timeout: u32,
    flags: u32,
    pack_id: i32,
    usr_ptr: *mut u8,
    status: u8,
    masked_status: u8,
    msg_status: u8,
    sb_len_wr: u8,
    host_status: u16,
    driver_status: u16,
    resid: i32,
    duration: u32,
    info: u32,
}

fn scsi(file: &File, cdb: &[u8], length: usize) -> Result<Vec<u8>, AskError> {
    let mut data = vec![0u8; length];
    let mut sense = [0u8; 64];
    let io_err = |what: &str| AskError::Io(format!("{what} does not fit SG_IO"));
    let mut hdr = SgIoHdr {
        interface_id: i32::from(b'S'),
        dxfer_direction: SG_DXFER_FROM_DEV,
        cmd_len: u8::try_from(cdb.len()).map_err(|_| io_err("the CDB"))?,
        mx_sb_len: sense.len() as u8,
        iovec_count: 0,
        dxfer_len: u32::try_from(length).map_err(|_| io_err("the answer"))?,
        dxferp: data.as_mut_ptr(),
        cmdp: cdb.as_ptr(),
        sbp: sense.as_mut_ptr(),
        timeout: TIMEOUT_MS,
        flags: 0,
        pack_id: 0,
        usr_ptr: std::ptr::null_mut(),
        status: 0,
        masked_status: 0,
        msg_status: 0,
        sb_len_wr: 0,
        host_status: 0,
        driver_status: 0,
        resid: 0,
        duration: 0,
        info: 0,
    };
    // SAFETY: sg_io (block/scsi_ioctl.c, drivers/scsi/sg.c) reads the header
    // and cmd_len bytes at cmdp, writes at most dxfer_len bytes to dxferp
    // (data direction from the device only) and mx_sb_len to sbp; all three
    // buffers outlive the call.
    unsafe { ioctl(file, Updater::<SG_IO, SgIoHdr>::new(&mut hdr)) }
        .map_err(AskError::from_errno)?;
    let sense = &sense[..usize::from(hdr.sb_len_wr).min(sense.len())];
    check_status(hdr.status, hdr.host_status, hdr.driver_status, sense)?;
    let got = length.saturating_sub(usize::try_from(hdr.resid.max(0)).unwrap_or(0));
    data.truncate(got);
    Ok(data)
}

/// GOOD, or CHECK CONDITION with a recovered error (SAT bridges report
/// "ATA pass-through information available" so), is an answer.
fn check_status(status: u8, host: u16, driver: u16, sense: &[u8]) -> Result<(), AskError> {
    // The driver's "sense valid" bit (DRIVER_SENSE) comes with a check condition.
    let driver = driver & !0x08;
    if status == 0 && host == 0 && driver == 0 {
        return Ok(());
    }
    match sense_key(sense) {
        Some((0x01, _, _)) if host == 0 && driver == 0 => Ok(()),
        Some((key, asc, ascq)) => Err(AskError::Rejected { key, asc, ascq }),
        None => Err(AskError::Failed { status, host, driver }),
    }
}

/// The standard's name of a sense key.
fn sense_name(key: u8) -> String {
    let name = match key {
        0x01 => "RECOVERED ERROR",
        0x02 => "NOT READY",
        0x03 => "MEDIUM ERROR",
        0x04 => "HARDWARE ERROR",
        0x05 => "ILLEGAL REQUEST",
        0x06 => "UNIT ATTENTION",
        0x0B => "ABORTED COMMAND",
        _ => return format!("sense key {key:#x}"),
    };
    name.into()
}

/// Sense key, ASC and ASCQ from fixed (0x70/0x71) or descriptor
/// (0x72/0x73) sense data.
fn sense_key(sense: &[u8]) -> Option<(u8, u8, u8)> {
    match sense.first()? & 0x7F {
        0x70 | 0x71 => Some((sense.get(2)? & 0x0F, *sense.get(12)?, *sense.get(13)?)),
        0x72 | 0x73 => Some((sense.get(1)? & 0x0F, *sense.get(2)?, *sense.get(3)?)),
        _ => None,
    }
}

/// NVME_IOCTL_ADMIN_CMD from linux/nvme_ioctl.h: _IOWR('N', 0x41, struct
/// nvme_passthru_cmd).
const NVME_IOCTL_ADMIN_CMD: Opcode = opcode::read_write::<NvmePassthru>(b'N', 0x41);
const NVME_ADMIN_IDENTIFY: u8 = 0x06;
/// Identify's Controller or Namespace Structure field (CDW10 bits 7:0).
const CNS_NAMESPACE: u32 = 0x00;
const CNS_CONTROLLER: u32 = 0x01;

/// struct nvme_passthru_cmd from linux/nvme_ioctl.h (72 bytes).
#[repr(C)]
struct NvmePassthru {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    result: u32,
}

fn nvme_identify(file: &File, nsid: u32, cns: u32, length: usize) -> Result<Vec<u8>, AskError> {
    let mut data = vec![0u8; length];
    let mut cmd = NvmePassthru {
        opcode: NVME_ADMIN_IDENTIFY,
        flags: 0,
        rsvd1: 0,
        nsid,
        cdw2: 0,
        cdw3: 0,
        metadata: 0,
        addr: data.as_mut_ptr() as u64,
        metadata_len: 0,
        data_len: u32::try_from(length).map_err(|_| AskError::Io("answer too long".into()))?,
        cdw10: cns,
        cdw11: 0,
        cdw12: 0,
        cdw13: 0,
        cdw14: 0,
        cdw15: 0,
        timeout_ms: TIMEOUT_MS,
        result: 0,
    };
    // SAFETY: nvme_user_cmd (drivers/nvme/host/ioctl.c) reads the struct,
    // maps data_len bytes at addr for the controller to fill (Identify is
    // a data-from-controller command) and writes back `result`; the buffer
    // outlives the call.
    let status = unsafe { ioctl(file, Admin(&mut cmd)) }.map_err(AskError::from_errno)?;
    if status != 0 {
        // The NVMe status field: Status Code Type in bits 10:8, Status Code 7:0.
        return Err(AskError::Nvme(status));
    }
    Ok(data)
}

/// NVME_IOCTL_ADMIN_CMD, keeping the ioctl's return value: a positive one
/// is the command's NVMe status, not an errno.
struct Admin<'a>(&'a mut NvmePassthru);

// SAFETY: the opcode is _IOWR over exactly the struct the pointer points
// at, and the output is the plain return value.
unsafe impl rustix::ioctl::Ioctl for Admin<'_> {
    type Output = u32;
    const IS_MUTATING: bool = true;

    fn opcode(&self) -> Opcode {
        NVME_IOCTL_ADMIN_CMD
    }

    fn as_ptr(&mut self) -> *mut std::ffi::c_void {
        (self.0 as *mut NvmePassthru).cast()
    }

    unsafe fn output_from_ptr(
        out: rustix::ioctl::IoctlOutput,
        _: *mut std::ffi::c_void,
    ) -> rustix::io::Result<u32> {
        Ok(u32::try_from(out).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Command; 7] = [
        Command::Inquiry,
        Command::Vpd(0x00),
        Command::Vpd(0xB0),
        Command::ReadCapacity16,
        Command::AtaIdentify,
        Command::NvmeIdentifyNamespace(1),
        Command::NvmeIdentifyController,
    ];

    /// Every command is an inquiry: INQUIRY 0x12, SERVICE ACTION IN(16)
    /// 0x9E with READ CAPACITY(16) 0x10, ATA PASS-THROUGH(16) 0x85 carrying
    /// IDENTIFY DEVICE 0xEC as PIO data-in from the device; NVMe goes only
    /// as admin Identify 0x06.
    #[test]
    fn every_command_reads() {
        for command in ALL {
            let Some(cdb) = command.cdb() else {
                assert!(command.name().starts_with("NVMe Identify"), "{command:?}");
                continue;
            };
            match cdb[0] {
                0x12 => assert_eq!(cdb.len(), 6),
                0x9E => assert_eq!((cdb.len(), cdb[1] & 0x1F), (16, 0x10)),
                0x85 => {
                    assert_eq!(cdb[14], 0xEC, "IDENTIFY DEVICE");
                    assert_eq!((cdb[1] >> 1) & 0x0F, 4, "PIO data-in");
                    assert_ne!(cdb[2] & 0x08, 0, "T_DIR: from the device");
                }
                op => panic!("{command:?} sends opcode {op:#x}"),
            }
        }
        assert_eq!(NVME_ADMIN_IDENTIFY, 0x06);
        assert_eq!(std::mem::size_of::<NvmePassthru>(), 72);
        assert_eq!(std::mem::size_of::<SgIoHdr>(), 88);
    }

    #[test]
    fn allocation_lengths_match_the_buffers() {
        for command in ALL {
            let Some(cdb) = command.cdb() else { continue };
            let len = match cdb[0] {
                0x12 => u16::from_be_bytes([cdb[3], cdb[4]]).into(),
                0x9E => u32::from_be_bytes([cdb[10], cdb[11], cdb[12], cdb[13]]) as usize,
                _ => usize::from(cdb[6]) * 512,
            };
            assert_eq!(len, command.length(), "{command:?}");
        }
    }

    #[test]
    fn recovered_errors_are_answers() {
        let fixed = |key: u8, asc: u8| {
            let mut s = [0u8; 18];
            s[0] = 0x70;
            s[2] = key;
            s[12] = asc;
            s
        };
        assert_eq!(check_status(0, 0, 0, &[]), Ok(()));
        // SAT: ATA PASS-THROUGH information available.
        assert_eq!(check_status(2, 0, 0x08, &[0x72, 0x01, 0x00, 0x1D]), Ok(()));
        assert_eq!(
            check_status(2, 0, 0x08, &fixed(0x05, 0x20)),
            Err(AskError::Rejected { key: 5, asc: 0x20, ascq: 0 })
        );
        assert_eq!(
            check_status(0, 0x01, 0, &[]),
            Err(AskError::Failed { status: 0, host: 1, driver: 0 })
        );
    }
}
