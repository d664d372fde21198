//! The output options of audit, plan and advise, as lsblk has them (-o,
//! -n, -b, -r, -w, --wide, --color), checked against sfdisk's and sgdisk's
//! own view of the disks; and their JSON checked against docs/schema/.

use crate::common;

use common::{blkalign, check_schema, json_of, needs, run, sfdisk_json, Image, Loop};

tests![
    columns_are_picked_by_name_in_any_case,
    plus_adds_to_the_default_columns,
    added_columns_keep_the_table_in_80_columns_and_detail_last,
    output_help_lists_every_column,
    noheadings_drops_only_the_header,
    bytes_are_sfdisk_sectors_times_the_sector_size,
    raw_output_has_no_padding,
    width_wraps_between_words,
    a_terminal_gets_its_width_and_colours,
    colour_is_asked_for_or_left_out,
    nonsense_combinations_are_refused,
    help_has_examples_and_describes_every_option,
    plan_and_advise_pick_columns_too,
    json_documents_match_their_schemas,
    json_of_a_loop_device_matches_the_schemas,
    the_summary_agrees_with_its_counts,
    advise_on_an_image_names_nodes_that_exist,
    help_fits_80_columns,
];

const MIB: u64 = 1 << 20;
/// The old fdisk layout: misaligned primaries, an extended partition with
/// a misaligned logical, and an aligned one.
const LBA63: &str = "label: dos\nstart=63, size=20000\nstart=32768, size=40000, type=5\n\
                     start=32831, size=10000\nstart=43008, size=20000, type=82\n";

/// stdout of a blkalign run with `args`, and its exit code.
fn output(args: &[&str]) -> (i32, String) {
    let out = blkalign().args(args).output().expect("run blkalign");
    (out.status.code().expect("exit code"), String::from_utf8(out.stdout).expect("utf-8"))
}

/// The image audited throughout: sfdisk's LBA 63 layout.
fn lba63() -> Image {
    Image::sfdisk(64 * MIB, LBA63)
}

/// The header line of a table: the first line starting with `first`.
fn header(text: &str, first: &str) -> Vec<String> {
    let line = text.lines().map(str::trim).find(|l| l.starts_with(first));
    let line = line.unwrap_or_else(|| panic!("no header starting {first}: {text}"));
    line.split_whitespace().map(str::to_string).collect()
}

/// The columns `--output help` lists: (name, printed by default).
fn listed(command: &[&str]) -> Vec<(String, bool)> {
    let (code, text) = output(&[command, &["--output", "help"]].concat());
    assert_eq!(code, 0, "{text}");
    text.lines()
        .skip(1)
        .map(|l| {
            (
                l.get(3..).unwrap_or("").split(' ').next().unwrap_or("").to_string(),
                l.starts_with(" *"),
            )
        })
        .collect()
}

fn needs_sfdisk() -> bool {
    needs(false, &["sfdisk"])
}

fn columns_are_picked_by_name_in_any_case() {
    if !needs_sfdisk() {
        return;
    }
    let image = lba63();
    for spec in ["NAME,START", "name,Start"] {
        let (code, text) = output(&["audit", "-o", spec, image.str()]);
        assert_eq!(code, 1, "{text}");
        assert_eq!(header(&text, "NAME"), ["NAME", "START"]);
        let row = text.lines().map(str::trim).find(|l| l.starts_with("disk.img1"));
        assert_eq!(
            row.map(|r| r.split_whitespace().collect::<Vec<_>>()),
            Some(vec!["disk.img1", "63"])
        );
    }
}

