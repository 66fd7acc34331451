//! ipvsadm's text formats, byte for byte: the rules of `ipvsadm -Sn` (which `ipvsadm -R`
//! reads back), the listing of `ipvsadm -Ln [--stats]`, and a parser of restore input.
//!
//! Pure functions over typed values, so tools built on this crate can print and read what
//! operators already know, and tests can compare with the real tool.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Duration;

use crate::destination::{Destination, ForwardMethod, Tunnel, TunnelFlags, TunnelType};
use crate::info::Info;
use crate::service::model::raw_address;
use crate::service::{
    AddressFamily, Netmask, Protocol, Scheduler, Service, ServiceFlags, ServiceKey,
};
use crate::stats::Stats;
use crate::timeout::Timeouts;

/// A service with its destinations, as listed.
pub type Entry = (Service, Vec<Destination>);

/// Sorts services and each one's destinations as ipvsadm does (unless `--nosort`).
///
/// ipvsadm compares addresses with a wrapping 32-bit subtraction read as `int`
/// (`ntohl(a) - ntohl(b)`), which is not a total order (192.168.x sorts before 10.96.x, and
/// cycles exist), and sorts with glibc's `qsort`, a top-down merge sort. With such a
/// comparator the result depends on the algorithm and on the input order, so this replays
/// both: feed it the kernel's dump order.
pub fn sort(entries: &mut Vec<Entry>) {
    merge_sort(entries, &|a, b| compare_services(&a.0, &b.0));
    for (_, dests) in entries.iter_mut() {
        merge_sort(dests, &compare_destinations);
    }
}

/// glibc 2.36 `msort_with_tmp`: split at `n / 2`, sort both halves, merge taking the left
/// element while `cmp(left, right) <= 0`.
fn merge_sort<T>(v: &mut Vec<T>, cmp: &impl Fn(&T, &T) -> i32) {
    let mut order: Vec<usize> = (0..v.len()).collect();
    let mut tmp = Vec::with_capacity(v.len());
    msort(&mut order, &mut tmp, &|a, b| cmp(&v[*a], &v[*b]));
    let mut items: Vec<Option<T>> = std::mem::take(v).into_iter().map(Some).collect();
    v.extend(order.into_iter().filter_map(|i| items[i].take()));
}

fn msort(b: &mut [usize], tmp: &mut Vec<usize>, cmp: &impl Fn(&usize, &usize) -> i32) {
    let n = b.len();
    if n <= 1 {
        return;
    }
    let n1 = n / 2;
    msort(&mut b[..n1], tmp, cmp);
    msort(&mut b[n1..], tmp, cmp);
    tmp.clear();
    let (mut i, mut j) = (0, n1);
    while i < n1 && j < n {
        if cmp(&b[i], &b[j]) <= 0 {
            tmp.push(b[i]);
            i += 1;
        } else {
            tmp.push(b[j]);
            j += 1;
        }
    }
    tmp.extend_from_slice(&b[i..n1]);
    tmp.extend_from_slice(&b[j..n]);
    b.copy_from_slice(tmp);
}

/// `ntohl(a) - ntohl(b)` as C `int`.
fn wrapping_diff(a: u32, b: u32) -> i32 {
    a.wrapping_sub(b) as i32
}

fn words(raw: &[u8; 16]) -> [u32; 4] {
    std::array::from_fn(|i| {
        u32::from_be_bytes([raw[4 * i], raw[4 * i + 1], raw[4 * i + 2], raw[4 * i + 3]])
    })
}

fn compare_addresses(family: AddressFamily, a: &IpAddr, b: &IpAddr) -> i32 {
    let (a, b) = (words(&raw_address(a)), words(&raw_address(b)));
    match family {
        AddressFamily::Inet => wrapping_diff(a[0], b[0]),
        AddressFamily::Inet6 => {
            let mut r = 0;
            for i in 0..4 {
                r = wrapping_diff(a[i], b[i]);
                if r != 0 {
                    break;
                }
            }
            r
        }
    }
}

