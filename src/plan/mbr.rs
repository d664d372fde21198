//! An MBR's layout: up to four primaries, or three and an extended
//! partition holding a logical per request behind its EBR; or the numbers
//! an sfdisk dump gives.

use super::error::PlanError;
use super::layout::Layouter;
use super::planned::{planned, PlannedPartition, Role};
use super::request::{PartitionRequest, Size};
use super::script::{Container, Slots};

impl Layouter<'_> {
    pub(super) fn mbr(
        &mut self,
        requests: &[PartitionRequest],
    ) -> Result<Vec<PlannedPartition>, PlanError> {
        // Leave the first grain for the MBR and a boot loader.
        self.cursor = self.cursor.max(self.grain / self.disk.logical);
        let primaries = if requests.len() > 4 { 3 } else { requests.len() };
        let mut out = Vec::new();
        for (i, r) in requests.iter().take(primaries).enumerate() {
            out.push(self.primary(i as u32 + 1, r)?.of(i));
        }
        if requests.len() > 4 {
            let logicals: Vec<(usize, &PartitionRequest)> =
                requests.iter().enumerate().skip(3).collect();
            let ext = Container { after: 3, number: Some(4), min_start: None, size: Size::Rest };
            self.extended(&ext, &logicals, &mut out)?;
        }
        Ok(out)
    }

    /// A primary partition at the cursor or the request's start.
    fn primary(
        &mut self,
        number: u32,
        r: &PartitionRequest,
    ) -> Result<PlannedPartition, PlanError> {
        let start = match self.first.take() {
            Some(fixed) => fixed,
            None => self.next_start(self.cursor.max(r.min_start.unwrap_or(0))),
        };
        let size = self.size_at(number, r.size, start)?;
        self.cursor = start + size;
        Ok(planned(number, start, size, Role::Primary, r, None))
    }

    /// An MBR by the numbers of `slots`: its primaries and its extended
    /// partition in the order of their starts (when every one has a start,
    /// else as listed), listed by number.
    pub(super) fn numbered(
        &mut self,
        requests: &[PartitionRequest],
        slots: &Slots,
    ) -> Result<Vec<PlannedPartition>, PlanError> {
        self.cursor = self.cursor.max(self.grain / self.disk.logical);
        let logicals: Vec<(usize, &PartitionRequest)> =
            requests.iter().enumerate().filter(|&(i, _)| slots.numbers[i] > 4).collect();
        let mut units: Vec<Option<usize>> =
            (0..requests.len()).filter(|&i| slots.numbers[i] <= 4).map(Some).collect();
        if let Some(ext) = &slots.extended {
            let at = units.iter().flatten().filter(|&&i| i < ext.after).count();
            units.insert(at, None);
        }
        let first_logical = logicals.first().and_then(|(_, r)| r.min_start);
        let key = |u: &Option<usize>| match u {
            Some(i) => requests[*i].min_start,
            None => slots.extended.as_ref().and_then(|e| e.min_start).or(first_logical),
        };
        if units.iter().all(|u| key(u).is_some()) {
            units.sort_by_key(key);
        }
        let mut out = Vec::new();
        for unit in units {
            match (unit, &slots.extended) {
                (Some(i), _) => out.push(self.primary(slots.numbers[i], &requests[i])?.of(i)),
                (None, Some(ext)) => self.extended(ext, &logicals, &mut out)?,
                (None, None) => {}
            }
        }
        out.sort_by_key(|p| p.number);
        Ok(out)
    }

    /// The extended partition `ext` holding one EBR and one logical per
    /// request, numbered from 5, each logical on the grain, its EBR in the
    /// sector run before it. A size `ext` gives is kept unless its
    /// logicals need more, or it no longer fits from the aligned start
    /// (then it holds just its logicals), and bounds a logical's `rest`.
    fn extended(
        &mut self,
        ext: &Container,
        logicals: &[(usize, &PartitionRequest)],
        out: &mut Vec<PlannedPartition>,
    ) -> Result<(), PlanError> {
        let number = ext.number.unwrap_or(4);
        // The fixed first start is a primary's, before any extended.
        self.first = None;
        let ext_start = self.next_start(self.cursor.max(ext.min_start.unwrap_or(0)));
        let fixed_end = match ext.size {
            Size::Rest if !logicals.is_empty() => None,
            size => match self.size_at(number, size, ext_start) {
                Ok(sectors) => Some(ext_start + sectors),
                // An old dump's container, to the disk's end from LBA 63,
                // overruns it from an aligned start; only its logicals count.
                Err(PlanError::NoRoom(..)) if !logicals.is_empty() => None,
                Err(e) => return Err(e),
            },
        };
        let at = out.len();
        let mut ebr = ext_start;
        for (k, &(i, r)) in logicals.iter().enumerate() {
            let n = 5 + k as u32;
            let start = self.next_start((ebr + 1).max(r.min_start.unwrap_or(0)));
            let size = match (r.size, fixed_end) {
                (Size::Rest, Some(end)) => end
                    .checked_sub(start)
                    .filter(|&s| s > 0)
                    .ok_or(PlanError::NoRoom(n as usize, 1, start, end.saturating_sub(1)))?,
                (size, _) => self.size_at(n, size, start)?,
            };
            out.push(planned(n, start, size, Role::Logical, r, Some(ebr)).of(i));
            self.cursor = start + size;
            ebr = self.cursor;
        }
        let end = fixed_end.map_or(self.cursor, |e| e.max(self.cursor));
        self.cursor = end;
        let container = PartitionRequest {
            min_start: None,
            size: Size::Rest,
            type_id: "0x05".into(),
            name: None,
        };
        out.insert(
            at,
            planned(number, ext_start, end - ext_start, Role::Extended, &container, None),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::align::MIB;
    use crate::plan::grain::Disk;
    use crate::plan::tests::{disk, plan_on, req};
    use crate::plan::{parse_script, plan_with, Align, NewLabel, Plan, Script};

    fn script_on(
        disk: &Disk,
        label: NewLabel,
        align: Align,
        cylinders: bool,
        script: &Script,
    ) -> Result<Plan, PlanError> {
        let slots = if label == NewLabel::Mbr { script.slots()? } else { None };
        plan_with(disk, label, align, cylinders, &script.requests, slots.as_ref())
    }

    #[test]
    fn mbr_logicals_each_aligned_with_their_ebr_before() {
        let reqs: Vec<PartitionRequest> = (0..6).map(|_| req(Size::Bytes(4 * MIB))).collect();
        let p = plan_on(&disk(1 << 30, 512), NewLabel::Mbr, Align::Optimal, false, &reqs).unwrap();
        let numbers: Vec<u32> = p.partitions.iter().map(|x| x.number).collect();
        assert_eq!(numbers, [1, 2, 3, 4, 5, 6, 7]);
        let ext = &p.partitions[3];
        assert_eq!(ext.role, Role::Extended);
        for l in &p.partitions[4..] {
            assert_eq!(l.role, Role::Logical);
            assert_eq!(l.start % 2048, 0);
            let ebr = l.ebr.unwrap();
            assert!(ebr < l.start && ebr >= ext.start && l.start + l.size <= ext.start + ext.size);
        }
        assert_eq!(p.partitions[4].ebr, Some(ext.start));
    }

    /// `sfdisk -d` of an MBR whose primary 3 lies after the extended
    /// partition: sfdisk lists it before the logicals, by number.
    const PRIMARY_AFTER_EXTENDED: &str = "label: dos\nunit: sectors\n\n\
        d1 : start=2048, size=200000, type=83\n\
        d2 : start=204800, size=100000, type=5\n\
        d3 : start=329728, size=50000, type=8e\n\
        d5 : start=206848, size=20000, type=83\n\
        d6 : start=229376, size=30000, type=82\n";

    fn layout(p: &Plan) -> Vec<(u32, u64, u64, Role, Option<usize>)> {
        p.partitions.iter().map(|x| (x.number, x.start, x.size, x.role, x.request)).collect()
    }

    fn plan_mbr(script: &str) -> Result<Plan, PlanError> {
        let s = parse_script(script).unwrap();
        script_on(&disk(256 * MIB, 512), NewLabel::Mbr, Align::Optimal, false, &s)
    }

    /// Found by a user: the primary after the extended partition was
    /// refused, or everything renumbered and a logical made primary.
    #[test]
    fn numbered_mbr_dumps_keep_every_number_and_role() {
        use Role::{Extended, Logical, Primary};
        let want = [
            (1, 2048, 200000, Primary, Some(0)),
            (2, 204800, 100000, Extended, None),
            (3, 329728, 50000, Primary, Some(1)),
            (5, 206848, 20000, Logical, Some(2)),
            (6, 229376, 30000, Logical, Some(3)),
        ];
        assert_eq!(layout(&plan_mbr(PRIMARY_AFTER_EXTENDED).unwrap()), want);
        // Listed after the logicals, as a user may write it: the same table.
        let (head, tail) = PRIMARY_AFTER_EXTENDED.split_once("d3 :").unwrap();
        let (p3, logicals) = tail.split_once('\n').unwrap();
        let moved = format!("{head}{logicals}d3 :{p3}\n");
        let got = layout(&plan_mbr(&moved).unwrap());
        let requests = [Some(0), None, Some(3), Some(1), Some(2)];
        let want: Vec<_> =
            want.iter().zip(requests).map(|(&(n, s, z, r, _), i)| (n, s, z, r, i)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn numbered_mbr_logicals_count_from_5_in_order_and_get_a_container() {
        use Role::{Extended, Logical, Primary};
        // sfdisk makes 7 the sixth: logical numbers follow the EBR chain.
        let p = plan_mbr("d1 : size=2048\nd2 : size=100, type=5\nd5 : size=2048\nd7 : size=2048\n")
            .unwrap();
        let got: Vec<_> = p.partitions.iter().map(|x| (x.number, x.role, x.request)).collect();
        assert_eq!(
            got,
            [
                (1, Primary, Some(0)),
                (2, Extended, None),
                (5, Logical, Some(1)),
                (6, Logical, Some(2))
            ]
        );
        assert!(p.partitions[1].size >= 3 * 2048, "grown to hold its logicals");
        // No extended line: the planner's, in the first free slot.
        let p = plan_mbr("d2 : size=2048\nd5 : size=2048\nd1 : size=2048\n").unwrap();
        let got: Vec<_> = p.partitions.iter().map(|x| (x.number, x.role)).collect();
        assert_eq!(got, [(1, Primary), (2, Primary), (3, Extended), (5, Logical)]);
        let starts: Vec<_> = p.partitions.iter().map(|x| x.start).collect();
        assert_eq!(starts, [8192, 2048, 4096, 6144], "in the order listed");
        // A sized extended partition bounds a logical's rest.
        let p = plan_mbr("d1 : start=2048, size=10000, type=5\nd5 : start=4096\n").unwrap();
        assert_eq!((p.partitions[1].start, p.partitions[1].size), (4096, 12048 - 4096));
    }

    #[test]
    fn numbered_mbr_refusals() {
        for (script, want) in [
            ("d1 : size=1\nd1 : size=1\n", PlanError::Duplicate(1)),
            ("d1 : size=1\nd1 : size=10, type=5\n", PlanError::Duplicate(1)),
            ("d5 : size=10, type=5\nd6 : size=1\n", PlanError::Slot(5)),
            ("d0 : size=1\n", PlanError::Slot(0)),
            ("d1 : size=9, type=5\nd2 : size=9, type=5\nd5 : size=1\n", PlanError::Extendeds(2)),
            (
                "d1 : size=1\nd2 : size=1\nd3 : size=1\nd4 : size=1\nd5 : size=1\n",
                PlanError::NoSlot,
            ),
        ] {
            assert_eq!(plan_mbr(script), Err(want), "{script}");
        }
        // Without node names (or on GPT) the planner numbers in order.
        let s = parse_script("size=1MiB\nsize=9MiB, type=5\nsize=1MiB\n").unwrap();
        let p = script_on(&disk(256 * MIB, 512), NewLabel::Mbr, Align::Optimal, false, &s).unwrap();
        assert_eq!(p.partitions.iter().map(|x| x.number).collect::<Vec<_>>(), [1, 2]);
        let s = parse_script("d1 : size=2048\nd5 : size=2048\n").unwrap();
        let p = script_on(&disk(256 * MIB, 512), NewLabel::Gpt, Align::Optimal, false, &s).unwrap();
        assert_eq!(p.partitions.iter().map(|x| x.number).collect::<Vec<_>>(), [1, 2]);
    }
}
