//! What the drive's own SMART counters say about its surface, through
//! smartctl (smartmontools) where it is installed: a move over a disk that
//! counts pending or reallocated sectors is likely to meet unreadable ones.

use serde_json::Value;
use std::path::Path;

/// The surface counters a drive reported (None: not reported).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Health {
    /// ATA 197 Current_Pending_Sector: unreadable, waiting for a write.
    pub pending: Option<u64>,
    /// ATA 5 Reallocated_Sector_Ct.
    pub reallocated: Option<u64>,
    /// ATA 198 Offline_Uncorrectable.
    pub uncorrectable: Option<u64>,
    /// NVMe media and data integrity errors.
    pub media_errors: Option<u64>,
    /// SCSI grown defect list entries.
    pub grown_defects: Option<u64>,
}

/// `smartctl -j -A DEV`, None when smartctl is missing or says nothing.
/// Its exit status is a bit mask of findings, so only its JSON counts.
pub fn read(dev: &Path) -> Option<Health> {
    let out = std::process::Command::new("smartctl").arg("-j").arg("-A").arg(dev).output().ok()?;
    parse(&serde_json::from_slice(&out.stdout).ok()?)
}

pub fn parse(doc: &Value) -> Option<Health> {
    let attribute = |id: u64| {
        let table = doc["ata_smart_attributes"]["table"].as_array()?;
        let row = table.iter().find(|row| row["id"].as_u64() == Some(id))?;
        row["raw"]["value"].as_u64()
    };
    let health = Health {
        pending: attribute(197),
        reallocated: attribute(5),
        uncorrectable: attribute(198),
        media_errors: doc["nvme_smart_health_information_log"]["media_errors"].as_u64(),
        grown_defects: doc["scsi_grown_defect_list"].as_u64(),
    };
    (health != Health::default()).then_some(health)
}

impl Health {
    /// The counters that are not zero, in words; None when all are.
    pub fn warning(&self) -> Option<String> {
        let named = [
            (self.pending, "pending (unreadable) sectors"),
            (self.reallocated, "reallocated sectors"),
            (self.uncorrectable, "offline uncorrectable sectors"),
            (self.media_errors, "media errors"),
            (self.grown_defects, "grown defects"),
        ];
        let said: Vec<String> = named
            .iter()
            .filter_map(|(n, what)| n.filter(|&n| n > 0).map(|n| format!("{n} {what}")))
            .collect();
        (!said.is_empty()).then(|| {
            format!(
                "SMART (smartctl) counts {} on this drive: expect unreadable sectors; copy off \
                 what matters first, and see --rescue and --undo",
                said.join(", ")
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pending_and_reallocated_sectors_are_said_and_a_clean_drive_is_not() {
        let worn = json!({"ata_smart_attributes": {"table": [
            {"id": 5, "name": "Reallocated_Sector_Ct", "raw": {"value": 12, "string": "12"}},
            {"id": 9, "name": "Power_On_Hours", "raw": {"value": 51234, "string": "51234"}},
            {"id": 197, "name": "Current_Pending_Sector", "raw": {"value": 3, "string": "3"}},
            {"id": 198, "name": "Offline_Uncorrectable", "raw": {"value": 0, "string": "0"}}
        ]}});
        let h = parse(&worn).unwrap();
        assert_eq!((h.pending, h.reallocated, h.uncorrectable), (Some(3), Some(12), Some(0)));
        let said = h.warning().unwrap();
        assert!(said.contains("3 pending (unreadable) sectors, 12 reallocated sectors"), "{said}");
        let nvme = json!({"nvme_smart_health_information_log": {"media_errors": 0}});
        assert_eq!(parse(&nvme).unwrap().warning(), None);
        let loop_device = json!({"smartctl": {"exit_status": 1}});
        assert_eq!(parse(&loop_device), None);
    }
}
