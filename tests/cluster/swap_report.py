#!/usr/bin/env python3
"""The swap's figures from the clients' logs (tests/cluster/swap-traffic.sh): per phase and
client, the requests sent, those that failed, and the longest time without an answer (between
two answered requests, or from the phase's start to the first or from the last to its end).

    swap_report.py OUT_DIR "PHASE=RFC3339" ... (the marks, in order; the last ends the run)

Reads OUT_DIR/via-*.log (`kubectl logs --timestamps`: "TIME ok SECONDS" with curl's own
time for the request, or "TIME fail [CODE]" with curl's exit code). The slowest answered
request tells a client starved of CPU (long gaps, fast requests) from a slow path (slow
requests); failures are counted by kind: refused (curl 7: nothing listened, or a REJECT) and
timed out (curl 28: lost, or too slow for `-m 1`). `via-pod-ip` is the control, a path no
service proxy is on. Prints markdown; exits 1 when a request through a Service failed.
"""

import datetime
import glob
import os
import sys


def parse_time(text):
    # RFC 3339 with up to nanoseconds: keep microseconds for datetime.
    date, _, frac = text.rstrip("Z").partition(".")
    micro = (frac + "000000")[:6]
    return datetime.datetime.fromisoformat(f"{date}.{micro}+00:00")


def main():
    out, marks = sys.argv[1], [m.split("=", 1) for m in sys.argv[2:]]
    marks = [(name, parse_time(t)) for name, t in marks]
    phases = [(marks[i][0], marks[i][1], marks[i + 1][1]) for i in range(len(marks) - 1)]
    lines = ["| phase | client | requests | failed | refused / timed out | "
             "longest without an answer | slowest answer |",
             "|---|---|---|---|---|---|---|"]
    failed_any = False
    for path in sorted(glob.glob(os.path.join(out, "via-*.log"))):
        client = os.path.basename(path).removesuffix(".log")
        events = []
        with open(path) as f:
            for raw in f:
                parts = raw.split()
                if len(parts) >= 2 and parts[1] in ("ok", "fail"):
                    ok = parts[1] == "ok"
                    took = float(parts[2]) if ok and len(parts) > 2 else 0.0
                    code = parts[2] if not ok and len(parts) > 2 else ""
                    events.append((parse_time(parts[0]), ok, took, code))
        for name, start, end in phases:
            inside = [e for e in events if start <= e[0] < end]
            oks = [start] + [t for t, ok, _, _ in inside if ok] + [end]
            gap = max(b - a for a, b in zip(oks, oks[1:]))
            codes = [code for _, ok, _, code in inside if not ok]
            failed = len(codes)
            kinds = f"{codes.count('7')} / {codes.count('28')}"
            if len(codes) > codes.count("7") + codes.count("28"):
                kinds += f" (+{len(codes) - codes.count('7') - codes.count('28')} other)"
            slowest = max((took for _, ok, took, _ in inside if ok), default=0.0)
            if client != "via-pod-ip":
                failed_any |= failed > 0 or not inside
            lines.append(f"| {name} | {client} | {len(inside)} | {failed} | {kinds} | "
                         f"{gap.total_seconds():.2f} s | {slowest:.3f} s |")
    print("\n".join(lines))
    return 1 if failed_any else 0


if __name__ == "__main__":
    sys.exit(main())
