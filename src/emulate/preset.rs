//! EmulatedDrive geometries: the named presets and the rules any custom one obeys.

use super::EmulateError;
use serde::{Deserialize, Serialize};

/// Latency of every request that reaches the emulated platter, unless
/// `--latency-ms` says otherwise.
pub const DEFAULT_LATENCY_MS: u32 = 1;

/// The true geometry of an emulated drive (not what the kernel reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmulatedGeometry {
    /// Bytes per LBA, as the host addresses the drive.
    pub logical: u32,
    /// Bytes the platter reads and writes at once.
    pub physical: u32,
    /// Byte offset of the first physical-sector boundary on the host side
    /// (3584 for a jumpered WD EARS: LBA 7 is the first aligned LBA).
    pub alignment_offset: u32,
    /// Delay of each read or write reaching the platter.
    pub latency_ms: u32,
}

impl EmulatedGeometry {
    const fn new(logical: u32, physical: u32, alignment_offset: u32) -> EmulatedGeometry {
        EmulatedGeometry { logical, physical, alignment_offset, latency_ms: DEFAULT_LATENCY_MS }
    }

    /// Checks what loop devices and nbdkit's blocksize filter accept.
    pub(crate) fn validate(&self) -> Result<(), EmulateError> {
        let bad = |why: String| Err(EmulateError::Geometry(why));
        let EmulatedGeometry { logical, physical, alignment_offset, .. } = *self;
        if !logical.is_power_of_two() || !(512..=4096).contains(&logical) {
            return bad(format!("logical sector size {logical} is not 512, 1024, 2048 or 4096"));
        }
        if !physical.is_power_of_two() || physical < logical || physical > 65536 {
            return bad(format!(
                "physical sector size {physical} must be a power of two from {logical} to 65536"
            ));
        }
        if alignment_offset >= physical || alignment_offset % logical != 0 {
            return bad(format!(
                "alignment offset {alignment_offset} must be a multiple of {logical} below {physical}"
            ));
        }
        Ok(())
    }

    /// Where host byte 0 lies on the platter: host byte `x` is stored at
    /// `x + shift`, so `alignment_offset` lands on a physical boundary.
    pub fn shift(&self) -> u64 {
        u64::from((self.physical - self.alignment_offset) % self.physical)
    }

    /// Sets the alignment from the lowest aligned LBA, as `--lowest-aligned`
    /// and hdparm/smartctl express it. The sector sizes are checked first
    /// (a physical size of 0 has no alignment); the result is not, so a
    /// later [`EmulatedGeometry::validate`] still judges the whole geometry.
    pub fn with_lowest_aligned(self, lba: u32) -> Result<EmulatedGeometry, EmulateError> {
        EmulatedGeometry { alignment_offset: 0, ..self }.validate()?;
        let offset = u64::from(lba) * u64::from(self.logical) % u64::from(self.physical);
        // Below `physical` (u32), so it fits.
        Ok(EmulatedGeometry { alignment_offset: offset as u32, ..self })
    }
}

/// A named geometry (each commented with the real drive it stands for).
pub(crate) struct Preset {
    pub name: &'static str,
    pub geometry: EmulatedGeometry,
}

pub(crate) const PRESETS: &[Preset] = &[
    Preset {
        name: "wd-ears",
        // WD Caviar Green WD10EARS/WD20EARS: 4 KiB sectors reported as 512 bytes
        geometry: EmulatedGeometry::new(512, 4096, 0),
    },
    Preset {
        name: "wd-ears-jumper",
        // WD EARS with the Windows XP jumper (pins 7-8): LBA n stored at n + 1
        geometry: EmulatedGeometry::new(512, 4096, 3584),
    },
    Preset {
        name: "4kn",
        // 4K native drive (e.g. WD Red Plus 4Kn, HGST Ultrastar 4Kn): 4096/4096
        geometry: EmulatedGeometry::new(4096, 4096, 0),
    },
    Preset {
        name: "native-512",
        // a 512-byte native drive (pre-2010 disks): no penalty at any offset
        geometry: EmulatedGeometry::new(512, 512, 0),
    },
];

/// The geometry of a named preset.
pub fn preset(name: &str) -> Result<EmulatedGeometry, EmulateError> {
    PRESETS
        .iter()
        .find(|p| p.name == name)
        .map(|p| p.geometry)
        .ok_or_else(|| EmulateError::UnknownPreset(name.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumper_shifts_by_one_sector() {
        let g = preset("wd-ears-jumper").unwrap();
        assert_eq!(g.shift(), 512);
        assert_eq!(preset("wd-ears").unwrap().shift(), 0);
    }

    #[test]
    fn lowest_aligned_lba_seven_is_the_jumper() {
        let g = preset("wd-ears").unwrap().with_lowest_aligned(7).unwrap();
        assert_eq!(g, preset("wd-ears-jumper").unwrap());
    }

    #[test]
    fn lowest_aligned_with_bad_sector_sizes_is_an_error_not_a_panic() {
        for (logical, physical) in [(512, 0), (0, 4096), (4096, 512), (512, 3000)] {
            let err =
                EmulatedGeometry::new(logical, physical, 0).with_lowest_aligned(1).unwrap_err();
            assert!(matches!(err, EmulateError::Geometry(_)), "{logical}/{physical}: {err}");
        }
        // A preset's offset that the new sector size would make invalid is
        // replaced, not judged.
        let g = preset("wd-ears-jumper").unwrap();
        let g = EmulatedGeometry { physical: 512, ..g }.with_lowest_aligned(0).unwrap();
        assert_eq!(g.alignment_offset, 0);
        g.validate().unwrap();
    }

    #[test]
    fn presets_are_valid_and_bad_ones_are_not() {
        for p in PRESETS {
            p.geometry.validate().unwrap();
        }
        assert!(EmulatedGeometry::new(512, 3000, 0).validate().is_err());
        assert!(EmulatedGeometry::new(4096, 512, 0).validate().is_err());
        assert!(EmulatedGeometry::new(512, 4096, 100).validate().is_err());
        assert!(EmulatedGeometry::new(512, 16384, 1024).validate().is_ok());
    }
}
