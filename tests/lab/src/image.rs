//! The lab's base image: Debian's cloud kernel and an initramfs with its modules, busybox and
//! the real networking tools, built by `image/build.sh` and cached under the lab directory.
//!
//! The cache key covers every input: the build script and its lists, the kernel package and
//! the installed versions of the tool packages. A changed input builds a new image beside the
//! old one; nothing is rebuilt otherwise.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Error, Result};

/// The meta package whose dependency names the current cloud kernel image.
const KERNEL_META: &str = "linux-image-cloud-amd64";

/// Debian packages whose files go into the image; their versions are part of the cache key.
const TOOL_PACKAGES: &[&str] = &[
    "busybox-static",
    "ipvsadm",
    "ipset",
    "iptables",
    "nftables",
    "conntrack",
    "iproute2",
    "kmod",
    "dash",
    "bash",
    "coreutils",
    "util-linux",
    "libc6",
    "ca-certificates",
];

/// The image's source files, embedded so that the key changes whenever they do.
const BUILD_SH: &str = include_str!("../image/build.sh");
const INIT: &str = include_str!("../image/init");
const MODULES_LIST: &str = include_str!("../image/modules.list");
const TOOLS_LIST: &str = include_str!("../image/tools.list");

/// A built image, ready to boot.
#[derive(Debug, Clone)]
pub struct Image {
    /// The kernel.
    pub vmlinuz: PathBuf,
    /// The base initramfs (uncompressed newc cpio).
    pub base_cpio: PathBuf,
    /// The guest kernel's release, e.g. `6.1.0-56-cloud-amd64`.
    pub kernel_release: String,
    /// Every absolute path in the base image, so payloads skip what it holds.
    pub files: HashSet<PathBuf>,
}

/// The directory where the lab keeps its cache: `$LAB_DIR`, or `target/lab` of the workspace.
pub fn lab_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("LAB_DIR") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
            std::fs::canonicalize(&workspace)
                .unwrap_or(workspace)
                .join("target")
        });
    target.join("lab")
}

impl Image {
    /// Returns the cached image for the current inputs, building it first if needed.
    ///
    /// The kernel package is `$LAB_KERNEL_PACKAGE` when set (to pin one), else the current
    /// dependency of `linux-image-cloud-amd64`.
    pub fn ensure() -> Result<Image> {
        let dir = lab_dir();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let deb = kernel_deb(&dir)?;
        let key = cache_key(&deb)?;
        let out = dir.join(format!("image-{key:016x}"));
        if !out.join("kernel.release").exists() {
            let tmp = dir.join(format!("image-{key:016x}.tmp"));
            let _ = std::fs::remove_dir_all(&tmp);
            let script = dir.join("build.sh");
            write_sources(&dir)?;
            eprintln!("lab: building the image from {}", deb.display());
            run(Command::new("bash").arg(&script).arg(&deb).arg(&tmp))?;
            std::fs::rename(&tmp, &out).map_err(|e| Error::io(&out, e))?;
        }
        Image::load(&out)
    }

    fn load(dir: &Path) -> Result<Image> {
        let read = |name: &str| {
            let p = dir.join(name);
            std::fs::read_to_string(&p).map_err(|e| Error::io(&p, e))
        };
        Ok(Image {
            vmlinuz: dir.join("vmlinuz"),
            base_cpio: dir.join("base.cpio"),
            kernel_release: read("kernel.release")?.trim().to_string(),
            files: read("base.files")?.lines().map(PathBuf::from).collect(),
        })
    }
}

/// Writes the embedded build sources next to each other, as build.sh expects.
fn write_sources(dir: &Path) -> Result<()> {
    for (name, text) in [
        ("build.sh", BUILD_SH),
        ("init", INIT),
        ("modules.list", MODULES_LIST),
        ("tools.list", TOOLS_LIST),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| Error::io(&p, e))?;
    }
    Ok(())
}

/// Finds (downloading once) the kernel package's .deb in the cache.
fn kernel_deb(dir: &Path) -> Result<PathBuf> {
    let debs = dir.join("debs");
    std::fs::create_dir_all(&debs).map_err(|e| Error::io(&debs, e))?;
    let package = match std::env::var("LAB_KERNEL_PACKAGE") {
        Ok(p) if !p.is_empty() => p,
        _ => match resolve_kernel_package() {
            Ok(p) => p,
            // Offline or stale package lists: fall back to a cached kernel if there is one.
            Err(e) => match newest_cached(&debs) {
                Some(deb) => {
                    eprintln!("lab: {e}; using the cached {}", deb.display());
                    return Ok(deb);
                }
                None => return Err(e),
            },
        },
    };
    if let Some(deb) = cached(&debs, &package) {
        return Ok(deb);
    }
    eprintln!("lab: downloading {package}");
    run(Command::new("apt-get")
        .args(["download", "-q", "-o", "APT::Sandbox::User=root"])
        .arg(&package)
        .current_dir(&debs))?;
    cached(&debs, &package)
        .ok_or_else(|| Error::Setup(format!("apt-get download {package} left no .deb")))
}

fn resolve_kernel_package() -> Result<String> {
    let out = output(Command::new("apt-cache").args(["depends", KERNEL_META]))?;
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-"))
        .map(str::to_string)
        .ok_or_else(|| {
            Error::Setup(format!(
                "apt-cache depends {KERNEL_META} names no kernel (run apt-get update?)"
            ))
        })
}

fn cached(debs: &Path, package: &str) -> Option<PathBuf> {
    let prefix = format!("{package}_");
    std::fs::read_dir(debs)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
        })
}

fn newest_cached(debs: &Path) -> Option<PathBuf> {
    std::fs::read_dir(debs)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "deb"))
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
}

fn cache_key(deb: &Path) -> Result<u64> {
    let mut text = String::new();
    for part in [BUILD_SH, INIT, MODULES_LIST, TOOLS_LIST] {
        text.push_str(part);
        text.push('\0');
    }
    let _ = writeln!(
        text,
        "{}",
        deb.file_name().unwrap_or_default().to_string_lossy()
    );
    let versions = output(
        Command::new("dpkg-query")
            .args(["-W", "-f", "${Package}=${Version}\\n"])
            .args(TOOL_PACKAGES),
    )?;
    text.push_str(&versions);
    Ok(fnv1a(text.as_bytes()))
}

/// FNV-1a: stable across Rust releases, unlike `DefaultHasher`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().map_err(|e| Error::spawn(cmd, e))?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::Failed(format!("{cmd:?} exited with {status}")))
    }
}

/// Runs `cmd` to its end: its standard output, or an error with its status and standard
/// error.
pub(crate) fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().map_err(|e| Error::spawn(cmd, e))?;
    if !out.status.success() {
        return Err(Error::Failed(format!(
            "{cmd:?} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::fnv1a;

    #[test]
    fn fnv1a_matches_the_published_vectors() {
        // Test vectors of the FNV reference (draft-eastlake-fnv).
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x85944171f73967e8);
    }
}
