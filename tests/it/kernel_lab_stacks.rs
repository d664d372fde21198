//! Live stacks on a real kernel (docs/kernel-lab.md): in one boot of the
//! kernel lab, on two virtio-scsi disks of 512 logical / 4096 physical
//! sectors (tests/lab/stacks.sh), LVM on md raid1 over partitions at 63
//! and 2048 (the kernel stacks alignment_offset -1) and over two aligned
//! ones, LUKS2 opened on a partition at an odd LBA, a dm-linear at an odd
//! sector and an LV on a PV whose pe_start is 1 MiB + 3584.
//!
//! `blkalign audit` of each stacked device follows its sysfs slaves (with
//! md's data offsets and the device-mapper table) to every disk under it:
//! where its byte 0 lands there must equal what the peers say (partition
//! starts from sysfs, `mdadm --examine`'s data offset, `dmsetup table`,
//! `cryptsetup status`, `pvs -o pe_start`), and its verdicts must equal
//! the kernel's stacked `alignment_offset` (0 aligned; -1 when the ways
//! down disagree, which blkalign must show). `audit` of the disks finds the
//! same devices up the partitions' holders, and the layers its header walk
//! finds start where the kernel maps them.
//!
//! bcache0 on a backing device (make-bcache -B) in a partition at an odd
//! LBA: its byte 0 lies `data_offset` (`bcache-super-show`) past the
//! partition's start, 512 bytes off, which `audit /dev/bcache0` must say
//! whatever the kernel's own `alignment_offset` for it (printed).
//!
//! A move over a failing disk, on the real kernel's own fault injector
//! (docs/kernel-lab.md): scsi_debug's medium errors on one 4 KiB block of a
//! file in an ext4 at LBA 63 (tests/lab/faults.sh). The read check refuses
//! the move with nothing written, naming the file; a move that meets the
//! error half-way is undone to the partition's exact bytes; a rescued move
//! zero-fills exactly the failing sectors, which its GNU ddrescue map lists
//! as ddrescuelog reads it, and the file they hit equals the original with
//! that block zeroed. A write error from a device-mapper `error` segment
//! stops the move naming the LBA, and `--undo`, or a rerun once the table
//! is linear again, ends in the partition whole. Each finished journal is
//! a few KiB holding none of the partition's bytes.

use crate::common;

use common::lab;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

tests![long(live_stacks_kept_alignment_failing_disks_and_moves_at_boot = 290)];

/// The four cases below in one boot (a boot costs about 25 s of CPU under
/// TCG): each with its own disks, serials, volume groups and results
/// directory, its script run after the one before it (the move at boot
/// first, while udev has activated no other group), then each case's
/// checks.
fn live_stacks_kept_alignment_failing_disks_and_moves_at_boot() {
    let tools = [
        "mdadm",
        "cryptsetup",
        "pvcreate",
        "dmsetup",
        "sgdisk",
        "mkfs.ext4",
        "make-bcache",
        "bcache-super-show",
        "e2fsck",
        "debugfs",
        "ddrescuelog",
    ];
    if !lab::ready() || !common::needs(true, &tools) {
        return;
    }
    let dir = lab::Dir::new();
    let rw = |script: &str| dir.rw().join(lab::name_of(script));
    let mut disks = Vec::new();
    at_boot_disks(&dir, &mut disks);
    keep_disks(&dir, &mut disks);
    stacks_disks(&dir, &mut disks);
    std::fs::create_dir(rw("faults.sh")).expect("faults.sh's results directory");
    std::fs::write(rw("faults.sh").join("f.bin"), faults_file()).expect("f.bin");
    let scripts: [(&str, &[&str]); 4] = [
        ("atboot.sh", &["b1"]),
        ("keep.sh", &["k1", "k2", "k3"]),
        ("stacks.sh", &["s1", "s2"]),
        // Its disk is scsi_debug's, made in the guest, holding f.bin.
        ("faults.sh", &[]),
    ];
    lab::run_batch(&dir, &disks, &scripts);
    let (atboot, keep, stacks, faults) =
        (rw("atboot.sh"), rw("keep.sh"), rw("stacks.sh"), rw("faults.sh"));
    a_move_at_boot_moves_a_partition_under_an_active_volume_group(atboot);
    a_move_never_misaligns_what_the_kernel_aligned(keep);
    live_stacks_agree_with_the_kernel_and_the_peers(stacks);
    a_failing_disk_cannot_corner_a_move(faults);
}

/// stacks.sh's disks, added to `disks`.
fn stacks_disks(dir: &lab::Dir, disks: &mut Vec<String>) {
    for serial in ["s1", "s2"] {
        let image = dir.image(&format!("{serial}.img"), 256 << 20);
        disks.push(format!("scsi:512:4096:{}:{serial}", image.display()));
    }
}

const PHYSICAL: u64 = 4096;
/// Stacked devices that leave no header on the disk: only the kernel
/// (holders and the table) knows where they are.
const HEADERLESS: &[&str] = &["/dev/mapper/lin"];

