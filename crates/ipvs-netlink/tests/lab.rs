//! Kernel tests of ipvs-netlink, run inside the lab VM
//! (`cargo run -p lab -- test -p ipvs-netlink`). Each test owns a network namespace, so
//! IPVS state starts empty; `ipvsadm` is the reference both ways.

mod fixtures;

use std::time::Duration;

use futures::TryStreamExt;
use ipvs_netlink::{
    AddressFamily, DaemonState, Destination, ForwardMethod, Handle, Netmask, Protocol, Scheduler,
    Service, ServiceFlags, ServiceKey, SyncDaemon, Timeouts, Tunnel, TunnelFlags, TunnelType,
};
use lab::guest::{Netns, sh, try_sh};

use fixtures::ip;

/// Serialises the tests of this binary. IPVS keeps every namespace's services in one hash
/// table and its dumps count entries of all namespaces to resume (`++idx <= start` before
/// the namespace check in `ip_vs_genl_dump_services`), so a multi-part dump in one namespace
/// repeats or skips entries while another namespace adds services: seen here as ipvsadm
/// printing a service twice when these tests ran in parallel.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Runs `f` with a handle on a current-thread runtime built on the test's thread, so the
/// socket lives in the test's namespace.
fn with_handle<F, Fut>(f: F)
where
    F: FnOnce(Handle) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let handle = ipvs_netlink::connect().await.expect("connect");
        f(handle).await
    });
}

/// Services ipvsadm makes, read back by the library: every scheduler, flag, protocol,
/// family, fwmark, persistence engine and forwarding method.
#[test]
fn library_reads_what_ipvsadm_made() {
    let _serial = serial();
    let _ns = Netns::fresh();
    for (i, s) in Scheduler::KNOWN.iter().enumerate() {
        sh(&format!("ipvsadm -A -t 10.1.0.{i}:80 -s {}", s.name()));
    }
    sh("ipvsadm -A -t 192.168.1.1:443 -s wrr -p 300 -M 255.255.255.0");
    sh("ipvsadm -A -u 10.96.0.10:53 -s sh -b sh-fallback,sh-port");
    sh("ipvsadm -A -u 10.96.0.11:53 -s mh -b mh-fallback,mh-port -o");
    sh("ipvsadm -A --sctp-service 10.96.0.12:9000 -s lc");
    sh("ipvsadm -A -t [2001:db8::1]:80 -s wlc -p 60 -M 64");
    sh("ipvsadm -A -f 7 -s lblc");
    sh("ipvsadm -A -f 8 -6 -s lblcr -p");
    sh("ipvsadm -A -t 10.96.0.13:80 -s dh --pe sip -p 10");
    sh("ipvsadm -a -t 10.1.0.0:80 -r 10.244.0.2:8080 -m -w 1");
    sh("ipvsadm -a -t 10.1.0.0:80 -r 10.244.0.3:8080 -g -w 0 -x 100 -y 10");
    sh(
        "ipvsadm -a -t 10.1.0.0:80 -r 10.244.0.4:8080 -i -w 3 --tun-type gue --tun-port 6080 --tun-csum",
    );
    sh("ipvsadm -a -t 10.1.0.0:80 -r 10.244.0.5 -i --tun-type gre --tun-csum");
    sh("ipvsadm -a -t [2001:db8::1]:80 -r [2001:db8::2]:8080 -m -w 5");
    sh("ipvsadm -a -f 7 -r 10.244.0.9:0 -g");

    with_handle(|h| async move {
        let services = h.services().list().await.unwrap();
        assert_eq!(services.len(), Scheduler::KNOWN.len() + 8, "{services:#?}");
        let find = |key: ServiceKey| {
            services
                .iter()
                .find(|s| s.key == key)
                .unwrap_or_else(|| panic!("{key} missing from {services:#?}"))
                .clone()
        };
        for (i, s) in Scheduler::KNOWN.iter().enumerate() {
            let svc = find(ServiceKey::tcp(ip(&format!("10.1.0.{i}")), 80));
            assert_eq!(&svc.scheduler, s);
            assert_eq!(svc.flags - ServiceFlags::HASHED, ServiceFlags::empty());
            assert_eq!(svc.netmask, Netmask::host(AddressFamily::Inet));
            assert!(svc.stats.is_some() && svc.stats64.is_some());
        }
        let https = find(ServiceKey::tcp(ip("192.168.1.1"), 443));
        assert_eq!(
            https,
            Service {
                flags: https.flags | ServiceFlags::HASHED,
                stats: https.stats,
                stats64: https.stats64,
                ..Service::new(https.key, Scheduler::WeightedRoundRobin)
                    .persistent(Duration::from_secs(300))
                    .with_netmask(Netmask::V4("255.255.255.0".parse().unwrap()))
            }
        );
        let sh_svc = find(ServiceKey::udp(ip("10.96.0.10"), 53));
        assert!(
            sh_svc
                .flags
                .contains(ServiceFlags::SH_FALLBACK | ServiceFlags::SH_PORT)
        );
        let mh_svc = find(ServiceKey::udp(ip("10.96.0.11"), 53));
        assert!(mh_svc.flags.contains(
            ServiceFlags::MH_FALLBACK | ServiceFlags::MH_PORT | ServiceFlags::ONE_PACKET
        ));
        let sctp = find(ServiceKey::sctp(ip("10.96.0.12"), 9000));
        assert_eq!(sctp.scheduler, Scheduler::LeastConnection);
        let v6 = find(ServiceKey::tcp(ip("2001:db8::1"), 80));
        assert_eq!(v6.netmask, Netmask::V6(64));
        assert_eq!(v6.timeout, Duration::from_secs(60));
        let fw = find(ServiceKey::fwmark(AddressFamily::Inet, 7));
        assert_eq!(fw.scheduler, Scheduler::LocalityBasedLeastConnection);
        let fw6 = find(ServiceKey::fwmark(AddressFamily::Inet6, 8));
        assert_eq!(fw6.timeout, Duration::from_secs(360));
        assert!(fw6.flags.contains(ServiceFlags::PERSISTENT));
        let sip = find(ServiceKey::tcp(ip("10.96.0.13"), 80));
        assert_eq!(sip.persistence_engine.as_deref(), Some("sip"));

        let key = ServiceKey::tcp(ip("10.1.0.0"), 80);
        let mut dests = h.destinations(&key).list().await.unwrap();
        dests.sort_by_key(|d| d.address);
        let strip = |d: &Destination| Destination {
            stats: None,
            stats64: None,
            ..d.clone()
        };
        let got: Vec<Destination> = dests.iter().map(strip).collect();
        assert_eq!(
            got,
            vec![
                Destination::new(ip("10.244.0.2"), 8080, ForwardMethod::Masquerade),
                // ipvsadm gives direct-route and tunnel destinations the service's port
                Destination::new(ip("10.244.0.3"), 80, ForwardMethod::DirectRoute)
                    .with_weight(0)
                    .with_thresholds(100, 10),
                Destination::new(ip("10.244.0.4"), 80, ForwardMethod::Tunnel)
                    .with_weight(3)
                    .with_tunnel(Tunnel {
                        kind: TunnelType::Gue,
                        port: 6080,
                        flags: TunnelFlags::CSUM
                    }),
                Destination::new(ip("10.244.0.5"), 80, ForwardMethod::Tunnel).with_tunnel(Tunnel {
                    kind: TunnelType::Gre,
                    port: 0,
                    flags: TunnelFlags::CSUM
                }),
            ]
        );
        assert!(
            dests
                .iter()
                .all(|d| d.stats.is_some() && d.stats64.is_some())
        );
        let v6d = h
            .destinations(&ServiceKey::tcp(ip("2001:db8::1"), 80))
            .list()
            .await
            .unwrap();
        assert_eq!(v6d.len(), 1);
        assert_eq!(v6d[0].address, ip("2001:db8::2"));
        assert_eq!(v6d[0].weight, 5);
        let fwd = h
            .destinations(&ServiceKey::fwmark(AddressFamily::Inet, 7))
            .list()
            .await
            .unwrap();
        assert_eq!(fwd[0].forward, ForwardMethod::DirectRoute);
        assert_eq!((fwd[0].address, fwd[0].port), (ip("10.244.0.9"), 0));
    });
}

