//! Comparing the two programs' normalised state, and the differences we keep on purpose.
//!
//! A difference is a line one side has and the other has not, or lines both have in another
//! order (checked on the lines both have, whatever else differs). Each difference the agent
//! keeps on purpose is listed in the README's "Where it differs" with a machine-readable
//! marker, an HTML comment the rendered README does not show. A marker explains one thing,
//! in one of two shapes:
//!
//! ```text
//! <!-- peers-diff id=owned-set section=ipset side=agent match="^add KUBE-IPVS-OWNED " max=40 -->
//! <!-- peers-diff id=sched-fallback section=ipvs max=8
//!      agent="^-A (?P<vs>\S+ \S+) -s (?P<s>sh|mh) -b (?P<fb>sh|mh)-fallback$" agent-key="$vs $s $fb"
//!      kube-proxy="^-A (?P<vs>\S+ \S+) -s (?P<s>sh|mh)$" kube-proxy-key="$vs $s $s" -->
//! ```
//!
//! - **One-sided** (`side`, `match`): lines only one program has (`agent`, `kube-proxy`,
//!   `order` for the first line out of place, `any`), each containing the `match` regex.
//! - **Paired** (`agent`, `agent-key`, `kube-proxy`, `kube-proxy-key`): a line only the agent
//!   has and a line only kube-proxy has that match their regexes and whose keys (the
//!   templates expanded with each regex's captures) are equal: the same object, differing
//!   exactly as the regexes allow. A line without its partner stays unexplained, so a missing
//!   or swapped object is never hidden.
//!
//! Every marker names its `section` (a regex over [`crate::state::READERS`]' names,
//! anchored) and `max`, the most differences it may explain at one compared point (a paired
//! marker counts both lines of a pair); beyond that they stay unexplained. `scenarios`
//! (a regex over scenario ids, anchored) limits a marker to the scenarios it is about. A
//! difference no marker explains fails the scenario; the harness reads the markers from the
//! README itself, so a difference is accepted only where the README explains it.

use std::collections::BTreeMap;
use std::fmt;

use anyhow::{Context, Result, bail};
use regex::Regex;

use crate::state::Sections;

/// Which side a difference's line is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Side {
    /// Only upstream kube-proxy programmed it.
    KubeProxy,
    /// Only the agent programmed it.
    Agent,
    /// Both have the same lines in another order (the first line out of place).
    Order,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::KubeProxy => "kube-proxy only",
            Side::Agent => "agent only",
            Side::Order => "order differs",
        })
    }
}

/// One difference between the two programs' state.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Difference {
    /// The section (`ipvs`, `ipset`, `iptables-nft`...).
    pub section: String,
    /// Who has the line.
    pub side: Side,
    /// The normalised line.
    pub line: String,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}] {}", self.section, self.side, self.line)
    }
}

/// Every difference between kube-proxy's and the agent's sections.
pub fn differences(kube_proxy: &Sections, agent: &Sections) -> Vec<Difference> {
    let mut out = Vec::new();
    let empty = Vec::new();
    let names: std::collections::BTreeSet<&&str> = kube_proxy.keys().chain(agent.keys()).collect();
    for name in names {
        let k = kube_proxy.get(*name).unwrap_or(&empty);
        let a = agent.get(*name).unwrap_or(&empty);
        let mut count: BTreeMap<&str, i64> = BTreeMap::new();
        for l in k {
            *count.entry(l).or_default() += 1;
        }
        for l in a {
            *count.entry(l).or_default() -= 1;
        }
        for (line, n) in &count {
            let side = if *n > 0 { Side::KubeProxy } else { Side::Agent };
            for _ in 0..n.unsigned_abs() {
                out.push(Difference {
                    section: name.to_string(),
                    side,
                    line: line.to_string(),
                });
            }
        }
        if let Some(line) = first_out_of_order(k, a) {
            out.push(Difference {
                section: name.to_string(),
                side: Side::Order,
                line,
            });
        }
    }
    out
}

