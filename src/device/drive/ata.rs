//! ATA IDENTIFY DEVICE (ACS-3 7.12.7, "IDENTIFY DEVICE data"): 256
//! little-endian words. Word 106 gives the logical and physical sector
//! sizes, word 209 where LBA 0 sits inside the first physical sector: the
//! jumpered WD "EARS" drives and others shift LBA 0 so that old fdisk's
//! LBA 63 lands on a physical boundary.

use super::error::ParseError;

const WHAT: &str = "ATA IDENTIFY DEVICE";
/// IDENTIFY DEVICE is always one 512-byte block, whatever the sector size.
const LEN: usize = 512;

/// Word 106, physical/logical sector size.
const SECTOR_SIZE: usize = 106;
/// Word 106 bit 13: several logical sectors per physical one.
const MULTIPLE_LOGICAL: u16 = 1 << 13;
/// Word 106 bit 12: words 117-118 give the logical sector size.
const LONG_LOGICAL: u16 = 1 << 12;
/// Word 106 bits 3:0: log2 of logical sectors per physical sector.
const PER_PHYSICAL_LOG2: u16 = 0xF;
/// Words 117-118: logical sector size in words, low word first.
const LOGICAL_SIZE_LO: usize = 117;
const LOGICAL_SIZE_HI: usize = 118;
/// Word 209, alignment of logical sectors within the physical sector.
const ALIGNMENT: usize = 209;
/// Word 209 bits 13:0 as the standard and the kernel read them.
const FIRST_OFFSET: u16 = 0x3FFF;
/// Word 217, nominal media rotation rate.
const ROTATION: usize = 217;
/// Word 255 bits 7:0 when bits 15:8 hold a checksum.
const CHECKSUM_SIGNATURE: u8 = 0xA5;

const MIN_LOGICAL: u64 = 512;
const MAX_LOGICAL: u64 = 65536;
const MAX_PHYSICAL: u64 = 1 << 31;

/// What blkalign needs of IDENTIFY DEVICE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identify {
    /// Words 27-46.
    pub model: String,
    /// Words 10-19.
    pub serial: String,
    /// Words 23-26.
    pub firmware: String,
    /// 512 unless word 106 is valid with bit 12 set: then words 117-118.
    pub logical_sector_size: u64,
    /// None when word 106 is not valid (bits 15:14 not 01b).
    pub physical_sector_size: Option<u64>,
    /// The lowest LBA that starts a physical sector, from word 209.
    ///
    /// Word 209 bits 13:0 are the offset of LBA 0 inside the first physical
    /// sector, so the lowest aligned LBA is `(ratio - first) % ratio`. None
    /// when word 209 is not valid or there is one logical sector per
    /// physical one. The kernel (include/linux/ata.h,
    /// `ata_id_logical_sector_offset`) masks 0x3FFF as we do, but only
    /// uses word 209 when log2 of the ratio is above 1 (4 or more logical
    /// sectors per physical one); hdparm masks 0x1FFF.
    pub lowest_aligned_lba: Option<u64>,
    /// Word 209 as read, when valid: with bit 13 set hdparm's 0x1FFF mask
    /// reads another offset than ours.
    pub word_209: Option<u16>,
    /// Word 217; None when not reported or reserved.
    pub rotation: Option<Rotation>,
}

/// Word 217, nominal media rotation rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rotation {
    NonRotating,
    Rpm(u16),
}

/// Parse IDENTIFY DEVICE data (at least 512 bytes; more are ignored).
pub fn parse_identify(data: &[u8]) -> Result<Identify, ParseError> {
    let raw = data.first_chunk::<LEN>().ok_or(ParseError::Short {
        what: WHAT,
        got: data.len(),
        need: LEN,
    })?;
    check_sum(raw)?;
    let words = words(raw);
    let sizes = sector_sizes(&words)?;
    let w209 = valid(words[ALIGNMENT]).then_some(words[ALIGNMENT]);
    Ok(Identify {
        model: ata_string(&words[27..47]),
        serial: ata_string(&words[10..20]),
        firmware: ata_string(&words[23..27]),
        logical_sector_size: sizes.logical,
        physical_sector_size: sizes.physical,
        lowest_aligned_lba: lowest_aligned(w209, sizes.ratio)?,
        word_209: w209,
        rotation: rotation(words[ROTATION]),
    })
}

