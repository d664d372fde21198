//! The CPU latency limit (PM QoS, `/dev/cpu_dma_latency`): while a process
//! holds a request there, idle CPUs only enter idle states that wake
//! within the limit. A benchmark that does not hold one times, besides the
//! device, how long a sleeping CPU takes to wake for each completion: on a
//! virtual machine, a halted virtual CPU woken by the host (see
//! docs/performance.md). cyclictest holds 0 by default; rtla has
//! `--dma-latency`.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

const DEVICE: &str = "/dev/cpu_dma_latency";

/// The kernel's PM_QOS_CPU_LATENCY_DEFAULT_VALUE: no limit in force.
const NO_LIMIT: i32 = 2_000_000_000;

/// A request held for as long as this lives: closing the file (on drop, or
/// when the process dies however it dies) withdraws it.
#[derive(Debug)]
pub struct CpuLatency {
    _file: File,
}

impl CpuLatency {
    /// Asks that idle CPUs wake within `us` microseconds. Needs root.
    pub fn hold(us: u32) -> std::io::Result<CpuLatency> {
        Self::hold_at(Path::new(DEVICE), us)
    }

    fn hold_at(path: &Path, us: u32) -> std::io::Result<CpuLatency> {
        let value = i32::try_from(us).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        let mut file = File::options().write(true).open(path)?;
        // Four bytes are read as a binary s32; anything else as hex text.
        file.write_all(&value.to_ne_bytes())?;
        Ok(CpuLatency { _file: file })
    }
}

/// The limit in force, whoever holds it (this process, tuned, another
/// benchmark): None when there is none, or it cannot be read (not root).
pub(crate) fn in_force() -> Option<u32> {
    read_limit(Path::new(DEVICE))
}

fn read_limit(path: &Path) -> Option<u32> {
    let mut bytes = [0u8; 4];
    File::open(path).and_then(|mut f| f.read_exact(&mut bytes)).ok()?;
    match i32::from_ne_bytes(bytes) {
        NO_LIMIT => None,
        value => u32::try_from(value).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_writes_the_binary_value_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cpu_dma_latency");
        std::fs::write(&path, NO_LIMIT.to_ne_bytes()).unwrap();
        assert_eq!(read_limit(&path), None, "the default is no limit");
        let held = CpuLatency::hold_at(&path, 20).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), 20i32.to_ne_bytes());
        assert_eq!(read_limit(&path), Some(20));
        drop(held);
        assert!(CpuLatency::hold_at(&path, u32::MAX).is_err(), "beyond an s32");
        assert_eq!(read_limit(&dir.path().join("missing")), None);
    }
}
