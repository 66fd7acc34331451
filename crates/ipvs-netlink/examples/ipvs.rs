//! `ipvs`: a small ipvsadm look-alike on ipvs-netlink, to show the library and to cross-check
//! it against the real tool. `ipvs --help` prints what it accepts (the crate's README says the
//! same).

use std::io::{Read, Write};
use std::process::ExitCode;

use futures::TryStreamExt;
use ipvs_netlink::ipvsadm::{self, Entry, Rule};
use ipvs_netlink::{Handle, Result};

const HELP: &str = "\
ipvs: the IPVS table through ipvs-netlink, in ipvsadm's formats

Usage:
  ipvs save [-n]              print the table as `ipvsadm -Sn` does
  ipvs list [-n] [--stats]    print the table as `ipvsadm -Ln [--stats]` does
  ipvs restore < RULES        apply `ipvsadm -R` input as one batch
  ipvs --help                 print this

Numeric output only (-n is implied). RESTORE reads ipvsadm's rule syntax: -A/-E/-D services
(-t, -u, --sctp-service, -f, -6, -s, -b, -p, -M, --pe, -o), -a/-e/-d real servers (-r, -g, -i,
-m, -w, -x, -y, --tun-type, --tun-port, --tun-nocsum, --tun-csum, --tun-remcsum), -C, -Z and
--set, with their long forms. Acts on the caller's network namespace; needs CAP_NET_ADMIN.

Exit status: 0 done; 1 the kernel refused a request (each refused rule on standard error,
the others still applied) or could not be reached; 2 bad usage or unreadable input (the line
named).
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let command = match words.as_slice() {
        ["--help"] | ["-h"] | ["help"] => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        ["save"] | ["save", "-n"] => Command::Save,
        ["restore"] => Command::Restore,
        ["list"] | ["list", "-n"] => Command::List { stats: false },
        ["list", "--stats"] | ["list", "-n", "--stats"] => Command::List { stats: true },
        _ => {
            eprint!("ipvs: unknown arguments {words:?}\n\n{HELP}");
            return ExitCode::from(2);
        }
    };
    let rt = runtime();
    let outcome = rt
        .block_on(ipvs_netlink::connect())
        .and_then(|handle| match command {
            Command::Save => save(&rt, &handle),
            Command::Restore => rt.block_on(restore(&handle)),
            Command::List { stats } => list(&rt, &handle, stats),
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

/// What the command line asked for.
enum Command {
    Save,
    Restore,
    List { stats: bool },
}

/// At most this many threads read real servers, each over a socket of its own.
const MAX_READERS: usize = 4;
/// Below this many services one socket reads them all: threads would cost more than they save.
const THREADED_FROM: usize = 256;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Services in the kernel's order, each with its destinations, sorted as ipvsadm sorts.
///
/// Each service's real servers are one dump, a round trip to the kernel; ipvsadm makes them
/// one after another. Here contiguous shares of the services are read at once, by this
/// thread and up to [`MAX_READERS`] - 1 others, each with its own runtime and socket, as the
/// agent reads a large table; the shares join in the kernel's order, so the sort sees what
/// ipvsadm's sees.
fn table(rt: &tokio::runtime::Runtime, handle: &Handle) -> Result<Vec<Entry>> {
    let services = rt.block_on(handle.services().list())?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let readers = if services.len() < THREADED_FROM {
        1
    } else {
        cores.min(MAX_READERS)
    };
    let share = services.len().div_ceil(readers).max(1);
    let mut shares = services.chunks(share);
    let mine = shares.next().unwrap_or_default();
    let mut entries = std::thread::scope(|scope| {
        let others: Vec<_> = shares
            .map(|part| {
                scope.spawn(move || {
                    let rt = runtime();
                    let handle = rt.block_on(ipvs_netlink::connect())?;
                    rt.block_on(read_destinations(&handle, part))
                })
            })
            .collect();
        let mut entries = rt.block_on(read_destinations(handle, mine))?;
        for other in others {
            entries.extend(other.join().expect("an IPVS reader thread panicked")?);
        }
        Ok::<_, ipvs_netlink::Error>(entries)
    })?;
    ipvsadm::sort(&mut entries);
    Ok(entries)
}

/// `services`, each with its real servers, read over `handle` one after another.
async fn read_destinations(
    handle: &Handle,
    services: &[ipvs_netlink::Service],
) -> Result<Vec<Entry>> {
    let mut entries = Vec::with_capacity(services.len());
    for svc in services {
        let dests = handle.destinations(&svc.key).dump().try_collect().await?;
        entries.push((svc.clone(), dests));
    }
    Ok(entries)
}

fn print(text: &str) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn save(rt: &tokio::runtime::Runtime, handle: &Handle) -> Result<ExitCode> {
    print(&ipvsadm::save(&table(rt, handle)?))
}

fn list(rt: &tokio::runtime::Runtime, handle: &Handle, stats: bool) -> Result<ExitCode> {
    let info = rt.block_on(handle.info())?;
    print(&ipvsadm::list(&info, &table(rt, handle)?, stats))
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
