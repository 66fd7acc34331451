//! `ipvs`: a small ipvsadm look-alike on ipvs-netlink, to show the library and to cross-check
//! it against the real tool.
//!
//! ```text
//! ipvs save              # prints the table as `ipvsadm -Sn`
//! ipvs restore < rules   # applies `ipvsadm -R` input, batched
//! ipvs list [--stats]    # prints the table as `ipvsadm -Ln [--stats]`
//! ```

use std::io::{Read, Write};
use std::process::ExitCode;

use futures::TryStreamExt;
use ipvs_netlink::ipvsadm::{self, Entry, Rule};
use ipvs_netlink::{Handle, Result};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let outcome = rt.block_on(async {
        let handle = ipvs_netlink::connect().await?;
        match words.as_slice() {
            ["save"] | ["save", "-n"] => save(&handle).await,
            ["restore"] => restore(&handle).await,
            ["list"] | ["list", "-n"] => list(&handle, false).await,
            ["list", "--stats"] | ["list", "-n", "--stats"] => list(&handle, true).await,
            _ => {
                eprintln!("usage: ipvs save | ipvs restore < rules | ipvs list [--stats]");
                Ok(ExitCode::from(2))
            }
        }
    });
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ipvs: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                eprintln!("  caused by: {s}");
                source = s.source();
            }
            ExitCode::FAILURE
        }
    }
}

/// Services in the kernel's order, each with its destinations, sorted as ipvsadm sorts.
async fn table(handle: &Handle) -> Result<Vec<Entry>> {
    let services = handle.services().list().await?;
    let mut entries = Vec::with_capacity(services.len());
    for svc in services {
        let dests = handle.destinations(&svc.key).dump().try_collect().await?;
        entries.push((svc, dests));
    }
    ipvsadm::sort(&mut entries);
    Ok(entries)
}

fn print(text: &str) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

async fn save(handle: &Handle) -> Result<ExitCode> {
    print(&ipvsadm::save(&table(handle).await?))
}

async fn list(handle: &Handle, stats: bool) -> Result<ExitCode> {
    let info = handle.info().await?;
    print(&ipvsadm::list(&info, &table(handle).await?, stats))
}

async fn restore(handle: &Handle) -> Result<ExitCode> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let rules = match ipvsadm::parse_rules(&input) {
        Ok(rules) => rules,
        Err(e) => {
            eprintln!("ipvs restore: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut batch = handle.batch();
    for rule in &rules {
        match rule {
            Rule::AddService(s) => batch.add_service(s),
            Rule::EditService(s) => batch.set_service(s),
            Rule::DeleteService(k) => batch.del_service(k),
            Rule::AddDestination(k, d) => batch.add_destination(k, d),
            Rule::EditDestination(k, d) => batch.set_destination(k, d),
            Rule::DeleteDestination(k, a, p) => batch.del_destination(k, a, *p),
            Rule::Flush => batch.flush(),
            Rule::Zero(k) => batch.zero(k.as_ref()),
            Rule::SetTimeouts(t) => batch.set_timeouts(t),
        };
    }
    let outcome = batch.send().await?;
    let mut failed = false;
    for (i, e) in outcome.failures() {
        failed = true;
        eprintln!(
            "ipvs restore: rule {}: {e} ({})",
            i + 1,
            std::io::Error::from_raw_os_error(e.errno().unwrap_or(0))
        );
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
