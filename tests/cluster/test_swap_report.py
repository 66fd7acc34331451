"""swap_report.py's timeline, counts and spells, from logs shaped as swap-traffic.sh keeps them."""

import datetime
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = 1795972000.0  # the first mark, host time
SKEW = 2.0  # node-1's clock runs this far ahead of the host's


def stamp(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


class SwapReportTest(unittest.TestCase):
    def write(self, name, text):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(text)

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        marks = ["kube-proxy serving", "deploy/swap.sh to-agent", "the agent serving",
                 "deploy/swap.sh back", "kube-proxy serving again", "end"]
        self.write("marks.txt", "".join(f"{m}={T0 + 10 * i}\n" for i, m in enumerate(marks)))
        for name in ("clock-start.txt", "clock-end.txt"):
            self.write(name, f"node-1 {T0 - 1} {T0 + SKEW} {T0 + 1}\n")
        polls = []
        for t in range(0, 50):
            host = T0 + t
            polls.append(f"{host} - poll\n")
            if t < 12 or t >= 34:
                polls.append(f"{host} node-1 kube-proxy-abcde {'True' if t < 12 or t >= 36 else 'False'} \n")
            if 14 <= t < 32:
                polls.append(f"{host} node-1 kube-proxy-ipvs-xyz12 {'True' if t >= 15 else 'False'} \n")
        self.write("pods.txt", "".join(polls))

    def tearDown(self):
        self.tmp.cleanup()

    def client(self, fail_at=(), reconnect_at=None, udp_lost=()):
        # Before the first mark the clients wait for every path to answer: not counted.
        early = stamp(T0 - 5 + SKEW)
        lines = [f"{early} cluster-ip fail 7\n", f"{early} udp-kept ended\n",
                 f"{early} tcp-kept 0 000 0.010\n", f"{early} tcp-kept 1 200 0.020\n"]
        for i in range(100):
            t = T0 + i * 0.5
            node_t = stamp(t + SKEW)
            ok = i not in fail_at
            lines.append(f"{node_t} cluster-ip {'ok 0.010' if ok else 'fail 28'}\n")
            lines.append(f"{node_t} pod-ip ok 0.005\n")
            lines.append(f"{node_t} node-port-node-1 ok 0.012\n")
            connects = 1 if i == reconnect_at else 0
            lines.append(f"{node_t} tcp-kept {connects} 200 0.011\n")
            if i not in udp_lost:
                lines.append(f"{node_t} udp-kept {i + 1}\n")
        self.write("client-node-1.log", "".join(lines))

    def report(self):
        p = subprocess.run([sys.executable, os.path.join(HERE, "swap_report.py"), self.dir],
                           capture_output=True, text=True)
        return p.returncode, p.stdout

    def test_a_clean_swap_passes_with_each_nodes_switch_on_the_timeline(self):
        self.client()
        rc, text = self.report()
        self.assertEqual(rc, 0, text)
        self.assertIn("| 12.0 | node-1: kube-proxy's pod gone |", text)
        self.assertIn("| 15.0 | node-1: the agent's pod Ready |", text)
        self.assertIn("node-1: switched, 3.0 s without a proxy pod", text)
        self.assertIn("| 36.0 | node-1: kube-proxy's pod Ready |", text)
        self.assertIn("tcp-kept (one connection throughout)", text)
        self.assertIn("about 0 datagrams lost, 0 sockets ended", text)
        self.assertIn("- none", text)
        # node-1's clock is 2 s ahead: its lines fall in the phases by the host's time.
        self.assertIn("| kube-proxy serving | node-1 | cluster-ip | 20 | 0 | 0.50 s |", text)

    def test_failed_requests_fail_the_swap_with_their_spell(self):
        self.client(fail_at=(30, 31, 32))
        rc, text = self.report()
        self.assertEqual(rc, 1)
        self.assertIn("- at 15.0 s, node-1, cluster-ip: 3 failed, 1.50 s", text)
        self.assertIn("| deploy/swap.sh to-agent | node-1 | cluster-ip | 20 | 3 | 2.00 s |", text)

    def test_a_lost_kept_connection_fails_the_swap(self):
        self.client(reconnect_at=40)
        rc, text = self.report()
        self.assertEqual(rc, 1)
        self.assertIn("tcp-kept (1 reconnects, 0 ended)", text)

    def test_a_lost_datagram_of_the_kept_udp_flow_fails_the_swap(self):
        self.client(udp_lost=(50, 51))
        rc, text = self.report()
        self.assertEqual(rc, 1)
        self.assertIn("udp-kept (about 2 datagrams lost, 0 sockets ended)", text)


if __name__ == "__main__":
    unittest.main()
