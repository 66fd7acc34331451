//! The agent's log as kube-proxy's log pipelines read it: klog's text lines by default,
//! Kubernetes' JSON with `--logging-format=json` or `logging.format: json`, and `-v` or
//! `logging.verbosity` deciding what is shown, the flags over the file.

use std::process::Command;

/// klog's header: severity, MMDD, time with microseconds, the id in 7 columns, file:line.
fn klog() -> regex::Regex {
    regex::Regex::new(
        r#"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d{6} [ \d]{7} [^ :\]]+:\d+\] "(?:[^"\\]|\\.)*"( |$)"#,
    )
    .unwrap()
}

/// A manifests directory with something logged at each level: the demo's Services (one
/// malformed: a warning at 0) and a ConfigMap (ignored, a detail at 2 from `source::manifests`).
fn manifests() -> &'static std::path::Path {
    // Written once for every test (they run in parallel).
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("log-format-manifests-{}", std::process::id()));
        let demo = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/demo/manifests");
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(demo).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
        std::fs::write(
            dir.join("other.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: demo}\n",
        )
        .unwrap();
        dir
    })
}

/// The agent's standard error for a dry run of [`manifests`] with `extra` flags.
fn log(extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kube-proxy-ipvs"))
        .args(["--dry-run", "--hostname-override", "node-a", "--manifests"])
        .arg(manifests())
        .args(extra)
        .env_remove("RUST_LOG")
        .output()
        .expect("run the agent");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stderr).unwrap()
}

fn config(text: &str) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!(
        "log-format-{}-{}.yaml",
        std::process::id(),
        text.len()
    ));
    std::fs::write(
        &path,
        format!("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\n{text}"),
    )
    .unwrap();
    path
}

#[test]
fn text_is_klogs_format_line_by_line() {
    let text = log(&["-v=2"]);
    let header = klog();
    assert!(text.lines().count() >= 2, "{text}");
    for line in text.lines() {
        assert!(header.is_match(line), "not a klog line: {line:?}\n{text}");
    }
    // -v=2 shows the sync details (debug), -v=0 does not.
    let quiet = log(&[]);
    assert!(
        text.lines().count() > quiet.lines().count(),
        "{text}\n---\n{quiet}"
    );
}

#[test]
fn json_lines_carry_kubernetes_fields() {
    let text = log(&["--logging-format", "json", "--v=2"]);
    let mut levels = std::collections::BTreeSet::new();
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert!(
            v["ts"].as_f64().is_some_and(|ts| ts > 1.6e12),
            "ts in ms: {line}"
        );
        assert!(
            v["caller"].as_str().is_some_and(|c| c.contains(".rs:")),
            "{line}"
        );
        assert!(v["msg"].is_string(), "{line}");
        if let Some(level) = v["v"].as_u64() {
            levels.insert(level);
        }
    }
    assert!(
        levels.contains(&0) && levels.contains(&2),
        "want info (v 0) and -v=2 detail (v 2): {levels:?}\n{text}"
    );
    let rejected = text
        .lines()
        .find(|l| l.contains("manifest rejected"))
        .unwrap_or_else(|| panic!("{text}"));
    let v: serde_json::Value = serde_json::from_str(rejected).unwrap();
    assert_eq!(v["msg"], "manifest rejected", "{rejected}");
    assert!(v["reason"].is_string(), "the pairs follow: {rejected}");
}

#[test]
fn the_files_logging_is_applied_and_flags_override_it() {
    let file = config("logging:\n  format: json\n  verbosity: 2\n");
    let path = file.to_str().unwrap();
    let from_file = log(&["--config", path]);
    assert!(
        from_file.lines().all(|l| l.starts_with('{')) && from_file.contains("\"v\":2"),
        "{from_file}"
    );
    let overridden = log(&["--config", path, "--logging-format=text", "-v", "0"]);
    std::fs::remove_file(&file).unwrap();
    let header = klog();
    assert!(
        overridden.lines().all(|l| header.is_match(l)),
        "{overridden}"
    );
    assert!(overridden.lines().count() < from_file.lines().count());
}

#[test]
fn vmodule_raises_one_module_and_warns_about_the_rest() {
    let detail = "manifest of another kind ignored";
    assert!(!log(&[]).contains(detail));
    let sync_only = log(&["--vmodule=manifests=4,proxier*=4"]);
    assert!(
        sync_only.contains(detail),
        "manifests=4 shows that module's detail:\n{sync_only}"
    );
    assert!(
        !log(&["--vmodule=api=4"]).contains(detail),
        "another module's pattern"
    );
    assert!(
        sync_only
            .lines()
            .any(|l| l.starts_with('W') && l.ends_with(" vmodule=\"proxier*=4\"")),
        "{sync_only}"
    );
}

#[test]
fn rust_log_overrides_the_flags() {
    let out = Command::new(env!("CARGO_BIN_EXE_kube-proxy-ipvs"))
        .args([
            "--dry-run",
            "--hostname-override",
            "node-a",
            "-v=5",
            "--manifests",
        ])
        .arg(manifests())
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}
