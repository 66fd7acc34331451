#!/usr/bin/env python3
"""The swap's figures (tests/cluster/swap-traffic.sh), as a section of E2E.md: the timeline
(the marks and each node's switch of proxy pods), then per phase, client node and path the
requests, those that failed and the longest time without an answer, then every spell of
failures with its duration.

    swap_report.py OUT_DIR

Reads, in OUT_DIR: marks.txt ("PHASE=HOST_EPOCH", in order; the last ends the run),
clock-start.txt and clock-end.txt ("NODE HOST_BEFORE NODE_TIME HOST_AFTER": each node's clock
against the host's), pods.txt (the watcher: "HOST_EPOCH - poll" for each poll, then "HOST_EPOCH NODE POD READY
[DELETION]" for each pod it saw),
client-NODE.log (`kubectl logs --timestamps`: the node's RFC 3339 time, then the client's
line) and run.json (the build, when run.sh wrote one). Prints markdown; exits 1 when a
request through a Service failed, a kept TCP connection was reconnected or a kept UDP flow
lost a datagram or its socket.
"""

import datetime
import glob
import json
import os
import re
import sys

PROBES = re.compile(r"^(cluster-ip|pod-ip|node-port-\S+) (ok|fail) (\S+)$")
TCP = re.compile(r"^tcp-kept (\d+) (\d{3}) (\S+)$")
UDP = re.compile(r"^udp-kept (\d+)$")
ENDED = re.compile(r"^(tcp-kept|udp-kept) ended")


def parse_time(text):
    date, _, frac = text.rstrip("Z").partition(".")
    micro = (frac + "000000")[:6]
    return datetime.datetime.fromisoformat(f"{date}.{micro}+00:00").timestamp()


def offsets(out):
    """{node: seconds its clock is ahead of the host's}, averaged over the start and end."""
    seen = {}
    for name in ("clock-start.txt", "clock-end.txt"):
        path = os.path.join(out, name)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                node, before, at, after = line.split()
                seen.setdefault(node, []).append(float(at) - (float(before) + float(after)) / 2)
    return {node: sum(v) / len(v) for node, v in seen.items()}


def events(path, offset):
    """(host time, kind, path, fields) for every line of one client's log."""
    out = []
    with open(path) as f:
        for raw in f:
            stamp, _, line = raw.rstrip("\n").partition(" ")
            try:
                t = parse_time(stamp) - offset
            except ValueError:
                continue
            if m := PROBES.match(line):
                out.append((t, m[1], m[2] == "ok", m[3]))
            elif m := TCP.match(line):
                out.append((t, "tcp-kept", m[2] == "200", (int(m[1]), m[3])))
            elif m := UDP.match(line):
                out.append((t, "udp-kept", True, int(m[1])))  # the datagram's number
            elif m := ENDED.match(line):
                out.append((t, m[1], False, "ended"))
    return out


def switches(out, marks):
    """[(node, swap, old pod gone, new pod Ready)] in host time, from the watcher."""
    polls, current = {}, None
    path = os.path.join(out, "pods.txt")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[1:] == ["-", "poll"]:
                t = float(parts[0])
                polls.setdefault(t, [])
                current = t
                continue
            if len(parts) < 4:
                continue
            # A pod's line belongs to the poll before it (its own time is when it was read).
            node, pod, ready = parts[1], parts[2], parts[3]
            polls.setdefault(current if current is not None else float(parts[0]), []).append(
                (node, pod, ready == "True", len(parts) > 4))
    nodes = sorted({p[0] for ps in polls.values() for p in ps})

    def agent(pod):
        return pod.startswith("kube-proxy-ipvs-")

    def kube_proxy(pod):
        return pod.startswith("kube-proxy-") and not agent(pod)

    rows = []
    names = [m[0] for m in marks]
    for swap, old, new in (("deploy/swap.sh to-agent", kube_proxy, agent),
                           ("deploy/swap.sh back", agent, kube_proxy)):
        if swap not in names:
            continue
        start = marks[names.index(swap)][1]
        end = marks[min(names.index(swap) + 2, len(marks) - 1)][1]
        for node in nodes:
            gone = ready = None
            for t in sorted(polls):
                if t < start or t > end:
                    continue
                here = [p for p in polls[t] if p[0] == node]
                if gone is None and not any(old(p[1]) for p in here):
                    gone = t
                if ready is None and any(new(p[1]) and p[2] and not p[3] for p in here):
                    ready = t
            rows.append((node, swap, gone, ready))
    return rows


