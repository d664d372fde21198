//! The alignment arithmetic: pure functions of byte positions and grains,
//! shared by audit, plan and repair. Every position is measured in bytes
//! from LBA 0 and is aligned to a grain when it sits a whole number of
//! grains past the device's alignment offset.
//!
//! # Glossary
//!
//! - **Logical sector**: the unit of addressing a disk presents (512 or
//!   4096 bytes); an LBA counts logical sectors.
//! - **Physical sector**: the unit the medium reads and writes whole (4096
//!   on Advanced Format drives, even "512e" ones that present 512-byte
//!   logical sectors). A write covering part of one costs a
//!   read-modify-write of all of it.
//! - **Alignment offset**: the byte at which the first whole physical
//!   sector starts, 0 on most drives; 3584 (LBA 7) on a drive with the
//!   "Windows XP jumper" or a shifted USB bridge, so that LBA 63 is aligned.
//! - **Grain**: the boundary a start should sit on: the physical sector
//!   for correctness, the optimal I/O size or 1 MiB for convention.
//! - **Optimal I/O size**: the unit a device prefers for large I/O (a RAID
//!   stripe, an SSD's erase block hint); 0 or absent when it states none.
//! - **Minimum I/O size**: the smallest unit that avoids read-modify-write:
//!   usually the physical sector, a RAID chunk for striped devices.
//! - **Misaligned / suboptimal / aligned** ([`Class`]): off the physical
//!   grain; on it but off the optimal or 1 MiB grain; on both.

use serde::Serialize;

/// One mebibyte: the start convention of fdisk, parted, gdisk and Windows.
pub const MIB: u64 = 1 << 20;

/// The physical sector assumed when a drive reports less: first-generation
/// Advanced Format drives report 512 while being 4096 inside, and a 4 KiB
/// aligned start costs nothing on a genuine 512-byte drive.
pub(crate) const ASSUMED_PHYSICAL: u64 = 4096;

/// The write size whose cost we describe: the page and file-system block.
const WRITE_SIZE: u64 = 4096;

/// Bytes by which `pos` overshoots the last `grain` boundary at or before
/// it, boundaries being `offset + k * grain`. A zero grain has no boundary
/// to miss.
pub(crate) fn misalignment(pos: u64, grain: u64, offset: u64) -> u64 {
    if grain == 0 {
        return 0;
    }
    let (p, o) = (pos % grain, offset % grain);
    if p >= o {
        p - o
    } else {
        grain - (o - p)
    }
}

/// Whether `pos` sits on a `grain` boundary counted from `offset`.
pub(crate) fn is_aligned(pos: u64, grain: u64, offset: u64) -> bool {
    misalignment(pos, grain, offset) == 0
}

/// The last boundary at or before `pos`, if there is one.
pub(crate) fn align_down(pos: u64, grain: u64, offset: u64) -> Option<u64> {
    pos.checked_sub(misalignment(pos, grain, offset))
}

/// The first boundary at or after `pos`, if it fits in a u64.
pub(crate) fn align_up(pos: u64, grain: u64, offset: u64) -> Option<u64> {
    match misalignment(pos, grain, offset) {
        0 => Some(pos),
        m => pos.checked_add(grain - m),
    }
}

/// Greatest common divisor (Euclid).
pub(crate) fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Least common multiple, None on overflow or a zero input.
pub fn lcm(a: u64, b: u64) -> Option<u64> {
    if a == 0 || b == 0 {
        return None;
    }
    (a / gcd(a, b)).checked_mul(b)
}

/// The geometry verdicts are judged against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Geometry {
    /// Bytes per LBA.
    pub logical: u64,
    /// The effective physical sector: what a write must cover whole.
    pub physical: u64,
    /// True when `physical` is our 4096 assumption over a smaller report.
    pub physical_assumed: bool,
    /// Bytes from LBA 0 to the first physical boundary.
    pub alignment_offset: u64,
    /// Optimal I/O size when reported and sane.
    pub optimal_io: Option<u64>,
}

impl Geometry {
    /// The geometry to judge by. Unless `trust_kernel`, a reported physical
    /// sector below 4096 is raised to 4096: drives lie, and the raise is free.
    pub fn new(
        logical: u64,
        reported_physical: u64,
        alignment_offset: u64,
        optimal_io: Option<u64>,
        trust_kernel: bool,
    ) -> Geometry {
        let reported = reported_physical.max(logical);
        let physical_assumed = !trust_kernel && reported < ASSUMED_PHYSICAL;
        Geometry {
            logical,
            physical: if physical_assumed { ASSUMED_PHYSICAL } else { reported },
            physical_assumed,
            alignment_offset,
            optimal_io: optimal_io.filter(|&io| io > 0),
        }
    }

