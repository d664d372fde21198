//! The harness of tests/it (libtest-mimic): every test of every module
//! as a trial named `MODULE::FN`, a test that skipped as ignored with its
//! reason, the tests that time things run before the others, alone, and
//! the tests that take minutes run on threads of their own, beside the
//! short ones.
//!
//! Each module lists its tests once, with `tests!`:
//! `tests![a, b, alone(c), long(d = 300)]`. A test left out of the list is dead code, which
//! `cargo clippy --all-targets -- -D warnings` refuses.

use libtest_mimic::{Arguments, Completion, Conclusion, Trial};
use std::cell::RefCell;
use std::process::ExitCode;

thread_local! {
    /// Why the test running on this thread skipped (all or part of it).
    static SKIPPED: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Note that this test cannot run (or cannot run in full) here, and why:
/// `reason` reads after "this test", e.g. "needs root". The harness reports
/// the test as ignored with that reason once it returns; under
/// `BLKALIGN_TEST_STRICT=1` it fails here instead.
pub fn skip(reason: impl Into<String>) {
    let reason = reason.into();
    assert!(!super::strict(), "BLKALIGN_TEST_STRICT=1 and this test {reason}");
    SKIPPED.with(|s| s.borrow_mut().push(reason));
}

/// One test: its `MODULE::FN` name, its function, and when it runs.
pub struct Test {
    name: String,
    when: When,
    run: fn(),
}

/// When a test runs in [`main`]'s two passes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum When {
    /// It measures time: first, alone.
    Alone,
    /// It takes minutes (a kernel-lab boot), about this many seconds: on
    /// threads of its own, beside the short tests' threads, the longest
    /// first.
    Long(u32),
    Any,
}

impl Test {
    pub fn new(module: &str, name: &str, run: fn()) -> Test {
        // module_path!() is "it::MODULE".
        let module = module.split_once("::").map_or(module, |(_, m)| m);
        Test { name: format!("{module}::{name}"), when: When::Any, run }
    }

    pub fn alone(module: &str, name: &str, run: fn()) -> Test {
        Test { when: When::Alone, ..Test::new(module, name, run) }
    }

    pub fn long(module: &str, name: &str, seconds: u32, run: fn()) -> Test {
        Test { when: When::Long(seconds), ..Test::new(module, name, run) }
    }

    /// How long a long test takes, 0 for any other.
    fn seconds(&self) -> u32 {
        match self.when {
            When::Long(seconds) => seconds,
            _ => 0,
        }
    }

    fn trial(self) -> Trial {
        let run = self.run;
        Trial::ignorable_test(self.name, move || {
            SKIPPED.with(|s| s.borrow_mut().clear());
            // A panic fails the trial: libtest-mimic catches it and shows
            // its message.
            run();
            let mut reasons = SKIPPED.with(|s| std::mem::take(&mut *s.borrow_mut()));
            reasons.dedup();
            Ok(match reasons.is_empty() {
                true => Completion::Completed,
                false => Completion::ignored_with(reasons.join("; ")),
            })
        })
    }
}

/// `tests![a, b, alone(c, d), long(e = 300)]`: this module's `pub fn
/// trials()`, its tests named `MODULE::a` and so on; those in `alone(...)`
/// time something, those in `long(...)` take minutes: about as many
/// seconds as given, as they took in `.ci/run` beside the other tests (the
/// longest start first, so that the last to end is a short one).
macro_rules! tests {
    (@ [$($out:expr,)*]) => {
        pub fn trials() -> Vec<$crate::common::harness::Test> {
            vec![$($out,)*]
        }
    };
    (@ [$($out:expr,)*] alone($($alone:ident),* $(,)?) $(, $($rest:tt)*)?) => {
        tests!(@ [$($out,)* $($crate::common::harness::Test::alone(
            module_path!(), stringify!($alone), $alone),)*] $($($rest)*)?);
    };
    (@ [$($out:expr,)*] long($($long:ident = $seconds:literal),* $(,)?) $(, $($rest:tt)*)?) => {
        tests!(@ [$($out,)* $($crate::common::harness::Test::long(
            module_path!(), stringify!($long), $seconds, $long),)*] $($($rest)*)?);
    };
    (@ [$($out:expr,)*] $name:ident $(, $($rest:tt)*)?) => {
        tests!(@ [$($out,)* $crate::common::harness::Test::new(
            module_path!(), stringify!($name), $name),] $($($rest)*)?);
    };
    ($($list:tt)*) => {
        tests!(@ [] $($list)*);
    };
}

/// Run `tests` as the command line says (libtest's options: a filter,
/// `--skip`, `--exact`, `--list`, `--test-threads`, ...), in two passes.
///
/// First the tests that time something (bench and probe on emulated
/// drives, the emulator's penalties), one at a time, with the machine to
/// themselves: beside a kernel-lab boot (QEMU under TCG takes a core) or a
/// move their timings stretch and their ratios fail. Then the long ones
/// and all the others side by side, each on the default threads: two boots
/// keep both cores busy, and the short tests mostly wait (on an emulated
/// drive's latency, a sync, udev), which they do beside the boots instead
/// of after them. With `--test-threads 1`, one after the other. One exit
/// status for all: 101 when any failed.
pub fn main(mut tests: Vec<Test>) -> ExitCode {
    let mut args = Arguments::from_args();
    // As libtest: RUST_TEST_THREADS where --test-threads is not given.
    if args.test_threads.is_none() {
        args.test_threads = std::env::var("RUST_TEST_THREADS").ok().and_then(|n| n.parse().ok());
    }
    let [mut alone, mut long, mut short]: [Vec<Trial>; 3] = Default::default();
    // Longest first: two threads then end within a short test of each
    // other, where in the modules' order the last boot ran on alone.
    tests.sort_by_key(|t| std::cmp::Reverse(t.seconds()));
    for test in tests {
        match test.when {
            When::Alone => &mut alone,
            When::Long(_) => &mut long,
            When::Any => &mut short,
        }
        .push(test.trial());
    }
    if args.list {
        return libtest_mimic::run(&args, [alone, long, short].into_iter().flatten().collect())
            .exit_code();
    }
    // A pass the filter leaves empty is skipped, so a filtered run prints
    // one summary.
    let wanted = |trials: &[Trial]| trials.iter().any(|t| !args.is_filtered_out(t));
    let mut conclusions: Vec<Conclusion> = Vec::new();
    if wanted(&alone) {
        let one = Arguments { test_threads: Some(1), ..args.clone() };
        conclusions.push(libtest_mimic::run(&one, alone));
    }
    let side_by_side = wanted(&long) && wanted(&short) && args.test_threads != Some(1);
    if side_by_side {
        std::thread::scope(|scope| {
            let boots = scope.spawn(|| libtest_mimic::run(&args, long));
            conclusions.push(libtest_mimic::run(&args, short));
            conclusions.push(boots.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        });
    } else {
        if wanted(&long) {
            conclusions.push(libtest_mimic::run(&args, long));
        }
        if conclusions.is_empty() || wanted(&short) {
            conclusions.push(libtest_mimic::run(&args, short));
        }
    }
    match conclusions.iter().any(Conclusion::has_failed) {
        true => ExitCode::from(101),
        false => ExitCode::SUCCESS,
    }
}