fn live_stacks_agree_with_the_kernel_and_the_peers(rw: PathBuf) {
    let text = |name: &str| text_of(&rw, name);
    let json = |name: &str| json_of(&rw, name);
    let kernel = json("kernel.json");
    let audit = json("audit.json");
    let members: Vec<String> = std::fs::read_dir(&rw)
        .expect("results")
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            Some(name.strip_prefix("examine-")?.strip_suffix(".txt")?.to_string())
        })
        .collect();
    let peers = Peers::read(&text, &members);
    let view = View::new(&kernel, &audit);

    let mut failures = Vec::new();
    for (path, k) in
        view.kernel.iter().filter(|(_, k)| !k["slaves"].as_array().is_none_or(Vec::is_empty))
    {
        let expected = view.expected(&peers, k["name"].as_str().unwrap_or_default());
        let mismatches = check_device(path, k, view.target(k), &expected);
        let verdict = if mismatches.is_empty() { "ok" } else { "MISMATCH" };
        println!(
            "{verdict:<8} {path} ({}): kernel alignment_offset {}, on the disks at {expected:?}",
            k["name"], k["alignment_offset"]
        );
        for m in &mismatches {
            println!("  ✗ {m}");
        }
        failures.extend(mismatches.into_iter().map(|m| format!("{path}: {m}")));
        failures.extend(view.check_disks(path, k, &expected));
    }
    for (path, k) in
        view.kernel.iter().filter(|(_, k)| k["slaves"].as_array().is_some_and(Vec::is_empty))
    {
        failures.extend(view.check_partitions(path, k));
    }
    failures.extend(check_bcache(&json("bcache.json"), &json("audit-bcache.json"), &view, &text));
    // Something is misaligned, nothing unchecked.
    if kernel["audit_exit"] != 1 {
        failures.push(format!("audit exited {}: {}", kernel["audit_exit"], text("audit.err")));
    }
    let human = text("human.txt");
    for line in [
        "stack: md0 → ",
        "misaligned: 3584 bytes past a 4096-byte physical boundary",
        "stack: bcache0 → ",
    ] {
        if !human.contains(line) {
            failures.push(format!("the human report lacks {line:?}:\n{human}"));
        }
    }
    if !human.lines().any(|l| l.contains("held: partition 3: lin → ")) {
        failures.push(format!("the human report does not show the dm-linear's holder:\n{human}"));
    }
    failures.extend(check_refusals(&json("refusals.json"), &json("lsblk.json")));
    failures.extend(check_names(&audit, &json("lsblk.json")));
    assert!(failures.is_empty(), "{} disagreements:\n{}", failures.len(), failures.join("\n"));
}

/// bcache0's way down: onto its backing partition at `data_offset`
/// (`bcache-super-show`'s dev.data.first_sector), 512 bytes off.
fn check_bcache(
    kernel: &Value,
    audit: &Value,
    view: &View,
    text: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let k = &kernel["bcache0"];
    println!(
        "bcache0: the kernel's alignment_offset {}, physical_block_size {}, slaves {}",
        k["alignment_offset"], k["physical"], k["slaves"]
    );
    let show = text("bcache-super-show.txt");
    let first_sector = show.lines().find_map(|l| {
        l.trim()
            .strip_prefix("dev.data.first_sector")?
            .split_whitespace()
            .next()?
            .parse::<u64>()
            .ok()
    });
    let backing = k["slaves"][0].as_str().unwrap_or_default();
    let Some((disk, start, _)) = view.partitions.get(backing) else {
        return vec![format!("bcache0: its slave {backing:?} is no partition the kernel lists")];
    };
    let Some(expected) = first_sector.map(|s| start + s * 512) else {
        return vec![format!("bcache-super-show printed no data offset:\n{show}")];
    };
    let t = &audit["targets"][0];
    let stack = t["stack"].as_array().cloned().unwrap_or_default();
    let way = |o: &Value| {
        o["disk"] == disk.as_str()
            && o["via"].as_array().and_then(|v| v.last()) == Some(&Value::from(backing))
            && o["disk_offset_bytes"] == expected
            && o["misalignment_bytes"] == expected % PHYSICAL
            && o["verdict"] == "misaligned"
    };
    let mut out = Vec::new();
    if expected % PHYSICAL != 512 || stack.len() != 1 || !way(&stack[0]) {
        out.push(format!(
            "bcache0: blkalign's stack {stack:?}; the peers put it on {disk} at byte {expected}"
        ));
    }
    if kernel["audit_exit"] != 1 {
        out.push(format!("audit /dev/bcache0 exited {}", kernel["audit_exit"]));
    }
    if t["layers"].as_array().is_none_or(|l| !l.iter().any(|l| l["name"] == "ext4")) {
        out.push(format!("bcache0: the ext4 made on it not found: {}", summary(&t["layers"])));
    }
    out
}