    /// Judge a partition or structure spanning `sectors` LBAs from `lba`.
    /// None when its byte position does not fit in a u64.
    pub fn judge(&self, lba: u64, sectors: u64) -> Option<Verdict> {
        let start_bytes = lba.checked_mul(self.logical)?;
        let end_bytes = lba.checked_add(sectors)?.checked_mul(self.logical)?;
        let off = self.alignment_offset;
        let skew = misalignment(start_bytes, self.physical, off);
        let aligned_physical = skew == 0;
        let aligned_optimal = self.optimal_io.map(|io| is_aligned(start_bytes, io, off));
        let aligned_1mib = is_aligned(start_bytes, MIB, off);
        let verdict = if !aligned_physical {
            Class::Misaligned
        } else if aligned_optimal == Some(false) || !aligned_1mib {
            Class::Suboptimal
        } else {
            Class::Aligned
        };
        Some(Verdict {
            start_bytes,
            aligned_physical,
            aligned_optimal,
            aligned_1mib,
            end_aligned_physical: is_aligned(end_bytes, self.physical, off),
            verdict,
            misalignment_bytes: skew,
            nearest_aligned_before: (!aligned_physical)
                .then(|| self.lba_down(start_bytes))
                .flatten(),
            nearest_aligned_after: (!aligned_physical).then(|| self.lba_up(start_bytes)).flatten(),
            cost: (!aligned_physical).then(|| self.cost(skew)),
        })
    }

    /// The last LBA at or before `pos` that is physically aligned.
    fn lba_down(&self, pos: u64) -> Option<u64> {
        let grain = lcm(self.physical, self.logical)?;
        let at = align_down(pos, grain, self.alignment_offset)?;
        (at % self.logical == 0).then_some(at / self.logical)
    }

    /// The first LBA at or after `pos` that is physically aligned.
    fn lba_up(&self, pos: u64) -> Option<u64> {
        let grain = lcm(self.physical, self.logical)?;
        let at = align_up(pos, grain, self.alignment_offset)?;
        (at % self.logical == 0).then_some(at / self.logical)
    }

    /// What a start `skew` bytes past a physical boundary costs, in words.
    fn cost(&self, skew: u64) -> String {
        let touched = skew.saturating_add(WRITE_SIZE).div_ceil(self.physical);
        let what = if touched > 1 {
            format!(
                "straddles {touched} physical sectors: the drive reads, modifies and rewrites each"
            )
        } else {
            "covers part of a physical sector: the drive reads, modifies and rewrites it"
                .to_string()
        };
        format!(
            "starts {skew} bytes past a {}-byte physical sector boundary: every 4 KiB write {what}",
            self.physical
        )
    }
}

/// The overall judgement of one start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Class {
    Aligned,
    /// A partition whose start is off a physical boundary while every
    /// data area inside it is on one (a LUKS payload, an LVM `pe_start`
    /// that makes up for the start): only its headers' rare writes straddle,
    /// and moving it would misalign the data. Only `audit` gives it.
    Compensated,
    /// Physically aligned, but off the optimal I/O size or the 1 MiB grid.
    Suboptimal,
    /// Not on a physical sector boundary: writes pay read-modify-write.
    Misaligned,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Aligned => "aligned",
            Class::Compensated => "compensated",
            Class::Suboptimal => "suboptimal",
            Class::Misaligned => "misaligned",
        }
    }
}

