//! Partition schemes other than MBR and GPT, built by parted and fdisk (or,
//! where no tool writes them, byte by byte and checked with libblkid), and
//! audited by blkalign: BSD, Sun, SGI, Apple, Amiga and Atari labels are
//! read as Linux reads them; the rest are named and refused (exit 2).

use crate::common;

use common::{audit_json, needs, run, run_stdin, Image, Loop};
use serde_json::Value;
use std::fs::File;
use std::os::unix::fs::FileExt;

tests![
    bsd_label_on_the_whole_disk,
    bsd_label_nested_in_dos_slices,
    bsd_label_in_sector_1_is_read_as_libblkid_reads_it,
    sun_labels,
    sgi_volume_headers,
    apple_partition_maps,
    amiga_rigid_disk_blocks,
    atari_root_sectors,
    schemes_parted_writes_are_named,
    schemes_no_tool_writes_are_named_as_libblkid_names_them,
    tables_nested_in_dos_slices_are_named,
    sun_label_on_a_loop_device,
];

const MIB: u64 = 1 << 20;

/// (number, start, size) rows, in 512-byte sectors.
type Rows = Vec<(u64, u64, u64)>;

/// libblkid's partitions, as `partx -s` lists them.
fn partx(path: &str) -> Rows {
    let out = run("partx", &["-s", "-g", "-o", "NR,START,SECTORS", path]);
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |f: Option<&str>| f.and_then(|f| f.parse().ok()).expect("a number");
    text.lines()
        .map(|line| {
            let mut f = line.split_whitespace();
            (field(f.next()), field(f.next()), field(f.next()))
        })
        .collect()
}

/// parted's label name ("unknown" when it reads none) and partitions
/// (`unit s print`, machine-readable).
fn parted(path: &str) -> (String, Rows) {
    let exe = common::which("parted").expect("parted");
    let out = std::process::Command::new(exe)
        .args(["-s", "-m", path, "unit", "s", "print"])
        .output()
        .expect("run parted");
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines().skip(1);
    let disk = lines.next().unwrap_or_else(|| panic!("parted printed {text:?}"));
    let label = disk.split(':').nth(5).expect("label field").to_string();
    let sectors = |f: &str| f.trim_end_matches('s').parse::<u64>().expect("sectors");
    let rows = lines
        .map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            (f[0].parse().expect("number"), sectors(f[1]), sectors(f[3]))
        })
        .collect();
    (label, rows)
}

/// A 64 MiB image labelled `label` by parted, with a partition made by
/// `mkpart KIND... START END` for each (start, end).
fn parted_image(label: &str, kind: &[&str], ranges: &[(&str, &str)]) -> Image {
    let image = Image::new(64 * MIB);
    run("parted", &["-s", image.str(), "mklabel", label]);
    for (start, end) in ranges {
        let mut args = vec!["-s", image.str(), "mkpart"];
        args.extend(kind);
        args.extend([*start, *end]);
        run("parted", &args);
    }
    image
}

/// parted's words for a partition where the label has types, and where not.
const PRIMARY: &[&str] = &["primary", "ext2"];
const PLAIN: &[&str] = &["ext2"];

/// The usual aligned layout: 4-9 MiB and 9-20 MiB.
const ALIGNED: &[(&str, &str)] = &[("4MiB", "9MiB"), ("9MiB", "20MiB")];

/// What blkalign's audit says of `path`.
struct Audit {
    code: i32,
    doc: Value,
}

impl Audit {
    fn of(path: &str) -> Audit {
        let (code, doc) = audit_json(&[path]);
        Audit { code, doc }
    }

    fn table(&self) -> &str {
        self.doc["table"].as_str().expect("table")
    }

    fn scheme(&self) -> Option<&str> {
        self.doc["scheme"].as_str()
    }

    fn partitions(&self) -> Vec<&Value> {
        self.doc["partitions"].as_array().map(|a| a.iter().collect()).unwrap_or_default()
    }

    fn rows(&self) -> Rows {
        let n = |p: &Value, k: &str| p[k].as_u64().unwrap_or_else(|| panic!("{k}: {p}"));
        self.partitions().iter().map(|p| (n(p, "number"), n(p, "start"), n(p, "size"))).collect()
    }

    /// Our rows of a given type (e.g. a whole-disk entry).
    fn rows_of_type(&self, type_id: &str) -> Rows {
        let rows = self.rows();
        let parts = self.partitions();
        rows.into_iter()
            .zip(parts)
            .filter(|(_, p)| p["type_id"] == type_id)
            .map(|(r, _)| r)
            .collect()
    }

    fn verdict(&self, number: u64) -> &str {
        let part = self.partitions().into_iter().find(|p| p["number"] == number);
        part.and_then(|p| p["verdict"].as_str()).unwrap_or_else(|| panic!("no partition {number}"))
    }
}

