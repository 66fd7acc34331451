//! Tests against the host kernel, each in a fresh network namespace, cross-checked with the
//! real `ipset` tool in both directions. Needs root.
mod common;

use std::net::IpAddr;

use common::{in_netns, ipset_tool, normalized, tool_save};
use libipset::{
    Entry, Error, Family, Header, Member, Net, Op, Protocol, Session, Set, SetName, SetType,
    parse_restore, parse_save, render_save,
};

fn name(s: &str) -> SetName {
    SetName::new(s).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(s: &str) -> Net {
    s.parse().unwrap()
}

/// Sets of every supported type, IPv4 and IPv6, with options where the type allows them.
fn sample_sets() -> Vec<Set> {
    use Protocol::*;
    let mut sets = Vec::new();
    for family in [Family::Inet, Family::Inet6] {
        let v6 = family == Family::Inet6;
        let a = |v4: &str, v6s: &str| ip(if v6 { v6s } else { v4 });
        let n = |v4: &str, v6s: &str| net(if v6 { v6s } else { v4 });
        let sfx = if v6 { "6" } else { "4" };
        let hash = |t: SetType, base: &str| {
            Header::hash(name(&format!("{base}{sfx}")), t, family)
                .with_hashsize(1024)
                .with_maxelem(65536)
        };
        let entries: Vec<(Header, Vec<Member>)> = vec![
            (
                hash(SetType::HashIp, "ip"),
                vec![
                    Member::new(Entry::Ip(a("10.0.0.1", "fd00::1"))),
                    Member::new(Entry::Ip(a("192.168.1.200", "2001:db8::ff:1"))),
                ],
            ),
            (
                hash(SetType::HashNet, "net").with_counters().with_comment(),
                vec![
                    Member::new(Entry::Net(n("10.0.0.0/8", "fd00::/64"))),
                    Member::new(Entry::Net(n("172.16.5.4", "fd00:1::1"))).comment("a b c"),
                ],
            ),
            (
                hash(SetType::HashIpPort, "ipport"),
                vec![
                    Member::new(Entry::IpPort {
                        ip: a("10.96.0.1", "fd00::1"),
                        protocol: Tcp,
                        port: 443,
                    }),
                    Member::new(Entry::IpPort {
                        ip: a("10.96.0.10", "fd00::a"),
                        protocol: Udp,
                        port: 53,
                    }),
                    Member::new(Entry::IpPort {
                        ip: a("10.96.0.10", "fd00::a"),
                        protocol: Sctp,
                        port: 9,
                    }),
                ],
            ),
            (
                hash(SetType::HashIpPortIp, "ipportip"),
                vec![Member::new(Entry::IpPortIp {
                    ip: a("10.244.1.5", "fd01::5"),
                    protocol: Tcp,
                    port: 8080,
                    ip2: a("10.244.1.5", "fd01::5"),
                })],
            ),
            (
                hash(SetType::HashIpPortNet, "ipportnet").with_comment(),
                vec![
                    Member::new(Entry::IpPortNet {
                        ip: a("203.0.113.7", "2001:db8::7"),
                        protocol: Tcp,
                        port: 80,
                        net: n("198.51.100.0/24", "2001:db8:1::/48"),
                    })
                    .comment("lb-source"),
                    Member::new(Entry::IpPortNet {
                        ip: a("203.0.113.7", "2001:db8::7"),
                        protocol: Udp,
                        port: 80,
                        net: n("198.51.100.9", "2001:db8:1::9"),
                    }),
                ],
            ),
            (
                hash(SetType::HashNetPort, "netport"),
                vec![Member::new(Entry::NetPort {
                    net: n("10.0.0.0/16", "fd02::/56"),
                    protocol: Udp,
                    port: 5353,
                })],
            ),
        ];
        for (header, members) in entries {
            sets.push(Set { header, members });
        }
    }
    sets.push(Set {
        header: Header::bitmap_port(name("port"), 0, 65535),
        members: vec![
            Member::new(Entry::Port(0)),
            Member::new(Entry::Port(30080)),
            Member::new(Entry::Port(65535)),
        ],
    });
    sets.push(Set {
        header: Header::bitmap_port(name("portc"), 30000, 32767)
            .with_counters()
            .with_comment(),
        members: vec![Member::new(Entry::Port(30001)).comment("np")],
    });
    sets
}

/// What `ipset save` prints for a set made by the library: counters default to 0.
fn as_saved(set: &Set) -> Set {
    let mut set = set.clone();
    for m in &mut set.members {
        if set.header.counters {
            m.options.packets.get_or_insert(0);
            m.options.bytes.get_or_insert(0);
        }
    }
    set
}

#[test]
fn library_creates_every_type_and_ipset_save_prints_it() {
    in_netns(|| {
        let sets = sample_sets();
        let mut session = Session::new().unwrap();
        let ops: Vec<Op> = sets.iter().flat_map(Op::restore).collect();
        session.apply(&ops).unwrap();

        let expected: Vec<Set> = sets.iter().map(as_saved).collect();
        let printed = tool_save();
        assert_eq!(normalized(&printed), normalized(&render_save(&expected)));
        // And every type name is present: the test covers all of them.
        for t in SetType::ALL {
            assert!(printed.contains(&format!(" {t} ")), "{t} missing");
        }
    });
}

#[test]
fn ipset_restore_creates_every_type_and_the_library_reads_it_identically() {
    in_netns(|| {
        let script = render_save(&sample_sets());
        ipset_tool(&["restore"], &script);
        let printed = tool_save();

        let mut session = Session::new().unwrap();
        let read = session.save().unwrap();
        // Same text as the tool, byte for byte (same kernel dump order)...
        assert_eq!(render_save(&read), printed);
        // ...the same typed values as parsing the tool's text...
        assert_eq!(read, parse_save(&printed).unwrap());
        // ...and the entries that were restored.
        let want: Vec<Set> = sample_sets().iter().map(|s| as_saved(s).sorted()).collect();
        let got: Vec<Set> = read
            .into_iter()
            .map(|mut s| {
                s.header.bucketsize = None;
                s.header.initval = None;
                s.sorted()
            })
            .collect();
        assert_eq!(got, want);
    });
}

#[test]
fn save_set_header_info_and_names() {
    in_netns(|| {
        let script = render_save(&sample_sets());
        ipset_tool(&["restore"], &script);
        let mut session = Session::new().unwrap();
        let names: Vec<String> = session
            .names()
            .unwrap()
            .iter()
            .map(|n| n.to_string())
            .collect();
        let want: Vec<String> = sample_sets().iter().map(|s| s.name().to_string()).collect();
        assert_eq!(names, want);

        let one = session.save_set(&name("ipport4")).unwrap();
        assert_eq!(one.to_string(), ipset_tool(&["save", "ipport4"], ""));

        let info = session.info(&name("ipport6")).unwrap().unwrap();
        assert_eq!(info.entries, 3);
        assert_eq!(info.references, 0);
        assert_eq!(info.header.family, Family::Inet6);
        assert_eq!(info.header.set_type, SetType::HashIpPort);
        assert_eq!(session.header(&name("absent")).unwrap(), None);
        let bitmap = session.header(&name("portc")).unwrap().unwrap();
        assert_eq!(
            bitmap,
            Header::bitmap_port(name("portc"), 30000, 32767)
                .with_counters()
                .with_comment()
        );
    });
}

#[test]
fn single_commands_match_the_tool() {
    in_netns(|| {
        let mut s = Session::new().unwrap();
        let a = name("a");
        let b = name("b");
        s.create(&Header::hash(a.clone(), SetType::HashIp, Family::Inet))
            .unwrap();
        s.add(&a, Entry::Ip(ip("1.2.3.4"))).unwrap();
        s.add(&a, Member::new(Entry::Ip(ip("1.2.3.5")))).unwrap();
        s.del(&a, Entry::Ip(ip("1.2.3.5"))).unwrap();
        s.rename(&a, &b).unwrap();
        assert_eq!(
            normalized(&tool_save()),
            [
                "add b 1.2.3.4",
                "create b hash:ip family inet hashsize 1024 maxelem 65536"
            ]
        );
        s.create(&Header::hash(a.clone(), SetType::HashIp, Family::Inet))
            .unwrap();
        s.swap(&a, &b).unwrap();
        assert_eq!(s.save_set(&a).unwrap().members.len(), 1);
        assert_eq!(s.save_set(&b).unwrap().members.len(), 0);
        s.flush(&a).unwrap();
        assert!(s.save_set(&a).unwrap().members.is_empty());
        assert!(s.exists(&a).unwrap());
        s.destroy(&a).unwrap();
        s.destroy(&b).unwrap();
        assert!(!s.exists(&a).unwrap());
        assert_eq!(tool_save(), "");
        assert_eq!(s.names().unwrap(), Vec::<SetName>::new());
        assert_eq!(s.save().unwrap(), Vec::<Set>::new());
        // Still in step with the kernel after all that.
        s.create(&Header::hash(a.clone(), SetType::HashIp, Family::Inet))
            .unwrap();
        assert_eq!(s.names().unwrap(), vec![a.clone()]);
    });
}

#[test]
fn test_reports_presence_from_the_result_code() {
    in_netns(|| {
        let mut s = Session::new().unwrap();
        ipset_tool(
            &["restore"],
            "create t hash:ip,port,net family inet6\nadd t fd00::1,tcp:80,fd01::/64\n",
        );
        let t = name("t");
        let present = Entry::IpPortNet {
            ip: ip("fd00::1"),
            protocol: Protocol::Tcp,
            port: 80,
            net: net("fd01::/64"),
        };
        let inside = Entry::IpPortNet {
            ip: ip("fd00::1"),
            protocol: Protocol::Tcp,
            port: 80,
            net: net("fd01::5"),
        };
        let absent = Entry::IpPortNet {
            ip: ip("fd00::1"),
            protocol: Protocol::Udp,
            port: 80,
            net: net("fd01::/64"),
        };
        assert!(s.test(&t, present).unwrap());
        // A hash:*net test matches an address inside a stored network, like the tool.
        assert!(s.test(&t, inside).unwrap());
        assert!(!s.test(&t, absent).unwrap());
        assert!(matches!(
            s.test(&name("nope"), present),
            Err(Error::SetMissing { .. })
        ));
        // The session stays usable after a negative answer.
        assert!(s.test(&t, present).unwrap());
    });
}

#[test]
fn errors_are_typed() {
    in_netns(|| {
        let mut s = Session::new().unwrap();
        let a = name("a");
        let b = name("b");
        let h = Header::hash(a.clone(), SetType::HashIp, Family::Inet);
        s.create(&h).unwrap();
        s.create(&h.renamed(b.clone())).unwrap();
        let e = Entry::Ip(ip("10.1.1.1"));

        let err = s.create(&h).unwrap_err();
        assert!(
            matches!(&err, Error::SetExists { set, message } if set == "a" && !message.is_empty()),
            "{err:?}"
        );
        let err = s.add(&name("missing"), e).unwrap_err();
        assert!(
            matches!(&err, Error::SetMissing { set, .. } if set == "missing"),
            "{err:?}"
        );
        s.add(&a, e).unwrap();
        let err = s.add(&a, e).unwrap_err();
        assert!(
            matches!(&err, Error::EntryExists { entry, .. } if entry == "10.1.1.1"),
            "{err:?}"
        );
        s.del(&a, e).unwrap();
        let err = s.del(&a, e).unwrap_err();
        assert!(matches!(&err, Error::EntryMissing { .. }), "{err:?}");
        let err = s.rename(&a, &b).unwrap_err();
        assert!(
            matches!(&err, Error::SetExists { set, .. } if set == "b"),
            "{err:?}"
        );
        let err = s.swap(&a, &name("missing")).unwrap_err();
        assert!(
            matches!(&err, Error::SetMissing { set, .. } if set == "missing"),
            "{err:?}"
        );
        let err = s.destroy(&name("missing")).unwrap_err();
        assert!(matches!(&err, Error::SetMissing { .. }), "{err:?}");

        // Swapping different types is refused by the kernel, with libipset's message.
        s.create(&Header::hash(name("n"), SetType::HashNet, Family::Inet))
            .unwrap();
        let err = s.swap(&a, &name("n")).unwrap_err();
        assert!(
            matches!(&err, Error::Refused { message } if !message.is_empty()),
            "{err:?}"
        );

        // Checks of ours, before C: wrong family, wrong type, mixed families.
        let err = s.add(&a, Entry::Ip(ip("fd00::1"))).unwrap_err();
        assert!(matches!(&err, Error::Invalid { .. }), "{err:?}");
        let err = s.add(&a, Entry::Port(80)).unwrap_err();
        assert!(matches!(&err, Error::Invalid { .. }), "{err:?}");
        let mixed = Entry::IpPortIp {
            ip: ip("1.1.1.1"),
            protocol: Protocol::Tcp,
            port: 1,
            ip2: ip("::1"),
        };
        assert!(matches!(s.add(&a, mixed), Err(Error::Invalid { .. })));
        let err = s.add(&a, Member::new(e).comment("say \"hi\"")).unwrap_err();
        assert!(matches!(&err, Error::Invalid { .. }), "{err:?}");

        // -exist semantics.
        s.set_exist(true);
        s.create(&h).unwrap();
        s.add(&a, e).unwrap();
        s.add(&a, e).unwrap();
        s.del(&a, e).unwrap();
        s.del(&a, e).unwrap();
        // The session is still consistent after all those failures.
        assert_eq!(normalized(&tool_save()).len(), 3);
    });
}

#[test]
fn a_failing_batch_names_the_operation_and_keeps_the_ones_before() {
    in_netns(|| {
        let mut s = Session::new().unwrap();
        let a = name("a");
        let e = |i: u8| Entry::Ip(IpAddr::from([10, 0, 0, i]));
        let mut ops = vec![Op::Create(Header::hash(
            a.clone(),
            SetType::HashIp,
            Family::Inet,
        ))];
        ops.extend((1..=50).map(|i| Op::add(&a, e(i))));
        ops.push(Op::add(&a, e(7))); // index 51: duplicate
        ops.extend((100..=110).map(|i| Op::add(&a, e(i))));
        let err = s.apply(&ops).unwrap_err();
        match &err {
            Error::Batch { index: 51, source } => {
                assert!(matches!(**source, Error::EntryExists { .. }), "{source:?}")
            }
            other => panic!("{other:?}"),
        }
        let got = s.save_set(&a).unwrap();
        assert_eq!(got.members.len(), 50);
        assert!(!s.test(&a, e(100)).unwrap());

        // A batch whose op needs a missing set fails at that op; earlier ones were sent.
        let ops = vec![
            Op::add(&a, e(200)),
            Op::add(&name("nope"), e(1)),
            Op::add(&a, e(201)),
        ];
        let err = s.apply(&ops).unwrap_err();
        assert!(
            matches!(&err, Error::Batch { index: 1, source } if matches!(**source, Error::SetMissing { .. })),
            "{err:?}"
        );
        assert!(s.test(&a, e(200)).unwrap());
        assert!(!s.test(&a, e(201)).unwrap());

        // Our own checks fail a batch the same way, after sending the ops before.
        let ops = vec![
            Op::add(&a, e(210)),
            Op::add(&a, Entry::Ip(ip("fd00::1"))),
            Op::add(&a, e(211)),
        ];
        let err = s.apply(&ops).unwrap_err();
        assert!(
            matches!(&err, Error::Batch { index: 1, source } if matches!(**source, Error::Invalid { .. })),
            "{err:?}"
        );
        assert!(s.test(&a, e(210)).unwrap());
        assert!(!s.test(&a, e(211)).unwrap());

        // Deletes batch too; mixed add/del/flush in one batch.
        let ops = vec![
            Op::del(&a, e(1)),
            Op::del(&a, e(2)),
            Op::Flush(a.clone()),
            Op::add(&a, e(3)),
        ];
        s.apply(&ops).unwrap();
        assert_eq!(s.save_set(&a).unwrap().members, vec![Member::new(e(3))]);
    });
}

#[test]
fn large_batches_and_replace() {
    in_netns(|| {
        let mut s = Session::new().unwrap();
        let cip = name("KUBE-CLUSTER-IP");
        let header =
            Header::hash(cip.clone(), SetType::HashIpPort, Family::Inet).with_maxelem(262144);
        let entry = |i: u32| Entry::IpPort {
            ip: IpAddr::from((0x0a60_0000u32 + i).to_be_bytes()),
            protocol: if i.is_multiple_of(2) {
                Protocol::Tcp
            } else {
                Protocol::Udp
            },
            port: (i % 60000) as u16 + 1,
        };
        let mut ops = vec![Op::Create(header.clone())];
        ops.extend((0..20_000).map(|i| Op::add(&cip, entry(i))));
        s.apply(&ops).unwrap();
        assert_eq!(s.info(&cip).unwrap().unwrap().entries, 20_000);
        assert_eq!(
            ipset_tool(&["save", "KUBE-CLUSTER-IP"], "").lines().count(),
            20_001
        );

        // Replace with a different content: swap in, old gone, no temporary left.
        let mut next = Set::new(header.clone());
        next.members = (50_000..50_100).map(|i| Member::new(entry(i))).collect();
        s.replace(&next).unwrap();
        let got = s.save_set(&cip).unwrap().sorted();
        assert_eq!(got.members, next.clone().sorted().members);
        assert_eq!(s.names().unwrap(), vec![cip.clone()]);

        // Replace of a set that does not exist yet: renamed into place.
        let fresh = Set {
            header: Header::bitmap_port(name("KUBE-NODE-PORT-TCP"), 0, 65535),
            members: vec![Member::new(Entry::Port(30080))],
        };
        s.replace(&fresh).unwrap();
        assert_eq!(s.save_set(&name("KUBE-NODE-PORT-TCP")).unwrap(), fresh);

        // A leftover temporary set from a crashed replace is cleaned up.
        ipset_tool(&["create", "KUBE-CLUSTER-IP-tmp", "hash:ip"], "");
        s.replace(&next).unwrap();
        assert_eq!(s.names().unwrap().len(), 2);

        // A failing fill leaves the target untouched and removes the temporary set.
        let mut bad = next.clone();
        bad.members.push(Member::new(Entry::IpPort {
            ip: ip("fd00::1"),
            protocol: Protocol::Tcp,
            port: 1,
        }));
        assert!(s.replace(&bad).is_err());
        assert_eq!(s.names().unwrap().len(), 2);
        assert_eq!(s.save_set(&cip).unwrap().members.len(), 100);
    });
}

#[test]
fn timeouts_and_counters() {
    in_netns(|| {
        let mut s = Session::new().unwrap();
        let t = name("t");
        s.create(
            &Header::hash(t.clone(), SetType::HashIp, Family::Inet)
                .with_timeout(600)
                .with_counters(),
        )
        .unwrap();
        let mut m = Member::new(Entry::Ip(ip("1.1.1.1"))).timeout(300);
        m.options.packets = Some(7);
        m.options.bytes = Some(700);
        s.add(&t, m).unwrap();
        s.add(&t, Entry::Ip(ip("1.1.1.2"))).unwrap();
        let got = s.save_set(&t).unwrap().sorted();
        assert_eq!(got.header.timeout, Some(600));
        let first = &got.members[0].options;
        assert!((295..=300).contains(&first.timeout.unwrap()), "{first:?}");
        assert_eq!((first.packets, first.bytes), (Some(7), Some(700)));
        assert!((595..=600).contains(&got.members[1].options.timeout.unwrap()));
    });
}

#[test]
fn restore_text_from_the_tool_format_applies() {
    in_netns(|| {
        let script = "create x hash:net,port family inet\nadd x 10.0.0.0/8,udp:53\nadd x 10.1.0.0/16,80\ncreate y bitmap:port range 1-100\nadd y 5\n";
        let mut s = Session::new().unwrap();
        let ops =
            parse_restore(script, |n| s.header(n).ok().flatten().map(|h| h.set_type)).unwrap();
        s.apply(&ops).unwrap();
        let mine = tool_save();
        // The same script through the real tool in another namespace gives the same state.
        let theirs = in_netns(move || {
            ipset_tool(&["restore"], script);
            tool_save()
        });
        assert_eq!(normalized(&mine), normalized(&theirs));
    });
}

#[test]
fn sessions_in_parallel_namespaces_do_not_interfere() {
    // Same set name, different types in different namespaces, at the same time: libipset's
    // process-wide name cache must not leak one namespace's type into the other.
    let handles: Vec<_> = (0..4u8)
        .map(|i| {
            std::thread::spawn(move || {
                in_netns(move || {
                    let mut s = Session::new().unwrap();
                    let n = name("same");
                    let (t, e) = if i.is_multiple_of(2) {
                        (SetType::HashIp, Entry::Ip(IpAddr::from([10, 0, 0, i])))
                    } else {
                        (SetType::HashNet, Entry::Net(net("10.0.0.0/8")))
                    };
                    s.create(&Header::hash(n.clone(), t, Family::Inet)).unwrap();
                    for _ in 0..50 {
                        s.apply(&[Op::add(&n, e), Op::del(&n, e)]).unwrap();
                    }
                    s.add(&n, e).unwrap();
                    assert_eq!(s.save_set(&n).unwrap().members, vec![Member::new(e)]);
                })
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn a_session_can_move_between_threads() {
    in_netns(|| {
        let mut s = Session::new().unwrap();
        s.create(&Header::hash(name("m"), SetType::HashIp, Family::Inet))
            .unwrap();
        // Moved to a thread in the root namespace: it still talks to the namespace it was opened in.
        let s = std::thread::spawn(move || {
            s.add(&name("m"), Entry::Ip(ip("9.9.9.9"))).unwrap();
            s
        })
        .join()
        .unwrap();
        drop(s);
        assert!(tool_save().contains("add m 9.9.9.9"));
    });
}
