"""bench/plot.py on the committed results and on files that hold little: it draws without
failing, its SVG is well-formed XML, and the committed plots and BENCHMARKS.md's table are what
bench/results.json gives (so the page cannot drift from the figures).

    python3 -m unittest discover -s bench      (tests/run.sh runs it)
"""

import copy
import contextlib
import io
import json
import pathlib
import tempfile
import unittest
import xml.dom.minidom

import plot

ROOT = plot.ROOT

BENCH = pathlib.Path(__file__).resolve().parent
RESULTS = BENCH / "results.json"
PAGE = BENCH.parent / "BENCHMARKS.md"

PERCENTILES = {f"p{d}": float(d) for d in range(10, 100, 10)} | {"p99": 120.0, "max": 300.0}

# What older or partial runs leave: nothing, null parts, null figures, a program missing.
SPARSE = [
    {},
    {"scale": None, "beside": None, "commit": None},
    {"scale": {"1000": None, "10000": {}}, "beside": {"1000": None}},
    {
        "scale": {"1000": {"t_raw_s": None, "t_agent_cold_s": 2.0, "rss_cold_mib": None},
                  "50000": {"t_raw_s": 300.0, "t_dump_s": None, "rss_peak_mib": 0}},
        "beside": {"10000": {"agent": {"cold_s": None, "change_median_ms": None, "change_p99_ms": None,
                                       "change_percentiles_ms": None, "rss_peak_mib": None},
                             "ipvs": {"cold_s": 60.0, "changes": 0, "note": "0 of 100 changes"},
                             "seed_s": 70.0}},
        "rss_mib_10k": None, "kube_proxy_cold_ratio_10k": None, "noop_resync_ratio": "x",
        "runs": {"scale": {"commit": "abc1234", "date": None}, "beside": None},
    },
    {  # the distribution as the writer stores it since change_percentiles_ms
        "beside": {"1000": {"agent": {"change_median_ms": 50.0, "change_p99_ms": 120.0,
                                      "change_percentiles_ms": PERCENTILES, "poll_ms": 60.0,
                                      "changes": 100}}},
        "runs": {"scale": {"commit": "abc1234", "date": "2026-12-01T10:00Z"},
                 "beside": {"commit": "def5678", "date": "2026-12-01T12:00Z"}},
    },
]


def draw_all(results):
    """Each figure's SVG for results (a dict), each parsed as XML; returns them by name."""
    out = {}
    for name, draw in plot.FIGURES:
        svg = draw(results)
        xml.dom.minidom.parseString(svg)
        out[name] = svg
    return out