/// Services the library makes, printed by `ipvsadm -Sn` exactly as expected.
#[test]
fn ipvsadm_prints_what_the_library_made() {
    let _serial = serial();
    let _ns = Netns::fresh();
    with_handle(|h| async move {
        let s = h.services();
        for (i, sched) in Scheduler::KNOWN.iter().enumerate() {
            let key = ServiceKey::tcp(ip(&format!("10.1.0.{i}")), 80);
            s.add(&Service::new(key, sched.clone())).await.unwrap();
        }
        let web = ServiceKey::tcp(ip("192.168.1.1"), 443);
        s.add(
            &Service::new(web, Scheduler::WeightedRoundRobin)
                .persistent(Duration::from_secs(300))
                .with_netmask(Netmask::V4("255.255.255.0".parse().unwrap())),
        )
        .await
        .unwrap();
        let dns = ServiceKey::udp(ip("10.96.0.10"), 53);
        s.add(
            &Service::new(dns, Scheduler::SourceHashing)
                .with_flags(ServiceFlags::SH_FALLBACK | ServiceFlags::SH_PORT),
        )
        .await
        .unwrap();
        let mh = ServiceKey::udp(ip("10.96.0.11"), 53);
        s.add(&Service::new(mh, Scheduler::MaglevHashing).with_flags(
            ServiceFlags::MH_FALLBACK | ServiceFlags::MH_PORT | ServiceFlags::ONE_PACKET,
        ))
        .await
        .unwrap();
        let sctp = ServiceKey::sctp(ip("10.96.0.12"), 9000);
        s.add(&Service::new(sctp, Scheduler::LeastConnection))
            .await
            .unwrap();
        let v6 = ServiceKey::tcp(ip("2001:db8::1"), 80);
        s.add(
            &Service::new(v6, Scheduler::WeightedLeastConnection)
                .persistent(Duration::from_secs(60))
                .with_netmask(Netmask::V6(64)),
        )
        .await
        .unwrap();
        let fw = ServiceKey::fwmark(AddressFamily::Inet, 7);
        s.add(&Service::new(fw, Scheduler::LocalityBasedLeastConnection))
            .await
            .unwrap();
        let fw6 = ServiceKey::fwmark(AddressFamily::Inet6, 8);
        s.add(
            &Service::new(fw6, Scheduler::LocalityBasedLeastConnectionReplication)
                .persistent(Duration::from_secs(360)),
        )
        .await
        .unwrap();
        let sip = ServiceKey::tcp(ip("10.96.0.13"), 80);
        s.add(
            &Service::new(sip, Scheduler::DestinationHashing)
                .persistent(Duration::from_secs(10))
                .with_persistence_engine("sip"),
        )
        .await
        .unwrap();
        let first = ServiceKey::tcp(ip("10.1.0.0"), 80);
        let d = h.destinations(&first);
        d.add(&Destination::new(
            ip("10.244.0.2"),
            8080,
            ForwardMethod::Masquerade,
        ))
        .await
        .unwrap();
        d.add(
            &Destination::new(ip("10.244.0.3"), 80, ForwardMethod::DirectRoute)
                .with_weight(0)
                .with_thresholds(100, 10),
        )
        .await
        .unwrap();
        d.add(
            &Destination::new(ip("10.244.0.4"), 80, ForwardMethod::Tunnel)
                .with_weight(3)
                .with_tunnel(Tunnel {
                    kind: TunnelType::Gue,
                    port: 6080,
                    flags: TunnelFlags::CSUM,
                }),
        )
        .await
        .unwrap();
        d.add(&Destination::new(
            ip("10.244.0.6"),
            80,
            ForwardMethod::Tunnel,
        ))
        .await
        .unwrap();
        h.destinations(&v6)
            .add(
                &Destination::new(ip("2001:db8::2"), 8080, ForwardMethod::Masquerade)
                    .with_weight(5),
            )
            .await
            .unwrap();
        h.destinations(&fw)
            .add(&Destination::new(
                ip("10.244.0.9"),
                0,
                ForwardMethod::DirectRoute,
            ))
            .await
            .unwrap();
        h.destinations(&fw6)
            .add(&Destination::new(
                ip("2001:db8::9"),
                0,
                ForwardMethod::DirectRoute,
            ))
            .await
            .unwrap();
    });
    let mut want = String::new();
    want += "-A -t 192.168.1.1:443 -s wrr -p 300 -M 255.255.255.0\n";
    for (i, sched) in Scheduler::KNOWN.iter().enumerate() {
        want += &format!("-A -t 10.1.0.{i}:80 -s {}\n", sched.name());
        if i == 0 {
            want += "-a -t 10.1.0.0:80 -r 10.244.0.2:8080 -m -w 1\n";
            want += "-a -t 10.1.0.0:80 -r 10.244.0.3:80 -g -w 0\n";
            want += "-a -t 10.1.0.0:80 -r 10.244.0.4:80 -i -w 3 --tun-type gue --tun-port 6080 --tun-csum\n";
            want += "-a -t 10.1.0.0:80 -r 10.244.0.6:80 -i -w 1 --tun-type ipip\n";
        }
    }
    want += "-A -t 10.96.0.13:80 -s dh -p 10 --pe sip\n";
    want += "-A -u 10.96.0.10:53 -s sh -b sh-fallback,sh-port\n";
    want += "-A -u 10.96.0.11:53 -s mh -o -b mh-fallback,mh-port\n";
    want += "-A --sctp-service 10.96.0.12:9000 -s lc\n";
    want += "-A -t [2001:db8::1]:80 -s wlc -p 60 -M 64\n";
    want += "-a -t [2001:db8::1]:80 -r [2001:db8::2]:8080 -m -w 5\n";
    want += "-A -f 7 -s lblc\n";
    want += "-a -f 7 -r 10.244.0.9:0 -g -w 1\n";
    want += "-A -f 8 -6 -s lblcr -p 360\n";
    want += "-a -f 8 -6 -r [2001:db8::9]:0 -g -w 1\n";
    assert_eq!(sh("ipvsadm -Sn"), want);
    let thresholds = sh("ipvsadm -Ln --thresholds");
    assert!(
        thresholds.contains("  -> 10.244.0.3:80                100        10 "),
        "{thresholds}"
    );
}

