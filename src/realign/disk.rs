//! Where a move's bytes go, as the copy engine, the rescue and the undo
//! write them: a leaf, so none of them depends on another for it.

use std::io;

/// Where a move's bytes go: a block device or an image file.
pub trait Disk: Sync {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Make every write so far durable (the drive's cache included).
    fn flush(&self) -> io::Result<()>;
}

impl Disk for std::fs::File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, offset)
    }

    fn flush(&self) -> io::Result<()> {
        self.sync_data()
    }
}
