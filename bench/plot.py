#!/usr/bin/env python3
"""The pictures and the table of BENCHMARKS.md, drawn from bench/results.json.

    python3 bench/plot.py            writes bench/cold-sync.svg, bench/change-latency.svg and
                                     bench/memory.svg, and the table between the markers of
                                     BENCHMARKS.md (tests/bench.sh runs this after each run)
    python3 bench/plot.py --table    prints the table (Markdown) and writes nothing
    python3 bench/plot.py --check    writes nothing; exits 1 if a committed SVG or the page's
                                     table is not what results.json gives
    --results FILE, --out DIR, --page FILE, --readme FILE ('' leaves that page alone): the
    README's performance summary (the side-by-side figures at 10,000) is written between its
    bench-summary markers the same way, and docs/operating.md's memory and CPU figures
    between its sizing markers (--sizing FILE)

Python 3's standard library only (no matplotlib): the SVG is written by hand. A figure the
results do not hold (an older run's file, a key that is null) is left out of the picture and
said so; nothing here fails on a missing key. The output depends only on results.json, so the
same file always gives the same bytes.
"""

import argparse
import json
import math
import pathlib
import sys
import textwrap
from html import escape

ROOT = pathlib.Path(__file__).resolve().parent.parent
MARK_BEGIN = "<!-- results-table: written by bench/plot.py from bench/results.json; edit those, not this -->"
MARK_END = "<!-- end results-table -->"
README_BEGIN = "<!-- bench-summary: written by bench/plot.py from bench/results.json; edit those, not this -->"
README_END = "<!-- end bench-summary -->"
SIZING_BEGIN = "<!-- sizing: written by bench/plot.py from bench/results.json; edit those, not this -->"
SIZING_END = "<!-- end sizing -->"

# The targets (and those met before, which must stay met), by results.json key:
# (key, what it is, unit, target's upper bound, how to derive it from the per-N figures of a
# file written before the key existed).
TARGETS = [
    ("cold_sync_ratio_10k", "cold sync / T_raw (the stock tools), N = 10,000", "ratio", 1.0,
     lambda r: _div(_num(r, "scale", "10000", "t_agent_cold_s"), _num(r, "scale", "10000", "t_raw_s"))),
    ("cold_sync_ratio_50k_route", "cold sync with `--vip-binding=route` / T_raw, N = 50,000", "ratio", 0.35,
     lambda r: _div(_num(r, "scale", "50000", "t_agent_cold_route_s"), _num(r, "scale", "50000", "t_raw_s"))),
    ("first_service_raw_ratio_10k", "time to the first Service / T_raw, N = 10,000", "ratio", 0.05,
     lambda r: _div(_num(r, "scale", "10000", "first_service_s"), _num(r, "scale", "10000", "t_raw_s"))),
    ("change_p99_ratio_50k_1k", "one change's p99 at N = 50,000 / at 1,000", "ratio", 1.5,
     lambda r: _div(_num(r, "scale", "50000", "change_p99_ms"), _num(r, "scale", "1000", "change_p99_ms"))),
    ("noop_resync_ratio", "no-op full resync / T_dump (the dump tools), the worst N", "ratio", 1.0, None),
    ("rss_mib_10k", "RSS after the cold sync, N = 10,000 (scale child)", "MiB", 40.0,
     lambda r: _num(r, "scale", "10000", "rss_cold_mib")),
    ("rss_mib_50k", "RSS after the cold sync, N = 50,000 (scale child)", "MiB", 160.0,
     lambda r: _num(r, "scale", "50000", "rss_cold_mib")),
    ("beside_agent_peak_rss_mib_10k", "peak RSS beside the API server, N = 10,000", "MiB", 60.0,
     lambda r: _num(r, "beside", "10000", "agent", "rss_peak_mib")),
    ("kube_proxy_cold_ratio_10k", "cold sync / kube-proxy IPVS mode's, N = 10,000", "ratio", 0.1, None),
    ("kube_proxy_change_cpu_ratio_10k", "CPU per change / kube-proxy IPVS mode's", "ratio", 0.05, None),
    ("kube_proxy_rss_ratio_10k", "peak RSS / kube-proxy IPVS mode's", "ratio", 0.5, None),
    ("nftables_cold_ratio_10k", "cold sync / kube-proxy nftables mode's, N = 10,000", "ratio", 1.0, None),
    ("nftables_change_latency_p99_ratio_10k", "change latency p99 / nftables mode's", "ratio", 1.0, None),
    ("nftables_change_cpu_ratio_10k", "CPU per change / nftables mode's", "ratio", 1.0, None),
    ("nftables_rss_ratio_10k", "peak RSS / nftables mode's", "ratio", 1.0, None),
]

