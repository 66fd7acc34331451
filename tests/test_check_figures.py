"""tests/check_figures.py: a measured figure on a page is in the committed result it names."""

import pathlib
import sys
import tempfile
import unittest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import check_figures  # noqa: E402


class CheckFigures(unittest.TestCase):
    def problems(self, page, allowed=""):
        root = pathlib.Path(tempfile.mkdtemp())
        (root / "docs").mkdir()
        (root / "BENCHMARKS.md").write_text("| `beside_agent_peak_rss_mib_10k` | 58.3 MiB |\n| cold | 12.07 s |\n")
        (root / "docs/page.md").write_text(page)
        (root / "allowed.txt").write_text(allowed)
        allowed = check_figures.load_allowed(root / "allowed.txt")
        return check_figures.check(root, [root / "docs/page.md"], allowed)

    def test_a_figure_its_result_holds_passes(self):
        self.assertEqual(self.problems("The agent peaked at 58.3 MiB and synced in 12.07 s (BENCHMARKS.md).\n"), [])

    def test_a_stale_figure_fails(self):
        # The run moved on (58.3 MiB now), the page still says what an older run gave.
        problems = self.problems("The agent peaked at 83.8 MiB\nat 10,000 Services (BENCHMARKS.md).\n")
        self.assertEqual(len(problems), 1)
        self.assertIn("docs/page.md:1: '83.8 MiB' is not in BENCHMARKS.md", problems[0])

    def test_a_figure_that_names_no_result_fails(self):
        problems = self.problems("Intro.\n\nThe swap took 21.5 s.\n")
        self.assertEqual(len(problems), 1)
        self.assertIn("docs/page.md:3: the measured figure '21.5 s' names no committed result", problems[0])

    def test_each_end_of_a_range_is_checked(self):
        self.assertEqual(len(self.problems("Between 12.07-13.5 s (BENCHMARKS.md).\n")), 1)

    def test_settings_backticks_and_generated_blocks_are_not_measurements(self):
        page = ("Every 30 s, `--ipvs-min-sync-period 1.5s`, 128Mi.\n\n"
                "<!-- sizing: written by bench/plot.py from bench/results.json; edit those, not this -->\n"
                "| x | 99.9 MiB |\n<!-- end sizing -->\n")
        self.assertEqual(self.problems(page), [])

    def test_an_allowed_figure_passes_and_a_stale_allowance_fails(self):
        allowed = "docs/page.md\t16.384 s\tthe last histogram bucket\n"
        self.assertEqual(self.problems("Buckets to 16.384 s.\n", allowed), [])
        problems = self.problems("Buckets to 32.768 s.\n", allowed)
        self.assertTrue(any("no longer has" in p for p in problems), problems)

    def test_an_allowance_without_a_reason_is_refused(self):
        with self.assertRaises(SystemExit):
            self.problems("x\n", "docs/page.md\t1 ms\t\n")

    def test_the_pages_at_head_pass(self):
        self.assertEqual(check_figures.main([]), 0)


if __name__ == "__main__":
    unittest.main()