fn plus_adds_to_the_default_columns() {
    if !needs_sfdisk() {
        return;
    }
    let image = lba63();
    let defaults: Vec<String> =
        listed(&["audit"]).into_iter().filter(|(_, d)| *d).map(|(n, _)| n).collect();
    let (_, text) = output(&["audit", "--wide", image.str()]);
    assert_eq!(header(&text, "NAME"), defaults);
    let (_, text) = output(&["audit", "--wide", "-o", "+end,PARTTYPE", image.str()]);
    // Before DETAIL, which stays last.
    let mut expected = defaults.clone();
    let detail = expected.pop();
    assert_eq!(detail.as_deref(), Some("DETAIL"));
    expected.extend(["END", "PARTTYPE", "DETAIL"].map(String::from));
    assert_eq!(header(&text, "NAME"), expected);
    let row = text.lines().find(|l| l.contains("disk.img1")).expect("row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[6..9], ["20062", "0x83", "starts"], "{text}");
}

/// Found by a user: `-o +NR,END,SECTORS` put the columns after DETAIL: 125
/// columns on an 80-column terminal, and on a pipe past the padded DETAIL,
/// near column 430.
fn added_columns_keep_the_table_in_80_columns_and_detail_last() {
    if !needs_sfdisk() {
        return;
    }
    let image = lba63();
    let added = ["audit", "-o", "+NR,END,SECTORS", image.str()];
    let (code, fitted) = output(&[&added[..], &["-w", "80"]].concat());
    assert_eq!(code, 1, "{fitted}");
    assert!(fitted.lines().all(|l| l.chars().count() <= 80), "{fitted}");
    let columns = header(&fitted, "NAME");
    assert_eq!(columns[columns.len() - 3..], ["NR", "END", "SECTORS"], "{fitted}");
    let row = fitted.lines().find(|l| l.contains("disk.img5")).expect("row");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[cells.len() - 3..], ["5", "42830", "10000"], "{fitted}");
    let (_, piped) = output(&added);
    let head = piped.lines().find(|l| l.trim_start().starts_with("NAME")).expect("header");
    let at = |name: &str| head.find(name).unwrap_or_else(|| panic!("{name}: {head}"));
    assert!(at("NR") < at("DETAIL") && head.trim_end().ends_with("DETAIL"), "{head}");
    assert!(at("SECTORS") < 80, "{head}");
    assert!(piped.lines().all(|l| l == l.trim_end()), "padded: {piped}");
}

/// `--output help` names every column `-o` takes, and an unknown one is
/// refused naming them all.
fn output_help_lists_every_column() {
    if !needs_sfdisk() {
        return;
    }
    let image = lba63();
    for command in [&["audit"][..], &["plan"], &["advise"]] {
        let columns = listed(command);
        assert!(columns.len() >= 5 && columns.iter().any(|(_, d)| *d), "{command:?}: {columns:?}");
        let names: Vec<&str> = columns.iter().map(|(n, _)| n.as_str()).collect();
        let all = names.join(",");
        let target = match command[0] {
            "plan" => &[image.str(), "--part", "rest"][..],
            _ => &[image.str()],
        };
        let (_, text) = output(&[command, &["--wide", "-o", &all], target].concat());
        assert_eq!(header(&text, names[0]), names, "{command:?}: {text}");
        let out = blkalign()
            .args(command)
            .args(["-o", "NAME,NOSUCH"])
            .args(target)
            .output()
            .expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("NOSUCH") && names.iter().all(|n| err.contains(n)), "{err}");
    }
}

fn noheadings_drops_only_the_header() {
    if !needs_sfdisk() {
        return;
    }
    let image = lba63();
    let (_, with) = output(&["audit", "--wide", image.str()]);
    let (_, without) = output(&["audit", "--wide", "-n", image.str()]);
    let header: Vec<&str> = with.lines().filter(|l| l.trim_start().starts_with("NAME ")).collect();
    assert_eq!(header.len(), 1, "{with}");
    // Without a header, columns are as wide as their cells: compare words.
    let words = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    let kept: Vec<Vec<String>> = with.lines().filter(|l| *l != header[0]).map(words).collect();
    assert_eq!(without.lines().map(words).collect::<Vec<_>>(), kept);
    let (_, raw) = output(&["audit", "-rn", "-o", "NAME", image.str()]);
    assert_eq!(raw, "disk.img1\ndisk.img2\ndisk.img5\ndisk.img6\n");
}

/// `-b`: starts, ends and sizes in bytes, as sfdisk's sectors say.
fn bytes_agree_with_sfdisk(command: &[&str], dev: &str) {
    let (label, parts) = sfdisk_json(dev);
    let (code, text) = output(&[command, &["-rnb", "-o", "NR,START,END,SIZE,SECTORS"]].concat());
    assert!(code == 0 || code == 1, "{text}");
    let rows: Vec<Vec<u64>> = text
        .lines()
        .map(|l| l.split(' ').map(|v| v.parse().unwrap_or_else(|_| panic!("{l}"))).collect())
        .collect();
    let theirs: Vec<Vec<u64>> = parts
        .iter()
        .map(|&(n, start, size, _)| {
            vec![n.into(), start * 512, (start + size) * 512 - 1, size * 512, size]
        })
        .collect();
    assert_eq!(rows, theirs, "{label} {command:?}");
}

