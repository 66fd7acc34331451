#!/usr/bin/env python3
"""The e2e comparison's records and page: kube-proxy's IPVS mode and the agent, shard by shard.

    report.py record DIR --shard NAME --out FILE
        One shard's run for one proxy (run.sh's --out DIR: its junit_*.xml and run.json) as a
        record: what ran (the commit, the agent's commit, every image's ID, the focus, the
        dates) and each test's result. Records are committed (tests/cluster/results/, and
        results/flannel/ for flannel's), so that shards run on different days can be merged.

    report.py page RECORD... --shards FILE --skip-file FILE [--swap DIR] [--explain FILE]
                  [--out FILE]
        tests/cluster/E2E.md (E2E-flannel.md) from the records. Refuses (exit 2) records that
        name different kube-proxy or agnhost images, node counts or CNIs, agent records (and a swap: DIR holds
        swap_report.py's swap.md and its run.json) that name different agent commits or
        images, a test that two shards ran, or two records of one shard and proxy. Exits 1
        when the agent fails a test that kube-proxy passes (the comparison the page exists
        for), 0 otherwise.

A kube-proxy record runs no agent code, so it stays valid when only the agent changes: an
agent change reruns the agent half of each shard (`shard.sh --proxy agent NAME`), and the page
lists the kube-proxy records made in clusters built at another agent commit.

Nothing on the page is typed: every figure and the header come from the records.
"""

import argparse
import datetime
import glob
import json
import os
import re
import sys
import xml.etree.ElementTree as ET

SUITE_NODES = ("[SynchronizedBeforeSuite]", "[SynchronizedAfterSuite]", "[BeforeSuite]",
               "[AfterSuite]", "[ReportAfterSuite]", "[ReportBeforeSuite]")
# What must be equal in every merged record: the reference's build and the cluster's size
# and CNI (records from before run.sh's --cni ran on the bridge).
SAME = ("kube_proxy_image", "agnhost_image", "nodes", "cni")
DEFAULTS = {"cni": "bridge"}
# What must be equal in every agent record and the swap: the agent's build.
SAME_AGENT = ("agent_commit", "agent_image")
PROXIES = ("kube-proxy", "agent")


def junit(directory):
    """{test name: {status, seconds, message}} from the junit files of one run. A test that
    the focus or skip list left out is not listed; one skipped at run time is, with why."""
    out = {}
    for path in sorted(glob.glob(os.path.join(directory, "junit*.xml"))):
        for case in ET.parse(path).getroot().iter("testcase"):
            name = case.get("name", "")
            if name.startswith(SUITE_NODES) or "[sig-" not in name:
                continue
            name = name.removeprefix("[It] ").strip()
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            skipped = case.find("skipped")
            if failure is not None:
                status = "failed"
                message = (failure.get("message") or failure.text or "").strip()
            elif skipped is not None or case.get("status") == "skipped":
                message = (skipped.get("message") if skipped is not None else "") or ""
                # ginkgo's message for a spec filtered out is "skipped"; a run-time skip
                # ("skipped - <why>") is a test of the focus that did not run.
                if message.strip() in ("", "skipped"):
                    continue
                status = "skipped"
                message = message.removeprefix("skipped - ").strip()
            else:
                status, message = "passed", ""
            out[name] = {"status": status, "seconds": round(float(case.get("time") or 0), 1),
                         "message": message.splitlines()[0][:200] if message else ""}
    return out


