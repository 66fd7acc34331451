//! How VIPs are bound on `kube-ipvs0` (`--vip-binding`), and the order of the kernel steps
//! that move a node from one binding to the other without a moment in which a VIP is not
//! local (an established connection through it would lose packets).
//!
//! Pure: the kernel edge ([`super::kernel`]) reads the [`Bindings`], runs the [`Step`]s and
//! reports. Three kernel facts shape the order (each checked in the lab):
//! - An address makes the kernel add its own `local` route (`proto kernel`, metric 0) for the
//!   same key; the agent's routes use their own protocol and metric
//!   ([`super::link::VIP_ROUTE_PROTOCOL`], [`super::link::VIP_ROUTE_METRIC`]), so both can
//!   exist at once and deleting one never deletes the other.
//! - Deleting the last IPv4 address of a link flushes every IPv4 route through it, the
//!   agent's too. Removing addresses in route mode therefore holds every IPv4 VIP on `lo` by
//!   a bridge route first, re-adds the VIP routes after, then drops the bridges.
//! - The kernel refuses an IPv6 route through a link that is down, and `kube-ipvs0` stays
//!   down: IPv6 VIPs are addresses in both modes.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use crate::model::snapshot::config::VipBinding;

/// The VIP bindings found on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bindings {
    /// Addresses on `kube-ipvs0` (both families).
    pub addresses: BTreeSet<IpAddr>,
    /// The agent's `local` routes through `kube-ipvs0`.
    pub routes: BTreeSet<Ipv4Addr>,
    /// The agent's bridge routes on `lo`, left by a switch that was interrupted.
    pub bridges: BTreeSet<Ipv4Addr>,
}

impl Bindings {
    /// Every VIP bound on `kube-ipvs0`, as an address or as a route: what the model calls
    /// the link's addresses, whatever the mode (ownership and takeover count both).
    pub fn vips(&self) -> BTreeSet<IpAddr> {
        let mut out = self.addresses.clone();
        out.extend(self.routes.iter().map(|ip| IpAddr::V4(*ip)));
        out
    }

    /// Records that `step` succeeded.
    pub fn record(&mut self, step: &Step) {
        match *step {
            Step::BindAddress(ip) => {
                self.addresses.insert(ip);
            }
            Step::UnbindAddress(ip) => {
                self.addresses.remove(&ip);
                // The kernel's flush when no IPv4 address is left (see the module's doc).
                if ip.is_ipv4() && !self.addresses.iter().any(IpAddr::is_ipv4) {
                    self.routes.clear();
                }
            }
            Step::AddRoute(ip) => {
                self.routes.insert(ip);
            }
            Step::DelRoute(ip) => {
                self.routes.remove(&ip);
            }
            Step::AddBridge(ip) => {
                self.bridges.insert(ip);
            }
            Step::DelBridge(ip) => {
                self.bridges.remove(&ip);
            }
        }
    }
}

/// One kernel request binding or unbinding a VIP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// Add the VIP as an address on `kube-ipvs0`.
    BindAddress(IpAddr),
    /// Delete the VIP's address from `kube-ipvs0`.
    UnbindAddress(IpAddr),
    /// Add (or replace) the VIP's `local` route through `kube-ipvs0`.
    AddRoute(Ipv4Addr),
    /// Delete the VIP's `local` route through `kube-ipvs0`.
    DelRoute(Ipv4Addr),
    /// Add a `local` route for the VIP on `lo`, held while addresses go.
    AddBridge(Ipv4Addr),
    /// Delete the VIP's bridge route on `lo`.
    DelBridge(Ipv4Addr),
}

impl Step {
    /// The VIP the step is about.
    pub fn ip(&self) -> IpAddr {
        match *self {
            Step::BindAddress(ip) | Step::UnbindAddress(ip) => ip,
            Step::AddRoute(ip) | Step::DelRoute(ip) | Step::AddBridge(ip) | Step::DelBridge(ip) => {
                IpAddr::V4(ip)
            }
        }
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::BindAddress(ip) => write!(f, "add address {ip}"),
            Step::UnbindAddress(ip) => write!(f, "delete address {ip}"),
            Step::AddRoute(ip) => write!(f, "add local route {ip}"),
            Step::DelRoute(ip) => write!(f, "delete local route {ip}"),
            Step::AddBridge(ip) => write!(f, "add bridge route {ip} on lo"),
            Step::DelBridge(ip) => write!(f, "delete bridge route {ip} on lo"),
        }
    }
}

