//! Field values as the API spells them, parsed into the model's types; a bad one is a
//! [`Reason`] naming the field.

use std::net::IpAddr;

use ipnet::IpNet;

use super::Reason;
use crate::model::snapshot::cluster::{Family, Protocol, TrafficPolicy};
use crate::sloppy_ip;

/// `field` is absent or empty.
pub(super) fn missing(field: impl Into<String>) -> Reason {
    Reason::Missing {
        field: field.into(),
    }
}

/// An address as kube-proxy reads it ([`crate::sloppy_ip`]: leading zeros as decimal,
/// IPv4-mapped IPv6 as IPv4).
pub(super) fn parse_ip(field: impl FnOnce() -> String, value: &str) -> Result<IpAddr, Reason> {
    sloppy_ip::parse_ip(value).ok_or_else(|| Reason::BadIp {
        field: field(),
        value: value.to_owned(),
    })
}

/// A CIDR as kube-proxy reads it, host bits masked off.
pub(super) fn parse_cidr(field: impl FnOnce() -> String, value: &str) -> Result<IpNet, Reason> {
    sloppy_ip::parse_cidr(value).ok_or_else(|| Reason::BadCidr {
        field: field(),
        value: value.to_owned(),
    })
}

pub(super) fn parse_port(field: impl FnOnce() -> String, value: i32) -> Result<u16, Reason> {
    match u16::try_from(value) {
        Ok(port) if port != 0 => Ok(port),
        _ => Err(Reason::BadPort {
            field: field(),
            value,
        }),
    }
}

pub(super) fn parse_protocol(
    field: impl FnOnce() -> String,
    value: Option<&str>,
) -> Result<Protocol, Reason> {
    match value {
        None | Some("TCP") => Ok(Protocol::Tcp),
        Some("UDP") => Ok(Protocol::Udp),
        Some("SCTP") => Ok(Protocol::Sctp),
        Some(other) => Err(Reason::UnknownProtocol {
            field: field(),
            value: other.to_owned(),
        }),
    }
}

pub(super) fn parse_policy(field: &str, value: Option<&str>) -> Result<TrafficPolicy, Reason> {
    match value {
        None | Some("") | Some("Cluster") => Ok(TrafficPolicy::Cluster),
        Some("Local") => Ok(TrafficPolicy::Local),
        Some(other) => Err(Reason::UnknownValue {
            field: field.to_owned(),
            value: other.to_owned(),
            expected: "Cluster or Local",
        }),
    }
}

pub(super) fn parse_family(field: impl FnOnce() -> String, value: &str) -> Result<Family, Reason> {
    match value {
        "IPv4" => Ok(Family::V4),
        "IPv6" => Ok(Family::V6),
        other => Err(Reason::UnknownValue {
            field: field(),
            value: other.to_owned(),
            expected: "IPv4 or IPv6",
        }),
    }
}
