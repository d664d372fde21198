//! What a move does to the layers inside the partition. Every layer's
//! data moves with the partition, so a layer aligned today (a LUKS payload
//! or LVM `pe_start` that cryptsetup or LVM placed to make up for the
//! partition's start) ends up off a boundary when the shift is not a whole
//! number of physical sectors. A move must never make alignment worse.

use crate::align::Geometry;
use crate::io::ReadAt;
use crate::stack::{self, Layer};
use crate::table::Partition;
use serde::Serialize;

/// One layer's data start, judged before and after a move.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LayerShift {
    /// libblkid's TYPE ("crypto_LUKS", "LVM2_member", "lvm", "ext4", ...).
    pub layer: &'static str,
    pub label: Option<String>,
    pub depth: u32,
    /// Where its data starts on the disk now, and after the move.
    pub before_bytes: u64,
    pub after_bytes: u64,
    /// Bytes past a physical boundary now and after (0: aligned).
    pub off_before: u64,
    pub off_after: u64,
}

impl LayerShift {
    /// Aligned today, off after the move.
    pub(crate) fn worsened(&self) -> bool {
        self.off_before == 0 && self.off_after != 0
    }

    /// "crypto_LUKS data at byte X: aligned → 3584 bytes off at byte Y".
    pub fn describe(&self) -> String {
        let word = |off: u64| match off {
            0 => "aligned".to_string(),
            off => format!("{off} bytes off"),
        };
        let label = self.label.as_deref().map(|l| format!(" {l}")).unwrap_or_default();
        format!(
            "{}{label} data at byte {}: {} → {} at byte {}",
            self.layer,
            self.before_bytes,
            word(self.off_before),
            word(self.off_after),
            self.after_bytes
        )
    }
}

/// The layers partition `p` (logical sectors of `ss` bytes) holds, found
/// from their headers.
pub fn of(dev: &dyn ReadAt, p: &Partition, ss: u64) -> Vec<Layer> {
    match (p.start.checked_mul(ss), p.size.checked_mul(ss)) {
        (Some(at), Some(len)) => stack::walk(dev, at, len),
        _ => Vec::new(),
    }
}

/// Each of `layers` judged where it is and where a move of its partition
/// from LBA `old` to LBA `new` puts it. A layer whose new place cannot be
/// expressed is left out.
pub(crate) fn shifts(layers: &[Layer], geometry: &Geometry, old: u64, new: u64) -> Vec<LayerShift> {
    let ss = geometry.logical;
    let (Some(old), Some(new)) = (old.checked_mul(ss), new.checked_mul(ss)) else {
        return Vec::new();
    };
    let off = |layer: &Layer| {
        stack::judge(layer, geometry.physical, geometry.alignment_offset, geometry.optimal_io)
            .misalignment_bytes
    };
    layers
        .iter()
        .filter_map(|layer| {
            let after = layer.absolute_offset_bytes.checked_sub(old)?.checked_add(new)?;
            let moved = Layer { absolute_offset_bytes: after, ..layer.clone() };
            Some(LayerShift {
                layer: layer.name,
                label: layer.label.clone(),
                depth: layer.depth,
                before_bytes: layer.absolute_offset_bytes,
                after_bytes: after,
                off_before: off(layer),
                off_after: off(&moved),
            })
        })
        .collect()
}

/// Whether `p`, whose start is off a boundary, holds layers that put all
/// their data on one: moving it cannot help and would misalign them.
pub fn compensated(layers: &[Layer], geometry: &Geometry) -> bool {
    let judged: Vec<_> = layers
        .iter()
        .map(|l| stack::judge(l, geometry.physical, geometry.alignment_offset, geometry.optimal_io))
        .collect();
    stack::compensates(layers.iter().zip(&judged))
}

/// Why the move of partition `n` to LBA `new` is refused: the layers it
/// would misalign, each with what the move does to it. None when it
/// misaligns nothing aligned today.
pub fn refusal(n: u32, new: u64, shifts: &[LayerShift]) -> Option<String> {
    if !shifts.iter().any(LayerShift::worsened) {
        return None;
    }
    let each: Vec<String> = shifts.iter().map(LayerShift::describe).collect();
    Some(format!(
        "moving it to LBA {new} would misalign what is aligned today ({}). Partition {n}'s \
         contents make up for its start, so the move gains nothing; --misalign-layers moves it \
         anyway",
        each.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stack::{Details, Kind};

    fn luks(at: u64, payload: u64) -> Layer {
        Layer {
            kind: Kind::Luks,
            name: "crypto_LUKS",
            label: None,
            depth: 0,
            offset_bytes: payload,
            absolute_offset_bytes: at + payload,
            size_bytes: None,
            unit_bytes: Some(512),
            details: Details::Luks {
                version: 2,
                payload_offset_bytes: payload,
                sector_bytes: 512,
                cipher: None,
                key_material_end_bytes: None,
            },
            note: None,
        }
    }

    fn geometry() -> Geometry {
        Geometry::new(512, 4096, 0, None, true)
    }

    /// cryptsetup's payload at 16 MiB + 512 on a partition at LBA 63: the
    /// data is aligned where it is, and a move to 2048 would put it 512
    /// bytes off; its default 16 MiB payload moves into alignment instead.
    #[test]
    fn a_compensated_payload_is_kept_and_a_plain_one_is_fixed() {
        let g = geometry();
        let kept = [luks(63 * 512, (16 << 20) + 512)];
        assert!(compensated(&kept, &g));
        let s = shifts(&kept, &g, 63, 2048);
        assert_eq!((s[0].off_before, s[0].off_after), (0, 512));
        let why = refusal(1, 2048, &s).expect("refused");
        assert!(why.contains("aligned → 512 bytes off"), "{why}");
        let plain = [luks(63 * 512, 16 << 20)];
        assert!(!compensated(&plain, &g));
        let s = shifts(&plain, &g, 63, 2048);
        assert_eq!((s[0].off_before, s[0].off_after), (3584, 0));
        assert_eq!(refusal(1, 2048, &s), None);
    }

    /// A layer at the partition's first byte (ext4) never compensates.
    #[test]
    fn a_file_system_at_the_start_is_off_with_its_partition() {
        let ext = Layer { offset_bytes: 0, absolute_offset_bytes: 63 * 512, ..luks(0, 0) };
        assert!(!compensated(&[ext], &geometry()));
        assert!(!compensated(&[], &geometry()));
    }
}