fn bytes_are_sfdisk_sectors_times_the_sector_size() {
    if !needs(false, &["sfdisk", "sgdisk"]) {
        return;
    }
    let mbr = lba63();
    bytes_agree_with_sfdisk(&["audit", mbr.str()], mbr.str());
    let gpt = Image::new(64 * MIB);
    run(
        "sgdisk",
        &["-a", "1", "-n", "1:34:+8M", "-n", "2:20480:+16M", "-c", "2:my data", gpt.str()],
    );
    bytes_agree_with_sfdisk(&["audit", gpt.str()], gpt.str());
    let planned = Image::new(64 * MIB);
    let request = ["plan", planned.str(), "--label", "mbr", "--part", "8MiB", "--part", "8MiB"];
    let (_, json) = output(&[&request[..], &["--json"]].concat());
    let script: String = json_of(json.as_bytes())["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| format!("start={}, size={}\n", p["start"], p["size"]))
        .collect();
    run_sfdisk(planned.str(), &format!("label: dos\n{script}"));
    bytes_agree_with_sfdisk(&request, planned.str());
    let (_, human) = output(&["audit", "-o", "NAME,SIZE", gpt.str()]);
    assert!(human.contains("disk.img1   8 MiB") && human.contains("disk.img2  16 MiB"), "{human}");
}

fn run_sfdisk(image: &str, script: &str) {
    common::run_stdin("sfdisk", &["--no-reread", "--no-tell-kernel", image], Some(script));
}

/// Raw output is the table alone: single spaces, every cell one word.
fn raw_output_has_no_padding() {
    if !needs(false, &["sfdisk", "sgdisk"]) {
        return;
    }
    let image = Image::new(64 * MIB);
    run("sgdisk", &["-a", "1", "-n", "1:34:+8M", "-c", "1:EFI system", image.str()]);
    let columns = "NAME,START,PARTLABEL,VERDICT,DETAIL";
    let (_, text) = output(&["audit", "-r", "-o", columns, image.str()]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "NAME START PARTLABEL VERDICT DETAIL");
    assert_eq!(lines.len(), 2, "the table alone: {text}");
    let cells: Vec<&str> = lines[1].split(' ').collect();
    assert_eq!(cells[..4], ["disk.img1", "34", "EFI\\x20system", "misaligned"], "{text}");
    assert!(cells.len() == 5 && cells[4].contains("\\x20"), "{text}");
    let (_, plan) = output(&["plan", image.str(), "--part", "rest", "-r", "-o", "NR,START,SIZE"]);
    assert_eq!(plan.lines().collect::<Vec<_>>(), ["NR START SIZE", "1 2048 62\\x20MiB"], "{plan}");
}

/// Fitting a width only moves line breaks: the words, in order, are those
/// of the unwrapped report, none split, a word longer than the width
/// (the image's path) whole on its line.
fn words(text: &str) -> Vec<&str> {
    text.split_whitespace().filter(|w| *w != "DETAIL" && *w != "WHY").collect()
}

fn check_fitted(fitted: &str, full: &str, width: usize) {
    assert_eq!(words(fitted), words(full), "fitted:\n{fitted}\nfull:\n{full}");
    for line in fitted.lines() {
        let long_word = line.split_whitespace().count() == 1;
        assert!(line.chars().count() <= width || long_word, "longer than {width}: {line:?}");
    }
}

fn width_wraps_between_words() {
    if !needs_sfdisk() {
        return;
    }
    let image = lba63();
    let (_, full) = output(&["audit", image.str()]);
    assert!(full.lines().any(|l| l.chars().count() > 150), "piped output is not wrapped: {full}");
    let (_, fitted) = output(&["audit", "--width", "80", image.str()]);
    assert!(fitted.lines().count() > full.lines().count(), "{fitted}");
    check_fitted(&fitted, &full, 80);
    let (_, narrow) = output(&["audit", "-w", "20", image.str()]);
    assert_eq!(words(&narrow), words(&full), "{narrow}");
    assert!(narrow.lines().any(|l| l == image.str()), "a long word whole: {narrow}");
    let (_, wide) = output(&["audit", "--wide", image.str()]);
    assert_eq!(wide, full);
    let (_, advice) = output(&["advise", image.str()]);
    let (_, fitted) = output(&["advise", "-w", "80", image.str()]);
    check_fitted(&fitted, &advice, 80);
}

/// On a real terminal (util-linux's `script` gives one), $COLUMNS sets the
/// width and verdicts are coloured unless NO_COLOR or TERM=dumb.
fn a_terminal_gets_its_width_and_colours() {
    if !needs(false, &["sfdisk", "script"]) {
        return;
    }
    let image = lba63();
    let (_, full) = output(&["audit", "--color=never", image.str()]);
    let on_terminal = |env: &[(&str, &str)], args: &str| {
        let command = format!("{} audit {args} {}", env!("CARGO_BIN_EXE_blkalign"), image.str());
        let mut script = std::process::Command::new("script");
        script.args(["-qec", &command, "/dev/null"]).env("COLUMNS", "80").env_remove("NO_COLOR");
        script.env("TERM", "xterm").stdin(std::process::Stdio::null());
        let out = script.envs(env.iter().copied()).output().expect("run script");
        String::from_utf8(out.stdout).expect("utf-8").replace("\r\n", "\n")
    };
    let plain = on_terminal(&[], "--color=never");
    check_fitted(&plain, &full, 80);
    assert!(on_terminal(&[], "").contains("\x1b[31mmisaligned\x1b[0m"));
    assert!(!on_terminal(&[("NO_COLOR", "1")], "").contains('\x1b'));
    assert!(!on_terminal(&[("TERM", "dumb")], "").contains('\x1b'));
    assert_eq!(on_terminal(&[], "--wide --color=never"), full);
}

fn colour_is_asked_for_or_left_out() {
    if !needs_sfdisk() {
        return;
    }
    let image = lba63();
    let (_, always) = output(&["audit", "--color=always", image.str()]);
    assert!(
        always.contains("\x1b[31mmisaligned\x1b[0m") && always.contains("\x1b[32maligned\x1b[0m")
    );
    for args in [&["--color=never"][..], &["--color=auto"], &[]] {
        let (_, text) = output(&[&["audit"], args, &[image.str()]].concat());
        assert!(!text.contains('\x1b'), "{args:?}: {text:?}");
    }
    let out = blkalign().env("NO_COLOR", "1").args(["audit", image.str()]).output().expect("run");
    assert!(!String::from_utf8_lossy(&out.stdout).contains('\x1b'));
}

fn nonsense_combinations_are_refused() {
    let image = Image::new(8 * MIB);
    let path = image.str();
    for args in [
        &["audit", "--json", "-r", path][..],
        &["audit", "--json", "-o", "NAME", path],
        &["audit", "--format", "prometheus", "-n", path],
        &["audit", "--format", "json", "--color=always", path],
        &["audit", "--raw", "--wide", path],
        &["audit", "--wide", "--width", "80", path],
        &["plan", path, "--part", "rest", "--json", "-b"],
        &["advise", path, "--json", "--color=never"],
        &["audit", "--width", "0", path],
    ] {
        let out = blkalign().args(args).output().expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(
            err.contains("cannot be used with")
                || err.contains("only --format table")
                || err.contains("invalid value"),
            "{args:?}: {err}"
        );
    }
}

/// Every option says what it does, and the help ends in examples.
fn help_has_examples_and_describes_every_option() {
    for command in ["audit", "plan", "advise"] {
        let (code, text) = output(&[command, "--help"]);
        assert_eq!(code, 0);
        let examples = text.split("Examples:\n").nth(1).unwrap_or_else(|| panic!("{text}"));
        assert!(examples.lines().filter(|l| l.trim_start().starts_with("blkalign ")).count() >= 3);
        let options =
            text.split("Options:\n").nth(1).and_then(|t| t.split("\n\n").next()).expect("options");
        // Each option is a line naming it, its description on the same line
        // after two spaces or (help wrapped to 80 columns) on the next ones.
        let lines: Vec<&str> = options.lines().collect();
        for (i, line) in lines.iter().enumerate().filter(|(_, l)| l.trim_start().starts_with('-')) {
            let inline = line.trim_start().split_once("  ").map(|(_, d)| d.trim());
            let below = lines.get(i + 1).filter(|next| !next.trim_start().starts_with('-'));
            let description = inline.or(below.map(|d| d.trim())).unwrap_or("");
            assert!(description.len() > 5, "{command}: no description: {line:?}");
        }
    }
}

fn plan_and_advise_pick_columns_too() {
    let image = Image::new(64 * MIB);
    let (_, plan) = output(&[
        "plan",
        image.str(),
        "--part",
        "8MiB:efi:boot",
        "--part",
        "rest",
        "-o",
        "nr,partlabel,type",
    ]);
    let lines: Vec<Vec<&str>> =
        plan.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(
        lines,
        [vec!["NR", "PARTLABEL", "TYPE"], vec!["1", "boot", "efi"], vec!["2", "linux"]],
        "{plan}"
    );
    if !needs_sfdisk() {
        return;
    }
    let disk = Image::sfdisk(64 * MIB, "label: gpt\nstart=2048, size=8192\n");
    let (code, advice) = output(&["advise", "-rn", "-o", "NAME,DESTROYS", disk.str()]);
    assert_eq!(code, 0, "{advice}");
    assert!(!advice.is_empty() && advice.lines().all(|l| l == "disk.img1 yes"), "{advice}");
}

fn json_documents_match_their_schemas() {
    if !needs(false, &["sfdisk", "sgdisk", "mkfs.ext4"]) {
        return;
    }
    let mbr = lba63();
    let gpt = Image::new(64 * MIB);
    run("sgdisk", &["-n", "1:2048:+8M", "-n", "2:0:+16M", "-c", "2:data", gpt.str()]);
    let holding =
        Image::sfdisk(64 * MIB, "label: dos\nstart=2048, size=20480\nstart=24576, size=20480\n");
    run("mkfs.ext4", &["-q", "-F", "-E", &format!("offset={}", 2048 * 512), holding.str(), "8M"]);
    let documents = [
        ("audit", vec!["audit", "--json", mbr.str(), gpt.str(), holding.str(), "/nonexistent"]),
        ("audit", vec!["audit", "--format", "json", mbr.str()]),
        ("plan", vec!["plan", "--json", gpt.str(), "--part", "8MiB:efi:boot", "--part", "rest"]),
        (
            "plan",
            vec![
                "plan",
                "--json",
                mbr.str(),
                "--label",
                "mbr",
                "--part",
                "8MiB",
                "--part",
                "8MiB",
                "--part",
                "8MiB",
                "--part",
                "8MiB",
                "--part",
                "rest:swap",
            ],
        ),
        ("advise", vec!["advise", "--json", holding.str()]),
        ("advise", vec!["advise", "--json", gpt.str()]),
    ];
    for (schema, args) in documents {
        let (_, text) = output(&args);
        let doc = json_of(text.as_bytes());
        assert_eq!(doc["version"], 1, "{args:?}");
        assert!(text.starts_with("{\n  \"version\": 1,\n"), "pretty, version first: {text}");
        check_schema(schema, &text);
    }
    let (_, advice) = output(&["advise", "--json", holding.str()]);
    let parts = &json_of(advice.as_bytes())["partitions"];
    assert_eq!(parts[0]["contents"]["name"], "ext4", "{advice}");
    assert!(parts[1]["contents"].is_null(), "{advice}");
}

/// The same on a loop device, its partitions made known with partx.
fn json_of_a_loop_device_matches_the_schemas() {
    if !needs(true, &["sfdisk", "losetup", "partx", "mkfs.ext4"]) {
        return;
    }
    let image =
        Image::sfdisk(64 * MIB, "label: dos\nstart=63, size=20000\nstart=22528, size=40000\n");
    let dev = Loop::attach(&image.path, 512);
    dev.add_partitions(2);
    let node = dev.partition(2);
    run("mkfs.ext4", &["-q", "-F", "-b", "4096", node.to_str().expect("utf-8")]);
    let (code, audit) = output(&["audit", "--json", dev.str()]);
    assert_eq!(code, 1, "{audit}");
    check_schema("audit", &audit);
    let (_, advice) = output(&["advise", "--json", dev.str()]);
    check_schema("advise", &advice);
    let advice = json_of(advice.as_bytes());
    assert_eq!(advice["partitions"][1]["node"], format!("{}p2", dev.str()));
    let name = dev.dev.file_name().and_then(|n| n.to_str()).expect("name");
    let (_, raw) = output(&["audit", "-rn", "-o", "NAME,FSTYPE,VERDICT", dev.str()]);
    assert_eq!(raw, format!("{name}p1  misaligned\n{name}p2 ext4 aligned\n"));
}

/// Found by a user: "some starts suboptimal: 3 partitions, 3 aligned, 0
/// suboptimal" when only a layer inside was. The summary says what it
/// counts: here an ext4 of 1 KiB blocks in an aligned partition.
fn the_summary_agrees_with_its_counts() {
    if !needs(false, &["sfdisk", "mkfs.ext4"]) {
        return;
    }
    let image = Image::sfdisk(64 * MIB, "label: dos\nstart=2048, size=20480\nstart=22528\n");
    let offset = format!("offset={}", 2048 * 512);
    run("mkfs.ext4", &["-q", "-F", "-b", "1024", "-E", &offset, image.str(), "10240"]);
    let (code, text) = output(&["audit", image.str()]);
    assert_eq!(code, 0, "{text}");
    let summary = text.lines().find(|l| l.contains("summary:")).expect("summary");
    assert!(
        summary.contains(
            "summary: aligned to physical sectors, some layers inside suboptimal: 2 partitions, \
             2 aligned, 0 suboptimal, 0 misaligned, 1 layer inside suboptimal"
        ),
        "{text}"
    );
}

/// Found by a user: `advise` on an image named `/dev/loopXp1`, a node no
/// one has. The listing says once how to attach the image and names the
/// nodes that makes; `--raw` keeps each command runnable alone; a
/// misaligned partition gets `blkalign realign` first.
fn advise_on_an_image_names_nodes_that_exist() {
    if !needs_sfdisk() {
        return;
    }
    let image = lba63();
    let (code, text) = output(&["advise", "-w", "80", image.str()]);
    assert_eq!(code, 0, "{text}");
    assert!(!text.contains("loopX"), "{text}");
    let attach = format!("  dev=$(losetup -fP --show {}) && partx -u $dev", image.str());
    assert!(text.lines().any(|l| l == attach), "{text}");
    let first = text.lines().find(|l| l.trim_start().starts_with("partition  ")).expect("row");
    let realign = format!("blkalign realign {} 1", image.str());
    assert!(first.contains(&realign), "{text}");
    assert!(text.contains("mkfs.ext4 -b 4096 ${dev}p1"), "{text}");
    assert!(text.contains("mkswap ${dev}p6"), "swap gets mkswap: {text}");
    // Found by a user: raw output wrote the commands' blanks as \x20.
    let (_, raw) = output(&["advise", "-rn", "-o", "NR,COMMAND", image.str()]);
    let whole = raw.lines().find(|l| l.starts_with("1 dev=$(losetup")).expect("a command");
    assert!(whole.contains("mkfs.ext4 -b 4096 ${dev}p1"), "{raw}");
    assert!(!raw.contains("\\x"), "{raw}");
    for line in raw.lines() {
        let command = line.split_once(' ').map_or("", |(_, c)| c);
        let check = std::process::Command::new("sh").args(["-n", "-c", command]).status();
        assert!(check.expect("sh").success(), "not shell: {command}");
    }
}

/// Every command's --help fits 80 columns, on a terminal or a pipe.
fn help_fits_80_columns() {
    let commands =
        ["audit", "plan", "partition", "realign", "restore", "advise", "bench", "probe", "emulate"];
    for command in commands {
        let out = blkalign().args([command, "--help"]).output().expect("run help");
        let text = String::from_utf8_lossy(&out.stdout);
        let wide: Vec<&str> = text.lines().filter(|l| l.chars().count() > 80).collect();
        assert!(out.status.success() && wide.is_empty(), "{command}: {wide:#?}");
    }
}