/// Edits and deletions, with the kernel's errors sorted and idempotent variants.
#[test]
fn edit_delete_and_errors_keep_errno() {
    let _serial = serial();
    let _ns = Netns::fresh();
    with_handle(|h| async move {
        let key = ServiceKey::tcp(ip("10.2.0.1"), 80);
        let svc = Service::new(key, Scheduler::RoundRobin);
        h.services().add(&svc).await.unwrap();
        let again = h.services().add(&svc).await.unwrap_err();
        assert!(again.is_exists(), "{again:?}");
        assert_eq!(again.errno(), Some(17));
        // add_or_update edits the existing service instead
        let edited = Service::new(key, Scheduler::WeightedLeastConnection)
            .persistent(Duration::from_secs(30));
        h.services().add_or_update(&edited).await.unwrap();
        assert_eq!(sh("ipvsadm -Sn"), "-A -t 10.2.0.1:80 -s wlc -p 30\n");
        let got = h.services().get(&key).await.unwrap().unwrap();
        assert_eq!(got.scheduler, Scheduler::WeightedLeastConnection);
        assert_eq!(got.timeout, Duration::from_secs(30));

        let missing = ServiceKey::tcp(ip("10.2.0.99"), 80);
        assert_eq!(h.services().get(&missing).await.unwrap(), None);
        let e = h.services().del(&missing).await.unwrap_err();
        assert!(e.is_not_found(), "{e:?}");
        assert_eq!(e.errno(), Some(3));
        h.services().del_if_exists(&missing).await.unwrap();
        let e = h
            .services()
            .set(&Service::new(missing, Scheduler::RoundRobin))
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{e:?}");
        let e = h
            .services()
            .add(&Service::new(missing, Scheduler::Other("nosuch".into())))
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "unknown scheduler: {e:?}");

        let d = h.destinations(&key);
        let pod = Destination::new(ip("10.244.1.2"), 8080, ForwardMethod::Masquerade);
        d.add(&pod).await.unwrap();
        assert!(d.add(&pod).await.unwrap_err().is_exists());
        d.add_or_update(&pod.clone().with_weight(7)).await.unwrap();
        d.set(&pod.clone().with_weight(9).with_thresholds(50, 5))
            .await
            .unwrap();
        let got = d.list().await.unwrap();
        assert_eq!(
            (
                got[0].weight,
                got[0].upper_threshold,
                got[0].lower_threshold
            ),
            (9, 50, 5)
        );
        let e = d.del(&ip("10.244.1.99"), 1).await.unwrap_err();
        assert!(e.is_not_found(), "{e:?}");
        assert_eq!(e.errno(), Some(2));
        d.del_if_exists(&ip("10.244.1.99"), 1).await.unwrap();
        d.del(&pod.address, pod.port).await.unwrap();
        assert!(d.list().await.unwrap().is_empty());
        let nowhere = h.destinations(&missing);
        assert!(nowhere.add(&pod).await.unwrap_err().is_not_found());

        h.services().del(&key).await.unwrap();
        assert_eq!(sh("ipvsadm -Sn"), "");
    });
}

