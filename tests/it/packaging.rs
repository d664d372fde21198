//! What ships around the binary, checked by the tools that consume it: man
//! pages by man/groff, completions by their shells, metrics and alerting
//! rules by promtool, the systemd units by systemd-analyze, the textfile
//! helper by running it, the Ansible playbook by ansible-playbook, the
//! Debian package by dpkg-deb and lintian.

use crate::common;

use common::{blkalign, needs, run, run_unchecked, Image};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

tests![
    man_pages_render_without_warnings,
    man_pages_carry_examples_exit_status_and_see_also,
    bash_completion_parses_and_completes,
    zsh_completion_parses,
    fish_completion_parses_and_completes,
    prometheus_output_passes_promtool,
    prometheus_ignores_entries_that_hold_no_data,
    alert_rules_pass_promtool_and_their_unit_tests,
    systemd_units_verify,
    textfile_helper_publishes_atomically,
    ansible_playbook_fails_misaligned_hosts,
    ansible_rollout_leaves_aligned_hosts_and_stops_at_a_failure,
    debian_package_is_lintian_clean,
];

const BIN: &str = env!("CARGO_BIN_EXE_blkalign");

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn aligned_image() -> Image {
    Image::sfdisk(64 << 20, "label: dos\nstart=2048, size=20480\n")
}

fn misaligned_image() -> Image {
    Image::sfdisk(64 << 20, "label: dos\nstart=63, size=20000\n")
}

/// Every page `blkalign man --dir` writes.
fn man_pages(dir: &Path) -> Vec<PathBuf> {
    blkalign().args(["man", "--dir"]).arg(dir).assert().success();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read man dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "1"))
        .collect();
    pages.sort();
    pages
}

/// The example lines of a `--help` text: the indented lines under "Examples:".
fn help_examples(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Examples:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.trim().to_owned())
        .collect()
}

