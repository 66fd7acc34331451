//! Whole documents in `ipset save` and `ipset restore` syntax (pure code, no FFI).
use std::collections::BTreeMap;

use crate::entry::{Entry, EntryOptions, Member, check_comment};
use crate::error::ParseError;
use crate::name::SetName;
use crate::op::Op;
use crate::set::{Header, Set, SetType};

/// Splits on whitespace; a `"…"` token keeps its spaces (its quotes are removed).
pub(crate) fn tokenize(line: &str) -> Result<Vec<String>, ParseError> {
    let mut tokens = Vec::new();
    let mut rest = line.trim_start();
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted
                .find('"')
                .ok_or_else(|| ParseError::new("a closing quote", line))?;
            tokens.push(quoted[..end].to_string());
            rest = &quoted[end + 1..];
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            tokens.push(rest[..end].to_string());
            rest = &rest[end..];
        }
        rest = rest.trim_start();
    }
    Ok(tokens)
}

fn name(s: &str) -> Result<SetName, ParseError> {
    SetName::new(s).map_err(|_| ParseError::new("a valid set name", s))
}

fn entry_options(tokens: &[String]) -> Result<EntryOptions, ParseError> {
    let mut o = EntryOptions::default();
    let mut it = tokens.iter();
    while let Some(key) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| ParseError::new(format!("a value after {key}"), key.as_str()))?;
        let num = || ParseError::new("a number", value.as_str());
        match key.as_str() {
            "timeout" => o.timeout = Some(value.parse().map_err(|_| num())?),
            "packets" => o.packets = Some(value.parse().map_err(|_| num())?),
            "bytes" => o.bytes = Some(value.parse().map_err(|_| num())?),
            "comment" => {
                check_comment(value).map_err(|what| ParseError::new(what, value.as_str()))?;
                o.comment = Some(value.clone());
            }
            other => return Err(ParseError::new("timeout, packets, bytes or comment", other)),
        }
    }
    Ok(o)
}

/// Parses `ipset save` output into sets, in order.
///
/// ```
/// let text = "create s hash:ip family inet hashsize 1024 maxelem 65536\nadd s 10.0.0.1\n";
/// let sets = libipset::parse_save(text).unwrap();
/// assert_eq!(sets[0].members.len(), 1);
/// assert_eq!(libipset::render_save(&sets), text);
/// ```
pub fn parse_save(text: &str) -> Result<Vec<Set>, ParseError> {
    let mut sets: Vec<Set> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = |e: ParseError| e.at_line(i + 1);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let tokens = tokenize(line).map_err(at)?;
        match tokens.first().map(String::as_str) {
            Some("create") if tokens.len() >= 3 => {
                let header = create_line(line, &tokens).map_err(at)?;
                sets.push(Set::new(header));
            }
            Some("add") if tokens.len() >= 3 => {
                let set = sets
                    .last_mut()
                    .filter(|s| s.header.name.as_str() == tokens[1])
                    .ok_or_else(|| at(ParseError::new("add after its set's create", line)))?;
                let entry = Entry::parse(set.header.set_type, &tokens[2]).map_err(at)?;
                let options = entry_options(&tokens[3..]).map_err(at)?;
                set.members.push(Member { entry, options });
            }
            _ => return Err(at(ParseError::new("a create or add line", line))),
        }
    }
    Ok(sets)
}

fn create_line(line: &str, tokens: &[String]) -> Result<Header, ParseError> {
    let set_type: SetType = tokens[2].parse()?;
    // Options are re-read from the line so a quoted value cannot shift them.
    let mut rest = line;
    for _ in 0..3 {
        rest = rest.trim_start();
        rest = &rest[rest.find(char::is_whitespace).unwrap_or(rest.len())..];
    }
    Header::parse_options(name(&tokens[1])?, set_type, rest)
}

/// Renders sets as `ipset save` does.
pub fn render_save(sets: &[Set]) -> String {
    sets.iter().map(ToString::to_string).collect()
}

