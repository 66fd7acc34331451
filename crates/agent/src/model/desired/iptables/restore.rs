//! The text `iptables-restore --noflush` reads to write the agent's chains or take them away.
//! Neither ever flushes a chain the agent does not own.

use crate::model::kernel::{Jump, Rules, Table};

/// The `iptables-restore --noflush` input that makes the kernel hold `rules`: every chain of
/// the agent declared (which flushes it) and refilled, and each jump in `missing_jumps`
/// prepended to its built-in chain.
pub fn restore_input(rules: &Rules, missing_jumps: &[Jump]) -> String {
    by_table(rules, |table, out| {
        for (t, rule) in &rules.rules {
            if *t == table {
                out.push_str(rule);
                out.push('\n');
            }
        }
        for jump in missing_jumps.iter().filter(|j| j.table == table) {
            out.push_str(&format!("-I {} 1 {}\n", jump.chain, jump.spec()));
        }
    })
}

/// The `iptables-restore --noflush` input that removes the agent's jumps and chains: each jump
/// deleted, then each chain flushed (by declaring it) and deleted.
pub fn removal_input(rules: &Rules) -> String {
    by_table(rules, |table, out| {
        for jump in rules.jumps.iter().filter(|j| j.table == table) {
            out.push_str(&format!("-D {} {}\n", jump.chain, jump.spec()));
        }
        for chain in chains_of(rules, table) {
            out.push_str(&format!("-X {chain}\n"));
        }
    })
}

/// Each table in turn: its header, the agent's chains declared (which flushes them), what
/// `body` writes, and `COMMIT`.
fn by_table(rules: &Rules, mut body: impl FnMut(Table, &mut String)) -> String {
    let mut out = String::new();
    for table in Table::ALL {
        out.push_str(&format!("*{table}\n"));
        for chain in chains_of(rules, table) {
            out.push_str(&format!(":{chain} - [0:0]\n"));
        }
        body(table, &mut out);
        out.push_str("COMMIT\n");
    }
    out
}

/// The agent's chains of `table`.
fn chains_of(rules: &Rules, table: Table) -> impl Iterator<Item = &String> {
    rules
        .chains
        .iter()
        .filter(move |(t, _)| *t == table)
        .map(|(_, c)| c)
}