# Okabe-Ito colours (readable with the common colour blindnesses).
BLUE, SKY, VERMILION, GREEN, GREY, ORANGE = "#0072B2", "#56B4E9", "#D55E00", "#009E73", "#555555", "#E69F00"
PROGRAMS = [  # beside: key, label, colour, marker
    ("agent", "the agent", BLUE, "circle"),
    ("ipvs", "kube-proxy --proxy-mode=ipvs", VERMILION, "square"),
    ("nftables", "kube-proxy --proxy-mode=nftables", GREEN, "triangle"),
]
FONT = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""
MACHINE = ("lab VM: 2 vCPUs under QEMU software emulation (TCG), about 20x slower than a real "
           "machine: compare the ratios, not the seconds")


# ---- reading results.json, whatever it holds ----

def _num(r, *path):
    """The positive number at path in r, or None (missing, null, not a number)."""
    for k in path:
        if not isinstance(r, dict):
            return None
        r = r.get(k)
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r):
        return None
    return float(r)


def _div(a, b):
    return a / b if a is not None and b else None


def _sizes(r, part):
    """The N of one part (`scale` or `beside`), ascending."""
    d = r.get(part) if isinstance(r, dict) else None
    if not isinstance(d, dict):
        return []
    return sorted(int(k) for k in d if k.isdigit())


def run_line(r):
    """Which run: its commit and date (per part when the two parts differ)."""
    def one(commit, date):
        if not commit:
            return "commit not recorded in results.json"
        return f"commit {commit}" + (f", {date}" if date else "")
    runs = r.get("runs") if isinstance(r.get("runs"), dict) else {}
    parts = {p: runs[p] for p in ("scale", "beside") if isinstance(runs.get(p), dict)}
    seen = {(v.get("commit"), v.get("date")) for v in parts.values()}
    if len(seen) > 1:
        return "; ".join(f"{p} bench at {one(v.get('commit'), v.get('date'))}" for p, v in parts.items())
    return one(r.get("commit"), r.get("date"))


# ---- a small SVG plotter: log axes, lines, markers, legends ----

def fmt_num(v):
    if v >= 1000:
        return f"{v:,.0f}"
    if v >= 1:
        return f"{v:.0f}"
    return f"{v:g}"


def fmt_ms(v):
    if v >= 1000:
        return f"{v / 1000:g} s"
    return f"{v:g} ms"


class LogAxis:
    """A base-10 log axis over whole decades that hold lo..hi, mapped to pixels a..b."""

    def __init__(self, values, a, b, fmt=fmt_num, default=(1.0, 10.0)):
        values = [v for v in values if v is not None and v > 0]
        lo, hi = (min(values), max(values)) if values else default
        self.d0 = math.floor(math.log10(lo))
        self.d1 = max(math.ceil(math.log10(hi)), self.d0 + 1)
        self.a, self.b, self.fmt = a, b, fmt

    def __call__(self, v):
        t = (math.log10(v) - self.d0) / (self.d1 - self.d0)
        return self.a + t * (self.b - self.a)

    def ticks(self):
        """(value, labelled) for the grid: each decade, and 2 and 5 when there are few."""
        decades = self.d1 - self.d0
        out = []
        for d in range(self.d0, self.d1 + 1):
            out.append((10.0 ** d, True))
            if d < self.d1 and decades <= 3:
                for m in (2, 5):
                    out.append((m * 10.0 ** d, decades <= 2))
        return out