def main():
    out = sys.argv[1]
    with open(os.path.join(out, "marks.txt")) as f:
        marks = [(name, float(t)) for name, _, t in
                 (line.strip().rpartition("=") for line in f if line.strip())]
    t0 = marks[0][1]
    phases = [(marks[i][0], marks[i][1], marks[i + 1][1]) for i in range(len(marks) - 1)]
    clock = offsets(out)
    lines = ["## The swap under traffic (tests/cluster/swap-traffic.sh)", ""]
    run_path = os.path.join(out, "run.json")
    if os.path.exists(run_path):
        with open(run_path) as f:
            run = json.load(f)
        lines += [f"Run by `run.sh --proxy kube-proxy --swap --no-e2e` at {run['commit'][:12]}:"
                  f" the agent's commit {run['agent_commit'][:12]}, image `{run['agent_image']}`;"
                  f" kube-proxy's image `{run['kube_proxy_image']}`;"
                  f" {datetime.datetime.fromtimestamp(run['started'], datetime.timezone.utc):%Y-%m-%d}.",
                  ""]
    lines += ["A client pod on every node requests twice a second per path, through its own"
              " node's proxy (ClusterIP, and each node's NodePort), keeps one TCP connection and"
              " one UDP flow to the ClusterIP, and asks a server on another node by its pod IP"
              " (the control, no service proxy on its path). Every path answered from every node"
              " before the first swap. Times are seconds from the first mark, on the host's clock"
              " (each node's clock offset: "
              + ", ".join(f"{n} {o:+.2f} s" for n, o in sorted(clock.items())) + ").", "",
              "| time | event |", "|---|---|"]
    timeline = [(t - t0, name) for name, t in marks]
    for node, swap, gone, ready in switches(out, marks):
        verb = "kube-proxy's" if swap.endswith("to-agent") else "the agent's"
        new = "the agent's" if swap.endswith("to-agent") else "kube-proxy's"
        if gone is not None:
            timeline.append((gone - t0, f"{node}: {verb} pod gone"))
        if ready is not None:
            timeline.append((ready - t0, f"{node}: {new} pod Ready"))
        if gone is not None and ready is not None:
            timeline.append((max(gone, ready) - t0,
                             f"{node}: switched, {ready - gone:.1f} s without a proxy pod"
                             if ready > gone else f"{node}: switched"))
    for t, what in sorted(timeline):
        lines.append(f"| {t:.1f} | {what} |")

    lines += ["", "| phase | node | path | requests | failed | longest without an answer |",
              "|---|---|---|---|---|---|"]
    failed_any = False
    spells = []
    for path in sorted(glob.glob(os.path.join(out, "client-*.log"))):
        node = os.path.basename(path).removeprefix("client-").removesuffix(".log")
        # Only what happened between the first mark and the last: before it, the clients
        # waited for every path to answer once (the precondition).
        evs = [e for e in events(path, clock.get(node, 0.0)) if t0 <= e[0] < marks[-1][1]]
        kinds = sorted({e[1] for e in evs}, key=lambda k: (k == "pod-ip", k))
        for kind in kinds:
            mine = [e for e in evs if e[1] == kind]
            # Spells: consecutive failures, from the first to the next answer.
            run_start, count = None, 0
            for t, _, ok, detail in mine:
                if not ok and run_start is None:
                    run_start, count = t, 0
                if not ok:
                    count += 1
                if ok and run_start is not None:
                    spells.append((run_start - t0, node, kind, count, t - run_start))
                    run_start = None
            if run_start is not None:
                spells.append((run_start - t0, node, kind, count, None))
            if kind == "tcp-kept":
                # The first transfer connects; any later connect is the kept one lost.
                connects = [d[0] for _, _, ok, d in mine if d != "ended"]
                reconnects = sum(1 for c in connects[1:] if c > 0)
                ended = sum(1 for e in mine if e[3] == "ended")
                if reconnects or ended:
                    failed_any = True
                    lines_extra = f" ({reconnects} reconnects, {ended} ended)"
                else:
                    lines_extra = " (one connection throughout)"
            elif kind == "udp-kept":
                # Each echo carries its datagram's number: a number missing between two
                # echoes is a datagram (or its echo) lost.
                seqs = [e[3] for e in mine if e[3] != "ended"]
                ended = sum(1 for e in mine if e[3] == "ended")
                lost = sum(max(0, b - a - 1) for a, b in zip(seqs, seqs[1:]) if b > a)
                if lost or ended:
                    failed_any = True
                lines_extra = f" (about {lost} datagrams lost, {ended} sockets ended)"
            else:
                lines_extra = ""
            for name, start, end in phases:
                inside = [e for e in mine if start <= e[0] < end]
                oks = [start] + [e[0] for e in inside if e[2]] + [end]
                gap = max(b - a for a, b in zip(oks, oks[1:]))
                bad = sum(1 for e in inside if not e[2])
                if kind != "pod-ip" and (bad or not inside):
                    failed_any = True
                label = kind + (" (control)" if kind == "pod-ip" else "")
                lines.append(f"| {name} | {node} | {label} | {len(inside)} | {bad} | "
                             f"{gap:.2f} s |")
            if lines_extra:
                lines.append(f"| whole run | {node} | {kind}{lines_extra} | | | |")
    lines += ["", "Spells of failed requests (from the first failure to the next answer):", ""]
    if spells:
        for t, node, kind, count, took in sorted(spells):
            lasting = f"{took:.2f} s" if took is not None else "to the end"
            lines.append(f"- at {t:.1f} s, {node}, {kind}: {count} failed, {lasting}")
    else:
        lines.append("- none")
    print("\n".join(lines))
    return 1 if failed_any else 0


if __name__ == "__main__":
    sys.exit(main())
