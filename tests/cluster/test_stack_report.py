"""stack_report.py's records and page, from lb.json and run.json shaped as lb-traffic.sh and
run.sh write them."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, "stack_report.py")


def run_json(proxy, strict, **over):
    run = {"proxy": proxy, "strict_arp": strict, "lb": "metallb", "commit": "c" * 40,
           "agent_commit": "a" * 40, "agent_image": "sha256:" + "1" * 64,
           "kube_proxy_image": "sha256:" + "2" * 64, "agnhost_image": "sha256:" + "3" * 64,
           "metallb_images": {"controller": "sha256:" + "4" * 64,
                              "speaker": "sha256:" + "5" * 64},
           "nodes": 2, "cni": "bridge", "procs": 4, "started": 1795972371,
           "finished": 1795972771, "exit": 0, "focus": "", "skip": "", "pods": []}
    run.update(over)
    return run


def lb_json(strict, fail=()):
    checks = [("first-answer-lb-cluster", "client-a answered 3.2 s after", 3.2),
              ("lb-ip-answers", "[server] through 52:54:00:00:00:11 (node-1)", None),
              (f"arp-replies-strictARP-{'on' if strict == 'true' else 'off'}",
               "1 MAC(s): [52:54:00:00:00:11]", None),
              ("failover", "from node-1 to node-2: served again after 11.5 s", 11.5)]
    return [{"check": c, "pass": c not in fail, "saw": saw, "seconds": sec}
            for c, saw, sec in checks]


class StackReportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def record(self, name, run, checks):
        d = os.path.join(self.dir, name)
        os.makedirs(os.path.join(d, "lb"))
        with open(os.path.join(d, "lb", "run.json"), "w") as f:
            json.dump(run, f)
        with open(os.path.join(d, "lb", "lb.json"), "w") as f:
            json.dump(checks, f)
        out = os.path.join(self.dir, name + ".json")
        subprocess.run([sys.executable, REPORT, "record", d, "--out", out], check=True,
                       capture_output=True)
        return out

    def page(self, *records):
        out = os.path.join(self.dir, "STACK.md")
        r = subprocess.run([sys.executable, REPORT, "page", *records, "--out", out],
                           capture_output=True, text=True)
        text = ""
        if os.path.exists(out):
            with open(out) as f:
                text = f.read()
        return r.returncode, text, r.stderr

    def test_a_page_names_the_build_and_every_verdict(self):
        recs = [self.record(f"{p}-{s}", run_json(p, s), lb_json(s))
                for p in ("kube-proxy", "agent") for s in ("true", "false")]
        rc, text, err = self.page(*recs)
        self.assertEqual(rc, 0, err)
        self.assertIn("commit aaaaaaaaaaaa, image `sha256:" + "1" * 64, text)
        self.assertIn("speaker `sha256:" + "5" * 64, text)
        self.assertIn("Checks the agent fails: none.", text)
        self.assertNotIn("Incomplete", text)
        # The ARP row of each setting, its own check, and the other setting's not run.
        row = next(line for line in text.splitlines()
                   if line.startswith("| arp-replies-strictARP-on |"))
        self.assertEqual(row.count("pass: 1 MAC(s)"), 2)
        self.assertEqual(row.count("not run"), 2)
        self.assertIn("| failover | 11.5 | 11.5 | 11.5 | 11.5 |", text)

    def test_an_agent_failure_fails_the_page_and_is_named(self):
        recs = [self.record("kp", run_json("kube-proxy", "true"), lb_json("true")),
                self.record("ag", run_json("agent", "true"),
                            lb_json("true", fail=("failover",)))]
        rc, text, _ = self.page(*recs)
        self.assertEqual(rc, 1)
        self.assertIn("Checks the agent fails: 1: failover (strictARP on)", text)
        self.assertIn("**FAIL**: from node-1", text)
        self.assertIn("no record yet of kube-proxy with strictARP off, agent with strictARP off",
                      text)

    def test_a_kube_proxy_failure_is_shown_and_does_not_fail_the_page(self):
        recs = [self.record("kp", run_json("kube-proxy", "true"),
                            lb_json("true", fail=("lb-ip-answers",))),
                self.record("ag", run_json("agent", "true"), lb_json("true"))]
        rc, text, _ = self.page(*recs)
        self.assertEqual(rc, 0)
        self.assertIn("**FAIL**: [server]", text)

    def test_records_of_other_builds_are_refused(self):
        kp = self.record("kp", run_json("kube-proxy", "true"), lb_json("true"))
        other_lb = self.record("ag", run_json("agent", "true", metallb_images={"x": "y"}),
                               lb_json("true"))
        self.assertEqual(self.page(kp, other_lb)[0], 2)
        a1 = self.record("a1", run_json("agent", "true"), lb_json("true"))
        a2 = self.record("a2", run_json("agent", "false", agent_image="sha256:9"),
                         lb_json("false"))
        self.assertEqual(self.page(kp, a1, a2)[0], 2)

    def test_two_records_of_one_setting_are_refused(self):
        a1 = self.record("a1", run_json("agent", "true"), lb_json("true"))
        a2 = self.record("a2", run_json("agent", "true"), lb_json("true"))
        rc, _, err = self.page(a1, a2)
        self.assertNotEqual(rc, 0)
        self.assertIn("two records of agent with strictARP on", err)

    def e2e(self, proxy, tests, **over):
        path = os.path.join(self.dir, f"loadbalancers.{proxy}.json")
        with open(path, "w") as f:
            json.dump({"shard": "loadbalancers", "proxy": proxy,
                       "run": run_json(proxy, "true", **over), "tests": tests}, f)
        return path

    def test_the_e2e_section_names_each_test_and_the_agent_regressions(self):
        recs = [self.record("kp", run_json("kube-proxy", "true"), lb_json("true")),
                self.record("ag", run_json("agent", "true"), lb_json("true"))]
        ok = {"status": "passed", "seconds": 40.0, "message": ""}
        bad = {"status": "failed", "seconds": 90.0, "message": "timed out"}
        skip = {"status": "skipped", "seconds": 0, "message": "LoadBalancer uses 'Proxy' IPMode"}
        t = "[sig-network] LoadBalancers should be able to change the type and ports of a TCP service"
        u = "[sig-network] LoadBalancers ExternalTrafficPolicy: Local should work from pods"
        kp = self.e2e("kube-proxy", {t: ok, u: skip})
        ag = self.e2e("agent", {t: bad, u: skip})
        rc, text, err = self.page(*recs, "--e2e", kp, "--e2e", ag)
        self.assertEqual(rc, 1, err)
        self.assertIn(f"kube-proxy passes: 1: {t}.", text)
        self.assertIn(f"| {t} | pass (40 s) | **FAIL** (90 s) |", text)
        self.assertIn(f"- agent, skipped, {u}: `LoadBalancer uses 'Proxy' IPMode`", text)
        rc, _, _ = self.page(*recs, "--e2e", kp, "--e2e", self.e2e("agent", {t: ok}))
        self.assertEqual(rc, 0)
        other = self.e2e("agent", {t: ok}, kube_proxy_image="sha256:other")
        self.assertEqual(self.page(*recs, "--e2e", kp, "--e2e", other)[0], 2)


if __name__ == "__main__":
    unittest.main()