class Svg:
    def __init__(self, width, height):
        self.w, self.h = width, height
        self.parts = []

    def add(self, s):
        self.parts.append(s)

    def text(self, x, y, s, size=12, anchor="start", weight="normal", color="#222", rotate=None, italic=False):
        tr = f' transform="rotate({rotate} {x:.1f} {y:.1f})"' if rotate is not None else ""
        style = ' font-style="italic"' if italic else ""
        self.add(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
                 f'font-weight="{weight}" fill="{color}"{style}{tr}>{escape(s)}</text>')

    def line(self, x1, y1, x2, y2, color="#222", width=1.0, dash=None, opacity=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        o = f' stroke-opacity="{opacity}"' if opacity is not None else ""
        self.add(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" '
                 f'stroke-width="{width}"{d}{o}/>')

    def rect(self, x, y, w, h, fill="none", stroke="none", width=1.0, opacity=None):
        o = f' fill-opacity="{opacity}"' if opacity is not None else ""
        self.add(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}" '
                 f'stroke="{stroke}" stroke-width="{width}"{o}/>')

    def polyline(self, pts, color, width=2.0, dash=None):
        d = f' stroke-dasharray="{dash}"' if dash else ""
        p = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        self.add(f'<polyline points="{p}" fill="none" stroke="{color}" stroke-width="{width}"{d}/>')

    def marker(self, x, y, kind, color, size=4.5, filled=True):
        fill = color if filled else "white"
        a = f'fill="{fill}" stroke="{color}" stroke-width="1.5"'
        if kind == "circle":
            self.add(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{size:.1f}" {a}/>')
        elif kind == "square":
            s = size * 0.9
            self.add(f'<rect x="{x - s:.1f}" y="{y - s:.1f}" width="{2 * s:.1f}" height="{2 * s:.1f}" {a}/>')
        elif kind == "triangle":
            s = size * 1.2
            self.add(f'<polygon points="{x:.1f},{y - s:.1f} {x + s:.1f},{y + s * 0.8:.1f} '
                     f'{x - s:.1f},{y + s * 0.8:.1f}" {a}/>')
        elif kind == "diamond":
            s = size * 1.2
            self.add(f'<polygon points="{x:.1f},{y - s:.1f} {x + s:.1f},{y:.1f} {x:.1f},{y + s:.1f} '
                     f'{x - s:.1f},{y:.1f}" {a}/>')
        elif kind == "cross":
            s = size
            self.line(x - s, y - s, x + s, y + s, color, 2)
            self.line(x - s, y + s, x + s, y - s, color, 2)
        elif kind == "box":
            self.rect(x - 10, y - 5, 20, 10, fill=color, stroke=color, opacity=0.25)
        elif kind == "bar":
            self.line(x, y - size * 1.6, x, y + size * 1.6, color, 3)

    def caption(self, x, y, paragraphs, width_chars, size=11):
        for para in paragraphs:
            for ln in textwrap.wrap(para, width_chars, break_on_hyphens=False):
                self.text(x, y, ln, size=size, color="#333")
                y += size + 4
            y += 4
        return int(y + 6)

    def render(self):
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.w}" height="{self.h}" '
                f'viewBox="0 0 {self.w} {self.h}" {FONT}>')
        return "\n".join([head, f'<rect width="{self.w}" height="{self.h}" fill="white"/>', *self.parts, "</svg>"]) + "\n"


def text_width(s, size=12):
    return len(s) * size * 0.56


def frame(svg, x0, y0, w, h, xaxis, yaxis, title, xlabel, ylabel, xticks=None):
    """A panel: its grid, ticks, labels and title; xticks are the values to label on x."""
    svg.text(x0 + w / 2, y0 - 10, title, size=13, anchor="middle", weight="bold")
    svg.rect(x0, y0, w, h, fill="#fafafa", stroke="#bbb")
    for v, labelled in yaxis.ticks():
        y = yaxis(v)
        svg.line(x0, y, x0 + w, y, "#ddd" if labelled else "#eee", 1)
        if labelled:
            svg.line(x0 - 4, y, x0, y, "#444", 1)
            svg.text(x0 - 7, y + 4, yaxis.fmt(v), size=11, anchor="end")
    for v in xticks or [v for v, lab in xaxis.ticks() if lab]:
        x = xaxis(v)
        svg.line(x, y0, x, y0 + h, "#e4e4e4", 1)
        svg.line(x, y0 + h, x, y0 + h + 4, "#444", 1)
        svg.text(x, y0 + h + 17, xaxis.fmt(v), size=11, anchor="middle")
    svg.text(x0 + w / 2, y0 + h + 36, xlabel, size=12, anchor="middle")
    svg.text(x0 - 48, y0 + h / 2, ylabel, size=12, anchor="middle", rotate=-90)


def series(svg, xaxis, yaxis, pts, color, marker, dash=None, filled=True):
    """A line through the points (x, y); a None y breaks it, and its point is not drawn."""
    run = []
    for x, y in pts:
        if y is None or y <= 0:
            if len(run) > 1:
                svg.polyline(run, color, dash=dash)
            run = []
            continue
        run.append((xaxis(x), yaxis(y)))
    if len(run) > 1:
        svg.polyline(run, color, dash=dash)
    for x, y in pts:
        if y is not None and y > 0:
            svg.marker(xaxis(x), yaxis(y), marker, color, filled=filled)


def legend(svg, x, y, entries, size=11):
    """entries: (label, colour, marker, dash, filled); a box at (x, y) top left."""
    if not entries:
        return y
    w = max(text_width(e[0], size) for e in entries) + 46
    h = len(entries) * (size + 7) + 8
    svg.rect(x, y, w, h, fill="white", stroke="#ccc", opacity=0.92)
    for i, (label, color, marker, dash, filled) in enumerate(entries):
        cy = y + 11 + i * (size + 7)
        if dash is not False:
            svg.line(x + 6, cy, x + 30, cy, color, 2, dash=dash)
        if marker:
            svg.marker(x + 18, cy, marker, color, size=3.8, filled=filled)
        svg.text(x + 36, cy + 4, label, size=size)
    return y + h


