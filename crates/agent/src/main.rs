//! kube-proxy-ipvs: parse the command line, set up logging, build the parts, run until a
//! signal (or one sync with `--once`).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use kube_proxy_ipvs_agent::{cli, run};

fn main() -> ExitCode {
    let settings = match cli::parse() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kube-proxy-ipvs: {e}");
            return ExitCode::from(2);
        }
    };
    let level = match settings.args.verbosity() {
        0..=1 => "info",
        2..=4 => "debug",
        _ => "trace",
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var("TERM").is_ok_and(|t| t != "dumb");
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| level.into());
    if settings.kube_proxy.logging.format == "json" {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
            .init();
    }
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
    match runtime.block_on(run::main(settings)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kube-proxy-ipvs: {e:#}");
            ExitCode::FAILURE
        }
    }
}
