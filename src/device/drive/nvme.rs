//! NVMe Identify Namespace (CNS 00h), as the NVM Command Set
//! specification 1.0 lays it out beside the base specification 2.0
//! (little-endian). The kernel's physical block size for an NVMe disk is
//! the namespace's preferred write granularity (NPWG) when the namespace
//! reports one, else its atomic write unit, else the logical block: the
//! fields it chose from are kept here, with every LBA format the namespace
//! could be formatted with and how fast the drive says each one is.

use super::error::ParseError;

const WHAT: &str = "NVMe Identify Namespace";
/// Everything up to the end of the 64-entry LBA format table; the
/// structure is 4096 bytes, the rest is not read.
const HEAD: usize = 384;

// Byte offsets (NVM Command Set 1.0, Identify Namespace data structure).
const NSZE: usize = 0;
const NSFEAT: usize = 24;
const NLBAF: usize = 25;
const FLBAS: usize = 26;
const NAWUPF: usize = 36;
const NABO: usize = 42;
const NABSPF: usize = 44;
const NPWG: usize = 64;
const NPWA: usize = 66;
const NPDG: usize = 68;
const NPDA: usize = 70;
const NOWS: usize = 72;
const LBAF: usize = 128;

/// NSFEAT bit 1: NAWUN, NAWUPF and NACWU are this namespace's own.
const NSABP: u8 = 1 << 1;
/// NSFEAT bit 4 (OPTPERF in 2.0): NPWG, NPWA, NPDG, NPDA and NOWS are defined.
const OPTPERF: u8 = 1 << 4;
/// NSFEAT bit 5: NVM Command Set 1.1 widened OPTPERF to bits 5:4, bit 5
/// meaning NPWG, NPWA, NPDA and NOWS are defined beside the long NPDGL.
const OPTPERF_LONG: u8 = 1 << 5;
/// NLBAF is 0's based: 64 formats at most.
const MAX_NLBAF: u8 = 63;
/// FLBAS bits 6:5 are the index's bits 5:4 only when NLBAF exceeds 16.
const NLBAF_WITHOUT_UPPER_BITS: u8 = 16;
/// LBADS below 9 (512 bytes) marks a format as not supported.
const MIN_LBADS: u8 = 9;
const MAX_LBADS: u8 = 31;

/// One entry of the LBA format table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LbaFormat {
    /// Its place in the table, as Format NVM and FLBAS name it.
    pub index: u8,
    /// `1 << LBADS` (bits 23:16).
    pub data_size: u64,
    /// MS, bits 15:0: metadata bytes per block.
    pub metadata_size: u16,
    /// RP, bits 25:24: 0 best, 1 better, 2 good, 3 degraded.
    pub relative_performance: u8,
}

impl LbaFormat {
    pub fn performance_name(&self) -> &'static str {
        match self.relative_performance {
            0 => "best",
            1 => "better",
            2 => "good",
            _ => "degraded",
        }
    }
}

/// What blkalign needs of Identify Namespace. Sizes other than the
/// formats' are in logical blocks of the format in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdNamespace {
    /// NSZE.
    pub size_blocks: u64,
    /// The supported formats among the NLBAF + 1 entries; those with LBADS
    /// below 9 are left out (their indexes are not reused).
    pub formats: Vec<LbaFormat>,
    /// FLBAS bits 3:0, with bits 6:5 above them when NLBAF is over 16.
    pub format_in_use: u8,
    /// NSFEAT OPTPERF (bit 4; bits 5:4 since NVM Command Set 1.1).
    pub optperf: bool,
    /// NSFEAT bit 1 (NSABP).
    pub atomic_params: bool,
    /// Preferred write granularity (NPWG + 1); only with OPTPERF.
    pub npwg: Option<u64>,
    /// Preferred write alignment (NPWA + 1); only with OPTPERF.
    pub npwa: Option<u64>,
    /// Preferred deallocate granularity (NPDG + 1); only with OPTPERF bit 4
    /// (with bit 5 alone the long NPDGL replaces it).
    pub npdg: Option<u64>,
    /// Preferred deallocate alignment (NPDA + 1); only with OPTPERF.
    pub npda: Option<u64>,
    /// Optimal write size (NOWS + 1); only with OPTPERF.
    pub nows: Option<u64>,
    /// Atomic write unit power fail (NAWUPF + 1); only with NSABP. The
    /// kernel reads 0 as "use the controller's AWUPF" rather than one block.
    pub nawupf: Option<u64>,
    /// Atomic boundary offset (NABO, an LBA, not 0's based); only when
    /// there is a power-fail boundary.
    pub nabo: Option<u64>,
    /// Atomic boundary size power fail (NABSPF + 1); only with NSABP, and
    /// None when 0 ("no atomic boundaries").
    pub nabspf: Option<u64>,
}

