//! node_exporter's textfile-collector format.

use crate::align::Class;
use crate::audit::{DiskAudit, PartitionAudit};
use crate::table::Severity;
use std::fmt::Write;

/// `now` is the audit time in seconds since the epoch.
pub fn render(audits: &[DiskAudit], now: f64) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "blkalign_partition_misaligned",
        "1 if the partition start is not on a physical sector boundary and nothing inside makes up for it.",
    );
    for (a, p) in partitions(audits) {
        let value = u8::from(p.verdict.verdict == Class::Misaligned);
        sample(
            &mut out,
            "blkalign_partition_misaligned",
            &a.path.to_string_lossy(),
            Some(p.partition.number),
            value,
        );
    }
    family(&mut out, "blkalign_partition_start_bytes", "Byte offset of the partition start.");
    for (a, p) in partitions(audits) {
        sample(
            &mut out,
            "blkalign_partition_start_bytes",
            &a.path.to_string_lossy(),
            Some(p.partition.number),
            p.verdict.start_bytes,
        );
    }
    family(
        &mut out,
        "blkalign_disk_physical_sector_bytes",
        "Physical sector size alignment was judged against.",
    );
    for a in audits {
        if let Some(g) = &a.geometry {
            sample(
                &mut out,
                "blkalign_disk_physical_sector_bytes",
                &a.path.to_string_lossy(),
                None,
                g.physical,
            );
        }
    }
    family(
        &mut out,
        "blkalign_disk_drive_physical_sector_bytes",
        "Physical sector size the drive itself reports (ATA IDENTIFY, SCSI RC16, NVMe NPWG), where it could be asked.",
    );
    for a in audits {
        let drive = a.topology.as_ref().and_then(|t| t.drive.as_ref());
        if let Some(p) = drive.and_then(|d| d.physical_sector_size) {
            sample(
                &mut out,
                "blkalign_disk_drive_physical_sector_bytes",
                &a.path.to_string_lossy(),
                None,
                p.value,
            );
        }
    }
    family(
        &mut out,
        "blkalign_disk_misaligned",
        "1 if a partition, or a layer it holds (LVM, LUKS, md, file system), starts off a physical sector.",
    );
    for a in audits.iter().filter(|a| a.error.is_none()) {
        let value = u8::from(a.worst() == Some(Class::Misaligned));
        sample(&mut out, "blkalign_disk_misaligned", &a.path.to_string_lossy(), None, value);
    }
    family(&mut out, "blkalign_disk_audit_error", "1 if the disk or its table could not be read.");
    for a in audits {
        sample(
            &mut out,
            "blkalign_disk_audit_error",
            &a.path.to_string_lossy(),
            None,
            u8::from(a.error.is_some()),
        );
    }
    family(
        &mut out,
        "blkalign_disk_table_errors",
        "Table problems that put data out of Linux's reach (overlaps, beyond the end, ignored GPT).",
    );
    for a in audits {
        let errors = a.problems.iter().filter(|p| p.severity == Severity::Error).count();
        sample(&mut out, "blkalign_disk_table_errors", &a.path.to_string_lossy(), None, errors);
    }
    family(
        &mut out,
        "blkalign_audit_timestamp_seconds",
        "When the audit ran, in seconds since the epoch.",
    );
    let _ = writeln!(out, "blkalign_audit_timestamp_seconds {now:.3}");
    out
}

fn partitions(audits: &[DiskAudit]) -> impl Iterator<Item = (&DiskAudit, &PartitionAudit)> {
    audits.iter().flat_map(|a| a.data_partitions().map(move |p| (a, p)))
}

fn family(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
}

fn sample(
    out: &mut String,
    name: &str,
    device: &str,
    partition: Option<u32>,
    value: impl std::fmt::Display,
) {
    let _ = write!(out, "{name}{{device=\"{}\"", escape(device));
    if let Some(n) = partition {
        let _ = write!(out, ",partition=\"{n}\"");
    }
    let _ = writeln!(out, "}} {value}");
}

/// Label values escape backslash, double quote and newline.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn escapes_label_values() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
