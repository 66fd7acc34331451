//! A deterministic, bounded mutation pass for CI, where cargo-fuzz does not run: seeded
//! byte flips, interesting values, truncations, insertions, splices and netlink length
//! corruptions of the seed files, from a fixed-seed PRNG so that a failure names a case
//! that replays. Shared by path with the agent's `fuzz_regressions` test.

/// The lab's seeded generator (SplitMix64): one seed, one sequence of mutations.
pub use lab::rng::Rng;

/// Values that break length and count arithmetic.
const INTERESTING: [u8; 8] = [0, 1, 3, 4, 0x7f, 0x80, 0xfe, 0xff];

/// Little-endian u16s that netlink length fields should not trust (0, below the header,
/// unaligned, just past the end, the maximum).
fn lengths(len_after: usize) -> [u16; 8] {
    let past = u16::try_from(len_after + 4).unwrap_or(u16::MAX);
    [0, 1, 3, 4, 5, past, past.wrapping_add(1), u16::MAX]
}

/// One mutation of `data`, chosen by `rng`; `others` are splice partners.
pub fn mutate(rng: &mut Rng, data: &[u8], others: &[Vec<u8>]) -> Vec<u8> {
    let mut out = data.to_vec();
    let rounds = 1 + rng.below(3);
    for _ in 0..rounds {
        match rng.below(8) {
            // Flip one bit.
            0 if !out.is_empty() => {
                let at = rng.below(out.len());
                out[at] ^= 1 << rng.below(8);
            }
            // An interesting byte.
            1 if !out.is_empty() => {
                let at = rng.below(out.len());
                out[at] = INTERESTING[rng.below(INTERESTING.len())];
            }
            // Truncate.
            2 => {
                let keep = rng.below(out.len() + 1);
                out.truncate(keep);
            }
            // Insert random bytes.
            3 => {
                let at = rng.below(out.len() + 1);
                let n = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                out.splice(at..at, bytes);
            }
            // Corrupt a netlink length field: attribute headers sit on 4-byte boundaries.
            4 if out.len() >= 2 => {
                let at = rng.below(out.len() / 4 + 1) * 4;
                if at + 2 <= out.len() {
                    let values = lengths(out.len() - at);
                    let v = values[rng.below(values.len())];
                    out[at..at + 2].copy_from_slice(&v.to_ne_bytes());
                }
            }
            // Duplicate a chunk (repeated attributes, nesting that grows).
            5 if !out.is_empty() => {
                let from = rng.below(out.len());
                let to = (from + 1 + rng.below(32)).min(out.len());
                let chunk = out[from..to].to_vec();
                let at = rng.below(out.len() + 1);
                out.splice(at..at, chunk);
            }
            // Splice in the tail of another seed.
            6 if !others.is_empty() => {
                let other = &others[rng.below(others.len())];
                let cut = rng.below(out.len() + 1);
                let from = rng.below(other.len() + 1);
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
            // Delete a range.
            _ if !out.is_empty() => {
                let from = rng.below(out.len());
                let to = (from + 1 + rng.below(16)).min(out.len());
                out.drain(from..to);
            }
            _ => {}
        }
    }
    out
}

/// Every file of `dir` (sorted by name), with its name.
pub fn files(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                bytes,
            )
        })
        .collect();
    out.sort();
    out
}

/// YAML and JSON fragments that steer a text parser into its corners: document markers,
/// anchors and merges, tags, block scalars, flow collections, numbers out of range.
const TOKENS: &[&str] = &[
    "---\n",
    "...\n",
    "--- ",
    "- ",
    ": ",
    "{",
    "}",
    "[",
    "]",
    ",",
    "&a ",
    "*a",
    "<<: *a\n",
    "!!binary ",
    "!!str ",
    "? ",
    "|\n",
    ">-\n",
    "\t",
    "\"",
    "'",
    "#",
    "\u{feff}",
    "\r\n",
    "-1",
    "0",
    "65536",
    "4294967296",
    "1e999",
    "-0.5",
    "null",
    "~",
    "true",
    "  ",
    "\n",
    "items: ",
    "kind: List\n",
    "kind: ServiceList\n",
    "apiVersion: v1\n",
    "0x1f",
    "10.96.0.300",
    "::1",
    "fe80::1%eth0",
    ".nan",
];

/// One mutation of manifest text: a token inserted or written over, a line dropped or
/// repeated, or one of [`mutate`]'s byte mutations.
pub fn mutate_text(rng: &mut Rng, data: &[u8], others: &[Vec<u8>]) -> Vec<u8> {
    let mut out = data.to_vec();
    match rng.below(4) {
        0 => {
            let token = TOKENS[rng.below(TOKENS.len())].as_bytes();
            let at = rng.below(out.len() + 1);
            out.splice(at..at, token.iter().copied());
        }
        1 => {
            let token = TOKENS[rng.below(TOKENS.len())].as_bytes();
            let at = rng.below(out.len() + 1);
            let end = (at + token.len()).min(out.len());
            out.splice(at..end, token.iter().copied());
        }
        2 => {
            let lines: Vec<&[u8]> = data.split_inclusive(|&b| b == b'\n').collect();
            if !lines.is_empty() {
                let pick = rng.below(lines.len());
                let repeat = rng.below(2) == 0;
                out = lines
                    .iter()
                    .enumerate()
                    .flat_map(|(i, line)| match (i == pick, repeat) {
                        (false, _) => vec![*line],
                        (true, true) => vec![*line, *line],
                        (true, false) => vec![],
                    })
                    .flatten()
                    .copied()
                    .collect();
            }
        }
        _ => out = mutate(rng, data, others),
    }
    out
}
