//! Benchmark for the lab: the same 10,000 services x 5 destinations loaded by `ipvsadm -R`
//! and by `ipvs restore`, then saved by `ipvsadm -Sn` and by `ipvs save`; each load measured
//! in a fresh network namespace (`unshare -n`), the saves on one loaded state.
//!
//! ```text
//! cargo build --release -p ipvs-netlink --examples
//! cargo run -p lab -- run --machine pc --file target/release/examples/ipvs -- \
//!     target/release/examples/bench [SERVICES] [DESTS]
//! ```
//!
//! Prints timings and ratios; it asserts nothing about time, only that both saves agree.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("inner") {
        inner(&args[1..]);
        return;
    }
    let services: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let dests: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(5);
    let rules = Path::new("/tmp/bench.rules");
    std::fs::write(rules, input(services, dests)).expect("write rules");
    println!(
        "input: {services} services x {dests} destinations ({} rules)",
        services * (dests + 1)
    );

    let ipvsadm_restore = measure(&["restore-ipvsadm"]);
    let ipvs_restore = measure(&["restore-ipvs"]);
    let saves = measure(&["save"]);
    let (ipvsadm_save, ipvs_save) = (saves[0], saves[1]);
    println!(
        "ipvsadm -R      {:>9.3} s",
        ipvsadm_restore[0].as_secs_f64()
    );
    println!("ipvs restore    {:>9.3} s", ipvs_restore[0].as_secs_f64());
    println!(
        "restore ratio   {:>9.3} (ipvs / ipvsadm; done when <= 0.5)",
        ipvs_restore[0].as_secs_f64() / ipvsadm_restore[0].as_secs_f64()
    );
    println!("ipvsadm -Sn     {:>9.3} s", ipvsadm_save.as_secs_f64());
    println!("ipvs save       {:>9.3} s", ipvs_save.as_secs_f64());
    println!(
        "save ratio      {:>9.3} (ipvs / ipvsadm; done when <= 1)",
        ipvs_save.as_secs_f64() / ipvsadm_save.as_secs_f64()
    );
}

/// `10.96.x.y:80` TCP services with `rr`, each with masquerade destinations in 10.244/16;
/// every tenth service a UDP one in 192.168/16 (sorted before 10/8 by ipvsadm).
fn input(services: usize, dests: usize) -> String {
    let mut out = String::new();
    let mut pod = 0usize;
    for i in 0..services {
        let svc = if i % 10 == 9 {
            format!("-u 192.168.{}.{}:53", i / 250 % 250, i % 250 + 1)
        } else {
            format!("-t 10.96.{}.{}:80", i / 250, i % 250 + 1)
        };
        let _ = writeln!(out, "-A {svc} -s rr");
        for _ in 0..dests {
            pod += 1;
            let _ = writeln!(
                out,
                "-a {svc} -r 10.244.{}.{}:8080 -m -w 1",
                pod / 250 % 250,
                pod % 250 + 1
            );
        }
    }
    out
}

fn self_exe() -> PathBuf {
    std::env::current_exe().expect("current exe")
}

/// The `ipvs` example next to this one (`lab run --file` copies it without its execute
/// bit, so it is made executable here).
fn ipvs() -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = self_exe().with_file_name("ipvs");
    if let Ok(meta) = std::fs::metadata(&path)
        && meta.permissions().mode() & 0o111 == 0
    {
        let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755));
    }
    path
}

/// Runs `bench inner ARGS` in a fresh network namespace; returns the durations it prints.
fn measure(args: &[&str]) -> Vec<Duration> {
    let out = Command::new("unshare")
        .arg("-n")
        .arg(self_exe())
        .arg("inner")
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .expect("unshare");
    assert!(out.status.success(), "inner {args:?} failed");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|n| Duration::from_nanos(n.parse().expect("nanoseconds")))
        .collect()
}

fn run(cmd: &mut Command) -> Duration {
    let t = Instant::now();
    let status = cmd.status().expect("spawn");
    let elapsed = t.elapsed();
    assert!(status.success(), "{cmd:?} failed");
    elapsed
}

fn shell(script: &str) -> Command {
    let mut c = Command::new("/bin/sh");
    c.args(["-c", script]);
    c
}

/// In a fresh namespace: bring `lo` up, then time one thing.
fn inner(args: &[String]) {
    run(&mut shell("ip link set lo up"));
    let ipvs = ipvs();
    let ipvs = ipvs.display();
    match args[0].as_str() {
        "restore-ipvsadm" => {
            let t = run(&mut shell("ipvsadm -R < /tmp/bench.rules"));
            println!("{}", t.as_nanos());
        }
        "restore-ipvs" => {
            let t = run(&mut shell(&format!("{ipvs} restore < /tmp/bench.rules")));
            println!("{}", t.as_nanos());
        }
        "save" => {
            run(&mut shell(&format!("{ipvs} restore < /tmp/bench.rules")));
            let a = run(&mut shell("ipvsadm -Sn > /tmp/bench.ipvsadm"));
            let b = run(&mut shell(&format!("{ipvs} save > /tmp/bench.ipvs")));
            let same = std::fs::read("/tmp/bench.ipvsadm").unwrap()
                == std::fs::read("/tmp/bench.ipvs").unwrap();
            assert!(same, "ipvs save differs from ipvsadm -Sn");
            println!("{} {}", a.as_nanos(), b.as_nanos());
        }
        other => panic!("unknown inner mode {other}"),
    }
}
