#!/usr/bin/env python3
"""The torture suite's figures, kept per run and plotted (issue 36).

    report.py save OUTPUT --form short|long --binary B --command C --status N --commit C --load L
    report.py report [DIR] [--svg FILE] [--page FILE] [--print] [--no-plots]

`save` (called by scripts/torture after every run) reads the run's output,
takes each scenario's `TORTURE <name>: key=value…` line and the names of the
failed tests, and writes DIR/runs/<date>-<form>.json (DIR: target/torture)
with the date, the commit and load the run started with, the command, form
and binary.

`report` reads every saved run and keeps, per scenario, the newest run of the
long form, or of the short form when no long one was saved. A test states
its targets in its own line, beside the figure they bound: `KEY.max=B` (the
figure must stay at or under B) or `KEY.min=B` (at or over B; figures like
`77/77` count as the fraction). Each (scenario, KEY) with a target becomes a
bar of "share of the allowance used": KEY/B for a ceiling; for a floor of a
fraction, the shortfall from 1 over the shortfall the floor allows
((1 - KEY) / (1 - B)). At most 1 passes. Plot, with matplotlib, into FILE
(default docs/reliability/headroom.svg); the lines between
`<!-- torture:begin -->` and `<!-- torture:end -->` of the page (default
RELIABILITY.md) name the runs it comes from. --print writes nothing and
prints those lines and each figure's share of its allowance. Every error is one line on stderr, exit 1."""

import argparse
import datetime
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.dont_write_bytecode = True

BEGIN = "<!-- torture:begin -->"
END = "<!-- torture:end -->"
PAGE_LIMIT = 30 * 1024  # issue 36: the page stays under 30 KB
LINE = re.compile(r"TORTURE (\S+): (.*)$")
FAILED = re.compile(r"^test (\S+) \.\.\. FAILED$")


class Fail(Exception):
    """A clear one-line error: printed, exit 1."""


def parse_output(text: str) -> tuple[dict, list]:
    """({scenario: {key: value}}, [failed test]) of a run's output."""
    scenarios: dict = {}
    failed = []
    for raw in text.splitlines():
        # The harness may print `test NAME ... ` before the line.
        m = LINE.search(raw)
        if m:
            figures = {}
            for word in m.group(2).split():
                key, sep, value = word.partition("=")
                if sep:
                    figures[key] = value
            scenarios[m.group(1)] = figures
        f = FAILED.match(raw.strip())
        if f:
            failed.append(f.group(1))
    return scenarios, failed


def save(args) -> None:
    try:
        with open(args.output, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise Fail(f"{args.output}: {e.strerror or e}") from None
    scenarios, failed = parse_output(text)
    now = datetime.datetime.now(datetime.timezone.utc)
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            load_end = f.read().split()[0]
    except (OSError, IndexError):
        load_end = "unknown"
    run = {
        "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": args.commit,
        "load": f"{args.load} at the start, {load_end} at the end",
        "form": args.form,
        "binary": args.binary,
        "command": args.command,
        "status": args.status,
        "cpus": os.cpu_count(),
        "scenarios": scenarios,
        "failed": failed,
    }
    runs = os.path.join(args.dir, "runs")
    os.makedirs(runs, exist_ok=True)
    path = os.path.join(runs, f"{now.strftime('%Y%m%dT%H%M%SZ')}-{args.form}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(run, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"figures kept in {os.path.relpath(path, ROOT)} ({len(scenarios)} scenarios)")


def read_runs(d: str) -> list[dict]:
    runs = []
    for path in sorted(glob.glob(os.path.join(d, "runs", "*.json"))):
        try:
            with open(path, encoding="utf-8") as f:
                run = json.load(f)
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
            raise Fail(f"{path}: not a saved torture run ({e})") from None
        if not isinstance(run, dict) or not isinstance(run.get("scenarios"), dict):
            raise Fail(f"{path}: not a saved torture run (no scenarios)")
        run["path"] = path
        runs.append(run)
    if not runs:
        raise Fail(f"{os.path.join(d, 'runs')}: no saved run (run scripts/torture first)")
    return runs


def latest(runs: list[dict]) -> dict:
    """{scenario: (figures, run)}: the newest long-form run, else the newest short."""
    won: dict = {}
    for run in sorted(runs, key=lambda r: str(r.get("date", ""))):
        for name, figures in run["scenarios"].items():
            if not isinstance(figures, dict):
                continue
            old = won.get(name)
            if old is None or run.get("form") == "long" or old[1].get("form") != "long":
                won[name] = (figures, run)
    return won


def number(text) -> float | None:
    """`0.97`, `77/77` (a fraction) or None."""
    try:
        if isinstance(text, str) and "/" in text:
            a, b = text.split("/", 1)
            return float(a) / float(b) if float(b) else None
        return float(text)
    except (TypeError, ValueError):
        return None


def bars(won: dict) -> list[tuple[str, float, str]]:
    """[(label, share of the allowance used, what)] for every stated target."""
    out = []
    for name in sorted(won):
        figures, run = won[name]
        for key, bound_text in sorted(figures.items()):
            base, _, kind = key.rpartition(".")
            if kind not in ("max", "min") or base not in figures:
                continue
            value, bound = number(figures[base]), number(bound_text)
            if value is None or bound is None:
                continue
            if kind == "max":
                used = value / bound if bound else float("inf")
                what = f"{figures[base]} of ≤ {bound_text}"
            else:
                allowed = 1.0 - bound
                used = (1.0 - value) / allowed if allowed > 0 else (0.0 if value >= bound else 1e9)
                used = max(used, 0.0)
                what = f"{figures[base]} for ≥ {bound_text}"
            form = run.get("form", "?")
            out.append((f"{name} {base} ({form})", used, what))
    return out


def provenance(won: dict) -> list[str]:
    seen: dict = {}
    for name in sorted(won):
        run = won[name][1]
        seen.setdefault(run["path"], (run, []))[1].append(name)
    lines = []
    for run, names in sorted(seen.values(), key=lambda e: str(e[0].get("date", ""))):
        lines.append(
            f"- {run.get('date', '?')}, `{run.get('commit') or '?'}`, {run.get('form', '?')} form, "
            f"{run.get('binary', '?')} binary, {run.get('cpus', '?')} CPUs, load "
            f"{run.get('load', '?')}: "
            f"`{run.get('command', '?')}`: {', '.join(names)}"
        )
    return lines


def plot(data: list, path: str) -> None:
    try:
        import matplotlib  # noqa: PLC0415
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise Fail(f"matplotlib is not installed for {sys.executable}: scripts/install-deps "
                   "installs Debian's python3-matplotlib, or pass --no-plots") from None
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "clusterdns-torture",
                                "font.size": 8})
    labels = [d[0] for d in data][::-1]
    used = [d[1] for d in data][::-1]
    whats = [d[2] for d in data][::-1]
    fig, ax = plt.subplots(figsize=(7.5, 0.28 * len(data) + 0.9))
    colors = ["#55a868" if u <= 1.0 else "#c44e52" for u in used]
    shown = [min(u, 1.6) for u in used]
    ax.barh(range(len(data)), shown, color=colors)
    for i, (u, w) in enumerate(zip(used, whats)):
        ax.text(min(u, 1.6) + 0.01, i, w, va="center", fontsize=7)
    ax.axvline(1.0, color="#333333", linewidth=0.8, linestyle="--")
    ax.set_yticks(range(len(data)))
    ax.set_yticklabels(labels)
    ax.set_xlim(0, 1.9)
    ax.set_xlabel("share of the target's allowance used (≤ 1 passes; a floor counts its "
                  "shortfall from 1)")
    ax.set_title("Torture scenarios: each figure against its target")
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)


