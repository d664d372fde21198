//! How requests are issued: one at a time, or queued through io_uring.

#[cfg(feature = "io_uring")]
use super::uring;

/// How requests are issued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// One pwrite/pread at a time, as fio's psync.
    Psync,
    /// Up to `depth` requests in flight through io_uring.
    #[cfg(feature = "io_uring")]
    IoUring { depth: u32 },
}

/// Why io_uring cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum Unavailable {
    /// Refused by this kernel or sandbox.
    #[cfg(feature = "io_uring")]
    #[error("io_uring is unavailable here ({0})")]
    Refused(std::io::Error),
    #[cfg(not(feature = "io_uring"))]
    #[error("built without the io_uring feature (queue depth {0} ignored)")]
    NotBuilt(u32),
}

impl Engine {
    /// io_uring at `depth`, when this build and this kernel allow it.
    pub fn io_uring(depth: u32) -> Result<Engine, Unavailable> {
        #[cfg(feature = "io_uring")]
        return uring::check(depth)
            .map(|()| Engine::IoUring { depth })
            .map_err(Unavailable::Refused);
        #[cfg(not(feature = "io_uring"))]
        Err(Unavailable::NotBuilt(depth))
    }

    pub(super) fn describe(self) -> (&'static str, u32) {
        match self {
            Engine::Psync => ("psync", 1),
            #[cfg(feature = "io_uring")]
            Engine::IoUring { depth } => ("io_uring", depth),
        }
    }
}
