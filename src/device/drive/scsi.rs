//! SCSI answers (SPC-4, SBC-3), all big-endian: standard INQUIRY, READ
//! CAPACITY(16), and the Supported VPD Pages and Block Limits VPD pages.
//! READ CAPACITY(16) is where a SCSI or SAT device reports its physical
//! block and lowest aligned LBA; the kernel's sd driver asks it only in
//! some cases (USB bridges often get READ CAPACITY(10), which has neither).

use super::error::ParseError;

const INQUIRY: &str = "SCSI INQUIRY";
const INQUIRY_LEN: usize = 36;
const RC16: &str = "SCSI READ CAPACITY(16)";
/// The fields up to the lowest aligned LBA; the full parameter data is 32.
const RC16_LEN: usize = 16;
const SUPPORTED_PAGES: &str = "SCSI Supported VPD Pages";
const VPD_HEADER: usize = 4;
const UNIT_SERIAL: &str = "SCSI Unit Serial Number VPD page";
const UNIT_SERIAL_PAGE: u8 = 0x80;
const BLOCK_LIMITS: &str = "SCSI Block Limits VPD page";
const BLOCK_LIMITS_PAGE: u8 = 0xB0;
/// Up to the optimal transfer length; SBC-2's page ended there.
const BLOCK_LIMITS_LEN: usize = 16;

const MIN_BLOCK: u64 = 512;
const MAX_BLOCK: u64 = 65536;
const MAX_PHYSICAL: u64 = 1 << 31;

/// Standard INQUIRY data: what the device says it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inquiry {
    /// Byte 0 bits 4:0 (0 is a disk, 5 a CD/DVD, 0x0E a simplified disk).
    pub peripheral_type: u8,
    /// Bytes 8-15; "ATA" in front of a SAT translation (libata, most bridges).
    pub vendor: String,
    /// Bytes 16-31.
    pub product: String,
    /// Bytes 32-35.
    pub revision: String,
}

/// READ CAPACITY(16) parameter data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capacity16 {
    /// Bytes 0-7: the last LBA, not the count.
    pub last_lba: u64,
    /// Bytes 8-11.
    pub logical_block_size: u64,
    /// Byte 13 bits 3:0 (LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT).
    pub physical_exponent: u8,
    /// `logical_block_size << physical_exponent`.
    pub physical_block_size: u64,
    /// Byte 14 bits 5:0 and byte 15: the first LBA that starts a physical block.
    pub lowest_aligned_lba: u64,
    /// Byte 14 bit 7 (LBPME).
    pub thin_provisioned: bool,
}

/// The Block Limits VPD page (0xB0) fields that bear on alignment, in
/// logical blocks; None when zero ("not reported") or past the page length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockLimits {
    /// Bytes 6-7, OPTIMAL TRANSFER LENGTH GRANULARITY.
    pub optimal_granularity_blocks: Option<u64>,
    /// Bytes 8-11, MAXIMUM TRANSFER LENGTH.
    pub maximum_transfer_blocks: Option<u64>,
    /// Bytes 12-15, OPTIMAL TRANSFER LENGTH.
    pub optimal_transfer_blocks: Option<u64>,
}

/// Parse standard INQUIRY data (at least its first 36 bytes).
pub fn parse_inquiry(data: &[u8]) -> Result<Inquiry, ParseError> {
    let b: &[u8; INQUIRY_LEN] = data.first_chunk().ok_or(short(INQUIRY, data, INQUIRY_LEN))?;
    Ok(Inquiry {
        peripheral_type: b[0] & 0x1F,
        vendor: text(&b[8..16]),
        product: text(&b[16..32]),
        revision: text(&b[32..36]),
    })
}

/// Parse READ CAPACITY(16) parameter data (at least its first 16 bytes).
pub fn parse_read_capacity16(data: &[u8]) -> Result<Capacity16, ParseError> {
    let b: &[u8; RC16_LEN] = data.first_chunk().ok_or(short(RC16, data, RC16_LEN))?;
    let invalid = |reason| ParseError::Invalid { what: RC16, reason };
    let last_lba = u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let logical = u64::from(u32::from_be_bytes([b[8], b[9], b[10], b[11]]));
    if !logical.is_power_of_two() || !(MIN_BLOCK..=MAX_BLOCK).contains(&logical) {
        return Err(invalid(format!(
            "a logical block of {logical} bytes, not a power of two from 512 to 65536"
        )));
    }
    let exponent = b[13] & 0x0F;
    let ratio = 1u64 << exponent;
    let physical = logical.checked_mul(ratio).filter(|p| *p <= MAX_PHYSICAL).ok_or_else(|| {
        invalid(format!("{logical}-byte blocks, 2^{exponent} to a physical block: over 2^31 bytes"))
    })?;
    let lowest = u64::from(u16::from_be_bytes([b[14] & 0x3F, b[15]]));
    if lowest >= ratio {
        return Err(invalid(format!(
            "lowest aligned LBA {lowest} is not inside the first physical block of {ratio} \
             logical blocks"
        )));
    }
    Ok(Capacity16 {
        last_lba,
        logical_block_size: logical,
        physical_exponent: exponent,
        physical_block_size: physical,
        lowest_aligned_lba: lowest,
        thin_provisioned: b[14] & 0x80 != 0,
    })
}

