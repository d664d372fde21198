//! How a disk is recognised across reboots and renames.

use super::sysfs::{read_text, SysRoot};
use super::{Target, Topology};
use serde::{Deserialize, Serialize};

/// What a disk is recognised by when a write is undone or resumed: /dev
/// names change across reboots, so the path is never trusted alone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub size_bytes: u64,
    /// The drive's serial and WWN, when the kernel has them.
    pub serial: Option<String>,
    pub wwid: Option<String>,
}

/// The identity of `target`, whose topology is `topology`.
pub fn identity(root: &SysRoot, target: &Target, topology: &Topology) -> Identity {
    let wwid = target.name.as_deref().and_then(|name| {
        let dir = root.block(name);
        read_text(&dir.join("wwid")).or_else(|| read_text(&dir.join("device/wwid")))
    });
    Identity { size_bytes: topology.size_bytes, serial: topology.serial.clone(), wwid }
}
