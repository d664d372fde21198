//! The three workloads of the articles as lists of cells (a size at an
//! offset, with the positions to write) and their interleaved schedule.

use super::request::{BenchError, IoRequest, CHUNK_BYTES};
use super::rng::Rng;

/// One (size, offset) combination and every position it is measured at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cell {
    pub size: u64,
    pub offset: u64,
    /// Distance between positions: the grid of `random`, the step of
    /// `phybs`, the stride of `stride`.
    pub step: u64,
    pub positions: Vec<u64>,
}

/// Cells, and how many consecutive positions of a cell run together
/// (1 interleaves every request; `stride` keeps runs sequential).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoPlan {
    pub cells: Vec<Cell>,
    pub run: usize,
}

impl IoPlan {
    /// Whether some size is measured at two or more offsets: a line to draw
    /// (see [`super::svg`]).
    pub fn has_line(&self) -> bool {
        let mut cells: Vec<(u64, u64)> = self.cells.iter().map(|c| (c.size, c.offset)).collect();
        cells.sort_unstable();
        cells.dedup();
        cells.windows(2).any(|pair| pair[0].0 == pair[1].0)
    }
}

/// Where on the device the workload may go, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: u64,
    pub len: u64,
}

/// The largest request: its backup is held in memory.
pub(crate) const MAX_SIZE: u64 = CHUNK_BYTES;

/// The most requests in one run: each takes some 40 bytes of bookkeeping
/// (position, schedule, latency) before anything is measured.
pub(crate) const MAX_REQUESTS: u64 = 10_000_000;

fn invalid(message: String) -> BenchError {
    BenchError::Invalid(message)
}

fn check_size(size: u64) -> Result<(), BenchError> {
    if size == 0 {
        return Err(invalid("size must not be 0".into()));
    }
    if size > MAX_SIZE {
        return Err(invalid(format!(
            "size {size} is larger than the {MAX_SIZE}-byte (64 MiB) limit per request"
        )));
    }
    Ok(())
}

/// `per_cell` requests in each of `cells` cells, within MAX_REQUESTS.
fn check_count(what: &str, per_cell: u64, cells: usize) -> Result<(), BenchError> {
    if per_cell == 0 {
        return Err(invalid(format!("{what} gives no request per cell: at least 1 is needed")));
    }
    let total = per_cell.saturating_mul(cells as u64);
    if total > MAX_REQUESTS {
        return Err(invalid(format!(
            "{what} asks for {} requests ({per_cell} × {cells} cells); at most {MAX_REQUESTS} per run",
            if total == u64::MAX { "more than 2^64".to_string() } else { total.to_string() }
        )));
    }
    Ok(())
}

fn check_sector(what: &str, value: u64, logical: u64) -> Result<(), BenchError> {
    if logical == 0 || value % logical != 0 {
        return Err(invalid(format!(
            "{what} {value} is not a multiple of the {logical}-byte logical sector (O_DIRECT needs whole sectors)"
        )));
    }
    Ok(())
}

/// A workload as a command asks for it: each figure left out (None, or an
/// empty list) takes its default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Workload {
    /// [`random`]: the size [default: 4096, or the logical sector when
    /// larger], the offsets [default: 0 and the logical sector, when
    /// smaller than the size], the requests per cell [default: 1000].
    Random { size: Option<u64>, offsets: Vec<u64>, count: Option<u64> },
    /// [`phybs`]: the requests per cell [default: 100].
    Phybs { count: Option<u64> },
    /// [`stride`]: the size as for random, the stride [default: the size],
    /// the bytes from each base [default: 4 MiB], the base sectors
    /// [default: 0, 8, 34, 40, 42, the articles' partition starts].
    Stride { size: Option<u64>, stride: Option<u64>, total: Option<u64>, bases: Vec<u64> },
}

impl Workload {
    /// The plan of this workload within `span`.
    pub fn plan(&self, span: Span, logical: u64, rng: &mut Rng) -> Result<IoPlan, BenchError> {
        let size = |asked: &Option<u64>| asked.unwrap_or(logical.max(4096));
        let or = |given: &Vec<u64>, default: Vec<u64>| {
            if given.is_empty() {
                default
            } else {
                given.clone()
            }
        };
        match self {
            Workload::Random { size: asked, offsets, count } => {
                let size = size(asked);
                let offsets = or(offsets, default_offsets(size, logical));
                random(size, &offsets, count.unwrap_or(1000), span, logical, rng)
            }
            Workload::Phybs { count } => phybs(count.unwrap_or(100), span, logical),
            Workload::Stride { size: asked, stride: step, total, bases } => {
                let size = size(asked);
                let bases = or(bases, vec![0, 8, 34, 40, 42]);
                stride(size, step.unwrap_or(size), total.unwrap_or(4 << 20), &bases, span, logical)
            }
        }
    }
}

/// The offsets `random` compares unless told: aligned against one logical
/// sector off, when the size allows both.
fn default_offsets(size: u64, logical: u64) -> Vec<u64> {
    if logical < size {
        vec![0, logical]
    } else {
        vec![0]
    }
}

