//! Lists the IPVS services (with their real servers) and the IP sets of this network
//! namespace: a program outside the workspace that uses the libraries as published.

use std::process::ExitCode;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut failed = false;
    match ipvs_netlink::connect().await {
        Ok(handle) => match handle.services().list().await {
            Ok(services) => {
                for svc in services {
                    let dests = handle
                        .destinations(&svc.key)
                        .list()
                        .await
                        .unwrap_or_default();
                    println!(
                        "ipvs {} {} ({} real servers)",
                        svc.key,
                        svc.scheduler,
                        dests.len()
                    );
                }
            }
            Err(e) => {
                eprintln!("consumer: listing IPVS services: {e}");
                failed = true;
            }
        },
        Err(e) => {
            eprintln!("consumer: connecting to IPVS: {e}");
            failed = true;
        }
    }
    match libipset::Session::new().and_then(|mut s| s.names()) {
        Ok(names) => {
            for name in names {
                println!("ipset {name}");
            }
        }
        Err(e) => {
            eprintln!("consumer: listing IP sets: {e}");
            failed = true;
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
