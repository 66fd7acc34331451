//! The agent's iptables rules: kube-proxy IPVS mode's fixed set of KUBE-* chains and rules,
//! whose number does not grow with the number of Services (the sets carry the Services).
//!
//! Rules are written in `iptables-restore` form, table by table, in kube-proxy's order
//! (`writeIptablesRules`); a rule that matches a set is only written while that set has
//! entries, as kube-proxy does.
//!
//! # Layout
//! - `chains`: the agent's chains, the jumps into them from the built-in chains, and
//!   [`OutFilter`], the one rule a Service adds.
//! - `ruleset`: [`rules`], the rules of one family: the fixed table and one function per
//!   feature.
//! - `restore`: the `iptables-restore` input that writes the rules ([`restore_input`]) or
//!   takes them away ([`removal_input`]).
//! - `canonical`: [`canonical()`], the one spelling rules are compared in, whoever wrote them.
//! - `tests`: the rule table, the restore text and the canonical form, against known lines.

mod canonical;
mod chains;
mod restore;
mod ruleset;

pub use canonical::canonical;
pub use chains::{FILTER_CHAINS, JUMPS, NAT_CHAINS, OutFilter};
pub use restore::{removal_input, restore_input};
pub use ruleset::rules;

#[cfg(test)]
mod tests;