def header(svg, r, title):
    svg.text(20, 26, title, size=16, weight="bold")
    svg.text(20, 45, f"{run_line(r)}. {MACHINE}.", size=11, color="#444")


# ---- (a) cold sync against N ----

X_RANGE = [700, 70000]


def n_axis(a, b):
    ax = LogAxis(X_RANGE, a, b)
    ax.d0, ax.d1 = math.log10(X_RANGE[0]), math.log10(X_RANGE[1])
    return ax


def cold_sync(r):
    svg = Svg(1000, 600)
    header(svg, r, "Cold sync: time to the full state against N (log-log)")
    scale_n, beside_n = _sizes(r, "scale"), _sizes(r, "beside")
    scale_series = [
        ("the agent's cold sync", "t_agent_cold_s", BLUE, "circle", None, True),
        ("the agent's cold sync, --vip-binding=route", "t_agent_cold_route_s", SKY, "circle", None, False),
        ("T_raw: the stock tools load the same state", "t_raw_s", GREY, "square", None, True),
        ("the agent's no-op full resync", "noop_resync_s", BLUE, "circle", "5,4", False),
        ("T_dump: the stock tools dump it", "t_dump_s", GREY, "square", "5,4", False),
    ]
    beside_series = [(label, color, marker) for _, label, color, marker in PROGRAMS]
    values = [_num(r, "scale", str(n), k) for n in scale_n for _, k, *_ in scale_series]
    values += [_num(r, "beside", str(n), p[0], "cold_s") for n in beside_n for p in PROGRAMS]
    top, h, w = 110, 300, 360
    panels = [(90, "Kernel programming alone (scale bench)"), (590, "Beside the real kube-apiserver")]
    y = LogAxis(values, top + h, top, fmt_num)
    ticks_all = sorted(set(scale_n) | set(beside_n)) or [1000, 10000]
    # Left: the agent's library with S(N, 5) handed in process, and the stock tools.
    x0, t = panels[0]
    x = n_axis(x0, x0 + w)
    frame(svg, x0, top, w, h, x, y, t, "N Services (5 endpoints each)", "seconds (log scale)",
          [n for n in ticks_all if X_RANGE[0] <= n <= X_RANGE[1]])
    entries = []
    for label, k, color, marker, dash, filled in scale_series:
        pts = [(n, _num(r, "scale", str(n), k)) for n in scale_n]
        series(svg, x, y, pts, color, marker, dash, filled)
        entries.append((label, color, marker, dash, filled))
    if not scale_n:
        svg.text(x0 + w / 2, top + h / 2, "no scale figures in results.json", anchor="middle", italic=True)
    # Right: each program alone beside the API server, from its start.
    x0, t = panels[1]
    x = n_axis(x0, x0 + w)
    frame(svg, x0, top, w, h, x, y, t, "N Services (5 endpoints each)", "seconds (log scale)",
          [n for n in ticks_all if X_RANGE[0] <= n <= X_RANGE[1]])
    entries2 = []
    for key, label, color, marker in PROGRAMS:
        pts = [(n, _num(r, "beside", str(n), key, "cold_s")) for n in beside_n]
        series(svg, x, y, pts, color, marker)
        entries2.append((label, color, marker, None, True))
    if not beside_n:
        svg.text(x0 + w / 2, top + h / 2, "no beside figures in results.json", anchor="middle", italic=True)
    below = max(legend(svg, 90, top + h + 50, entries), legend(svg, 590, top + h + 50, entries2))
    svg.h = svg.caption(20, below + 24, [
        "Left: the agent's library syncs S(N, 5) handed to it in process (no API server); "
        "T_raw is ipset restore + ip -batch + iptables-restore + ipvsadm -R of the same state, "
        "T_dump is ipvsadm -Sn + ipset save + ip addr show. Dashed: reading it all back.",
        "Right: each program alone beside the real kube-apiserver 1.37, from its start to its "
        "full state in the kernel (reading the initial state included). A missing point: not "
        "measured, or not reached in the run's bound.",
    ], 160)
    return svg.render()


# ---- (b) one change's latency beside the API server ----

