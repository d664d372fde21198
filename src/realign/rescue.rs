//! `--rescue`: finishing a move over sectors that cannot be read. Each such
//! sector is read again a bounded number of times, then written as zeros at
//! its destination, and its LBA goes to a map in GNU ddrescue's mapfile
//! format beside the journal (made durable before the chunk holding it is
//! written, so a crash never leaves a zero-filled sector unlisted).

use super::disk::Disk;
use super::Move;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Reads of an unreadable sector after the first: a failing drive may
/// return it on a later try, but each try can cost it seconds.
pub(crate) const RETRIES: u32 = 2;

/// The map for the move journaled at `journal`.
pub(crate) fn map_path(journal: &Path) -> PathBuf {
    let mut p = journal.as_os_str().to_owned();
    p.push(".map");
    PathBuf::from(p)
}

/// Fill `buf` from `offset` around unreadable sectors (EIO, ENODATA):
/// halves of a failing piece are read in turn down to single sectors, each
/// of which is retried [`RETRIES`] times and then zero-filled. Returns the
/// zero-filled LBAs; any other error is returned as it is.
pub(crate) fn read_around(
    disk: &dyn Disk,
    buf: &mut [u8],
    offset: u64,
    ss: u64,
) -> io::Result<Vec<Range<u64>>> {
    let mut bad = Vec::new();
    read_piece(disk, buf, offset, ss.max(1), &mut bad)?;
    Ok(super::scan::merge(bad))
}

fn read_piece(
    disk: &dyn Disk,
    buf: &mut [u8],
    offset: u64,
    ss: u64,
    bad: &mut Vec<Range<u64>>,
) -> io::Result<()> {
    let single = buf.len() as u64 / ss < 2;
    for _ in 0..if single { 1 + RETRIES } else { 1 } {
        match disk.read_at(buf, offset) {
            Ok(()) => return Ok(()),
            Err(e) if super::scan::unreadable(&e) => {}
            Err(e) => return Err(e),
        }
    }
    if single {
        buf.fill(0);
        bad.push(offset / ss..offset / ss + 1);
        return Ok(());
    }
    // Split on a sector boundary, so each half stays aligned for O_DIRECT.
    let sectors = buf.len() as u64 / ss;
    let mid = usize::try_from(sectors / 2 * ss).unwrap_or(buf.len() / 2);
    let (head, tail) = buf.split_at_mut(mid);
    read_piece(disk, head, offset, ss, bad)?;
    read_piece(disk, tail, offset + mid as u64, ss, bad)
}

/// The zero-filled sectors of a move so far, and the map that lists them.
pub struct Map {
    path: PathBuf,
    disk_bytes: u64,
    ss: u64,
    /// The partition's LBAs at its old place.
    domain: Range<u64>,
    /// The LBAs of `domain` read so far (one run: chunks go in order).
    read: Option<Range<u64>>,
    bad: Vec<Range<u64>>,
    /// Time spent reading around unreadable sectors, this run.
    pub spent: std::time::Duration,
}