/// The page codes listed by VPD page 0x00; a list cut short by the
/// allocation length is what is there.
pub fn parse_supported_vpd_pages(data: &[u8]) -> Result<Vec<u8>, ParseError> {
    let b: &[u8; VPD_HEADER] =
        data.first_chunk().ok_or(short(SUPPORTED_PAGES, data, VPD_HEADER))?;
    if b[1] != 0x00 {
        return Err(ParseError::Invalid {
            what: SUPPORTED_PAGES,
            reason: format!("page code {:#04x}, not 0x00", b[1]),
        });
    }
    let listed = usize::from(u16::from_be_bytes([b[2], b[3]]));
    let list = data.get(VPD_HEADER..).unwrap_or_default();
    Ok(list.iter().take(listed).copied().collect())
}

/// Parse the Block Limits VPD page (at least its first 16 bytes).
pub fn parse_block_limits(data: &[u8]) -> Result<BlockLimits, ParseError> {
    let b: &[u8; BLOCK_LIMITS_LEN] =
        data.first_chunk().ok_or(short(BLOCK_LIMITS, data, BLOCK_LIMITS_LEN))?;
    if b[1] != BLOCK_LIMITS_PAGE {
        return Err(ParseError::Invalid {
            what: BLOCK_LIMITS,
            reason: format!("page code {:#04x}, not 0xb0", b[1]),
        });
    }
    // Bytes past the page length are not the device's answer.
    let end = usize::from(u16::from_be_bytes([b[2], b[3]])).saturating_add(VPD_HEADER);
    let field = |last_byte: usize, value: u32| (end > last_byte && value != 0).then_some(value);
    let granularity = u32::from(u16::from_be_bytes([b[6], b[7]]));
    let maximum = u32::from_be_bytes([b[8], b[9], b[10], b[11]]);
    let optimal = u32::from_be_bytes([b[12], b[13], b[14], b[15]]);
    Ok(BlockLimits {
        optimal_granularity_blocks: field(7, granularity).map(u64::from),
        maximum_transfer_blocks: field(11, maximum).map(u64::from),
        optimal_transfer_blocks: field(15, optimal).map(u64::from),
    })
}

/// The Unit Serial Number VPD page (0x80), as the kernel keeps it in sysfs
/// `device/vpd_pg80`: the serial, trimmed; None when blank. A page cut
/// short is what is there.
pub(crate) fn parse_unit_serial(data: &[u8]) -> Result<Option<String>, ParseError> {
    let b: &[u8; VPD_HEADER] = data.first_chunk().ok_or(short(UNIT_SERIAL, data, VPD_HEADER))?;
    if b[1] != UNIT_SERIAL_PAGE {
        return Err(ParseError::Invalid {
            what: UNIT_SERIAL,
            reason: format!("page code {:#04x}, not 0x80", b[1]),
        });
    }
    let length = usize::from(u16::from_be_bytes([b[2], b[3]]));
    let body = data.get(VPD_HEADER..).unwrap_or_default();
    let serial = text(body.get(..length).unwrap_or(body));
    Ok(Some(serial).filter(|s| !s.is_empty()))
}

fn short(what: &'static str, data: &[u8], need: usize) -> ParseError {
    ParseError::Short { what, got: data.len(), need }
}