fn invalid(reason: String) -> ParseError {
    ParseError::Invalid { what: WHAT, reason }
}

fn words(raw: &[u8; LEN]) -> [u16; LEN / 2] {
    let mut words = [0u16; LEN / 2];
    for (word, pair) in words.iter_mut().zip(raw.chunks_exact(2)) {
        *word = u16::from_le_bytes([pair[0], pair[1]]);
    }
    words
}

/// Words 106 and 209 (and others) carry their own validity: bits 15:14 = 01b.
fn valid(word: u16) -> bool {
    word & 0xC000 == 0x4000
}

/// With the signature in word 255, all 512 bytes sum to 0 mod 256.
fn check_sum(raw: &[u8; LEN]) -> Result<(), ParseError> {
    if raw[510] != CHECKSUM_SIGNATURE {
        return Ok(());
    }
    // Modular on purpose: the standard's checksum is the byte sum mod 256.
    let sum = raw.iter().fold(0u8, |sum, b| sum.wrapping_add(*b));
    if sum != 0 {
        return Err(invalid(format!("checksum: the 512 bytes sum to {sum:#04x} mod 256, not 0")));
    }
    Ok(())
}

/// ATA strings hold two characters a word, the first in the high byte.
fn ata_string(words: &[u16]) -> String {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
    super::scsi::text(&bytes)
}

struct Sizes {
    logical: u64,
    physical: Option<u64>,
    /// Logical sectors per physical sector (1 when not reported).
    ratio: u64,
}

fn sector_sizes(words: &[u16; LEN / 2]) -> Result<Sizes, ParseError> {
    let w106 = words[SECTOR_SIZE];
    if !valid(w106) {
        return Ok(Sizes { logical: MIN_LOGICAL, physical: None, ratio: 1 });
    }
    let logical = if w106 & LONG_LOGICAL != 0 {
        long_logical(words[LOGICAL_SIZE_LO], words[LOGICAL_SIZE_HI])?
    } else {
        MIN_LOGICAL
    };
    // Bits 3:0 mean nothing unless bit 13 says the sizes differ.
    let exponent = if w106 & MULTIPLE_LOGICAL != 0 { w106 & PER_PHYSICAL_LOG2 } else { 0 };
    let ratio = 1u64 << exponent;
    let physical = logical.checked_mul(ratio).filter(|p| *p <= MAX_PHYSICAL).ok_or_else(|| {
        invalid(format!(
            "word 106 gives {logical}-byte logical sectors, 2^{exponent} to a physical \
             sector: more than 2^31 bytes"
        ))
    })?;
    Ok(Sizes { logical, physical: Some(physical), ratio })
}

/// Words 117-118 count 16-bit words, not bytes.
fn long_logical(lo: u16, hi: u16) -> Result<u64, ParseError> {
    let count = u64::from(lo) | (u64::from(hi) << 16);
    let bytes = count.saturating_mul(2);
    if !bytes.is_power_of_two() || !(MIN_LOGICAL..=MAX_LOGICAL).contains(&bytes) {
        return Err(invalid(format!(
            "words 117-118 give a logical sector of {count} words ({bytes} bytes), not a \
             power of two from 512 to 65536 bytes"
        )));
    }
    Ok(bytes)
}

fn lowest_aligned(w209: Option<u16>, ratio: u64) -> Result<Option<u64>, ParseError> {
    let Some(word) = w209 else { return Ok(None) };
    if ratio == 1 {
        return Ok(None);
    }
    let first = u64::from(word & FIRST_OFFSET);
    let to_boundary = ratio.checked_sub(first).filter(|n| *n > 0).ok_or_else(|| {
        invalid(format!(
            "word 209 ({word:#06x}) says LBA 0 is logical sector {first} of its physical \
             sector, which holds {ratio}"
        ))
    })?;
    Ok(Some(to_boundary % ratio))
}

