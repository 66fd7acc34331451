//! Small helpers shared by the attribute enums: nested lists, strings, fixed-size values.

use netlink_packet_core::{DecodeError, Emitable, Nla, NlaBuffer, NlasIterator, Parseable};

/// Parses every attribute of a nested list (or of a message body).
pub(crate) fn parse_list<A>(bytes: &[u8]) -> Result<Vec<A>, DecodeError>
where
    A: for<'a> Parseable<NlaBuffer<&'a [u8]>>,
{
    NlasIterator::new(bytes)
        .map(|nla| A::parse(&nla?))
        .collect()
}

/// Length of a list of attributes once emitted.
pub(crate) fn list_len<A: Nla>(attrs: &[A]) -> usize {
    attrs.iter().map(Emitable::buffer_len).sum()
}

/// Emits a list of attributes back to back.
///
/// Each header's type is rewritten with the attribute's whole `kind()`: netlink-packet-core
/// 0.9 sets `NLA_F_NESTED` by re-reading the type through a mask that also clears
/// `NLA_F_NET_BYTEORDER`, so an attribute carrying both flags (an unknown one decoded from
/// the wire) would otherwise lose one and not re-encode to itself.
pub(crate) fn emit_list<A: Nla>(attrs: &[A], buffer: &mut [u8]) {
    let mut at = 0;
    for a in attrs {
        let len = a.buffer_len();
        a.emit(&mut buffer[at..at + len]);
        buffer[at + 2..at + 4].copy_from_slice(&a.kind().to_ne_bytes());
        at += len;
    }
}

/// A NUL-terminated string's value length.
pub(crate) fn string_len(s: &str) -> usize {
    s.len() + 1
}

/// Writes a string and its terminating NUL.
pub(crate) fn emit_string(s: &str, buffer: &mut [u8]) {
    buffer[..s.len()].copy_from_slice(s.as_bytes());
    buffer[s.len()] = 0;
}

/// Reads a string up to its first NUL (the kernel pads names with NULs).
pub(crate) fn parse_string(value: &[u8]) -> Result<String, DecodeError> {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    String::from_utf8(value[..end].to_vec()).map_err(DecodeError::from)
}

/// Reads exactly `N` bytes.
pub(crate) fn parse_array<const N: usize>(
    value: &[u8],
    what: &str,
) -> Result<[u8; N], DecodeError> {
    value
        .try_into()
        .map_err(|_| DecodeError::from(format!("{what}: expected {N} bytes, got {}", value.len())))
}

/// Reads a big-endian u16 (ports).
pub(crate) fn parse_be16(value: &[u8], what: &str) -> Result<u16, DecodeError> {
    Ok(u16::from_be_bytes(parse_array(value, what)?))
}

/// Reads a native-endian u16.
pub(crate) fn parse_u16(value: &[u8], what: &str) -> Result<u16, DecodeError> {
    Ok(u16::from_ne_bytes(parse_array(value, what)?))
}

/// Reads a native-endian u32.
pub(crate) fn parse_u32(value: &[u8], what: &str) -> Result<u32, DecodeError> {
    Ok(u32::from_ne_bytes(parse_array(value, what)?))
}

/// Reads a native-endian u64.
pub(crate) fn parse_u64(value: &[u8], what: &str) -> Result<u64, DecodeError> {
    Ok(u64::from_ne_bytes(parse_array(value, what)?))
}

/// Reads one byte.
pub(crate) fn parse_u8(value: &[u8], what: &str) -> Result<u8, DecodeError> {
    Ok(u8::from_ne_bytes(parse_array(value, what)?))
}
