//! libguestfs' `virt-alignment-scan` as the oracle for VM images: the same
//! qcow2, VMDK, VHD and VDI images (made by `qemu-img convert` from raw
//! layouts sfdisk wrote) read by it, in its appliance (booted with TCG:
//! nested KVM hangs here), and by blkalign through QEMU. Every partition
//! starts at the same byte in both, and where they judge, they agree up to
//! their different rules, each named where it applies:
//!
//! - below 4 KiB: misaligned for both ("bad (alignment < 4K)");
//! - 4 KiB up to 64 KiB: physically aligned for blkalign (suboptimal: off
//!   the 1 MiB grid) and "bad (alignment < 64K)" for virt-alignment-scan,
//!   which knows no physical sector;
//! - 64 KiB up to 1 MiB: "ok" for it, suboptimal for blkalign (1 MiB grid);
//! - 1 MiB and more: ok and aligned.

use crate::common;

use common::{audit_json, needs, run_stdin, Image};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

tests![
    virt_alignment_scan_agrees_on_every_image_format,
];

const TOOLS: &[&str] = &["virt-alignment-scan", "qemu-img", "qemu-storage-daemon", "sfdisk"];

/// An MBR like an old fdisk's: LBA 63, 2048, an extended partition at an
/// aligned start holding a logical one at an odd start.
const MBR: &str = "label: dos\nstart=63, size=100000\nstart=102400, size=100000\n\
                   start=204800, size=100000, type=5\nstart=204863, size=50000\n";

/// A GPT with a start in each band: 2 KiB (alignment 2K), 20 KiB (4K),
/// 64 KiB, 1 MiB and an odd sector.
const GPT: &str =
    "label: gpt\nfirst-lba: 34\nstart=36, size=4\nstart=40, size=88\nstart=128, size=1920\n\
                   start=2048, size=2048\nstart=4097, size=1000\n";

const FORMATS: &[&str] = &["qcow2", "vmdk", "vpc", "vdi"];

/// One line of virt-alignment-scan: `/dev/sdb5  104889856  512  bad (...)`.
#[derive(Debug)]
struct Scanned {
    start: u64,
    alignment: u64,
    ok: bool,
}

/// "512", "2048K", "1M"-style alignments as bytes.
fn alignment_bytes(text: &str) -> u64 {
    let (digits, unit) =
        text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let n: u64 = digits.parse().expect("alignment digits");
    n * match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        other => panic!("alignment unit {other:?}"),
    }
}

/// virt-alignment-scan's lines by device name (sda1, sdb5, ...), and its
/// exit code.
fn scan(images: &[(PathBuf, &str)]) -> (i32, BTreeMap<String, Scanned>) {
    let mut cmd = Command::new("virt-alignment-scan");
    for (path, format) in images {
        cmd.arg(format!("--format={format}")).arg("-a").arg(path);
    }
    let out = cmd
        .env("LIBGUESTFS_BACKEND", "direct")
        .env("LIBGUESTFS_BACKEND_SETTINGS", "force_tcg")
        // As the kernel lab's guests (docs/kernel-lab.md): under TCG a
        // library mapped at a new address in every process is translated
        // anew in every process; the scan is a fifth faster without.
        .env("LIBGUESTFS_APPEND", "norandmaps")
        .output()
        .expect("run virt-alignment-scan");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines = text.lines().filter_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let device = fields.first()?.strip_prefix("/dev/")?.to_string();
        let start = fields.get(1)?.parse().ok()?;
        let alignment = alignment_bytes(fields.get(2)?);
        Some((device, Scanned { start, alignment, ok: fields.get(3) == Some(&"ok") }))
    });
    let found: BTreeMap<String, Scanned> = lines.collect();
    assert!(!found.is_empty(), "virt-alignment-scan printed nothing: {out:?}");
    (out.status.code().expect("exit code"), found)
}

/// What virt-alignment-scan would say of a start, by its rules.
fn their_rule(start: u64) -> (bool, &'static str) {
    let alignment = 1u64 << start.trailing_zeros().min(40);
    match alignment {
        a if a < 4096 => (false, "below 4 KiB: misaligned for both"),
        a if a < 64 << 10 => (false, "4-64 KiB: physically aligned, virt-alignment-scan wants 64K"),
        _ => (true, "64 KiB or more: ok for it"),
    }
}

fn virt_alignment_scan_agrees_on_every_image_format() {
    if !needs(false, TOOLS) {
        return;
    }
    let _exports = common::IMAGE_EXPORTS.lock();
    let layouts = [("mbr", Image::new(256 << 20), MBR), ("gpt", Image::new(16 << 20), GPT)];
    let mut images: Vec<(PathBuf, &str, &Image)> = Vec::new();
    for (_, raw, script) in &layouts {
        run_stdin("sfdisk", &["--no-reread", "--no-tell-kernel", raw.str()], Some(script));
        for format in FORMATS {
            let out = raw.path.with_extension(format);
            let path = out.to_str().expect("utf-8");
            common::run("qemu-img", &["convert", "-f", "raw", "-O", format, raw.str(), path]);
            images.push((out, format, raw));
        }
    }
    let drives: Vec<(PathBuf, &str)> = images.iter().map(|(p, f, _)| (p.clone(), *f)).collect();
    let (code, scanned) = scan(&drives);
    // A start below 4 KiB is in both layouts: exit 3 says so.
    assert_eq!(code, 3, "{scanned:?}");
    for (i, (image, format, raw)) in images.iter().enumerate() {
        let disk = format!("sd{}", char::from(b'a' + i as u8));
        let (_, ours) = audit_json(&[image.to_str().expect("utf-8")]);
        let (_, raw_audit) = audit_json(&[raw.str()]);
        let parts = ours["partitions"].as_array().expect("partitions");
        assert_eq!(parts, raw_audit["partitions"].as_array().expect("raw partitions"), "{format}");
        let theirs: Vec<(&String, &Scanned)> = scanned
            .iter()
            .filter(|(d, _)| d.strip_prefix(&disk).is_some_and(|n| n.parse::<u32>().is_ok()))
            .collect();
        assert_eq!(theirs.len(), parts.len(), "{format} {disk}: {theirs:?} vs {parts:?}");
        for p in parts {
            let number = p["number"].as_u64().expect("number");
            let s = &scanned[&format!("{disk}{number}")];
            let start = p["start_bytes"].as_u64().expect("start");
            assert_eq!(s.start, start, "{format} {disk}{number}: start");
            assert_eq!(s.alignment, 1u64 << start.trailing_zeros().min(40), "alignment");
            let (ok, rule) = their_rule(start);
            assert_eq!(s.ok, ok, "{format} {disk}{number}: {rule}");
            if p["kind"] == "extended" {
                continue;
            }
            let verdict = p["verdict"].as_str().expect("verdict");
            let expected = match s.alignment {
                a if a < 4096 => "misaligned",
                a if a < 1 << 20 => "suboptimal",
                _ => "aligned",
            };
            assert_eq!(
                verdict, expected,
                "{format} {disk}{number} ({rule}; blkalign's grid is 1 MiB)"
            );
        }
    }
}
