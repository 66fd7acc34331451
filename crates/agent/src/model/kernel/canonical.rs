//! One spelling for rules however they were written: `iptables-save` prints options in its
//! own order and target shorthands in full, so rules are compared in this form.

use std::collections::BTreeMap;

use super::{Rules, Table};
use crate::model::snapshot::cluster::Family;

/// Rules of each `(table, chain)` in a canonical form, so that rules as written and rules as
/// `iptables-save` prints them compare equal: address, interface and protocol options first,
/// `MARK --or-mark/--xor-mark` as `--set-xmark`, REJECT with its default `--reject-with`.
pub fn canonical(rules: &Rules, family: Family) -> BTreeMap<(Table, String), Vec<String>> {
    let mut out: BTreeMap<(Table, String), Vec<String>> = BTreeMap::new();
    for (table, chain) in &rules.chains {
        out.entry((*table, chain.clone())).or_default();
    }
    for (table, rule) in &rules.rules {
        let Some((chain, line)) = canonical_rule(rule, family) else {
            continue;
        };
        out.entry((*table, chain)).or_default().push(line);
    }
    out
}

fn canonical_rule(rule: &str, family: Family) -> Option<(String, String)> {
    let tokens = split_words(rule);
    let mut it = tokens.iter();
    if it.next().map(String::as_str) != Some("-A") {
        return None;
    }
    let chain = it.next()?.clone();
    let rest: Vec<String> = it.cloned().collect();
    // Pull `[!] -s X`, `[!] -d X`, `[!] -i X`, `[!] -o X`, `[!] -p X` to the front, in that order.
    let mut front: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut others: Vec<String> = Vec::new();
    let order = ["-s", "-d", "-i", "-o", "-p"];
    let mut i = 0;
    while i < rest.len() {
        let negated = rest[i] == "!" && i + 1 < rest.len() && order.contains(&rest[i + 1].as_str());
        let at = if negated { i + 1 } else { i };
        if let Some(pos) = order.iter().position(|o| *o == rest[at])
            && at + 1 < rest.len()
        {
            let mut words = Vec::new();
            if negated {
                words.push("!".to_string());
            }
            words.push(rest[at].clone());
            words.push(rest[at + 1].clone());
            front.insert(pos, words);
            i = at + 2;
            continue;
        }
        others.push(rest[i].clone());
        i += 1;
    }
    let mut words: Vec<String> = front.into_values().flatten().collect();
    // Targets: MARK shorthands and REJECT's default.
    let mut j = 0;
    while j < others.len() {
        match others[j].as_str() {
            "--or-mark" if j + 1 < others.len() => {
                let m = mark_hex(&others[j + 1]);
                words.push("--set-xmark".into());
                words.push(format!("{m}/{m}"));
                j += 2;
            }
            "--xor-mark" if j + 1 < others.len() => {
                let m = mark_hex(&others[j + 1]);
                words.push("--set-xmark".into());
                words.push(format!("{m}/0x0"));
                j += 2;
            }
            "--mark" if j + 1 < others.len() => {
                words.push("--mark".into());
                words.push(
                    others[j + 1]
                        .split('/')
                        .map(mark_hex)
                        .collect::<Vec<_>>()
                        .join("/"),
                );
                j += 2;
            }
            _ => {
                words.push(others[j].clone());
                j += 1;
            }
        }
    }
    if words.last().is_some_and(|w| w == "REJECT") {
        words.push("--reject-with".into());
        words.push(
            match family {
                Family::V4 => "icmp-port-unreachable",
                Family::V6 => "icmp6-port-unreachable",
            }
            .into(),
        );
    }
    Some((chain, words.join(" ")))
}

/// `0x04000` and `16384` both as `0x4000`.
fn mark_hex(s: &str) -> String {
    let v = match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    };
    v.map(|v| format!("{v:#x}"))
        .unwrap_or_else(|| s.to_string())
}

/// Splits a rule into words, keeping `"quoted comments"` whole (quotes included).
fn split_words(rule: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in rule.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            ' ' if !quoted => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            _ => cur.push(c),
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}