/// `count` writes of `size` at random points of a `size` grid plus each
/// offset: the classic 4 KiB at 0 against 4 KiB at 512.
pub fn random(
    size: u64,
    offsets: &[u64],
    count: u64,
    span: Span,
    logical: u64,
    rng: &mut Rng,
) -> Result<IoPlan, BenchError> {
    check_size(size)?;
    check_sector("size", size, logical)?;
    check_count(&format!("count {count}"), count, offsets.len())?;
    let cells = offsets
        .iter()
        .map(|&offset| {
            check_sector("offset", offset, logical)?;
            // Grid points k with offset + k*size + size inside the span.
            let room = span.len.checked_sub(offset).and_then(|r| r.checked_sub(size));
            let slots = room.map(|r| r / size + 1).ok_or_else(|| too_small(size, offset, span))?;
            let positions =
                (0..count).map(|_| span.start + offset + rng.below(slots) * size).collect();
            Ok(Cell { size, offset, step: size, positions })
        })
        .collect::<Result<_, BenchError>>()?;
    Ok(IoPlan { cells, run: 1 })
}

fn too_small(size: u64, offset: u64, span: Span) -> BenchError {
    invalid(format!(
        "a {size}-byte write at offset {offset} does not fit in the {}-byte span",
        span.len
    ))
}

/// phybs' matrix: sizes from the logical sector to 8x, offsets at every
/// logical sector below the size, `count` writes each `4 * size` apart.
pub fn phybs(count: u64, span: Span, logical: u64) -> Result<IoPlan, BenchError> {
    // 1 + 2 + 4 + 8 cells.
    check_count(&format!("count {count}"), count, 15)?;
    let mut cells = Vec::new();
    for size in [1, 2, 4, 8].map(|k| k * logical) {
        for offset in (0..size).step_by(logical.max(1) as usize) {
            cells.push(sequential(size, offset, 4 * size, count, span)?);
        }
    }
    Ok(IoPlan { cells, run: 1 })
}

/// part-align-bench: `size` writes every `stride` from each base sector
/// for `total` bytes, kept sequential in runs.
pub fn stride(
    size: u64,
    stride: u64,
    total: u64,
    bases: &[u64],
    span: Span,
    logical: u64,
) -> Result<IoPlan, BenchError> {
    check_size(size)?;
    check_sector("size", size, logical)?;
    check_sector("stride", stride, logical)?;
    if stride < size {
        return Err(invalid(format!("stride {stride} must be at least the size {size}")));
    }
    let count = total / stride;
    check_count(&format!("total {total} at stride {stride}"), count, bases.len())?;
    let cells = bases
        .iter()
        .map(|&base| {
            let offset =
                base.checked_mul(logical).ok_or_else(|| invalid("base too large".into()))?;
            sequential(size, offset, stride, count, span)
        })
        .collect::<Result<_, BenchError>>()?;
    Ok(IoPlan { cells, run: 32 })
}

/// `count` positions offset, offset + step, ... all inside the span.
fn sequential(
    size: u64,
    offset: u64,
    step: u64,
    count: u64,
    span: Span,
) -> Result<Cell, BenchError> {
    let last = count
        .checked_sub(1)
        .and_then(|n| n.checked_mul(step))
        .and_then(|d| d.checked_add(offset))
        .and_then(|p| p.checked_add(size));
    if count == 0 || last.is_none_or(|end| end > span.len) {
        return Err(too_small(size, offset, span));
    }
    let positions = (0..count).map(|i| span.start + offset + i * step).collect();
    Ok(Cell { size, offset, step, positions })
}