/// Every device's path, kind and holders by lsblk's names: PATH
/// (/dev/mapper/NAME, not /dev/dm-N), TYPE (lvm, crypt, dm → "dm"; raid1 →
/// "md"; disk) and NAME (a holder's first `via`).
fn check_names(audit: &Value, lsblk: &Value) -> Vec<String> {
    let mut by_path = BTreeMap::new();
    let mut names = std::collections::BTreeSet::new();
    let mut stack = vec![&lsblk["blockdevices"]];
    while let Some(devices) = stack.pop() {
        for d in devices.as_array().into_iter().flatten() {
            by_path.insert(d["path"].as_str().unwrap_or_default(), d["type"].as_str());
            names.extend(d["name"].as_str());
            stack.push(&d["children"]);
        }
    }
    let mut out = Vec::new();
    for t in audit["targets"].as_array().into_iter().flatten() {
        let path = t["path"].as_str().unwrap_or_default();
        let kind = match by_path.get(path).copied().flatten() {
            Some("lvm" | "crypt" | "dm") => "dm",
            Some(raid) if raid.starts_with("raid") => "md",
            Some("disk") => "disk",
            other => {
                out.push(format!("{path} ({}) is no PATH of lsblk's (type {other:?})", t["name"]));
                continue;
            }
        };
        if t["kind"] != kind {
            out.push(format!("{path}: kind {}, lsblk's type {:?}", t["kind"], by_path[path]));
        }
        let holders = t["partitions"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| p["holders"].as_array().into_iter().flatten());
        for h in holders.chain(t["holders"].as_array().into_iter().flatten()) {
            let first = h["via"][0].as_str().unwrap_or_default();
            if !names.contains(first) {
                out.push(format!("{path}: holder {first} is no NAME of lsblk's"));
            }
        }
    }
    out
}

/// `realign DISK N --yes` of a partition held by each kind of stack, every
/// other partition held too: refused (exit 2), naming partition N and its
/// holder by lsblk's PATH, in the words for lsblk's TYPE of it.
fn check_refusals(refusals: &Value, lsblk: &Value) -> Vec<String> {
    const WORDS: &[(&str, &str)] = &[
        ("dm", "device-mapper linear"),
        ("raid1", "MD RAID raid1"),
        ("crypt", "dm-crypt"),
        ("lvm", "LVM logical volume"),
    ];
    fn walk(devices: &Value, out: &mut BTreeMap<String, String>) {
        for d in devices.as_array().into_iter().flatten() {
            if let (Some(path), Some(kind)) = (d["path"].as_str(), d["type"].as_str()) {
                out.insert(path.into(), kind.into());
            }
            walk(&d["children"], out);
        }
    }
    let mut types = BTreeMap::new();
    walk(&lsblk["blockdevices"], &mut types);
    let mut out = Vec::new();
    let mut kinds = std::collections::BTreeSet::new();
    for r in refusals.as_array().into_iter().flatten() {
        let node = r["node"].as_str().unwrap_or_default();
        let stderr = r["stderr"].as_str().unwrap_or_default();
        let needle = format!("in use: {} is held by ", node.trim_start_matches("/dev/"));
        let held = stderr.lines().find_map(|l| l.split_once(&needle)).map(|(_, rest)| rest);
        let Some((path, said)) = held.and_then(|h| h.split_once(" (")) else {
            out.push(format!("realign {node}: exit {}, {stderr:?} names not it", r["exit"]));
            continue;
        };
        let said = said.strip_suffix(')').unwrap_or(said);
        let kind = types.get(path).map(String::as_str);
        let words = WORDS.iter().find(|(k, _)| Some(*k) == kind).map(|(_, w)| *w);
        if r["exit"] != 2 || words != Some(said) {
            out.push(format!(
                "realign {node}: exit {}, held by {path} ({said}); lsblk: {path} is {kind:?}",
                r["exit"]
            ));
        }
        kinds.extend(kind.map(String::from));
    }
    if kinds.len() != WORDS.len() {
        out.push(format!("the refusals named holders of types {kinds:?}, not one of each"));
    }
    out
}

/// The text of a file the guest wrote in `rw` ("" when it wrote none).
fn text_of(rw: &std::path::Path, name: &str) -> String {
    std::fs::read_to_string(rw.join(name)).unwrap_or_default()
}

/// A JSON file the guest wrote in `rw`; when it does not parse, the
/// guest's build and audit errors say why.
fn json_of(rw: &std::path::Path, name: &str) -> Value {
    serde_json::from_str(&text_of(rw, name)).unwrap_or_else(|e| {
        panic!(
            "{name}: {e}\nbuild.err:\n{}\naudit.err:\n{}",
            text_of(rw, "build.err"),
            text_of(rw, "audit.err")
        )
    })
}

/// What the peers printed in the guest.
struct Peers {
    /// dm name → its table's targets (type and arguments, sectors).
    tables: BTreeMap<String, Vec<Vec<String>>>,
    /// PV → pe_start in bytes.
    pe_start: BTreeMap<String, u64>,
    /// md member (sda1) → data offset in bytes (mdadm --examine).
    data_offset: BTreeMap<String, u64>,
    /// cryptsetup status: the device and the payload offset in bytes.
    crypt: (String, u64),
}

