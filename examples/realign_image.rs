//! Audit a disk image and realign its partition through the library alone,
//! as an installer or a VM manager would embed blkalign.
//!
//! ```sh
//! cargo run --example realign_image            # on an image it makes
//! cargo run --example realign_image -- my.img  # on yours (moves partitions!)
//! ```

use blkalign::{
    audit_path, AuditOptions, Class, DiskAudit, Done, Events, MoveOptions, Outcome, Overrides,
    Session, Store, SysRoot,
};
use std::path::{Path, PathBuf};

/// What the old fdisk made: an MBR with one partition at LBA 63.
fn make_image(path: &Path) -> std::io::Result<()> {
    let (start, sectors) = (63u32, 16_384u32);
    let mut img = vec![0u8; 16 << 20];
    let entry = &mut img[0x1BE..0x1CE];
    entry[4] = 0x83;
    entry[8..12].copy_from_slice(&start.to_le_bytes());
    entry[12..16].copy_from_slice(&sectors.to_le_bytes());
    img[510..512].copy_from_slice(&[0x55, 0xAA]);
    let data = start as usize * 512..(start + sectors) as usize * 512;
    for (i, byte) in img[data].iter_mut().enumerate() {
        *byte = (i % 251) as u8;
    }
    std::fs::write(path, img)
}

fn misaligned(audit: &DiskAudit) -> Vec<u32> {
    let bad = audit.partitions.iter().filter(|p| p.verdict.verdict == Class::Misaligned);
    bad.map(|p| p.partition.number).collect()
}

struct Print;

impl Events for Print {
    fn note(&mut self, text: &str) {
        eprintln!("{text}");
    }

    fn finished(&mut self, done: &Done) {
        print!("{}", done.describe());
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let work = tempfile::tempdir()?;
    let path: PathBuf = match std::env::args_os().nth(1) {
        Some(given) => given.into(),
        None => {
            let path = work.path().join("xp-era.img");
            make_image(&path)?;
            path
        }
    };
    let root = SysRoot::real();
    // Where this program keeps its moves' records and journals; the audit
    // reads the same place, so it would name a move left unfinished.
    let store = Store::new(work.path().join("state"));
    let opts = AuditOptions { store: store.clone(), ..Default::default() };
    let before = audit_path(&root, &path, &opts);
    println!("{}: misaligned partitions {:?}", path.display(), misaligned(&before));

    let session = Session::open(root.clone(), &path, &Overrides::default(), false)?.store(store);
    let wanted = session.wanted(&[])?;
    let moving = MoveOptions::default();
    for planned in session.plan(&moving, &wanted)? {
        print!("{}", planned.describe(&path));
    }
    if session.move_all(&moving, &wanted, &mut Print)? != Outcome::Finished {
        return Err("stopped before the end".into());
    }

    let after = audit_path(&root, &path, &opts);
    let left = misaligned(&after);
    println!("{}: misaligned partitions {left:?}", path.display());
    if !left.is_empty() {
        return Err("still misaligned".into());
    }
    Ok(())
}