/// Every row of `part` is one of ours.
fn assert_within(ours: &Rows, part: &Rows, who: &str) {
    assert!(!part.is_empty(), "{who} lists nothing");
    for row in part {
        assert!(ours.contains(row), "{who} lists {row:?}, we have {ours:?}");
    }
}

/// Audit an image the peers made: same table as parted, partitions as
/// partx lists them plus `extra` (entries Linux makes but libblkid leaves
/// out), parted's among them, and the exit code `code`.
fn check(image: &Image, table: &str, extra: &Rows, code: i32) -> Audit {
    let audit = Audit::of(image.str());
    assert_eq!(audit.table(), table, "{}", audit.doc);
    let mut want = partx(image.str());
    want.extend(extra);
    want.sort_unstable();
    let mut ours = audit.rows();
    ours.sort_unstable();
    assert_eq!(ours, want, "ours against partx + {extra:?}: {}", audit.doc);
    let (label, by_parted) = parted(image.str());
    if !matches!(label.as_str(), "msdos" | "unknown") {
        assert_within(&ours, &by_parted, "parted");
    }
    assert_eq!(audit.code, code, "exit code: {}", audit.doc);
    audit
}

fn bsd_label_on_the_whole_disk() {
    if !needs(false, &["parted", "partx"]) {
        return;
    }
    // parted writes the Alpha layout (byte 64 of sector 0), which Linux reads.
    let image = parted_image("bsd", PLAIN, ALIGNED);
    assert_eq!(parted(image.str()).0, "bsd");
    check(&image, "bsd", &vec![], 0);

    let image = parted_image("bsd", PLAIN, &[("8193s", "18431s"), ("18432s", "40959s")]);
    let audit = check(&image, "bsd", &vec![], 1);
    assert_eq!((audit.verdict(1), audit.verdict(2)), ("misaligned", "aligned"));
}

/// fdisk: a DOS label whose partition 1 (2048+40 MiB) is a slice of
/// `kind` holding a nested BSD label with a at `a` and b at `b` (fdisk
/// makes each one sector longer than asked).
fn fdisk_nested_bsd(kind: &str, a: u64, b: u64) -> Image {
    let image = Image::new(64 * MIB);
    let script = format!(
        "o\nn\np\n1\n2048\n+40M\nt\n{kind}\nb\ny\nn\na\n{a}\n+4M\nt\na\n07\nn\nb\n{b}\n+8M\n\
         t\nb\n01\nw\nr\nw\n"
    );
    run_stdin("fdisk", &[image.str()], Some(&script));
    image
}

fn bsd_label_nested_in_dos_slices() {
    if !needs(false, &["fdisk", "partx", "parted"]) {
        return;
    }
    for kind in ["a5", "a6", "a9"] {
        let image = fdisk_nested_bsd(kind, 4096, 16385);
        let audit = check(&image, "mbr", &vec![], 1);
        assert_eq!((audit.verdict(5), audit.verdict(6)), ("aligned", "misaligned"));

        let image = fdisk_nested_bsd(kind, 4096, 16384);
        let audit = check(&image, "mbr", &vec![], 0);
        assert_eq!(audit.rows(), [(1, 2048, 81920), (5, 4096, 8193), (6, 16384, 16385)]);
        assert_within(&audit.rows(), &parted(image.str()).1, "parted");
    }
}

fn bsd_label_in_sector_1_is_read_as_libblkid_reads_it() {
    if !needs(false, &["fdisk", "partx"]) {
        return;
    }
    // The slice of a nested label, on its own, is an i386 whole-disk label:
    // libblkid reads it, Linux makes no partitions of it (exit 1).
    let nested = fdisk_nested_bsd("a5", 4096, 16384);
    let slice = std::fs::read(&nested.path).expect("read image");
    let image = Image::new(40 * MIB);
    put(&image, 0, &slice[2048 * 512..(2048 * 512 + 40 * MIB) as usize]);
    let audit = check(&image, "bsd", &vec![], 1);
    assert_eq!(audit.rows(), [(1, 4096, 8193), (2, 16384, 16385)]);
    let codes = audit.doc["problems"].as_array().expect("problems").clone();
    assert!(codes.iter().any(|p| p["code"] == "label_ignored_by_linux"), "{}", audit.doc);
}

fn sun_labels() {
    if !needs(false, &["parted", "partx", "fdisk"]) {
        return;
    }
    // fdisk's default label: cylinders of 255 × 63 sectors put partition 2
    // at 80325, misaligned. Linux also makes partition 3 of the whole-disk
    // entry, which libblkid skips.
    let image = Image::new(64 * MIB);
    run_stdin("fdisk", &[image.str()], Some("s\nw\n"));
    let audit = check(&image, "sun", &vec![(3, 0, 128_520)], 1);
    assert_eq!(audit.rows()[1], (2, 80325, 48195));
    assert_eq!((audit.verdict(1), audit.verdict(2)), ("aligned", "misaligned"));

    // parted puts partitions on cylinders of 128 sectors: aligned.
    let image = parted_image("sun", PLAIN, ALIGNED);
    let whole = vec![(3, 0, 64 * MIB / 512)];
    let audit = check(&image, "sun", &whole, 0);
    assert_eq!(audit.rows_of_type("0x05"), whole);
}