/// Timeouts, info, zero, flush and sync daemons, each checked against ipvsadm.
#[test]
fn timeouts_info_zero_flush_and_daemons() {
    let _serial = serial();
    let _ns = Netns::fresh();
    sh("ipvsadm --set 100 20 30");
    sh("ipvsadm -A -t 10.3.0.1:80 -s rr && ipvsadm -A -u 10.3.0.1:53 -s rr");
    with_handle(|h| async move {
        let t = h.timeouts().get().await.unwrap();
        assert_eq!(
            t,
            Timeouts {
                tcp: Duration::from_secs(100),
                tcp_fin: Duration::from_secs(20),
                udp: Duration::from_secs(30)
            }
        );
        h.timeouts()
            .set(&Timeouts {
                tcp: Duration::from_secs(900),
                tcp_fin: Duration::ZERO,
                udp: Duration::from_secs(60),
            })
            .await
            .unwrap();
        assert_eq!(
            sh("ipvsadm -L --timeout"),
            "Timeout (tcp tcpfin udp): 900 20 60\n"
        );

        let info = h.info().await.unwrap();
        let header = sh("ipvsadm -Ln | head -1");
        assert_eq!(
            header,
            format!(
                "IP Virtual Server version {} (size={})\n",
                info.version, info.connection_table_size
            )
        );

        h.zero().await.unwrap();
        h.services()
            .zero(&ServiceKey::tcp(ip("10.3.0.1"), 80))
            .await
            .unwrap();
        let e = h
            .services()
            .zero(&ServiceKey::tcp(ip("10.3.0.9"), 80))
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{e:?}");
        h.flush().await.unwrap();
        assert_eq!(sh("ipvsadm -Sn"), "");
        assert!(h.services().list().await.unwrap().is_empty());

        let master = SyncDaemon::new(DaemonState::Master, "lo", 5);
        h.daemons().start(&master).await.unwrap();
        let mut backup = SyncDaemon::new(DaemonState::Backup, "lo", 6);
        backup.max_length = Some(1400);
        backup.group = Some(ip("224.0.0.82"));
        backup.port = Some(8849);
        backup.ttl = Some(2);
        h.daemons().start(&backup).await.unwrap();
        assert_eq!(
            sh("ipvsadm -L --daemon"),
            "master sync daemon (mcast=lo, syncid=5, maxlen=1472, group=224.0.0.81, port=8848, ttl=1)\n\
             backup sync daemon (mcast=lo, syncid=6, maxlen=1400, group=224.0.0.82, port=8849, ttl=2)\n"
        );
        let mut daemons = h.daemons().list().await.unwrap();
        daemons.sort_by_key(|d| d.state.to_raw());
        assert_eq!(daemons.len(), 2);
        assert_eq!(daemons[1], backup);
        assert_eq!(daemons[0].group, Some(ip("224.0.0.81")));
        assert_eq!(daemons[0].port, Some(8848));
        assert!(h.daemons().start(&master).await.unwrap_err().is_exists());
        h.daemons().stop(DaemonState::Master).await.unwrap();
        h.daemons().stop(DaemonState::Backup).await.unwrap();
        assert_eq!(sh("ipvsadm -L --daemon"), "");
        assert!(h.daemons().list().await.unwrap().is_empty());
    });
}

