//! The text `iptables-restore --noflush` reads to write the agent's chains or take them away.
//! Neither ever flushes a chain the agent does not own.

use crate::model::kernel::{Jump, Rules, Table};

/// The `iptables-restore --noflush` input that makes the kernel hold `rules`: every chain of
/// the agent declared (which flushes it) and refilled, and each jump in `missing_jumps`
/// prepended to its built-in chain.
pub fn restore_input(rules: &Rules, missing_jumps: &[Jump]) -> String {
    let mut out = String::new();
    for table in Table::ALL {
        out.push_str(&format!("*{table}\n"));
        for (t, chain) in &rules.chains {
            if *t == table {
                out.push_str(&format!(":{chain} - [0:0]\n"));
            }
        }
        for (t, rule) in &rules.rules {
            if *t == table {
                out.push_str(rule);
                out.push('\n');
            }
        }
        for jump in missing_jumps.iter().filter(|j| j.table == table) {
            out.push_str(&format!("-I {} 1 {}\n", jump.chain, jump.spec()));
        }
        out.push_str("COMMIT\n");
    }
    out
}

/// The `iptables-restore --noflush` input that removes the agent's jumps and chains: each jump
/// deleted, then each chain flushed (by declaring it) and deleted.
pub fn removal_input(rules: &Rules) -> String {
    let mut out = String::new();
    for table in Table::ALL {
        out.push_str(&format!("*{table}\n"));
        for (t, chain) in &rules.chains {
            if *t == table {
                out.push_str(&format!(":{chain} - [0:0]\n"));
            }
        }
        for jump in rules.jumps.iter().filter(|j| j.table == table) {
            out.push_str(&format!("-D {} {}\n", jump.chain, jump.spec()));
        }
        for (t, chain) in &rules.chains {
            if *t == table {
                out.push_str(&format!("-X {chain}\n"));
            }
        }
        out.push_str("COMMIT\n");
    }
    out
}
