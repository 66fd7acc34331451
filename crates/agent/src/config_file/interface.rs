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

/// What is wrong with an interface name; the text is what the error log says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name is empty.
    #[error("must not be empty")]
    Empty,
    /// `.` or `..`.
    #[error("{name:?} is not an interface name")]
    Dots {
        /// The name.
        name: String,
    },
    /// A character an interface name cannot hold.
    #[error(
        "{name:?} contains {c:?}, which an interface name cannot hold (no white space, control characters, '/', ':', '+' or quotes)"
    )]
    Char {
        /// The name.
        name: String,
        /// The first such character.
        c: char,
    },
    /// Longer than its use allows.
    #[error("{name:?} is {} bytes long: an interface {} has at most {max}", name.len(), match usage {
        Use::Name => "name",
        Use::Prefix => "name prefix (the agent appends iptables' `+`)",
    })]
    TooLong {
        /// The name.
        name: String,
        /// What it is used as.
        usage: Use,
        /// The longest it may be.
        max: usize,
    },
    /// Starts with `!` or `-`, which iptables reads as a negation or an option.
    #[error("{name:?} starts with {:?}, which iptables reads as a negation or an option", &name[..1])]
    Leading {
        /// The name.
        name: String,
    },
}

/// Checks `name` as an interface name (or prefix); the error says what is wrong with it.
pub fn check(name: &str, usage: Use) -> Result<(), NameError> {
    let max = match usage {
        Use::Name => MAX_NAME,
        Use::Prefix => MAX_NAME - 1,
    };
    let name_ = || name.to_string();
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name == "." || name == ".." {
        return Err(NameError::Dots { name: name_() });
    }
    if let Some(c) = name
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '/' | ':' | '+' | '"' | '\''))
    {
        return Err(NameError::Char { name: name_(), c });
    }
    if name.len() > max {
        return Err(NameError::TooLong {
            name: name_(),
            usage,
            max,
        });
    }
    if name.starts_with(['!', '-']) {
        return Err(NameError::Leading { name: name_() });
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
        let char = |name: &str, c| NameError::Char {
            name: name.into(),
            c,
        };
        let long = |name: &str| NameError::TooLong {
            name: name.into(),
            usage: Use::Name,
            max: 15,
        };
        let dots = |name: &str| NameError::Dots { name: name.into() };
        let leading = |name: &str| NameError::Leading { name: name.into() };
        let x300 = "x".repeat(300);
        for (name, want) in [
            ("", NameError::Empty),
            ("cbr0 -j ACCEPT", char("cbr0 -j ACCEPT", ' ')),
            (
                "cbr0\n-A KUBE-POSTROUTING -j ACCEPT",
                char("cbr0\n-A KUBE-POSTROUTING -j ACCEPT", '\n'),
            ),
            ("cbr0\t", char("cbr0\t", '\t')),
            ("a-name-of-16-byt", long("a-name-of-16-byt")),
            (x300.as_str(), long(&x300)),
            (".", dots(".")),
            ("..", dots("..")),
            ("a/b", char("a/b", '/')),
            ("eth0:1", char("eth0:1", ':')),
            ("veth+", char("veth+", '+')),
            ("cbr0\"", char("cbr0\"", '"')),
            ("cbr\u{0}0", char("cbr\u{0}0", '\0')),
            ("-j", leading("-j")),
            ("!cbr0", leading("!cbr0")),
        ] {
            assert_eq!(check(name, Use::Name), Err(want), "{name:?}");
        }
    }

    #[test]
    fn a_prefix_leaves_room_for_the_wildcard() {
        assert_eq!(check("fifteen_bytes_x", Use::Name), Ok(()));
        let e = check("fifteen_bytes_x", Use::Prefix).unwrap_err();
        assert!(
            matches!(
                e,
                NameError::TooLong {
                    usage: Use::Prefix,
                    max: 14,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(check("veth -j ACCEPT", Use::Prefix).is_err());
    }
}
