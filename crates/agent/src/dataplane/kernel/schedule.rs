//! The order in which the kernel edge carries out a plan, as pure data: which operations
//! travel together, which go to a worker thread, and where the plan waits for the workers.
//!
//! - Operations of one route that follow each other travel together: IPVS changes in
//!   netlink batches, set changes in libipset's restore mode, VIPs concurrently.
//! - A run of VIP bindings (slow: the kernel walks the link's address list for every
//!   insert) and a run of set-entry additions each go to a worker thread with its own socket
//!   while the plan goes on, which lets a cold sync use a second core.
//! - Claims before servers: the ownership set's entries never go to a worker, so they are in
//!   the kernel before the virtual servers they claim are made (a crash in between must not
//!   leave an unowned server).
//! - Additions before removals: every removal, and every operation that is not an
//!   addition, waits for the workers first, so everything new is in before anything old
//!   goes.

use crate::model::kernel::sets::{OWNED, SetName};
use crate::model::plan::Op;
use crate::model::plan::op_kind::{Object, OpKind};
use crate::model::snapshot::cluster::Family;

/// What carries an operation to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// IPVS netlink batches.
    Ipvs,
    /// libipset's restore mode.
    Sets,
    /// rtnetlink requests for the VIPs, many in flight.
    Addresses,
    /// One request or program at a time (the link, sysctls, rules, destroying a set).
    One,
}

impl Route {
    /// The route of operations of `kind`.
    pub fn of(kind: OpKind) -> Route {
        match kind.object() {
            Object::VirtualServer | Object::RealServer => Route::Ipvs,
            Object::SetEntry => Route::Sets,
            Object::Set if kind == OpKind::CreateSet => Route::Sets,
            Object::Address => Route::Addresses,
            Object::Set | Object::Link | Object::Sysctl | Object::Rules => Route::One,
        }
    }
}

/// One stage of carrying out a plan; operations are named by their index in the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage {
    /// Wait for every worker started so far.
    Join,
    /// Apply these operations now, on the agent's own sockets, in this order.
    Run(Route, Vec<usize>),
    /// Start these operations on a worker thread and go on with the plan.
    Start(Route, Vec<usize>),
}

/// The stages that carry out `ops` in the order the rules above ask for.
pub fn schedule(ops: &[Op]) -> Vec<Stage> {
    let mut stages = Vec::new();
    // Whether a worker was started since the last join.
    let mut started = false;
    let mut i = 0;
    while i < ops.len() {
        let route = Route::of(ops[i].kind());
        let start = i;
        while i < ops.len() && Route::of(ops[i].kind()) == route {
            i += 1;
        }
        let group: Vec<usize> = (start..i).collect();
        if started && !group.iter().all(|&n| may_overlap(ops[n].kind())) {
            stages.push(Stage::Join);
            started = false;
        }
        let before = stages.len();
        match route {
            Route::Sets => sets(ops, group, &mut stages),
            Route::Addresses => {
                let adds = group.iter().all(|&n| ops[n].kind() == OpKind::AddAddress);
                if adds && group.len() > 1 {
                    stages.push(Stage::Start(route, group));
                } else {
                    stages.push(Stage::Run(route, group));
                }
            }
            Route::Ipvs | Route::One => stages.push(Stage::Run(route, group)),
        }
        started |= stages[before..]
            .iter()
            .any(|s| matches!(s, Stage::Start(..)));
    }
    stages
}

/// The stages of a run of set operations: the sets made first (the rules name them), then,
/// when the run only adds entries, the claims here and the other entries on a worker.
fn sets(ops: &[Op], group: Vec<usize>, stages: &mut Vec<Stage>) {
    let made = group
        .iter()
        .position(|&n| ops[n].kind() != OpKind::CreateSet)
        .unwrap_or(group.len());
    let (create, rest) = group.split_at(made);
    if !create.is_empty() {
        stages.push(Stage::Run(Route::Sets, create.to_vec()));
    }
    if rest.is_empty() {
        return;
    }
    if !rest.iter().all(|&n| ops[n].kind() == OpKind::AddEntries) {
        stages.push(Stage::Run(Route::Sets, rest.to_vec()));
        return;
    }
    let (claims, entries): (Vec<usize>, Vec<usize>) =
        rest.iter().partition(|&&n| is_claim(&ops[n]));
    if !claims.is_empty() {
        stages.push(Stage::Run(Route::Sets, claims));
    }
    match entries.len() {
        0 => {}
        // One operation gains nothing from a thread.
        1 => stages.push(Stage::Run(Route::Sets, entries)),
        _ => stages.push(Stage::Start(Route::Sets, entries)),
    }
}

/// True for operations that only add or update and may run while additions are in flight
/// on workers. Making the link is left out: the VIPs' workers need it.
fn may_overlap(kind: OpKind) -> bool {
    !kind.removes() && kind != OpKind::CreateLink
}