fn sgi_volume_headers() {
    if !needs(false, &["parted", "partx"]) {
        return;
    }
    let image = parted_image("dvh", PRIMARY, &[("8193s", "18431s")]);
    let audit = check(&image, "sgi", &vec![], 1);
    assert_eq!(audit.verdict(1), "misaligned");

    let audit = check(&parted_image("dvh", PRIMARY, ALIGNED), "sgi", &vec![], 0);
    // The volume header (9) and the whole-disk volume (11), as Linux has them.
    assert_eq!(audit.rows_of_type("0x06"), [(11, 0, 64 * MIB / 512)]);
    assert!(audit.rows().contains(&(9, 0, 4096)));
}

fn apple_partition_maps() {
    if !needs(false, &["parted", "partx"]) {
        return;
    }
    // Linux numbers every map entry, the map itself and free space
    // included; parted hides the free ones.
    let image = parted_image("mac", PRIMARY, &[("8193s", "18431s")]);
    let audit = check(&image, "mac", &vec![], 1);
    assert_eq!(audit.verdict(2), "misaligned");

    let audit = check(&parted_image("mac", PRIMARY, ALIGNED), "mac", &vec![], 0);
    assert_eq!(audit.rows()[0], (1, 1, 63));
}

fn amiga_rigid_disk_blocks() {
    if !needs(false, &["parted"]) {
        return;
    }
    // libblkid has no Amiga prober: parted is the peer. It puts the RDB in
    // block 2 and partitions on cylinders of 128 blocks.
    let image = parted_image("amiga", PRIMARY, ALIGNED);
    let audit = Audit::of(image.str());
    assert_eq!(audit.table(), "amiga", "{}", audit.doc);
    let (label, rows) = parted(image.str());
    assert_eq!(label, "amiga");
    assert_eq!(audit.rows(), rows);
    assert_eq!(rows, [(1, 8192, 10240), (2, 18432, 22528)]);
    assert_eq!(audit.code, 0, "{}", audit.doc);
    assert_eq!(audit.partitions()[0]["kind"], "amiga");

    let image = Image::new(64 * MIB);
    run("parted", &["-s", "-a", "none", image.str(), "mklabel", "amiga"]);
    run("parted", &["-s", "-a", "none", image.str(), "mkpart", "primary", "ext2", "4MiB", "9MiB"]);
    // The partition block (block 3) on cylinders of 1 × 63 blocks from
    // cylinder 65: unit 4095, resealed.
    let mut block = std::fs::read(&image.path).expect("read image")[3 * 512..4 * 512].to_vec();
    for (index, value) in [(3usize, 1u32), (5, 63), (9, 65), (10, 120)] {
        block[128 + 4 * index..132 + 4 * index].copy_from_slice(&value.to_be_bytes());
    }
    block[8..12].fill(0);
    let sum = (0..64).fold(0u32, |s, i| {
        s.wrapping_add(u32::from_be_bytes(block[i * 4..i * 4 + 4].try_into().expect("4 bytes")))
    });
    block[8..12].copy_from_slice(&0u32.wrapping_sub(sum).to_be_bytes());
    put(&image, 3 * 512, &block);
    let audit = Audit::of(image.str());
    assert_eq!(audit.rows(), [(1, 4095, 56 * 63)], "{}", audit.doc);
    assert_eq!((audit.verdict(1), audit.code), ("misaligned", 1));
}

fn atari_root_sectors() {
    if !needs(false, &["parted", "partx"]) {
        return;
    }
    let audit = check(&parted_image("atari", PRIMARY, ALIGNED), "atari", &vec![], 0);
    assert_eq!(audit.partitions()[0]["kind"], "atari");
    assert_eq!(audit.partitions()[0]["type_id"], "LNX");

    let image = Image::new(64 * MIB);
    run("parted", &["-s", "-a", "none", image.str(), "mklabel", "atari"]);
    for (start, end) in [("8193s", "18431s"), ("18432s", "40959s")] {
        run("parted", &["-s", "-a", "none", image.str(), "mkpart", "primary", "ext2", start, end]);
    }
    let audit = check(&image, "atari", &vec![], 1);
    assert_eq!((audit.verdict(1), audit.verdict(2)), ("misaligned", "aligned"));
    assert_eq!(parted(image.str()).1, audit.rows());
}