def change_latency(r):
    beside_n = _sizes(r, "beside")
    rows = [(n, p) for n in beside_n for p in PROGRAMS]
    row_h, top = 26, 110
    group_gap = 18
    h = max(len(rows), 1) * row_h + max(len(beside_n) - 1, 0) * group_gap + 10
    svg = Svg(1000, top + h + 250)
    header(svg, r, "One endpoint change beside the API server: from the API write to the kernel")
    x0, w = 260, 520
    values = []
    have_pct = False
    for n, (key, *_rest) in rows:
        run = r["beside"][str(n)].get(key) if isinstance(r["beside"][str(n)], dict) else None
        pct = run.get("change_percentiles_ms") if isinstance(run, dict) else None
        if isinstance(pct, dict) and pct:
            have_pct = True
            values += [_num(pct, k) for k in pct]
        values += [_num(run, "change_median_ms"), _num(run, "change_p99_ms")]
    x = LogAxis(values, x0, x0 + w, fmt_ms, default=(10.0, 1000.0))
    svg.text(x0 + w / 2, top - 10, "latency of one change (log scale)", size=13, anchor="middle", weight="bold")
    svg.rect(x0, top, w, h, fill="#fafafa", stroke="#bbb")
    for v, labelled in x.ticks():
        svg.line(x(v), top, x(v), top + h, "#ddd" if labelled else "#eee", 1)
        if labelled:
            svg.line(x(v), top + h, x(v), top + h + 4, "#444", 1)
            svg.text(x(v), top + h + 17, fmt_ms(v), size=11, anchor="middle")
    svg.text(x0 + w / 2, top + h + 36, "milliseconds from the API write to the kernel showing the change",
             size=12, anchor="middle")
    y = top + 5
    last_n = None
    for n, (key, label, color, _marker) in rows:
        if last_n is not None and n != last_n:
            svg.line(x0 - 250, y + group_gap / 2 - 1, x0 + w + 210, y + group_gap / 2 - 1, "#ccc", 1)
            y += group_gap
        if n != last_n:
            svg.text(20, y + row_h / 2 + 4, f"N = {n:,}", size=12, weight="bold")
        last_n = n
        cy = y + row_h / 2
        svg.text(100, cy + 4, label, size=11, color=color)
        run = r["beside"][str(n)].get(key) if isinstance(r["beside"][str(n)], dict) else None
        pct = run.get("change_percentiles_ms") if isinstance(run, dict) else None
        med, p99 = _num(run, "change_median_ms"), _num(run, "change_p99_ms")
        if isinstance(pct, dict) and _num(pct, "p10") and _num(pct, "p90"):
            svg.rect(x(pct["p10"]), cy - 6, x(pct["p90"]) - x(pct["p10"]), 12, fill=color, opacity=0.25, stroke=color)
            hi = _num(pct, "max") or _num(pct, "p99")
            if hi:
                svg.line(x(pct["p90"]), cy, x(hi), cy, color, 1.5)
            for d in range(20, 90, 10):
                v = _num(pct, f"p{d}")
                if v:
                    svg.line(x(v), cy - 6, x(v), cy + 6, color, 1, opacity=0.7)
            med = _num(pct, "p50") or med
            p99 = _num(pct, "p99") or p99
            if _num(pct, "max"):
                svg.marker(x(pct["max"]), cy, "cross", color, size=4)
        elif med and p99:
            svg.line(x(med), cy, x(p99), cy, color, 2)
        if med:
            svg.marker(x(med), cy, "bar", color, size=4.5)
        if p99:
            svg.marker(x(p99), cy, "diamond", color, size=4.5)
        note = []
        if isinstance(run, dict):
            if isinstance(run.get("changes"), int):
                note.append(f"{run['changes']} changes")
            if _num(run, "poll_ms") and key != "nftables":
                note.append(f"poll {run['poll_ms']:.0f} ms")
        if not (med or p99):
            note.append("not measured")
        svg.text(x0 + w + 10, cy + 4, ", ".join(note), size=10, color="#555")
        y += row_h
    if not rows:
        svg.text(x0 + w / 2, top + h / 2 + 4, "no beside figures in results.json", anchor="middle", italic=True)
    ly = top + h + 50
    entries = [("median (p50)", "#333", "bar", False, True), ("p99", "#333", "diamond", False, True)]
    if have_pct:
        entries[1:1] = [("p10 to p90, a tick at each decile", "#333", "box", False, True)]
        entries.append(("the slowest change", "#333", "cross", False, True))
    else:
        entries.insert(1, ("median to p99", "#333", None, None, True))
    below = legend(svg, 20, ly, entries)
    if have_pct:
        what = ("Each bar spans the 10th to the 90th percentile of the changes' latencies, a tick at "
                "each decile; the thin line runs on to the slowest change.")
    else:
        what = ("This run stored only the median and the p99 of each program's changes (no "
                "change_percentiles_ms in results.json), so each row shows those two marks joined; "
                "runs of tests/bench.sh --beside since the key was added store p10 to p90, p99 "
                "and the slowest, and this figure then draws them.")
    end = svg.caption(330, ly + 10, [
        what,
        "A change moves one endpoint of one ClusterIP Service; about one change every 1-2 s. "
        "IPVS (the agent, kube-proxy --proxy-mode=ipvs) is polled with ipvsadm -Ln -t VIP:80 back "
        "to back, so one poll's cost (printed on the right) is the resolution; nftables mode is "
        "watched with nft monitor rules. A change kube-proxy had not shown within the change "
        "bound (900 s per program) is not counted.",
    ], 100)
    svg.h = int(max(end, below + 12))
    return svg.render()


