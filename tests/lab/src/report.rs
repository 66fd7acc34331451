//! A summary table of what kernel tests tried and what they lost, printed by `lab test` after
//! the last test binary (the reliability suite's table).
//!
//! A test opens a [`Row`], fills in what it tried and what was lost as it goes, and the row is
//! written when it is dropped: `pass` when the test got there, `FAILED` when the test panicked
//! (so a failing test still shows what it had tried). Rows from tests running in parallel are
//! appended to one file with single `write` calls, so they never interleave.

use std::io::Write;

/// The file rows are appended to, inside the guest.
pub const REPORT_FILE: &str = "/run/lab-report.md";

/// The table's header, as printed above the rows.
pub const HEADER: &str = "| area | scenario | tried | lost | result |\n|---|---|---|---|---|";

/// One row of the summary table, written when dropped.
#[derive(Debug)]
pub struct Row {
    area: String,
    scenario: String,
    tried: String,
    lost: String,
}

impl Row {
    /// A row for `scenario` of `area`, with nothing tried yet.
    pub fn new(area: &str, scenario: &str) -> Row {
        Row {
            area: area.into(),
            scenario: scenario.into(),
            tried: String::new(),
            lost: "-".into(),
        }
    }

    /// Says what was tried (e.g. "20 kills of a cold sync of 10000 Services").
    pub fn tried(&mut self, what: impl Into<String>) {
        self.tried = what.into();
    }

    /// Says what was lost (e.g. "0 of 4812 connections"); "-" until set.
    pub fn lost(&mut self, what: impl Into<String>) {
        self.lost = what.into();
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
        let result = if std::thread::panicking() {
            "FAILED"
        } else {
            "pass"
        };
        let line = self.line(result);
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
        "if [ -s {REPORT_FILE} ]; then\n  echo\n  echo 'Summary table (lab::report):'\n  printf '{header}\\n'\n  sort {REPORT_FILE}\nfi\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_escapes_its_cells() {
        let mut row = Row::new("drift", "a | b");
        row.tried("x\ny");
        assert_eq!(row.line("pass"), "| drift | a \\| b | x y | - | pass |\n");
        std::mem::forget(row);
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