fn rotation(word: u16) -> Option<Rotation> {
    match word {
        1 => Some(Rotation::NonRotating),
        0x0401..=0xFFFE => Some(Rotation::Rpm(word)),
        // 0 is "not reported"; 2..=0x400 and 0xFFFF are reserved.
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// IDENTIFY DEVICE data built word by word.
    #[derive(Clone)]
    struct Page([u16; 256]);

    impl Page {
        /// A 512e drive's answer with its strings, without a checksum.
        fn new() -> Page {
            Page([0; 256])
                .text(27, 20, "WDC WD20EARS-00MVWB0")
                .text(10, 10, "WD-WCAZA1234567")
                .text(23, 4, "51.0AB51")
        }

        fn word(mut self, n: usize, value: u16) -> Page {
            self.0[n] = value;
            self
        }

        /// An ATA string of `len` words at word `at`, space-padded.
        fn text(mut self, at: usize, len: usize, s: &str) -> Page {
            let mut bytes = s.as_bytes().to_vec();
            bytes.resize(len * 2, b' ');
            for (i, pair) in bytes.chunks_exact(2).enumerate() {
                self.0[at + i] = u16::from_be_bytes([pair[0], pair[1]]);
            }
            self
        }

        fn bytes(&self) -> Vec<u8> {
            self.0.iter().flat_map(|w| w.to_le_bytes()).collect()
        }

        /// With the 0xA5 signature and the checksum that makes the sum 0.
        fn sealed(&self) -> Vec<u8> {
            let mut bytes = self.bytes();
            bytes[510] = CHECKSUM_SIGNATURE;
            bytes[511] = 0;
            let sum = bytes.iter().fold(0u8, |s, b| s.wrapping_add(*b));
            bytes[511] = sum.wrapping_neg();
            bytes
        }

        fn parse(&self) -> Result<Identify, ParseError> {
            parse_identify(&self.sealed())
        }
    }

    fn reason(err: ParseError) -> String {
        match err {
            ParseError::Invalid { reason, .. } => reason,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn strings_are_byte_swapped_and_trimmed() {
        let id = Page::new().parse().unwrap();
        assert_eq!(id.model, "WDC WD20EARS-00MVWB0");
        assert_eq!(id.serial, "WD-WCAZA1234567");
        assert_eq!(id.firmware, "51.0AB51");
    }

    #[test]
    fn odd_and_unprintable_strings() {
        let page = Page::new().text(27, 20, "  QEMU HARDDISK").text(23, 4, "2.5+\u{7f}");
        let id = page.parse().unwrap();
        assert_eq!(id.model, "QEMU HARDDISK");
        assert_eq!(id.firmware, "2.5+?");
        // A NUL-padded serial (seen on USB bridges) is trimmed too.
        let mut page = Page::new().text(10, 10, "AB");
        for w in 11..20 {
            page = page.word(w, 0);
        }
        assert_eq!(page.parse().unwrap().serial, "AB");
    }

    #[test]
    fn word_106_not_valid_means_no_physical_size() {
        for w106 in [0x0000, 0x6003 & 0x3FFF, 0x8000 | 0x2003, 0xC000 | 0x2003, 0xFFFF] {
            let id = Page::new().word(106, w106).word(209, 0x4001).parse().unwrap();
            assert_eq!(id.logical_sector_size, 512, "{w106:#x}");
            assert_eq!(id.physical_sector_size, None, "{w106:#x}");
            assert_eq!(id.lowest_aligned_lba, None, "{w106:#x}");
        }
    }

    #[test]
    fn emulated_512() {
        let id = Page::new().word(106, 0x6003).parse().unwrap();
        assert_eq!(id.logical_sector_size, 512);
        assert_eq!(id.physical_sector_size, Some(4096));
        assert_eq!(id.lowest_aligned_lba, None);
        assert_eq!(id.word_209, None);
    }

    #[test]
    fn ratio_bits_mean_nothing_without_bit_13() {
        let id = Page::new().word(106, 0x4003).word(209, 0x4001).parse().unwrap();
        assert_eq!(id.physical_sector_size, Some(512));
        assert_eq!(id.lowest_aligned_lba, None);
        assert_eq!(id.word_209, Some(0x4001));
    }

    #[test]
    fn native_4k_long_logical_sectors() {
        let page = Page::new().word(106, 0x5000).word(117, 2048).word(118, 0);
        let id = page.clone().parse().unwrap();
        assert_eq!(id.logical_sector_size, 4096);
        assert_eq!(id.physical_sector_size, Some(4096));
        // 64 KiB logical (32768 words, high word 0) in 2^15 per physical: 2^31.
        let id = page.word(106, 0x700F).word(117, 0x8000).parse().unwrap();
        assert_eq!(id.logical_sector_size, 65536);
        assert_eq!(id.physical_sector_size, Some(1 << 31));
    }

    #[test]
    fn long_logical_sizes_that_are_not_powers_of_two_are_refused() {
        // 260 words = 520 bytes; 0; 128 bytes; 2^17 bytes (high word 1).
        for (lo, hi) in [(260, 0), (0, 0), (64, 0), (0, 1), (0xFFFF, 0xFFFF)] {
            let err = Page::new().word(106, 0x5000).word(117, lo).word(118, hi).parse();
            assert!(reason(err.unwrap_err()).contains("words 117-118"), "{lo} {hi}");
        }
    }

    #[test]
    fn word_209_offsets() {
        for first in 1..=7u16 {
            let id = Page::new().word(106, 0x6003).word(209, 0x4000 | first).parse().unwrap();
            assert_eq!(id.lowest_aligned_lba, Some(8 - u64::from(first)), "offset {first}");
            assert_eq!(id.word_209, Some(0x4000 | first));
        }
        let id = Page::new().word(106, 0x6003).word(209, 0x4000).parse().unwrap();
        assert_eq!(id.lowest_aligned_lba, Some(0));
        // Two logical per physical: the kernel ignores word 209 there, we do not.
        let id = Page::new().word(106, 0x6001).word(209, 0x4001).parse().unwrap();
        assert_eq!(id.lowest_aligned_lba, Some(1));
    }

    #[test]
    fn word_209_not_valid() {
        for w209 in [0x0001, 0x8001, 0xC001] {
            let id = Page::new().word(106, 0x6003).word(209, w209).parse().unwrap();
            assert_eq!(id.lowest_aligned_lba, None, "{w209:#x}");
            assert_eq!(id.word_209, None, "{w209:#x}");
        }
    }

    #[test]
    fn an_offset_past_the_physical_sector_is_refused() {
        // 8 in a ratio of 8; bit 13 (hdparm would mask it away) makes 8193.
        for w209 in [0x4008, 0x4000 | 0x2001, 0x7FFF] {
            let err = Page::new().word(106, 0x6003).word(209, w209).parse().unwrap_err();
            assert!(reason(err).contains("word 209"), "{w209:#x}");
        }
    }

    #[test]
    fn checksum() {
        let page = Page::new().word(106, 0x6003);
        assert!(page.parse().is_ok());
        let mut bad = page.sealed();
        bad[100] ^= 0x10;
        assert!(reason(parse_identify(&bad).unwrap_err()).contains("checksum"));
        // No signature: no checksum to check.
        let mut unsigned = page.bytes();
        unsigned[511] = 0x5A;
        assert!(parse_identify(&unsigned).is_ok());
    }

    #[test]
    fn rotation_rate() {
        let rate = |w| Page::new().word(217, w).parse().unwrap().rotation;
        assert_eq!(rate(0), None);
        assert_eq!(rate(1), Some(Rotation::NonRotating));
        assert_eq!(rate(2), None);
        assert_eq!(rate(0x0400), None);
        assert_eq!(rate(0x0401), Some(Rotation::Rpm(0x0401)));
        assert_eq!(rate(5400), Some(Rotation::Rpm(5400)));
        assert_eq!(rate(0xFFFE), Some(Rotation::Rpm(0xFFFE)));
        assert_eq!(rate(0xFFFF), None);
    }

    #[test]
    fn every_prefix_is_short() {
        let bytes = Page::new().word(106, 0x6003).word(209, 0x4001).sealed();
        assert!(parse_identify(&bytes).is_ok());
        for n in 0..bytes.len() {
            let err = parse_identify(&bytes[..n]).unwrap_err();
            assert_eq!(err, ParseError::Short { what: WHAT, got: n, need: LEN });
        }
        // A longer buffer (an ioctl's) is fine.
        let mut longer = bytes.clone();
        longer.extend([0xFF; 4]);
        assert!(parse_identify(&longer).is_ok());
    }

    proptest! {
        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = parse_identify(&data);
        }

        #[test]
        fn any_sector_words_parse_or_are_refused(w106: u16, lo: u16, hi: u16, w209: u16) {
            let page = Page::new().word(106, w106).word(117, lo).word(118, hi).word(209, w209);
            if let Ok(id) = page.parse() {
                let physical = id.physical_sector_size.unwrap_or(id.logical_sector_size);
                let ratio = physical / id.logical_sector_size;
                prop_assert!(id.lowest_aligned_lba.is_none_or(|l| l < ratio));
            }
        }
    }
}
