//! File systems, swap and ZFS vdevs: where their allocation grid starts
//! and how big its unit is, plus the fields a RAID or 4 KiB drive needs
//! (ext4 stride, XFS sector size and stripe unit, ZFS ashift).

use super::layers::{Details, Found, Layer};
use super::region::{Contents, Kind, Region};
use super::signature::{fat_bpb, swap_page};
use super::zfs;
use crate::io::{be_u16, be_u32};
use crate::io::{le_u16, le_u32};

/// The layer for `contents`, which holds no further layers.
pub(crate) fn found(region: &Region, contents: &Contents) -> Found {
    let parsed = match contents.kind {
        Kind::Ext => ext(region),
        Kind::Xfs => xfs(region),
        Kind::Btrfs => btrfs(region),
        Kind::Fat => fat(region),
        Kind::Exfat => exfat(region),
        Kind::Ntfs => ntfs(region),
        Kind::Swap => swap_page(region).map(|page| (0, page, Details::Swap { page_bytes: page })),
        Kind::Iso9660 => iso9660(region),
        Kind::Zfs => zfs(region),
        _ => None,
    };
    let layer = match parsed {
        Some((offset, unit, details)) => Layer::new(contents, offset, details).unit(Some(unit)),
        None => Layer::new(contents, 0, Details::None {}).note("header fields out of range"),
    };
    Found::leaf(layer.size(contents.size_bytes))
}

/// (data start in bytes, allocation unit in bytes, details)
type Parsed = Option<(u64, u64, Details)>;

fn ext(region: &Region) -> Parsed {
    let sb = region.bytes(1024, 1024)?;
    let log = le_u32(&sb, 24)?;
    let block = 1024u64.checked_shl(log).filter(|_| log <= 6)?;
    let set = |v: u64| (v > 0).then_some(v);
    let details = Details::Ext {
        block_bytes: block,
        stride_blocks: set(u64::from(le_u16(&sb, 0x164)?)),
        stripe_width_blocks: set(u64::from(le_u32(&sb, 0x170)?)),
    };
    Some((0, block, details))
}

/// XFS: big-endian; stripe unit and width in file-system blocks.
fn xfs(region: &Region) -> Parsed {
    let sb = region.bytes(0, 512)?;
    let block = u64::from(be_u32(&sb, 4)?);
    let details = Details::Xfs {
        sector_bytes: u64::from(be_u16(&sb, 102)?),
        block_bytes: block,
        sunit_blocks: u64::from(be_u32(&sb, 184)?),
        swidth_blocks: u64::from(be_u32(&sb, 188)?),
    };
    Some((0, block, details))
}

fn btrfs(region: &Region) -> Parsed {
    let sb = region.bytes(65536, 4096)?;
    let sector = u64::from(le_u32(&sb, 0x90)?);
    let details =
        Details::Btrfs { sector_bytes: sector, node_bytes: u64::from(le_u32(&sb, 0x94)?) };
    Some((0, sector, details))
}

/// FAT: clusters start after the reserved sectors, the FATs and (FAT12/16)
/// the root directory.
fn fat(region: &Region) -> Parsed {
    let bpb = fat_bpb(&region.bytes(0, 512)?)?;
    let start = bpb.data_start_sectors.checked_mul(bpb.bytes_per_sector)?;
    let cluster = bpb.sectors_per_cluster.checked_mul(bpb.bytes_per_sector)?;
    let clusters = bpb.total_sectors.checked_sub(bpb.data_start_sectors)? / bpb.sectors_per_cluster;
    // Microsoft's rule: the cluster count alone decides the FAT width.
    let bits = match clusters {
        0..4085 => 12,
        4085..65525 => 16,
        _ => 32,
    };
    let details = Details::Fat {
        bits,
        sector_bytes: bpb.bytes_per_sector,
        cluster_bytes: cluster,
        data_start_bytes: start,
    };
    Some((start, cluster, details))
}

/// exFAT: the cluster heap's offset in sectors, sizes as powers of two.
fn exfat(region: &Region) -> Parsed {
    let boot = region.bytes(0, 512)?;
    let sector = 1u64.checked_shl(u32::from(*boot.get(108)?))?;
    let cluster = sector.checked_shl(u32::from(*boot.get(109)?)).filter(|&c| c <= 1 << 25)?;
    let start = u64::from(le_u32(&boot, 88)?).checked_mul(sector)?;
    let details =
        Details::Exfat { sector_bytes: sector, cluster_bytes: cluster, data_start_bytes: start };
    Some((start, cluster, details))
}

/// NTFS: cluster 0 is the volume's first sector.
fn ntfs(region: &Region) -> Parsed {
    let boot = region.bytes(0, 512)?;
    let sector = u64::from(le_u16(&boot, 11)?);
    let spc = *boot.get(13)?;
    // Above 128 the byte is a negative power of two (clusters over 64 KiB).
    let sectors = if spc > 128 { 1u64.checked_shl(256 - u32::from(spc))? } else { u64::from(spc) };
    let cluster = sectors.checked_mul(sector).filter(|&c| c > 0 && c <= 1 << 31)?;
    Some((0, cluster, Details::Ntfs { sector_bytes: sector, cluster_bytes: cluster }))
}

fn iso9660(region: &Region) -> Parsed {
    let pvd = region.bytes(32768, 2048)?;
    let block = u64::from(le_u16(&pvd, 128)?);
    Some((0, block, Details::Iso9660 { block_bytes: block }))
}

/// ZFS allocates from past its leading labels, in 2^ashift blocks.
fn zfs(region: &Region) -> Parsed {
    let ashift = zfs::label(region)?.ashift.filter(|&a| a <= 24)?;
    Some((zfs::DATA_START, 1 << ashift, Details::Zfs { ashift }))
}
