//! What reading a table yields: the layout, its partitions and the
//! problems seen.

use crate::stack::Contents;
use serde::Serialize;

/// Which kind of table a target holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Label {
    Mbr,
    Gpt,
    /// BSD disklabel on the whole disk (partitions nested in an MBR slice
    /// keep the MBR label).
    Bsd,
    Sun,
    /// SGI disk volume header.
    Sgi,
    /// Apple partition map.
    Mac,
    /// Amiga Rigid Disk Block.
    Amiga,
    /// Atari AHDI root sector (with XGM chains or ICD entries).
    Atari,
    /// A scheme we recognise but do not audit (`Layout::scheme` names it).
    Unsupported,
    None,
}

/// What role a partition plays in its table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PartKind {
    /// An MBR primary partition.
    Primary,
    /// The MBR extended container holding the EBR chain.
    Extended,
    /// An MBR logical partition (numbered from 5).
    Logical,
    /// A GPT entry.
    Gpt,
    /// A BSD disklabel partition, alone or nested in an MBR slice.
    Bsd,
    Sun,
    Sgi,
    /// An Apple partition map entry.
    Mac,
    /// An Amiga RDB partition block.
    Amiga,
    /// An Atari AHDI, XGM or ICD entry.
    Atari,
    /// Known only from the kernel's view (the table could not be read).
    Unknown,
}

/// One partition, in logical sectors of the table's sector size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Partition {
    /// As the kernel numbers it: MBR primaries 1-4 by slot, logicals from 5
    /// in chain order, GPT by entry slot (1-based).
    pub number: u32,
    pub start: u64,
    pub size: u64,
    pub kind: PartKind,
    /// MBR type as "0x83", or the GPT type GUID in upper case.
    pub type_id: String,
    /// GPT partition name, when non-empty.
    pub name: Option<String>,
    /// For logical partitions: LBA of the EBR that describes it.
    pub ebr: Option<u64>,
}

/// How much a problem matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; nothing is wrong.
    Info,
    /// Something to fix, but every partition is where the table says.
    Warning,
    /// Data is unreachable or not where the table says, for Linux or for
    /// the table's own rules: counts toward exit code 1.
    Error,
}

impl Severity {
    /// The severity of each problem code; codes not listed are warnings.
    pub fn of(code: &str) -> Severity {
        match code {
            "beyond_end"
            | "overlap"
            | "logical_outside_extended"
            | "ebr_loop"
            | "ebr_link_outside"
            | "ebr_beyond_end"
            | "ebr_bad_signature"
            | "ebr_unreadable"
            | "ebr_chain_too_long"
            | "gpt_without_protective_mbr"
            | "pmbr_bad_start"
            | "gpt_primary_invalid"
            | "gpt_ignored_by_linux"
            | "gpt_entry_size"
            | "gpt_entry_inverted"
            | "position_overflow"
            | "label_bad_checksum"
            | "kernel_reads_boot_code"
            | "start_not_whole_sector"
            | "label_ignored_by_linux"
            | "bsd_outside_slice"
            | "bsd_unreadable"
            | "rdb_unreadable"
            | "rdb_loop"
            | "rdb_chain_too_long"
            | "rdb_partition_skipped"
            | "rdb_geometry_overflow"
            | "rdb_partition_inverted"
            | "atari_xgm_unreadable"
            | "atari_xgm_broken"
            | "atari_xgm_loop"
            | "atari_too_many"
            | "realign_unfinished"
            | "table_sector_size" => Severity::Error,
            "hybrid_iso" | "iso_nested" | "too_small" | "libblkid_differs" => Severity::Info,
            _ => Severity::Warning,
        }
    }
}

/// Something wrong or noteworthy found while reading a table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Stable, machine-readable, snake_case (e.g. "gpt_primary_header_crc").
    pub code: &'static str,
    pub severity: Severity,
    pub message: String,
}

impl Problem {
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self { code, severity: Severity::of(code), message: message.into() }
    }
}

/// GPT facts that matter for alignment and repair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GptInfo {
    /// LBA of the header the layout was taken from (1, or the backup's).
    pub header_lba: u64,
    /// LBA of the other header, as recorded.
    pub alternate_lba: u64,
    pub used_backup: bool,
    pub first_usable_lba: u64,
    pub last_usable_lba: u64,
    pub entries_lba: u64,
    pub entry_count: u32,
    pub entry_size: u32,
    pub disk_guid: String,
}

/// MBR facts that matter for alignment and repair.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MbrInfo {
    pub disk_signature: u32,
    /// A single 0xEE entry guarding a GPT.
    pub protective: bool,
    /// 0xEE beside other entries: a hybrid MBR.
    pub hybrid: bool,
    /// EBR LBAs in chain order.
    pub ebrs: Vec<u64>,
}

/// A table as read from a disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Layout {
    pub label: Label,
    pub sector_size: u64,
    pub partitions: Vec<Partition>,
    pub problems: Vec<Problem>,
    pub gpt: Option<GptInfo>,
    pub mbr: Option<MbrInfo>,
    /// For `Label::Unsupported`: the scheme found, as libblkid or the
    /// kernel names it ("aix", "ultrix", ...).
    pub scheme: Option<&'static str>,
    /// For `Label::None`: the file system (or other contents) that starts
    /// at byte 0 of the whole disk.
    pub contents: Option<Contents>,
}

impl Layout {
    /// A disk with no table, before anything is read.
    pub fn blank(sector_size: u64) -> Layout {
        Layout {
            label: Label::None,
            sector_size,
            partitions: Vec::new(),
            problems: Vec::new(),
            gpt: None,
            mbr: None,
            scheme: None,
            contents: None,
        }
    }

    /// Byte ranges no partition claims: the gaps between partitions and
    /// after the last, up to the last usable LBA. Space before the first
    /// partition is never free (boot loaders live there), nor is an extended
    /// partition (EBRs live there). A disk without a table has none: it may
    /// hold a file system directly.
    pub fn free_ranges(&self, size_bytes: u64) -> Vec<std::ops::Range<u64>> {
        let ss = self.sector_size;
        let end = match &self.gpt {
            Some(g) => g.last_usable_lba.saturating_add(1).saturating_mul(ss).min(size_bytes),
            None => size_bytes,
        };
        let mut used: Vec<(u64, u64)> = self
            .partitions
            .iter()
            .map(|p| {
                (p.start.saturating_mul(ss), p.start.saturating_add(p.size).saturating_mul(ss))
            })
            .collect();
        used.sort_unstable();
        let mut free = Vec::new();
        let Some(&(_, mut cursor)) = used.first() else { return free };
        for &(start, stop) in &used[1..] {
            if start > cursor {
                free.push(cursor..start);
            }
            cursor = cursor.max(stop);
        }
        if end > cursor {
            free.push(cursor..end);
        }
        free
    }
}
