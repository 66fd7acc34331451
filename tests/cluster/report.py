#!/usr/bin/env python3
"""Writes tests/cluster/E2E.md from the junit reports of two e2e runs on the lab cluster:
kube-proxy's IPVS mode and the agent, on the same build. One row per test that ran in
either run (tests skipped by both are counted, not listed): each program's result and time.
The commit, date, node count and totals go at the top; tests/cluster/skip.txt's reasons
follow, so the page says what was not run and why.

    report.py --kube-proxy DIR --agent DIR --skip-file FILE --commit SHA --nodes N [--out FILE]

Each DIR holds the junit_*.xml that e2e.test --report-dir wrote. Exits 1 when the agent
fails a test that kube-proxy passes (the comparison the page exists for), 0 otherwise.
"""

import argparse
import datetime
import glob
import os
import sys
import xml.etree.ElementTree as ET


def results(directory):
    """{test name: (status, seconds, message)} from the junit files of one run."""
    out = {}
    files = sorted(glob.glob(os.path.join(directory, "junit*.xml")))
    if not files:
        print(f"report: no junit*.xml in {directory}: that run is reported as not run",
              file=sys.stderr)
    for path in files:
        for case in ET.parse(path).getroot().iter("testcase"):
            name = case.get("name", "")
            if name.startswith(("[SynchronizedBeforeSuite]", "[SynchronizedAfterSuite]",
                                "[BeforeSuite]", "[AfterSuite]", "[ReportAfterSuite]",
                                "[ReportBeforeSuite]")) or ("[sig-" not in name):
                continue  # ginkgo's suite-level nodes, not tests
            name = name.removeprefix("[It] ").strip()
            seconds = float(case.get("time") or 0)
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            if failure is not None:
                message = (failure.get("message") or failure.text or "").strip()
                status = "failed"
            elif case.find("skipped") is not None or case.get("status") == "skipped":
                status, message = "skipped", ""
            else:
                status, message = "passed", ""
            out[name] = (status, seconds, message.splitlines()[0][:160] if message else "")
    return out


def cell(result):
    if result is None:
        return "not run"
    status, seconds, _ = result
    if status == "skipped":
        return "skipped"
    mark = "pass" if status == "passed" else "**FAIL**"
    return f"{mark} ({seconds:.0f} s)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kube-proxy", required=True)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--skip-file", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--explain", help="a markdown file of explanations appended as is")
    ap.add_argument("--date", default=datetime.date.today().isoformat(),
                    help="the day of the runs (default: today)")
    ap.add_argument("--swap", help="swap-traffic.sh's table (swap.md); its junit beside it, in swapped/")
    ap.add_argument("--out")
    args = ap.parse_args()

    kp, ag = results(args.kube_proxy), results(args.agent)
    if not kp and not ag:
        sys.exit("report: neither run left a junit report")
    names = sorted(
        n for n in set(kp) | set(ag)
        if (kp.get(n, ("skipped",))[0] != "skipped" or ag.get(n, ("skipped",))[0] != "skipped")
    )
    skipped_both = len(set(kp) | set(ag)) - len(names)

    def count(run, status):
        return sum(1 for n in names if run.get(n, ("not run",))[0] == status)

    regressions = [n for n in names
                   if kp.get(n, ("",))[0] == "passed" and ag.get(n, ("",))[0] != "passed"]
    lines = [
        "# Kubernetes' e2e tests on the lab cluster: kube-proxy (IPVS) and the agent",
        "",
        "Written by `tests/cluster/report.py` from the junit reports of `tests/cluster/e2e.sh`"
        " (do not edit by hand).",
        "",
        f"- Commit: {args.commit}; date: {args.date}; "
        f"nodes: {args.nodes} (lab VMs); Kubernetes v1.37.2 (e2e.test, kubelet, kube-proxy "
        "from the same module).",
        ("- kube-proxy (IPVS): **no report: its run did not finish** (every row says not run)."
         if not kp else
         f"- kube-proxy (IPVS): {count(kp, 'passed')} passed, {count(kp, 'failed')} failed, "
         f"{sum(v[1] for v in kp.values() if v[0] != 'skipped'):.0f} s of tests."),
        f"- the agent: {count(ag, 'passed')} passed, {count(ag, 'failed')} failed, "
        f"{sum(v[1] for v in ag.values() if v[0] != 'skipped'):.0f} s of tests.",
        f"- Tests the agent fails and kube-proxy passes: {len(regressions)}"
        + (": " + "; ".join(regressions) if regressions else "."),
        f"- Skipped in both runs: {skipped_both} specs (outside the focus, tests/cluster/focus.txt,"
        " or on the skip list below).",
        "",
        "| test | kube-proxy (IPVS) | the agent |",
        "|---|---|---|",
    ]
    for n in names:
        lines.append(f"| {n.replace('|', '&#124;')} | {cell(kp.get(n))} | {cell(ag.get(n))} |")
    failures = [(n, r) for n in names for r in (("kube-proxy", kp.get(n)), ("agent", ag.get(n)))
                if r[1] and r[1][0] == "failed"]
    if failures:
        lines += ["", "## Failures, first line of each", ""]
        for n, (who, r) in failures:
            lines.append(f"- {who}, {n}: `{r[2]}`")
    if args.swap and os.path.exists(args.swap):
        swapped = results(os.path.join(os.path.dirname(args.swap), "swapped"))
        ran = {n: r for n, r in swapped.items() if r[0] != "skipped"}
        passed = sum(1 for r in ran.values() if r[0] == "passed")
        lines += ["", "## The swap under traffic (tests/cluster/swap-traffic.sh)", "",
                  "kube-proxy (IPVS) serving; clients on the last node request without pause"
                  " through a ClusterIP, through the first node's NodePort and, as the control,"
                  " to the first node's server by its pod IP (no service proxy on that path);"
                  " `deploy/swap.sh to-agent`, the Conformance Services tests on the swapped"
                  " cluster, then `deploy/swap.sh back`.", "",
                  f"Conformance Services tests with the agent after the swap: {passed} of"
                  f" {len(ran)} passed.", ""]
        with open(args.swap) as f:
            lines.append(f.read().rstrip())
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


if __name__ == "__main__":
    sys.exit(main())
