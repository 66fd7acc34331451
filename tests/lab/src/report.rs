//! A summary table of what kernel tests tried and what they lost, printed by `lab test` after
//! the last test binary (the reliability suite's table), and written to `RELIABILITY.md` at
//! the repository root by `lab test --reliability-table RELIABILITY.md`.
//!
//! A test opens a [`Row`], fills in what it tried and what was lost as it goes, and the row is
//! written when it is dropped: `pass` when the test got there, `FAILED` when the test panicked
//! (so a failing test still shows what it had tried). Rows from tests running in parallel are
//! appended to one file with single `write` calls, so they never interleave.
//!
//! Every row is one of [`SCENARIOS`]: a row of another name panics when it is opened, and the
//! host test `the_committed_table_has_one_row_per_scenario` fails while the committed
//! `RELIABILITY.md` lacks a scenario's row (or keeps one the suite no longer has), so an
//! operator reading that file reads the whole suite.

use std::io::Write;

/// The file rows are appended to, inside the guest.
pub const REPORT_FILE: &str = "/run/lab-report.md";

/// The table's header, as printed above the rows.
pub const HEADER: &str = "| area | scenario | tried | lost | result |\n|---|---|---|---|---|";

/// The line `lab test` prints above the table.
pub const TITLE: &str = "Summary table (lab::report):";

/// The reliability suite's scenarios, `(area, scenario)`: one row each in the table.
pub const SCENARIOS: &[(&str, &str)] = &[
    ("api", "outage of the API server"),
    ("api", "410 Gone and dropped watches"),
    ("api", "partial lists (pages of 7)"),
    ("api", "burst of 10,000 events"),
    (
        "bad input",
        "malformed Services and EndpointSlices beside good ones",
    ),
    ("crash", "kill -9 during a cold sync, restart"),
    ("crash", "kill -9 during a cold sync of 300 Services"),
    ("drift", "ipvsadm -D of a virtual server"),
    ("drift", "ipvsadm -e of a real server's weight"),
    ("drift", "ipset flush KUBE-CLUSTER-IP"),
    ("drift", "ipset add of a foreign entry to KUBE-CLUSTER-IP"),
    (
        "drift",
        "ipset destroy KUBE-IPVS-OWNED (no rule matches it)",
    ),
    (
        "drift",
        "ipset destroy KUBE-NODE-PORT-TCP after deleting the rule that matches it",
    ),
    (
        "drift",
        "iptables -D of the PREROUTING -> KUBE-SERVICES jump",
    ),
    (
        "drift",
        "iptables -F + -X of KUBE-POSTROUTING after deleting its POSTROUTING jump",
    ),
    (
        "drift",
        "iptables -F + -X of KUBE-LOAD-BALANCER (nothing jumps to it)",
    ),
    ("drift", "iptables -F of KUBE-FORWARD (filter)"),
    ("drift", "ip addr del of a ClusterIP from kube-ipvs0"),
    ("drift", "ip link del kube-ipvs0"),
    ("drift", "sysctl net.ipv4.vs.conntrack=0"),
    (
        "injection",
        "hostile names, namespaces, port names, annotations",
    ),
    ("kernel refusal", "scheduler module missing"),
    ("kernel refusal", "ipset at maxelem"),
    (
        "kernel hazard",
        "lblc module not loaded (IPVS would load it under its lock)",
    ),
    (
        "kernel hazard",
        "a Service annotated lblc, its module not loaded",
    ),
    (
        "kernel hazard",
        "Services annotated with names that are no scheduler (ftp, pe_sip)",
    ),
    (
        "kernel hazard",
        "another namespace adding and deleting virtual servers during our dumps",
    ),
    (
        "privilege",
        "only CAP_NET_ADMIN + CAP_NET_RAW (uid 0 and uid 65534)",
    ),
    ("restart", "SIGTERM restart"),
    ("restart", "kill -9 restart"),
    ("restart", "binary upgrade"),
    ("restart", "restart with a Service changed while down"),
    (
        "soak",
        "random churn, the API server restarted twice: the kernel state against a fresh build",
    ),
    (
        "soak",
        "random churn, the API server restarted twice: memory, file descriptors and netlink sockets",
    ),
];

