//! One module per subcommand; [`run`] dispatches.

mod admin;
mod bench;
mod list;
mod ping;
mod publish;
mod subscribe;

use tagwire::{Session, TlsOptions};

use crate::cli::{Cli, Command};

/// A failed command: printed as `tagwire: <message>` with a non-zero exit.
pub type CmdResult = Result<(), Box<dyn std::error::Error>>;

/// Runs a parsed command line.
pub fn run(cli: Cli) -> CmdResult {
    let server = cli.server;
    let tls = cli.tls.options();
    let connect = || connect(server.as_deref(), &tls);
    match cli.command {
        Command::Pub(a) => publish::run(&connect()?, a),
        Command::Sub(a) => subscribe::run(&connect()?, a),
        Command::List(a) => list::run(&connect()?, a),
        Command::Ping(a) => ping::run(&connect()?, a),
        Command::Bench(a) => bench::run(server.as_deref(), &tls, a),
        Command::Admin(a) => admin::run(&connect()?, a),
        Command::Place(a) => match tagwire_place::cli::run(&a) {
            // `tagwire place … | head` closing the pipe is not an error.
            Err(tagwire_place::PlaceError::Output(e))
                if e.kind() == std::io::ErrorKind::BrokenPipe =>
            {
                Ok(())
            }
            r => Ok(r?),
        },
    }
}

/// Connects to `--server` (with the `--tls-*` settings for `tls://`), or
/// to the local daemon.
pub fn connect(server: Option<&str>, tls: &TlsOptions) -> Result<Session, tagwire::Error> {
    match server {
        Some(url) => Session::connect_with_tls(url, tls),
        None => Session::connect_local(),
    }
}