/// An ASCII field as SPC and ATA pad it (spaces; NULs from some bridges),
/// trimmed, with bytes outside printable ASCII shown as '?'.
pub(super) fn text(bytes: &[u8]) -> String {
    let chars: String = bytes
        .iter()
        .map(|&b| match b {
            0 => '\0',
            0x20..=0x7E => char::from(b),
            _ => '?',
        })
        .collect();
    chars.trim_matches([' ', '\0']).replace('\0', "?")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reason(err: ParseError) -> String {
        match err {
            ParseError::Invalid { reason, .. } => reason,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    /// Every prefix shorter than `need` is Short, and `parse` takes `full`.
    fn prefixes_are_short<T: std::fmt::Debug>(
        full: &[u8],
        need: usize,
        parse: impl Fn(&[u8]) -> Result<T, ParseError>,
    ) {
        assert!(parse(full).is_ok());
        for n in 0..need {
            match parse(&full[..n]) {
                Err(ParseError::Short { got, need: needed, .. }) => {
                    assert_eq!((got, needed), (n, need));
                }
                other => panic!("{n} bytes: {other:?}"),
            }
        }
    }

    fn inquiry(kind: u8, vendor: &str, product: &str, revision: &str) -> Vec<u8> {
        let mut b = vec![0u8; 96];
        b[0] = kind;
        b[2] = 0x06; // SPC-4
        b[4] = 91; // additional length
        for (at, len, s) in [(8, 8, vendor), (16, 16, product), (32, 4, revision)] {
            let mut field = s.as_bytes().to_vec();
            field.resize(len, b' ');
            b[at..at + len].copy_from_slice(&field);
        }
        b
    }

    #[test]
    fn inquiry_strings() {
        let id = parse_inquiry(&inquiry(0, "ATA", "WDC WD20EARS-00M", "AB51")).unwrap();
        assert_eq!(id.peripheral_type, 0);
        assert_eq!(id.vendor, "ATA");
        assert_eq!(id.product, "WDC WD20EARS-00M");
        assert_eq!(id.revision, "AB51");
        // Qualifier bits are not part of the type; odd bytes become '?'.
        let mut b = inquiry(0x25, "Generic", "SD/MMC\u{1}", "1.00");
        b[19] = 0xFF;
        let id = parse_inquiry(&b).unwrap();
        assert_eq!(id.peripheral_type, 5);
        assert_eq!(id.product, "SD/?MC?");
        // NUL padding, as some bridges send.
        let mut b = inquiry(0, "JMicron", "", "");
        b[16..36].fill(0);
        let id = parse_inquiry(&b).unwrap();
        assert_eq!((id.product.as_str(), id.revision.as_str()), ("", ""));
    }

    #[test]
    fn inquiry_prefixes() {
        prefixes_are_short(&inquiry(0, "ATA", "ST2000DM001", "CC4B"), INQUIRY_LEN, parse_inquiry);
    }

    /// READ CAPACITY(16) parameter data, 32 bytes as devices return it.
    fn rc16(last_lba: u64, block: u32, exponent: u8, lowest: u16, lbpme: bool) -> Vec<u8> {
        let mut b = vec![0u8; 32];
        b[0..8].copy_from_slice(&last_lba.to_be_bytes());
        b[8..12].copy_from_slice(&block.to_be_bytes());
        b[13] = exponent;
        b[14..16].copy_from_slice(&lowest.to_be_bytes());
        if lbpme {
            b[14] |= 0x80;
        }
        b
    }

    #[test]
    fn capacity_512_native_and_emulated() {
        let cap = parse_read_capacity16(&rc16(3907029167, 512, 0, 0, false)).unwrap();
        assert_eq!(cap.last_lba, 3907029167);
        assert_eq!((cap.logical_block_size, cap.physical_block_size), (512, 512));
        assert_eq!((cap.physical_exponent, cap.lowest_aligned_lba), (0, 0));
        assert!(!cap.thin_provisioned);
        let cap = parse_read_capacity16(&rc16(3907029167, 512, 3, 0, true)).unwrap();
        assert_eq!((cap.physical_exponent, cap.physical_block_size), (3, 4096));
        assert!(cap.thin_provisioned);
    }

    #[test]
    fn capacity_lowest_aligned() {
        for lowest in 0..8 {
            let cap = parse_read_capacity16(&rc16(1000, 512, 3, lowest, false)).unwrap();
            assert_eq!(cap.lowest_aligned_lba, u64::from(lowest));
        }
        // LBPRZ (bit 6) is not part of the field.
        let cap = parse_read_capacity16(&rc16(1000, 512, 3, 0x4001, false)).unwrap();
        assert_eq!(cap.lowest_aligned_lba, 1);
    }

    #[test]
    fn capacity_4k_native() {
        let cap = parse_read_capacity16(&rc16(488378645, 4096, 0, 0, false)).unwrap();
        assert_eq!((cap.logical_block_size, cap.physical_block_size), (4096, 4096));
        let cap = parse_read_capacity16(&rc16(1, 65536, 15, 0, false)).unwrap();
        assert_eq!(cap.physical_block_size, 1 << 31);
    }

    #[test]
    fn capacity_invalid_block_size() {
        for block in [0, 256, 520, 528, 4160, 131072, u32::MAX] {
            let err = parse_read_capacity16(&rc16(1000, block, 0, 0, false)).unwrap_err();
            assert!(reason(err).contains("logical block"), "{block}");
        }
    }

    #[test]
    fn capacity_lowest_aligned_past_the_physical_block() {
        for (exponent, lowest) in [(3, 8), (0, 1), (3, 0x3FFF)] {
            let err = parse_read_capacity16(&rc16(1000, 512, exponent, lowest, false)).unwrap_err();
            assert!(reason(err).contains("lowest aligned LBA"), "{exponent} {lowest}");
        }
    }

    #[test]
    fn capacity_prefixes() {
        prefixes_are_short(&rc16(1000, 512, 3, 1, false), RC16_LEN, parse_read_capacity16);
    }

    fn vpd(page: u8, body: &[u8]) -> Vec<u8> {
        let mut b = vec![0, page];
        b.extend(u16::try_from(body.len()).unwrap().to_be_bytes());
        b.extend(body);
        b
    }

    #[test]
    fn supported_pages() {
        let b = vpd(0x00, &[0x00, 0x80, 0x83, 0x89, 0xB0, 0xB1]);
        assert_eq!(parse_supported_vpd_pages(&b).unwrap(), [0x00, 0x80, 0x83, 0x89, 0xB0, 0xB1]);
        // Cut short by the allocation length: what came.
        assert_eq!(parse_supported_vpd_pages(&b[..7]).unwrap(), [0x00, 0x80, 0x83]);
        // Bytes past the page length are not pages.
        let mut longer = b.clone();
        longer.extend([0xB2, 0xB7]);
        assert_eq!(parse_supported_vpd_pages(&longer).unwrap().len(), 6);
        assert!(reason(parse_supported_vpd_pages(&vpd(0x80, b"serial")).unwrap_err())
            .contains("page code 0x80"));
        prefixes_are_short(&b, VPD_HEADER, parse_supported_vpd_pages);
    }

    fn block_limits(granularity: u16, maximum: u32, optimal: u32) -> Vec<u8> {
        let mut body = vec![0u8; 0x3C];
        body[2..4].copy_from_slice(&granularity.to_be_bytes());
        body[4..8].copy_from_slice(&maximum.to_be_bytes());
        body[8..12].copy_from_slice(&optimal.to_be_bytes());
        vpd(BLOCK_LIMITS_PAGE, &body)
    }

    #[test]
    fn block_limits_fields() {
        let limits = parse_block_limits(&block_limits(8, 65535, 2048)).unwrap();
        assert_eq!(limits.optimal_granularity_blocks, Some(8));
        assert_eq!(limits.maximum_transfer_blocks, Some(65535));
        assert_eq!(limits.optimal_transfer_blocks, Some(2048));
        let none = BlockLimits {
            optimal_granularity_blocks: None,
            maximum_transfer_blocks: None,
            optimal_transfer_blocks: None,
        };
        assert_eq!(parse_block_limits(&block_limits(0, 0, 0)).unwrap(), none);
        // A page length of 4 covers bytes 4-7 only.
        let mut b = block_limits(8, 65535, 2048);
        b[2..4].copy_from_slice(&4u16.to_be_bytes());
        let limits = parse_block_limits(&b).unwrap();
        assert_eq!(limits.optimal_granularity_blocks, Some(8));
        assert_eq!(limits.optimal_transfer_blocks, None);
    }

    #[test]
    fn block_limits_wrong_page() {
        let mut b = block_limits(8, 0, 0);
        b[1] = 0xB1;
        assert!(reason(parse_block_limits(&b).unwrap_err()).contains("page code 0xb1"));
    }

    #[test]
    fn block_limits_prefixes() {
        prefixes_are_short(&block_limits(8, 65535, 2048), BLOCK_LIMITS_LEN, parse_block_limits);
    }

    #[test]
    fn unit_serial_number_page() {
        let page = b"\x00\x80\x00\x10        5QG7BWGF";
        assert_eq!(parse_unit_serial(page).unwrap().as_deref(), Some("5QG7BWGF"));
        // Bytes past the page length are not the serial.
        assert_eq!(parse_unit_serial(b"\x00\x80\x00\x02AB  CD").unwrap().as_deref(), Some("AB"));
        assert_eq!(parse_unit_serial(b"\x00\x80\x00\x08  ").unwrap(), None, "blank");
        assert!(parse_unit_serial(b"\x00\x83\x00\x02AB").is_err(), "another page");
        prefixes_are_short(page, VPD_HEADER, parse_unit_serial);
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = parse_inquiry(&data);
            let _ = parse_supported_vpd_pages(&data);
            let _ = parse_block_limits(&data);
            let _ = parse_unit_serial(&data);
            if let Ok(cap) = parse_read_capacity16(&data) {
                prop_assert_eq!(
                    cap.physical_block_size,
                    cap.logical_block_size << cap.physical_exponent
                );
                prop_assert!(cap.lowest_aligned_lba < 1 << cap.physical_exponent);
            }
        }
    }
}