impl IdNamespace {
    /// The format the namespace is formatted with; None for an inactive
    /// namespace (all zeros) or one formatted with an unsupported format.
    pub fn in_use(&self) -> Option<&LbaFormat> {
        self.formats.iter().find(|f| f.index == self.format_in_use)
    }

    pub fn logical_sector_size(&self) -> Option<u64> {
        self.in_use().map(|f| f.data_size)
    }

    /// Preferred write granularity in bytes (NPWG blocks of the format in use).
    pub fn preferred_write_bytes(&self) -> Option<u64> {
        self.npwg?.checked_mul(self.logical_sector_size()?)
    }
}

/// What blkalign reads of Identify Controller (CNS 01h, base specification
/// 2.0 figure 275): who made the drive and what it is, as `nvme id-ctrl`
/// prints them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct IdController {
    /// VID, bytes 1:0: the PCI vendor ID.
    pub vendor_id: u16,
    /// SN, bytes 23:4, ASCII, space-padded.
    pub serial: String,
    /// MN, bytes 63:24.
    pub model: String,
    /// FR, bytes 71:64.
    pub firmware: String,
}

const CONTROLLER: &str = "NVMe Identify Controller";
/// Through FR; the structure is 4096 bytes.
const CONTROLLER_HEAD: usize = 72;

/// Parse the Identify Controller data structure (at least its first 72
/// bytes).
pub(crate) fn parse_id_ctrl(data: &[u8]) -> Result<IdController, ParseError> {
    let b: &[u8; CONTROLLER_HEAD] = data.first_chunk().ok_or(ParseError::Short {
        what: CONTROLLER,
        got: data.len(),
        need: CONTROLLER_HEAD,
    })?;
    Ok(IdController {
        vendor_id: u16::from_le_bytes([b[0], b[1]]),
        serial: super::scsi::text(&b[4..24]),
        model: super::scsi::text(&b[24..64]),
        firmware: super::scsi::text(&b[64..72]),
    })
}

/// Parse the Identify Namespace data structure (at least its first 384
/// bytes, through the LBA format table).
pub fn parse_id_ns(data: &[u8]) -> Result<IdNamespace, ParseError> {
    let b: &[u8; HEAD] =
        data.first_chunk().ok_or(ParseError::Short { what: WHAT, got: data.len(), need: HEAD })?;
    let nlbaf = b[NLBAF];
    if nlbaf > MAX_NLBAF {
        return Err(invalid(format!("NLBAF {nlbaf}: more than 64 LBA formats")));
    }
    let formats = formats(b, nlbaf)?;
    let format_in_use = format_index(b[FLBAS], nlbaf);
    if format_in_use > nlbaf {
        return Err(invalid(format!(
            "FLBAS {:#04x} names LBA format {format_in_use}, past the last one ({nlbaf})",
            b[FLBAS]
        )));
    }
    let nsfeat = b[NSFEAT];
    let optperf = nsfeat & (OPTPERF | OPTPERF_LONG) != 0;
    let atomic_params = nsfeat & NSABP != 0;
    let preferred = |at| optperf.then(|| zeros_based(le16(b, at)));
    let nabspf = (atomic_params && le16(b, NABSPF) != 0).then(|| zeros_based(le16(b, NABSPF)));
    Ok(IdNamespace {
        size_blocks: le64(b, NSZE),
        formats,
        format_in_use,
        optperf,
        atomic_params,
        npwg: preferred(NPWG),
        npwa: preferred(NPWA),
        npdg: (nsfeat & OPTPERF != 0).then(|| zeros_based(le16(b, NPDG))),
        npda: preferred(NPDA),
        nows: preferred(NOWS),
        nawupf: atomic_params.then(|| zeros_based(le16(b, NAWUPF))),
        nabo: nabspf.map(|_| u64::from(le16(b, NABO))),
        nabspf,
    })
}

