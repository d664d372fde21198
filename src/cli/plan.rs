//! `blkalign plan`: print the aligned layout a request would get; writes
//! nothing.

use super::planning::{make, print, printed_output_help, Args};
use super::EXIT_OK;
use blkalign::device::SysRoot;

pub fn run(args: Args, root: SysRoot) -> anyhow::Result<u8> {
    if printed_output_help(&args)? {
        return Ok(EXIT_OK);
    }
    let (target, plan) = match make(&args, &root) {
        Ok(made) => made,
        // The JSON reader hears of the failure too; stderr says it as always.
        Err(e) if args.json => {
            let error = super::describe(&e);
            super::emit_json(&Failed { target: args.target.as_deref(), error: &error })?;
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    print(&target, &plan, &args)?;
    Ok(EXIT_OK)
}

/// What `plan --json` prints when no plan can be made.
#[derive(serde::Serialize)]
struct Failed<'a> {
    target: Option<&'a std::path::Path>,
    error: &'a str,
}