/// One row of the summary table, written when dropped.
#[derive(Debug)]
pub struct Row {
    area: String,
    scenario: String,
    tried: String,
    lost: String,
    failed: bool,
}

impl Row {
    /// A row for `scenario` of `area`, with nothing tried yet. Panics when the pair is not
    /// one of [`SCENARIOS`]: a new scenario is added there, and its row to `RELIABILITY.md`
    /// by the next full run.
    pub fn new(area: &str, scenario: &str) -> Row {
        assert!(
            SCENARIOS.contains(&(area, scenario)),
            "the reliability scenario ({area:?}, {scenario:?}) is not in lab::report::SCENARIOS: \
             add it there, and its row to RELIABILITY.md from a full run (CONTRIBUTING.md, \"The reliability table\")"
        );
        Row::unlisted(area, scenario)
    }

    fn unlisted(area: &str, scenario: &str) -> Row {
        Row {
            area: area.into(),
            scenario: scenario.into(),
            tried: String::new(),
            lost: "-".into(),
            failed: false,
        }
    }

    /// Marks the row FAILED whatever the test does next: a test with two rows judges each on
    /// its own, then asserts. A row is also FAILED when it is dropped while the test panics.
    pub fn fail(&mut self) {
        self.failed = true;
    }

    /// Says what was tried (e.g. "20 kills of a cold sync of 10000 Services").
    pub fn tried(&mut self, what: impl Into<String>) {
        self.tried = what.into();
    }

    /// Says what was lost (e.g. "0 of 4812 connections"); "-" until set.
    pub fn lost(&mut self, what: impl Into<String>) {
        self.lost = what.into();
    }

    /// FAILED once [`Row::fail`] was called or while the thread panics, else pass.
    fn verdict(&self) -> &'static str {
        if self.failed || std::thread::panicking() {
            "FAILED"
        } else {
            "pass"
        }
    }

    /// The row as a Markdown table line (`|` in cells escaped).
    pub fn line(&self, result: &str) -> String {
        let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
        format!(
            "| {} | {} | {} | {} | {} |\n",
            cell(&self.area),
            cell(&self.scenario),
            cell(&self.tried),
            cell(&self.lost),
            result
        )
    }
}

