//! The session's unit tests' lab: an MBR disk in memory with one partition
//! of numbered sectors, and failures to inject (writes that fail after a
//! count, a kernel that refuses, unreadable sectors).

use super::error::SessionError;
use super::events::{Done, Events};
use super::host::{Host, Unused, Writer};
use super::open::Session;
use super::options::MoveOptions;
use crate::device::{self, Overrides, SysRoot};
use crate::io::ReadAt;
use crate::realign::disk::Disk;
use crate::realign::state::Store;
use crate::realign::{Identity, Move};
use crate::table;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub(super) const SS: usize = 512;
pub(super) const DISK: usize = 8 << 20;
pub(super) const OLD: u64 = 63;
pub(super) const SECTORS: u64 = 4096;

/// An MBR disk with one partition at LBA 63 full of numbered sectors.
pub(super) fn image() -> Vec<u8> {
    let mut img = vec![0u8; DISK];
    let e = 0x1BE;
    img[e + 4] = 0x83;
    img[e + 8..e + 12].copy_from_slice(&(OLD as u32).to_le_bytes());
    img[e + 12..e + 16].copy_from_slice(&(SECTORS as u32).to_le_bytes());
    img[510..512].copy_from_slice(&[0x55, 0xAA]);
    for s in 0..SECTORS as usize {
        let at = (OLD as usize + s) * SS;
        img[at..at + SS].fill((s % 251) as u8 + 1);
        img[at..at + 8].copy_from_slice(&(s as u64).to_le_bytes());
    }
    img
}

pub(super) fn partition(img: &[u8], start: u64) -> &[u8] {
    &img[start as usize * SS..(start + SECTORS) as usize * SS]
}

/// The disk in memory, with failures to inject: writes that fail after
/// a count, a kernel that refuses.
#[derive(Clone)]
pub(super) struct Mem {
    pub(super) bytes: Arc<Mutex<Vec<u8>>>,
    pub(super) writes_left: Arc<Mutex<Option<u32>>>,
    pub(super) kernel_refuses: Arc<AtomicBool>,
    pub(super) told: Arc<Mutex<Vec<u32>>>,
    /// Sectors whose reads fail with EIO until they are written.
    pub(super) unreadable: Arc<Mutex<Vec<u64>>>,
    /// Unplugged: every read and write fails, and the host says so.
    pub(super) gone: Arc<AtomicBool>,
    /// Every read asked, as (offset, length).
    pub(super) reads: Arc<Mutex<Vec<(u64, usize)>>>,
}

impl Mem {
    fn plugged(&self) -> std::io::Result<()> {
        match self.gone.load(Ordering::Relaxed) {
            true => Err(std::io::Error::from_raw_os_error(5)),
            false => Ok(()),
        }
    }
}

impl ReadAt for Mem {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.plugged()?;
        self.reads.lock().unwrap().push((offset, buf.len()));
        let lbas = offset / SS as u64..(offset + buf.len() as u64).div_ceil(SS as u64);
        if self.unreadable.lock().unwrap().iter().any(|b| lbas.contains(b)) {
            return Err(std::io::Error::from_raw_os_error(5));
        }
        self.bytes.lock().unwrap().read_exact_at(buf, offset)
    }
}

impl Disk for Mem {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.read_exact_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.plugged()?;
        // A failing write lands half-way, as a cut-off request may.
        let mut left = self.writes_left.lock().unwrap();
        let fails = *left == Some(0);
        let len = if fails { buf.len() / 2 } else { buf.len() };
        let at = offset as usize;
        self.bytes.lock().unwrap()[at..at + len].copy_from_slice(&buf[..len]);
        // A drive remaps a pending sector when it is written.
        let lbas = offset / SS as u64..(offset + len as u64) / SS as u64;
        self.unreadable.lock().unwrap().retain(|b| !lbas.contains(b));
        if fails {
            return Err(std::io::Error::other("injected write failure"));
        }
        if let Some(left) = left.as_mut() {
            *left -= 1;
        }
        Ok(())
    }

    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Writer for Mem {
    fn tell_kernel(&self, m: &Move) -> Option<String> {
        self.told.lock().unwrap().push(m.partition);
        self.kernel_refuses
            .load(Ordering::Relaxed)
            .then(|| "injected: the kernel refused".to_string())
    }
}