impl Peers {
    /// From the files the guest wrote; `members`: the md members examined.
    fn read(text: &dyn Fn(&str) -> String, members: &[String]) -> Peers {
        let mut tables: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
        for line in text("dmsetup-table.txt").lines() {
            let Some((name, rest)) = line.split_once(": ") else { continue };
            let words: Vec<String> = rest.split_whitespace().skip(2).map(String::from).collect();
            tables.entry(name.to_string()).or_default().push(words);
        }
        let pe_start = text("pvs.txt")
            .lines()
            .filter_map(|l| {
                let (pv, at) = l.trim().split_once(':')?;
                Some((pv.trim_start_matches("/dev/").to_string(), at.trim().parse().ok()?))
            })
            .collect();
        let sectors = |t: &str, key: &str| -> Option<u64> {
            let line = t.lines().find(|l| l.trim_start().starts_with(key))?;
            let value = line.split_once(':')?.1.split_whitespace().next()?;
            Some(value.parse::<u64>().ok()? * 512)
        };
        let mut data_offset = BTreeMap::new();
        for member in members {
            if let Some(o) = sectors(&text(&format!("examine-{member}.txt")), "Data Offset") {
                data_offset.insert(member.to_string(), o);
            }
        }
        let status = text("cryptsetup-status.txt");
        let device = status
            .lines()
            .find_map(|l| l.trim().strip_prefix("device:"))
            .map_or(String::new(), |d| d.trim().trim_start_matches("/dev/").to_string());
        let crypt = (device, sectors(&status, "offset").unwrap_or(u64::MAX));
        Peers { tables, pe_start, data_offset, crypt }
    }
}

/// The kernel's view and blkalign's audit, side by side.
struct View<'a> {
    /// Device path (as the script named it) → the kernel's view.
    kernel: BTreeMap<String, &'a Value>,
    /// Kernel name → blkalign's target.
    targets: BTreeMap<String, &'a Value>,
    /// Partition name → (disk, start in bytes, the kernel's alignment_offset).
    partitions: BTreeMap<String, (String, u64, i64)>,
}