impl Drop for Row {
    fn drop(&mut self) {
        let line = self.line(self.verdict());
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(REPORT_FILE)
        {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// The shell lines `lab test` ends its guest script with: the table, sorted, when a test wrote
/// a row.
pub fn print_script() -> String {
    let header = HEADER.replace('\n', "\\n");
    format!(
        "if [ -s {REPORT_FILE} ]; then\n  echo\n  echo '{TITLE}'\n  printf '{header}\\n'\n  sort {REPORT_FILE}\nfi\n"
    )
}

/// Collects the table from the lines `lab test` streams: the header and the rows after
/// [`TITLE`], up to the first line that is not a table line.
#[derive(Debug, Default)]
pub struct Collector {
    started: bool,
    done: bool,
    lines: Vec<String>,
}

impl Collector {
    /// Takes one line of the guest's output.
    pub fn line(&mut self, line: &str) {
        if self.done {
            return;
        }
        if !self.started {
            self.started = line.trim_end() == TITLE;
        } else if line.starts_with('|') {
            self.lines.push(line.trim_end().to_string());
        } else if !self.lines.is_empty() {
            self.done = true;
        }
    }

    /// The table (header and rows), if the run printed one.
    pub fn table(&self) -> Option<String> {
        (!self.lines.is_empty()).then(|| self.lines.join("\n") + "\n")
    }
}

/// The line that says when and from what the table was made: `Run: 2026-11-26, commit
/// 1be7bd8.`, with a placeholder when the commit is not known (no git, not a checkout), so a
/// reader never takes an old table for a new one.
pub fn run_line(date: &str, commit: Option<&str>) -> String {
    match commit {
        Some(commit) => format!("Run: {date}, commit {commit}."),
        None => format!("Run: {date}, commit unknown (`git rev-parse` failed where it ran)."),
    }
}

/// Today's date in UTC, `YYYY-MM-DD`, from the system clock.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    civil_date(secs / 86_400)
}

/// The proleptic Gregorian date `days` days after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`), so the lab needs no date crate.
fn civil_date(days: u64) -> String {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The checkout's commit (`git rev-parse --short HEAD`), marked when the tree has changes
/// not committed; `None` when git cannot say.
pub fn head_commit() -> Option<String> {
    let git = |args: &[&str]| std::process::Command::new("git").args(args).output().ok();
    let out = git(&["rev-parse", "--short", "HEAD"]).filter(|o| o.status.success())?;
    let commit = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if commit.is_empty() {
        return None;
    }
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|o| o.status.success() && !o.stdout.is_empty());
    Some(if dirty {
        format!("{commit} with uncommitted changes")
    } else {
        commit
    })
}

/// The `RELIABILITY.md` file for `table`: what it is and how it was made (`run`, from
/// [`run_line`]), then the table.
pub fn document(table: &str, kernel: &str, run: &str) -> String {
    format!(
        "# Reliability\n\n\
         What the reliability suite (`crates/agent/tests/reliability/`, two kernel tests of\n\
         `crates/agent/tests/lab.rs` and the soak of `tests/peers/tests/soak/`) did to the agent in\n\
         the lab VM (kernel {kernel}) and what was lost: one row per scenario, the last column the verdict (`pass`, or `FAILED` when the\n\
         test failed). Written by `lab test --reliability-table RELIABILITY.md` (CONTRIBUTING.md, \"The\n\
         reliability table\"); `tests/run.sh` checks that it has one row per scenario of the suite.\n\n\
         {run}\n\n\
         {table}"
    )
}

/// One table from the shards of a run too long for one sitting: each shard a document that
/// [`document`] wrote for part of the suite (`lab test --reliability-table` with a filter).
/// The shards must name one commit, without uncommitted changes, and one kernel, and no
/// scenario may have a row in two of them; the merged document says it was made in shards,
/// and on which days.
pub fn merge(shards: &[String]) -> Result<String, String> {
    let field = |doc: &str, start: &str, end: char| -> Option<String> {
        let at = doc.find(start)? + start.len();
        Some(doc[at..].split(end).next()?.to_string())
    };
    let mut commit = None;
    let mut kernel = None;
    let mut dates = std::collections::BTreeSet::new();
    let mut lines: Vec<String> = Vec::new();
    for (i, doc) in shards.iter().enumerate() {
        let shard = i + 1;
        let run = doc
            .lines()
            .find(|l| l.starts_with("Run: "))
            .ok_or(format!("shard {shard}: no `Run:` line"))?;
        let (date, rest) = run["Run: ".len()..]
            .split_once(", commit ")
            .ok_or(format!("shard {shard}: {run:?} names no commit"))?;
        let c = rest.trim_end_matches('.').to_string();
        if c.contains(' ') {
            return Err(format!(
                "shard {shard}: {run:?}: not a committed tree, or a merged table"
            ));
        }
        let k = field(doc, "(kernel ", ')').ok_or(format!("shard {shard}: no kernel named"))?;
        if commit.get_or_insert_with(|| c.clone()) != &c {
            return Err(format!(
                "shard {shard} ran commit {c}, another shard {commit:?}"
            ));
        }
        if kernel.get_or_insert_with(|| k.clone()) != &k {
            return Err(format!(
                "shard {shard} ran kernel {k}, another shard {kernel:?}"
            ));
        }
        dates.insert(date.to_string());
        lines.extend(
            doc.lines()
                .filter(|l| l.starts_with("| ") && !l.starts_with("| area |"))
                .map(str::to_string),
        );
    }
    let (commit, kernel) = commit.zip(kernel).ok_or("no shard")?;
    lines.sort();
    let table = format!("{HEADER}\n{}\n", lines.join("\n"));
    let mut seen = std::collections::BTreeSet::new();
    for (area, scenario, _) in rows(&table) {
        if !seen.insert((area.clone(), scenario.clone())) {
            return Err(format!("({area:?}, {scenario:?}) has a row in two shards"));
        }
    }
    let dates: Vec<String> = dates.into_iter().collect();
    let run = format!(
        "Run: {}, commit {commit}, in {} shards.",
        dates.join(" and "),
        shards.len()
    );
    Ok(document(&table, &kernel, &run))
}

/// The rows of a table: `(area, scenario, result)`, cells unescaped.
pub fn rows(table: &str) -> Vec<(String, String, String)> {
    table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| area |"))
        .filter_map(|l| {
            // Split on "|" not escaped as "\|".
            let mut cells = Vec::new();
            let mut cell = String::new();
            let mut chars = l.trim().trim_start_matches('|').chars().peekable();
            while let Some(c) = chars.next() {
                match c {
                    '\\' if chars.peek() == Some(&'|') => {
                        cell.push('|');
                        chars.next();
                    }
                    '|' => cells.push(std::mem::take(&mut cell).trim().to_string()),
                    _ => cell.push(c),
                }
            }
            (cells.len() == 5).then(|| (cells[0].clone(), cells[1].clone(), cells[4].clone()))
        })
        .collect()
}

/// What is wrong with `table` as the suite's whole table: a scenario without its row, a row
/// twice, a row of no scenario, a row without a verdict. Empty when it is right.
pub fn problems(table: &str) -> Vec<String> {
    let rows = rows(table);
    let mut out = Vec::new();
    for (area, scenario) in SCENARIOS {
        match rows
            .iter()
            .filter(|(a, s, _)| a == area && s == scenario)
            .count()
        {
            1 => {}
            0 => out.push(format!("no row for ({area:?}, {scenario:?})")),
            n => out.push(format!("{n} rows for ({area:?}, {scenario:?})")),
        }
    }
    for (area, scenario, result) in &rows {
        if !SCENARIOS.contains(&(area.as_str(), scenario.as_str())) {
            out.push(format!(
                "a row for ({area:?}, {scenario:?}), which is no scenario of the suite"
            ));
        }
        if result != "pass" && result != "FAILED" {
            out.push(format!("({area:?}, {scenario:?}): verdict {result:?}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_escapes_its_cells() {
        let mut row = Row::unlisted("drift", "a | b");
        row.tried("x\ny");
        assert_eq!(row.line("pass"), "| drift | a \\| b | x y | - | pass |\n");
        std::mem::forget(row);
    }

    #[test]
    fn a_row_told_it_failed_says_so_without_a_panic() {
        let mut row = Row::unlisted("soak", "s");
        assert_eq!(row.verdict(), "pass");
        row.fail();
        assert_eq!(row.verdict(), "FAILED");
        std::mem::forget(row);
    }

    #[test]
    fn a_row_of_no_scenario_panics() {
        let opened = std::panic::catch_unwind(|| {
            std::mem::forget(Row::new("drift", "something new"));
        });
        assert!(opened.is_err());
    }

    #[test]
    fn rows_are_read_back_with_their_escapes() {
        let mut row = Row::unlisted("drift", "a | b");
        row.tried("t");
        let table = format!("{HEADER}\n{}", row.line("pass"));
        std::mem::forget(row);
        assert_eq!(
            rows(&table),
            [("drift".to_string(), "a | b".to_string(), "pass".to_string())]
        );
    }

    #[test]
    fn the_collector_takes_the_table_after_its_title() {
        let mut c = Collector::default();
        for l in [
            "| not this |",
            TITLE,
            "| area | x |",
            "|---|",
            "| a | b |",
            "lab: VM",
            "| no |",
        ] {
            c.line(l);
        }
        assert_eq!(c.table().unwrap(), "| area | x |\n|---|\n| a | b |\n");
    }

    #[test]
    fn a_table_missing_a_scenario_or_with_an_unknown_one_has_problems() {
        let full: String = SCENARIOS
            .iter()
            .map(|(a, s)| Row::unlisted(a, s))
            .map(|r| {
                let line = r.line("pass");
                std::mem::forget(r);
                line
            })
            .collect();
        assert_eq!(problems(&full), Vec::<String>::new());
        let first = full.lines().next().unwrap();
        let missing = full.replacen(&format!("{first}\n"), "", 1);
        assert_eq!(problems(&missing).len(), 1, "{:?}", problems(&missing));
        let extra = format!("{full}| drift | rm -rf / | - | - | pass |\n");
        assert_eq!(problems(&extra).len(), 1);
    }

    /// The committed `RELIABILITY.md` (repository root) has one row per scenario of the suite.
    #[test]
    fn the_committed_table_has_one_row_per_scenario() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../RELIABILITY.md");
        let text = std::fs::read_to_string(path).expect("RELIABILITY.md at the repository root");
        let problems = problems(&text);
        assert!(
            problems.is_empty(),
            "RELIABILITY.md does not match the reliability suite (rerun it: CONTRIBUTING.md, \"The reliability table\"):\n{}",
            problems.join("\n")
        );
    }

    #[test]
    fn the_document_says_when_and_from_which_commit_it_was_run() {
        assert_eq!(civil_date(0), "1970-01-01");
        assert_eq!(civil_date(20_418), "2025-11-26");
        assert_eq!(civil_date(11_016), "2000-02-29");
        let table = format!("{HEADER}\n");
        let doc = document(&table, "6.1", &run_line("2026-11-26", Some("1be7bd8")));
        assert!(
            doc.contains("\n\nRun: 2026-11-26, commit 1be7bd8.\n\n| area |"),
            "{doc}"
        );
        assert!(run_line("2026-11-26", None).contains("commit unknown"));
        // The check of the committed file reads the rows only: the line changes nothing.
        assert_eq!(rows(&doc), rows(&table));
    }

    #[test]
    fn shards_of_one_commit_merge_and_others_do_not() {
        let row = |scenario: &str| {
            let r = Row::unlisted("drift", scenario);
            let line = r.line("pass");
            std::mem::forget(r);
            line
        };
        let shard = |date: &str, commit: &str, kernel: &str, rows: &[&str]| {
            let table = format!(
                "{HEADER}\n{}",
                rows.iter().map(|s| row(s)).collect::<String>()
            );
            document(&table, kernel, &run_line(date, Some(commit)))
        };
        let a = shard("2026-11-30", "abc1234", "6.1", &["b", "a"]);
        let b = shard("2026-12-01", "abc1234", "6.1", &["c"]);
        let merged = merge(&[a.clone(), b.clone()]).unwrap();
        assert!(
            merged.contains("Run: 2026-11-30 and 2026-12-01, commit abc1234, in 2 shards."),
            "{merged}"
        );
        let names: Vec<String> = rows(&merged).into_iter().map(|r| r.1).collect();
        assert_eq!(names, ["a", "b", "c"]);
        for (bad, why) in [
            (shard("2026-12-01", "def5678", "6.1", &["c"]), "commit"),
            (shard("2026-12-01", "abc1234", "6.12", &["c"]), "kernel"),
            (shard("2026-12-01", "abc1234", "6.1", &["a"]), "two shards"),
            (
                shard(
                    "2026-12-01",
                    "abc1234 with uncommitted changes",
                    "6.1",
                    &["c"],
                ),
                "not a committed tree",
            ),
        ] {
            let e = merge(&[a.clone(), bad]).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        }
        // A merged table is no shard: its rows would be counted twice.
        assert!(merge(&[merged, b]).is_err());
    }

    #[test]
    fn the_script_prints_the_header_and_sorted_rows() {
        let dir = std::env::temp_dir().join(format!("lab-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("r.md");
        std::fs::write(&file, "| b |\n| a |\n").unwrap();
        let script = print_script().replace(REPORT_FILE, &file.to_string_lossy());
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &script])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.ends_with(&format!("{HEADER}\n| a |\n| b |\n")),
            "{text}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