/// libipvs `ipvs_cmp_services`.
fn compare_services(a: &Service, b: &Service) -> i32 {
    let mark = |k: &ServiceKey| match k {
        ServiceKey::Fwmark { mark, .. } => *mark,
        ServiceKey::Inet { .. } => 0,
    };
    let r = wrapping_diff(mark(&a.key), mark(&b.key));
    if r != 0 {
        return r;
    }
    let r = i32::from(a.key.family().to_raw()) - i32::from(b.key.family().to_raw());
    if r != 0 {
        return r;
    }
    match (&a.key, &b.key) {
        (
            ServiceKey::Inet {
                protocol: pa,
                address: aa,
                port: qa,
            },
            ServiceKey::Inet {
                protocol: pb,
                address: ab,
                port: qb,
            },
        ) => {
            let r = i32::from(pa.to_raw()) - i32::from(pb.to_raw());
            if r != 0 {
                return r;
            }
            let r = compare_addresses(a.key.family(), aa, ab);
            if r != 0 {
                return r;
            }
            i32::from(*qa) - i32::from(*qb)
        }
        _ => 0,
    }
}

/// libipvs `ipvs_cmp_dests`.
fn compare_destinations(a: &Destination, b: &Destination) -> i32 {
    let r = compare_addresses(a.family(), &a.address, &b.address);
    if r != 0 {
        return r;
    }
    i32::from(a.port) - i32::from(b.port)
}