impl<'a> View<'a> {
    fn new(kernel: &'a Value, audit: &'a Value) -> View<'a> {
        let devices = kernel["devices"].as_object().expect("kernel.json devices");
        let kernel: BTreeMap<String, &Value> =
            devices.iter().map(|(p, v)| (p.clone(), v)).collect();
        let targets = audit["targets"]
            .as_array()
            .expect("audit targets")
            .iter()
            .map(|t| (t["name"].as_str().unwrap_or_default().to_string(), t))
            .collect();
        let mut partitions = BTreeMap::new();
        for k in kernel.values() {
            for p in k["partitions"].as_array().into_iter().flatten() {
                let name = p["name"].as_str().unwrap_or_default().to_string();
                let disk = k["name"].as_str().unwrap_or_default().to_string();
                let start = p["start_512"].as_u64().unwrap_or(0) * 512;
                partitions
                    .insert(name, (disk, start, p["alignment_offset"].as_i64().unwrap_or(-2)));
            }
        }
        View { kernel, targets, partitions }
    }

    fn target(&self, k: &Value) -> &'a Value {
        let name = k["name"].as_str().unwrap_or_default();
        self.targets.get(name).copied().unwrap_or(&Value::Null)
    }

    /// The dm name (/dev/mapper/NAME) of kernel device `name`, if any.
    fn dm_name(&self, name: &str) -> Option<String> {
        let (path, _) = self.kernel.iter().find(|(_, k)| k["name"] == name)?;
        Some(path.strip_prefix("/dev/mapper/")?.to_string())
    }

    /// Where kernel device `name`'s byte 0 lies on each disk, from the
    /// peers alone: (disk, partition it lies in, byte).
    fn expected(&self, peers: &Peers, name: &str) -> Vec<(String, String, u64)> {
        if let Some((disk, start, _)) = self.partitions.get(name) {
            return vec![(disk.clone(), name.to_string(), *start)];
        }
        let Some(k) = self.kernel.values().find(|k| k["name"] == name) else { return Vec::new() };
        let slaves: Vec<&str> =
            k["slaves"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let mut out = Vec::new();
        for slave in &slaves {
            let shift = if name.starts_with("md") {
                peers.data_offset.get(*slave).copied()
            } else {
                // One linear or crypt target per device here, over its one slave.
                let dm = self.dm_name(name).unwrap_or_default();
                let table = peers.tables.get(&dm).map(Vec::as_slice).unwrap_or_default();
                match table {
                    [t] if t[0] == "linear" && slaves.len() == 1 => {
                        let offset = t[2].parse::<u64>().ok().map(|s| s * 512);
                        // An LV: its first extent is the PV's first.
                        if let Some(&pe) = peers.pe_start.get(*slave) {
                            assert_eq!(
                                offset,
                                Some(pe),
                                "{dm}: dmsetup table against pvs pe_start"
                            );
                        }
                        offset
                    }
                    [t] if t[0] == "crypt" && slaves.len() == 1 => {
                        let offset = t[5].parse::<u64>().ok().map(|s| s * 512);
                        assert_eq!(peers.crypt.0, *slave, "cryptsetup status names the device");
                        assert_eq!(offset, Some(peers.crypt.1), "dmsetup table against cryptsetup");
                        offset
                    }
                    _ => None,
                }
            };
            let Some(shift) = shift else {
                out.push((format!("{slave}: no peer says where"), String::new(), u64::MAX));
                continue;
            };
            for (disk, part, at) in self.expected(peers, slave) {
                out.push((disk, part, at + shift));
            }
        }
        out.sort();
        out
    }

    /// The disk audits: each place `path` lands is among the holders of the
    /// partition it lies in, where the kernel maps it; unless the device
    /// leaves no header there, a layer the header walk found starts there.
    fn check_disks(
        &self,
        path: &str,
        k: &Value,
        expected: &[(String, String, u64)],
    ) -> Vec<String> {
        let name = k["name"].as_str().unwrap_or_default();
        let mut out = Vec::new();
        for (disk, part, at) in expected {
            let Some(p) = self.partition_audit(disk, part) else {
                out.push(format!("{path}: blkalign's audit of {disk} has no partition {part}"));
                continue;
            };
            let aligned = at % PHYSICAL == 0;
            // Holders go by lsblk's names: a dm device by its dm name.
            let shown = self.dm_name(name).unwrap_or_else(|| name.to_string());
            let held = p["holders"].as_array().into_iter().flatten().any(|h| {
                h["via"][0] == shown.as_str()
                    && h["disk_offset_bytes"] == *at
                    && h["aligned_physical"] == aligned
            });
            if !held {
                out.push(format!(
                    "{path}: the audit of {disk} does not show {name} held on {part} at byte {at} \
                     (aligned {aligned}); its holders: {}",
                    p["holders"]
                ));
            }
            let layer =
                p["layers"].as_array().into_iter().flatten().find(|l| {
                    l["absolute_offset_bytes"] == *at && l["aligned_physical"] == aligned
                });
            if layer.is_none() && !HEADERLESS.contains(&path) {
                out.push(format!(
                    "{path}: no layer blkalign found in {part} starts at byte {at}, where the \
                     kernel maps it: {}",
                    summary(&p["layers"])
                ));
            }
        }
        out
    }

    fn partition_audit(&self, disk: &str, part: &str) -> Option<&'a Value> {
        let number = self.kernel.values().find(|k| k["name"] == disk)?["partitions"]
            .as_array()?
            .iter()
            .find(|p| p["name"] == part)?["number"]
            .clone();
        let t = self.targets.get(disk)?;
        t["partitions"].as_array()?.iter().find(|p| p["number"] == number)
    }

    /// Each partition: blkalign's start and verdict equal the kernel's.
    fn check_partitions(&self, path: &str, k: &Value) -> Vec<String> {
        let disk = k["name"].as_str().unwrap_or_default();
        let mut out = Vec::new();
        for p in k["partitions"].as_array().into_iter().flatten() {
            let part = p["name"].as_str().unwrap_or_default();
            let Some(ours) = self.partition_audit(disk, part) else {
                out.push(format!("{path}: no partition {part} in the audit"));
                continue;
            };
            let start = p["start_512"].as_u64().unwrap_or(0) * 512;
            let kernel_aligned = p["alignment_offset"] == 0;
            if ours["start_bytes"] != start || ours["aligned_physical"] != kernel_aligned {
                out.push(format!(
                    "{path}: {part} at {} aligned {}; the kernel: {start}, alignment_offset {}",
                    ours["start_bytes"], ours["aligned_physical"], p["alignment_offset"]
                ));
            }
        }
        out
    }
}