def record(args):
    with open(os.path.join(args.dir, "run.json")) as f:
        run = json.load(f)
    tests = junit(args.dir)
    if not tests:
        sys.exit(f"report: no test of the focus in {args.dir}'s junit reports")
    rec = {"shard": args.shard, "proxy": run["proxy"], "run": run, "tests": tests}
    with open(args.out, "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
        f.write("\n")
    counts = {s: sum(1 for t in tests.values() if t["status"] == s)
              for s in ("passed", "failed", "skipped")}
    print(f"report: {args.out}: {args.shard}, {run['proxy']}: {counts}", file=sys.stderr)
    return 0


def short(image_id):
    return image_id.removeprefix("sha256:")[:12]


def utc(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC")


def cell(result):
    if result is None:
        return "not run"
    if result["status"] == "skipped":
        return "skipped at run time"
    mark = "pass" if result["status"] == "passed" else "**FAIL**"
    return f"{mark} ({result['seconds']:.0f} s)"


def refuse(what, run, ref_path, ref, keys):
    """Exit 2 when `run` differs from the reference run `ref` (of `ref_path`) in `keys`."""
    def get(r, k):
        return r.get(k, DEFAULTS.get(k))
    diff = [k for k in keys if get(run, k) != get(ref, k)]
    if diff:
        print(f"report: {what} ran another build than {ref_path}: "
              + ", ".join(f"{k} {get(run, k)} != {get(ref, k)}" for k in diff), file=sys.stderr)
        sys.exit(2)


def page(args):
    records = []
    for path in args.records:
        with open(path) as f:
            records.append((path, json.load(f)))
    if not records:
        sys.exit("report: no records")
    shards = []
    with open(args.shards) as f:
        for raw in f:
            if raw.strip() and not raw.startswith("#"):
                shards.append(raw.split()[0])
    first = records[0][1]["run"]
    agents = [(path, rec) for path, rec in records if rec["proxy"] == "agent"]
    agent = agents[0][1]["run"] if agents else None
    for path, rec in records:
        refuse(path, rec["run"], records[0][0], first, SAME)
    for path, rec in agents:
        refuse(path, rec["run"], agents[0][0], agent, SAME_AGENT)
    by = {}
    for path, rec in records:
        key = (rec["shard"], rec["proxy"])
        if key in by:
            sys.exit(f"report: two records of shard {key[0]} for {key[1]}: {by[key][0]}, {path}")
        by[key] = (path, rec)
    results = {p: {} for p in PROXIES}
    where = {}
    for (shard, proxy), (path, rec) in sorted(by.items()):
        for name, result in rec["tests"].items():
            if name in results[proxy]:
                sys.exit(f"report: {name!r} ran in two shards ({where[name]}, {shard})")
            results[proxy][name] = result
            where[name] = shard
    kp, ag = results["kube-proxy"], results["agent"]
    names = sorted(set(kp) | set(ag))

    def count(run, status):
        return sum(1 for n in names if run.get(n, {}).get("status") == status)

    # A test of a shard the agent has no record of yet is missing, not failed.
    regressions = [n for n in names
                   if kp.get(n, {}).get("status") == "passed"
                   and ag.get(n, {}).get("status") in ("failed", "skipped")]
    missing = [f"{s} ({p})" for s in shards for p in PROXIES if (s, p) not in by]
    unknown = sorted({s for s, _ in by} - set(shards))
    heads = sorted({rec["run"]["commit"] for _, rec in by.values()})
    lines = [
        "# Kubernetes' e2e tests on the lab cluster: kube-proxy (IPVS) and the agent",
        "",
        "Written by `tests/cluster/report.py page` from the records in "
        f"`{os.path.relpath(os.path.dirname(os.path.abspath(records[0][0])))}/`"
        " (`tests/cluster/shard.sh`; do not edit by hand).",
        "",
        (f"- The agent: commit {agent['agent_commit'][:12]}, image `{agent['agent_image']}`."
         if agent else "- The agent: no record yet."),
        f"- kube-proxy v1.37.2 (IPVS mode): image `{first['kube_proxy_image']}`; agnhost "
        f"`{short(first['agnhost_image'])}`. {first['nodes']} nodes (lab VMs), "
        f"{first.get('cni', DEFAULTS['cni'])} CNI; e2e.test, "
        "kubelet and kube-proxy from the Kubernetes v1.37.2 module.",
        "- Harness commits of the shards: " + ", ".join(h[:12] for h in heads) + ".",
        f"- kube-proxy (IPVS): {count(kp, 'passed')} passed, {count(kp, 'failed')} failed, "
        f"{count(kp, 'skipped')} skipped at run time.",
        f"- the agent: {count(ag, 'passed')} passed, {count(ag, 'failed')} failed, "
        f"{count(ag, 'skipped')} skipped at run time.",
        f"- Tests the agent fails and kube-proxy passes: {len(regressions)}"
        + (": " + "; ".join(regressions) if regressions else "."),
    ]
    others = sorted(shard for (shard, proxy), (_, rec) in by.items()
                    if proxy == "kube-proxy" and agent
                    and rec["run"].get("agent_commit") != agent["agent_commit"])
    if others:
        lines.append("- kube-proxy records made in clusters built at other agent commits (the same"
                     " kube-proxy and agnhost images): " + ", ".join(
                         f"{s} ({by[(s, 'kube-proxy')][1]['run']['agent_commit'][:12]})"
                         for s in others) + ".")
    if missing:
        lines.append("- **Incomplete**: no record yet of " + ", ".join(missing) + ".")
    if unknown:
        lines.append("- Records of shards that shards.txt no longer has: " + ", ".join(unknown))
    lines += ["", "## The shards (tests/cluster/shards.txt)", "",
              "| shard | proxy | started | wall time | ginkgo processes | passed | failed |"
              " skipped | harness commit |",
              "|---|---|---|---|---|---|---|---|---|"]
    for (shard, proxy), (_, rec) in sorted(by.items(), key=lambda kv: (
            shards.index(kv[0][0]) if kv[0][0] in shards else 99, PROXIES.index(kv[0][1]))):
        run, tests = rec["run"], rec["tests"].values()
        n = {s: sum(1 for t in tests if t["status"] == s) for s in ("passed", "failed", "skipped")}
        lines.append(f"| {shard} | {proxy} | {utc(run['started'])} | "
                     f"{(run['finished'] - run['started']) / 60:.0f} min | {run['procs']} | "
                     f"{n['passed']} | {n['failed']} | {n['skipped']} | {run['commit'][:12]} |")
    lines += ["", "## Each test", "",
              "| test | shard | kube-proxy (IPVS) | the agent |", "|---|---|---|---|"]
    for n in names:
        lines.append(f"| {n.replace('|', '&#124;')} | {where[n]} | {cell(kp.get(n))} | "
                     f"{cell(ag.get(n))} |")
    failures = [(n, who, r) for n in names for who, r in (("kube-proxy", kp.get(n)),
                                                          ("agent", ag.get(n)))
                if r and r["status"] == "failed"]
    if failures:
        lines += ["", "## Failures, first line of each", ""]
        for n, who, r in failures:
            lines.append(f"- {who}, {n}: `{r['message']}`")
    skips = sorted({(n, r["message"]) for run in (kp, ag) for n, r in run.items()
                    if r["status"] == "skipped"})
    if skips:
        lines += ["", "## Skipped at run time (tests of the focus that skipped themselves)", ""]
        for n, why in skips:
            lines.append(f"- {n}: `{why}`")
    if args.swap:
        # The swap's section (swap_report.py) beside the run.json of the build it ran.
        with open(os.path.join(args.swap, "run.json")) as f:
            swap_run = json.load(f)
        refuse(f"the swap in {args.swap}", swap_run, records[0][0], first, SAME)
        if agent:
            refuse(f"the swap in {args.swap}", swap_run, agents[0][0], agent, SAME_AGENT)
        with open(os.path.join(args.swap, "swap.md")) as f:
            lines += ["", f.read().rstrip()]
    lines += ["", "## Not run, and why (tests/cluster/skip.txt)", ""]
    with open(args.skip_file) as f:
        for raw in f:
            if raw.startswith("#") or not raw.strip():
                continue
            pattern, _, why = raw.partition("#")
            lines.append(f"- `{pattern.strip()}`: {why.strip()}")
    if args.explain:
        with open(args.explain) as f:
            lines += ["", f.read().rstrip()]
    text = "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 1 if regressions else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("record", help="one shard's run as a record")
    r.add_argument("dir")
    r.add_argument("--shard", required=True)
    r.add_argument("--out", required=True)
    p = sub.add_parser("page", help="E2E.md from records")
    p.add_argument("records", nargs="+")
    p.add_argument("--shards", required=True)
    p.add_argument("--skip-file", required=True)
    p.add_argument("--swap", help="a directory with the swap's swap.md and run.json")
    p.add_argument("--explain", help="a markdown file of explanations, appended as is")
    p.add_argument("--out")
    args = ap.parse_args()
    return record(args) if args.verb == "record" else page(args)


if __name__ == "__main__":
    sys.exit(main())
