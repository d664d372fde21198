//! The realign journal reader (`Journal::open`): two header slots, the move record (JSON) and the
//! checksum table, as a crash or a bad disk may leave them, and the move it records. The first
//! input byte asks for the CRCs to be fixed up (bit 0); the rest is the file. Seeded with journals
//! of real moves.
#![no_main]

use blkalign::realign::journal::Journal;
use blkalign::realign::state;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let Some((&flags, file)) = data.split_first() else { return };
    let mut file = file.to_vec();
    if flags & 1 != 0 {
        blkalign_fuzz::reseal::journal(&mut file);
    }
    let path =
        DIR.get_or_init(|| tempfile::tempdir().expect("temporary directory")).path().join("j");
    std::fs::write(&path, &file).expect("write the journal");
    let Ok(journal) = Journal::open(&path) else { return };
    let m = &journal.record;
    let chunks = m.chunks();
    let cursor = journal.state.cursor;
    for k in [0, cursor, chunks.saturating_sub(1)] {
        let _ = (m.chunk(k), m.needs_save(k), m.needs_commit(cursor, k), m.shift_bytes());
    }
    if let Ok(saved) = journal.saved_chunks() {
        for s in journal.state.saved.iter().flatten() {
            // At most the record's chunk size, which validation caps at 64 MiB.
            let mut buf = vec![0u8; m.chunk(s.chunk).1 as usize];
            let _ = saved.read(s.chunk, &mut buf);
        }
    }
    let disk = vec![0u8; 1 << 16];
    let _ = state::applies(m, &disk, &m.identity);
});
