//! The API client kube-proxy would build: `--kubeconfig`, `--master`, `--kube-api-qps` and
//! `--kube-api-burst`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kube::Client;
use kube::client::ClientBuilder;
use kube::config::{Config, KubeConfigOptions, Kubeconfig};

use super::observe::{ApiObserver, ObserveLayer};
use super::rate::RateLimitLayer;
use super::{Error, Result};

/// Where the API server is and how to reach it: kube-proxy's `--kubeconfig`, `--master`,
/// `--kube-api-qps` and `--kube-api-burst`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientOptions {
    /// `--kubeconfig`: a kubeconfig file (its current context).
    pub kubeconfig: Option<PathBuf>,
    /// `--master`: the API server's URL, overriding the kubeconfig's server.
    pub master: Option<String>,
    /// `--kube-api-qps`: requests per second (kube-proxy's default is 5); zero or less
    /// means no limit.
    pub qps: f32,
    /// `--kube-api-burst`: requests allowed at once above `qps` (kube-proxy's default 10).
    pub burst: u32,
}

/// The client configuration kube-proxy would use: with neither option, the pod's
/// service-account (in-cluster) configuration; with `kubeconfig`, that file's current
/// context; `master` overrides the server URL (and alone gives an unauthenticated client of
/// that URL).
pub async fn config(options: &ClientOptions) -> Result<Config> {
    let master = options
        .master
        .as_deref()
        .filter(|m| !m.is_empty())
        .map(|url| {
            url.parse::<http::Uri>().map_err(|source| Error::Master {
                url: url.to_owned(),
                source,
            })
        })
        .transpose()?;
    let kubeconfig = options
        .kubeconfig
        .as_deref()
        .filter(|p| !p.as_os_str().is_empty());
    let mut config = match (kubeconfig, master.clone()) {
        (None, None) => Config::incluster().map_err(Error::InCluster)?,
        (None, Some(url)) => Config::new(url),
        (Some(path), _) => from_kubeconfig(path).await?,
    };
    if let Some(url) = master {
        config.cluster_url = url;
    }
    Ok(config)
}

async fn from_kubeconfig(path: &Path) -> Result<Config> {
    let failed = |source| Error::Kubeconfig {
        path: path.to_owned(),
        source,
    };
    let file = Kubeconfig::read_from(path).map_err(failed)?;
    Config::from_custom_kubeconfig(file, &KubeConfigOptions::default())
        .await
        .map_err(failed)
}

/// A client built from [`config`], its requests limited to `qps` and `burst` as client-go
/// limits kube-proxy's.
pub async fn client(options: &ClientOptions) -> Result<Client> {
    client_observed(options, None).await
}

/// [`client`], each request told to `observer` (its duration without the rate limit's wait,
/// as client-go's `rest_client_request_duration_seconds` counts it).
pub async fn client_observed(
    options: &ClientOptions,
    observer: Option<Arc<dyn ApiObserver>>,
) -> Result<Client> {
    let config = config(options).await?;
    let host = config
        .cluster_url
        .authority()
        .map(ToString::to_string)
        .unwrap_or_default();
    let builder = ClientBuilder::try_from(config).map_err(Error::Client)?;
    // Layers added later wrap those added earlier: the observer sits below the rate limit.
    let observe = observer.map(|o| ObserveLayer::new(o, &host));
    let builder = builder.with_layer(&tower::util::option_layer(observe));
    Ok(if options.qps > 0.0 {
        builder
            .with_layer(&RateLimitLayer::new(options.qps, options.burst))
            .build()
    } else {
        builder.build()
    })
}
