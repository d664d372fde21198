//! libvirt guests' disks, as `virsh` lists them: so one command audits every
//! guest on a host. virsh rather than the C library: it is on every libvirt
//! host, honours LIBVIRT_DEFAULT_URI, and keeps libvirt an optional runtime
//! dependency.

use std::path::PathBuf;
use std::process::Command;

/// One disk of a guest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainDisk {
    pub domain: String,
    /// The guest's name for it (vda, sda).
    pub target: String,
    /// The image file or block device on the host.
    pub source: PathBuf,
    /// The guest is running: its image is read past QEMU's lock.
    pub running: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum LibvirtError {
    #[error("auditing libvirt guests needs virsh (Debian: libvirt-clients)")]
    Missing,
    #[error("virsh {command}: {detail}")]
    Failed { command: String, detail: String },
}

/// Every domain, running or not, of the connection `uri` (virsh's default
/// when None).
pub fn domains(uri: Option<&str>) -> Result<Vec<String>, LibvirtError> {
    let out = virsh(uri, &["list", "--all", "--name"])?;
    Ok(out.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect())
}

/// The disks of `domain`: file and block disks with a source (CD-ROMs,
/// floppies and empty drives are not disks to audit).
pub fn disks(uri: Option<&str>, domain: &str) -> Result<Vec<DomainDisk>, LibvirtError> {
    let running = virsh(uri, &["domstate", domain])?.trim() == "running";
    let table = virsh(uri, &["domblklist", domain, "--details"])?;
    Ok(parse_blklist(&table)
        .into_iter()
        .map(|(target, source)| DomainDisk { domain: domain.to_string(), target, source, running })
        .collect())
}

/// (target, source) of every disk row of `virsh domblklist --details`:
/// "Type Device Target Source", after a header and a rule unless --quiet.
/// Sources may hold spaces, so they are the rest of the line.
fn parse_blklist(table: &str) -> Vec<(String, PathBuf)> {
    let rule = table.lines().position(|l| l.trim_start().starts_with("---"));
    table
        .lines()
        .skip(rule.map_or(0, |r| r + 1))
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let kind = fields.next()?;
            let device = fields.next()?;
            let target = fields.next()?;
            let at = line.find(target)? + target.len();
            let source = line[at..].trim();
            let usable = matches!(kind, "file" | "block") && device == "disk" && source != "-";
            usable.then(|| (target.to_string(), PathBuf::from(source)))
        })
        .filter(|(_, s)| !s.as_os_str().is_empty())
        .collect()
}

fn virsh(uri: Option<&str>, args: &[&str]) -> Result<String, LibvirtError> {
    let mut cmd = Command::new("virsh");
    cmd.arg("--quiet").arg("--readonly");
    if let Some(uri) = uri {
        cmd.args(["--connect", uri]);
    }
    let out = cmd.args(args).output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => LibvirtError::Missing,
        _ => LibvirtError::Failed { command: args.join(" "), detail: e.to_string() },
    })?;
    if !out.status.success() {
        let detail = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(LibvirtError::Failed { command: args.join(" "), detail });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disks_with_a_source_only() {
        let table = " Type   Device   Target   Source\n\
                     ---------------------------------------------\n \
                     file   disk     vda      /var/lib/libvirt/images/old xp.qcow2\n \
                     block  disk     vdb      /dev/sdc\n \
                     file   cdrom    sda      -\n \
                     network disk    vdc      pool/vol\n \
                     file   disk     vdd      -\n";
        assert_eq!(
            parse_blklist(table),
            [
                ("vda".to_string(), PathBuf::from("/var/lib/libvirt/images/old xp.qcow2")),
                ("vdb".to_string(), PathBuf::from("/dev/sdc")),
            ]
        );
        assert!(parse_blklist("").is_empty());
        // virsh --quiet drops the header and the rule.
        let quiet = " file   disk   vda   /guest/disk1\n";
        assert_eq!(parse_blklist(quiet), [("vda".to_string(), PathBuf::from("/guest/disk1"))]);
    }
}
