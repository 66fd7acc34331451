#!/usr/bin/env python3
"""Network programming latency's records, BENCHMARKS.md's first table and its keys in
bench/results.json.

    latency_report.py record DIR --out FILE
        One run (run.sh --latency: DIR/latency/ holds latency.py's latency.json and run.sh's
        run.json) as a record: what ran (the proxy, the commit, the agent's commit, every
        image's ID) and each kind's samples, quantiles and the proxy's own histogram.
        Records are committed (tests/cluster/results/latency/PROXY.SERVICES.json).

    latency_report.py page RECORD... --benchmarks FILE --results FILE [--check]
        The table between BENCHMARKS.md's latency markers (placed before its first section
        when missing) and `network_programming` in bench/results.json, from records of one
        build. Refuses (exit 2) records that name different kube-proxy or agnhost images, node
        counts, CNIs, change counts or pacing, agent records of different agent builds, and
        two records of one proxy and size. With --check, writes nothing and exits 1 when the
        page or the file differ from what the records give.

Nothing in the table is typed: every figure and the header come from the records.
"""

import argparse
import datetime
import json
import os
import sys

SAME = ("kube_proxy_image", "agnhost_image", "nodes", "cni")
SAME_AGENT = ("agent_commit", "agent_image")
SAME_RUN = ("changes", "every")
PROXIES = ("agent", "kube-proxy", "kube-proxy-nftables")
NAMES = {"agent": "the agent", "kube-proxy": "kube-proxy IPVS",
         "kube-proxy-nftables": "kube-proxy nftables"}
KINDS = {"service-create": "a Service created with ready endpoints",
         "scale-up": "a Deployment scaled from 0 to 1",
         "endpoint-removed": "an endpoint removed, to its last answer"}
BEGIN = ("<!-- latency-table: written by tests/cluster/latency_report.py from "
         "tests/cluster/results/latency/; edit those, not this -->")
END = "<!-- end latency-table -->"


def record(args):
    d = os.path.join(args.dir, "latency")
    with open(os.path.join(d, "run.json")) as f:
        run = json.load(f)
    with open(os.path.join(d, "latency.json")) as f:
        lat = json.load(f)
    rec = {"proxy": run["proxy"], "services": lat["services"], "run": run, "latency": lat}
    with open(args.out, "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"latency: {args.out}: {run['proxy']} at {lat['services']} Services: "
          + ", ".join(f"{k} p50 {v['p50']} p99 {v['p99']}" for k, v in lat["kinds"].items()),
          file=sys.stderr)
    return 0


def refuse(what, got, ref_path, ref, keys):
    diff = [k for k in keys if got.get(k) != ref.get(k)]
    if diff:
        print(f"latency: {what} ran another build than {ref_path}: "
              + ", ".join(f"{k} {got.get(k)} != {ref.get(k)}" for k in diff), file=sys.stderr)
        sys.exit(2)


def seconds(v):
    return "—" if v is None else f"{v:.2f} s"


def load(paths):
    records = []
    for path in paths:
        with open(path) as f:
            records.append((path, json.load(f)))
    if not records:
        sys.exit("latency: no records")
    first_path, first = records[0]
    agents = [(p, r) for p, r in records if r["proxy"] == "agent"]
    by = {}
    for path, rec in records:
        refuse(path, rec["run"], first_path, first["run"], SAME)
        refuse(path, rec["latency"], first_path, first["latency"], SAME_RUN)
        if rec["proxy"] == "agent":
            refuse(path, rec["run"], agents[0][0], agents[0][1]["run"], SAME_AGENT)
        key = (rec["proxy"], rec["services"])
        if key in by:
            sys.exit(f"latency: two records of {key[0]} at {key[1]} Services: "
                     f"{by[key][0]}, {path}")
        by[key] = (path, rec)
    return first, agents, by


def results(by):
    """bench/results.json's `network_programming`: PROXY -> SIZE -> KIND -> figures."""
    out = {}
    for (proxy, size), (_, rec) in sorted(by.items()):
        kinds = {}
        for kind, k in rec["latency"]["kinds"].items():
            kinds[kind] = {"p50_s": k["p50"], "p99_s": k["p99"], "answered": k["n"],
                           "unanswered": k["unanswered"],
                           "histogram_p50_s": k["histogram"]["p50"],
                           "histogram_p99_s": k["histogram"]["p99"],
                           "histogram_count": k["histogram"]["count"]}
        out.setdefault(proxy, {})[str(size)] = kinds
    return out


