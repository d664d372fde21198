//! The read check: before a move writes anything, every sector it will
//! read is read once. A sector that stays unreadable would otherwise stop
//! the move half-way, at the same place on every rerun (util-linux issue
//! 984: sfdisk's `--move-data` on a worn disk); found first, it refuses the
//! move with nothing written and nothing left to finish.

use crate::io::{AlignedBuf, ReadAt};
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Bytes each reader reads at once, a multiple of every sector size: with
/// two in flight, as many as `dd bs=4M iflag=direct` asks for at once, in
/// half its buffer each. Where the device's reads are the kernel's copies
/// (a loop device over tmpfs), two 4 MiB buffers ran slower than `dd`'s one
/// (docs/performance.md, stop 48).
const CHUNK: u64 = 2 << 20;

/// How the scan ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Scan {
    /// Every sector read; the unreadable ones as merged LBA ranges.
    Done(Vec<Range<u64>>),
    /// Asked to stop before the end.
    Stopped,
}

/// Sectors whose bytes a scan hands back in `buf` (from its start), read
/// last: a move's first chunk, which the move then need not read again.
pub struct Keep {
    pub lbas: Range<u64>,
    pub buf: AlignedBuf,
}

/// Read the `sectors` logical sectors of `ss` bytes from LBA `start` of
/// `dev` (opened O_DIRECT where it can be), `progress` told of each byte
/// read. A chunk that fails with a medium error is split until each
/// unreadable sector is found; any other error (the device gone) ends the
/// scan with it. Two chunks are read at a time, on this thread and one
/// beside it: a disk's queue is kept busy while a read's answer travels
/// (`dd` has one read in flight). The bytes `keep` asks for come back when
/// every one of them was read (none when it does not fit the range or
/// its buffer).
pub fn scan(
    dev: &(dyn ReadAt + Sync),
    start: u64,
    sectors: u64,
    ss: u64,
    keep: Option<Keep>,
    progress: &mut dyn FnMut(u64),
    stop: &dyn Fn() -> bool,
) -> io::Result<(Scan, Option<AlignedBuf>)> {
    let per_chunk = (CHUNK / ss.max(1)).max(1);
    let end = start
        .checked_add(sectors)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "LBA range overflows"))?;
    if stop() {
        return Ok((Scan::Stopped, None));
    }
    let chunks = sectors.div_ceil(per_chunk);
    let keep = keep.filter(|k| fits(k, start..end, ss));
    let last = keep.as_ref().map_or(chunks..chunks, |k| {
        (k.lbas.start - start) / per_chunk..(k.lbas.end - start).div_ceil(per_chunk)
    });
    let spoiled = AtomicBool::new(false);
    let keep = Mutex::new(keep);
    let (next, read, halt) = (AtomicU64::new(0), AtomicU64::new(0), AtomicBool::new(false));
    let bad = Mutex::new(Vec::new());
    // Claim the next chunk and read it, until none is left, `halt`, or an
    // error other than a medium error.
    let reader = |between: &mut dyn FnMut()| -> io::Result<()> {
        let mut buf = AlignedBuf::new(usize::try_from(per_chunk * ss).unwrap_or(CHUNK as usize), 0);
        let mut found = Vec::new();
        loop {
            between();
            let i = next.fetch_add(1, Ordering::Relaxed);
            if halt.load(Ordering::Relaxed) || i >= chunks {
                break;
            }
            let lba = start + in_order(i, chunks, &last) * per_chunk;
            let n = per_chunk.min(end - lba);
            let before = found.len();
            if let Err(e) = find_bad(dev, lba..lba + n, ss, &mut buf, &mut found) {
                halt.store(true, Ordering::Relaxed);
                return Err(e);
            }
            if let Some(k) = keep.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                let (from, to) = (lba.max(k.lbas.start), (lba + n).min(k.lbas.end));
                if from < to && found.len() > before {
                    spoiled.store(true, Ordering::Relaxed);
                } else if from < to {
                    let at = |l: u64, base: u64| ((l - base) * ss) as usize;
                    k.buf.bytes_mut()[at(from, k.lbas.start)..at(to, k.lbas.start)]
                        .copy_from_slice(&buf.bytes()[at(from, lba)..at(to, lba)]);
                }
            }
            read.fetch_add(n.saturating_mul(ss), Ordering::Relaxed);
        }
        bad.lock().unwrap_or_else(|e| e.into_inner()).append(&mut found);
        Ok(())
    };
    let mut told = 0;
    let mut stopped = false;
    let (mine, beside) = std::thread::scope(|s| {
        let beside = s.spawn(|| reader(&mut || {}));
        let mine = reader(&mut || {
            let now = read.load(Ordering::Relaxed);
            if now > told {
                progress(now - told);
                told = now;
            }
            if !stopped && stop() {
                stopped = true;
                halt.store(true, Ordering::Relaxed);
            }
        });
        (mine, beside.join())
    });
    mine?;
    beside.map_err(|_| io::Error::other("the scan's second reader ended without a word"))??;
    // The second reader's last chunks, read after this thread's last word.
    let all = read.load(Ordering::Relaxed);
    if all > told {
        progress(all - told);
    }
    // A stop asked once every sector is read stops nothing.
    if stopped && all < sectors.saturating_mul(ss) {
        return Ok((Scan::Stopped, None));
    }
    let mut bad = bad.into_inner().unwrap_or_else(|e| e.into_inner());
    bad.sort_by_key(|r| r.start);
    let kept = keep.into_inner().unwrap_or_else(|e| e.into_inner());
    let kept = kept.filter(|_| !spoiled.load(Ordering::Relaxed)).map(|k| k.buf);
    Ok((Scan::Done(merge(bad)), kept))
}

