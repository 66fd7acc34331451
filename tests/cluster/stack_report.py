#!/usr/bin/env python3
"""The stack's records and page: MetalLB layer 2 asked from outside the cluster, kube-proxy's
IPVS mode beside the agent, with strictARP on and off.

    stack_report.py record DIR --out FILE
        One run's LoadBalancer checks (run.sh --lb metallb: DIR/lb/ holds lb-traffic.sh's
        lb.json and run.sh's run.json) as a record: what ran (the commit, the agent's commit,
        every image's ID, MetalLB's images, strictARP) and each check's verdict, what it saw
        and what it measured. Records are committed (tests/cluster/results/stack/).

    stack_report.py page RECORD... [--e2e E2E_RECORD]... [--out FILE]
        tests/cluster/STACK.md from the records. Refuses (exit 2) records that name different
        kube-proxy, agnhost or MetalLB images, node counts or CNIs, agent records that name
        different agent commits or images, and two records of one proxy and strictARP
        setting. Exits 1 when the agent fails a check (with strictARP off, the ARP check
        expects the failure strictARP exists for, so it passes when that failure shows).
        With --e2e, report.py records of Kubernetes' LoadBalancers tests run on the same
        builds (stack.sh --e2e) make a section of their own; the page exits 1 too when the
        agent fails one that kube-proxy passes.

Nothing on the page is typed: every figure and the header come from the records.
"""

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402 (the e2e records' reader, beside this file)

SAME = ("kube_proxy_image", "agnhost_image", "metallb_images", "nodes", "cni")
SAME_AGENT = ("agent_commit", "agent_image")
PROXIES = ("kube-proxy", "agent")
# What each check shows, in the order lb-traffic.sh runs them.
CHECKS = {
    "first-answer-lb-cluster": "the first answer through an LB IP (externalTrafficPolicy "
                               "Cluster), from the server pod's Ready",
    "first-answer-lb-local": "the same, externalTrafficPolicy Local",
    "first-answer-lb-ranges": "the same, loadBalancerSourceRanges",
    "lb-ip-answers": "the LB IP answers from outside, through the node MetalLB elected",
    "arp-replies-strictARP-on": "strictARP on: exactly one MAC answers ARP for the LB IP",
    "arp-replies-strictARP-off": "strictARP off: more than one MAC answers (the failure "
                                 "strictARP prevents: metallb#153)",
    "local-keeps-source": "externalTrafficPolicy Local: the pod sees the client's own address,"
                          " through the endpoint's node",
    "local-other-node-silent": "externalTrafficPolicy Local: the node without an endpoint, "
                               "asked directly, does not answer",
    "source-ranges": "loadBalancerSourceRanges: the allowed client answered, the other dropped",
    "failover": "the elected node's speaker goes: the IP moves and the client is served again",
}


def record(args):
    lb = os.path.join(args.dir, "lb")
    with open(os.path.join(lb, "run.json")) as f:
        run = json.load(f)
    with open(os.path.join(lb, "lb.json")) as f:
        checks = json.load(f)
    if not checks:
        sys.exit(f"stack: no check in {lb}/lb.json")
    rec = {"proxy": run["proxy"], "strict_arp": run["strict_arp"], "run": run,
           "checks": {c["check"]: {"pass": c["pass"], "saw": c["saw"],
                                   "seconds": c.get("seconds")} for c in checks}}
    with open(args.out, "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
        f.write("\n")
    failed = [n for n, c in rec["checks"].items() if not c["pass"]]
    print(f"stack: {args.out}: {run['proxy']}, strictARP {run['strict_arp']}: "
          f"{len(checks) - len(failed)} passed, failed: {failed or 'none'}", file=sys.stderr)
    return 0


def utc(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC")


def refuse(what, run, ref_path, ref, keys):
    diff = [k for k in keys if run.get(k) != ref.get(k)]
    if diff:
        print(f"stack: {what} ran another build than {ref_path}: "
              + ", ".join(f"{k} {run.get(k)} != {ref.get(k)}" for k in diff), file=sys.stderr)
        sys.exit(2)


def setting(rec):
    return "on" if rec["strict_arp"] in (True, "true", "on") else "off"


def cell(check):
    if check is None:
        return "not run" 
    mark = "pass" if check["pass"] else "**FAIL**"
    return f"{mark}: {check['saw'].replace('|', '&#124;')}"


def page(args):
    records = []
    for path in args.records:
        with open(path) as f:
            records.append((path, json.load(f)))
    if not records:
        sys.exit("stack: no records")
    first = records[0][1]["run"]
    agents = [(p, r) for p, r in records if r["proxy"] == "agent"]
    for path, rec in records:
        refuse(path, rec["run"], records[0][0], first, SAME)
    for path, rec in agents:
        refuse(path, rec["run"], agents[0][0], agents[0][1]["run"], SAME_AGENT)
    by = {}
    for path, rec in records:
        key = (setting(rec), rec["proxy"])
        if key in by:
            sys.exit(f"stack: two records of {key[1]} with strictARP {key[0]}: "
                     f"{by[key][0]}, {path}")
        by[key] = (path, rec)
    columns = [(s, p) for s in ("on", "off") for p in PROXIES if (s, p) in by]
    agent_failed = [(s, n) for (s, p), (_, rec) in by.items() if p == "agent"
                    for n, c in rec["checks"].items() if not c["pass"]]
    agent = agents[0][1]["run"] if agents else None
    mlb = first.get("metallb_images") or {}
    lines = [
        "# The stack IPVS users run: MetalLB layer 2, asked from outside the cluster",
        "",
        "Written by `tests/cluster/stack_report.py page` from the records in "
        f"`{os.path.relpath(os.path.dirname(os.path.abspath(records[0][0])))}/`"
        " (`tests/cluster/stack.sh`; do not edit by hand).",
        "",
        (f"- The agent: commit {agent['agent_commit'][:12]}, image `{agent['agent_image']}`."
         if agent else "- The agent: no record yet."),
        f"- kube-proxy v1.37.2 (IPVS mode): image `{first['kube_proxy_image']}`.",
        "- MetalLB v0.16.1 (layer 2, tests/cluster/metallb/go.mod): "
        + ", ".join(f"{k} `{v}`" for k, v in sorted(mlb.items())) + ".",
        f"- {first['nodes']} nodes (lab VMs), {first.get('cni', 'bridge')} CNI; the clients are "
        "two network namespaces on the nodes' bridge, outside the cluster "
        "(`tests/cluster/lb-traffic.sh`).",
        "- Harness commits of the runs: "
        + ", ".join(sorted({r['run']['commit'][:12] for _, r in by.values()})) + ".",
        "- Checks the agent fails: " + (str(len(agent_failed)) + ": " + "; ".join(
            f"{n} (strictARP {s})" for s, n in sorted(agent_failed)) if agent_failed else
            "none." if agents else "no agent record yet."),
    ]
    missing = [f"{p} with strictARP {s}" for s in ("on", "off") for p in PROXIES
               if (s, p) not in by]
    if missing:
        lines.append("- **Incomplete**: no record yet of " + ", ".join(missing) + ".")
    lines += ["", "## The runs", "", "| proxy | strictARP | started | checks passed | harness commit |",
              "|---|---|---|---|---|"]
    for s, p in columns:
        run, checks = by[(s, p)][1]["run"], by[(s, p)][1]["checks"]
        lines.append(f"| {p} | {s} | {utc(run['started'])} | "
                     f"{sum(c['pass'] for c in checks.values())} of {len(checks)} | "
                     f"{run['commit'][:12]} |")
    lines += ["", "## Each check", "",
              "| check | what it shows | " + " | ".join(f"{p}, strictARP {s}" for s, p in columns)
              + " |", "|---|---|" + "---|" * len(columns)]
    names = [n for n in CHECKS if any(n in by[k][1]["checks"] for k in columns)]
    names += sorted({n for k in columns for n in by[k][1]["checks"]} - set(names))
    for n in names:
        cells = [cell(by[k][1]["checks"].get(n)) for k in columns]
        lines.append(f"| {n} | {CHECKS.get(n, '')} | " + " | ".join(cells) + " |")
    timed = [n for n in names if any((by[k][1]["checks"].get(n) or {}).get("seconds")
                                     is not None for k in columns)]
    if timed:
        lines += ["", "## What was measured (seconds)", "",
                  "| check | " + " | ".join(f"{p}, strictARP {s}" for s, p in columns) + " |",
                  "|---|" + "---|" * len(columns)]
        for n in timed:
            vals = []
            for k in columns:
                c = by[k][1]["checks"].get(n)
                vals.append("" if c is None or c.get("seconds") is None
                            else f"{c['seconds']:.1f}")
            lines.append(f"| {n} | " + " | ".join(vals) + " |")
    regressions = e2e_section(args.e2e or [], records[0], agents[0] if agents else None, lines)
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 1 if agent_failed or regressions else 0


def e2e_section(paths, first, agent, lines):
    """Kubernetes' LoadBalancers tests beside the checks: their records must name the
    checks' builds. Returns the tests the agent fails and kube-proxy passes."""
    if not paths:
        return []
    results = {p: {} for p in PROXIES}
    for path in paths:
        with open(path) as f:
            rec = json.load(f)
        refuse(path, rec["run"], first[0], first[1]["run"], SAME)
        if rec["proxy"] == "agent" and agent:
            refuse(path, rec["run"], agent[0], agent[1]["run"], SAME_AGENT)
        if results[rec["proxy"]]:
            sys.exit(f"stack: two LoadBalancers e2e records of {rec['proxy']} ({path})")
        results[rec["proxy"]] = rec["tests"]
    kp, ag = results["kube-proxy"], results["agent"]
    names = sorted(set(kp) | set(ag))
    regressions = [n for n in names if kp.get(n, {}).get("status") == "passed"
                   and ag.get(n, {}).get("status") in ("failed", "skipped")]
    lines += ["", "## Kubernetes' `[sig-network] LoadBalancers` tests, the load balancer MetalLB",
              "", "e2e.test v1.37.2 against the strictARP-on clusters (skip.txt without its "
              "LoadBalancer line). Tests the agent fails and kube-proxy passes: "
              + (str(len(regressions)) + ": " + "; ".join(regressions) if regressions
                 else "none") + ".", "",
              "| test | kube-proxy (IPVS) | the agent |", "|---|---|---|"]
    for n in names:
        lines.append(f"| {n.replace('|', '&#124;')} | {report.cell(kp.get(n))} | "
                     f"{report.cell(ag.get(n))} |")
    notes = sorted({(who, n, r["status"], r["message"]) for who, run in
                    (("kube-proxy", kp), ("agent", ag)) for n, r in run.items()
                    if r["status"] != "passed"})
    if notes:
        lines += ["", "Failures and skips, first line of each:", ""]
        for who, n, status, why in notes:
            lines.append(f"- {who}, {status}, {n}: `{why}`")
    return regressions


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("record", help="one run's LoadBalancer checks as a record")
    r.add_argument("dir")
    r.add_argument("--out", required=True)
    p = sub.add_parser("page", help="STACK.md from records")
    p.add_argument("records", nargs="+")
    p.add_argument("--e2e", action="append", help="a report.py record of the LoadBalancers tests")
    p.add_argument("--out")
    args = ap.parse_args()
    return record(args) if args.verb == "record" else page(args)


if __name__ == "__main__":
    sys.exit(main())
