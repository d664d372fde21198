//! The drive's own answers: ATA IDENTIFY DEVICE, SCSI INQUIRY, READ
//! CAPACITY(16), the Supported VPD Pages and Block Limits pages, NVMe
//! Identify Namespace. Every input goes to every parser (each reads its
//! own prefix), and what they accept must hold together.
#![no_main]

use blkalign::device::drive::{ata, nvme, scsi};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(id) = ata::parse_identify(data) {
        let physical = id.physical_sector_size.unwrap_or(id.logical_sector_size);
        assert!(physical % id.logical_sector_size == 0);
        let ratio = physical / id.logical_sector_size;
        assert!(id.lowest_aligned_lba.is_none_or(|l| l < ratio));
    }
    let _ = scsi::parse_inquiry(data);
    if let Ok(cap) = scsi::parse_read_capacity16(data) {
        assert_eq!(cap.physical_block_size, cap.logical_block_size << cap.physical_exponent);
        assert!(cap.lowest_aligned_lba < 1 << cap.physical_exponent);
    }
    if let Ok(pages) = scsi::parse_supported_vpd_pages(data) {
        assert!(pages.len() <= data.len());
    }
    let _ = scsi::parse_block_limits(data);
    if let Ok(ns) = nvme::parse_id_ns(data) {
        assert!(ns.formats.iter().all(|f| f.data_size >= 512 && f.index <= 63));
        let _ = ns.preferred_write_bytes();
        if let Some(f) = ns.in_use() {
            assert_eq!(f.index, ns.format_in_use);
            let _ = f.performance_name();
        }
    }
});
