//! `ipset-rs`: `save` and `restore` in the formats of `ipset save` and `ipset restore`, through
//! this crate's typed path, so the library can be cross-checked against the real tool:
//!
//! ```sh
//! ipset-rs save > a; ipset save > b; diff a b
//! ipset save | ipset-rs restore        # in another namespace
//! ```
use std::io::{Read, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ipset::{Session, SetName, parse_restore, render_save};

#[derive(Parser)]
#[command(
    name = "ipset-rs",
    about = "ipset save/restore through the ipset crate"
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
