"""Tests of bench/transports.py: the row from a bench's JSON, the fit, the crossover.

  python3 bench/transports_test.py
"""
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import transports as t  # noqa: E402

# What `sidecar bench --json --engine-pid ...` prints, cut to the fields read.
JETSTREAM = {
    "submitted": 5000, "delivered": 20000, "subscribers": 4, "submit_per_sec": 500.0, "delivered_per_sec": 2000.0,
    "p50_us": 900, "p99_us": 4000, "p999_us": 9000, "lost": 0,
    "latency_from_due": {"p99_us": 4100}, "send_lag": {"p99_us": 30},
    "node_cpu_seconds": 1.5, "engine_cpu_seconds": 3.0, "bench_cpu_seconds": 0.2,
    "node_usage": [{"id": "bench-0", "cpu_seconds": 0.5, "peak_rss_bytes": 2 << 20, "tcp_conns": 1}]
    + [{"id": f"bench-{i}", "cpu_seconds": 0.25, "peak_rss_bytes": 1 << 20, "tcp_conns": 1} for i in range(1, 5)],
    "engine_usage": [{"id": f"pid-{i}", "cpu_seconds": 1.0, "peak_rss_bytes": 3 << 20, "tcp_conns": 9} for i in range(3)],
}
# What `natsbench --kv` prints: its nodes are the NATS servers.
KV = {
    "submitted": 1000, "delivered": 2000, "subscribers": 2, "submit_per_sec": 100.0, "delivered_per_sec": 200.0,
    "p50_us": 1, "p99_us": 2, "p999_us": 3, "lost": 0, "node_cpu_seconds": 0.6,
    "node_usage": [{"id": f"bench-{i}", "cpu_seconds": 0.2, "peak_rss_bytes": 1 << 20} for i in range(3)],
}


class Row(unittest.TestCase):
    def test_jetstream(self):
        r = t.make_row(JETSTREAM, 2, "rate500", 5, "jetstream", 0.5, 100, 110, 20, 25, 1000, 1010)
        self.assertEqual(r["cluster_cpu_s"], 4.5)  # sidecars + NATS servers
        self.assertEqual(r["cluster_us_per_submitted"], 900.0)
        self.assertEqual(r["cluster_us_per_delivered"], 225.0)
        self.assertEqual(r["engine_us_per_submitted"], 600.0)
        self.assertEqual(r["origin_us_per_submitted"], 100.0)  # bench-0's 0.5 s
        self.assertEqual(r["sidecar_conns"], [1] * 5)
        self.assertEqual(r["engine_conns"], [9] * 3)
        self.assertEqual(r["others_cores"], 0.5)  # (10 busy - 5 ours) / 10 s
        self.assertTrue(r["noisy"] is (0.5 > t.NOISY))
        self.assertEqual(r["loss"], 0)

    def test_kv_anchor_is_all_engine(self):
        r = t.make_row(KV, 1, "saturated", 3, "nats-kv", 0.1, 0, 1, 0, 1, 0, 1)
        self.assertEqual((r["nodes_cpu_s"], r["engine_cpu_s"], r["origin_cpu_s"]), (0.0, 0.6, None))
        self.assertEqual(r["cluster_us_per_delivered"], 300.0)

    def test_failed(self):
        r = t.make_row(None, 1, "rate500", 3, "mesh", 0.1, 0, 4, 0, 1, 0, 2)
        self.assertFalse(r["ok"])
        self.assertEqual(r["others_cores"], 1.5)
        self.assertTrue(r["noisy"])


class Lines(unittest.TestCase):
    def test_fit_exact(self):
        a, b = t.fit([(3, 60), (5, 100), (9, 180)])
        self.assertAlmostEqual(a, 0)
        self.assertAlmostEqual(b, 20)
        self.assertIsNone(t.fit([(3, 1), (3, 2)]))

    def test_crossover(self):
        mesh, js = (0.0, 20.0), (300.0, 5.0)  # 20 N against 300 + 5 N
        self.assertAlmostEqual(t.crossover(mesh, js), 20.0)
        self.assertIsNone(t.crossover(js, mesh))  # the steeper never becomes cheaper
        self.assertEqual(t.crossover(mesh, (-10.0, 5.0)), 0.0)  # cheaper everywhere
        self.assertEqual(t.first_cheaper({3: 60, 9: 180, 17: 340}, {3: 315, 9: 345, 17: 300}), 17)
        self.assertIsNone(t.first_cheaper({3: 1}, {3: 2}))

    def test_summary_prints_every_table(self):
        rows = []
        for run in (1, 2, 3):
            for n in (3, 5, 9):
                for s, (c0, c1) in (("mesh", (0, 20)), ("jetstream", (300, 5))):
                    js = dict(JETSTREAM, node_cpu_seconds=(c0 + c1 * n) * 5000 / 1e6, engine_cpu_seconds=0.0 if s == "mesh" else None)
                    rows.append(t.make_row(js, run, "rate500", n, s, 0.1, 0, 1, 0, 1, 0, 10))
            rows.append(t.make_row(JETSTREAM, run, "saturated", 3, "jetstream", 0.1, 0, 1, 0, 1, 0, 10))
            rows.append(t.make_row(KV, run, "saturated", 3, "nats-kv", 0.1, 0, 1, 0, 1, 0, 10))
        out = io.StringIO()
        t.summary(rows, out)
        text = out.getvalue()
        self.assertIn("| 1 | 20.0 | 5.0 | - |", text)  # the slopes of run 1 (no nats-kv rows)
        self.assertIn("| 20.0 |", text)  # the crossover
        self.assertIn("per run: 10.00, 10.00, 10.00", text)  # 2000/s against 200/s


if __name__ == "__main__":
    unittest.main()
