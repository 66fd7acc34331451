//! The text `iptables-restore --noflush` reads to write the agent's chains or take them away.
//! Neither ever flushes a chain the agent does not own.

use crate::model::kernel::Rules;

/// The `iptables-restore --noflush` input that makes the kernel hold `rules`: every chain of
/// the agent declared (which flushes it) and refilled, and each jump in `missing_jumps`
/// prepended to its built-in chain.
pub fn restore_input(rules: &Rules, missing_jumps: &[(String, String)]) -> String {
    let mut out = String::new();
    for table in ["nat", "filter"] {
        out.push_str(&format!("*{table}\n"));
        for (t, chain) in &rules.chains {
            if t == table {
                out.push_str(&format!(":{chain} - [0:0]\n"));
            }
        }
        for (t, rule) in &rules.rules {
            if t == table {
                out.push_str(rule);
                out.push('\n');
            }
        }
        for (t, jump) in missing_jumps {
            if t == table {
                // "-A CHAIN rest" -> "-I CHAIN 1 rest"
                if let Some(rest) = jump.strip_prefix("-A ") {
                    let (chain, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                    out.push_str(&format!("-I {chain} 1 {tail}\n"));
                }
            }
        }
        out.push_str("COMMIT\n");
    }
    out
}

/// The `iptables-restore --noflush` input that removes the agent's jumps and chains: each jump
/// deleted, then each chain flushed (by declaring it) and deleted.
pub fn removal_input(rules: &Rules) -> String {
    let mut out = String::new();
    for table in ["nat", "filter"] {
        out.push_str(&format!("*{table}\n"));
        for (t, chain) in &rules.chains {
            if t == table {
                out.push_str(&format!(":{chain} - [0:0]\n"));
            }
        }
        for (t, jump) in &rules.jumps {
            if t == table
                && let Some(rest) = jump.strip_prefix("-A ")
            {
                out.push_str(&format!("-D {rest}\n"));
            }
        }
        for (t, chain) in &rules.chains {
            if t == table {
                out.push_str(&format!("-X {chain}\n"));
            }
        }
        out.push_str("COMMIT\n");
    }
    out
}
