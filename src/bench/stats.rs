//! The arithmetic of results: percentiles, rates, splitting cells into a
//! fast and a slow cluster, and how long the rest of a run will take.

use serde::Serialize;

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Latency {
    pub p5: f64,
    pub p50: f64,
    pub p95: f64,
}

impl Latency {
    /// From samples in microseconds, in any order; zeros when empty.
    pub fn of(samples: &[f64]) -> Latency {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Latency {
            p5: percentile(&sorted, 0.05),
            p50: percentile(&sorted, 0.5),
            p95: percentile(&sorted, 0.95),
        }
    }
}

/// Linear interpolation between closest ranks of sorted samples.
pub(crate) fn percentile(sorted: &[f64], q: f64) -> f64 {
    let Some(last) = sorted.len().checked_sub(1) else {
        return 0.0;
    };
    let rank = q.clamp(0.0, 1.0) * last as f64;
    let (low, high) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[low] + (sorted[high] - sorted[low]) * (rank - low as f64)
}

pub(crate) fn median(samples: &[f64]) -> f64 {
    Latency::of(samples).p50
}

/// Operations and kilobytes (1000 bytes) per second for `count` operations
/// of `size` bytes taking `msec` in all. In floating point from u64s: phybs
/// computed count * 1000 in an int and overflowed. Zero time gives zeros.
pub fn rates(count: u64, size: u64, msec: f64) -> (f64, f64) {
    if msec <= 0.0 {
        return (0.0, 0.0);
    }
    let ops = count as f64 * 1000.0 / msec;
    let kbps = count as f64 * size as f64 / msec;
    (ops, kbps)
}

/// Ratio below which two cell medians count as the same speed. The
/// emulator's smallest penalty (one read-modify-write) is 2×, real drives'
/// a revolution per write, several times a fast write.
pub(crate) const GAP: f64 = 1.5;

/// Which cells are fast, from their medians: the widest gap between
/// neighbours in sorted order, when it is at least GAP, separates the fast
/// cluster from the slow one. None when no such gap exists.
pub fn split(medians: &[f64]) -> Option<Vec<bool>> {
    let mut sorted: Vec<f64> = medians.iter().copied().filter(|m| *m > 0.0).collect();
    sorted.sort_by(f64::total_cmp);
    let (ratio, below) =
        sorted.windows(2).map(|w| (w[1] / w[0], w[0])).max_by(|a, b| a.0.total_cmp(&b.0))?;
    (ratio >= GAP).then(|| medians.iter().map(|m| *m <= below).collect())
}

/// Probability that a fast sample beats a slow one (the area under the ROC
/// curve): 1.0 when the clusters do not overlap at all.
pub(crate) fn separation(fast: &[f64], slow: &[f64]) -> f64 {
    let pairs = fast.len() * slow.len();
    if pairs == 0 {
        return 0.0;
    }
    let wins: f64 = fast
        .iter()
        .flat_map(|f| {
            slow.iter().map(move |s| match f.total_cmp(s) {
                std::cmp::Ordering::Less => 1.0,
                std::cmp::Ordering::Equal => 0.5,
                std::cmp::Ordering::Greater => 0.0,
            })
        })
        .sum();
    wins / pairs as f64
}

/// How sure "no penalty" is, from cell medians: 1 when the 10th and 90th
/// percentiles agree, falling to 0 as their ratio nears GAP.
pub(crate) fn uniformity(medians: &[f64]) -> f64 {
    let mut sorted = medians.to_vec();
    sorted.sort_by(f64::total_cmp);
    let (low, high) = (percentile(&sorted, 0.1), percentile(&sorted, 0.9));
    if low <= 0.0 {
        return 0.0;
    }
    (1.0 - (high / low - 1.0) / (GAP - 1.0)).clamp(0.0, 1.0)
}