/// The first line out of place among the lines both sides have: each side's lines with the
/// occurrences the other lacks left out, compared in order. A line is taken with the `*table`
/// line above it (iptables-save repeats `:INPUT ACCEPT` in each table), so that a table one
/// side alone has does not shift the others.
fn first_out_of_order(k: &[String], a: &[String]) -> Option<String> {
    let qualified = |lines: &[String]| {
        let mut table = String::new();
        lines
            .iter()
            .map(|l| {
                if l.starts_with('*') {
                    table = l.clone();
                    l.clone()
                } else if table.is_empty() {
                    l.clone()
                } else {
                    format!("{table} {l}")
                }
            })
            .collect::<Vec<_>>()
    };
    let (k, a) = (qualified(k), qualified(a));
    let (k, a) = (k.as_slice(), a.as_slice());
    let mut in_a: BTreeMap<&str, usize> = BTreeMap::new();
    for l in a {
        *in_a.entry(l).or_default() += 1;
    }
    let mut in_k: BTreeMap<&str, usize> = BTreeMap::new();
    for l in k {
        *in_k.entry(l).or_default() += 1;
    }
    let common = |lines: &[String], other: &BTreeMap<&str, usize>| {
        let mut left = other.clone();
        lines
            .iter()
            .filter(|l| {
                left.get_mut(l.as_str())
                    .filter(|n| **n > 0)
                    .map(|n| *n -= 1)
                    .is_some()
            })
            .cloned()
            .collect::<Vec<_>>()
    };
    let (k, a) = (common(k, &in_a), common(a, &in_k));
    k.iter()
        .zip(&a)
        .find(|(x, y)| x != y)
        .map(|(x, _)| x.clone())
}

/// What a marker matches.
#[derive(Debug, Clone)]
enum Shape {
    /// Lines on one side (`None`: either) containing `line`.
    OneSided { side: Option<Side>, line: Regex },
    /// An agent-only line and a kube-proxy-only line with equal keys.
    Paired {
        agent: Regex,
        agent_key: String,
        kube_proxy: Regex,
        kube_proxy_key: String,
    },
}

/// A difference kept on purpose: one `peers-diff` marker of the README.
#[derive(Debug, Clone)]
pub struct Known {
    /// Its id, shown in the results.
    pub id: String,
    section: Regex,
    scenarios: Option<Regex>,
    /// The most differences it explains at one compared point.
    pub max: usize,
    shape: Shape,
}

impl Known {
    /// Whether this marker applies to scenario `id`.
    fn applies_to(&self, scenario: &str) -> bool {
        self.scenarios.as_ref().is_none_or(|r| r.is_match(scenario))
    }

    /// The key of `d` under a paired marker's regex of its side, when it matches.
    fn key(&self, d: &Difference) -> Option<String> {
        let Shape::Paired {
            agent,
            agent_key,
            kube_proxy,
            kube_proxy_key,
        } = &self.shape
        else {
            return None;
        };
        let (re, template) = match d.side {
            Side::Agent => (agent, agent_key),
            Side::KubeProxy => (kube_proxy, kube_proxy_key),
            Side::Order => return None,
        };
        let caps = re.captures(&d.line)?;
        let mut key = String::new();
        caps.expand(template, &mut key);
        Some(key)
    }
}

/// The `peers-diff` markers of a README.
pub fn known(readme: &str) -> Result<Vec<Known>> {
    let marker = Regex::new(r"(?s)<!--\s*peers-diff\s+(.*?)\s*-->").expect("valid regex");
    let mut out: Vec<Known> = Vec::new();
    for cap in marker.captures_iter(readme) {
        let text = &cap[1];
        let fields = fields(text).with_context(|| format!("peers-diff marker {text:?}"))?;
        let get = |k: &str| {
            fields
                .get(k)
                .cloned()
                .with_context(|| format!("peers-diff marker {text:?} has no {k}="))
        };
        let regex = |k: &str| -> Result<Regex> {
            Regex::new(&get(k)?).with_context(|| format!("peers-diff marker {text:?}: {k}="))
        };
        let shape = if fields.contains_key("agent") || fields.contains_key("kube-proxy") {
            for one_sided in ["side", "match"] {
                if fields.contains_key(one_sided) {
                    bail!("peers-diff marker {text:?}: {one_sided}= is for one-sided markers");
                }
            }
            Shape::Paired {
                agent: regex("agent")?,
                agent_key: get("agent-key")?,
                kube_proxy: regex("kube-proxy")?,
                kube_proxy_key: get("kube-proxy-key")?,
            }
        } else {
            let side = match get("side")?.as_str() {
                "agent" => Some(Side::Agent),
                "kube-proxy" => Some(Side::KubeProxy),
                "order" => Some(Side::Order),
                "any" => None,
                other => bail!("peers-diff marker {text:?}: side={other:?}"),
            };
            Shape::OneSided {
                side,
                line: regex("match")?,
            }
        };
        let max = get("max")?
            .parse()
            .with_context(|| format!("peers-diff marker {text:?}: max= is a count"))?;
        let id = get("id")?;
        if out.iter().any(|k| k.id == id) {
            bail!("peers-diff marker id {id:?} is used twice");
        }
        out.push(Known {
            id,
            section: Regex::new(&format!("^(?:{})$", get("section")?))?,
            scenarios: match fields.get("scenarios") {
                Some(r) => Some(Regex::new(&format!("^(?:{r})$"))?),
                None => None,
            },
            max,
            shape,
        });
    }
    Ok(out)
}