class Plot(unittest.TestCase):
    def test_the_committed_results_draw_well_formed_svg(self):
        results = plot.load(RESULTS)
        svgs = draw_all(results)
        for name in ("cold-sync.svg", "memory.svg"):
            self.assertTrue("<polyline" in svgs[name], f"{name}: no line drawn")
        self.assertTrue(svgs["change-latency.svg"].count("<polygon") >= 9, "a p99 mark per program and N")
        for name, svg in svgs.items():
            self.assertTrue(f"commit {results['commit']}" in svg, f"{name}: the run's commit")

    def test_files_with_missing_keys_and_nulls_draw_and_tabulate(self):
        for results in SPARSE:
            with self.subTest(results=results):
                draw_all(results)
                table = plot.table(results)
                self.assertEqual(table.count("\n| `"), len(plot.TARGETS))
        self.assertIn("not recorded", plot.table({}))
        self.assertIn(f"**0 of {len(plot.TARGETS)} targets met**; not measured: `", plot.table({}))
        self.assertIn("scale bench at commit abc1234", plot.table(SPARSE[-1]))
        self.assertIn("beside bench at commit def5678", plot.table(SPARSE[-1]))

    def test_the_distribution_is_drawn_when_stored_else_median_and_p99(self):
        with_pct = plot.change_latency(SPARSE[-1])
        self.assertIn("p10 to p90", with_pct)
        self.assertIn("the slowest change", with_pct)
        # The committed run with the distributions left out, as runs before them stored it.
        results = copy.deepcopy(plot.load(RESULTS))
        for programs in results["beside"].values():
            for figures in programs.values():
                if isinstance(figures, dict):
                    figures.pop("change_percentiles_ms", None)
        without = plot.change_latency(results)
        self.assertNotIn("a tick at each decile", without)
        self.assertIn("stored only the median and the p99", without)

    def test_a_target_is_met_at_its_bound_and_missed_above_it(self):
        rows = {ln.split("|")[1].strip(" `"): ln for ln in plot.table({
            "cold_sync_ratio_10k": 1.0, "kube_proxy_cold_ratio_10k": 0.2858, "rss_mib_10k": 39.9,
        }).splitlines() if ln.startswith("| `")}
        self.assertTrue(rows["cold_sync_ratio_10k"].endswith("| met |"))
        self.assertIn("0.286", rows["kube_proxy_cold_ratio_10k"])
        self.assertTrue(rows["kube_proxy_cold_ratio_10k"].endswith("| **missed** |"))
        self.assertIn("39.9 MiB", rows["rss_mib_10k"])
        self.assertTrue(rows["nftables_rss_ratio_10k"].endswith("| not measured |"))
        summary = next(ln for ln in plot.table({
            "cold_sync_ratio_10k": 1.0, "kube_proxy_cold_ratio_10k": 0.2858, "rss_mib_10k": 39.9,
        }).splitlines() if "targets met" in ln)
        self.assertTrue(summary.startswith(f"**2 of {len(plot.TARGETS)} targets met**; missed: "
                                           "`kube_proxy_cold_ratio_10k`; not measured: "), summary)

    def test_a_missing_key_is_computed_from_the_per_n_figures_and_marked(self):
        results = {"scale": {"10000": {"first_service_s": 1.0, "t_raw_s": 40.0}}}
        self.assertIn("| 0.025 ¹ |", plot.table(results))
        self.assertIn("¹ Computed", plot.table(results))

    def test_the_committed_plots_and_the_page_table_are_results_json(self):
        # The committed SVGs and BENCHMARKS.md's table, as bench/plot.py would write them now
        # (after a run, tests/bench.sh runs it; after editing plot.py, run it).
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            status = plot.main(["--check"])
        self.assertEqual(status, 0, err.getvalue())

    def test_the_script_writes_what_check_then_accepts(self):
        with tempfile.TemporaryDirectory() as d:
            d = pathlib.Path(d)
            (d / "r.json").write_text(json.dumps(SPARSE[3]))
            page = d / "page.md"
            page.write_text(f"# x\n\n{plot.MARK_BEGIN}\nold\n{plot.MARK_END}\n\nrest\n")
            readme = d / "README.md"
            readme.write_text(f"# r\n\n{plot.README_BEGIN}\nold\n{plot.README_END}\n\nrest\n")
            sizing = d / "operating.md"
            sizing.write_text(f"# o\n\n{plot.SIZING_BEGIN}\nold\n{plot.SIZING_END}\n")
            args = ["--results", str(d / "r.json"), "--out", str(d), "--page", str(page),
                    "--readme", str(readme), "--sizing", str(sizing)]
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(plot.main(args), 0)
            self.assertEqual(plot.main(args + ["--check"]), 0)
            text = page.read_text()
            self.assertTrue(text.startswith(f"# x\n\n{plot.MARK_BEGIN}\nThe run: "))
            self.assertTrue(text.endswith(f"{plot.MARK_END}\n\nrest\n"))
            for name, _ in plot.FIGURES:
                xml.dom.minidom.parse(str(d / name))
            self.assertTrue(readme.read_text().startswith(f"# r\n\n{plot.README_BEGIN}\n| N = 10,000 |"))
            self.assertTrue(sizing.read_text().startswith(f"# o\n\n{plot.SIZING_BEGIN}\n| cluster |"))

    def test_a_stale_readme_figure_fails_the_check(self):
        # The README's summary is results.json's: a figure typed over it, or a newer run the
        # page was not regenerated for, fails --check (and so the test command).
        results = json.loads((ROOT / "bench" / "results.json").read_text())
        with tempfile.TemporaryDirectory() as d:
            d = pathlib.Path(d)
            (d / "r.json").write_text(json.dumps(results))
            readme = d / "README.md"
            readme.write_text(f"{plot.README_BEGIN}\n{plot.README_END}\n")
            args = ["--results", str(d / "r.json"), "--out", str(d), "--page", "", "--readme", str(readme),
                    "--sizing", ""]
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(plot.main(args), 0)
            peak = f"{results['beside']['10000']['agent']['rss_peak_mib']:.1f}"
            self.assertIn(f"| peak RSS, MiB | {peak} |", readme.read_text())
            readme.write_text(readme.read_text().replace(f"| peak RSS, MiB | {peak} |", "| peak RSS, MiB | 83.8 |"))
            with contextlib.redirect_stderr(io.StringIO()):
                self.assertEqual(plot.main(args + ["--check"]), 1)
            results["beside"]["10000"]["agent"]["rss_peak_mib"] = 61.0
            (d / "r.json").write_text(json.dumps(results))
            with contextlib.redirect_stdout(io.StringIO()):
                plot.main(args)
            self.assertIn("| peak RSS, MiB | 61.0 |", readme.read_text())


if __name__ == "__main__":
    unittest.main()
