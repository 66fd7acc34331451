//! `ipset-rs`: `save` and `restore` in the formats of `ipset save` and `ipset restore`, through
//! this crate's typed path, so the library can be cross-checked against the real tool
//! (`ipset-rs --help` says what it accepts; so does the crate's README):
//!
//! ```sh
//! ipset-rs save > a; ipset save > b; diff a b
//! ipset save | ipset-rs restore        # in another namespace
//! ```
use std::io::{Read, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use libipset::{ParseError, Session, SetName, parse_restore, render_save};

const AFTER_HELP: &str = "\
Set types: hash:ip, hash:net, hash:ip,port, hash:ip,port,ip, hash:ip,port,net, hash:net,port and
bitmap:port (the types kube-proxy uses), IPv4 and IPv6, with their create options (hashsize,
maxelem, timeout, counters, comment, bucketsize, initval, range) and entry options (timeout,
packets, bytes, comment). RESTORE reads the commands `ipset save` writes and `ipset restore`
takes: create/n/-N, add/a/-A, del/d/-D, flush/F/-F, destroy/x/-X, rename/e/-E, swap/w/-W,
comments and COMMIT lines; it applies them as one batch. Acts on the caller's network namespace; needs CAP_NET_ADMIN.

Exit status: 0 done; 1 libipset or the kernel refused (the reason on standard error; a batch
stops at its first refusal, as `ipset restore` does); 2 bad usage or unreadable input (the
line named).";

#[derive(Parser)]
#[command(
    name = "ipset-rs",
    about = "ipset save/restore through the libipset crate",
    after_help = AFTER_HELP
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print sets (all, or one) in `ipset save` format.
    Save {
        /// Only this set.
        set: Option<String>,
    },
    /// Apply `ipset restore` input from standard input (or a file) as one batch.
    Restore {
        /// Ignore "already exists" / "does not exist" for create, add and del (ipset's -exist).
        #[arg(long = "exist", short = '!')]
        exist: bool,
        /// Read this file instead of standard input.
        #[arg(long = "file", short = 'f')]
        file: Option<std::path::PathBuf>,
    },
}

fn run(cli: Cli) -> Result<(), Box<dyn std::error::Error>> {
    let mut session = Session::new()?;
    match cli.command {
        Command::Save { set: None } => {
            let sets = session.save()?;
            std::io::stdout().write_all(render_save(&sets).as_bytes())?;
        }
        Command::Save { set: Some(name) } => {
            let set = session.save_set(&SetName::new(name)?)?;
            std::io::stdout().write_all(set.to_string().as_bytes())?;
        }
        Command::Restore { exist, file } => {
            let text = match file {
                Some(path) => std::fs::read_to_string(path)?,
                None => {
                    let mut text = String::new();
                    std::io::stdin().read_to_string(&mut text)?;
                    text
                }
            };
            let ops = parse_restore(&text, |name| {
                session.header(name).ok().flatten().map(|h| h.set_type)
            })?;
            session.set_exist(exist);
            session.apply(&ops)?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<ParseError>() => {
            eprintln!("ipset-rs: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            let mut msg = format!("ipset-rs: {e}");
            let mut source = e.source();
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}