def report(args) -> None:
    won = latest(read_runs(args.dir))
    data = bars(won)
    if not data:
        raise Fail("no saved figure states a target (KEY.max= or KEY.min=)")
    svg = os.path.relpath(os.path.abspath(args.svg), os.path.dirname(os.path.abspath(args.page)))
    block = [BEGIN, f"![each torture figure against its target]({svg})", "",
             "From the newest saved run of each scenario (`scripts/torture --report`):",
             *provenance(won), END]
    if args.print:
        print("\n".join(block))
        for label, used, what in data:
            print(f"{label}: {used:.2f} of the allowance ({what})")
        return
    try:
        with open(args.page, encoding="utf-8") as f:
            page = f.read()
    except OSError as e:
        raise Fail(f"{args.page}: {e.strerror or e}") from None
    if page.count(BEGIN) != 1 or page.count(END) != 1 or page.index(BEGIN) > page.index(END):
        raise Fail(f"{args.page}: wants one `{BEGIN}` line and one `{END}` line after it")
    head, rest = page.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    if not args.no_plots:
        plot(data, args.svg)
    page = head + "\n".join(block) + tail
    with open(args.page, "w", encoding="utf-8") as f:
        f.write(page)
    print(f"{args.page}: {len(data)} figures against their targets; {args.svg}")
    if len(page.encode("utf-8")) > PAGE_LIMIT:
        print(f"warning: {args.page} is over {PAGE_LIMIT // 1024} KB (issue 36)", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(prog="report.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("save")
    s.add_argument("output")
    s.add_argument("--form", choices=["short", "long"], required=True)
    s.add_argument("--binary", required=True)
    s.add_argument("--command", required=True)
    s.add_argument("--status", type=int, required=True)
    s.add_argument("--commit", required=True, help="the commit measured, taken as the run starts")
    s.add_argument("--load", required=True, help="the 1-minute load average as the run starts")
    s.add_argument("--dir", default=os.path.join(ROOT, "target", "torture"))
    r = sub.add_parser("report")
    r.add_argument("dir", nargs="?", default=os.path.join(ROOT, "target", "torture"))
    r.add_argument("--svg", default=os.path.join(ROOT, "docs", "reliability", "headroom.svg"))
    r.add_argument("--page", default=os.path.join(ROOT, "RELIABILITY.md"))
    r.add_argument("--print", action="store_true")
    r.add_argument("--no-plots", action="store_true")
    args = ap.parse_args()
    try:
        save(args) if args.cmd == "save" else report(args)
    except Fail as e:
        print(f"scripts/torture: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