/// The `i`th of `chunks` to read: those in `last` last, so that the kept
/// sectors' bytes are as fresh as the scan can make them.
fn in_order(i: u64, chunks: u64, last: &Range<u64>) -> u64 {
    let n = last.end - last.start;
    match i.checked_sub(chunks - n) {
        Some(late) => last.start + late,
        None if i < last.start => i,
        None => i + n,
    }
}

/// `keep` asks for sectors inside `range` that its buffer holds.
fn fits(keep: &Keep, range: Range<u64>, ss: u64) -> bool {
    let Range { start, end } = keep.lbas;
    let bytes = (end.saturating_sub(start)).checked_mul(ss);
    range.start <= start
        && start < end
        && end <= range.end
        && bytes.is_some_and(|b| b <= keep.buf.bytes().len() as u64)
}

/// Push onto `bad` the unreadable sectors of `lbas`: halving on a medium
/// error costs a few reads per bad sector, not one read per sector.
fn find_bad(
    dev: &dyn ReadAt,
    lbas: Range<u64>,
    ss: u64,
    buf: &mut AlignedBuf,
    bad: &mut Vec<Range<u64>>,
) -> io::Result<()> {
    let len = usize::try_from((lbas.end - lbas.start).saturating_mul(ss)).unwrap_or(usize::MAX);
    let Some(slice) = buf.bytes_mut().get_mut(..len) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "chunk larger than its buffer"));
    };
    let offset = lbas.start.checked_mul(ss).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "LBA past any addressable byte")
    })?;
    match dev.read_exact_at(slice, offset) {
        Ok(()) => Ok(()),
        Err(e) if !unreadable(&e) => Err(e),
        Err(_) if lbas.end - lbas.start == 1 => {
            bad.push(lbas);
            Ok(())
        }
        Err(_) => {
            let mid = lbas.start + (lbas.end - lbas.start) / 2;
            find_bad(dev, lbas.start..mid, ss, buf, bad)?;
            find_bad(dev, mid..lbas.end, ss, buf, bad)
        }
    }
}

/// A medium error: the kernel's EIO (SCSI MEDIUM ERROR, ATA UNC, dm-error)
/// and ENODATA (a critical medium error on some paths). A short read past
/// the end is no such thing.
pub(crate) fn unreadable(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(5 | 61))
}

/// Adjacent ranges joined.
pub(crate) fn merge(ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    let mut out: Vec<Range<u64>> = Vec::new();
    for r in ranges {
        match out.last_mut() {
            Some(last) if last.end == r.start => last.end = r.end,
            _ => out.push(r),
        }
    }
    out
}

/// "LBA 100-103, 200 (5 sectors)", at most the first eight ranges.
pub fn describe(ranges: &[Range<u64>]) -> String {
    let count: u64 = ranges.iter().map(|r| r.end - r.start).sum();
    let mut shown: Vec<String> = ranges
        .iter()
        .take(8)
        .map(|r| match r.end - r.start {
            1 => r.start.to_string(),
            _ => format!("{}-{}", r.start, r.end - 1),
        })
        .collect();
    if ranges.len() > 8 {
        shown.push(format!("and {} more ranges", ranges.len() - 8));
    }
    let plural = if count == 1 { "" } else { "s" };
    format!("LBA {} ({count} sector{plural})", shown.join(", "))
}

