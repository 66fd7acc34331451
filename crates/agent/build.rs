//! Records the git commit the agent is built from, and that commit's date, for
//! `kubernetes_build_info` (`KUBE_PROXY_IPVS_GIT_COMMIT`, `KUBE_PROXY_IPVS_BUILD_DATE`).
//! The commit is the last one that changed the workspace's crates or its Cargo.toml or
//! Cargo.lock, not HEAD: a commit elsewhere (a test harness, a page) builds the same binary,
//! and so the same image, which is what lets e2e shards run at different commits be merged.
//! `KUBE_PROXY_IPVS_GIT_COMMIT` and `KUBE_PROXY_IPVS_BUILD_DATE` in the build's environment
//! win over git: the image's builder stage has no `.git` (.dockerignore leaves it out), and
//! deploy/build-image.sh passes both from the checkout as build arguments. With neither git
//! nor the variables (a packaged crate, a source tarball) both are kube's defaults for an
//! unknown build: `unknown` and the epoch.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    // crates/agent's parent holds every crate; the workspace's manifest and lock file are
    // two levels up.
    let sources = ["--", "..", "../../Cargo.toml", "../../Cargo.lock"];
    let commit = given("KUBE_PROXY_IPVS_GIT_COMMIT")
        .or_else(|| {
            git(
                &dir,
                &[&["log", "-1", "--format=%H"][..], &sources].concat(),
            )
        })
        .unwrap_or_else(|| "unknown".into());
    // The commit's own date, not the build's: the same commit builds the same binary.
    let date = given("KUBE_PROXY_IPVS_BUILD_DATE")
        .or_else(|| {
            git(
                &dir,
                &[
                    &[
                        "log",
                        "-1",
                        "--format=%cd",
                        "--date=format-local:%Y-%m-%dT%H:%M:%SZ",
                    ][..],
                    &sources,
                ]
                .concat(),
            )
        })
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".into());
    println!("cargo:rustc-env=KUBE_PROXY_IPVS_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=KUBE_PROXY_IPVS_BUILD_DATE={date}");
    // Without git, only this script's own change reruns it (not every source file's).
    println!("cargo:rerun-if-changed=build.rs");
    // A new commit moves HEAD's branch (or HEAD itself when detached); packed refs hold the
    // branch after `git gc`.
    if let Some(git_dir) = git(&dir, &["rev-parse", "--absolute-git-dir"]) {
        let git_dir = PathBuf::from(git_dir);
        rerun_if_changed(&git_dir.join("HEAD"));
        let common = git(&dir, &["rev-parse", "--git-common-dir"])
            .map(|c| dir.join(c))
            .unwrap_or_else(|| git_dir.clone());
        if let Some(head_ref) = git(&dir, &["symbolic-ref", "-q", "HEAD"]) {
            rerun_if_changed(&common.join(head_ref));
        }
        let packed = common.join("packed-refs");
        if packed.exists() {
            rerun_if_changed(&packed);
        }
    }
}

/// A non-empty build variable, and a rerun of this script when it changes.
fn given(name: &str) -> Option<String> {
    println!("cargo:rerun-if-env-changed={name}");
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `git ARGS` in `dir`, its first line of output; `None` when git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("TZ", "UTC")
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let line = text.lines().next()?.trim();
    (!line.is_empty()).then(|| line.to_string())
}

/// Asks cargo to rerun this script when `path` changes (never a missing path: cargo would
/// rerun it at every build).
fn rerun_if_changed(path: &Path) {
    println!("cargo:rerun-if-changed={}", path.display());
}