# ---- (c) memory against N ----

def memory(r):
    svg = Svg(1000, 580)
    header(svg, r, "Memory: RSS after the cold sync and peak RSS against N (log-log)")
    scale_n, beside_n = _sizes(r, "scale"), _sizes(r, "beside")
    values = [_num(r, "scale", str(n), k) for n in scale_n for k in ("rss_cold_mib", "rss_peak_mib")]
    values += [_num(r, "beside", str(n), p[0], k) for n in beside_n for p in PROGRAMS
               for k in ("rss_cold_mib", "rss_peak_mib")]
    targets_scale = [(10000, 40.0), (50000, 160.0)]
    targets_beside = [(10000, 60.0)]
    values += [v for _, v in targets_scale + targets_beside]
    top, h, w = 110, 300, 360
    y = LogAxis(values, top + h, top, fmt_num)
    ticks_all = sorted(set(scale_n) | set(beside_n) | {n for n, _ in targets_scale + targets_beside})
    ticks = [n for n in ticks_all if X_RANGE[0] <= n <= X_RANGE[1]]
    # Left: the scale bench's agent child.
    x0 = 90
    x = n_axis(x0, x0 + w)
    frame(svg, x0, top, w, h, x, y, "The agent's scale child (no API server)", "N Services (5 endpoints each)",
          "MiB (log scale)", ticks)
    has_peak = any(_num(r, "scale", str(n), "rss_peak_mib") for n in scale_n)
    series(svg, x, y, [(n, _num(r, "scale", str(n), "rss_cold_mib")) for n in scale_n], BLUE, "circle")
    series(svg, x, y, [(n, _num(r, "scale", str(n), "rss_peak_mib")) for n in scale_n], BLUE, "circle",
           "5,4", False)
    for n, v in targets_scale:
        svg.marker(x(n), y(v), "diamond", ORANGE, size=5, filled=False)
    left = [("the agent: after the cold sync", BLUE, "circle", None, True)]
    left.append(("the agent: peak, at the end" if has_peak else "peak: not stored in this run",
                 BLUE, "circle", "5,4", False))
    left.append(("target after the cold sync", ORANGE, "diamond", False, False))
    if not scale_n:
        svg.text(x0 + w / 2, top + h / 2, "no scale figures in results.json", anchor="middle", italic=True)
    # Right: the three programs beside the API server.
    x0 = 590
    x = n_axis(x0, x0 + w)
    frame(svg, x0, top, w, h, x, y, "Beside the real kube-apiserver", "N Services (5 endpoints each)",
          "MiB (log scale)", ticks)
    right = []
    for key, label, color, marker in PROGRAMS:
        series(svg, x, y, [(n, _num(r, "beside", str(n), key, "rss_cold_mib")) for n in beside_n], color, marker)
        series(svg, x, y, [(n, _num(r, "beside", str(n), key, "rss_peak_mib")) for n in beside_n], color, marker,
               "5,4", False)
        right.append((label, color, marker, None, True))
    for n, v in targets_beside:
        svg.marker(x(n), y(v), "diamond", ORANGE, size=5, filled=False)
    right.append(("after the cold sync", "#333", "circle", None, True))
    right.append(("peak", "#333", "circle", "5,4", False))
    right.append(("target: the agent's peak", ORANGE, "diamond", False, False))
    if not beside_n:
        svg.text(x0 + w / 2, top + h / 2, "no beside figures in results.json", anchor="middle", italic=True)
    below = max(legend(svg, 90, top + h + 50, left), legend(svg, 590, top + h + 50, right))
    svg.h = svg.caption(20, below + 24, [
        "RSS is VmHWM of /proc/PID/status, the most the process has held so far: after the cold "
        "sync, and at the end (peak). Left, the end comes after the changes and the no-op full "
        "resyncs; right, after the change phase with its periodic passes. Memory is not slowed "
        "down by the emulation.",
    ], 160)
    return svg.render()


FIGURES = [("cold-sync.svg", cold_sync), ("change-latency.svg", change_latency), ("memory.svg", memory)]


# ---- the table of BENCHMARKS.md ----