/// What the unreadable `bad` LBAs hold in an ext2/3/4 whose first byte is
/// byte `offset` of `disk` and whose blocks are `block` bytes, as debugfs
/// says (`icheck`, `ncheck`, `testb`): files by path, the journal and other
/// metadata, free space. None when debugfs cannot say (not installed, or
/// the file system's own metadata unreadable).
pub(crate) fn ext_holders(
    disk: &std::path::Path,
    offset: u64,
    ss: u64,
    block: u64,
    bad: &[Range<u64>],
) -> Option<String> {
    let at = |lba: u64| lba.checked_mul(ss)?.checked_sub(offset).map(|b| b / block.max(1));
    let mut blocks: Vec<u64> = bad
        .iter()
        .flat_map(|r| at(r.start).zip(at(r.end.saturating_sub(1))).map(|(a, b)| a..=b))
        .flatten()
        .take(64)
        .collect();
    blocks.dedup();
    let device = format!("{}?offset={offset}", disk.display());
    let debugfs = |request: String| -> Option<String> {
        let out = std::process::Command::new("debugfs").args(["-R", &request, &device]).output();
        out.ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).into())
    };
    let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
    let icheck = debugfs(format!("icheck {}", list(&blocks)))?;
    let mut inodes: Vec<u64> = Vec::new();
    let mut unowned = Vec::new();
    for line in icheck.lines().skip(1) {
        let mut words = line.split_whitespace();
        let (Some(b), Some(i)) = (words.next(), words.next()) else { continue };
        match i.parse::<u64>() {
            Ok(i) => inodes.push(i),
            Err(_) => unowned.extend(b.parse::<u64>()),
        }
    }
    inodes.sort_unstable();
    inodes.dedup();
    let mut said: Vec<String> = Vec::new();
    // Inodes below 11 are the file system's own: the journal is 8.
    let (special, files): (Vec<u64>, Vec<u64>) = inodes.into_iter().partition(|&i| i < 11);
    if !files.is_empty() {
        let names = debugfs(format!("ncheck {}", list(&files)))?;
        let paths: Vec<&str> =
            names.lines().skip(1).filter_map(|l| l.split_once('\t')).map(|(_, p)| p).collect();
        said.push(format!("files: {}", paths.join(", ").replace("//", "/")));
    }
    if special.contains(&8) {
        said.push("the ext4 journal".into());
    }
    if special.iter().any(|&i| i != 8) {
        said.push("file-system metadata".into());
    }
    if !unowned.is_empty() {
        let free = debugfs(format!("testb {}", list(&unowned)))?;
        let in_use = free.lines().filter(|l| l.contains("marked in use")).count();
        if in_use > 0 {
            said.push("file-system metadata (bitmaps, inode tables)".into());
        }
        if in_use < unowned.len() {
            said.push("free space".into());
        }
    }
    (!said.is_empty()).then(|| format!("they hold {}", said.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A disk whose sectors in `bad` fail with EIO, counting reads.
    struct Failing {
        sectors: u64,
        bad: Vec<u64>,
        reads: AtomicU64,
    }

    impl ReadAt for Failing {
        fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.reads.fetch_add(1, Ordering::Relaxed);
            let (first, n) = (offset / 512, buf.len() as u64 / 512);
            if first + n > self.sectors {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            if self.bad.iter().any(|b| (first..first + n).contains(b)) {
                return Err(io::Error::from_raw_os_error(5));
            }
            buf.fill(1);
            Ok(())
        }
    }

    fn run(bad: &[u64], start: u64, sectors: u64) -> (Scan, u64, u64) {
        let dev = Failing { sectors: 1 << 20, bad: bad.to_vec(), reads: Default::default() };
        let mut read = 0;
        let (scan, _) =
            scan(&dev, start, sectors, 512, None, &mut |n| read += n, &|| false).unwrap();
        (scan, read, dev.reads.load(Ordering::Relaxed))
    }

    #[test]
    fn every_unreadable_sector_is_found_and_nothing_else() {
        let bad = [63, 64, 65, 9000, 20479];
        let (found, read, _) = run(&bad, 63, 20417);
        assert_eq!(found, Scan::Done(vec![63..66, 9000..9001, 20479..20480]));
        assert_eq!(read, 20417 * 512, "progress covers every byte");
        assert_eq!(describe(&[63..66, 9000..9001]), "LBA 63-65, 9000 (4 sectors)");
        let (clean, _, reads) = run(&[], 63, 20417);
        assert_eq!((clean, reads), (Scan::Done(vec![]), 5), "2 MiB reads when all is well");
        // Outside the range asked: not ours to find.
        assert_eq!(run(&[62, 20480], 63, 20417).0, Scan::Done(vec![]));
    }

    #[test]
    fn a_bad_sector_costs_a_few_reads_not_one_per_sector() {
        let (_, _, reads) = run(&[5000], 0, 8192);
        assert!(reads <= 2 * 14 + 1, "{reads} reads");
    }

    #[test]
    fn an_error_that_is_no_medium_error_ends_the_scan() {
        let dev = Failing { sectors: 100, bad: vec![], reads: Default::default() };
        let got = scan(&dev, 0, 200, 512, None, &mut |_| {}, &|| false).map(|(scan, _)| scan);
        assert_eq!(got.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        let (stopped, _) = scan(&dev, 0, 10, 512, None, &mut |_| {}, &|| true).unwrap();
        assert_eq!(stopped, Scan::Stopped);
    }

    /// Each sector's first bytes are its LBA; the reads are logged.
    struct Numbered(Mutex<Vec<u64>>);

    impl ReadAt for Numbered {
        fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.0.lock().unwrap().push(offset / 512);
            for (i, sector) in buf.chunks_mut(512).enumerate() {
                sector.fill(0);
                sector[..8].copy_from_slice(&(offset / 512 + i as u64).to_le_bytes());
            }
            Ok(())
        }
    }

    #[test]
    fn kept_sectors_are_read_last_and_handed_back_whole() {
        // 5 chunks from LBA 63; the kept sectors span chunks 2 and 3.
        let per = CHUNK / 512;
        let (start, sectors, kept) = (63, 5 * per - 100, 63 + 3 * per - 10..63 + 3 * per + 20);
        let dev = Numbered(Mutex::new(Vec::new()));
        let keep = Keep { lbas: kept.clone(), buf: AlignedBuf::new(16 << 20, 0) };
        let (found, buf) =
            scan(&dev, start, sectors, 512, Some(keep), &mut |_| {}, &|| false).unwrap();
        assert_eq!(found, Scan::Done(vec![]));
        let buf = buf.expect("the kept sectors");
        for (i, lba) in kept.clone().enumerate() {
            assert_eq!(buf.bytes()[i * 512..i * 512 + 8], lba.to_le_bytes(), "LBA {lba}");
        }
        assert_eq!(dev.0.lock().unwrap().len(), 5, "each chunk read once");
        let order: Vec<u64> = (0..5).map(|i| in_order(i, 5, &(2..4))).collect();
        assert_eq!(order, [0, 1, 4, 2, 3]);
        assert_eq!((0..3).map(|i| in_order(i, 3, &(3..3))).collect::<Vec<_>>(), [0, 1, 2]);
        // A kept range past the scan's, or larger than its buffer: nothing kept.
        for (lbas, size) in [(63..63 + sectors + 1, 32 << 20), (63..63 + 8192, 1 << 20)] {
            let keep = Keep { lbas, buf: AlignedBuf::new(size, 0) };
            let got = scan(&dev, start, sectors, 512, Some(keep), &mut |_| {}, &|| false).unwrap();
            assert!(got.1.is_none());
        }
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // a list of one range
    fn kept_sectors_with_an_unreadable_one_are_not_handed_back() {
        let dev = Failing { sectors: 1 << 20, bad: vec![9000], reads: Default::default() };
        let keep = Keep { lbas: 8192..16384, buf: AlignedBuf::new(4 << 20, 0) };
        let (found, kept) =
            scan(&dev, 0, 3 * 8192, 512, Some(keep), &mut |_| {}, &|| false).unwrap();
        assert_eq!((found, kept.is_none()), (Scan::Done(vec![9000..9001]), true));
        let keep = Keep { lbas: 0..8192, buf: AlignedBuf::new(4 << 20, 0) };
        let (_, kept) = scan(&dev, 0, 3 * 8192, 512, Some(keep), &mut |_| {}, &|| false).unwrap();
        assert!(kept.is_some_and(|k| k.bytes()[..4 << 20].iter().all(|&b| b == 1)));
    }
}
