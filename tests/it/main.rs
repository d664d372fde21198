//! The integration tests: one binary, one harness (libtest-mimic, in
//! common/harness.rs). Each file here is a module with its list of tests
//! (`tests![...]`), run as `MODULE::FN`:
//!
//!     cargo test --test it                    # all of them
//!     cargo test --test it audit_cli::        # one module
//!     cargo test --test it -- --exact linux_view::blkalign_reads_disks_as_linux_does
//!
//! One binary rather than one per file: the tests link once instead of
//! thirty times (see "CI time" in docs/performance.md), and the harness
//! reports a test that cannot run here (no root, a missing tool) as ignored
//! with its reason instead of as passed.

#[macro_use]
mod common;

macro_rules! modules {
    ($($module:ident),* $(,)?) => {
        $(mod $module;)*

        fn main() -> std::process::ExitCode {
            common::harness::main([$($module::trials()),*].into_iter().flatten().collect())
        }
    };
}

modules![
    architecture,
    audit_cli,
    audit_emulated,
    bad_input,
    bench_cli,
    bench_emulated,
    device_fixtures,
    device_loop,
    emulate,
    guestfs_peers,
    interlocks,
    kernel_lab,
    kernel_lab_boot,
    kernel_lab_stacks,
    linux_view,
    output_cli,
    packaging,
    partition_peers,
    peers,
    probe_emulated,
    realign_at_boot,
    realign_crash,
    realign_interrupt,
    realign_leftovers,
    realign_peers,
    rescale_peers,
    schemes_peers,
    stack_peers,
    table_peers,
    vm_images,
];
