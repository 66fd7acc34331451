//! The agent's iptables rules: kube-proxy IPVS mode's fixed set of KUBE-* chains and rules,
//! whose number does not grow with the number of Services (the sets carry the Services).
//!
//! Rules are written in `iptables-restore` form, table by table, in kube-proxy's order
//! (`writeIptablesRules`); a rule that matches a set is only written while that set has
//! entries, as kube-proxy does.
//!
//! # Layout
//! - `out_filter`: [`OutFilter`], the one rule a Service adds (the fixed chains and jumps are
//!   the kernel view's: [`crate::model::kernel::chains`]).
//! - `ruleset`: [`rules`], the rules of one family: the fixed table and one function per
//!   feature.
//! - `restore`: the `iptables-restore` input that writes the rules ([`restore_input`]) or
//!   takes them away ([`removal_input`]).
//! - `tests`: the rule table, the restore text and the canonical form, against known lines.

mod out_filter;
mod restore;
mod ruleset;

pub use out_filter::OutFilter;
pub use restore::{removal_input, restore_input};
pub use ruleset::rules;

#[cfg(test)]
mod tests;
