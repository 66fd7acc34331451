//! The kernel lab: a microVM with a real IPVS kernel, for tests and demos.
//!
//! Our machines' kernels have no IPVS and no dummy links, so everything that touches them runs
//! in a VM: Debian's cloud kernel with its modules, busybox and the real tools (`ipvsadm`,
//! `ipset`, `iptables`, `ip`, `conntrack`, `nft`), booted by QEMU under software emulation.
//!
//! # Layout
//! - [`image`]: builds and caches the base image from Debian packages (`image/build.sh`).
//! - [`payload`]: what one run adds: host programs at their host paths, their libraries, files.
//! - [`cpio`]: the initramfs archive format the payload is written in.
//! - [`vm`]: boots QEMU, streams the payload's output, returns its exit code.
//! - [`suite`]: builds every package's `lab` test target and runs them all in one VM.
//! - [`guest`]: helpers for the tests themselves, inside the guest (a fresh network
//!   namespace per test, shell helpers, named namespaces for pods and clients).
//! - [`net`]: pods on a bridge answering with their names, clients, TCP and UDP probes.
//! - [`report`]: the summary table of what tests tried and lost, printed after the tests.
//! - [`rng`]: a seeded generator for random runs replayed from their seed.
//!
//! # Writing a kernel test
//! A package declares a test target named `lab` that only builds with its `lab` feature, so
//! that a host `cargo test` skips it:
//!
//! ```toml
//! [features]
//! lab = []
//! [[test]]
//! name = "lab"
//! path = "tests/lab.rs"
//! required-features = ["lab"]
//! ```
//!
//! and writes ordinary tests that start in a namespace of their own:
//!
//! ```no_run
//! #[test]
//! fn ipvsadm_lists_a_service() {
//!     let _ns = lab::guest::Netns::fresh();
//!     lab::guest::sh("ipvsadm -A -t 10.0.0.1:80 -s rr");
//!     assert!(lab::guest::sh("ipvsadm -Sn").contains("-A -t 10.0.0.1:80 -s rr"));
//! }
//! ```
//!
//! `cargo run -p lab -- test` builds them and runs them in the VM.

pub mod churn;
pub mod controlplane;
pub mod cpio;
pub mod guest;
pub mod image;
pub mod net;
pub mod payload;
pub mod report;
pub mod rng;
pub mod suite;
pub mod vm;

use std::path::{Path, PathBuf};
use std::process::Command;

/// What can go wrong while building or running the lab.
#[derive(Debug)]
pub enum Error {
    /// A file could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A program could not be started.
    Spawn {
        /// The program.
        program: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The machine lacks something the lab needs.
    Setup(String),
    /// A step failed.
    Failed(String),
}

impl Error {
    fn io(path: &Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    fn spawn(cmd: &Command, source: std::io::Error) -> Self {
        Error::Spawn {
            program: cmd.get_program().to_string_lossy().into_owned(),
            source,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io { path, source } => write!(f, "{}: {source}", path.display()),
            Error::Spawn { program, source } => {
                write!(
                    f,
                    "cannot run {program}: {source} (run tests/setup.sh to install the lab's packages)"
                )
            }
            Error::Setup(m) | Error::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } | Error::Spawn { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The lab's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
