//! One way in for every command: a path resolved to its target, opened
//! read-only, its topology (an image's logical sector size read from its
//! own table, which `device` cannot read) and the geometry to judge by.

use crate::align::Geometry;
use crate::device::{self, DeviceError, Identity, Overrides, SysRoot, Target, Topology};
use crate::io::DirectReader;
use crate::table;
use std::fs::File;
use std::path::Path;

/// A target ready to be read and judged.
pub struct Opened {
    pub target: Target,
    /// Read-only; block devices read past the page cache.
    pub file: DirectReader,
    pub topology: Topology,
    pub geometry: Geometry,
}

impl Opened {
    /// What names this disk (size, sector size, serial, WWN): what a
    /// commit records in its backup, so a restore finds the same disk.
    pub fn identity(&self, root: &SysRoot) -> Identity {
        device::identity(root, &self.target, &self.topology)
    }
}

/// Resolve `path`, open it read-only and learn its topology and geometry.
pub fn open_target(
    root: &SysRoot,
    path: &Path,
    overrides: &Overrides,
    trust_kernel: bool,
) -> Result<Opened, DeviceError> {
    let target = device::resolve(root, path)?;
    let file = device::open(&target)?;
    let topology = topology(root, &target, Some(file.file()), overrides)?;
    let geometry = topology.geometry(trust_kernel);
    Ok(Opened { target, file, topology, geometry })
}

/// [`device::topology`], an image's sector size read from its table.
pub fn topology(
    root: &SysRoot,
    target: &Target,
    file: Option<&File>,
    overrides: &Overrides,
) -> Result<Topology, DeviceError> {
    device::topology(root, target, file, overrides, &|f, len| table::detect_sector_size(f, len))
}
