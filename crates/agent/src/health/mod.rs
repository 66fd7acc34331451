//! kube-proxy's health semantics: `/healthz` and `/livez` on `healthzBindAddress`, and the
//! per-Service health-check node ports of `externalTrafficPolicy: Local` load balancers.
//!
//! [`ProxyHealth`] is the pure state machine (time is an argument) of kube-proxy's
//! `ProxyHealthServer`: per IP family, the last successful sync and the oldest sync queued
//! since; a family is unhealthy once a queued sync has waited `2 × ipvs.syncPeriod`.
//! `/healthz` also needs the node to be eligible (not being deleted, no cluster-autoscaler
//! `ToBeDeletedByClusterAutoscaler` taint). [`Health`] shares it between the sync loop and
//! the servers; [`serve`] answers the three paths (`/readyz`, the agent's own, turns ready
//! after the first complete sync); [`ServiceHealthServers`] keeps one listener per
//! `healthCheckNodePort`.
//!
//! The port is public (`0.0.0.0:10256` by default), so it answers with kube-proxy's bodies and
//! nothing else: why the agent is unhealthy goes to the log and to `/metrics`, never to
//! whoever asks.

//! # Layout
//! - `state`: [`ProxyHealth`], the pure state machine, and its bodies.
//! - `go_time`: [`go_time_json`], times as Go prints them in those bodies.
//! - `shared`: [`Health`], the state shared by the sync loop and the servers.
//! - `serving`: [`handle`] and [`serve`], the healthz server's routes.
//! - `service_ports`: [`ServiceHealthServers`] and the answers of the health-check node ports.

mod go_time;
mod service_ports;
mod serving;
mod shared;
mod state;

pub use go_time::go_time_json;
pub use service_ports::{ServiceHealthServers, service_body, service_response};
pub use serving::{handle, serve};
pub use shared::Health;
pub use state::{ProxyHealth, TO_BE_DELETED_TAINT, Verdict};