/// The step that binds a new VIP in `mode`.
pub fn bind(mode: VipBinding, ip: IpAddr) -> Step {
    match (mode, ip) {
        (VipBinding::Route, IpAddr::V4(v4)) => Step::AddRoute(v4),
        _ => Step::BindAddress(ip),
    }
}

/// The steps that unbind a VIP in every form `found` has it in (or, when `found` does not
/// know it, one bound since, in the form `mode` binds). `None` when the VIP is an IPv4
/// address in route mode: deleting it may be deleting the link's last IPv4 address, which
/// must go through [`converge`].
pub fn unbind(mode: VipBinding, found: &Bindings, ip: IpAddr) -> Option<Vec<Step>> {
    let address = found.addresses.contains(&ip);
    let route = match ip {
        IpAddr::V4(v4) => found.routes.contains(&v4).then_some(v4),
        IpAddr::V6(_) => None,
    };
    if mode == VipBinding::Route && ip.is_ipv4() && address {
        return None;
    }
    let mut steps = Vec::new();
    if let Some(v4) = route {
        steps.push(Step::DelRoute(v4));
    }
    if address {
        steps.push(Step::UnbindAddress(ip));
    }
    if steps.is_empty() {
        steps.push(match bind(mode, ip) {
            Step::AddRoute(v4) => Step::DelRoute(v4),
            _ => Step::UnbindAddress(ip),
        });
    }
    Some(steps)
}

