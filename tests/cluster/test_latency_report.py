"""latency_report.py's records, BENCHMARKS.md's table and bench/results.json's keys."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, "latency_report.py")
PAGE = "# Benchmarks\n\nIntro.\n\n## Today's answer\n\nold\n"


def read(path):
    with open(path) as f:
        return f.read()


def run_json(proxy, **over):
    run = {"proxy": proxy, "commit": "c" * 40, "agent_commit": "a" * 40,
           "agent_image": "sha256:" + "1" * 64, "kube_proxy_image": "sha256:" + "2" * 64,
           "agnhost_image": "sha256:" + "3" * 64, "nodes": 2, "cni": "bridge",
           "started": 1795972371, "finished": 1795972771, "exit": 0}
    run.update(over)
    return run


def latency_json(services, p50=1.0, unanswered=0, **over):
    kind = {"samples": [p50], "n": 1, "unanswered": unanswered, "p50": p50, "p99": p50 * 2,
            "mean": p50, "histogram": {"count": 1, "p50": p50 / 2, "p99": p50}}
    lat = {"changes": 200, "every": 2.0, "services": services,
           "kinds": {k: kind for k in ("service-create", "scale-up", "endpoint-removed")}}
    lat.update(over)
    return lat


class LatencyReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.bench = os.path.join(self.dir, "BENCHMARKS.md")
        self.results = os.path.join(self.dir, "results.json")
        with open(self.bench, "w") as f:
            f.write(PAGE)
        with open(self.results, "w") as f:
            json.dump({"commit": "b", "cold_sync_ratio_10k": 0.2}, f)

    def tearDown(self):
        self.tmp.cleanup()

    def record(self, proxy, services, run=None, lat=None):
        d = os.path.join(self.dir, f"{proxy}-{services}")
        os.makedirs(os.path.join(d, "latency"))
        with open(os.path.join(d, "latency", "run.json"), "w") as f:
            json.dump(run or run_json(proxy), f)
        with open(os.path.join(d, "latency", "latency.json"), "w") as f:
            json.dump(lat or latency_json(services), f)
        out = os.path.join(self.dir, f"{proxy}.{services}.json")
        subprocess.run([sys.executable, REPORT, "record", d, "--out", out], check=True,
                       capture_output=True)
        return out

    def page(self, *records, check=False):
        r = subprocess.run([sys.executable, REPORT, "page", *records, "--benchmarks", self.bench,
                            "--results", self.results] + (["--check"] if check else []),
                           capture_output=True, text=True)
        return r.returncode, r.stderr

    def test_the_table_comes_first_and_the_keys_join_the_others(self):
        recs = [self.record("agent", 0), self.record("kube-proxy", 0, lat=latency_json(0, 4.0))]
        self.assertEqual(self.page(*recs)[0], 0)
        text = read(self.bench)
        self.assertLess(text.index("network programming latency"), text.index("Today's answer"))
        self.assertIn("| a Service created with ready endpoints | 0 | 1.00 s / 2.00 s "
                      "(0.50 s / 1.00 s) | 4.00 s / 8.00 s (2.00 s / 4.00 s) |", text)
        self.assertIn("commit aaaaaaaaaaaa", text)
        self.assertIn("Incomplete", text)
        r = json.loads(read(self.results))
        self.assertEqual(r["cold_sync_ratio_10k"], 0.2)
        self.assertEqual(r["network_programming"]["kube-proxy"]["0"]["scale-up"]["p99_s"], 8.0)
        # Written again: the same page, and --check agrees with it.
        self.assertEqual(self.page(*recs)[0], 0)
        self.assertEqual(read(self.bench), text)
        self.assertEqual(self.page(*recs, check=True)[0], 0)
        more = recs + [self.record("agent", 1000, lat=latency_json(1000, 1.5))]
        self.assertEqual(self.page(*more, check=True)[0], 1)

    def test_unanswered_probes_are_shown(self):
        rec = self.record("agent", 0, lat=latency_json(0, unanswered=3))
        self.page(rec)
        self.assertIn("**3 never answered**", read(self.bench))

    def test_records_of_other_builds_or_pacing_are_refused(self):
        a = self.record("agent", 0)
        b = self.record("kube-proxy", 0, run=run_json("kube-proxy", agnhost_image="sha256:x"))
        self.assertEqual(self.page(a, b)[0], 2)
        c = self.record("kube-proxy-nftables", 0, lat=latency_json(0, every=5.0))
        self.assertEqual(self.page(a, c)[0], 2)
        d = self.record("agent", 1000, run=run_json("agent", agent_image="sha256:y"))
        self.assertEqual(self.page(a, d)[0], 2)


if __name__ == "__main__":
    unittest.main()
