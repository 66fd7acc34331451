//! kube-proxy-ipvs: parse the command line, set up logging, build the parts, run until a
//! signal (or one sync with `--once`).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use kube_proxy_ipvs_agent::{allocator, cli, logging, run};

fn main() -> ExitCode {
    // Before any thread: one arena keeps the peak of memory down (the module says why).
    allocator::one_arena();
    let settings = match cli::parse() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kube-proxy-ipvs: {e}");
            return ExitCode::from(2);
        }
    };
    let format = logging::Format::from_config(&settings.kube_proxy.logging.format);
    if let Err(e) = logging::init(logging::level(settings.args.verbosity()), format) {
        eprintln!("kube-proxy-ipvs: cannot set up logging: {e}");
        return ExitCode::FAILURE;
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
