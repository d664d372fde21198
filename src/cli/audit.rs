//! `blkalign audit` (being written).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args, _sysfs_root: Option<std::path::PathBuf>) -> anyhow::Result<u8> {
    anyhow::bail!("audit is not built yet")
}
