//! An installer's path through the library alone: plan a fresh GPT aligned
//! for the disk, write it through `commit` (the in-use check, a backup,
//! ordered writes read back), then audit what was written.
//!
//! ```sh
//! cargo run --example install_image                # on a blank image it makes
//! cargo run --example install_image -- blank.img   # on yours (must be blank)
//! ```

use blkalign::{
    audit_path, commit_table, encode_table, old_bytes, open_target, plan_table, Align,
    AuditOptions, Class, Commit, Held, Ids, Kernel, NewLabel, Overrides, PartitionRequest, Size,
    SysRoot,
};
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let work = tempfile::tempdir()?;
    let path: PathBuf = match std::env::args_os().nth(1) {
        Some(given) => given.into(),
        None => {
            let path = work.path().join("blank.img");
            std::fs::File::create(&path)?.set_len(64 << 20)?;
            path
        }
    };
    let root = SysRoot::real();
    let opened = open_target(&root, &path, &Overrides::default(), false)?;
    let part = |size, type_id: &str, name: &str| PartitionRequest {
        min_start: None,
        size,
        type_id: type_id.into(),
        name: Some(name.into()),
    };
    let requests = [part(Size::Bytes(8 << 20), "efi", "esp"), part(Size::Rest, "linux", "root")];
    let size = opened.topology.size_bytes;
    let plan = plan_table(&opened.geometry, size, NewLabel::Gpt, Align::Optimal, false, &requests)?;
    for p in &plan.partitions {
        println!("partition {}: sectors {}+{} ({})", p.number, p.start, p.size, p.type_id);
    }

    let held = Held::take(&root, &opened.target)?;
    let chunks = encode_table(&plan.table(&Ids::random(plan.partitions.len())?)?);
    let old = old_bytes(held.reader(), &path, &chunks)?;
    if old.iter().flatten().any(|&b| b != 0) {
        return Err(format!("{} is not blank where the table goes", path.display()).into());
    }
    let done = commit_table(
        &root,
        &held,
        Commit {
            chunks: &chunks,
            saves: None,
            backup: Some(&work.path().join("backup.bin")),
            sector_size: plan.sector_size,
            identity: opened.identity(&root),
            kernel: Kernel::Table { sector_size: plan.sector_size, size },
        },
    )?;
    let read = done.table.map_or(0, |t| t.partitions.len());
    println!("wrote and read back a GPT with {read} partitions");
    drop(held);

    let audit = audit_path(&root, &path, &AuditOptions::default());
    let verdicts: Vec<Class> = audit.partitions.iter().map(|p| p.verdict.verdict).collect();
    println!("{}: {verdicts:?}", path.display());
    if verdicts.len() != plan.partitions.len() || verdicts.iter().any(|&v| v != Class::Aligned) {
        return Err("the audit does not find every planned partition aligned".into());
    }
    Ok(())
}
