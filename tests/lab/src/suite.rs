//! Kernel tests: every workspace package's `lab` test target (declared with
//! `required-features = ["lab"]`, so a host `cargo test` never runs it) is built on the host
//! and run inside one VM, each binary with libtest, their output streamed back as is.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::image::Image;
use crate::payload::Payload;
use crate::vm::{self, Config, Outcome};
use crate::{Error, Result};

/// A test binary built for the guest.
#[derive(Debug, Clone)]
pub struct TestBinary {
    /// The package that owns it.
    pub package: String,
    /// The source file of the test target.
    pub source: PathBuf,
    /// The executable.
    pub executable: PathBuf,
}

/// What `cargo test --no-run` built: the kernel test binaries, and every other executable of
/// the workspace (binaries and examples the tests start).
#[derive(Debug, Default)]
pub struct Build {
    /// Test targets named `lab`.
    pub tests: Vec<TestBinary>,
    /// Binaries and examples.
    pub programs: Vec<PathBuf>,
}

/// The cargo profile of an optimized build of the kernel tests (see the workspace's
/// Cargo.toml).
pub const OPTIMIZED_PROFILE: &str = "labtest";

/// Builds the kernel tests of the workspace (or of `packages`, when not empty), optimized
/// with [`OPTIMIZED_PROFILE`] when `release`.
pub fn build(packages: &[String], release: bool) -> Result<Build> {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args([
        "test",
        "--no-run",
        "--message-format=json-render-diagnostics",
        "--all-features",
    ]);
    // Under `cargo run -p lab`, cargo gave this process the lab package's own variables. Build
    // scripts that watch such a name (ring's watches CARGO_PKG_NAME and CARGO_MANIFEST_DIR)
    // would then run again, and ring, rustls and kube compile again, here and once more in
    // the next build from a shell (the lab cluster's image takes this build: 413 s in CI).
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_MANIFEST_LINKS",
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "OUT_DIR",
            ]
            .contains(&key.as_ref())
        {
            cmd.env_remove(key.as_ref());
        }
    }
    if packages.is_empty() {
        cmd.arg("--workspace");
    } else {
        for p in packages {
            cmd.args(["-p", p]);
        }
    }
    if release {
        cmd.args(["--profile", OPTIMIZED_PROFILE]);
    }
    cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let out = cmd.output().map_err(|e| Error::spawn(&cmd, e))?;
    if !out.status.success() {
        return Err(Error::Failed("building the kernel tests failed".into()));
    }
    let mut build = Build::default();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(exe) = msg["executable"].as_str() else {
            continue;
        };
        let target = &msg["target"];
        let kinds: Vec<&str> = target["kind"]
            .as_array()
            .map(|k| k.iter().filter_map(|v| v.as_str()).collect())
            .unwrap_or_default();
        if kinds == ["test"] && target["name"] == "lab" {
            let package = msg["package_id"].as_str().unwrap_or_default();
            build.tests.push(TestBinary {
                package: package_name(package),
                source: PathBuf::from(target["src_path"].as_str().unwrap_or_default()),
                executable: PathBuf::from(exe),
            });
        } else if msg["profile"]["test"] != true // not a binary's unit-test harness
            && kinds.iter().any(|k| *k == "bin" || *k == "example")
        {
            build.programs.push(PathBuf::from(exe));
        }
    }
    Ok(build)
}

/// The package name in a cargo package id: `path+file:///w/crates/agent#kube-proxy-ipvs-agent@0.1.0`
/// names it after `#`; `path+file:///w/tests/lab#0.1.0` leaves it to the folder's name.
fn package_name(id: &str) -> String {
    let (url, fragment) = id.rsplit_once('#').unwrap_or((id, ""));
    match fragment.split_once('@') {
        Some((name, _)) => name.to_string(),
        None => url.rsplit('/').next().unwrap_or(url).to_string(),
    }
}