/// Seconds until `total` requests are done, from samples of progress
/// (seconds since the start, requests done by then) in time order, the
/// last taken now. The pace is that of the later half of the requests
/// done: an early stall (the untimed backup, a drive waking up) falls out
/// of the window as the run goes on, while a stall under way counts in
/// full. None until a request has finished.
pub fn eta(samples: &[(f64, u64)], total: u64) -> Option<f64> {
    let &(now, done) = samples.last()?;
    // The latest sample with at most half the requests done.
    let from = samples.partition_point(|s| s.1 <= done / 2).checked_sub(1)?;
    let (since, then) = samples[from];
    let requests = done.checked_sub(then).filter(|&n| n > 0)?;
    Some((now - since) / requests as f64 * total.saturating_sub(done) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_from_count_and_msec_do_not_overflow() {
        assert_eq!(rates(1000, 4096, 1000.0), (1000.0, 4096.0));
        assert_eq!(rates(100, 512, 250.0), (400.0, 204.8));
        // phybs: count * 1000 in a 32-bit int overflowed past ~2.1 million.
        let (ops, kbps) = rates(u64::MAX, 65536, 1.0);
        assert!(ops.is_finite() && ops > 1e21);
        assert!(kbps.is_finite() && kbps > 1e24);
        assert_eq!(rates(5, 4096, 0.0), (0.0, 0.0));
    }

    #[test]
    fn percentiles_interpolate() {
        let l = Latency::of(&[4.0, 1.0, 3.0, 2.0, 5.0]);
        assert_eq!((l.p5, l.p50, l.p95), (1.2, 3.0, 4.8));
        assert_eq!(Latency::of(&[]).p50, 0.0);
        assert_eq!(median(&[7.0]), 7.0);
    }

    #[test]
    fn split_finds_the_widest_gap() {
        let medians = [4400.0, 1150.0, 4300.0, 4500.0];
        assert_eq!(split(&medians), Some(vec![false, true, false, false]));
        assert_eq!(split(&[1150.0, 1200.0, 1180.0]), None);
        assert_eq!(split(&[1000.0]), None);
        // Three levels: the widest gap wins.
        assert_eq!(split(&[1000.0, 2000.0, 9000.0]), Some(vec![true, true, false]));
    }

    #[test]
    fn separation_and_uniformity() {
        assert_eq!(separation(&[1.0, 2.0], &[3.0, 4.0]), 1.0);
        assert_eq!(separation(&[1.0, 4.0], &[3.0, 5.0]), 0.75);
        assert_eq!(separation(&[], &[1.0]), 0.0);
        assert_eq!(uniformity(&[100.0; 10]), 1.0);
        assert_eq!(uniformity(&[100.0, 200.0, 100.0, 200.0]), 0.0);
    }

    /// Progress sampled every 0.1 s: nothing for `stall` seconds, then
    /// `rate` requests a second.
    fn run_after_stall(stall: f64, rate: f64, until: f64) -> Vec<(f64, u64)> {
        (0..=(until * 10.0).round() as u64)
            .map(|tick| {
                let at = tick as f64 / 10.0;
                (at, ((at - stall).max(0.0) * rate).round() as u64)
            })
            .collect()
    }

    #[test]
    fn eta_is_unknown_until_a_request_finishes() {
        assert_eq!(eta(&[], 100), None);
        assert_eq!(eta(&run_after_stall(5.0, 100.0, 4.0), 1000), None);
    }

    #[test]
    fn eta_forgets_an_early_stall() {
        // 25 s of work (2500 requests at 100/s) behind a 5 s backup: an
        // estimate from the first request's duration would say hours.
        let total = 2500;
        for until in [6.0, 7.0, 10.0, 20.0, 29.0] {
            let samples = run_after_stall(5.0, 100.0, until);
            let truth = 30.0 - until;
            let guess = eta(&samples, total).expect("requests finished");
            assert!(
                guess <= 2.0 * truth && truth <= 2.0 * guess,
                "at {until} s: {guess} vs {truth}"
            );
        }
        let samples = run_after_stall(5.0, 100.0, 20.0);
        assert!((eta(&samples, total).unwrap() - 10.0).abs() < 0.01);
    }

    #[test]
    fn eta_grows_during_a_stall_under_way() {
        let mut samples = run_after_stall(0.0, 100.0, 5.0);
        let before = eta(&samples, 1000).unwrap();
        samples.extend((51..=100).map(|tick| (tick as f64 / 10.0, 500)));
        let during = eta(&samples, 1000).unwrap();
        assert!((before - 5.0).abs() < 0.01 && during > 2.0 * before, "{before} then {during}");
        assert_eq!(eta(&run_after_stall(0.0, 100.0, 10.0), 1000), Some(0.0));
    }
}
