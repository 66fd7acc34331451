"""report.py's records and page, from junit files shaped as e2e.test writes them."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, "report.py")

JUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="Kubernetes e2e suite">
<testcase name="[SynchronizedBeforeSuite]" status="passed" time="1"></testcase>
<testcase name="[It] [sig-network] Services should a" status="passed" time="10.2"></testcase>
<testcase name="[It] [sig-network] Services should b" status="{b}" time="31">{b_body}</testcase>
<testcase name="[It] [sig-network] Services should c" status="skipped" time="0"><skipped message="skipped - Requires at least 3 nodes (not 2)"></skipped></testcase>
<testcase name="[It] [sig-storage] out of focus" status="skipped" time="0"><skipped message="skipped"></skipped></testcase>
</testsuite></testsuites>
"""


def run_json(proxy, **over):
    run = {"proxy": proxy, "commit": "c" * 40, "agent_commit": "a" * 40,
           "agent_image": "sha256:" + "1" * 64, "kube_proxy_image": "sha256:" + "2" * 64,
           "agnhost_image": "sha256:" + "3" * 64, "nodes": 2, "procs": 2,
           "started": 1795972371, "finished": 1795972771, "exit": 0, "focus": "x",
           "skip": "y", "pods": []}
    run.update(over)
    return run


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        with open(os.path.join(self.dir, "shards.txt"), "w") as f:
            f.write("# comment\nsvc 2 \\[sig-network\\] Services\n")
        with open(os.path.join(self.dir, "skip.txt"), "w") as f:
            f.write("LoadBalancer  # no cloud provider\n")

    def tearDown(self):
        self.tmp.cleanup()

    def record(self, proxy, b_failed, shard="svc", **over):
        d = os.path.join(self.dir, f"{shard}-{proxy}")
        os.makedirs(d)
        body = '<failure message="timed out waiting">stack</failure>' if b_failed else ""
        with open(os.path.join(d, "junit_01.xml"), "w") as f:
            f.write(JUNIT.format(b="failed" if b_failed else "passed", b_body=body))
        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump(run_json(proxy, **over), f)
        out = os.path.join(self.dir, f"{shard}.{proxy}.json")
        subprocess.run([sys.executable, REPORT, "record", d, "--shard", shard, "--out", out],
                       check=True, capture_output=True)
        return out

    def page(self, *records):
        out = os.path.join(self.dir, "E2E.md")
        p = subprocess.run([sys.executable, REPORT, "page", *records, "--shards",
                            os.path.join(self.dir, "shards.txt"), "--skip-file",
                            os.path.join(self.dir, "skip.txt"), "--out", out],
                           capture_output=True, text=True)
        text = ""
        if os.path.exists(out):
            with open(out) as f:
                text = f.read()
        return p.returncode, text, p.stderr

    def test_a_record_keeps_the_focus_and_the_run_time_skips_with_why(self):
        with open(self.record("agent", b_failed=True)) as f:
            rec = json.load(f)
        self.assertEqual(sorted(rec["tests"]), ["[sig-network] Services should a",
                                                "[sig-network] Services should b",
                                                "[sig-network] Services should c"])
        self.assertEqual(rec["tests"]["[sig-network] Services should b"]["message"],
                         "timed out waiting")
        self.assertEqual(rec["tests"]["[sig-network] Services should c"],
                         {"status": "skipped", "seconds": 0.0,
                          "message": "Requires at least 3 nodes (not 2)"})

    def test_the_page_names_the_build_and_fails_on_a_regression(self):
        rc, text, _ = self.page(self.record("kube-proxy", b_failed=False),
                                self.record("agent", b_failed=True))
        self.assertEqual(rc, 1)
        self.assertIn("Tests the agent fails and kube-proxy passes: 1: "
                      "[sig-network] Services should b", text)
        self.assertIn("image `sha256:" + "1" * 64 + "`", text)
        self.assertIn("| svc | kube-proxy | 2026-11-29 17:12 UTC | 7 min | 2 | 2 | 0 | 1 |", text)
        self.assertIn("- [sig-network] Services should c: `Requires at least 3 nodes (not 2)`",
                      text)
        self.assertNotIn("Incomplete", text)

    def test_agent_records_of_another_build_are_refused(self):
        rc, _, err = self.page(self.record("kube-proxy", b_failed=False),
                               self.record("agent", b_failed=False),
                               self.record("agent", b_failed=False, shard="svc2",
                                           agent_commit="b" * 40))
        self.assertEqual(rc, 2)
        self.assertIn("agent_commit", err)

    def test_a_reference_of_another_kube_proxy_image_is_refused(self):
        rc, _, err = self.page(self.record("kube-proxy", b_failed=False,
                                           kube_proxy_image="sha256:" + "8" * 64),
                               self.record("agent", b_failed=False))
        self.assertEqual(rc, 2)
        self.assertIn("kube_proxy_image", err)

    def test_records_of_another_cni_are_refused_and_old_ones_ran_the_bridge(self):
        rc, _, _ = self.page(self.record("kube-proxy", b_failed=False),
                             self.record("agent", b_failed=False, cni="bridge"))
        self.assertEqual(rc, 0)
        rc, _, err = self.page(self.record("kube-proxy", b_failed=False, shard="svc2"),
                               self.record("agent", b_failed=False, shard="svc2", cni="flannel"))
        self.assertEqual(rc, 2)
        self.assertIn("cni flannel != bridge", err)

    def test_a_reference_from_another_agent_build_is_kept_and_named(self):
        rc, text, _ = self.page(self.record("kube-proxy", b_failed=False,
                                            agent_commit="b" * 40,
                                            agent_image="sha256:" + "9" * 64),
                                self.record("agent", b_failed=False))
        self.assertEqual(rc, 0)
        self.assertIn("- The agent: commit " + "a" * 12 + ", image `sha256:" + "1" * 64, text)
        self.assertIn("other agent commits (the same kube-proxy and agnhost images): svc ("
                      + "b" * 12 + ").", text)

    def test_a_missing_shard_is_incomplete_not_a_regression(self):
        rc, text, _ = self.page(self.record("kube-proxy", b_failed=False))
        self.assertEqual(rc, 0)
        self.assertIn("**Incomplete**: no record yet of svc (agent)", text)
        self.assertIn("Tests the agent fails and kube-proxy passes: 0.", text)


if __name__ == "__main__":
    unittest.main()
