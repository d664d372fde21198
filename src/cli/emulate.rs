//! `blkalign emulate` (being written).

#[derive(clap::Subcommand)]
pub enum Command {
    /// List emulated drives.
    List,
}

pub fn run(_cmd: Command) -> anyhow::Result<u8> {
    anyhow::bail!("emulate is not built yet")
}
