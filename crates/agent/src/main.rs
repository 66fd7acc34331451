//! kube-proxy-ipvs: parse the command line, set up logging, build the parts, run until a
//! signal (or one sync with `--once`).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use kube_proxy_ipvs_agent::{allocator, cli, logging, run};

fn main() -> ExitCode {
    // Before any thread: one arena and a fixed mmap threshold keep memory down (the module
    // says why).
    allocator::configure();
    let settings = match cli::parse() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kube-proxy-ipvs: {e}");
            return ExitCode::from(2);
        }
    };
    // `logging.*` of the file with the logging flags over it (`-v`, `--vmodule`,
    // `--logging-format`), as kube-proxy applies them.
    let log = &settings.kube_proxy.logging;
    let vmodule: Vec<(String, u32)> = log
        .vmodule
        .iter()
        .map(|m| (m.file_pattern.clone(), m.verbosity))
        .collect();
    let (filter, unmapped) = logging::filter(log.verbosity, &vmodule);
    if let Err(e) = logging::init(filter, logging::Format::from_config(&log.format)) {
        eprintln!("kube-proxy-ipvs: cannot set up logging: {e}");
        return ExitCode::FAILURE;
    }
    for w in unmapped {
        tracing::warn!(vmodule = %format!("{}={}", w.pattern, w.verbosity), "{w}");
    }
    // Two worker threads: the health, metrics and health-check servers keep answering on one
    // while a sync's work runs on the other, and whatever must wait (iptables-restore for the
    // xtables lock, libipset, sysctl writes) waits on the blocking pool, not on either.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("kube-proxy-ipvs")
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
