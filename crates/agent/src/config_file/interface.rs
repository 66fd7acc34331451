//! Interface names from the configuration (`detectLocal.bridgeInterface`,
//! `detectLocal.interfaceNamePrefix`), checked before they reach the iptables-restore input,
//! where a space or a newline would start another argument or another rule.
//!
//! The rules are the kernel's (`dev_valid_name`): 1 to 15 bytes (`IFNAMSIZ` is 16 with the
//! NUL), not `.` or `..`, no `/`, `:` or white space. On top of them, what iptables reads
//! differently from a plain name: a `+` (iptables' wildcard: the agent appends it to a prefix
//! itself, and in a bridge's name it would match every interface starting with the rest),
//! quotes (iptables-restore's own quoting), control characters, and a leading `!` or `-`
//! (a negation or an option to iptables' parser).

/// The longest interface name the kernel takes (`IFNAMSIZ` - 1).
pub const MAX_NAME: usize = 15;

/// What the name is used as, which sets its longest length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Use {
    /// A whole interface name (`-i cbr0`).
    Name,
    /// A prefix the agent appends iptables' `+` to (`-i veth+`): iptables takes at most
    /// [`MAX_NAME`] bytes with the `+`, so one fewer.
    Prefix,
}

/// Checks `name` as an interface name (or prefix); the error says what is wrong with it.
pub fn check(name: &str, usage: Use) -> Result<(), String> {
    let max = match usage {
        Use::Name => MAX_NAME,
        Use::Prefix => MAX_NAME - 1,
    };
    if name.is_empty() {
        return Err("must not be empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("{name:?} is not an interface name"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '/' | ':' | '+' | '"' | '\''))
    {
        return Err(format!(
            "{name:?} contains {c:?}, which an interface name cannot hold (no white space, control characters, '/', ':', '+' or quotes)"
        ));
    }
    if name.len() > max {
        return Err(format!(
            "{name:?} is {} bytes long: an interface {} has at most {max}",
            name.len(),
            match usage {
                Use::Name => "name",
                Use::Prefix => "name prefix (the agent appends iptables' `+`)",
            }
        ));
    }
    if name.starts_with(['!', '-']) {
        return Err(format!(
            "{name:?} starts with {:?}, which iptables reads as a negation or an option",
            &name[..1]
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_names_and_prefixes_pass() {
        for name in [
            "cbr0",
            "cni0",
            "br-1a2b3c4d5e6f",
            "docker0",
            "eth0.100",
            "ens3f0np0",
        ] {
            assert_eq!(check(name, Use::Name), Ok(()), "{name}");
        }
        for prefix in ["veth", "cali", "lxc", "tap", "v", "fourteen_bytes"] {
            assert_eq!(check(prefix, Use::Prefix), Ok(()), "{prefix}");
        }
    }

    #[test]
    fn hostile_names_are_refused_with_the_reason() {
        for (name, says) in [
            ("", "empty"),
            ("cbr0 -j ACCEPT", "' '"),
            ("cbr0\n-A KUBE-POSTROUTING -j ACCEPT", "'\\n'"),
            ("cbr0\t", "'\\t'"),
            ("a-name-of-16-byt", "16 bytes"),
            ("x".repeat(300).as_str(), "300 bytes"),
            (".", "not an interface name"),
            ("..", "not an interface name"),
            ("a/b", "'/'"),
            ("eth0:1", "':'"),
            ("veth+", "'+'"),
            ("cbr0\"", "'\"'"),
            ("cbr\u{0}0", "'\\0'"),
            ("-j", "option"),
            ("!cbr0", "negation"),
        ] {
            let e = check(name, Use::Name).unwrap_err();
            assert!(e.contains(says), "{name:?}: {e}");
        }
    }

    #[test]
    fn a_prefix_leaves_room_for_the_wildcard() {
        assert_eq!(check("fifteen_bytes_x", Use::Name), Ok(()));
        let e = check("fifteen_bytes_x", Use::Prefix).unwrap_err();
        assert!(e.contains("at most 14"), "{e}");
        assert!(check("veth -j ACCEPT", Use::Prefix).is_err());
    }
}
