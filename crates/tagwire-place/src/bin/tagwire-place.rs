//! `tagwire-place`: the placement optimiser on its own, until the main
//! `tagwire` CLI embeds it as `tagwire place`. Same flags, same output.
//!
//! Run: `tagwire-place examples/appendix-a.toml --explain`.

use clap::Parser;

/// Choose proxy nodes for a tagwire topology.
#[derive(Debug, Parser)]
#[command(name = "tagwire-place", version)]
struct Cli {
    #[command(flatten)]
    args: tagwire_place::cli::PlaceArgs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match tagwire_place::cli::run(&cli.args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // `tagwire-place … | head`: the reader left; not an error.
        Err(tagwire_place::PlaceError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