def table(first, agents, by):
    agent = agents[0][1]["run"] if agents else None
    lat = first["latency"]
    sizes = sorted({s for _, s in by})
    proxies = [p for p in PROXIES if any(q == p for q, _ in by)]
    runs = sorted({r["run"]["commit"][:12] for _, r in by.values()})
    dates = sorted(r["run"]["started"] for _, r in by.values())
    lines = [
        f"From the API write to the first request answered through the Service (for a removed "
        f"endpoint: to the last request that still reached it), asked by a pod on the other "
        f"node than the backends, in the two-node lab cluster (`tests/cluster/latency.sh`); "
        f"{lat['changes']} changes of each kind, one every {lat['every']:g} s while earlier ones "
        f"are still measured. p50 / p99 as the clients saw it; in brackets the proxy's own "
        f"`kubeproxy_network_programming_duration_seconds` p50 / p99 over the same "
        f"minutes (node-2, estimated from its buckets; it also holds the changes that put each "
        f"Deployment and endpoint back between samples). The cluster is emulated: compare the proxies, "
        f"not the seconds.",
        "",
        (f"The agent: commit {agent['agent_commit'][:12]}, image `{agent['agent_image']}`; "
         if agent else "The agent: no record yet; ")
        + f"kube-proxy v1.37.2: image `{first['run']['kube_proxy_image']}`. Harness commits: "
        + ", ".join(runs) + "; runs from "
        + datetime.datetime.fromtimestamp(dates[0], datetime.timezone.utc).strftime("%Y-%m-%d")
        + " to "
        + datetime.datetime.fromtimestamp(dates[-1], datetime.timezone.utc).strftime("%Y-%m-%d")
        + ".",
        "",
        "| change | Services besides | " + " | ".join(NAMES[p] for p in proxies) + " |",
        "|---|---|" + "---|" * len(proxies),
    ]
    for kind, what in KINDS.items():
        for size in sizes:
            cells = []
            for p in proxies:
                rec = by.get((p, size))
                k = rec[1]["latency"]["kinds"].get(kind) if rec else None
                if k is None:
                    cells.append("not run")
                    continue
                h = k["histogram"]
                cell = f"{seconds(k['p50'])} / {seconds(k['p99'])}"
                cell += f" ({seconds(h['p50'])} / {seconds(h['p99'])})"
                if k["unanswered"]:
                    cell += f", **{k['unanswered']} never answered**"
                cells.append(cell)
            lines.append(f"| {what} | {size:,} | " + " | ".join(cells) + " |")
    missing = [f"{NAMES[p]} at {s:,}" for s in (0, 1000, 5000) for p in PROXIES
               if (p, s) not in by]
    if missing:
        lines += ["", "**Incomplete**: no record yet of " + ", ".join(missing) + "."]
    return "\n".join(lines) + "\n"


def with_table(text, block):
    a, b = text.find(BEGIN), text.find(END)
    if a >= 0 and b > a:
        return text[:a] + BEGIN + "\n" + block + text[b:]
    # First: before the page's first section.
    at = text.find("\n## ")
    section = ("## What a user feels: network programming latency\n\n" + BEGIN + "\n" + block
               + END + "\n\n")
    if at < 0:
        return text + "\n" + section
    return text[:at + 1] + section + text[at + 1:]


def page(args):
    first, agents, by = load(args.records)
    with open(args.benchmarks) as f:
        old_page = f.read()
    new_page = with_table(old_page, table(first, agents, by))
    with open(args.results) as f:
        old_results = json.load(f)
    new_results = dict(old_results, network_programming=results(by))
    if args.check:
        bad = []
        if new_page != old_page:
            bad.append(args.benchmarks)
        if new_results != old_results:
            bad.append(args.results)
        if bad:
            print("latency: not what the records give: " + ", ".join(bad), file=sys.stderr)
            return 1
        return 0
    with open(args.benchmarks, "w") as f:
        f.write(new_page)
    with open(args.results, "w") as f:
        f.write(json.dumps(new_results, indent=2, sort_keys=True) + "\n")
    print(f"latency: {args.benchmarks} and {args.results} written from {len(by)} records",
          file=sys.stderr)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("record", help="one run's latencies as a record")
    r.add_argument("dir")
    r.add_argument("--out", required=True)
    p = sub.add_parser("page", help="BENCHMARKS.md's table and results.json's keys")
    p.add_argument("records", nargs="+")
    p.add_argument("--benchmarks", required=True)
    p.add_argument("--results", required=True)
    p.add_argument("--check", action="store_true")
    args = ap.parse_args()
    return record(args) if args.verb == "record" else page(args)


if __name__ == "__main__":
    sys.exit(main())