/// Every request of the plan, cells interleaved in random order (in runs of
/// `plan.run`), so that drift over time spreads over all cells alike.
pub fn schedule(plan: &IoPlan, rng: &mut Rng) -> Vec<IoRequest> {
    let run = plan.run.max(1);
    let mut runs: Vec<(usize, &[u64])> = plan
        .cells
        .iter()
        .enumerate()
        .flat_map(|(i, cell)| cell.positions.chunks(run).map(move |c| (i, c)))
        .collect();
    rng.shuffle(&mut runs);
    runs.into_iter()
        .flat_map(|(cell, positions)| {
            let size = plan.cells[cell].size;
            positions.iter().map(move |&pos| IoRequest { cell, pos, size })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPAN: Span = Span { start: 0, len: 1 << 20 };

    #[test]
    fn random_stays_on_its_grid_and_in_the_span() {
        let plan = random(4096, &[0, 512], 200, SPAN, 512, &mut Rng::new(1)).unwrap();
        assert_eq!(plan.cells.len(), 2);
        for cell in &plan.cells {
            assert_eq!(cell.positions.len(), 200);
            for &p in &cell.positions {
                assert_eq!(p % 4096, cell.offset);
                assert!(p + 4096 <= SPAN.len);
            }
        }
        assert!(random(4096, &[100], 1, SPAN, 512, &mut Rng::new(1)).is_err());
        let tiny = Span { start: 0, len: 4096 };
        assert!(random(4096, &[512], 1, tiny, 512, &mut Rng::new(1)).is_err());
    }

    #[test]
    fn default_offsets_and_lines() {
        assert_eq!(default_offsets(4096, 512), [0, 512]);
        assert_eq!(default_offsets(4096, 4096), [0]);
        let two = random(4096, &default_offsets(4096, 512), 1, SPAN, 512, &mut Rng::new(1));
        assert!(two.unwrap().has_line());
        let one = random(4096, &default_offsets(4096, 4096), 1, SPAN, 4096, &mut Rng::new(1));
        assert!(!one.unwrap().has_line());
        // Each size at one offset of its own: no size has a line.
        assert!(!stride(4096, 4096, 1 << 16, &[0], SPAN, 512).unwrap().has_line());
        assert!(phybs(1, SPAN, 512).unwrap().has_line());
    }

    #[test]
    fn workloads_take_the_defaults_left_out() {
        let span = Span { start: 0, len: 64 << 20 };
        let plan = |w: Workload, logical| w.plan(span, logical, &mut Rng::new(1)).unwrap();
        let random = plan(Workload::Random { size: None, offsets: vec![], count: None }, 512);
        let cells: Vec<_> =
            random.cells.iter().map(|c| (c.size, c.offset, c.positions.len())).collect();
        assert_eq!(cells, [(4096, 0, 1000), (4096, 512, 1000)]);
        let big = plan(Workload::Random { size: None, offsets: vec![], count: Some(2) }, 8192);
        assert_eq!((big.cells.len(), big.cells[0].size), (1, 8192));
        assert_eq!(plan(Workload::Phybs { count: None }, 512).cells[0].positions.len(), 100);
        let bases = Workload::Stride { size: None, stride: None, total: None, bases: vec![] };
        let stride = plan(bases, 512);
        let offsets: Vec<u64> = stride.cells.iter().map(|c| c.offset).collect();
        assert_eq!(offsets, [0, 4096, 17408, 20480, 21504]);
        assert_eq!(stride.cells[0].positions.len(), 1024);
        let given =
            Workload::Stride { size: Some(512), stride: Some(1024), total: None, bases: vec![1] };
        let given = plan(given, 512);
        assert_eq!((given.cells[0].offset, given.cells[0].positions.len()), (512, 4096));
    }

    #[test]
    fn phybs_matrix_has_every_logical_offset() {
        let plan = phybs(10, SPAN, 512).unwrap();
        let cells: Vec<(u64, u64)> = plan.cells.iter().map(|c| (c.size, c.offset)).collect();
        assert_eq!(cells.len(), 1 + 2 + 4 + 8);
        assert!(cells.contains(&(4096, 3584)) && cells.contains(&(2048, 1536)));
        let last = plan.cells.last().unwrap();
        assert_eq!(last.step, 4 * 4096);
        assert_eq!(last.positions[1] - last.positions[0], 16384);
    }

    #[test]
    fn stride_bases_are_sectors() {
        let plan = stride(4096, 8192, 65536, &[0, 8, 34, 40, 42], SPAN, 512).unwrap();
        let offsets: Vec<u64> = plan.cells.iter().map(|c| c.offset).collect();
        assert_eq!(offsets, [0, 4096, 17408, 20480, 21504]);
        assert_eq!(plan.cells[0].positions.len(), 8);
        assert!(stride(4096, 2048, 65536, &[0], SPAN, 512).is_err());
    }

    #[test]
    fn sizes_and_counts_are_bounded_before_allocating() {
        let rng = &mut Rng::new(1);
        let huge = Span { start: 0, len: u64::MAX };
        let err = random(MAX_SIZE * 2, &[0], 1, huge, 512, rng).unwrap_err().to_string();
        assert!(err.contains("64 MiB"), "{err}");
        assert!(random(MAX_SIZE, &[0], 1, huge, 512, rng).is_ok());
        let err = random(4096, &[0, 512], u64::MAX, huge, 512, rng).unwrap_err().to_string();
        assert!(err.contains("at most 10000000"), "{err}");
        assert!(random(4096, &[0], 0, SPAN, 512, rng).is_err());
        assert!(phybs(MAX_REQUESTS, huge, 512).is_err());
        assert!(stride(512, 512, u64::MAX, &[0], huge, 512).is_err());
        assert!(stride(MAX_SIZE + 512, MAX_SIZE + 512, 1 << 40, &[0], huge, 512).is_err());
    }

    #[test]
    fn schedule_keeps_every_request_and_runs_together() {
        let plan = stride(4096, 4096, 1 << 16, &[0, 8], SPAN, 512).unwrap();
        let reqs = schedule(&plan, &mut Rng::new(3));
        assert_eq!(reqs.len(), 32);
        // 16 positions per cell, run 32: each cell is one sequential run.
        assert!(reqs[..16].iter().all(|r| r.cell == reqs[0].cell));
        let plan = random(512, &[0], 50, SPAN, 512, &mut Rng::new(1)).unwrap();
        assert_eq!(schedule(&plan, &mut Rng::new(2)).len(), 50);
    }
}