def table(r):
    lines = [f"The run: {run_line(r)}.", "",
             "| key in `bench/results.json` | what (the agent's) | this run | target | |",
             "|---|---|---|---|---|"]
    derived = False
    met, missed, unmeasured = 0, [], []
    for key, what, unit, bound, derive in TARGETS:
        v = _num(r, key)
        mark = ""
        if v is None and derive is not None:
            v = derive(r)
            if v is not None:
                mark, derived = " ¹", True
        if v is None:
            shown, status = "not measured", "not measured"
        else:
            shown = f"{v:.1f} MiB" if unit == "MiB" else f"{v:.3f}"
            status = "met" if v <= bound else "**missed**"
        if v is None:
            unmeasured.append(f"`{key}`")
        elif v <= bound:
            met += 1
        else:
            missed.append(f"`{key}`")
        limit = f"<= {bound:g} MiB" if unit == "MiB" else f"<= {bound}"
        lines.append(f"| `{key}` | {what} | {shown}{mark} | {limit} | {status} |")
    summary = f"**{met} of {len(TARGETS)} targets met**"
    if missed:
        summary += "; missed: " + ", ".join(missed)
    if unmeasured:
        summary += "; not measured: " + ", ".join(unmeasured)
    lines += ["", summary + "."]
    if derived:
        lines += ["", "¹ Computed by `bench/plot.py` from the per-N figures in the same file "
                  "(`scale`, `beside`): the key itself is missing or null there."]
    return "\n".join(lines) + "\n"


def page_with_table(page_text, r, begin=MARK_BEGIN, end=MARK_END, write=None):
    """The page with its generated block replaced, or None if the markers are missing."""
    a, b = page_text.find(begin), page_text.find(end)
    if a < 0 or b < a:
        return None
    return page_text[:a] + begin + "\n" + (write or table)(r) + page_text[b:]


# ---- the README's summary: the side-by-side figures at 10,000 ----

def _cell(v, fmt):
    return "not measured" if v is None else fmt.format(v)


def summary(r):
    """The README's performance table at N = 10,000 and the sentence that names its run."""
    programs = [("agent", "the agent"), ("ipvs", "kube-proxy IPVS mode"), ("nftables", "kube-proxy nftables mode")]
    at = lambda prog, key: _num(r, "beside", "10000", prog, key)  # noqa: E731
    rows = [
        ("cold sync, s (CPU s)",
         lambda p: "not measured" if at(p, "cold_s") is None else
         f"{at(p, 'cold_s'):,.2f}" + ("" if at(p, "cold_cpu_s") is None else f" ({at(p, 'cold_cpu_s'):,.2f})")),
        ("one endpoint change, API write to kernel, median / p99, ms",
         lambda p: "not measured" if at(p, "change_median_ms") is None else
         f"{at(p, 'change_median_ms'):,.1f} / {_cell(at(p, 'change_p99_ms'), '{:,.1f}')}"),
        ("CPU per change, ms", lambda p: _cell(at(p, "change_cpu_ms"), "{:,.1f}")),
        ("peak RSS, MiB", lambda p: _cell(at(p, "rss_peak_mib"), "{:,.1f}")),
    ]
    lines = ["| N = 10,000 | " + " | ".join(label for _, label in programs) + " |",
             "| --- |" + " --- |" * len(programs)]
    for what, cell in rows:
        lines.append(f"| {what} | " + " | ".join(cell(p) for p, _ in programs) + " |")
    runs = r.get("runs") if isinstance(r.get("runs"), dict) else {}
    beside = runs.get("beside") if isinstance(runs.get("beside"), dict) else {}
    scale = runs.get("scale") if isinstance(runs.get("scale"), dict) else {}
    where = (f"`tests/bench.sh {beside['args']}` at {beside.get('commit')}, {beside.get('date')}"
             if beside.get("args") else run_line(r))
    ratios = []
    for key, what in (("kube_proxy_cold_ratio_10k", "of IPVS mode's cold sync"),
                      ("kube_proxy_change_cpu_ratio_10k", "of its CPU per change"),
                      ("kube_proxy_rss_ratio_10k", "of its peak memory")):
        v = _num(r, key)
        if v is not None:
            ratios.append(f"{v:.3f} {what}")
    lines += ["", f"From one side-by-side run ({where})"
              + (": the agent took " + ", ".join(ratios[:-1]) + (" and " if len(ratios) > 1 else "") + ratios[-1]
                 if ratios else "") + "."]
    raw = _num(r, "cold_sync_ratio_10k")
    if raw is not None:
        lines.append(f"Against the stock tools loading the same state (`ipset restore`, `ip -batch`, "
                     f"`iptables-restore`, `ipvsadm -R`) its cold sync took {raw:.3f} of their time at "
                     f"10,000 Services (the scale bench at {scale.get('commit') or r.get('commit')}, "
                     f"{scale.get('date') or r.get('date')}).")
    return "\n".join(lines) + "\n"


