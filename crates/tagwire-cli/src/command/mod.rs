//! One module per subcommand; [`run`] dispatches. Commands print with
//! [`outln!`], never `println!`, so that a closed stdout (`tagwire list |
//! head`) ends the command quietly instead of panicking.

/// `println!` that returns the write error instead of panicking; use it in a
/// function returning [`CmdResult`] (or `std::io::Result`). A broken pipe
/// then ends the command quietly (see [`run`]).
macro_rules! outln {
    ($($arg:tt)*) => {
        std::io::Write::write_fmt(
            &mut std::io::stdout(),
            format_args!("{}\n", format_args!($($arg)*)),
        )?
    };
}

mod admin;
mod bench;
mod bench_av;
mod list;
mod ping;
mod publish;
mod pull;
pub mod subscribe;
mod time;

use std::time::Duration;

use tagwire::Session;

use crate::cli::{Cli, Command};

/// A failed command: printed as `tagwire: <message>` with a non-zero exit
/// (1, or the code of an [`ExitCode`] error).
pub type CmdResult = Result<(), Box<dyn std::error::Error>>;

/// A failure with its own exit code (e.g. `tagwire pull`: 3 gone, 4 no
/// history), printed like any other.
#[derive(Debug)]
pub struct ExitCode {
    /// The process exit code.
    pub code: u8,
    /// The message printed after `tagwire: `.
    pub message: String,
}

impl std::fmt::Display for ExitCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExitCode {}

/// Runs a parsed command line. A command whose stdout was closed by its
/// reader (`tagwire list | head`) stops at its next write and succeeds, as
/// `cat` does.
pub fn run(cli: Cli) -> CmdResult {
    match run_command(cli) {
        Err(e) if is_broken_pipe(&*e) => Ok(()),
        r => r,
    }
}

/// Whether `e` is the error of writing to a stdout whose reader went away
/// (not a broken connection to the router, which is a `tagwire::Error`).
fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

fn run_command(cli: Cli) -> CmdResult {
    let server = cli.server;
    let tls = cli.tls.options();
    let band = cli.band.clone();
    // `pub --file`: a frame the file fits in (with room for the header).
    let max_frame = match &cli.command {
        Command::Pub(a) => match &a.file {
            Some(f) => Some(publish::frame_for_file(f, cli.max_frame)?),
            None => cli.max_frame,
        },
        _ => cli.max_frame,
    };
    let connect = || -> Result<Session, Box<dyn std::error::Error>> {
        let auto = band.as_deref() == Some("auto");
        let mut builder = Session::builder();
        if let Some(m) = max_frame {
            builder = builder.max_frame(m);
        }
        let builder = builder
            .follow_priority(auto)
            .connect_timeout(seconds("--connect-timeout", cli.connect_timeout)?)
            .reconnect_wait(seconds("--reconnect-wait", cli.reconnect_wait)?)
            .tls(tls.clone());
        let session = match server.as_deref() {
            Some(url) => builder.connect(url)?,
            None => builder.connect_local()?,
        };
        Ok(match band.as_deref() {
            Some(b) if b != "auto" => session.on_band(b)?,
            _ => session,
        })
    };
    match cli.command {
        Command::Pub(a) => publish::run(&connect()?, a),
        Command::Sub(a) => subscribe::run(&connect()?, a),
        Command::Pull(a) => pull::run(&connect, a),
        Command::List(a) => list::run(&connect()?, a),
        Command::Ping(a) => ping::run(&connect()?, a),
        Command::Time(a) => time::run(&connect()?, a),
        Command::Bench(a) => bench::run(server.as_deref(), band.as_deref(), &tls, a),
        Command::Admin(a) => admin::run(&connect()?, a),
        Command::Place(a) => match tagwire_place::cli::run(&a) {
            // `tagwire place … | head` closing the pipe is not an error.
            Err(tagwire_place::PlaceError::Output(e))
                if e.kind() == std::io::ErrorKind::BrokenPipe =>
            {
                Ok(())
            }
            // docs/placement.md: every error exits with status 2.
            Err(e) => Err(Box::new(ExitCode {
                code: 2,
                message: e.to_string(),
            })),
            Ok(()) => Ok(()),
        },
    }
}

/// A non-negative number of seconds from option `name`.
fn seconds(name: &str, secs: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("invalid {name} {secs}: expected a number of seconds, 0 or more"))
}
