//! The agent's log carries no ANSI colour codes when standard error is not a terminal (a
//! file, a pipe, `kubectl logs`), even with a colour terminal's `TERM`.

use std::process::Command;

#[test]
fn a_log_into_a_pipe_has_no_colour_codes() {
    let manifests = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/demo/manifests");
    let out = Command::new(env!("CARGO_BIN_EXE_kube-proxy-ipvs"))
        .args(["--dry-run", "--hostname-override", "node-a", "--manifests"])
        .arg(manifests)
        .env("TERM", "xterm-256color")
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .output()
        .expect("run the agent");
    assert!(out.status.success(), "{out:?}");
    let log = String::from_utf8_lossy(&out.stderr);
    // The demo's malformed Service is logged as a warning: klog's `W` line.
    let header = regex::Regex::new(
        r#"^W\d{4} \d{2}:\d{2}:\d{2}\.\d{6} [ \d]{7} manifests/mod\.rs:\d+\] "manifest rejected" "#,
    )
    .unwrap();
    assert!(
        log.lines().any(|l| header.is_match(l)),
        "no klog warning line for the rejected manifest:\n{log}"
    );
    assert!(
        !log.contains('\x1b'),
        "colour codes in a piped log:\n{log:?}"
    );
}