def sizing(r):
    """docs/operating.md's memory table and CPU figures, from the same run as the README's."""
    mib = lambda *path: _num(r, *path)  # noqa: E731

    def pair(a, b, suffix=""):
        if a is None and b is None:
            return "not measured"
        return f"{_cell(a, '{:.1f}')} / {_cell(b, '{:.1f}')}{suffix}"
    lines = ["| cluster | RSS after the cold sync / peak, MiB | kube-proxy IPVS mode, same run |",
             "| --- | --- | --- |"]
    for n in sorted((k for k in (r.get("beside") or {}) if k.isdigit()), key=int):
        lines.append(f"| {int(n):,} Services, beside the real API server | "
                     f"{pair(mib('beside', n, 'agent', 'rss_cold_mib'), mib('beside', n, 'agent', 'rss_peak_mib'))} | "
                     f"{pair(mib('beside', n, 'ipvs', 'rss_cold_mib'), mib('beside', n, 'ipvs', 'rss_peak_mib'))} |")
    big = max((k for k in (r.get("scale") or {}) if k.isdigit()), key=int, default=None)
    if big is not None:
        lines.append(f"| {int(big):,} Services, manifests (the scale bench, no API server) | "
                     f"{pair(mib('scale', big, 'rss_cold_mib'), mib('scale', big, 'rss_peak_mib'))} | - |")
    runs = r.get("runs") if isinstance(r.get("runs"), dict) else {}
    beside = runs.get("beside") if isinstance(runs.get("beside"), dict) else {}
    scale = runs.get("scale") if isinstance(runs.get("scale"), dict) else {}
    lines += ["", f"Beside the API server: `tests/bench.sh {beside.get('args', '--beside')}` at "
              f"{beside.get('commit') or r.get('commit')}, {beside.get('date') or r.get('date')}; the scale bench: "
              f"`tests/bench.sh {scale.get('args', '--full')}` at {scale.get('commit') or r.get('commit')}, "
              f"{scale.get('date') or r.get('date')}. Every Service had 5 endpoints."]
    agent = lambda key: _num(r, "beside", "10000", "agent", key)  # noqa: E731
    if agent("cold_s") is not None:
        cpu = [f"CPU, 10,000 Services beside the API server, the same run: the cold sync took "
               f"{agent('cold_s'):.2f} s and {_cell(agent('cold_cpu_s'), '{:.2f}')} CPU s."]
        if agent("change_cpu_ms") is not None:
            cpu.append(f"One endpoint change cost {agent('change_cpu_ms'):.1f} ms of CPU over its phase "
                       f"(periodic passes included), {_cell(agent('change_window_cpu_ms'), '{:.1f}')} ms in "
                       f"its own window.")
        lines += ["", " ".join(cpu)]
    return "\n".join(lines) + "\n"


def load(path):
    r = json.loads(pathlib.Path(path).read_text())
    return r if isinstance(r, dict) else {}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=str(ROOT / "bench" / "results.json"))
    ap.add_argument("--out", default=str(ROOT / "bench"))
    ap.add_argument("--page", default=str(ROOT / "BENCHMARKS.md"))
    ap.add_argument("--readme", default=str(ROOT / "README.md"))
    ap.add_argument("--sizing", default=str(ROOT / "docs" / "operating.md"))
    ap.add_argument("--table", action="store_true", help="print the table and write nothing")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 on a difference")
    a = ap.parse_args(argv)
    r = load(a.results)
    if a.table:
        sys.stdout.write(table(r))
        return 0
    stale = []
    out = pathlib.Path(a.out)
    for name, draw in FIGURES:
        path, svg = out / name, draw(r)
        if a.check:
            if not path.exists() or path.read_text() != svg:
                stale.append(str(path))
        else:
            out.mkdir(parents=True, exist_ok=True)
            path.write_text(svg)
    # Each page's generated block: (file, markers, what writes it).
    blocks = [(a.page, MARK_BEGIN, MARK_END, table, "table"),
              (a.readme, README_BEGIN, README_END, summary, "summary"),
              (a.sizing, SIZING_BEGIN, SIZING_END, sizing, "sizing")]
    for path, begin, end, write, what in blocks:
        if not path:
            continue
        doc = pathlib.Path(path)
        text = doc.read_text() if doc.exists() else ""
        new = page_with_table(text, r, begin, end, write)
        if new is None:
            print(f"plot: {doc} has no {what} markers ({begin} ... {end})", file=sys.stderr)
            if a.check:
                stale.append(str(doc))
        elif a.check:
            if new != text:
                stale.append(str(doc))
        elif new != text:
            doc.write_text(new)
    if a.check and stale:
        print("plot: not what results.json gives (run python3 bench/plot.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    if not a.check:
        print(f"plot: wrote {', '.join(str(out / n) for n, _ in FIGURES)}" + (f" and the table of {a.page}" if a.page else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
