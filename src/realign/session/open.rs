//! A target opened for moving its partitions: the [`Session`] itself, its
//! table, and what its partitions hold that a move must mind.

use super::error::{MoveRefusal, SessionError};
use super::host::{DiskHost, Host};
use crate::align::Geometry;
use crate::device::vmimage::{Access, Export, ImageFormat};
use crate::device::{self, DeviceError, Overrides, SysRoot, Target, Topology};
use crate::io::{ReadAt, ReadCache};
use crate::open::Opened;
use crate::realign::state::Store;
use crate::realign::{guard, place, Identity};
use crate::table::{self, Layout};
use std::path::Path;

/// A target opened for moving its partitions.
pub struct Session {
    pub(super) target: Target,
    pub(super) topology: Topology,
    pub(super) geometry: Geometry,
    pub(super) identity: Identity,
    /// Read-only, for tables and checks; cached only within a span of
    /// planning that no write can come between ([`ReadCache::keep`]).
    pub(super) reader: ReadCache<Box<dyn ReadAt>>,
    pub(super) host: Box<dyn Host>,
    pub(super) store: Store,
    /// A VM image's format, and the export its guest disk is moved
    /// through (last: it goes once the reader has).
    pub(super) image: Option<(&'static str, Export)>,
}

impl Session {
    /// Open the disk or image at `path` (not a partition of it).
    pub fn open(
        root: SysRoot,
        path: &Path,
        overrides: &Overrides,
        trust_kernel: bool,
    ) -> Result<Session, SessionError> {
        let opened = match crate::open::open_target(&root, path, overrides, trust_kernel) {
            Err(DeviceError::VmImage { format, .. }) => {
                return Session::open_image(root, path, &format, overrides, trust_kernel)
            }
            other => other?,
        };
        let Opened { target, file, topology, geometry } = opened;
        if let (Some(n), Some(name)) = (target.selected_partition, &target.name) {
            let (path, disk) = (path.to_path_buf(), name.clone());
            return Err(MoveRefusal::PartitionNamed { path, number: n, disk }.into());
        }
        let identity = device::identity(&root, &target, &topology);
        let host =
            Box::new(DiskHost { root, target: target.clone(), export: false, at_boot: false });
        Ok(Session::with(target, topology, geometry, identity, Box::new(file), host))
    }

    /// The disk at `path` for a move in the initramfs (see
    /// [`DiskHost::at_boot`]).
    pub(crate) fn open_at_boot(root: SysRoot, path: &Path) -> Result<Session, SessionError> {
        let mut session = Session::open(root.clone(), path, &Overrides::default(), false)?;
        let target = session.target.clone();
        session.host = Box::new(DiskHost { root, target, export: false, at_boot: true });
        Ok(session)
    }

    /// The guest disk of a VM image, exported read-write by QEMU (which
    /// refuses while a VM holds the image's lock), moved under the image's
    /// own name: journals go beside it, and the finish command names it.
    fn open_image(
        root: SysRoot,
        path: &Path,
        format: &ImageFormat,
        overrides: &Overrides,
        trust_kernel: bool,
    ) -> Result<Session, SessionError> {
        let export = Export::start(path, format, Access::Write).map_err(DeviceError::from)?;
        let opened = crate::open::open_target(&root, export.file(), overrides, trust_kernel)?;
        let Opened { target: guest, file, topology, geometry } = opened;
        let identity = device::identity(&root, &guest, &topology);
        let target = Target { path: path.to_path_buf(), ..guest.clone() };
        let host = Box::new(DiskHost { root, target: guest, export: true, at_boot: false });
        let session = Session::with(target, topology, geometry, identity, Box::new(file), host);
        Ok(Session { image: Some((format.name(), export)), ..session })
    }

    /// A session over any reader and host (an embedder's, or a test's).
    pub fn with(
        target: Target,
        topology: Topology,
        geometry: Geometry,
        identity: Identity,
        reader: Box<dyn ReadAt>,
        host: Box<dyn Host>,
    ) -> Session {
        let store = Store::default();
        let reader = ReadCache::off(reader, topology.size_bytes);
        Session { target, topology, geometry, identity, reader, host, store, image: None }
    }

    /// Keep state records in `store` instead of the default.
    pub fn store(mut self, store: Store) -> Session {
        self.store = store;
        self
    }

    pub fn target(&self) -> &Target {
        &self.target
    }

    /// What the disk is recognised by, whatever it is called.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The partition holding a hibernation image, if any: resuming it after
    /// a move would bring back a kernel that knows the old layout.
    pub fn hibernation_image(&self) -> Result<Option<u32>, SessionError> {
        let layout = self.layout()?;
        let ss = self.topology.logical_sector_size.value;
        Ok(layout
            .partitions
            .iter()
            .find(|p| guard::hibernation(&self.reader, p, ss))
            .map(|p| p.number))
    }

    /// The in-use guard, for a move of the partitions `asked`.
    pub fn check_unused(&self, asked: &[u32]) -> Result<(), SessionError> {
        self.host.check_unused(asked)
    }

    pub fn layout(&self) -> Result<Layout, SessionError> {
        let ss = self.topology.logical_sector_size.value;
        let layout = table::read(&self.reader, ss, self.topology.size_bytes)
            .map_err(|source| SessionError::Table { path: self.target.path.clone(), source })?;
        guard::table_problems(&layout)?;
        Ok(layout)
    }

    /// What stays misaligned inside partition `n` (at LBA `start`) whatever
    /// its start: a FAT data area off the physical sector grid.
    pub(super) fn fat_warning(&self, n: u32, start: u64, sectors: u64) -> Option<String> {
        let ss = self.topology.logical_sector_size.value;
        let (at, len) = (start.checked_mul(ss)?, sectors.checked_mul(ss)?);
        let _span = self.reader.keep();
        let layers = crate::stack::walk(&self.reader, at, len);
        let dev = crate::advise::Node::of(&self.target, n).shell();
        place::fat_data_warning(&layers, self.geometry.physical, &dev, len)
    }
}
