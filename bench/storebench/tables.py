"""Prints the markdown tables of docs/BENCHMARKS.md from storebench JSON lines: one
results file, or several (their runs pooled, the medians over all of them)."""
import json
import statistics
import sys

rows = [json.loads(l) for f in sys.argv[1:] for l in open(f)]
runs = [r for r in rows if r["result"]["store"] != "fsync"]
stores = list(dict.fromkeys(r["result"]["store"] for r in runs))

for r in rows:
    if r["result"]["store"] == "fsync":
        print("| this disk, 1,000 ops | p50 µs | p99 µs | max µs | ops/s |")
        print("|---|---|---|---|---|")
        for c in r["result"]["cases"]:
            print(f"| {c['name']} | {c['p50_us']} | {c['p99_us']} | {c['max_us']} | {c['per_sec']:,.0f} |")
        print()

phases = [p["name"] for p in runs[0]["result"]["writes"]]
print("Every run: records/s, commit p50 / p99 µs, commits per durable sync")
print()
print("| store | run (UTC, load) | " + " | ".join(phases) + " |")
print("|---|---|" + "---|" * len(phases))
for r in runs:
    x = r["result"]
    cells = [f"{p['records_per_sec']:,.0f} · {p['p50_us']:,} / {p['p99_us']:,} · {p['commits_per_sync']:.1f}" for p in x["writes"]]
    print(f"| {x['store']} | {r['run']} ({r['utc']}, {r['load1']:.2f}) | " + " | ".join(cells) + " |")
print()

def rss_split(x):
    """RSS at the end, anonymous + file pages, in MiB (runs before this field: blank)."""
    if "rss_anon_bytes" not in x:
        return ""
    return f"{x['rss_anon_bytes']/2**20:.0f} + {x['rss_file_bytes']/2**20:.0f}"

print("| store | run (UTC) | load 100k (rec/s) | scan (rec/s) | collect 20 % (rec/s) | scan after | reopen: open + scan ms | disk MiB (files) | peak RSS MiB | RSS at the end: anon + file MiB | Go heap in use MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in runs:
    x = r["result"]
    print(f"| {x['store']} | {r['run']} ({r['utc']}) | {x['load']['records_per_sec']:,.0f} | {x['scan']['records_per_sec']:,.0f} | "
          f"{x['collect']['records_per_sec']:,.0f} | {x['scan_after_collect']['records_per_sec']:,.0f} | "
          f"{1000*x['reopen']['open_seconds']:.0f} + {1000*x['reopen']['load_seconds']:.0f} | "
          f"{x['disk_bytes']/2**20:.1f} ({x['disk_files']}) | {x['peak_rss_bytes']/2**20:.0f} | {rss_split(x)} | {x['heap_inuse_bytes']/2**20:.0f} |")
print()

def med(store, f, need="store"):
    """The median of f over the runs of store that have the field need."""
    return statistics.median(f(r["result"]) for r in runs if r["result"]["store"] == store and need in r["result"])

print(f"Medians over {len(runs) // len(stores)} runs of each: records/s · p50 / p99 µs")
print()
print("| phase | " + " | ".join(stores) + " |")
print("|---|" + "---|" * len(stores))
for i, name in enumerate(phases):
    cells = []
    for s in stores:
        cells.append(f"{med(s, lambda x: x['writes'][i]['records_per_sec']):,.0f} · "
                     f"{med(s, lambda x: x['writes'][i]['p50_us']):,.0f} / {med(s, lambda x: x['writes'][i]['p99_us']):,.0f}")
    print(f"| {name} | " + " | ".join(cells) + " |")
for label, f in [
    ("load 100k, rec/s", lambda x: x["load"]["records_per_sec"]),
    ("scan, rec/s", lambda x: x["scan"]["records_per_sec"]),
    ("collect, rec/s", lambda x: x["collect"]["records_per_sec"]),
    ("scan after collect, rec/s", lambda x: x["scan_after_collect"]["records_per_sec"]),
    ("reopen + load, ms", lambda x: 1000 * (x["reopen"]["open_seconds"] + x["reopen"]["load_seconds"])),
    ("disk, MiB", lambda x: x["disk_bytes"] / 2**20),
    ("peak RSS, MiB", lambda x: x["peak_rss_bytes"] / 2**20),
] + ([
    ("RSS at the end, anonymous, MiB", lambda x: x["rss_anon_bytes"] / 2**20),
    ("RSS at the end, file pages, MiB", lambda x: x["rss_file_bytes"] / 2**20),
] if any("rss_anon_bytes" in r["result"] for r in runs) else []):
    need = "rss_anon_bytes" if label.startswith("RSS at the end") else "store"
    print(f"| {label} | " + " | ".join(f"{med(s, f, need):,.1f}" if med(s, f, need) < 100 else f"{med(s, f, need):,.0f}" for s in stores) + " |")