/// The steps that bring every VIP of `found` into `mode`'s form and unbind those in `gone`,
/// in phases: the steps of one phase may run together, a phase starts when the one before
/// it is done. No VIP outside `gone` stops being local at any point in between.
pub fn converge(mode: VipBinding, found: &Bindings, gone: &BTreeSet<IpAddr>) -> Vec<Vec<Step>> {
    let kept = |ip: &Ipv4Addr| !gone.contains(&IpAddr::V4(*ip));
    let v4_addresses: BTreeSet<Ipv4Addr> = found
        .addresses
        .iter()
        .filter_map(|ip| match ip {
            IpAddr::V4(v4) => Some(*v4),
            IpAddr::V6(_) => None,
        })
        .collect();
    let mut phases: Vec<Vec<Step>> = match mode {
        VipBinding::Route if !v4_addresses.is_empty() => {
            // Every IPv4 address goes, so the last one's flush takes the routes with it: the
            // VIPs stay local on `lo` meanwhile.
            let held: BTreeSet<Ipv4Addr> = v4_addresses
                .iter()
                .chain(&found.routes)
                .chain(&found.bridges)
                .copied()
                .filter(kept)
                .collect();
            vec![
                held.difference(&found.bridges)
                    .map(|ip| Step::AddBridge(*ip))
                    .collect(),
                v4_addresses
                    .iter()
                    .map(|ip| Step::UnbindAddress(IpAddr::V4(*ip)))
                    .collect(),
                held.iter().map(|ip| Step::AddRoute(*ip)).collect(),
                held.union(&found.bridges)
                    .map(|ip| Step::DelBridge(*ip))
                    .collect(),
            ]
        }
        VipBinding::Route => vec![
            found
                .bridges
                .iter()
                .filter(|ip| kept(ip) && !found.routes.contains(ip))
                .map(|ip| Step::AddRoute(*ip))
                .chain(
                    found
                        .routes
                        .iter()
                        .filter(|ip| !kept(ip))
                        .map(|ip| Step::DelRoute(*ip)),
                )
                .collect(),
            found
                .bridges
                .iter()
                .map(|ip| Step::DelBridge(*ip))
                .collect(),
        ],
        VipBinding::Address => {
            let held: BTreeSet<Ipv4Addr> = found
                .routes
                .iter()
                .chain(&found.bridges)
                .copied()
                .filter(|ip| kept(ip) && !v4_addresses.contains(ip))
                .collect();
            vec![
                held.iter()
                    .map(|ip| Step::BindAddress(IpAddr::V4(*ip)))
                    .collect(),
                // Addresses in `gone` only now: one of them may be the last IPv4 address
                // until the bindings above are in.
                found
                    .routes
                    .iter()
                    .map(|ip| Step::DelRoute(*ip))
                    .chain(found.bridges.iter().map(|ip| Step::DelBridge(*ip)))
                    .chain(
                        found
                            .addresses
                            .iter()
                            .filter(|ip| gone.contains(ip))
                            .map(|ip| Step::UnbindAddress(*ip)),
                    )
                    .collect(),
            ]
        }
    };
    if mode == VipBinding::Route {
        // IPv6 VIPs are addresses in route mode too; those in `gone` simply go.
        if let Some(first) = phases.first_mut() {
            first.extend(
                found
                    .addresses
                    .iter()
                    .filter(|ip| ip.is_ipv6() && gone.contains(ip))
                    .map(|ip| Step::UnbindAddress(*ip)),
            );
        }
    }
    phases.retain(|p| !p.is_empty());
    phases
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(last: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 96, 0, last)
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(v4(last))
    }

    /// Replays `phases` over `found`, checking after every single step (in any order within
    /// a phase) that each VIP outside `gone` is still local: bound as an address, a route, or
    /// held by a bridge.
    fn replay(found: &Bindings, phases: &[Vec<Step>], gone: &BTreeSet<IpAddr>) -> Bindings {
        let must: BTreeSet<IpAddr> = found
            .vips()
            .into_iter()
            .chain(found.bridges.iter().map(|b| IpAddr::V4(*b)))
            .filter(|ip| !gone.contains(ip))
            .collect();
        let mut state = found.clone();
        for phase in phases {
            // Forwards and backwards: the steps of a phase run concurrently.
            for order in [false, true] {
                let mut s = state.clone();
                let steps: Vec<&Step> = if order {
                    phase.iter().rev().collect()
                } else {
                    phase.iter().collect()
                };
                for step in steps {
                    s.record(step);
                    for vip in &must {
                        let local = s.addresses.contains(vip)
                            || matches!(vip, IpAddr::V4(v) if s.routes.contains(v) || s.bridges.contains(v));
                        assert!(local, "{vip} not local after {step} in {phases:?}");
                    }
                }
                if !order {
                    state = s;
                }
            }
        }
        state
    }

    #[test]
    fn address_to_route_holds_every_vip_on_lo_while_the_last_address_goes() {
        let found = Bindings {
            addresses: [ip(1), ip(2)].into(),
            ..Bindings::default()
        };
        let phases = converge(VipBinding::Route, &found, &BTreeSet::new());
        assert_eq!(
            phases,
            vec![
                vec![Step::AddBridge(v4(1)), Step::AddBridge(v4(2))],
                vec![Step::UnbindAddress(ip(1)), Step::UnbindAddress(ip(2))],
                vec![Step::AddRoute(v4(1)), Step::AddRoute(v4(2))],
                vec![Step::DelBridge(v4(1)), Step::DelBridge(v4(2))],
            ]
        );
        let end = replay(&found, &phases, &BTreeSet::new());
        assert_eq!(
            end,
            Bindings {
                routes: [v4(1), v4(2)].into(),
                ..Bindings::default()
            }
        );
    }

    #[test]
    fn route_to_address_binds_the_addresses_before_deleting_the_routes() {
        let found = Bindings {
            routes: [v4(1), v4(2)].into(),
            ..Bindings::default()
        };
        let phases = converge(VipBinding::Address, &found, &BTreeSet::new());
        assert_eq!(
            phases,
            vec![
                vec![Step::BindAddress(ip(1)), Step::BindAddress(ip(2))],
                vec![Step::DelRoute(v4(1)), Step::DelRoute(v4(2))],
            ]
        );
        let end = replay(&found, &phases, &BTreeSet::new());
        assert_eq!(end.addresses, [ip(1), ip(2)].into());
        assert!(end.routes.is_empty() && end.bridges.is_empty());
    }

    #[test]
    fn a_switch_cut_short_is_finished_from_wherever_it_stopped() {
        let gone = BTreeSet::new();
        // Stopped after the flush: two VIPs held only by bridges, one already routed, one
        // address left.
        let found = Bindings {
            addresses: [ip(4)].into(),
            routes: [v4(3)].into(),
            bridges: [v4(1), v4(2), v4(3)].into(),
        };
        for mode in [VipBinding::Route, VipBinding::Address] {
            let phases = converge(mode, &found, &gone);
            let end = replay(&found, &phases, &gone);
            assert!(end.bridges.is_empty(), "{mode}: {end:?}");
            assert_eq!(end.vips(), [ip(1), ip(2), ip(3), ip(4)].into(), "{mode}");
            match mode {
                VipBinding::Route => assert!(end.addresses.is_empty()),
                VipBinding::Address => assert!(end.routes.is_empty()),
            }
            // Converged: nothing more to do.
            assert_eq!(converge(mode, &end, &gone), Vec::<Vec<Step>>::new());
        }
        // Bridges alone (no address left) in route mode: routes first, then the bridges go.
        let bridged = Bindings {
            bridges: [v4(1)].into(),
            ..Bindings::default()
        };
        assert_eq!(
            converge(VipBinding::Route, &bridged, &gone),
            vec![vec![Step::AddRoute(v4(1))], vec![Step::DelBridge(v4(1))]]
        );
    }

    #[test]
    fn vips_in_gone_are_unbound_while_the_others_stay_local() {
        let v6: IpAddr = "fd00::1".parse().unwrap();
        let found = Bindings {
            addresses: [ip(1), ip(2), v6].into(),
            routes: [v4(3), v4(4)].into(),
            bridges: BTreeSet::new(),
        };
        let gone: BTreeSet<IpAddr> = [ip(2), ip(4), v6].into();
        for mode in [VipBinding::Route, VipBinding::Address] {
            let phases = converge(mode, &found, &gone);
            let end = replay(&found, &phases, &gone);
            assert_eq!(end.vips(), [ip(1), ip(3)].into(), "{mode}: {phases:?}");
            assert!(end.bridges.is_empty());
        }
    }

    #[test]
    fn new_vips_take_the_modes_form_and_go_in_the_form_they_have() {
        let v6: IpAddr = "fd00::1".parse().unwrap();
        assert_eq!(bind(VipBinding::Route, ip(1)), Step::AddRoute(v4(1)));
        assert_eq!(bind(VipBinding::Route, v6), Step::BindAddress(v6));
        assert_eq!(bind(VipBinding::Address, ip(1)), Step::BindAddress(ip(1)));
        let found = Bindings {
            addresses: [ip(1), v6].into(),
            routes: [v4(2)].into(),
            bridges: BTreeSet::new(),
        };
        // Route mode: an IPv4 address may be the last one, so it goes through converge.
        assert_eq!(unbind(VipBinding::Route, &found, ip(1)), None);
        assert_eq!(
            unbind(VipBinding::Route, &found, ip(2)),
            Some(vec![Step::DelRoute(v4(2))])
        );
        assert_eq!(
            unbind(VipBinding::Route, &found, v6),
            Some(vec![Step::UnbindAddress(v6)])
        );
        // Bound after the bindings were read: in the mode's form.
        assert_eq!(
            unbind(VipBinding::Route, &found, ip(9)),
            Some(vec![Step::DelRoute(v4(9))])
        );
        assert_eq!(
            unbind(VipBinding::Address, &found, ip(9)),
            Some(vec![Step::UnbindAddress(ip(9))])
        );
        // Address mode: whatever form the VIP has.
        assert_eq!(
            unbind(VipBinding::Address, &found, ip(2)),
            Some(vec![Step::DelRoute(v4(2))])
        );
        assert_eq!(
            unbind(VipBinding::Address, &found, ip(1)),
            Some(vec![Step::UnbindAddress(ip(1))])
        );
    }
}
