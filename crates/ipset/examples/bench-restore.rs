//! Times `ipset restore` and this crate's restore path on the same 100,000-entry input spread
//! over kube-proxy's KUBE-* set types, each run in a fresh network namespace. Needs root.
//!
//! ```sh
//! cargo run --release -p libipset --example bench-restore [-- ENTRIES RUNS]
//! ```
//!
//! "ours" is the whole path from text: parse the `ipset restore` input into typed operations,
//! open a session, apply them as one batch. The best of RUNS (default 5) is reported for each.
use std::fmt::Write as _;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use lab::guest::in_netns;
use libipset::{Session, parse_restore};

/// (set, type and options, share of the entries, entry generator)
type Gen = fn(u32) -> String;

fn v4(base: u32, i: u32) -> Ipv4Addr {
    Ipv4Addr::from(base + i)
}

fn v6(i: u32) -> Ipv6Addr {
    Ipv6Addr::from(0xfd00_0000_0000_0000_0000_0000_0000_0000u128 + u128::from(i))
}

fn proto(i: u32) -> &'static str {
    ["tcp", "udp", "sctp"][(i % 3) as usize]
}

fn input(total: u32) -> String {
    let sets: [(&str, &str, u32, Gen); 9] = [
        (
            "KUBE-CLUSTER-IP",
            "hash:ip,port family inet hashsize 1024 maxelem 262144",
            30,
            |i| format!("{},{}:{}", v4(0x0a60_0000, i / 4), proto(i), 80 + i % 4),
        ),
        (
            "KUBE-LOOP-BACK",
            "hash:ip,port,ip family inet hashsize 1024 maxelem 262144",
            25,
            |i| {
                let ip = v4(0x0af4_0000, i);
                format!("{ip},{}:{},{ip}", proto(i), 8080 + i % 7)
            },
        ),
        (
            "KUBE-EXTERNAL-IP",
            "hash:ip,port family inet hashsize 1024 maxelem 262144",
            5,
            |i| format!("{},tcp:{}", v4(0xcb00_7100, i / 2), 443 + i % 2),
        ),
        (
            "KUBE-LOAD-BALANCER",
            "hash:ip,port family inet hashsize 1024 maxelem 262144",
            5,
            |i| format!("{},udp:{}", v4(0xc633_6400, i / 2), 53 + i % 2),
        ),
        (
            "KUBE-LOAD-BALANCER-SOURCE-CIDR",
            "hash:ip,port,net family inet hashsize 1024 maxelem 262144",
            5,
            |i| {
                format!(
                    "{},tcp:80,{}/24",
                    v4(0xc633_6400, i % 16),
                    v4(0x0a00_0000, (i / 16) << 8)
                )
            },
        ),
        (
            "KUBE-LOAD-BALANCER-SOURCE-IP",
            "hash:ip,port,ip family inet hashsize 1024 maxelem 262144",
            5,
            |i| format!("{},tcp:80,{}", v4(0xc633_6400, i % 16), v4(0x0b00_0000, i)),
        ),
        ("KUBE-NODE-PORT-TCP", "bitmap:port range 0-65535", 10, |i| {
            format!("{}", 20000 + i)
        }),
        ("KUBE-NODE-PORT-UDP", "bitmap:port range 0-65535", 5, |i| {
            format!("{}", 40000 + i)
        }),
        (
            "KUBE-6-CLUSTER-IP",
            "hash:ip,port family inet6 hashsize 1024 maxelem 262144",
            10,
            |i| format!("{},{}:{}", v6(i / 2), proto(i), 443 + i % 2),
        ),
    ];
    let shares: u32 = sets.iter().map(|s| s.2).sum();
    let mut text = String::new();
    let mut written = 0;
    for (k, (name, spec, share, generate)) in sets.iter().enumerate() {
        let count = if k + 1 == sets.len() {
            total - written
        } else {
            total * share / shares
        };
        written += count;
        writeln!(text, "create {name} {spec}").unwrap();
        for i in 0..count {
            writeln!(text, "add {name} {}", generate(i)).unwrap();
        }
    }
    text
}

fn count_entries(text: &str) -> usize {
    text.lines().filter(|l| l.starts_with("add ")).count()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let total: u32 = args
        .next()
        .map(|a| a.parse().expect("ENTRIES"))
        .unwrap_or(100_000);
    let runs: usize = args.next().map(|a| a.parse().expect("RUNS")).unwrap_or(5);
    let text = input(total);
    let path = std::env::temp_dir().join(format!("ipset-bench-{}.restore", std::process::id()));
    std::fs::write(&path, &text).expect("write input");
    let entries = count_entries(&text);

    let mut theirs = Vec::new();
    let mut ours = Vec::new();
    for _ in 0..runs {
        let p = path.clone();
        theirs.push(in_netns(move || {
            let start = Instant::now();
            let status = std::process::Command::new("ipset")
                .args(["restore", "-file"])
                .arg(&p)
                .status()
                .expect("run ipset");
            let took = start.elapsed();
            assert!(status.success(), "ipset restore failed");
            let saved = std::process::Command::new("ipset")
                .arg("save")
                .output()
                .unwrap();
            assert_eq!(
                count_entries(&String::from_utf8_lossy(&saved.stdout)),
                entries
            );
            took
        }));
        let t = text.clone();
        ours.push(in_netns(move || {
            let start = Instant::now();
            let ops = parse_restore(&t, |_| None).expect("parse");
            let mut session = Session::new().expect("session");
            session.apply(&ops).expect("apply");
            let took = start.elapsed();
            let saved = std::process::Command::new("ipset")
                .arg("save")
                .output()
                .unwrap();
            assert_eq!(
                count_entries(&String::from_utf8_lossy(&saved.stdout)),
                entries
            );
            took
        }));
    }
    let _ = std::fs::remove_file(&path);
    let best = |v: &[Duration]| v.iter().min().copied().unwrap_or_default();
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let (bt, bo) = (best(&theirs), best(&ours));
    let (mt, mo) = (median(&mut theirs), median(&mut ours));
    println!(
        "entries: {entries} in 9 KUBE-* sets, best and median of {runs} runs, fresh netns each"
    );
    println!(
        "ipset restore: best {:>8.1} ms  median {:>8.1} ms",
        ms(bt),
        ms(mt)
    );
    println!(
        "ipset crate:   best {:>8.1} ms  median {:>8.1} ms",
        ms(bo),
        ms(mo)
    );
    println!(
        "ratio (ipset restore / ipset crate): best {:.2}x  median {:.2}x",
        bt.as_secs_f64() / bo.as_secs_f64(),
        mt.as_secs_f64() / mo.as_secs_f64()
    );
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
