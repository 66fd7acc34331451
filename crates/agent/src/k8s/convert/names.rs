//! The checks of names and labels the API server would make, and the one way a name from an
//! object is shown in a log line.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::Reason;

/// The namespace of an object whose manifest names none, as `kubectl apply` would use.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Checks a DNS label (RFC 1123): what the API allows for Service names and namespaces.
pub(super) fn dns_label(field: &str, value: &str) -> Result<(), Reason> {
    let ok = !value.is_empty()
        && value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !value.starts_with('-')
        && !value.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Reason::BadName {
            field: field.to_string(),
            value: cut(value),
        })
    }
}

/// The most characters of a name [`printable`] shows.
pub const PRINTABLE_MAX: usize = 253;

/// A name or other string from an object, made safe for one log line: control characters
/// (newlines included) escaped as Rust does (`\n`, `\u{1b}`), and cut after
/// [`PRINTABLE_MAX`] characters with the count of the rest. Names the API accepts come back
/// unchanged.
pub fn printable(value: &str) -> Cow<'_, str> {
    let long = value.chars().count() > PRINTABLE_MAX;
    if !long && !value.chars().any(char::is_control) {
        return Cow::Borrowed(value);
    }
    let mut out = String::new();
    for c in value.chars().take(PRINTABLE_MAX) {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    if long {
        let rest = value.chars().count() - PRINTABLE_MAX;
        out.push_str(&format!("...({rest} more characters)"));
    }
    Cow::Owned(out)
}

/// `value` cut to 100 characters, for a message.
pub(super) fn cut(value: &str) -> String {
    value.chars().take(100).collect()
}

/// Checks a DNS subdomain (RFC 1123): what the API allows for most object names.
pub(super) fn dns_subdomain(field: &str, value: &str) -> Result<(), Reason> {
    let ok = !value.is_empty()
        && value.len() <= 253
        && value.split('.').all(|part| dns_label(field, part).is_ok());
    if ok {
        Ok(())
    } else {
        Err(Reason::BadSubdomain {
            field: field.to_string(),
            value: cut(value),
        })
    }
}

/// A label value, or the name part of a label key: at most 63 characters of alphanumerics,
/// `-`, `_` and `.`, beginning and ending with an alphanumeric.
fn label_name_ok(value: &str) -> bool {
    let alnum = |c: Option<u8>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && alnum(value.bytes().next())
        && alnum(value.bytes().last())
}

/// Checks an object's labels as the API does: each key an optional DNS-subdomain prefix and
/// `/` and a name, each value empty or a name.
pub(super) fn labels(meta: &ObjectMeta) -> Result<(), Reason> {
    for (key, value) in meta.labels.iter().flatten() {
        let (prefix, name) = match key.rsplit_once('/') {
            Some((prefix, name)) => (Some(prefix), name),
            None => (None, key.as_str()),
        };
        let prefix_ok = prefix.is_none_or(|p| dns_subdomain("", p).is_ok());
        if !prefix_ok || !label_name_ok(name) {
            return Err(Reason::BadLabel {
                field: "metadata.labels".into(),
                what: "key",
                value: cut(key),
                prefix: "; an optional DNS-subdomain prefix and '/' before",
            });
        }
        if !value.is_empty() && !label_name_ok(value) {
            return Err(Reason::BadLabel {
                field: format!("metadata.labels[{}]", cut(key)),
                what: "value",
                value: cut(value),
                prefix: "",
            });
        }
    }
    Ok(())
}

/// The object's namespace; [`DEFAULT_NAMESPACE`] when it names none.
pub(super) fn namespace_of(meta: &ObjectMeta) -> &str {
    meta.namespace
        .as_deref()
        .filter(|ns| !ns.is_empty())
        .unwrap_or(DEFAULT_NAMESPACE)
}

/// Whether the object carries label `key`, whatever its value.
pub(super) fn has_label(meta: &ObjectMeta, key: &str) -> bool {
    meta.labels.as_ref().is_some_and(|l| l.contains_key(key))
}