fn man_pages_render_without_warnings() {
    if !needs(false, &["man", "groff"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let pages = man_pages(dir.path());
    let names: Vec<String> =
        pages.iter().map(|p| p.file_name().expect("name").to_string_lossy().into_owned()).collect();
    for expected in ["blkalign.1", "blkalign-audit.1", "blkalign-emulate-start.1", "blkalign-man.1"]
    {
        assert!(names.iter().any(|n| n == expected), "no {expected} in {names:?}");
    }
    for page in &pages {
        let page = page.to_str().expect("utf-8 path");
        // What lintian runs on every shipped page: any output is a warning.
        let out = Command::new("man")
            .args(["--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", page])
            .env("LC_ALL", "C.UTF-8")
            .output()
            .expect("run man");
        assert!(out.status.success() && out.stderr.is_empty(), "{page}: {}", text(&out.stderr));
        let out = run("groff", &["-k", "-man", "-ww", "-z", page]);
        assert!(out.stderr.is_empty(), "{page}: {}", text(&out.stderr));
    }
}

fn man_pages_carry_examples_exit_status_and_see_also() {
    if !needs(false, &["man"]) {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut with_examples = 0;
    for page in man_pages(dir.path()) {
        let stem = page.file_stem().expect("stem").to_string_lossy().into_owned();
        let rendered = Command::new("man")
            .args(["-l", page.to_str().expect("utf-8 path")])
            .env("LC_ALL", "C.UTF-8")
            .env("MANWIDTH", "200")
            .output()
            .expect("run man");
        let rendered = text(&rendered.stdout);
        for section in ["NAME", "SYNOPSIS", "EXIT STATUS", "SEE ALSO"] {
            assert!(rendered.lines().any(|l| l == section), "{stem}: no {section}\n{rendered}");
        }
        assert!(rendered.contains("lsblk(8), sfdisk(8), parted(8), fio(1)"), "{stem}\n{rendered}");
        let help = blkalign().args(subcommand_path(&rendered)).arg("--help").output();
        let help = help.expect("run --help");
        let examples = help_examples(&text(&help.stdout));
        if !examples.is_empty() {
            with_examples += 1;
            assert!(rendered.lines().any(|l| l == "EXAMPLES"), "{stem}: no EXAMPLES\n{rendered}");
        }
        for example in examples {
            assert!(
                rendered.lines().any(|l| l.trim() == example),
                "{stem}: example `{example}` of --help missing\n{rendered}"
            );
        }
    }
    assert!(with_examples > 0, "no subcommand's --help has examples");
}

/// The subcommand a rendered page documents, from its SYNOPSIS line:
/// `blkalign emulate power-cut [-h|--help] ...` gives `emulate power-cut`.
fn subcommand_path(rendered: &str) -> Vec<String> {
    let synopsis = rendered
        .lines()
        .skip_while(|l| *l != "SYNOPSIS")
        .nth(1)
        .unwrap_or_else(|| panic!("no SYNOPSIS in\n{rendered}"));
    synopsis
        .split_whitespace()
        .skip(1)
        .take_while(|w| !w.starts_with(['[', '<', '-']))
        .map(str::to_owned)
        .collect()
}

/// The completion script for `shell` in a file, when `shell` is installed.
fn completion(shell: &str) -> Option<tempfile::NamedTempFile> {
    if !needs(false, &[shell]) {
        return None;
    }
    let out = blkalign().args(["completions", shell]).output().expect("run completions");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), &out.stdout).expect("write completion");
    Some(file)
}

fn bash_completion_parses_and_completes() {
    let Some(file) = completion("bash") else {
        return;
    };
    let path = file.path().to_str().expect("utf-8 path");
    run("bash", &["-n", path]);
    let script = format!(
        "source {path}; COMP_WORDS=(blkalign au); COMP_CWORD=1; _blkalign blkalign au blkalign; \
         echo \"${{COMPREPLY[@]}}\"; COMP_WORDS=(blkalign audit --for); COMP_CWORD=2; \
         _blkalign blkalign --for audit; echo \"${{COMPREPLY[@]}}\""
    );
    let out = text(&run("bash", &["-c", &script]).stdout);
    assert_eq!(out, "audit\n--format\n");
}

fn zsh_completion_parses() {
    let Some(file) = completion("zsh") else {
        return;
    };
    run("zsh", &["-n", file.path().to_str().expect("utf-8 path")]);
}

fn fish_completion_parses_and_completes() {
    let Some(file) = completion("fish") else {
        return;
    };
    let path = file.path().to_str().expect("utf-8 path");
    run("fish", &["--no-execute", path]);
    let out =
        run("fish", &["--no-config", "-c", &format!("source {path}; complete -C 'blkalign au'")]);
    let out = text(&out.stdout);
    assert!(out.starts_with("audit\t"), "{out}");
}

fn promtool_check_metrics(metrics: &str) {
    let out = run_unchecked("promtool", &["check", "metrics"], Some(metrics));
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool: {}{}\n{metrics}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

fn prometheus_output_passes_promtool() {
    if !needs(false, &["promtool", "sfdisk"]) {
        return;
    }
    let (good, bad) = (aligned_image(), misaligned_image());
    let out = blkalign()
        .args(["audit", "--format", "prometheus", good.str(), bad.str()])
        .output()
        .expect("run audit");
    assert_eq!(out.status.code(), Some(1));
    let metrics = text(&out.stdout);
    promtool_check_metrics(&metrics);
    for (image, value) in [(&good, 0), (&bad, 1)] {
        let dev = image.str();
        for line in [
            format!("blkalign_partition_misaligned{{device=\"{dev}\",partition=\"1\"}} {value}"),
            format!("blkalign_disk_misaligned{{device=\"{dev}\"}} {value}"),
            format!("blkalign_disk_audit_error{{device=\"{dev}\"}} 0"),
        ] {
            assert!(metrics.lines().any(|l| l == line), "no `{line}` in\n{metrics}");
        }
    }
}

/// An Apple partition map's own entry starts at LBA 1 by design and holds
/// no data: like the exit code, the metrics raise no alarm for it.
fn prometheus_ignores_entries_that_hold_no_data() {
    if !needs(false, &["parted", "promtool"]) {
        return;
    }
    let image = Image::new(64 << 20);
    run("parted", &["-s", image.str(), "mklabel", "mac", "mkpart", "p1", "ext2", "1MiB", "20MiB"]);
    let out = blkalign()
        .args(["audit", "--format", "prometheus", image.str()])
        .output()
        .expect("run audit");
    assert_eq!(out.status.code(), Some(0));
    let metrics = text(&out.stdout);
    promtool_check_metrics(&metrics);
    let dev = image.str();
    assert!(!metrics.contains("partition=\"1\""), "the map's own entry: {metrics}");
    for line in [
        format!("blkalign_partition_misaligned{{device=\"{dev}\",partition=\"2\"}} 0"),
        format!("blkalign_disk_misaligned{{device=\"{dev}\"}} 0"),
    ] {
        assert!(metrics.lines().any(|l| l == line), "no `{line}` in\n{metrics}");
    }
}

fn alert_rules_pass_promtool_and_their_unit_tests() {
    if !needs(false, &["promtool"]) {
        return;
    }
    let dir = repo("contrib/prometheus");
    let rules = dir.join("blkalign.rules.yml");
    run("promtool", &["check", "rules", rules.to_str().expect("utf-8 path")]);
    let tests = dir.join("blkalign.rules.test.yml");
    let out = run("promtool", &["test", "rules", tests.to_str().expect("utf-8 path")]);
    assert!(text(&out.stdout).contains("SUCCESS"), "{}", text(&out.stdout));
}

fn systemd_units_verify() {
    if !needs(false, &["systemd-analyze"]) {
        return;
    }
    // The installed paths do not exist here: point at the repository's helper.
    let dir = tempfile::tempdir().expect("tempdir");
    let helper = repo("contrib/systemd/blkalign-textfile");
    let mut units = Vec::new();
    for unit in ["blkalign-audit.service", "blkalign-audit.timer"] {
        let body = std::fs::read_to_string(repo(&format!("contrib/systemd/{unit}")))
            .expect("read unit")
            .replace("/usr/libexec/blkalign/blkalign-textfile", helper.to_str().expect("utf-8"));
        let path = dir.path().join(unit);
        std::fs::write(&path, body).expect("write unit");
        units.push(path.to_str().expect("utf-8 path").to_owned());
    }
    let mut args = vec!["verify", "--man=no"];
    args.extend(units.iter().map(String::as_str));
    let out = run_unchecked("systemd-analyze", &args, None);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// The textfile helper as the unit runs it, with our binary first on PATH.
fn textfile(dir: &Path, args: &[&str]) -> Output {
    let bin_dir = Path::new(BIN).parent().expect("binary dir");
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    Command::new(repo("contrib/systemd/blkalign-textfile"))
        .args(args)
        .env("PATH", path)
        .env("BLKALIGN_TEXTFILE_DIR", dir)
        .output()
        .expect("run blkalign-textfile")
}

fn textfile_helper_publishes_atomically() {
    if !needs(false, &["sfdisk", "promtool"]) {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let prom = dir.path().join("blkalign.prom");
    let entries = || std::fs::read_dir(dir.path()).expect("read dir").count();

    // Misaligned: exit 1, published, readable by node_exporter's user.
    let bad = misaligned_image();
    let out = textfile(dir.path(), &[bad.str()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let published = std::fs::read_to_string(&prom).expect("published");
    promtool_check_metrics(&published);
    assert!(published.contains("blkalign_disk_misaligned{device="), "{published}");
    let mode = std::fs::metadata(&prom).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    assert_eq!(entries(), 1, "a temporary file was left behind");

    // An unreadable target: exit 2, published, and the metrics say which.
    let out = textfile(dir.path(), &["/nonexistent/disk.img"]);
    assert_eq!(out.status.code(), Some(2));
    let published = std::fs::read_to_string(&prom).expect("published");
    assert!(
        published.contains("blkalign_disk_audit_error{device=\"/nonexistent/disk.img\"} 1"),
        "{published}"
    );

    // Bad arguments: exit 2, no metrics, the last good file stays.
    let out = textfile(dir.path(), &["--no-such-option"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read_to_string(&prom).expect("kept"), published);
    assert_eq!(entries(), 1, "a temporary file was left behind");
}

fn playbook(extra_vars: &serde_json::Value) -> Output {
    playbook_file("contrib/ansible/audit.yml", extra_vars)
}

fn playbook_file(file: &str, extra_vars: &serde_json::Value) -> Output {
    let home = tempfile::tempdir().expect("tempdir");
    Command::new("ansible-playbook")
        .args(["-i", "localhost,", "-c", "local", "-e"])
        .arg(extra_vars.to_string())
        .arg(repo(file))
        .env("ANSIBLE_HOME", home.path())
        .env("ANSIBLE_LOCAL_TEMP", home.path())
        // Not ~/.ansible/tmp: a user without a home (nobody) can run it.
        .env("ANSIBLE_REMOTE_TEMP", home.path())
        .env("ANSIBLE_NOCOLOR", "1")
        .env("ANSIBLE_PYTHON_INTERPRETER", "auto_silent")
        .output()
        .expect("run ansible-playbook")
}

fn ansible_playbook_fails_misaligned_hosts() {
    if !needs(false, &["ansible-playbook", "sfdisk"]) {
        return;
    }
    let path = repo("contrib/ansible/audit.yml");
    run("ansible-playbook", &["--syntax-check", "-i", "localhost,", path.to_str().expect("utf-8")]);
    let (good, bad) = (aligned_image(), misaligned_image());
    let vars = |targets: &[&str]| serde_json::json!({"blkalign_become": false, "blkalign_command": BIN, "blkalign_targets": targets});

    let out = playbook(&vars(&[good.str()]));
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));

    let out = playbook(&vars(&[good.str(), bad.str()]));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}{}", text(&out.stderr));
    let finding = format!("{} partition 1 starts at LBA 63", bad.str());
    assert!(stdout.contains(&finding), "{stdout}");
    assert!(!stdout.contains(&format!("{} partition", good.str())), "{stdout}");

    // Exit 2 (could not check) fails the host at the audit itself.
    let out = playbook(&vars(&["/nonexistent/disk.img"]));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}");
    assert!(stdout.contains("\"rc\": 2"), "{stdout}");
}

/// The rollout playbook leaves aligned hosts alone (no schedule, no
/// reboot) and stops at the first host it cannot repair: here an image,
/// which `--at-boot` refuses (a disk of the system is needed; the boots
/// themselves are proven in the kernel lab).
fn ansible_rollout_leaves_aligned_hosts_and_stops_at_a_failure() {
    if !needs(false, &["ansible-playbook", "sfdisk"]) {
        return;
    }
    const FILE: &str = "contrib/ansible/realign-at-boot.yml";
    let path = repo(FILE);
    run("ansible-playbook", &["--syntax-check", "-i", "localhost,", path.to_str().expect("utf-8")]);
    let (good, bad) = (aligned_image(), misaligned_image());
    let vars = |target: &str| {
        serde_json::json!({"blkalign_become": false, "blkalign_command": BIN,
            "blkalign_targets": [target], "blkalign_reboot": false})
    };
    let out = playbook_file(FILE, &vars(good.str()));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("changed=0"), "nothing scheduled: {stdout}");

    let out = playbook_file(FILE, &vars(bad.str()));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("Schedule the moves") && stdout.contains("not a disk of this system"),
        "{stdout}"
    );
}

fn debian_package_is_lintian_clean() {
    if !needs(false, &["dpkg-deb", "dpkg-shlibdeps", "strip", "lintian", "git"]) {
        return;
    }
    // The debug binary, stripped, stands in for the release one .ci/run
    // packages: same files, same checks, no release build inside the tests.
    let out_dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(repo("scripts/build-deb"))
        .arg(out_dir.path())
        .env("BLKALIGN", BIN)
        .output()
        .expect("run build-deb");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let deb = text(&out.stdout).trim().to_owned();

    let contents = text(&run("dpkg-deb", &["--contents", &deb]).stdout);
    for path in [
        "./usr/bin/blkalign",
        "./usr/share/man/man1/blkalign.1.gz",
        "./usr/share/man/man1/blkalign-audit.1.gz",
        "./usr/share/bash-completion/completions/blkalign",
        "./usr/share/zsh/vendor-completions/_blkalign",
        "./usr/share/fish/vendor_completions.d/blkalign.fish",
        "./usr/lib/systemd/system/blkalign-audit.service",
        "./usr/lib/systemd/system/blkalign-audit.timer",
        "./usr/libexec/blkalign/blkalign-textfile",
        "./usr/share/doc/blkalign/copyright",
        "./usr/share/doc/blkalign/changelog.Debian.gz",
        "./usr/share/doc/blkalign/examples/realign-at-boot.yml",
    ] {
        assert!(contents.lines().any(|l| l.ends_with(path)), "no {path} in\n{contents}");
    }
    let control = text(&run("dpkg-deb", &["--field", &deb, "Depends", "Installed-Size"]).stdout);
    assert!(control.contains("libc6 (>= "), "{control}");

    let out = run_unchecked("lintian", &["--fail-on", "error", &deb], None);
    assert!(out.status.success(), "lintian: {}{}", text(&out.stdout), text(&out.stderr));
    assert!(!text(&out.stdout).lines().any(|l| l.starts_with("E: ")), "{}", text(&out.stdout));
}
