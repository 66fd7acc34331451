#!/usr/bin/env python3
"""Measured figures on the user pages must come from a committed result, and still say what it says.

A measured figure is a number with a unit that a run gives rather than a setting: one with
a decimal point (12.07 s, 58.3 MiB), a range (31-33 MiB), or one in ms, KiB, MiB, GiB, MB, GB
or %. On README.md, docs/*.md, deploy/README.md, deploy/*.yaml and vagrant/README.md, each
such figure outside a generated block (the markers bench/plot.py and tests/cold.sh write
between) and outside backticks must sit in a paragraph (or a comment block, or a table row)
that names a committed result: BENCHMARKS.md, RELIABILITY.md, E2E.md, tests/peers/RESULTS.md
or bench/results.json. Its number must occur in one of the results named there. A figure that
is a setting or a fact of the design, not a measurement, is listed in tests/figures-allowed.txt
with the reason.

    tests/check_figures.py [--allowed FILE] [REPO] [PAGE...]

Prints FILE:LINE: what for each problem; exit 1 when there is one.
"""

import argparse
import pathlib
import re
import sys

PAGES = ["README.md", "docs/*.md", "deploy/README.md", "deploy/*.yaml", "vagrant/README.md"]
RESULTS = {
    "BENCHMARKS.md": "BENCHMARKS.md",
    "RELIABILITY.md": "RELIABILITY.md",
    "E2E.md": "tests/cluster/E2E.md",
    "RESULTS.md": "tests/peers/RESULTS.md",
    "bench/results.json": "bench/results.json",
}
NUM = r"\d[\d,]*(?:\.\d+)?"
FIGURE = re.compile(
    rf"(?<![\w.,-])(?P<a>{NUM})(?:\s?(?:-|–|to)\s?(?P<b>{NUM}))?\s?"
    r"(?P<unit>ms|s|min|minutes|seconds|KiB|MiB|GiB|MB|GB|%)(?![\w])"
)
ALWAYS_MEASURED = {"ms", "KiB", "MiB", "GiB", "MB", "GB", "%"}
GENERATED = re.compile(r"<!-- [\w. -]+: (?:begin|written by).*?-->.*?<!-- (?:end [\w-]+|[\w. -]+: end) -->", re.S)


def paragraphs(path, text):
    """(first line, text) of each paragraph: blank-line separated; in YAML, each comment block;
    a Markdown table row stands alone."""
    out, start, buf = [], None, []
    yaml = path.suffix in (".yaml", ".yml")

    def flush():
        nonlocal start, buf
        if buf:
            out.append((start, "\n".join(buf)))
        start, buf = None, []
    for number, line in enumerate(text.split("\n"), 1):
        if yaml:
            body = line.strip()
            if not body.startswith("#"):
                flush()
                continue
            line = body[1:]
        if not line.strip():
            flush()
            continue
        if line.lstrip().startswith("|"):
            flush()
            out.append((number, line))
            continue
        if start is None:
            start = number
        buf.append(line)
    flush()
    return out


def blank_generated(text):
    """The text with each generated block's content blanked, lines kept."""
    return GENERATED.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def unticked(text):
    return re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), text)


def number_in(number, text):
    """Whether the number occurs in text as a whole number (12.07 in '12.07 s', not in '112.07')."""
    plain = number.replace(",", "")
    for form in {number, plain, f"{float(plain):,}" if "." in plain else f"{int(plain):,}"}:
        if re.search(rf"(?<![\d.]){re.escape(form)}(?![\d]|\.\d)", text):
            return True
    return False


def load_allowed(path):
    allowed = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                fields = line.split("\t")
                if len(fields) < 3 or not fields[2].strip():
                    raise SystemExit(f"check_figures: {path}: '{line}' needs FILE, FIGURE and a reason, tab-separated")
                allowed.setdefault(fields[0], set()).add(fields[1])
    return allowed


def check(repo, pages, allowed):
    problems = []
    cache = {}

    def result(name):
        if name not in cache:
            p = repo / RESULTS[name]
            cache[name] = p.read_text() if p.exists() else None
        return cache[name]
    for page in pages:
        rel = str(page.relative_to(repo))
        text = blank_generated(page.read_text())
        for first, para in paragraphs(page, text):
            named = [n for n in RESULTS if n in para]
            flat = unticked(para)
            for line_offset, line in enumerate(flat.split("\n")):
                for m in FIGURE.finditer(line):
                    figure = m.group(0)
                    a, b, unit = m.group("a"), m.group("b"), m.group("unit")
                    if not (b or "." in a or unit in ALWAYS_MEASURED):
                        continue
                    if figure in allowed.get(rel, set()):
                        continue
                    where = f"{rel}:{first + line_offset}"
                    if not named:
                        problems.append(f"{where}: the measured figure '{figure}' names no committed result "
                                        f"(one of {', '.join(RESULTS)} in its paragraph), nor is it in "
                                        "tests/figures-allowed.txt")
                        continue
                    texts = [t for t in (result(n) for n in named) if t is not None]
                    missing = [x for x in (a, b) if x and not any(number_in(x, t) for t in texts)]
                    if missing:
                        problems.append(f"{where}: '{figure}' is not in {' or '.join(named)} "
                                        f"(no {', '.join(missing)} there): stale, or from elsewhere")
    for rel, figures in sorted(allowed.items()):
        page = repo / rel
        if page in pages:
            text = page.read_text()
            problems += [f"{rel}: tests/figures-allowed.txt lists '{f}', which the page no longer has"
                         for f in sorted(figures) if f not in text]
    return problems


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--allowed")
    ap.add_argument("repo", nargs="?", default=str(pathlib.Path(__file__).resolve().parent.parent))
    ap.add_argument("pages", nargs="*")
    a = ap.parse_args(argv)
    repo = pathlib.Path(a.repo).resolve()
    allowed = load_allowed(pathlib.Path(a.allowed) if a.allowed else repo / "tests" / "figures-allowed.txt")
    pages = [repo / p for p in a.pages] if a.pages else sorted({p for g in PAGES for p in repo.glob(g)})
    problems = check(repo, pages, allowed)
    for p in problems:
        print(p)
    if problems:
        print(f"check_figures: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_figures: ok ({len(pages)} pages: each measured figure is in the result its paragraph names)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