/// Runs the built tests in one VM; `test_args` go to every libtest binary (a filter,
/// `--nocapture`...). Returns the VM's outcome (its exit code is 0 when every binary passed)
/// and the summary table of [`crate::report`], when a test wrote a row.
///
/// With a `control_plane` directory (see [`crate::controlplane`]), its files (certificates,
/// kubeconfigs, endpoints) go into the guest at the same path, named by `LAB_CONTROL_PLANE`.
pub fn run(
    image: &Image,
    build: &Build,
    test_args: &[String],
    config: &Config,
    control_plane: Option<&Path>,
) -> Result<(Outcome, Option<String>)> {
    let mut payload = Payload::new(image);
    for p in &build.programs {
        payload.add_executable(p)?;
    }
    let mut script = String::from("#!/bin/sh\n# Generated by `lab test`.\nrc=0\n");
    if let Some(dir) = control_plane {
        let files =
            std::fs::read_dir(dir).map_err(|e| Error::Setup(format!("{}: {e}", dir.display())))?;
        for f in files.filter_map(|e| e.ok()) {
            let path = f.path();
            let wanted = path
                .extension()
                .is_some_and(|e| e == "kubeconfig" || e == "env" || e == "crt");
            if wanted {
                payload.add_host_file(&path, 0o600)?;
            }
        }
        script.push_str(&format!(
            "export {}={}\n",
            crate::controlplane::ENV,
            shell_quote(&dir.to_string_lossy())
        ));
    }
    // The reliability suite's knobs (RELIABILITY_OUTAGE_SECS...), the differential
    // corpus's (PEERS_SCENARIOS) and the random histories' seed (HISTORY_SEED) reach the
    // tests.
    for (key, value) in std::env::vars() {
        if ["RELIABILITY_", "PEERS_", "HISTORY_"]
            .iter()
            .any(|prefix| key.starts_with(prefix))
            && key
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        {
            script.push_str(&format!("export {key}={}\n", shell_quote(&value)));
        }
    }
    let threads = config.smp.max(1) * 2;
    let args: Vec<String> = test_args.iter().map(|a| shell_quote(a)).collect();
    // The differential corpus runs upstream kube-proxy, built by tests/peers/build.sh.
    if build.tests.iter().any(|t| t.package == "peers") {
        let kube_proxy = crate::controlplane::peers_dir().join("kube-proxy");
        let kube_proxy = kube_proxy.canonicalize().map_err(|e| {
            Error::Setup(format!(
                "{}: {e} (tests/peers/build.sh builds it)",
                kube_proxy.display()
            ))
        })?;
        payload.add_executable(&kube_proxy)?;
    }
    for t in &build.tests {
        let guest = payload.add_executable(&t.executable)?;
        script.push_str(&format!(
            "echo \"     Running [lab $(uname -r)] {source} ({package})\"\n\
             RUST_TEST_THREADS=${{RUST_TEST_THREADS:-{threads}}} {exe} {args} || rc=1\n",
            source = t.source.display(),
            package = t.package,
            exe = shell_quote(&guest.to_string_lossy()),
            args = args.join(" "),
        ));
    }
    script.push_str(&crate::report::print_script());
    script.push_str("exit $rc\n");
    payload.add_data("/lab/run", 0o755, script)?;
    let mut table = crate::report::Collector::default();
    let outcome = vm::run(image, &payload, config, |line| {
        table.line(line);
        println!("{line}");
    })?;
    Ok((outcome, table.table()))
}

/// Quotes a word for `/bin/sh`.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_names_from_cargo_ids() {
        assert_eq!(
            package_name("path+file:///work/main/crates/agent#kube-proxy-ipvs-agent@0.1.0"),
            "kube-proxy-ipvs-agent"
        );
        assert_eq!(
            package_name("path+file:///work/main/tests/lab#0.1.0"),
            "lab"
        );
    }

    #[test]
    fn quoting_survives_the_shell() {
        for word in ["plain", "with space", "it's", "$HOME", ""] {
            let out = Command::new("/bin/sh")
                .args(["-c", &format!("printf %s {}", shell_quote(word))])
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), word);
        }
    }
}