/// Whether `op` adds claims to the ownership set (`KUBE-IPVS-OWNED`, `KUBE-6-IPVS-OWNED`).
fn is_claim(op: &Op) -> bool {
    matches!(op, Op::AddEntries { set, .. }
        if [Family::V4, Family::V6].iter().any(|f| *set == SetName::new(&OWNED, *f)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::kernel::sets::named;
    use crate::model::kernel::{SetEntry, VsKey};

    fn key(port: u16) -> VsKey {
        VsKey {
            address: "10.96.0.10".parse().unwrap(),
            protocol: crate::model::snapshot::cluster::Protocol::Tcp,
            port,
        }
    }

    fn entries(set: &str) -> Op {
        Op::AddEntries {
            set: named(set),
            entries: vec![SetEntry::Port(30080)].into(),
        }
    }

    fn create(set: &str) -> Op {
        Op::CreateSet(named(set))
    }

    fn vip(n: u8) -> Op {
        Op::AddAddress(format!("10.96.0.{n}").parse().unwrap())
    }

    fn add_service(port: u16) -> Op {
        Op::AddService {
            key: key(port),
            service: Box::default(),
        }
    }

    /// A cold sync's plan: the link, sets, entries (claims among them), VIPs, servers.
    fn cold() -> Vec<Op> {
        vec![
            Op::CreateLink,                // 0
            create("KUBE-IPVS-OWNED"),     // 1
            create("KUBE-CLUSTER-IP"),     // 2
            entries("KUBE-CLUSTER-IP"),    // 3
            entries("KUBE-IPVS-OWNED"),    // 4
            entries("KUBE-NODE-PORT-TCP"), // 5
            vip(1),                        // 6
            vip(2),                        // 7
            add_service(80),               // 8
            add_service(81),               // 9
        ]
    }

    #[test]
    fn claims_go_first_and_entries_and_vips_to_workers_on_a_cold_sync() {
        assert_eq!(
            schedule(&cold()),
            [
                Stage::Run(Route::One, vec![0]),
                Stage::Run(Route::Sets, vec![1, 2]),
                Stage::Run(Route::Sets, vec![4]),
                Stage::Start(Route::Sets, vec![3, 5]),
                Stage::Start(Route::Addresses, vec![6, 7]),
                Stage::Run(Route::Ipvs, vec![8, 9]),
            ]
        );
    }

    #[test]
    fn removals_wait_for_the_workers_and_additions_do_not() {
        let mut ops = cold();
        ops.push(Op::DelService(key(82))); // 10
        ops.push(Op::DelAddress("10.96.0.3".parse().unwrap())); // 11
        let stages = schedule(&ops);
        let join = stages
            .iter()
            .position(|s| *s == Stage::Join)
            .expect("a join");
        assert_eq!(stages[join + 1], Stage::Run(Route::Ipvs, vec![8, 9, 10]));
        assert!(stages[..join].iter().any(|s| matches!(s, Stage::Start(..))));
        // Joined once: nothing was started after.
        assert_eq!(stages.iter().filter(|s| **s == Stage::Join).count(), 1);
        assert_eq!(stages.last(), Some(&Stage::Run(Route::Addresses, vec![11])));
    }

    #[test]
    fn every_operation_is_scheduled_once_in_plan_order_within_its_route() {
        let mut ops = cold();
        ops.push(Op::DelService(key(82)));
        ops.push(Op::DestroySet(named("KUBE-CLUSTER-IP")));
        ops.push(Op::DeleteLink);
        let mut seen: Vec<usize> = schedule(&ops)
            .into_iter()
            .flat_map(|s| match s {
                Stage::Join => Vec::new(),
                Stage::Run(route, v) | Stage::Start(route, v) => {
                    for n in &v {
                        assert_eq!(Route::of(ops[*n].kind()), route, "{}", ops[*n]);
                    }
                    v
                }
            })
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..ops.len()).collect::<Vec<_>>());
    }

    #[test]
    fn a_lone_addition_and_a_mixed_run_stay_on_the_agents_sockets() {
        let ops = vec![
            entries("KUBE-CLUSTER-IP"),
            vip(1),
            entries("KUBE-LOOP-BACK"),
            Op::DelEntries {
                set: named("KUBE-LOOP-BACK"),
                entries: Vec::new().into(),
            },
        ];
        assert_eq!(
            schedule(&ops),
            [
                Stage::Run(Route::Sets, vec![0]),
                Stage::Run(Route::Addresses, vec![1]),
                Stage::Run(Route::Sets, vec![2, 3]),
            ]
        );
    }

    #[test]
    fn making_the_link_waits_for_the_workers() {
        let ops = vec![vip(1), vip(2), Op::CreateLink];
        assert_eq!(
            schedule(&ops),
            [
                Stage::Start(Route::Addresses, vec![0, 1]),
                Stage::Join,
                Stage::Run(Route::One, vec![2]),
            ]
        );
    }

    #[test]
    fn destroying_a_set_goes_alone_and_making_one_goes_with_the_sets() {
        assert_eq!(Route::of(OpKind::DestroySet), Route::One);
        assert_eq!(Route::of(OpKind::CreateSet), Route::Sets);
        assert_eq!(Route::of(OpKind::DelEntries), Route::Sets);
        assert_eq!(Route::of(OpKind::UpdateDestination), Route::Ipvs);
        assert_eq!(Route::of(OpKind::WriteRules), Route::One);
    }
}