/// A batch applies many requests in few sendmsgs and reports each one's result.
#[test]
fn batch_reports_each_result() {
    let _serial = serial();
    let _ns = Netns::fresh();
    sh("ipvsadm -A -t 10.4.0.1:80 -s wlc");
    with_handle(|h| async move {
        let mut b = h.batch();
        let mut keys = Vec::new();
        for i in 0..600u32 {
            let key = ServiceKey::tcp(ip(&format!("10.5.{}.{}", i / 250, i % 250)), 80);
            b.add_service(&Service::new(key, Scheduler::RoundRobin));
            b.add_destination(
                &key,
                &Destination::new(ip("10.244.9.1"), 8080, ForwardMethod::Masquerade),
            );
            keys.push(key);
        }
        let dup = b.add_service(&Service::new(keys[0], Scheduler::RoundRobin));
        let upd = b.add_or_update_service(&Service::new(
            ServiceKey::tcp(ip("10.4.0.1"), 80),
            Scheduler::RoundRobin,
        ));
        let gone = b.del_service(&ServiceKey::tcp(ip("10.9.9.9"), 80));
        let gone_ok = b.del_service_if_exists(&ServiceKey::tcp(ip("10.9.9.9"), 80));
        let orphan = b.add_destination(
            &ServiceKey::tcp(ip("10.9.9.9"), 80),
            &Destination::new(ip("10.244.9.1"), 8080, ForwardMethod::Masquerade),
        );
        let n = b.len();
        let outcome = b.send().await.unwrap();
        assert!(
            outcome.sendmsgs() >= 2 && outcome.sendmsgs() < n / 16,
            "{}",
            outcome.sendmsgs()
        );
        let failures: Vec<usize> = outcome.failures().map(|(i, _)| i).collect();
        assert_eq!(failures, vec![dup, gone, orphan]);
        let r = outcome.results();
        assert!(r[dup].as_ref().unwrap_err().is_exists());
        assert!(r[gone].as_ref().unwrap_err().is_not_found());
        assert!(r[upd].is_ok() && r[gone_ok].is_ok());
        let services: Vec<Service> = h.services().dump().try_collect().await.unwrap();
        assert_eq!(services.len(), 601);
        assert!(
            services
                .iter()
                .all(|s| s.scheduler == Scheduler::RoundRobin)
        );
        assert!(services.iter().all(|s| matches!(
            s.key,
            ServiceKey::Inet {
                protocol: Protocol::Tcp,
                ..
            }
        )));
    });
    assert_eq!(sh("ipvsadm -Sn | grep -c '^-a'").trim(), "600");
    assert!(try_sh("ipvsadm -Sn | grep -q '10.4.0.1:80 -s rr'").0);
}

/// IPVS resumes a long service dump by a position it counts over the services of every
/// network namespace: while another namespace adds and deletes services, a plain `list`
/// repeats or skips some of ours (shown first, so that the test is known to disturb the
/// dumps), and `list_consistent` lists exactly ours every time.
#[test]
fn a_listing_disturbed_by_another_namespace_is_consistent() {
    use std::collections::BTreeSet;

    let _serial = serial();
    let _ns = Netns::fresh();
    let ours = std::env::temp_dir().join("ipvs-lab-disturbed.rules");
    let rules: String = (0..300u32)
        .map(|i| format!("-A -t 10.97.{}.{}:80 -s rr\n", i / 250, i % 250 + 1))
        .collect();
    std::fs::write(&ours, rules).unwrap();
    sh(&format!("ipvsadm -R < {}", ours.display()));
    let want: Vec<ServiceKey> = (0..300u32)
        .map(|i| ServiceKey::tcp(ip(&format!("10.97.{}.{}", i / 250, i % 250 + 1)), 80))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let churn = lab::churn::IpvsChurn::start(300, || false);
    let sorted = |services: Vec<Service>| -> Vec<ServiceKey> {
        let mut keys: Vec<ServiceKey> = services.into_iter().map(|s| s.key).collect();
        keys.sort();
        keys
    };
    /// Dumps made, and what they gave.
    #[derive(Default)]
    struct Counts {
        plain: u32,
        wrong: u32,
        settled: u32,
        unsettled: u32,
    }
    let mut counts = Counts::default();
    let c = &mut counts;
    let want = &want;
    with_handle(|h| async move {
        while c.wrong == 0 && c.plain < 2000 {
            c.plain += 1;
            if sorted(h.services().list().await.unwrap()) != *want {
                c.wrong += 1;
            }
        }
        for _ in 0..200 {
            match h.services().list_consistent(8).await {
                Ok(listed) => {
                    let got: Vec<ServiceKey> = listed.into_iter().map(|s| s.key).collect();
                    assert!(
                        got == *want,
                        "a consistent listing is wrong: {} services",
                        got.len()
                    );
                    c.settled += 1;
                }
                Err(ipvs_netlink::Error::Unsettled { seen, .. }) => {
                    let seen: BTreeSet<ServiceKey> = seen.into_iter().map(|s| s.key).collect();
                    assert!(
                        want.iter().all(|k| seen.contains(k)),
                        "an unsettled listing's union misses services of ours"
                    );
                    c.unsettled += 1;
                }
                Err(e) => panic!("list_consistent: {e}"),
            }
        }
    });
    let Counts {
        plain,
        wrong,
        settled,
        unsettled,
    } = counts;
    let rounds = churn.stop();
    println!(
        "disturbed dumps: {wrong} wrong of {plain} plain dumps; {settled} consistent listings right, \
         {unsettled} unsettled; {rounds} rounds of 300 adds and a clear in the other namespace"
    );
    assert!(
        wrong > 0,
        "the other namespace never disturbed a plain dump ({plain} dumps): the test shows nothing"
    );
    assert!(settled >= 150, "{settled} of 200 listings settled");
}

