//! Test helpers: a fresh network namespace per test, and the real `ipset` tool.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Stdio};

/// Runs `body` on a new thread moved into a network namespace of its own (ipsets are per
/// namespace), so tests run in parallel without seeing each other's sets. Child processes
/// started from that thread (the `ipset` tool) inherit the namespace.
pub fn in_netns<R: Send + 'static>(body: impl FnOnce() -> R + Send + 'static) -> R {
    std::thread::spawn(move || {
        // SAFETY: unshare only changes the calling thread's namespaces; no memory is involved.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(
            rc,
            0,
            "unshare(CLONE_NEWNET) needs root: {}",
            std::io::Error::last_os_error()
        );
        body()
    })
    .join()
    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

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