/// Every way blkalign's audit of stacked device `path` differs from the
/// kernel's and the peers' view.
fn check_device(
    path: &str,
    k: &Value,
    t: &Value,
    expected: &[(String, String, u64)],
) -> Vec<String> {
    let mut out = Vec::new();
    if t.is_null() || !t["error"].is_null() {
        return vec![format!("not audited: {t}")];
    }
    let stack = t["stack"].as_array().cloned().unwrap_or_default();
    let mut ours: Vec<(String, String, u64)> = stack
        .iter()
        .map(|o| {
            let via = o["via"].as_array().and_then(|v| v.last()).and_then(Value::as_str);
            let disk = o["disk"].as_str().unwrap_or_default().to_string();
            (
                disk,
                via.unwrap_or_default().to_string(),
                o["disk_offset_bytes"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect();
    ours.sort();
    if ours != expected {
        out.push(format!("blkalign puts it at {ours:?}, the peers at {expected:?}"));
    }
    // The kernel's stacked alignment_offset: one value when every way down
    // agrees, which each of blkalign's must equal; -1 when they do not.
    let offsets: Vec<&Value> = stack.iter().map(|o| &o["alignment_offset"]).collect();
    let kernel = &k["alignment_offset"];
    match kernel.as_i64() {
        Some(-1) => {
            if offsets.windows(2).all(|w| w[0] == w[1]) {
                out.push(format!("the kernel says -1 (ways down disagree), blkalign {offsets:?}"));
            }
        }
        _ => {
            if offsets.iter().any(|o| *o != kernel) {
                out.push(format!(
                    "the kernel says alignment_offset {kernel}, blkalign {offsets:?}"
                ));
            }
            if t["alignment_offset"] != *kernel || t["alignment_offset_source"] != "kernel" {
                out.push(format!(
                    "its alignment offset {} ({}), the kernel's {kernel}",
                    t["alignment_offset"], t["alignment_offset_source"]
                ));
            }
        }
    }
    // Verdicts: misaligned when the kernel says anything but 0.
    let misaligned = *kernel != 0;
    let said = stack.iter().any(|o| o["verdict"] == "misaligned");
    if said != misaligned {
        out.push(format!("blkalign's stack says misaligned={said}, the kernel's offset {kernel}"));
    }
    for l in t["layers"].as_array().into_iter().flatten() {
        // Layers at a whole physical sector into the device share its fate.
        let at = l["absolute_offset_bytes"].as_u64().unwrap_or(1);
        if at % PHYSICAL == 0 && (l["verdict"] == "misaligned") != misaligned {
            out.push(format!(
                "layer {} at byte {at} judged {}, the kernel's offset {kernel}",
                l["name"], l["verdict"]
            ));
        }
    }
    if t["layers"].as_array().is_none_or(Vec::is_empty) {
        out.push(format!("no layers found in it (each holds ext4): {}", path));
    }
    out
}

fn summary(layers: &Value) -> String {
    let layers = layers.as_array().cloned().unwrap_or_default();
    let each = layers.iter().map(|l| format!("{} at {}", l["name"], l["absolute_offset_bytes"]));
    each.collect::<Vec<_>>().join(", ")
}

/// The disks of the case below, added to `disks`.
fn keep_disks(dir: &lab::Dir, disks: &mut Vec<String>) {
    let image = dir.image("k1.img", 160 << 20);
    // A table for 512-byte sectors, as a disk out of its 512e enclosure.
    let sized = dir.image("k2.img", 64 << 20);
    let script = "label: dos\nstart=2048, size=40960\nstart=43008, size=40960\n";
    common::run_stdin("sfdisk", &["-q", sized.to_str().unwrap()], Some(script));
    let held = dir.image("k3.img", 64 << 20);
    common::run_stdin(
        "sfdisk",
        &["-q", held.to_str().unwrap()],
        Some("label: dos\nstart=2048, size=40960\n"),
    );
    disks.extend([
        format!("scsi:512:4096:{}:k1", image.display()),
        format!("scsi:4096:4096:{}:k2", sized.display()),
        format!("scsi:512:4096:{}:k3", held.display()),
    ]);
}

/// Issue 27's first find, on the real kernel: cryptsetup and pvcreate make
/// up for partitions at LBA 63 and 83969 (the kernel's partition
/// alignment_offset tells them how), so their mappings are aligned; a move
/// of those partitions misaligned them. `audit` calls them compensated,
/// `realign` refuses to move them (the disk unchanged) and, unasked, moves
/// only the partition whose LUKS2 payload was off with it; afterwards the
/// kernel reports every mapping aligned, the moved file system is clean and
/// its file intact (tests/lab/keep.sh).
fn a_move_never_misaligns_what_the_kernel_aligned(rw: PathBuf) {
    let text = |name: &str| text_of(&rw, name);
    let json = |name: &str| json_of(&rw, name);
    let before = json("before.json");
    // What cryptsetup and LVM made of the kernel's alignment_offset.
    assert_eq!(before["luks_dump"]["segments"]["0"]["offset"], ((16u64 << 20) + 512).to_string(), "{before}");
    assert_eq!(text("pe_start.txt").trim(), ((1u64 << 20) + 3584).to_string());
    assert_eq!(before["offsets"]["kept"], 0, "{before}");
    assert_eq!(before["offsets"]["keepvg-lv"], 0, "{before}");
    assert_ne!(before["offsets"]["off"], 0, "the forced payload is off: {before}");

    let audit = json("audit.json");
    let verdict = |n: usize| audit["targets"][0]["partitions"][n]["verdict"].clone();
    assert_eq!(
        [verdict(0), verdict(1), verdict(2)],
        ["compensated", "compensated", "misaligned"],
        "{audit}"
    );
    for n in [1, 2] {
        let refused = json(&format!("refuse-{n}.json"));
        let said = text(&format!("refuse-{n}.err"));
        assert_eq!(
            (refused["exit"].as_i64(), refused["unchanged"].as_bool()),
            (Some(2), Some(true)),
            "{said}"
        );
        assert!(said.contains("would misalign what is aligned today"), "{said}");
    }
    let after = json("after.json");
    assert_eq!(after["exit"], 0, "{}{}", text("moved.out"), text("moved.err"));
    let starts: Vec<u64> =
        after["starts"].as_array().expect("starts").iter().filter_map(Value::as_u64).collect();
    assert_eq!(&starts[..2], [63, 83969], "the compensated partitions stayed: {after}");
    assert_eq!(starts[2] % 8, 0, "the off one moved to an aligned start: {after}");
    for mapping in ["kept", "keepvg-lv", "off"] {
        assert_eq!(after["offsets"][mapping], 0, "{mapping}: {after}");
    }
    assert_eq!(
        (after["fsck"].as_i64(), after["file_intact"].as_bool()),
        (Some(0), Some(true)),
        "{after}"
    );
    let clean = json("audit-after.json");
    let verdicts = clean["targets"][0]["partitions"].to_string();
    assert!(!verdicts.contains("\"misaligned\""), "{clean}");

    // Issue 27, 5: the kernel reads the 512-byte table at 4096-byte LBAs
    // (the second partition starts past the disk's end: dropped); blkalign
    // names the mismatch and the rescale that fixes it.
    let sized = json("sized.json");
    assert_eq!(sized["kernel_starts_512"], serde_json::json!([2048 * 8]), "{sized}");
    assert_eq!(sized["audit_exit"], 1, "{sized}");
    let problems = json("sized-audit.json")["targets"][0]["problems"].to_string();
    assert!(
        problems.contains("table_sector_size") && problems.contains("--from 512"),
        "{problems}"
    );

    // Issue 27, 2: a buffered read of the held disk's node still sees the
    // partition empty after mkfs (the cache is stale); blkalign sees ext4.
    let stale = json("stale.json");
    assert_eq!(
        (stale["before"].as_str(), stale["cached"].as_str()),
        (Some("00000000"), Some("00000000")),
        "{stale}"
    );
    let layers = json("stale-audit.json")["targets"][0]["partitions"][0]["layers"].to_string();
    assert!(layers.contains("\"ext4\""), "{layers}");
    let advice = json("stale-advise.json")["partitions"][0]["advice"].to_string();
    assert!(!advice.contains("mkfs"), "{advice}");
}

/// The file faults.sh puts in the file system on its failing disk.
fn faults_file() -> Vec<u8> {
    (0..2_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect()
}

fn a_failing_disk_cannot_corner_a_move(rw: PathBuf) {
    let text = |name: &str| std::fs::read_to_string(rw.join(name)).unwrap_or_default();
    let json = |name: &str| -> Value {
        serde_json::from_str(&text(name))
            .unwrap_or_else(|e| panic!("{name}: {e}\nbuild.err:\n{}", text("build.err")))
    };
    let said =
        |name: &str| format!("{}{}", text(&format!("{name}.out")), text(&format!("{name}.err")));
    // Case `name` ended with partition 1 at `start`, whole and clean.
    let landed = |name: &str, r: &Value, start: &Value| {
        assert_eq!(
            (&r["start"], &r["same"], &r["fsck"]),
            (start, &Value::from(true), &Value::from(0)),
            "{name}: {r}\n{}",
            text(&format!("{name}.fsck"))
        );
    };

    let refused = json("refused.json");
    let bad = refused["bad"].as_u64().expect("bad LBA");
    assert_eq!(refused["exit"], 2, "{}", said("refused"));
    assert_eq!(refused["unchanged"], true, "the disk was written: {refused}");
    let words = said("refused");
    let named = format!("LBA {bad}-{} (8 sectors) cannot be read", bad + 7);
    assert!(words.contains(&named) && words.contains("/f.bin"), "{named}: {words}");

    let undone = json("undone.json");
    assert_eq!(undone["stop"], 2, "{}", said("stopped"));
    let stopped = said("stopped");
    assert!(stopped.contains("--undo") && stopped.contains("--rescue"), "{stopped}");
    assert!(undone["status"]["chunks_done"].as_u64() >= Some(1), "something moved: {undone}");
    assert_eq!(undone["exit"], 0, "{}", said("undone"));
    landed("undone", &undone, &Value::from(63));
    assert_journal_clean(&undone);

    let rescued = json("rescued.json");
    assert_eq!(rescued["exit"], 0, "{}", said("rescued"));
    let listed: Vec<u64> = text("rescued.list").lines().filter_map(|l| l.parse().ok()).collect();
    assert_eq!(listed, (bad..bad + 8).collect::<Vec<_>>(), "ddrescuelog -l- of the map");
    let result: Value = serde_json::from_str(&text("rescued.out")).expect("realign --json");
    assert!(result["rescued"]["holders"].to_string().contains("/f.bin"), "{result}");
    assert_eq!(
        (&rescued["start"], &rescued["fsck"], &rescued["marker_same"]),
        (&Value::from(83968), &Value::from(0), &Value::from(true)),
        "{rescued}\n{}",
        text("rescued.fsck")
    );
    let moved = std::fs::read(rw.join("f.rescued")).expect("f.bin as moved");
    let expected = std::fs::read(rw.join("f.expected")).expect("f.bin, its bad block zeroed");
    assert_ne!(expected, faults_file());
    assert!(moved == expected, "f.bin after the rescue is not the original with block 10 zeroed");
    assert_journal_clean(&rescued);

    // Issue 28, 4: the disk deleted mid-move says it is gone and how it is
    // known; back under another name, the same command on it finishes.
    let vanished = json("vanished.json");
    let stopped = said("vanished-stopped");
    assert_eq!(vanished["stop"], 2, "{stopped}");
    assert!(stopped.contains("is gone") && stopped.contains("not by its name"), "{stopped}");
    assert_ne!(vanished["old"], vanished["new"], "the disk came back under its old name");
    assert_eq!(vanished["exit"], 0, "{}", said("vanished"));
    landed("vanished", &vanished, &Value::from(2048));
    assert_journal_clean(&vanished);

    // A write error (a device-mapper error segment where the first chunk
    // lands) stops the move; --undo, or the same command once the fault is
    // gone (the table reloaded linear), ends in a whole partition.
    for way in ["undo", "rerun"] {
        let r = json(&format!("write-{way}.json"));
        let stopped = said(&format!("write-{way}-stopped"));
        assert_eq!(r["stop"], 2, "{stopped}");
        assert!(stopped.contains("I/O error writing LBA 81000"), "names the LBA: {stopped}");
        assert_eq!(r["exit"], 0, "{}", said(&format!("write-{way}")));
        landed(&format!("write-{way}"), &r, &r["expected_start"]);
        assert_journal_clean(&r);
    }

    // dm-flakey: down for the first run, then up and down by the second;
    // reruns end in the whole partition at 2048, dropped writes included.
    for (mode, stopped_by) in
        [("error_writes", "I/O error writing"), ("drop_writes", "it acknowledged")]
    {
        let r = json(&format!("flakey-{mode}.json"));
        let first = said(&format!("flakey-{mode}-1"));
        assert_eq!(r["first"], 2, "{mode}: the first run, all writes failing: {first}");
        assert!(
            first.contains(stopped_by) || first.contains("verification failed"),
            "{mode}: {first}"
        );
        let last = format!("flakey-{mode}-{}", r["runs"]);
        assert_eq!(r["exit"], 0, "{mode}: {r}: {}", said(&last));
        landed(&format!("flakey-{mode}"), &r, &Value::from(2048));
    }
}

/// A finished journal keeps its record only: a few KiB, no user bytes.
fn assert_journal_clean(result: &Value) {
    let bytes = result["journal_bytes"].as_i64().expect("journal size");
    assert!((0..64 << 10).contains(&bytes), "journal of {bytes} bytes: {result}");
    assert_eq!(result["journal_has_marker"], false, "user bytes in the journal: {result}");
}

/// The disks of the case below, added to `disks`.
fn at_boot_disks(dir: &lab::Dir, disks: &mut Vec<String>) {
    let image = dir.image("b1.img", 200 << 20);
    disks.push(format!("scsi:512:512:{}:b1", image.display()));
}

/// A move at boot with the root on LVM on the partition moved, as the
/// initramfs makes it (`--at-boot-run`) after udev's LVM rules activated
/// the volume group: with the LV mounted it is refused and the disk is
/// unchanged; unmounted, the mapping is removed, the partition moved from
/// 63 to 2048 and the group activated again over it: the file intact,
/// e2fsck clean, the kernel's alignment_offset of the LV 0 and the audit
/// clean (tests/lab/atboot.sh).
fn a_move_at_boot_moves_a_partition_under_an_active_volume_group(rw: PathBuf) {
    let text = |name: &str| text_of(&rw, name);
    assert_eq!(text("pe_start.txt").trim(), (1u64 << 20).to_string(), "the PV's data is off too");
    let refused = json_of(&rw, "refused.json");
    assert_eq!(
        (refused["exit"].as_i64(), refused["unchanged"].as_bool()),
        (Some(1), Some(true)),
        "{}",
        text("refused.err")
    );
    assert!(text("refused.err").contains("refused, nothing written"), "{}", text("refused.err"));
    let moved = json_of(&rw, "moved.json");
    let said = format!("{}{}", text("moved.out"), text("moved.err"));
    assert_eq!(moved["exit"], 0, "{said}");
    assert_eq!(moved["start"], 2048, "{said}");
    assert_eq!(moved["active"], true, "the group is active again: {said}");
    assert_eq!((moved["fsck"].as_i64(), moved["file_intact"].as_bool()), (Some(0), Some(true)));
    assert_eq!(moved["alignment_offset"], 0, "{moved}");
    assert_eq!(moved["audit"], 0, "{}", text("audit.out"));
}
