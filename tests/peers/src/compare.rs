//! Comparing the two programs' normalised state, and the differences we keep on purpose.
//!
//! A difference is a line one side has and the other has not (or the same lines of a section
//! in another order). Each difference the agent keeps on purpose is listed in the README's
//! "Where it differs" with a machine-readable marker, an HTML comment the rendered README does
//! not show:
//!
//! ```text
//! <!-- peers-diff id=owned-set section=ipset side=agent match="KUBE-IPVS-OWNED" -->
//! ```
//!
//! `section` names a [`crate::state::READERS`] section (a regex, anchored), `side` the program
//! that has the line (`agent`, `kube-proxy` or `any`), `match` a regex the line must contain.
//! A difference no marker covers fails the scenario; the harness reads the list from the
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
        let before = out.len();
        for (line, n) in count {
            let side = if n > 0 { Side::KubeProxy } else { Side::Agent };
            for _ in 0..n.unsigned_abs() {
                out.push(Difference {
                    section: name.to_string(),
                    side,
                    line: line.to_string(),
                });
            }
        }
        if out.len() == before
            && let Some((line, _)) = k.iter().zip(a).find(|(x, y)| x != y)
        {
            out.push(Difference {
                section: name.to_string(),
                side: Side::Order,
                line: line.clone(),
            });
        }
    }
    out
}

/// A difference kept on purpose: one `peers-diff` marker of the README.
#[derive(Debug, Clone)]
pub struct Known {
    /// Its id, shown in the results.
    pub id: String,
    section: Regex,
    side: Option<Side>,
    line: Regex,
}

impl Known {
    /// Whether this marker covers `d`.
    pub fn covers(&self, d: &Difference) -> bool {
        self.section.is_match(&d.section)
            && self.side.is_none_or(|s| s == d.side)
            && self.line.is_match(&d.line)
    }
}

/// The `peers-diff` markers of a README.
pub fn known(readme: &str) -> Result<Vec<Known>> {
    let marker = Regex::new(r"<!--\s*peers-diff\s+(.*?)\s*-->").expect("valid regex");
    let mut out = Vec::new();
    for cap in marker.captures_iter(readme) {
        let text = &cap[1];
        let fields = fields(text).with_context(|| format!("peers-diff marker {text:?}"))?;
        let get = |k: &str| {
            fields
                .get(k)
                .cloned()
                .with_context(|| format!("peers-diff marker {text:?} has no {k}="))
        };
        let side = match get("side")?.as_str() {
            "agent" => Some(Side::Agent),
            "kube-proxy" => Some(Side::KubeProxy),
            "order" => Some(Side::Order),
            "any" => None,
            other => bail!("peers-diff marker {text:?}: side={other:?}"),
        };
        out.push(Known {
            id: get("id")?,
            section: Regex::new(&format!("^(?:{})$", get("section")?))?,
            side,
            line: Regex::new(&get("match")?)?,
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
        out.insert(key.trim().to_string(), value.to_string());
        rest = after.trim_start();
    }
    Ok(out)
}

/// The differences no marker covers, and for each marker that covered some, how many.
pub fn classify<'a>(
    diffs: &'a [Difference],
    known: &[Known],
) -> (Vec<&'a Difference>, BTreeMap<String, usize>) {
    let mut unexplained = Vec::new();
    let mut used = BTreeMap::new();
    for d in diffs {
        match known.iter().find(|k| k.covers(d)) {
            Some(k) => *used.entry(k.id.clone()).or_default() += 1,
            None => unexplained.push(d),
        }
    }
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
    fn markers_explain_only_what_they_match() {
        let readme = "- **Ownership.** ...\n  <!-- peers-diff id=owned section=ipset side=agent match=\"^(create|add) KUBE-IPVS-OWNED \" -->\n";
        let known = known(readme).unwrap();
        let diffs = vec![
            Difference {
                section: "ipset".into(),
                side: Side::Agent,
                line: "add KUBE-IPVS-OWNED 10.96.0.1,tcp:443".into(),
            },
            Difference {
                section: "ipset".into(),
                side: Side::KubeProxy,
                line: "add KUBE-IPVS-OWNED 10.96.0.1,tcp:443".into(),
            },
            Difference {
                section: "ipvs".into(),
                side: Side::Agent,
                line: "add KUBE-IPVS-OWNED".into(),
            },
        ];
        let (left, used) = classify(&diffs, &known);
        assert_eq!(left.len(), 2, "{left:?}");
        assert_eq!(used["owned"], 1);
    }

    #[test]
    fn a_marker_without_a_field_is_an_error() {
        assert!(known("<!-- peers-diff id=x section=ipvs match=y -->").is_err());
        assert!(known("<!-- peers-diff id=x section=ipvs side=both match=y -->").is_err());
    }

    #[test]
    fn the_readme_markers_parse() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
                .unwrap();
        known(&readme).unwrap();
    }
}