fn invalid(reason: String) -> ParseError {
    ParseError::Invalid { what: WHAT, reason }
}

/// A little-endian u16 at a constant offset inside `HEAD`.
fn le16(b: &[u8; HEAD], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// A little-endian u64 at a constant offset inside `HEAD`.
fn le64(b: &[u8; HEAD], at: usize) -> u64 {
    u64::from_le_bytes(std::array::from_fn(|i| b[at + i]))
}

/// A count stored minus one: cannot overflow from 16 bits.
fn zeros_based(value: u16) -> u64 {
    u64::from(value) + 1
}

/// The NLBAF + 1 entries at byte 128, 4 bytes each: MS (bits 15:0),
/// LBADS (23:16), RP (25:24).
fn formats(b: &[u8; HEAD], nlbaf: u8) -> Result<Vec<LbaFormat>, ParseError> {
    let table = b.get(LBAF..).unwrap_or_default();
    let mut formats = Vec::new();
    for (index, entry) in (0..=nlbaf).zip(table.chunks_exact(4)) {
        let &[ms_lo, ms_hi, lbads, rp] = entry else { continue };
        if lbads < MIN_LBADS {
            continue;
        }
        if lbads > MAX_LBADS {
            return Err(invalid(format!("LBA format {index}: LBADS {lbads}, over 31")));
        }
        formats.push(LbaFormat {
            index,
            data_size: 1u64 << lbads,
            metadata_size: u16::from_le_bytes([ms_lo, ms_hi]),
            relative_performance: rp & 0x03,
        });
    }
    Ok(formats)
}

/// FLBAS bits 3:0, and bits 6:5 as the index's bits 5:4 when NLBAF is over
/// 16 (the specification has the host ignore them otherwise).
fn format_index(flbas: u8, nlbaf: u8) -> u8 {
    let low = flbas & 0x0F;
    if nlbaf > NLBAF_WITHOUT_UPPER_BITS {
        low | ((flbas & 0x60) >> 1)
    } else {
        low
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// QEMU's emulated namespace: 512 and 4096 with 0, 8, 16, 64 bytes of metadata.
    const QEMU: [(u8, u16, u8); 8] = [
        (9, 0, 0),
        (9, 8, 0),
        (9, 16, 0),
        (9, 64, 0),
        (12, 0, 0),
        (12, 8, 0),
        (12, 16, 0),
        (12, 64, 0),
    ];

    /// An Identify Namespace structure built field by field.
    #[derive(Clone)]
    struct Ns(Vec<u8>);

    impl Ns {
        /// A namespace of 2^21 blocks with these (LBADS, MS, RP) formats.
        fn new(formats: &[(u8, u16, u8)]) -> Ns {
            let mut b = vec![0u8; 4096];
            b[NSZE..NSZE + 8].copy_from_slice(&(1u64 << 21).to_le_bytes());
            b[NLBAF] = u8::try_from(formats.len()).unwrap().saturating_sub(1);
            for (i, &(lbads, ms, rp)) in formats.iter().enumerate() {
                let at = LBAF + 4 * i;
                b[at..at + 2].copy_from_slice(&ms.to_le_bytes());
                b[at + 2] = lbads;
                b[at + 3] = rp;
            }
            Ns(b)
        }

        fn byte(mut self, at: usize, value: u8) -> Ns {
            self.0[at] = value;
            self
        }

        fn word(mut self, at: usize, value: u16) -> Ns {
            self.0[at..at + 2].copy_from_slice(&value.to_le_bytes());
            self
        }

        fn parse(&self) -> Result<IdNamespace, ParseError> {
            parse_id_ns(&self.0)
        }
    }

    fn reason(err: ParseError) -> String {
        match err {
            ParseError::Invalid { reason, .. } => reason,
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn qemu_formats() {
        let ns = Ns::new(&QEMU).parse().unwrap();
        assert_eq!(ns.size_blocks, 1 << 21);
        let sizes: Vec<(u8, u64, u16)> =
            ns.formats.iter().map(|f| (f.index, f.data_size, f.metadata_size)).collect();
        assert_eq!(
            sizes,
            [
                (0, 512, 0),
                (1, 512, 8),
                (2, 512, 16),
                (3, 512, 64),
                (4, 4096, 0),
                (5, 4096, 8),
                (6, 4096, 16),
                (7, 4096, 64)
            ]
        );
        assert_eq!(ns.format_in_use, 0);
        assert_eq!(ns.in_use().map(|f| f.index), Some(0));
        assert_eq!(ns.logical_sector_size(), Some(512));
        let ns = Ns::new(&QEMU).byte(FLBAS, 4 | 0x10).parse().unwrap();
        assert_eq!(ns.logical_sector_size(), Some(4096));
    }

    #[test]
    fn without_optperf_no_preferred_sizes() {
        let ns = Ns::new(&QEMU).word(NPWG, 7).word(NOWS, 31).parse().unwrap();
        assert!(!ns.optperf);
        assert_eq!((ns.npwg, ns.npwa, ns.npdg, ns.npda, ns.nows), (None, None, None, None, None));
        assert_eq!(ns.preferred_write_bytes(), None);
    }

    #[test]
    fn optperf_preferred_sizes() {
        let ns = Ns::new(&QEMU)
            .byte(NSFEAT, OPTPERF)
            .word(NPWG, 7)
            .word(NPWA, 7)
            .word(NPDG, 255)
            .word(NPDA, 255)
            .word(NOWS, 31)
            .parse()
            .unwrap();
        assert!(ns.optperf);
        assert_eq!(ns.npwg, Some(8));
        assert_eq!(ns.npwa, Some(8));
        assert_eq!(ns.npdg, Some(256));
        assert_eq!(ns.npda, Some(256));
        assert_eq!(ns.nows, Some(32));
        assert_eq!(ns.preferred_write_bytes(), Some(4096));
        // 0's based: 0 is one block.
        let ns = Ns::new(&QEMU).byte(NSFEAT, OPTPERF).parse().unwrap();
        assert_eq!(ns.npwg, Some(1));
        assert_eq!(ns.preferred_write_bytes(), Some(512));
    }

    #[test]
    fn optperf_bit_5_alone_has_no_short_npdg() {
        let ns = Ns::new(&QEMU).byte(NSFEAT, OPTPERF_LONG).word(NPWG, 7).parse().unwrap();
        assert!(ns.optperf);
        assert_eq!(ns.npwg, Some(8));
        assert_eq!(ns.npdg, None);
    }

    #[test]
    fn a_faster_format_than_the_one_in_use() {
        // A consumer drive formatted 512 ("good") that is "better" at 4096.
        let ns = Ns::new(&[(9, 0, 2), (12, 0, 1)]).parse().unwrap();
        let in_use = ns.in_use().unwrap();
        assert_eq!((in_use.data_size, in_use.performance_name()), (512, "good"));
        let better =
            ns.formats.iter().find(|f| f.relative_performance < in_use.relative_performance);
        assert_eq!(
            better.map(|f| (f.index, f.data_size, f.performance_name())),
            Some((1, 4096, "better"))
        );
        let names: Vec<&str> = (0..4)
            .map(|rp| LbaFormat {
                index: 0,
                data_size: 512,
                metadata_size: 0,
                relative_performance: rp,
            })
            .map(|f| f.performance_name())
            .collect();
        assert_eq!(names, ["best", "better", "good", "degraded"]);
        // Bits above RP are reserved.
        let ns = Ns::new(&[(9, 0, 0xFE)]).parse().unwrap();
        assert_eq!(ns.formats[0].relative_performance, 2);
    }

    #[test]
    fn unsupported_formats_keep_the_numbering() {
        let ns =
            Ns::new(&[(9, 0, 0), (0, 0, 0), (8, 0, 0), (12, 0, 0)]).byte(FLBAS, 3).parse().unwrap();
        let indexes: Vec<u8> = ns.formats.iter().map(|f| f.index).collect();
        assert_eq!(indexes, [0, 3]);
        assert_eq!(ns.logical_sector_size(), Some(4096));
        // Formatted with a format it does not support: no size.
        let ns = Ns::new(&[(9, 0, 0), (0, 0, 0)]).byte(FLBAS, 1).parse().unwrap();
        assert_eq!(ns.in_use(), None);
        assert_eq!(ns.preferred_write_bytes(), None);
    }

    #[test]
    fn an_inactive_namespace_is_all_zeros() {
        let ns = parse_id_ns(&[0u8; 4096]).unwrap();
        assert!(ns.formats.is_empty());
        assert_eq!((ns.size_blocks, ns.logical_sector_size()), (0, None));
    }

    #[test]
    fn lbads_over_31_is_refused() {
        let err = Ns::new(&[(9, 0, 0), (32, 0, 0)]).parse().unwrap_err();
        assert!(reason(err).contains("LBADS 32"));
        // Past NLBAF the table is not read.
        let ns = Ns::new(&[(9, 0, 0), (32, 0, 0)]).byte(NLBAF, 0).parse().unwrap();
        assert_eq!(ns.formats.len(), 1);
        let ns = Ns::new(&[(31, 0, 0)]).parse().unwrap();
        assert_eq!(ns.logical_sector_size(), Some(1 << 31));
    }

    #[test]
    fn a_format_index_past_nlbaf_is_refused() {
        let err = Ns::new(&QEMU).byte(FLBAS, 8).parse().unwrap_err();
        assert!(reason(err).contains("LBA format 8"));
        let err = Ns::new(&[(9, 0, 0)]).byte(FLBAS, 0x0F).parse().unwrap_err();
        assert!(reason(err).contains("LBA format 15"));
    }

    #[test]
    fn more_than_64_formats_is_refused() {
        let err = Ns::new(&QEMU).byte(NLBAF, 64).parse().unwrap_err();
        assert!(reason(err).contains("NLBAF 64"));
    }

    #[test]
    fn flbas_upper_bits() {
        // 20 formats (NLBAF 19): index 18 is FLBAS 0x22 (bits 6:5 = 01, 3:0 = 2).
        let mut formats = vec![(9, 0, 0); 20];
        formats[18] = (12, 0, 0);
        let ns = Ns::new(&formats).byte(FLBAS, 0x22).parse().unwrap();
        assert_eq!(ns.format_in_use, 18);
        assert_eq!(ns.logical_sector_size(), Some(4096));
        // 64 formats: the highest index is 0x6F.
        let mut formats = vec![(9, 0, 0); 64];
        formats[63] = (12, 0, 0);
        let ns = Ns::new(&formats).byte(FLBAS, 0x6F).parse().unwrap();
        assert_eq!((ns.format_in_use, ns.logical_sector_size()), (63, Some(4096)));
        // With 16 formats or fewer the upper bits are ignored.
        let ns = Ns::new(&QEMU).byte(FLBAS, 0x64).parse().unwrap();
        assert_eq!((ns.format_in_use, ns.logical_sector_size()), (4, Some(4096)));
    }

    #[test]
    fn atomic_parameters() {
        let ns = Ns::new(&QEMU).word(NAWUPF, 7).word(NABSPF, 15).word(NABO, 2).parse().unwrap();
        assert!(!ns.atomic_params);
        assert_eq!((ns.nawupf, ns.nabo, ns.nabspf), (None, None, None));
        let ns = Ns::new(&QEMU)
            .byte(NSFEAT, NSABP)
            .word(NAWUPF, 7)
            .word(NABSPF, 15)
            .word(NABO, 2)
            .parse()
            .unwrap();
        assert!(ns.atomic_params);
        assert_eq!((ns.nawupf, ns.nabo, ns.nabspf), (Some(8), Some(2), Some(16)));
        // NABSPF 0: no boundaries, so no offset either.
        let ns = Ns::new(&QEMU).byte(NSFEAT, NSABP).word(NAWUPF, 7).parse().unwrap();
        assert_eq!((ns.nawupf, ns.nabo, ns.nabspf), (Some(8), None, None));
    }

    #[test]
    fn the_offsets_are_the_specifications() {
        // Each field alone, to catch a swapped offset.
        let ns = Ns::new(&QEMU).byte(NSFEAT, OPTPERF | NSABP);
        let ns = ns.word(34, 100).word(38, 101).word(40, 102).word(46, 103).word(74, 104);
        let ns = ns.word(NAWUPF, 1).word(NABO, 2).word(NABSPF, 3).word(NPWG, 4).word(NPWA, 5);
        let ns = ns.word(NPDG, 6).word(NPDA, 7).word(NOWS, 8).parse().unwrap();
        assert_eq!((ns.nawupf, ns.nabo, ns.nabspf), (Some(2), Some(2), Some(4)));
        assert_eq!(
            (ns.npwg, ns.npwa, ns.npdg, ns.npda, ns.nows),
            (Some(5), Some(6), Some(7), Some(8), Some(9))
        );
        assert_eq!((NAWUPF, NABO, NABSPF, NPWG, NOWS, LBAF), (36, 42, 44, 64, 72, 128));
    }

    #[test]
    fn every_prefix_is_short() {
        let full = Ns::new(&QEMU).byte(NSFEAT, OPTPERF | NSABP).word(NPWG, 7).0;
        assert!(parse_id_ns(&full).is_ok());
        assert!(parse_id_ns(&full[..HEAD]).is_ok());
        for n in 0..HEAD {
            let err = parse_id_ns(&full[..n]).unwrap_err();
            assert_eq!(err, ParseError::Short { what: WHAT, got: n, need: HEAD });
        }
    }

    #[test]
    fn identify_controller_strings() {
        let mut b = vec![b' '; 4096];
        b[..4].copy_from_slice(&[0x36, 0x1b, 0xf4, 0x1a]);
        b[4..8].copy_from_slice(b"nvme");
        b[24..38].copy_from_slice(b"QEMU NVMe Ctrl");
        b[64..69].copy_from_slice(b"7.2.0");
        let c = parse_id_ctrl(&b).unwrap();
        assert_eq!(c.vendor_id, 0x1b36);
        assert_eq!((c.serial.as_str(), c.model.as_str()), ("nvme", "QEMU NVMe Ctrl"));
        assert_eq!(c.firmware, "7.2.0");
        for n in 0..CONTROLLER_HEAD {
            let err = parse_id_ctrl(&b[..n]).unwrap_err();
            assert_eq!(err, ParseError::Short { what: CONTROLLER, got: n, need: CONTROLLER_HEAD });
        }
    }

    proptest! {
        #[test]
        fn never_panics(head in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_id_ctrl(&head);
            if let Ok(ns) = parse_id_ns(&head) {
                let _ = ns.preferred_write_bytes();
                prop_assert!(ns.formats.iter().all(|f| f.index <= MAX_NLBAF));
            }
        }
    }
}
