//! A plan: each partition where it goes and its role in the table, and the
//! table's bytes for it.

use super::request::{NewLabel, PartitionRequest};
use crate::table::write::{self, Ids, TableBytes, WriteError};
use crate::table::{self, PartKind};
use serde::Serialize;

/// Where a planned partition sits in its table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Primary,
    Extended,
    Logical,
    Gpt,
}

impl Role {
    /// Its name, as in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Extended => "extended",
            Role::Logical => "logical",
            Role::Gpt => "gpt",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PlannedPartition {
    pub number: u32,
    pub start: u64,
    pub size: u64,
    pub role: Role,
    pub type_id: String,
    pub name: Option<String>,
    /// For logical partitions: the LBA of their EBR.
    pub ebr: Option<u64>,
    /// The request it was made for (an index); None for an extended
    /// container the planner added.
    #[serde(skip)]
    pub request: Option<usize>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub label: NewLabel,
    pub sector_size: u64,
    pub total_sectors: u64,
    pub grain_bytes: u64,
    pub first_usable_lba: u64,
    pub last_usable_lba: u64,
    pub partitions: Vec<PlannedPartition>,
}

pub(super) fn planned(
    number: u32,
    start: u64,
    size: u64,
    role: Role,
    r: &PartitionRequest,
    ebr: Option<u64>,
) -> PlannedPartition {
    PlannedPartition {
        number,
        start,
        size,
        role,
        type_id: r.type_id.clone(),
        name: r.name.clone(),
        ebr,
        request: None,
    }
}

impl Plan {
    /// The bytes of this plan's table, with `ids` for its GUIDs and MBR
    /// signature.
    pub fn table(&self, ids: &Ids) -> Result<TableBytes, WriteError> {
        let parts: Vec<table::Partition> =
            self.partitions.iter().map(PlannedPartition::partition).collect();
        let (ss, total) = (self.sector_size, self.total_sectors);
        match self.label {
            NewLabel::Gpt => {
                let usable = (self.first_usable_lba, self.last_usable_lba);
                write::new_gpt(ss, total, usable, &parts, ids).map(TableBytes::Gpt)
            }
            NewLabel::Mbr => write::new_mbr(ss, total, &parts, ids).map(TableBytes::Mbr),
        }
    }
}

impl PlannedPartition {
    /// Made for request `index`.
    pub(super) fn of(self, index: usize) -> PlannedPartition {
        PlannedPartition { request: Some(index), ..self }
    }