/// Parses `ipset restore` input into operations.
///
/// Accepts the commands `create`, `add`, `del`, `destroy`, `flush`, `rename` and `swap` (and
/// their one-letter aliases `n a d x F e w`), blank lines, `#` comments and `COMMIT`. An
/// entry's shape depends on its set's type: sets created earlier in the input are known,
/// others are asked of `set_type_of` (for example [`crate::Session::header`]).
pub fn parse_restore(
    text: &str,
    mut set_type_of: impl FnMut(&SetName) -> Option<SetType>,
) -> Result<Vec<Op>, ParseError> {
    let mut known: BTreeMap<SetName, SetType> = BTreeMap::new();
    let mut ops = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = |e: ParseError| e.at_line(i + 1);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line == "COMMIT" {
            continue;
        }
        let tokens = tokenize(line).map_err(at)?;
        let arg = |n: usize| {
            tokens
                .get(n)
                .map(String::as_str)
                .ok_or_else(|| at(ParseError::new("more arguments", line)))
        };
        let cmd = arg(0)?;
        let op = match cmd {
            "create" | "n" | "-N" => {
                let h = create_line(line, &tokens).map_err(at)?;
                known.insert(h.name.clone(), h.set_type);
                Op::Create(h)
            }
            "add" | "a" | "-A" | "del" | "d" | "-D" => {
                let set = name(arg(1)?).map_err(at)?;
                let set_type = match known.get(&set) {
                    Some(t) => *t,
                    None => {
                        let t = set_type_of(&set)
                            .ok_or_else(|| at(ParseError::new("a known set", set.as_str())))?;
                        known.insert(set.clone(), t);
                        t
                    }
                };
                let entry = Entry::parse(set_type, arg(2)?).map_err(at)?;
                if matches!(cmd, "add" | "a" | "-A") {
                    let options = entry_options(&tokens[3..]).map_err(at)?;
                    Op::Add {
                        set,
                        member: Member { entry, options },
                    }
                } else {
                    Op::Del { set, entry }
                }
            }
            "destroy" | "x" | "-X" => Op::Destroy(name(arg(1)?).map_err(at)?),
            "flush" | "F" | "-F" => Op::Flush(name(arg(1)?).map_err(at)?),
            "rename" | "e" | "-E" => {
                let (from, to) = (name(arg(1)?).map_err(at)?, name(arg(2)?).map_err(at)?);
                if let Some(t) = known.remove(&from) {
                    known.insert(to.clone(), t);
                }
                Op::Rename { from, to }
            }
            "swap" | "w" | "-W" => {
                let (first, second) = (name(arg(1)?).map_err(at)?, name(arg(2)?).map_err(at)?);
                let (a, b) = (known.remove(&first), known.remove(&second));
                if let Some(t) = a {
                    known.insert(second.clone(), t);
                }
                if let Some(t) = b {
                    known.insert(first.clone(), t);
                }
                Op::Swap { first, second }
            }
            _ => return Err(at(ParseError::new("an ipset restore command", line))),
        };
        ops.push(op);
    }
    Ok(ops)
}

/// Renders operations as `ipset restore` input.
pub fn render_restore(ops: &[Op]) -> String {
    let mut out = String::new();
    for op in ops {
        out.push_str(&op.to_string());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Printed by `ipset save` (v7.17) for sets made with the ipset tool.
    const SAVED: &str = "\
create b hash:net family inet6 hashsize 1024 maxelem 65536 timeout 300 counters comment bucketsize 12 initval 0x328cbaca
add b fd00:1::1 timeout 299 packets 0 bytes 0
add b fd00::/64 timeout 99 packets 5 bytes 10 comment \"hello world\"
create c hash:ip,port family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0x8a737c2d
add c 10.0.0.1,udp:53
add c 10.0.0.1,sctp:5
create e hash:ip,port,net family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0xe216f621
add e 10.0.0.1,tcp:80,10.0.0.0/8
create f hash:net,port family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0xd2b90987
add f 10.0.0.0/8,udp:53
create h bitmap:port range 1000-2000 timeout 10 counters
add h 1500 timeout 9 packets 0 bytes 0
";

    #[test]
    fn save_text_round_trips_exactly() {
        let sets = parse_save(SAVED).unwrap();
        assert_eq!(sets.len(), 5);
        assert_eq!(
            sets[0].members[1].options.comment.as_deref(),
            Some("hello world")
        );
        assert_eq!(render_save(&sets), SAVED);
    }

    #[test]
    fn save_errors_carry_line_numbers() {
        let e = parse_save("create s hash:ip family inet\nadd s 10.0.0.1,tcp:80\n").unwrap_err();
        assert_eq!(e.line, Some(2));
        let e = parse_save("add s 10.0.0.1\n").unwrap_err();
        assert_eq!(e.line, Some(1));
        assert!(
            parse_save("create s hash:ip family inet\nadd s 1.2.3.4 comment \"open\n").is_err()
        );
    }

    #[test]
    fn restore_resolves_types_from_creates_renames_and_the_callback() {
        let text = "\
# comment
create t hash:ip family inet
add t 10.0.0.1
rename t u
add u 10.0.0.2
swap u v
add v 10.0.0.3
add w 80
del w 81
destroy t
COMMIT
";
        let mut asked = Vec::new();
        let ops = parse_restore(text, |n| {
            asked.push(n.to_string());
            Some(SetType::BitmapPort)
        })
        .unwrap();
        assert_eq!(asked, ["w"]);
        assert_eq!(ops.len(), 9);
        assert_eq!(ops[6], Op::add(&name("w").unwrap(), Entry::Port(80)));
        let expected: String = text
            .lines()
            .filter(|l| !l.starts_with('#') && *l != "COMMIT")
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(render_restore(&ops), expected);
    }

    #[test]
    fn restore_refuses_unknown_sets_and_commands() {
        assert!(parse_restore("add nope 1.2.3.4\n", |_| None).is_err());
        assert!(parse_restore("list\n", |_| None).is_err());
        assert!(parse_restore("add\n", |_| None).is_err());
    }

    #[test]
    fn tokenizer_keeps_quoted_spaces() {
        assert_eq!(
            tokenize(r#"add s 1.2.3.4 comment "a b"  timeout 3"#).unwrap(),
            ["add", "s", "1.2.3.4", "comment", "a b", "timeout", "3"]
        );
    }
}