/// A service listing is read as its consumer takes it, on a socket the connection opened in
/// its own namespace: a listing stopped after its first service leaves the next listing on
/// the same handle whole, and a handle opened in one namespace lists that namespace's
/// services whatever thread's namespace polls it.
#[test]
fn a_listing_is_read_as_consumed_on_the_connections_namespace() {
    let _serial = serial();
    let _ns = Netns::fresh();
    let rules: String = (0..2000u32)
        .map(|i| format!("-A -t 10.98.{}.{}:80 -s rr\n", i / 250, i % 250 + 1))
        .collect();
    let file = std::env::temp_dir().join("ipvs-lab-paced.rules");
    std::fs::write(&file, rules).unwrap();
    sh(&format!("ipvsadm -R < {}", file.display()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let handle = rt.block_on(async { ipvs_netlink::connect().await.expect("connect") });
    rt.block_on(async {
        for _ in 0..3 {
            // Many datagrams' worth: the kernel is mid-dump when the consumer stops.
            let mut stream = std::pin::pin!(handle.services().dump());
            assert!(stream.try_next().await.unwrap().is_some());
        }
        let listed = handle
            .services()
            .list()
            .await
            .expect("a listing after stopped ones");
        assert_eq!(
            listed.len(),
            2000,
            "a whole listing after three stopped early"
        );
    });
    // Polled from a thread in a namespace of its own: the handle's namespace is listed.
    let other = std::thread::spawn(move || {
        let _elsewhere = Netns::fresh();
        rt.block_on(async { handle.services().list().await.expect("list").len() })
    });
    assert_eq!(
        other.join().unwrap(),
        2000,
        "listed in the handle's namespace"
    );
}

/// The `ipvs` example, copied into the guest next to the test binaries.
fn ipvs_example() -> String {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/ipvs");
    assert!(path.exists(), "{} missing", path.display());
    path.display().to_string()
}

/// A table that exercises ipvsadm's sort: addresses whose wrapping differences disagree
/// with numeric order, both families, fwmarks, every protocol, many destinations.
const RICH: &str = "\
-A -t 10.96.0.10:80 -s rr
-a -t 10.96.0.10:80 -r 192.168.5.1:8080 -m -w 1
-a -t 10.96.0.10:80 -r 10.244.0.2:8080 -m -w 2
-a -t 10.96.0.10:80 -r 172.16.0.9:8080 -m -w 3
-a -t 10.96.0.10:80 -r 10.244.0.1:8081 -m -w 0
-a -t 10.96.0.10:80 -r 10.244.0.1:8080 -m -w 1
-a -t 10.96.0.10:80 -r 198.18.0.7:80 -g -w 4
-a -t 10.96.0.10:80 -r 100.64.0.3:80 -i -w 1 --tun-type gue --tun-port 6080 --tun-remcsum
-a -t 10.96.0.10:80 -r 203.0.113.9:80 -i -w 1 --tun-type gre --tun-csum
-A -t 192.168.1.1:443 -s wrr -p 300 -M 255.255.255.0
-A -t 198.18.0.1:80 -s rr
-A -t 172.16.3.3:80 -s lc
-A -t 100.64.1.1:80 -s sed
-A -t 1.2.3.4:80 -s nq
-A -t 250.1.1.1:80 -s fo
-A -t 127.0.0.5:80 -s ovf
-a -t 127.0.0.5:80 -r 127.0.0.1:80 -g -w 1
-A -u 10.96.0.10:53 -s sh -b sh-fallback,sh-port -p 30
-A -u 10.96.0.11:53 -s mh -o -b mh-fallback,mh-port
-A -u 192.168.0.53:53 -s dh -p 10 --pe sip
-A --sctp-service 10.96.0.12:9000 -s wlc
-a --sctp-service 10.96.0.12:9000 -r 10.244.3.3:9000 -m -w 1
-A -t [2001:db8::1]:80 -s wlc -p 60 -M 64
-a -t [2001:db8::1]:80 -r [2001:db8::2]:8080 -m -w 5
-a -t [2001:db8::1]:80 -r [fd00::1]:8080 -m -w 5
-a -t [2001:db8::1]:80 -r [2001:db8::1:0]:8080 -m -w 5
-A -t [fd00::10]:443 -s lblcr
-A -f 7 -s lblc
-a -f 7 -r 10.244.0.9:0 -g -w 1
-A -f 3000000000 -s rr
-A -f 8 -6 -s lblcr -p 360
-a -f 8 -6 -r [2001:db8::9]:0 -g -w 1
";

/// `ipvs save` and `ipvs list [--stats]` print what ipvsadm prints, on a state made by
/// ipvsadm and on one made by `ipvs restore`.
#[test]
fn example_save_list_and_restore_match_ipvsadm() {
    let _serial = serial();
    let ipvs = ipvs_example();
    std::fs::write("/tmp/rich.rules", RICH).unwrap();
    {
        let _ns = Netns::fresh();
        sh("ipvsadm -R < /tmp/rich.rules");
        let want = sh("ipvsadm -Sn");
        assert_eq!(want.lines().count(), RICH.lines().count());
        assert_eq!(sh(&format!("{ipvs} save")), want);
        assert_eq!(sh(&format!("{ipvs} list")), sh("ipvsadm -Ln"));
        assert_eq!(
            sh(&format!("{ipvs} list --stats")),
            sh("ipvsadm -Ln --stats")
        );
        std::fs::write("/tmp/rich.saved", want).unwrap();
    }
    {
        let _ns = Netns::fresh();
        sh(&format!("{ipvs} restore < /tmp/rich.rules"));
        // Same rules as ipvsadm -R made. Not necessarily in the same order: ipvsadm's
        // comparator is not transitive, so its order follows the kernel's dump order, which
        // follows the shared hash table's chains (other namespaces' entries included).
        let lines = |s: &str| {
            let mut v: Vec<String> = s.lines().map(str::to_string).collect();
            v.sort();
            v
        };
        assert_eq!(
            lines(&sh("ipvsadm -Sn")),
            lines(&std::fs::read_to_string("/tmp/rich.saved").unwrap())
        );
        assert_eq!(sh(&format!("{ipvs} save")), sh("ipvsadm -Sn"));
        // failures are reported per rule and make the exit status non-zero
        let (ok, out) = try_sh(&format!(
            "printf -- '-A -t 10.96.0.10:80 -s rr\\n-D -t 10.9.9.9:80\\n' | {ipvs} restore"
        ));
        assert!(!ok, "{out}");
        assert!(out.contains("rule 1") && out.contains("rule 2"), "{out}");
    }
}

/// Netlink traffic of the test's namespace, recorded by an `nlmon` link and read from an
/// `AF_PACKET` socket: the source of the golden vectors in `tests/golden.rs`.
struct Capture {
    fd: std::os::fd::OwnedFd,
}

impl Capture {
    fn start() -> Capture {
        use std::os::fd::FromRawFd;
        sh("ip link add nlmon0 type nlmon && ip link set nlmon0 up");
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: socket(2) takes no pointers; the result is checked before use.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) };
        assert!(
            fd >= 0,
            "AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // SAFETY: the name is a NUL-terminated literal.
        let ifindex = unsafe { libc::if_nametoindex(c"nlmon0".as_ptr()) };
        assert!(ifindex > 0);
        // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = proto;
        addr.sll_ifindex = ifindex as i32;
        use std::os::fd::AsRawFd;
        // SAFETY: addr is a valid sockaddr_ll and its size is passed with it.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(rc, 0, "bind: {}", std::io::Error::last_os_error());
        Capture { fd }
    }

    /// Every netlink message recorded so far, in order.
    fn messages(&self) -> Vec<Vec<u8>> {
        use std::os::fd::AsRawFd;
        let mut out = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        loop {
            // SAFETY: buf is valid for its length; MSG_DONTWAIT makes this non-blocking.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n <= 0 {
                break;
            }
            // one packet may carry several netlink messages (a dump part)
            let mut p = &buf[..n as usize];
            while p.len() >= 16 {
                let len = u32::from_ne_bytes(p[..4].try_into().unwrap()) as usize;
                if len < 16 || len > p.len() {
                    break;
                }
                out.push(p[..len].to_vec());
                p = &p[(len + 3) & !3..];
            }
        }
        out
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Records ipvsadm's requests and the kernel's answers, prints them as hex (pasted, with
/// annotations, into `tests/golden.rs`), and checks the library encodes the same requests
/// byte for byte and decodes the answers.
#[test]
fn ipvsadm_requests_match_the_library_byte_for_byte() {
    let _serial = serial();
    use ipvs_netlink::{Command, IpvsMessage, MessageAttr};
    let _ns = Netns::fresh();
    let capture = Capture::start();
    let commands = [
        "ipvsadm -A -t 10.96.0.10:80 -s rr",
        "ipvsadm -a -t 10.96.0.10:80 -r 10.244.0.2:8080 -m -w 1",
        "ipvsadm -A -t [2001:db8::1]:80 -s wlc -p 60 -M 64",
        "ipvsadm -A -f 7 -s sh -b sh-fallback,sh-port -o",
        "ipvsadm -a -t 10.96.0.10:80 -r 10.244.0.4:80 -i -w 3 --tun-type gue --tun-port 6080 --tun-csum -x 10 -y 2",
        "ipvsadm -e -t 10.96.0.10:80 -r 10.244.0.2:8080 -m -w 2",
        "ipvsadm -E -t 10.96.0.10:80 -s wrr",
        "ipvsadm -d -t 10.96.0.10:80 -r 10.244.0.4:80",
        "ipvsadm --set 100 20 30",
        "ipvsadm -Sn",
        "ipvsadm -L --timeout",
        "ipvsadm -D -f 7",
    ];
    for c in commands {
        sh(c);
    }
    let messages = capture.messages();
    let family = with_family();
    let mut requests = Vec::new();
    for m in &messages {
        let kind = u16::from_ne_bytes([m[4], m[5]]);
        let flags = u16::from_ne_bytes([m[6], m[7]]);
        if kind != family {
            continue;
        }
        let msg =
            IpvsMessage::parse_genl(&m[16..]).expect("decode what ipvsadm and the kernel sent");
        println!("{:?} flags={flags:#06x} {}", msg.command, hex(m));
        // the library re-encodes every message it decoded to the same bytes (nests aside:
        // the kernel flags its nests, requests and our encoder do not)
        let mut again = msg.to_genl_bytes();
        let mut original = m[16..].to_vec();
        clear_nested_flags(&mut original);
        clear_nested_flags(&mut again);
        assert_eq!(hex(&again), hex(&original), "{msg:?}");
        if flags & 0x1 != 0 && !matches!(msg.command, Command::GetInfo) {
            requests.push((msg, m[16..].to_vec()));
        }
    }
    // ipvsadm's requests, made by the library's own builders
    let key = ServiceKey::tcp(ip("10.96.0.10"), 80);
    let mut b = Vec::new();
    let svc = Service::new(key, Scheduler::RoundRobin);
    let v6 = fixtures::v6_service();
    let fw = fixtures::fwmark_service();
    let pod = Destination::new(ip("10.244.0.2"), 8080, ForwardMethod::Masquerade);
    let tun = Destination::new(ip("10.244.0.4"), 80, ForwardMethod::Tunnel)
        .with_weight(3)
        .with_thresholds(10, 2)
        .with_tunnel(Tunnel {
            kind: TunnelType::Gue,
            port: 6080,
            flags: TunnelFlags::CSUM,
        });
    b.push(IpvsMessage::new(
        Command::NewService,
        vec![MessageAttr::Service(svc.config_attrs())],
    ));
    b.push(IpvsMessage::new(
        Command::NewDest,
        vec![
            MessageAttr::Service(key.to_attrs()),
            MessageAttr::Destination(pod.config_attrs()),
        ],
    ));
    b.push(IpvsMessage::new(
        Command::NewService,
        vec![MessageAttr::Service(v6.config_attrs())],
    ));
    b.push(IpvsMessage::new(
        Command::NewService,
        vec![MessageAttr::Service(fw.config_attrs())],
    ));
    b.push(IpvsMessage::new(
        Command::NewDest,
        vec![
            MessageAttr::Service(key.to_attrs()),
            MessageAttr::Destination(tun.config_attrs()),
        ],
    ));
    for (i, (got, bytes)) in requests.iter().take(b.len()).enumerate() {
        if matches!(got.command, Command::NewService) {
            // services: the whole request, byte for byte
            assert_eq!(hex(&b[i].to_genl_bytes()), hex(bytes), "request {i}");
        } else {
            // destinations: ipvsadm sends a whole service entry (empty scheduler, flags,
            // timeout, netmask) where the kernel reads only the key; the library sends the
            // key, and the destination nest byte for byte
            let (MessageAttr::Service(theirs), MessageAttr::Service(ours)) =
                (&got.attrs[0], &b[i].attrs[0])
            else {
                panic!("{got:?}")
            };
            assert_eq!(&theirs[..ours.len()], &ours[..], "request {i}");
            assert_eq!(got.attrs[1], b[i].attrs[1], "request {i}");
            let nest = |m: &IpvsMessage| {
                let one = IpvsMessage::new(m.command, vec![m.attrs[1].clone()]);
                hex(&one.to_genl_bytes())
            };
            assert_eq!(nest(got), nest(&b[i]), "request {i}");
        }
    }
    assert!(requests.len() >= b.len(), "{requests:#?}");
}

fn with_family() -> u16 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        ipvs_netlink::connect()
            .await
            .unwrap()
            .family_id()
            .await
            .unwrap()
    })
}

/// Clears `NLA_F_NESTED` in every attribute header of a genl payload, recursively where
/// the flag was set.
fn clear_nested_flags(payload: &mut [u8]) {
    fn walk(b: &mut [u8]) {
        let mut at = 0;
        while at + 4 <= b.len() {
            let len = u16::from_ne_bytes([b[at], b[at + 1]]) as usize;
            if len < 4 || at + len > b.len() {
                return;
            }
            let kind = u16::from_ne_bytes([b[at + 2], b[at + 3]]);
            if kind & 0x8000 != 0 {
                b[at + 2..at + 4].copy_from_slice(&(kind & 0x7fff).to_ne_bytes());
                walk(&mut b[at + 4..at + len]);
            }
            at += (len + 3) & !3;
        }
    }
    walk(&mut payload[4..]);
}
