//! What the API-server source cannot do at all: its [`Error`] and [`Result`].

use std::path::PathBuf;

use kube::config::{InClusterError, KubeconfigError};

/// What the API-server source cannot do at all.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Neither `--kubeconfig` nor `--master` was given and the agent is not in a pod.
    #[error(
        "cannot read the in-cluster configuration (outside a pod, give --kubeconfig or --master)"
    )]
    InCluster(#[source] InClusterError),
    /// The `--kubeconfig` file cannot be read or used.
    #[error("cannot use the kubeconfig {path}")]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: KubeconfigError,
    },
    /// `--master` is not a URL.
    #[error("--master {url:?} is not a URL")]
    Master {
        /// The value given.
        url: String,
        /// Why.
        #[source]
        source: http::uri::InvalidUri,
    },
    /// The client cannot be built from the configuration (TLS setup, for instance).
    #[error("cannot build the API client")]
    Client(#[source] kube::Error),
    /// The Node watch needs the node's name.
    #[error("the node name is empty: the API source watches the agent's own Node by name")]
    NoNodeName,
}

/// A `Result` whose error is this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
