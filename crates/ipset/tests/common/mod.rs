//! Test helpers: a fresh network namespace per test, and the real `ipset` tool.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Stdio};

/// A fresh network namespace per test (ipsets are per namespace), so tests run in parallel
/// without seeing each other's sets; the `ipset` tool started inside inherits it.
pub use lab::guest::in_netns;

/// Runs the `ipset` tool with `args` and `stdin`, asserting success; returns stdout.
pub fn ipset_tool(args: &[&str], stdin: &str) -> String {
    let mut child = Command::new("ipset")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the ipset tool is installed (tests/setup.sh)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "ipset {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `ipset save` in the current namespace.
pub fn tool_save() -> String {
    ipset_tool(&["save"], "")
}

/// Save text with the kernel-chosen `bucketsize`/`initval` removed and lines sorted, for
/// comparing contents independent of hash order.
pub fn normalized(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text
        .lines()
        .map(|l| {
            let mut words: Vec<&str> = Vec::new();
            let mut it = l.split(' ');
            while let Some(w) = it.next() {
                if w == "initval" || w == "bucketsize" {
                    it.next();
                } else {
                    words.push(w);
                }
            }
            words.join(" ")
        })
        .collect();
    lines.sort();
    lines
}