/// The scheme is named and the exit code is 2.
fn assert_unsupported(path: &str, scheme: &str) {
    let audit = Audit::of(path);
    assert_eq!((audit.table(), audit.scheme()), ("unsupported", Some(scheme)), "{}", audit.doc);
    assert_eq!(audit.code, 2);
}

fn schemes_parted_writes_are_named() {
    if !needs(false, &["parted"]) {
        return;
    }
    // Amiga and Atari labels are audited (amiga_rigid_disk_blocks,
    // atari_root_sectors); PC-98 is only named.
    let image = parted_image("pc98", PRIMARY, ALIGNED);
    assert_eq!(parted(image.str()).0, "pc98");
    assert_unsupported(image.str(), "pc98");
}

/// Write `bytes` at byte `at` of the image.
fn put(image: &Image, at: u64, bytes: &[u8]) {
    let file = File::options().write(true).open(&image.path).expect("open image");
    file.write_all_at(bytes, at).expect("write image");
}

/// libblkid's name for the table of `path` (PTTYPE).
fn pttype(path: &str) -> String {
    let out = run("blkid", &["-p", "-o", "value", "-s", "PTTYPE", path]);
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn schemes_no_tool_writes_are_named_as_libblkid_names_them() {
    if !needs(false, &["blkid", "partx", "sfdisk"]) {
        return;
    }
    let image = Image::new(8 * MIB);
    put(&image, 0, &[0xC9, 0xC2, 0xD4, 0xC1]); // "IBMA" in EBCDIC
    assert_eq!(pttype(image.str()), "aix");
    assert_unsupported(image.str(), "aix");

    // DEC Ultrix: magic and "valid" at the end of sector 31, one partition.
    let image = Image::new(8 * MIB);
    let mut label = vec![0x57, 0x29, 3, 0, 1, 0, 0, 0];
    label.extend(1000u32.to_le_bytes());
    label.extend(2048u32.to_le_bytes());
    put(&image, 31 * 512 + 440, &label);
    assert_eq!(pttype(image.str()), "ultrix");
    assert_unsupported(image.str(), "ultrix");
}

/// partx's scheme for each partition of `path`.
fn partx_schemes(path: &str) -> Vec<String> {
    let out = run("partx", &["-s", "-g", "-o", "SCHEME", path]);
    String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim().to_string()).collect()
}

fn tables_nested_in_dos_slices_are_named() {
    if !needs(false, &["sfdisk", "partx"]) {
        return;
    }
    // Minix: the slice's first sector is an MBR of 0x81 subpartitions.
    let image = Image::sfdisk(8 * MIB, "label: dos\nstart=2048, size=8192, type=81\n");
    let mut sub = vec![0u8; 512];
    sub[446 + 4] = 0x81;
    sub[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
    sub[446 + 12..446 + 16].copy_from_slice(&1024u32.to_le_bytes());
    sub[510..512].copy_from_slice(&[0x55, 0xAA]);
    put(&image, 2048 * 512, &sub);
    assert!(partx_schemes(image.str()).contains(&"minix".to_string()));
    assert_unsupported(image.str(), "minix");

    // Solaris x86: a VTOC (sane, version 1) in the slice's second sector.
    // Linux also reads one in a 0xBF slice; libblkid only in 0x82 ones.
    let image = Image::sfdisk(8 * MIB, "label: dos\nstart=2048, size=8192, type=82\n");
    let mut vtoc = vec![0u8; 512];
    vtoc[12..16].copy_from_slice(&0x600D_DEEEu32.to_le_bytes());
    vtoc[16..20].copy_from_slice(&1u32.to_le_bytes());
    vtoc[30..32].copy_from_slice(&8u16.to_le_bytes());
    let slice0 = 72; // tag 2 (root), start 16, size 1024
    vtoc[slice0..slice0 + 2].copy_from_slice(&2u16.to_le_bytes());
    vtoc[slice0 + 4..slice0 + 8].copy_from_slice(&16u32.to_le_bytes());
    vtoc[slice0 + 8..slice0 + 12].copy_from_slice(&1024u32.to_le_bytes());
    put(&image, 2049 * 512, &vtoc);
    assert!(partx_schemes(image.str()).contains(&"solaris".to_string()));
    assert_unsupported(image.str(), "solaris");
}

fn sun_label_on_a_loop_device() {
    if !needs(true, &["parted", "losetup", "partx"]) {
        return;
    }
    let image = parted_image("sun", PLAIN, ALIGNED);
    let dev = Loop::attach(&image.path, 512);
    let audit = Audit::of(dev.str());
    assert_eq!(audit.doc["kind"], "disk", "{}", audit.doc);
    assert_eq!(audit.table(), "sun");
    let file_view = Audit::of(image.str());
    assert_eq!(audit.rows(), file_view.rows());
    assert_within(&audit.rows(), &partx(dev.str()), "partx");
}