/// `key=value key="quoted value"` pairs.
fn fields(text: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once('=')
            .with_context(|| format!("expected key=value at {rest:?}"))?;
        let (value, after) = if let Some(q) = after.strip_prefix('"') {
            let end = q.find('"').context("unterminated quote")?;
            (&q[..end], &q[end + 1..])
        } else {
            after.split_once(char::is_whitespace).unwrap_or((after, ""))
        };
        if out
            .insert(key.trim().to_string(), value.to_string())
            .is_some()
        {
            bail!("{} given twice", key.trim());
        }
        rest = after.trim_start();
    }
    Ok(out)
}

/// The differences at one compared point of scenario `scenario` that no marker explains, and
/// for each marker that explained some, how many. Markers are tried in README order; each
/// explains at most its `max`.
pub fn classify<'a>(
    diffs: &'a [Difference],
    known: &[Known],
    scenario: &str,
) -> (Vec<&'a Difference>, BTreeMap<String, usize>) {
    let mut explained = vec![false; diffs.len()];
    let mut used: BTreeMap<String, usize> = BTreeMap::new();
    let section_of = |k: &Known, d: &Difference| k.section.is_match(&d.section);
    for k in known.iter().filter(|k| k.applies_to(scenario)) {
        let mut n = 0;
        match &k.shape {
            Shape::OneSided { side, line } => {
                for (i, d) in diffs.iter().enumerate() {
                    if n < k.max
                        && !explained[i]
                        && section_of(k, d)
                        && side.is_none_or(|s| s == d.side)
                        && line.is_match(&d.line)
                    {
                        explained[i] = true;
                        n += 1;
                    }
                }
            }
            Shape::Paired { .. } => {
                // kube-proxy's lines waiting for their agent partner, by section and key.
                let mut waiting: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
                for (i, d) in diffs.iter().enumerate() {
                    if !explained[i]
                        && d.side == Side::KubeProxy
                        && section_of(k, d)
                        && let Some(key) = k.key(d)
                    {
                        waiting.entry((d.section.clone(), key)).or_default().push(i);
                    }
                }
                for (i, d) in diffs.iter().enumerate() {
                    if n + 2 > k.max || explained[i] || d.side != Side::Agent || !section_of(k, d) {
                        continue;
                    }
                    let Some(key) = k.key(d) else { continue };
                    if let Some(j) = waiting
                        .get_mut(&(d.section.clone(), key))
                        .and_then(|v| v.pop())
                    {
                        explained[i] = true;
                        explained[j] = true;
                        n += 2;
                    }
                }
            }
        }
        if n > 0 {
            *used.entry(k.id.clone()).or_default() += n;
        }
    }
    let unexplained = diffs
        .iter()
        .zip(&explained)
        .filter(|(_, e)| !**e)
        .map(|(d, _)| d)
        .collect();
    (unexplained, used)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sections(pairs: &[(&'static str, &[&str])]) -> Sections {
        pairs
            .iter()
            .map(|(k, v)| (*k, v.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    fn readme_markers() -> Vec<Known> {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
                .unwrap();
        known(&readme).unwrap()
    }

    /// The differences between two states the README's markers leave unexplained.
    fn unexplained(k: &Sections, a: &Sections, scenario: &str) -> Vec<String> {
        let d = differences(k, a);
        classify(&d, &readme_markers(), scenario)
            .0
            .iter()
            .map(|d| d.to_string())
            .collect()
    }

    #[test]
    fn lines_on_one_side_and_reordering_are_differences() {
        let k = sections(&[("ipvs", &["-A a", "-a r1"]), ("iptables-nft", &["x", "y"])]);
        let a = sections(&[("ipvs", &["-A a", "-a r2"]), ("iptables-nft", &["y", "x"])]);
        let d = differences(&k, &a);
        let text: Vec<String> = d.iter().map(|d| d.to_string()).collect();
        assert_eq!(
            text,
            [
                "iptables-nft [order differs] x",
                "ipvs [kube-proxy only] -a r1",
                "ipvs [agent only] -a r2",
            ]
        );
        assert!(differences(&k, &k).is_empty());
    }

    #[test]
    fn reordering_is_found_beside_another_difference() {
        let k = sections(&[("iptables-nft", &["x", "y", "z"])]);
        let a = sections(&[("iptables-nft", &["y", "x", "w"])]);
        let text: Vec<String> = differences(&k, &a).iter().map(|d| d.to_string()).collect();
        assert_eq!(
            text,
            [
                "iptables-nft [agent only] w",
                "iptables-nft [kube-proxy only] z",
                "iptables-nft [order differs] x",
            ]
        );
    }

    #[test]
    fn one_sided_markers_explain_only_what_they_match_up_to_their_max() {
        let readme = "- **Ownership.** ...\n  <!-- peers-diff id=owned section=ipset side=agent match=\"^add KUBE-IPVS-OWNED \" max=1 -->\n";
        let known = known(readme).unwrap();
        let d = |section: &str, side, line: &str| Difference {
            section: section.into(),
            side,
            line: line.into(),
        };
        let diffs = vec![
            d(
                "ipset",
                Side::Agent,
                "add KUBE-IPVS-OWNED 10.96.0.1,tcp:443",
            ),
            d(
                "ipset",
                Side::KubeProxy,
                "add KUBE-IPVS-OWNED 10.96.0.1,tcp:443",
            ),
            d("ipvs", Side::Agent, "add KUBE-IPVS-OWNED"),
            d("ipset", Side::Agent, "add KUBE-IPVS-OWNED 10.96.0.2,tcp:80"),
        ];
        let (left, used) = classify(&diffs, &known, "001");
        assert_eq!(left.len(), 3, "{left:?}");
        assert_eq!(used["owned"], 1);
    }

    #[test]
    fn a_marker_limited_to_scenarios_explains_nothing_elsewhere() {
        let readme = "<!-- peers-diff id=x section=sysctl side=agent match=\"^a\" max=9 scenarios=\"07[0-9]-.*\" -->";
        let known = known(readme).unwrap();
        let diffs = vec![Difference {
            section: "sysctl".into(),
            side: Side::Agent,
            line: "a = 1".into(),
        }];
        assert!(classify(&diffs, &known, "071-takeover").0.is_empty());
        assert_eq!(classify(&diffs, &known, "001-cluster-ip").0.len(), 1);
    }

    #[test]
    fn malformed_markers_are_errors() {
        for bad in [
            "<!-- peers-diff id=x section=ipvs match=y max=1 -->",
            "<!-- peers-diff id=x section=ipvs side=both match=y max=1 -->",
            "<!-- peers-diff id=x section=ipvs side=agent match=y -->",
            "<!-- peers-diff id=x section=ipvs side=agent match=y max=many -->",
            "<!-- peers-diff id=x section=ipvs agent=y agent-key=$0 max=1 -->",
            "<!-- peers-diff id=x section=ipvs side=agent agent=y agent-key=$0 kube-proxy=y kube-proxy-key=$0 max=1 -->",
            "<!-- peers-diff id=x section=ipvs side=agent match=y max=1 -->\n<!-- peers-diff id=x section=ipset side=agent match=y max=1 -->",
        ] {
            assert!(known(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_readme_markers_parse_and_each_states_its_max() {
        let k = readme_markers();
        assert!(!k.is_empty());
        assert!(k.iter().all(|k| k.max > 0));
    }

    /// What the README's markers explain: the agent's `sh-fallback` on an `sh` virtual server
    /// kube-proxy made without it, and its ownership set.
    #[test]
    fn the_readme_explains_the_fallback_flag_and_the_ownership_set() {
        let k = sections(&[
            (
                "ipvs",
                &[
                    "-A -t 10.96.0.27:80 -s sh",
                    "-A -t 10.96.0.30:80 -s mh -b mh-port",
                ],
            ),
            ("ipset", &[]),
        ]);
        let a = sections(&[
            (
                "ipvs",
                &[
                    "-A -t 10.96.0.27:80 -s sh -b sh-fallback",
                    "-A -t 10.96.0.30:80 -s mh -b mh-fallback,mh-port",
                ],
            ),
            (
                "ipset",
                &[
                    "create KUBE-IPVS-OWNED hash:ip,port family inet hashsize 1024 maxelem 65536 bucketsize 12",
                    "add KUBE-IPVS-OWNED 10.96.0.27,tcp:80",
                ],
            ),
        ]);
        assert_eq!(
            unexplained(&k, &a, "027-scheduler-sh"),
            Vec::<String>::new()
        );
    }

    /// The comparer's must-fail cases: states that differ in ways no marker may hide, each
    /// beside a difference the README does explain.
    #[test]
    fn differences_no_marker_may_hide_fail() {
        let kp = |ipvs: &[&'static str]| sections(&[("ipvs", ipvs)]);
        let cases: &[(&str, &[&str], &[&str])] = &[
            (
                "sh and mh swapped",
                &["-A -t 10.96.0.27:80 -s sh"],
                &["-A -t 10.96.0.27:80 -s mh -b mh-fallback"],
            ),
            (
                "the fallback of the other scheduler",
                &["-A -t 10.96.0.27:80 -s sh"],
                &["-A -t 10.96.0.27:80 -s sh -b mh-fallback"],
            ),
            (
                "sh-port added",
                &["-A -t 10.96.0.27:80 -s sh"],
                &["-A -t 10.96.0.27:80 -s sh -b sh-fallback,sh-port"],
            ),
            (
                "a virtual server missing",
                &["-A -t 10.96.0.27:80 -s sh", "-A -t 10.96.0.28:80 -s sh"],
                &["-A -t 10.96.0.27:80 -s sh -b sh-fallback"],
            ),
            (
                "the fallback flag on another address",
                &["-A -t 10.96.0.27:80 -s sh"],
                &["-A -t 10.96.0.29:80 -s sh -b sh-fallback"],
            ),
            (
                "the fallback flag without its virtual server on kube-proxy's side",
                &[],
                &["-A -t 10.96.0.27:80 -s sh -b sh-fallback"],
            ),
            (
                "persistence lost beside the flag",
                &["-A -t 10.96.0.27:80 -s sh -p 10800"],
                &["-A -t 10.96.0.27:80 -s sh -b sh-fallback"],
            ),
        ];
        for (what, k, a) in cases {
            let left = unexplained(&kp(k), &kp(a), "027-scheduler-sh");
            assert!(!left.is_empty(), "{what}: passed");
        }
        // Rules reordered beside a difference the README explains.
        let k = sections(&[
            (
                "iptables-nft",
                &["*nat", "-A KUBE-SERVICES -j A", "-A KUBE-SERVICES -j B"],
            ),
            ("ipset", &[]),
        ]);
        let a = sections(&[
            (
                "iptables-nft",
                &["*nat", "-A KUBE-SERVICES -j B", "-A KUBE-SERVICES -j A"],
            ),
            ("ipset", &["add KUBE-IPVS-OWNED 10.96.0.27,tcp:80"]),
        ]);
        assert_eq!(
            unexplained(&k, &a, "001-cluster-ip-rr"),
            ["iptables-nft [order differs] *nat -A KUBE-SERVICES -j A"]
        );
        // A table one side alone has, its built-in chains repeated, shifts nothing.
        let k = sections(&[(
            "iptables-nft",
            &[
                "*filter",
                ":INPUT ACCEPT",
                "*nat",
                ":INPUT ACCEPT",
                "-A KUBE-SERVICES -j A",
            ],
        )]);
        let a = sections(&[(
            "iptables-nft",
            &[
                "*filter",
                ":INPUT ACCEPT",
                "*mangle",
                ":INPUT ACCEPT",
                "*nat",
                ":INPUT ACCEPT",
                "-A KUBE-SERVICES -j A",
            ],
        )]);
        assert!(
            !differences(&k, &a).iter().any(|d| d.side == Side::Order),
            "{:?}",
            differences(&k, &a)
        );
    }
}
