//! kube-proxy-ipvs: parse the command line, set up logging, build the parts, run until a
//! signal (or one sync with `--once`).
#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use kube_proxy_ipvs_agent::cli::Args;
use kube_proxy_ipvs_agent::run;

fn main() -> ExitCode {
    let args = Args::parse();
    let level = match args.verbosity {
        0..=1 => "info",
        2..=4 => "debug",
        _ => "trace",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var("TERM").is_ok_and(|t| t != "dumb"),
        )
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kube-proxy-ipvs: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run::main(Arc::new(args))) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kube-proxy-ipvs: {e:#}");
            ExitCode::FAILURE
        }
    }
}
