"""Tests of bench/compare.py: the rows from the benches' JSON, the ratios to each
anchor within a run, the bytes per live key, the others' CPU.

  python3 bench/compare_test.py
"""
import io
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare as c  # noqa: E402


def timed(delivered, cpu, p50, client=None):
    """What `sidecar bench --json` or natsbench prints, cut to the fields read."""
    return {"subscribers": 2, "submitted": delivered // 2, "delivered": delivered, "submit_per_sec": delivered / 20,
            "delivered_per_sec": delivered / 10, "p50_us": p50, "p99_us": 4 * p50, "p999_us": 8 * p50,
            "max_us": 9 * p50, "lost": 0, "node_cpu_seconds": cpu * delivered / 1e6, "cpu_us_per_delivered": cpu,
            "bench_cpu_seconds": 1.0, "client": client, "node_peak_rss_bytes": 100 << 20,
            "node_usage": [{"id": f"bench-{i}", "cpu_seconds": 1.0, "peak_rss_bytes": 100 << 20} for i in range(3)]}


def memory(per_key, stream=None):
    """What bench/fanoutmem or natsbench --memory-keys prints."""
    nodes = [{"id": f"n{i}", "baseline_rss_bytes": 30 << 20, "settled_rss_bytes": (30 << 20) + int(per_key[i] * 500000),
              "bytes_per_key": per_key[i]} for i in range(3)]
    top = max(range(3), key=lambda i: per_key[i])
    r = {"system": "x", "nodes": 3, "keys": 500000, "payload": 100, "load_s": 4.0, "node_memory": nodes,
         "bytes_per_key": per_key[top], "bytes_per_key_node": f"n{top}", "settle_s": 2.0, "baseline_settle_s": 2.0}
    if stream:
        r["stream_server"] = stream
    return r


def rows():
    out = []
    seq = 0
    for run, scale in ((1, 1.0), (2, 1.2)):
        for system, r in (("fanout", timed(600000, 4.0, 200, "publisher")),
                          ("fanout-stream", timed(400000, 5.0, 150, "stream")),
                          ("nats-cluster", timed(1000000 * scale, 1.0, 100)),
                          ("nats-kv-r3-file", timed(100000, 15.0, 600)),
                          ("nats-kv-r1-memory", timed(120000, 10.0, 500))):
            seq += 1
            out.append(c.make_row(r, run, seq, "saturated/b1", system, 0.3, 100, 120, 50, 66, 1000, 1020))
        for system, r in (("fanout", memory([300.0, 280.0, 280.0])),
                          ("nats-kv-r1-memory", memory([20.0, 700.0, 10.0], stream="n1")),
                          ("nats-kv-r3-file", memory([500.0, 450.0, 460.0], stream="n0"))):
            seq += 1
            out.append(c.make_row(r, run, seq, "memory@500000", system, 0.3, 100, 110, 50, 60, 1000, 1020))
    out.append(c.make_row(None, 2, seq + 1, "latency@10000/b1", "fanout", 0.3, 0, 1, 0, 1, 0, 1))
    out.append(c.make_row(None, 2, seq + 2, "latency@10000/b1", "nats-cluster", 0.3, 0, 1, 0, 1, 0, 1, skipped=True))
    return out


class Row(unittest.TestCase):
    def test_others(self):
        r = rows()[0]
        self.assertEqual(r["own_cpu_s"], 16.0)
        self.assertEqual(r["others_cpu_s"], 4.0)  # busy 20 - own 16
        self.assertEqual(r["others_cores"], 0.2)  # over 20 s
        self.assertEqual(r["client"], "publisher")

    def test_memory(self):
        r = [x for x in rows() if x["system"] == "nats-kv-r1-memory" and x["workload"].startswith("memory")][0]
        self.assertEqual(r["bytes_per_key"], 700.0)
        self.assertEqual(r["bytes_per_key_node"], "n1")
        self.assertEqual(r["bytes_per_key_stream_server"], 700.0)
        self.assertEqual(r["settled_rss_mib_per_node"][1], round((30 + 700 * 500000 / 2 ** 20), 1))

    def test_interrupted(self):
        r = timed(1000, 1.0, 10)
        r["interrupted"] = True
        row = c.make_row(r, 1, 1, "saturated/b1", "fanout", 0.3, 0, 1, 0, 1, 0, 1)
        self.assertFalse(row["ok"])
        self.assertTrue(row["interrupted"])

    def test_failed(self):
        r = rows()[-2]
        self.assertFalse(r["ok"])
        self.assertNotIn("skipped", r)
        self.assertTrue(rows()[-1]["skipped"])


class Summary(unittest.TestCase):
    def setUp(self):
        out = io.StringIO()
        c.summary(rows(), out)
        self.text = out.getvalue()

    def line(self, start):
        for line in self.text.splitlines():
            if line.startswith(start):
                return line
        self.fail(f"no line starting {start!r} in:\n{self.text}")

    def test_ratio_to_each_anchor(self):
        # fanout 60,000/s against the cluster's 100,000 and 120,000 in the two runs.
        self.assertIn("| 0.50–0.60× |", self.line("| saturated/b1 | fanout | nats-cluster |"))
        self.assertIn("| 6.00× |", self.line("| saturated/b1 | fanout | nats-kv-r3-file |"))
        self.assertIn("| 5.00× |", self.line("| saturated/b1 | fanout | nats-kv-r1-memory |"))
        kv = self.line("| saturated/b1 | fanout | nats-kv-r3-file |")
        self.assertIn("| 0.33× |", kv)  # p50 200 against 600
        self.assertIn("| 0.27× |", kv)  # CPU 4 against 15
        self.line("| saturated/b1 | fanout-stream | nats-cluster |")

    def test_bytes_per_key(self):
        self.assertIn("fanout / nats-kv-r1-memory: 0.43× (2 runs)", self.line("memory@500000: bytes per live key, fanout / nats-kv-r1-memory"))
        self.assertIn("0.60×", self.line("memory@500000: bytes per live key, fanout / nats-kv-r3-file"))
        self.assertIn("| 700 (n1) |", self.line("| 1 | memory@500000 | nats-kv-r1-memory |"))

    def test_others_and_failures(self):
        self.assertIn("run 1:", self.text)
        self.assertIn("1 measurement(s) failed", self.text)
        self.assertIn("| 2 | latency@10000/b1 | fanout | FAILED |", self.text)
        self.assertIn("| 2 | latency@10000/b1 | nats-cluster | SKIPPED (budget) |", self.text)
        self.assertIn("1 measurement(s) skipped", self.text)


if __name__ == "__main__":
    unittest.main()