impl Map {
    /// The map of `m` at `path`: the one an earlier `--rescue` run left,
    /// else an empty one.
    pub fn open(path: PathBuf, m: &Move) -> io::Result<Map> {
        let old = m.old_start;
        let mut map = Map {
            path,
            disk_bytes: m.identity.size_bytes,
            ss: m.sector_size,
            domain: old..old.saturating_add(m.sectors),
            read: None,
            bad: Vec::new(),
            spent: std::time::Duration::ZERO,
        };
        match std::fs::read_to_string(&map.path) {
            // Only what lies in the partition: a map is a file anyone may edit.
            Ok(text) => {
                let domain = map.domain.clone();
                let inside = |r: Range<u64>| r.start.max(domain.start)..r.end.min(domain.end);
                let bad = parse(&text, m.sector_size)?.into_iter().map(inside);
                map.bad = bad.filter(|r| r.start < r.end).collect();
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        Ok(map)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The zero-filled LBAs, at the partition's old place.
    pub fn bad(&self) -> &[Range<u64>] {
        &self.bad
    }

    /// Chunk `lbas` was read, `bad` zero-filled: a chunk read again after a
    /// crash replaces what its first read found. Durable when it returns.
    pub fn read(&mut self, lbas: Range<u64>, bad: &[Range<u64>]) -> io::Result<()> {
        let mut kept: Vec<Range<u64>> = Vec::new();
        for r in &self.bad {
            if r.start < lbas.start {
                kept.push(r.start..r.end.min(lbas.start));
            }
            if r.end > lbas.end {
                kept.push(r.start.max(lbas.end)..r.end);
            }
        }
        kept.extend(bad.iter().cloned());
        kept.sort_by_key(|r| r.start);
        self.bad = super::scan::merge(kept);
        self.read = Some(match self.read.take() {
            Some(r) => r.start.min(lbas.start)..r.end.max(lbas.end),
            None => lbas,
        });
        self.save()
    }

    /// The whole partition was read (a finished copy).
    pub fn finish(&mut self) -> io::Result<()> {
        self.read = Some(self.domain.clone());
        self.save()
    }

    /// GNU ddrescue's mapfile: the disk's bytes in blocks, `+` read, `-` a
    /// bad sector (zero-filled), `?` not read by the move.
    fn text(&self) -> String {
        let ss = self.ss;
        let read = self.read.clone().unwrap_or(0..0);
        let mut cuts: Vec<u64> = vec![0, read.start * ss, read.end * ss, self.disk_bytes];
        cuts.extend(self.bad.iter().flat_map(|r| [r.start * ss, r.end * ss]));
        cuts.retain(|&c| c <= self.disk_bytes);
        cuts.sort_unstable();
        cuts.dedup();
        let status = |at: u64| {
            let lba = at / ss;
            if self.bad.iter().any(|r| r.contains(&lba)) {
                '-'
            } else if read.contains(&lba) {
                '+'
            } else {
                '?'
            }
        };
        let mut blocks: Vec<(u64, u64, char)> = Vec::new();
        for pair in cuts.windows(2) {
            let (from, to, s) = (pair[0], pair[1], status(pair[0]));
            match blocks.last_mut() {
                Some(last) if last.2 == s => last.1 += to - from,
                _ => blocks.push((from, to - from, s)),
            }
        }
        let mut text = format!(
            "# Mapfile. Created by blkalign {} (realign --rescue)\n\
             # Bad sectors ('-') were read {} times, then written as zeros where the move put them.\n\
             # current_pos  current_status  current_pass\n0x{:08X}     +               1\n\
             #      pos        size  status\n",
            env!("CARGO_PKG_VERSION"),
            1 + RETRIES,
            read.end * ss
        );
        for (pos, size, status) in blocks {
            text += &format!("0x{pos:08X}  0x{size:08X}  {status}\n");
        }
        text
    }

    fn save(&self) -> io::Result<()> {
        let tmp = self.path.with_extension("map.tmp");
        std::fs::write(&tmp, self.text())?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        crate::device::exclusive::sync_parent(&self.path)
    }
}

/// The `-` blocks of a mapfile, as LBA ranges of `ss`-byte sectors.
fn parse(text: &str, ss: u64) -> io::Result<Vec<Range<u64>>> {
    let invalid = |line: &str| {
        io::Error::new(io::ErrorKind::InvalidData, format!("not a ddrescue mapfile line: {line}"))
    };
    let hex =
        |s: &str| u64::from_str_radix(s.trim_start_matches("0x").trim_start_matches("0X"), 16);
    let mut bad = Vec::new();
    // The first line that is not a comment is the current position.
    let lines = text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).skip(1);
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [pos, size, status] = words[..] else { return Err(invalid(line)) };
        let (pos, size) =
            (hex(pos).map_err(|_| invalid(line))?, hex(size).map_err(|_| invalid(line))?);
        if status == "-" {
            let end = pos.checked_add(size).ok_or_else(|| invalid(line))?;
            if pos % ss != 0 || end % ss != 0 {
                return Err(invalid(line));
            }
            bad.push(pos / ss..end / ss);
        }
    }
    Ok(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::realign::tests::sample_move;
    use std::sync::Mutex;

    /// Sectors that fail a set number of reads each, then read.
    struct Failing {
        fails: Mutex<Vec<(u64, u32)>>,
    }

    impl Disk for Failing {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            let lbas = offset / 512..offset / 512 + buf.len() as u64 / 512;
            let mut fails = self.fails.lock().unwrap();
            let mut failed = false;
            for (lba, left) in fails.iter_mut() {
                if lbas.contains(lba) && *left > 0 {
                    failed = true;
                    if buf.len() == 512 {
                        *left -= 1;
                    }
                }
            }
            if failed {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            buf.fill(0xEE);
            Ok(())
        }

        fn write_at(&self, _: &[u8], _: u64) -> io::Result<()> {
            unreachable!("reads only")
        }

        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn sectors_that_stay_unreadable_are_zeroed_and_the_rest_read() {
        // LBA 70 reads on its last retry; 100-101 and 4000 never.
        let never = u32::MAX;
        let fails = vec![(70, RETRIES), (100, never), (101, never), (4000, never)];
        let disk = Failing { fails: Mutex::new(fails) };
        let mut buf = vec![1u8; 8192 * 512];
        let bad = read_around(&disk, &mut buf, 0, 512).unwrap();
        assert_eq!(bad, [100..102, 4000..4001]);
        for (s, sector) in buf.chunks(512).enumerate() {
            let zero = [100, 101, 4000].contains(&s);
            assert!(sector.iter().all(|&b| b == if zero { 0 } else { 0xEE }), "sector {s}");
        }
    }

    #[test]
    fn the_map_lists_exactly_the_zeroed_sectors_and_survives_a_rerun() {
        let dir = tempfile::tempdir().unwrap();
        let m = sample_move();
        let path = map_path(&dir.path().join("j"));
        let mut map = Map::open(path.clone(), &m).unwrap();
        map.read(50_063..100_063, &[60_000..60_002, 99_000..99_001]).unwrap();
        // The chunk read again after a crash: 60001 now reads.
        map.read(50_063..100_063, &[60_000..60_001, 99_000..99_001]).unwrap();
        map.read(63..50_063, std::slice::from_ref(&(63..64))).unwrap();
        map.finish().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let again = Map::open(path, &m).unwrap();
        assert_eq!(again.bad(), [63..64, 60_000..60_001, 99_000..99_001], "{text}");
        // Contiguous blocks covering the whole disk.
        let mut at = 0;
        for line in text.lines().filter(|l| !l.starts_with('#')).skip(1) {
            let w: Vec<&str> = line.split_whitespace().collect();
            let pos = u64::from_str_radix(&w[0][2..], 16).unwrap();
            assert_eq!(pos, at, "{text}");
            at += u64::from_str_radix(&w[1][2..], 16).unwrap();
        }
        assert_eq!(at, m.identity.size_bytes, "{text}");
        assert!(text.contains("0x00007E00  0x00000200  -\n"), "LBA 63 bad: {text}");
        // An edited map naming sectors outside the partition: they are not its.
        std::fs::write(map.path(), "# x\n0x0 +\n0x0 0x200 -\n0x7E00 0x200 -\n").unwrap();
        assert_eq!(
            Map::open(map.path().to_path_buf(), &m).unwrap().bad(),
            std::slice::from_ref(&(63..64))
        );
    }
}