fn addr_port(address: &IpAddr, port: u16) -> String {
    match address {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// ipvsadm's names of the scheduler flags of a service (`-b` / the listing's parentheses).
fn sched_flag_names(svc: &Service) -> Vec<&'static str> {
    let f = svc.flags;
    let (one, two) = match svc.scheduler {
        Scheduler::SourceHashing => ("sh-fallback", "sh-port"),
        Scheduler::MaglevHashing => ("mh-fallback", "mh-port"),
        _ => ("flag-1", "flag-2"),
    };
    let mut names = Vec::new();
    if f.contains(ServiceFlags::SCHED1) {
        names.push(one);
    }
    if f.contains(ServiceFlags::SCHED2) {
        names.push(two);
    }
    if f.contains(ServiceFlags::SCHED3) {
        names.push("flag-3");
    }
    names
}

fn persistence(svc: &Service, persistent: &str, mask: &str) -> String {
    let mut out = String::new();
    if svc.flags.contains(ServiceFlags::PERSISTENT) {
        let _ = write!(out, " {persistent} {}", svc.timeout.as_secs());
        match svc.netmask {
            Netmask::V4(m) if m.octets() != [255; 4] => {
                let _ = write!(out, " {mask} {m}");
            }
            Netmask::V6(p) if p != 128 => {
                let _ = write!(out, " {mask} {p}");
            }
            _ => {}
        }
    }
    out
}

/// The service's options in rules; ipvsadm prints marks with `%d`, so marks above
/// 2^31 come out negative.
fn rule_name(key: &ServiceKey) -> String {
    match key {
        ServiceKey::Fwmark { family, mark } => match family {
            AddressFamily::Inet => format!("-f {}", *mark as i32),
            AddressFamily::Inet6 => format!("-f {} -6", *mark as i32),
        },
        inet => inet.to_string(),
    }
}

/// One service line of `ipvsadm -Sn` (without newline).
pub fn rule_of_service(svc: &Service) -> String {
    let mut out = format!("-A {} -s {}", rule_name(&svc.key), svc.scheduler);
    out += &persistence(svc, "-p", "-M");
    if let Some(pe) = &svc.persistence_engine {
        let _ = write!(out, " --pe {pe}");
    }
    if svc.flags.contains(ServiceFlags::ONE_PACKET) {
        out += " -o";
    }
    let flags = sched_flag_names(svc);
    if !flags.is_empty() {
        let _ = write!(out, " -b {}", flags.join(","));
    }
    out
}

/// One destination line of `ipvsadm -Sn` (without newline).
pub fn rule_of_destination(key: &ServiceKey, d: &Destination) -> String {
    let switch = match d.forward {
        ForwardMethod::Masquerade => "-m",
        ForwardMethod::Tunnel => "-i",
        ForwardMethod::Local | ForwardMethod::DirectRoute => "-g",
        ForwardMethod::Other(_) => "",
    };
    let mut out = format!(
        "-a {} -r {} {switch} -w {}",
        rule_name(key),
        addr_port(&d.address, d.port),
        d.weight as i32
    );
    if d.forward == ForwardMethod::Tunnel {
        let _ = write!(out, " --tun-type {}", d.tunnel.kind);
        if d.tunnel.kind == TunnelType::Gue {
            let _ = write!(out, " --tun-port {}", d.tunnel.port);
        }
        if d.tunnel.flags.contains(TunnelFlags::CSUM) {
            out += " --tun-csum";
        }
        if d.tunnel.flags.contains(TunnelFlags::REMCSUM) {
            out += " --tun-remcsum";
        }
    }
    out
}

/// `ipvsadm -Sn` of sorted entries (see [`sort`]).
pub fn save(entries: &[Entry]) -> String {
    let mut out = String::new();
    for (svc, dests) in entries {
        out += &rule_of_service(svc);
        out.push('\n');
        for d in dests {
            out += &rule_of_destination(&svc.key, d);
            out.push('\n');
        }
    }
    out
}

fn listing_name(key: &ServiceKey) -> String {
    match key {
        ServiceKey::Inet {
            protocol,
            address,
            port,
        } => {
            let proto = match protocol {
                Protocol::Tcp => "TCP".to_string(),
                Protocol::Udp => "UDP".to_string(),
                Protocol::Sctp => "SCTP".to_string(),
                Protocol::Other(p) => p.to_string(),
            };
            let mut name = format!("{proto:<4} {}", addr_port(address, *port));
            if address.is_ipv4() {
                name.truncate(33);
            }
            name
        }
        ServiceKey::Fwmark { family, mark } => match family {
            AddressFamily::Inet => format!("FWM  {}", *mark as i32),
            AddressFamily::Inet6 => format!("FWM  {} IPv6", *mark as i32),
        },
    }
}

/// ipvsadm's `print_largenum` without `--exact`: 9 columns, then K, M, G, T.
fn largenum(out: &mut String, i: u64) {
    let _ = match i {
        _ if i < 100_000_000 => write!(out, "{i:>9}"),
        _ if i < 1_000_000_000 => write!(out, "{:>8}K", i / 1000),
        _ if i < 100_000_000_000 => write!(out, "{:>8}M", i / 1_000_000),
        _ if i < 100_000_000_000_000 => write!(out, "{:>8}G", i / 1_000_000_000),
        _ => write!(out, "{:>8}T", i / 1_000_000_000_000),
    };
}

fn counters(out: &mut String, s: Stats) {
    for v in [
        s.conns,
        s.in_packets,
        s.out_packets,
        s.in_bytes,
        s.out_bytes,
    ] {
        largenum(out, v);
    }
}

fn best_stats(a: Option<Stats>, b: Option<Stats>) -> Stats {
    a.or(b).unwrap_or_default()
}

/// `ipvsadm -Ln` (or with `stats`, `ipvsadm -Ln --stats`) of sorted entries.
pub fn list(info: &Info, entries: &[Entry], stats: bool) -> String {
    let mut out = format!(
        "IP Virtual Server version {} (size={})\n",
        info.version, info.connection_table_size
    );
    if stats {
        let _ = writeln!(
            out,
            "{:<33} {:>8} {:>8} {:>8} {:>8} {:>8}\n  -> RemoteAddress:Port",
            "Prot LocalAddress:Port", "Conns", "InPkts", "OutPkts", "InBytes", "OutBytes"
        );
    } else {
        out += "Prot LocalAddress:Port Scheduler Flags\n";
        out += "  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n";
    }
    for (svc, dests) in entries {
        let name = listing_name(&svc.key);
        if stats {
            let _ = write!(out, "{name:<33}");
            counters(&mut out, best_stats(svc.stats64, svc.stats));
        } else {
            let _ = write!(out, "{name} {}", svc.scheduler);
            let flags = sched_flag_names(svc);
            if !flags.is_empty() {
                let _ = write!(out, " ({})", flags.join(","));
            }
            out += &persistence(svc, "persistent", "mask");
            if let Some(pe) = &svc.persistence_engine {
                let _ = write!(out, " pe {pe}");
            }
            if svc.flags.contains(ServiceFlags::ONE_PACKET) {
                out += " ops";
            }
        }
        out.push('\n');
        for d in dests {
            let mut dname = addr_port(&d.address, d.port);
            if svc.key.family() == AddressFamily::Inet {
                dname.truncate(28);
            }
            if stats {
                let _ = write!(out, "  -> {dname:<28}");
                counters(&mut out, best_stats(d.stats64, d.stats));
                out.push('\n');
            } else {
                let _ = writeln!(
                    out,
                    "  -> {dname:<28} {:<7} {:<6} {:<10} {:<10}",
                    d.forward.listing_name(),
                    d.weight as i32,
                    d.active_connections,
                    d.inactive_connections
                );
            }
        }
    }
    out
}

/// One command of `ipvsadm -R` input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// `-A`.
    AddService(Service),
    /// `-E`.
    EditService(Service),
    /// `-D`.
    DeleteService(ServiceKey),
    /// `-a`.
    AddDestination(ServiceKey, Destination),
    /// `-e`.
    EditDestination(ServiceKey, Destination),
    /// `-d`: the service, the destination's address and port.
    DeleteDestination(ServiceKey, IpAddr, u16),
    /// `-C`.
    Flush,
    /// `-Z`, for one service or all.
    Zero(Option<ServiceKey>),
    /// `--set TCP TCPFIN UDP`.
    SetTimeouts(Timeouts),
}

