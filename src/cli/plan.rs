//! `blkalign plan`: print the aligned layout a request would get; writes
//! nothing.

use super::planning::{make, print, printed_output_help, Args};
use super::EXIT_OK;
use blkalign::device::SysRoot;

pub fn run(args: Args, root: SysRoot) -> anyhow::Result<u8> {
    if printed_output_help(&args)? {
        return Ok(EXIT_OK);
    }
    let (target, plan) = make(&args, &root)?;
    print(&target, &plan, &args)?;
    Ok(EXIT_OK)
}