    /// As the table writer takes it.
    fn partition(&self) -> table::Partition {
        let kind = match self.role {
            Role::Primary => PartKind::Primary,
            Role::Extended => PartKind::Extended,
            Role::Logical => PartKind::Logical,
            Role::Gpt => PartKind::Gpt,
        };
        table::Partition {
            number: self.number,
            start: self.start,
            size: self.size,
            kind,
            type_id: self.type_id.clone(),
            name: self.name.clone(),
            ebr: self.ebr,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::align::MIB;
    use crate::plan::grain::Disk;
    use crate::plan::tests::plan_on;
    use crate::plan::{Align, Size};
    use crate::table::write::encode_table;

    #[test]
    fn names_are_the_json_ones() {
        for label in [NewLabel::Gpt, NewLabel::Mbr] {
            assert_eq!(serde_json::to_value(label).unwrap(), label.name());
        }
        for role in [Role::Primary, Role::Extended, Role::Logical, Role::Gpt] {
            assert_eq!(serde_json::to_value(role).unwrap(), role.name());
        }
    }

    fn ids(n: usize) -> Ids {
        Ids {
            disk_guid: [7; 16],
            partition_guids: (1..=n as u8).map(|i| [i; 16]).collect(),
            mbr_signature: 0xCAFE,
        }
    }

    fn make(label: NewLabel, logical: u64, sizes: &[Size]) -> (Plan, Vec<u8>) {
        let disk = Disk {
            size_bytes: 64 * MIB,
            logical,
            physical: 4096,
            alignment_offset: 0,
            optimal_io: None,
        };
        let reqs: Vec<PartitionRequest> = sizes
            .iter()
            .map(|&size| PartitionRequest {
                min_start: None,
                size,
                type_id: "linux".into(),
                name: Some("p".into()),
            })
            .collect();
        let reqs: Vec<PartitionRequest> = if label == NewLabel::Mbr {
            reqs.into_iter().map(|r| PartitionRequest { name: None, ..r }).collect()
        } else {
            reqs
        };
        let p = plan_on(&disk, label, Align::Optimal, false, &reqs).unwrap();
        let mut img = vec![0xA5u8; (64 * MIB) as usize];
        for c in encode_table(&p.table(&ids(p.partitions.len())).unwrap()) {
            img[c.offset as usize..c.offset as usize + c.bytes.len()].copy_from_slice(&c.bytes);
        }
        (p, img)
    }

    // `&Vec`: ReadAt is implemented for Vec, not for the unsized slice.
    #[allow(clippy::ptr_arg)]
    fn read_back(p: &Plan, img: &Vec<u8>) -> table::Layout {
        let layout = table::read(img, p.sector_size, img.len() as u64).unwrap();
        assert!(layout.problems.is_empty(), "{:?}", layout.problems);
        let got: Vec<(u32, u64, u64)> =
            layout.partitions.iter().map(|x| (x.number, x.start, x.size)).collect();
        let want: Vec<(u32, u64, u64)> =
            p.partitions.iter().map(|x| (x.number, x.start, x.size)).collect();
        assert_eq!(got, want);
        layout
    }

    #[test]
    fn gpt_reads_back_at_512_and_4096() {
        for ss in [512, 4096] {
            let (p, img) = make(NewLabel::Gpt, ss, &[Size::Bytes(MIB), Size::Rest]);
            let layout = read_back(&p, &img);
            assert_eq!(layout.label, table::Label::Gpt);
            assert_eq!(layout.partitions[0].name.as_deref(), Some("p"));
            assert_eq!(layout.partitions[0].type_id, "0FC63DAF-8483-4772-8E79-3D69D8477DE4");
            assert!(layout.mbr.unwrap().protective);
        }
    }

    #[test]
    fn gpt_order_is_backup_then_primary_then_mbr() {
        let (p, _) = make(NewLabel::Gpt, 512, &[Size::Rest]);
        let order: Vec<&str> =
            encode_table(&p.table(&ids(1)).unwrap()).iter().map(|c| c.what).collect();
        assert_eq!(
            order,
            [
                "gpt backup entries",
                "gpt backup header",
                "gpt primary entries",
                "gpt primary header",
                "protective mbr"
            ]
        );
    }

    #[test]
    fn mbr_with_logicals_reads_back() {
        let sizes = [Size::Bytes(4 * MIB); 6];
        let (p, img) = make(NewLabel::Mbr, 512, &sizes);
        let layout = read_back(&p, &img);
        assert_eq!(layout.label, table::Label::Mbr);
        assert_eq!(layout.partitions.iter().filter(|x| x.kind == PartKind::Logical).count(), 3);
        let ebrs: Vec<u64> = p.partitions.iter().filter_map(|x| x.ebr).collect();
        assert_eq!(layout.mbr.unwrap().ebrs, ebrs);
        assert_eq!(table::mbr::Mbr::parse(&img).unwrap().disk_signature, 0xCAFE);
    }

    #[test]
    fn mbr_wipes_stale_gpt_headers() {
        let (p, img) = make(NewLabel::Mbr, 512, &[Size::Bytes(MIB)]);
        assert!(img[512..4096 + 512].iter().all(|&b| b == 0));
        assert!(img[img.len() - 4096..].iter().all(|&b| b == 0));
        read_back(&p, &img);
    }
}