/// A line of restore input ipvsadm would reject.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Parses `ipvsadm -R` input (what `ipvsadm -S[n]` prints, and the other commands), with
/// ipvsadm's defaults: scheduler `wlc`, `-p` 360 seconds, direct routing, weight 1, and a
/// direct-route or tunnel destination's port forced to the service's.
pub fn parse_rules(input: &str) -> Result<Vec<Rule>, ParseError> {
    let mut rules = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.is_empty() || words[0].starts_with('#') {
            continue;
        }
        let rule = parse_line(&words).map_err(|message| ParseError {
            line: i + 1,
            message,
        })?;
        rules.push(rule);
    }
    Ok(rules)
}

#[derive(Default)]
struct Line<'a> {
    command: Option<&'a str>,
    protocol: Option<Protocol>,
    service: Option<&'a str>,
    fwmark: Option<u32>,
    ipv6: bool,
    scheduler: Option<&'a str>,
    persistent: Option<u32>,
    netmask: Option<&'a str>,
    pe: Option<&'a str>,
    one_packet: bool,
    sched_flags: Option<&'a str>,
    real: Option<&'a str>,
    forward: Option<ForwardMethod>,
    weight: Option<u32>,
    upper: Option<u32>,
    lower: Option<u32>,
    tunnel: Tunnel,
    timeouts: Vec<u32>,
}

fn number<T: std::str::FromStr>(s: Option<&&str>, what: &str) -> Result<T, String> {
    let s = s.ok_or_else(|| format!("{what} needs a value"))?;
    s.parse().map_err(|_| format!("illegal {what} {s:?}"))
}