/// Everything we say about one start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub start_bytes: u64,
    pub aligned_physical: bool,
    pub aligned_optimal: Option<bool>,
    pub aligned_1mib: bool,
    /// Information only: whether the end falls on a physical boundary.
    pub end_aligned_physical: bool,
    pub verdict: Class,
    /// Bytes past the last physical boundary (0 when aligned).
    pub misalignment_bytes: u64,
    /// For misaligned starts: the nearest aligned LBAs on either side.
    pub nearest_aligned_before: Option<u64>,
    pub nearest_aligned_after: Option<u64>,
    /// For misaligned starts: the cost in plain words.
    pub cost: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Brute force: walk the boundaries one by one.
    fn boundaries(grain: u64, offset: u64, upto: u64) -> Vec<u64> {
        (0..).map(|k| offset % grain + k * grain).take_while(|&b| b <= upto).collect()
    }

    #[test]
    fn exhaustive_against_brute_force() {
        for grain in [512, 1024, 4096, 8192, 12288, 16384] {
            for offset in (0..grain * 2).step_by(512) {
                let marks = boundaries(grain, offset, 65_536 + 2 * grain);
                for pos in (0..65_536).step_by(256) {
                    let down = marks.iter().copied().filter(|&b| b <= pos).max();
                    let up = marks.iter().copied().find(|&b| b >= pos);
                    assert_eq!(align_down(pos, grain, offset), down, "down {pos} {grain} {offset}");
                    assert_eq!(align_up(pos, grain, offset), up, "up {pos} {grain} {offset}");
                    assert_eq!(is_aligned(pos, grain, offset), marks.contains(&pos));
                }
            }
        }
    }

    #[test]
    fn classic_starts_on_512e() {
        let g = Geometry::new(512, 4096, 0, None, false);
        for (lba, class) in [
            (63, Class::Misaligned),
            (34, Class::Misaligned),
            (40, Class::Suboptimal),
            (64, Class::Suboptimal),
            (2048, Class::Aligned),
            (2049, Class::Misaligned),
        ] {
            assert_eq!(g.judge(lba, 1000).unwrap().verdict, class, "LBA {lba}");
        }
    }

    #[test]
    fn every_start_up_to_4_mib() {
        for (logical, physical, offset) in
            [(512, 4096, 0), (512, 4096, 3584), (512, 8192, 0), (4096, 4096, 0)]
        {
            let g = Geometry::new(logical, physical, offset, None, false);
            for lba in 0..(4 * MIB / logical) {
                let v = g.judge(lba, 8).unwrap();
                let bytes = lba * logical;
                let on_phys =
                    bytes >= offset % physical && (bytes - offset % physical) % physical == 0;
                let on_mib = bytes >= offset && (bytes - offset) % MIB == 0;
                assert_eq!(v.aligned_physical, on_phys, "{logical}/{physical}/{offset} LBA {lba}");
                assert_eq!(v.aligned_1mib, on_mib, "{logical}/{physical}/{offset} LBA {lba}");
                assert_eq!(v.cost.is_some(), !on_phys);
                if let Some(before) = v.nearest_aligned_before {
                    assert!(before < lba && g.judge(before, 8).unwrap().aligned_physical);
                }
                if let Some(after) = v.nearest_aligned_after {
                    assert!(after > lba && g.judge(after, 8).unwrap().aligned_physical);
                    assert!(((lba + 1)..after).all(|l| !g.judge(l, 8).unwrap().aligned_physical));
                }
            }
        }
    }

    #[test]
    fn jumper_makes_63_fast_and_64_slow() {
        let g = Geometry::new(512, 4096, 3584, None, false);
        assert!(g.judge(63, 1).unwrap().aligned_physical);
        let v = g.judge(64, 1).unwrap();
        assert_eq!(v.verdict, Class::Misaligned);
        assert_eq!((v.nearest_aligned_before, v.nearest_aligned_after), (Some(63), Some(71)));
    }

    #[test]
    fn assumption_and_trust() {
        let lying = Geometry::new(512, 512, 0, None, false);
        assert_eq!((lying.physical, lying.physical_assumed), (4096, true));
        assert_eq!(lying.judge(63, 1).unwrap().verdict, Class::Misaligned);
        let trusted = Geometry::new(512, 512, 0, None, true);
        assert_eq!((trusted.physical, trusted.physical_assumed), (512, false));
        assert_eq!(trusted.judge(63, 1).unwrap().verdict, Class::Suboptimal);
        let big = Geometry::new(512, 16384, 0, None, false);
        assert_eq!((big.physical, big.physical_assumed), (16384, false));
    }

    #[test]
    fn optimal_io_makes_suboptimal() {
        let g = Geometry::new(512, 4096, 0, Some(3 * MIB), false);
        assert_eq!(g.judge(2048, 8).unwrap().aligned_optimal, Some(false));
        assert_eq!(g.judge(2048, 8).unwrap().verdict, Class::Suboptimal);
        assert_eq!(g.judge(6144, 8).unwrap().verdict, Class::Aligned);
        assert_eq!(Geometry::new(512, 4096, 0, Some(0), false).optimal_io, None);
    }

    #[test]
    fn cost_counts_straddled_sectors() {
        let g = Geometry::new(512, 4096, 0, None, false);
        let cost = g.judge(63, 1).unwrap().cost.unwrap();
        assert!(cost.contains("3584 bytes past a 4096-byte"), "{cost}");
        assert!(cost.contains("straddles 2 physical sectors"), "{cost}");
        let wide = Geometry::new(512, 8192, 0, None, false).judge(8, 1).unwrap();
        assert!(wide.cost.unwrap().contains("covers part of a physical sector"));
    }

    #[test]
    fn huge_positions_do_not_overflow() {
        let g = Geometry::new(4096, 4096, 0, None, false);
        assert!(g.judge(u64::MAX / 4096 + 1, 1).is_none());
        assert!(g.judge(u64::MAX / 4096 - 1, 5).is_none());
        assert_eq!(align_up(u64::MAX, 4096, 0), None);
        assert_eq!(lcm(u64::MAX, u64::MAX - 1), None);
    }

    proptest! {
        #[test]
        fn align_brackets_pos(pos in any::<u64>(), shift in 9u32..25, offset in any::<u64>()) {
            let grain = 1u64 << shift;
            if let Some(d) = align_down(pos, grain, offset) {
                prop_assert!(d <= pos && pos - d < grain && is_aligned(d, grain, offset));
            }
            if let Some(u) = align_up(pos, grain, offset) {
                prop_assert!(u >= pos && u - pos < grain && is_aligned(u, grain, offset));
            }
            prop_assert_eq!(is_aligned(pos, grain, offset), align_up(pos, grain, offset) == Some(pos));
        }

        #[test]
        fn lcm_is_common_multiple(a in 1u64..1 << 24, b in 1u64..1 << 24) {
            let m = lcm(a, b).unwrap();
            prop_assert!(m % a == 0 && m % b == 0 && m <= a * b);
        }
    }
}