impl Host for Mem {
    fn check_unused(&self, _: &[u32]) -> Result<(), SessionError> {
        Ok(())
    }

    fn check_journal(&self, _: &Path, _: &[u32]) -> Result<(), SessionError> {
        Ok(())
    }

    fn writer(&self, _: Unused) -> Result<Box<dyn Writer>, SessionError> {
        Ok(Box::new(self.clone()))
    }

    fn read_rate(&self, _: u64, _: u64) -> Option<f64> {
        None
    }

    fn direct_reader(&self) -> Result<Box<dyn ReadAt + Sync>, SessionError> {
        Ok(Box::new(self.clone()))
    }

    fn present(&self) -> bool {
        !self.gone.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
pub(super) struct Log {
    pub(super) notes: Vec<String>,
    pub(super) done: Vec<Done>,
    pub(super) stop_after_progress: bool,
    pub(super) progressed: bool,
    /// Set at the first progress: the disk unplugged mid-move.
    pub(super) unplug: Option<Arc<AtomicBool>>,
}

impl Events for Log {
    fn progress(&mut self, _: u64) {
        self.progressed = true;
        if let Some(gone) = &self.unplug {
            gone.store(true, Ordering::Relaxed);
        }
    }
    fn stop_requested(&self) -> bool {
        self.stop_after_progress && self.progressed
    }
    fn note(&mut self, text: &str) {
        self.notes.push(text.into());
    }
    fn finished(&mut self, done: &Done) {
        self.done.push(done.clone());
    }
}

pub(super) struct Lab {
    pub(super) dir: tempfile::TempDir,
    pub(super) mem: Mem,
    pub(super) session: Session,
}

/// A session on an in-memory 512e disk; the image file exists only to
/// name the target (and place its journals beside it).
pub(super) fn lab() -> Lab {
    lab_with(image())
}

pub(super) fn lab_with(img: Vec<u8>) -> Lab {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("disk.img");
    std::fs::write(&path, []).unwrap();
    let root = SysRoot::real();
    let target = device::resolve(&root, &path).unwrap();
    let overrides = Overrides { physical_sector_size: Some(4096), ..Overrides::default() };
    let mut topology = crate::open::topology(&root, &target, None, &overrides).unwrap();
    topology.size_bytes = DISK as u64;
    let geometry = topology.geometry(false);
    let identity = Identity { size_bytes: DISK as u64, serial: None, wwid: None };
    let mem = Mem {
        bytes: Arc::new(Mutex::new(img)),
        writes_left: Arc::default(),
        kernel_refuses: Arc::default(),
        told: Arc::default(),
        unreadable: Arc::default(),
        gone: Arc::default(),
        reads: Arc::default(),
    };
    let session = Session::with(
        target,
        topology,
        geometry,
        identity,
        Box::new(mem.clone()),
        Box::new(mem.clone()),
    )
    .store(Store::new(dir.path().join("state")));
    Lab { dir, mem, session }
}

pub(super) fn opts() -> MoveOptions {
    MoveOptions::default()
}

/// The partition moved whole, and the table says where.
pub(super) fn assert_moved(lab: &Lab) -> u64 {
    let img = lab.mem.bytes.lock().unwrap();
    let layout = table::read(&*img, 512, DISK as u64).unwrap();
    let new = layout.partitions[0].start;
    assert_eq!(new % 8, 0, "moved to a 4 KiB boundary");
    assert_ne!(new, OLD);
    assert_eq!(partition(&img, new), partition(&image(), OLD), "every byte moved");
    new
}