fn parse_line(words: &[&str]) -> Result<Rule, String> {
    let mut l = Line::default();
    let mut it = words.iter().peekable();
    while let Some(&w) = it.next() {
        match w {
            "-A" | "--add-service" | "-E" | "--edit-service" | "-D" | "--delete-service" | "-a"
            | "--add-server" | "-e" | "--edit-server" | "-d" | "--delete-server" | "-C"
            | "--clear" | "-Z" | "--zero" | "--set" => {
                if l.command.is_some() {
                    return Err("more than one command".into());
                }
                l.command = Some(w);
                if w == "--set" {
                    for _ in 0..3 {
                        l.timeouts.push(number(it.next(), "timeout")?);
                    }
                }
            }
            "-t" | "--tcp-service" | "-u" | "--udp-service" | "--sctp-service" => {
                l.protocol = Some(match w {
                    "-t" | "--tcp-service" => Protocol::Tcp,
                    "-u" | "--udp-service" => Protocol::Udp,
                    _ => Protocol::Sctp,
                });
                l.service = Some(it.next().ok_or("service address missing")?);
            }
            "-f" | "--fwmark-service" => {
                // what `-Sn` prints for marks above 2^31 reads back as the same mark
                let mark: i64 = number(it.next(), "fwmark")?;
                l.fwmark = Some(
                    u32::try_from(mark)
                        .or_else(|_| i32::try_from(mark).map(|m| m as u32))
                        .map_err(|_| format!("illegal fwmark {mark}"))?,
                );
            }
            "-6" | "--ipv6" => l.ipv6 = true,
            "-s" | "--scheduler" => l.scheduler = Some(it.next().ok_or("scheduler missing")?),
            "-p" | "--persistent" => {
                let timeout = match it.peek() {
                    Some(v) if v.bytes().all(|b| b.is_ascii_digit()) => {
                        number(it.next(), "timeout")?
                    }
                    _ => 360,
                };
                l.persistent = Some(timeout);
            }
            "-M" | "--netmask" => l.netmask = Some(it.next().ok_or("netmask missing")?),
            "--pe" => l.pe = Some(it.next().ok_or("persistence engine missing")?),
            "-o" | "--ops" => l.one_packet = true,
            "-b" | "--sched-flags" => l.sched_flags = Some(it.next().ok_or("flags missing")?),
            "-r" | "--real-server" => l.real = Some(it.next().ok_or("real server missing")?),
            "-g" | "--gatewaying" => l.forward = Some(ForwardMethod::DirectRoute),
            "-i" | "--ipip" => l.forward = Some(ForwardMethod::Tunnel),
            "-m" | "--masquerading" => l.forward = Some(ForwardMethod::Masquerade),
            "-w" | "--weight" => l.weight = Some(number(it.next(), "weight")?),
            "-x" | "--u-threshold" => l.upper = Some(number(it.next(), "u-threshold")?),
            "-y" | "--l-threshold" => l.lower = Some(number(it.next(), "l-threshold")?),
            "--tun-type" => {
                l.tunnel.kind = match *it.next().ok_or("tunnel type missing")? {
                    "ipip" => TunnelType::Ipip,
                    "gue" => TunnelType::Gue,
                    "gre" => TunnelType::Gre,
                    other => return Err(format!("illegal tunnel type {other:?}")),
                }
            }
            "--tun-port" => l.tunnel.port = number(it.next(), "tunnel port")?,
            "--tun-nocsum" => l.tunnel.flags = TunnelFlags::empty(),
            "--tun-csum" => l.tunnel.flags = TunnelFlags::CSUM,
            "--tun-remcsum" => l.tunnel.flags = TunnelFlags::REMCSUM,
            "-n" | "--numeric" => {}
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    let command = l.command.ok_or("no command")?;
    match command {
        "-C" | "--clear" => return Ok(Rule::Flush),
        "--set" => {
            let t = |i: usize| Duration::from_secs(l.timeouts[i].into());
            return Ok(Rule::SetTimeouts(Timeouts {
                tcp: t(0),
                tcp_fin: t(1),
                udp: t(2),
            }));
        }
        "-Z" | "--zero" if l.service.is_none() && l.fwmark.is_none() => {
            return Ok(Rule::Zero(None));
        }
        _ => {}
    }
    let key = service_key(&l)?;
    Ok(match command {
        "-A" | "--add-service" => Rule::AddService(service(&l, key)?),
        "-E" | "--edit-service" => Rule::EditService(service(&l, key)?),
        "-D" | "--delete-service" => Rule::DeleteService(key),
        "-Z" | "--zero" => Rule::Zero(Some(key)),
        "-a" | "--add-server" => Rule::AddDestination(key, destination(&l, &key)?),
        "-e" | "--edit-server" => Rule::EditDestination(key, destination(&l, &key)?),
        _ => {
            let d = destination(&l, &key)?;
            Rule::DeleteDestination(key, d.address, d.port)
        }
    })
}

/// Splits `ADDR[:PORT]` / `[V6][:PORT]`.
fn address(s: &str) -> Result<(IpAddr, Option<u16>), String> {
    let bad = || format!("illegal address {s:?}");
    if let Some(rest) = s.strip_prefix('[') {
        let (a, tail) = rest.split_once(']').ok_or_else(bad)?;
        let a: IpAddr = a.parse().map_err(|_| bad())?;
        let port = match tail.strip_prefix(':') {
            Some(p) => Some(p.parse().map_err(|_| bad())?),
            None if tail.is_empty() => None,
            None => return Err(bad()),
        };
        return Ok((a, port));
    }
    match s.split_once(':') {
        Some((a, p)) => Ok((
            a.parse().map_err(|_| bad())?,
            Some(p.parse().map_err(|_| bad())?),
        )),
        None => Ok((s.parse().map_err(|_| bad())?, None)),
    }
}

fn service_key(l: &Line) -> Result<ServiceKey, String> {
    match (l.service, l.fwmark) {
        (Some(s), None) => {
            let (address, port) = address(s)?;
            Ok(ServiceKey::Inet {
                protocol: l.protocol.unwrap_or(Protocol::Tcp),
                address,
                port: port.ok_or_else(|| format!("service {s:?} without port"))?,
            })
        }
        (None, Some(mark)) => Ok(ServiceKey::Fwmark {
            family: if l.ipv6 {
                AddressFamily::Inet6
            } else {
                AddressFamily::Inet
            },
            mark,
        }),
        _ => Err("one service (-t, -u, --sctp-service or -f) needed".into()),
    }
}

fn service(l: &Line, key: ServiceKey) -> Result<Service, String> {
    let mut svc = Service::new(key, Scheduler::from_name(l.scheduler.unwrap_or("wlc")));
    if let Some(t) = l.persistent {
        svc = svc.persistent(Duration::from_secs(t.into()));
    }
    if let Some(m) = l.netmask {
        svc.netmask = match key.family() {
            AddressFamily::Inet => {
                Netmask::V4(m.parse().map_err(|_| format!("illegal netmask {m:?}"))?)
            }
            AddressFamily::Inet6 => {
                Netmask::V6(m.parse().map_err(|_| format!("illegal netmask {m:?}"))?)
            }
        };
    }
    svc.persistence_engine = l.pe.map(str::to_string);
    if l.one_packet {
        svc.flags |= ServiceFlags::ONE_PACKET;
    }
    if let Some(flags) = l.sched_flags {
        for f in flags.split(',') {
            svc.flags |= match f {
                "flag-1" | "sh-fallback" | "mh-fallback" => ServiceFlags::SCHED1,
                "flag-2" | "sh-port" | "mh-port" => ServiceFlags::SCHED2,
                "flag-3" => ServiceFlags::SCHED3,
                other => return Err(format!("illegal scheduler flag {other:?}")),
            };
        }
    }
    Ok(svc)
}

fn destination(l: &Line, key: &ServiceKey) -> Result<Destination, String> {
    let real = l.real.ok_or("real server (-r) missing")?;
    let (addr, port) = address(real)?;
    let forward = l.forward.unwrap_or(ForwardMethod::DirectRoute);
    let service_port = match key {
        ServiceKey::Inet { port, .. } => *port,
        ServiceKey::Fwmark { .. } => 0,
    };
    let port = match forward {
        ForwardMethod::Masquerade => port.unwrap_or(service_port),
        _ if matches!(key, ServiceKey::Fwmark { .. }) => port.unwrap_or(0),
        _ => service_port,
    };
    let mut d = Destination::new(addr, port, forward)
        .with_weight(l.weight.unwrap_or(1))
        .with_thresholds(l.upper.unwrap_or(0), l.lower.unwrap_or(0));
    d.tunnel = l.tunnel;
    Ok(d)
}
