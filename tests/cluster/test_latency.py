"""latency.py's reading of the proxy's histogram: its buckets and the quantiles of what it
gained between two scrapes, as Prometheus' histogram_quantile estimates them."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import latency  # noqa: E402

NAME = "kubeproxy_network_programming_duration_seconds"


def exposition(counts, les=("0.5", "1", "2", "4", "+Inf")):
    lines = [f"# TYPE {NAME} histogram"]
    for le, c in zip(les, counts):
        lines.append(f'{NAME}_bucket{{ip_family="IPv4",le="{le}"}} {c}')
        lines.append(f'{NAME}_bucket{{ip_family="IPv6",le="{le}"}} 1000')
    lines.append(f'{NAME}_count{{ip_family="IPv4"}} {counts[-1]}')
    return "\n".join(lines) + "\n"


class LatencyTest(unittest.TestCase):
    def test_buckets_read_only_the_ipv4_family(self):
        b = latency.buckets(exposition([1, 2, 3, 4, 5]))
        self.assertEqual(b, {0.5: 1, 1.0: 2, 2.0: 3, 4.0: 4, float("inf"): 5})

    def test_quantiles_of_the_difference_interpolate_within_a_bucket(self):
        before = latency.buckets(exposition([10, 10, 10, 10, 10]))
        # 100 observations gained: 50 in (0.5, 1], 50 in (1, 2].
        after = latency.buckets(exposition([10, 60, 110, 110, 110]))
        self.assertAlmostEqual(latency.quantile_of(before, after, 0.5)[0], 1.0)
        self.assertAlmostEqual(latency.quantile_of(before, after, 0.75)[0], 1.5)
        self.assertEqual(latency.quantile_of(before, after, 0.5)[1], 100)

    def test_nothing_gained_has_no_quantile(self):
        b = latency.buckets(exposition([1, 2, 3, 4, 5]))
        self.assertEqual(latency.quantile_of(b, b, 0.5), (None, 0))

    def test_a_quantile_in_the_last_bucket_is_its_lower_bound(self):
        before = latency.buckets(exposition([0, 0, 0, 0, 0]))
        after = latency.buckets(exposition([0, 0, 0, 0, 10]))
        self.assertEqual(latency.quantile_of(before, after, 0.99)[0], 4.0)


if __name__ == "__main__":
    unittest.main()
