#!/usr/bin/env python3
"""BENCHMARKS.md's current figures from the bench's own output (scripts/bench --report).

    scripts/bench --report [DIR...] [--page FILE] [--svg-dir DIR] [--print] [--no-plots]

Reads DIR/report.json and DIR/meta.json as bench.py writes them (default
target/bench, the last run; bench.py keeps every run's in target/bench/runs/).
With several DIRs, for each (scenario, server) the row of the newest run
(meta.json's date; on a tie the later DIR) wins, except that a `skipped` row
never hides a measured one of an older run. Ratios are bench.py's own
`ratios()`, taken again over the rows kept and only between rows of one run: a
table whose rows come from two runs says which came from which, and shows no
ratio across them.

Writes, between the lines `<!-- bench:begin -->` and `<!-- bench:end -->` of
FILE (default BENCHMARKS.md; the rest of the page is left alone): the list of
runs (date, commit, command with its environment, machine, versions), then one
table per scenario (the bench's `--scenario` names; autopath, node-cache and
the memory scenarios have a row column), headed by the date, commit and command
of its rows' run, with the columns that scenario's rows fill, each row's ratios
under its results, each run's figure where rows are medians of several, and a
line for the servers not measured. Plots, with matplotlib, into docs/bench/:
ratios.svg (clusterdns/CoreDNS per scenario: throughput, CPU per query or
lookup, RSS) and latency.svg (p50 and p99 per scenario and server, log scale,
each run's as dots: the bench keeps no latency distribution, only those two
percentiles per run). --print writes nothing and prints the Markdown;
--no-plots needs no matplotlib. Every error is one line on stderr, exit 1."""

import argparse
import datetime
import json
import math
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)

BEGIN = "<!-- bench:begin -->"
END = "<!-- bench:end -->"
PAGE_LIMIT = 30 * 1024  # issue 36: the page stays under 30 KB
SERVER_NAMES = {"clusterdns": "clusterdns", "coredns": "CoreDNS", "unbound": "Unbound",
                "ceiling": "ceiling"}
COLORS = {"clusterdns": "#1f77b4", "coredns": "#ff7f0e", "unbound": "#2ca02c", "ceiling": "#7f7f7f"}


try:  # bench.py, for its ratios(), fmt() and names: one definition of each
    import bench as B  # noqa: E402
except Exception as e:  # noqa: BLE001 - any failure to load it is reported the same way
    print(f"scripts/bench --report: error: cannot load {os.path.join(HERE, 'bench.py')}: {e}",
          file=sys.stderr)
    sys.exit(1)


class Fail(Exception):
    """A clear one-line error: printed, exit 1."""


# --------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------

def read_json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise Fail(f"{path}: no such file (run scripts/bench first, or name a directory "
                   "holding its report.json and meta.json)") from None
    except json.JSONDecodeError as e:
        raise Fail(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except UnicodeDecodeError as e:
        raise Fail(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise Fail(f"{path}: {e.strerror or e}") from None


def parse_date(text) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%d %H:%M UTC")
    except ValueError:
        return None


class Run:
    """One report directory: its result rows and meta.json."""

    def __init__(self, d: str, index: int):
        self.dir = d
        self.index = index
        if not os.path.isdir(d):
            raise Fail(f"{d}: no such directory (a report directory holds report.json and meta.json)")
        rp, mp = os.path.join(d, "report.json"), os.path.join(d, "meta.json")
        rows, meta = read_json(rp), read_json(mp)
        if not isinstance(rows, list):
            raise Fail(f"{rp}: not a list of rows (is it scripts/bench's report.json?)")
        if not isinstance(meta, dict):
            raise Fail(f"{mp}: not an object (is it scripts/bench's meta.json?)")
        for i, r in enumerate(rows):
            if (not isinstance(r, dict) or r.get("kind") not in ("result", "ratio")
                    or not isinstance(r.get("scenario"), str) or not isinstance(r.get("server"), str)):
                raise Fail(f"{rp}: row {i} is neither a result nor a ratio row "
                           "(kind, scenario and server expected)")
        self.results = [r for r in rows if r["kind"] == "result"]
        if not self.results:
            raise Fail(f"{rp}: no result rows")
        self.meta = meta
        self.date = parse_date(meta.get("date"))
        if self.date is None:
            got = f"{meta['date']!r}" if "date" in meta else "none"
            raise Fail(f"{mp}: no date of the form 2026-12-03 07:33 UTC (got {got})")

    def span(self) -> str:
        start, end = self.meta["date"], self.meta.get("finished")
        if isinstance(end, str) and end[:10] == start[:10] and end != start:
            return f"{start[:-4]}–{end[11:]}"
        return start

    def command(self, env: bool = True) -> str:
        """The command as typed; with ENV, the variables of bench.py's RUN_ENV it ran with."""
        m = self.meta
        given = m.get("env") if env and isinstance(m.get("env"), dict) else {}
        words = [f"{k}={short_path(str(v))}" for k, v in given.items()]
        if isinstance(m.get("command"), str):
            words.append(m["command"])
        else:  # a meta.json from before bench.py recorded it: what it does say
            words.append("scripts/bench" + (" --quick" if m.get("quick") else "")
                         + (f" --runs {m['runs']}" if m.get("runs") else "") + " …")
        return " ".join(words)

    def commit(self) -> str:
        m = self.meta
        if not m.get("commit"):
            return "commit not recorded"
        return f"commit `{m['commit']}`" + ("+uncommitted" if m.get("uncommitted_changes") else "")

    def provenance(self, env: bool = False) -> str:
        """Date, commit and command, for a table's head (the environment it ran with is
        in the list of runs, once)."""
        note = "" if isinstance(self.meta.get("command"), str) else " (the rest of the command not recorded)"
        return f"{self.span()} · {self.commit()} · `{self.command(env)}`{note}"

    def machine(self) -> str:
        """The run's line in the list of runs: provenance, binary, machine, versions."""
        m = self.meta
        bits = [self.provenance(env=True)]
        built = m.get("clusterdns_commit")
        if built and built != m.get("commit"):
            bits.append(f"clusterdns built from `{built}`")
        elif not built and m.get("clusterdns_bin_date"):
            bits.append(f"clusterdns binary of {m['clusterdns_bin_date']} (its commit not recorded)")
        if m.get("nproc"):
            bits.append(f"{m['nproc']} CPUs" + (f" ({m['cpu_model']})" if m.get("cpu_model") else ""))
        if m.get("kernel"):
            bits.append(f"kernel {m['kernel']}")
        if m.get("load_at_start"):
            bits.append(f"load average {m['load_at_start']} at the start"
                        + (f", {m['load_at_end']} at the end" if m.get("load_at_end") else ""))
        vers = []
        for key, name in (("clusterdns", None), ("coredns", None), ("unbound", "Unbound"),
                          ("dnsperf", None)):
            v = m.get(key)
            if isinstance(v, str) and v:
                vers.append(f"{name} {v.removeprefix('Version ')}" if name else v)
        if vers:
            bits.append(", ".join(vers))
        runs = m.get("runs")
        if runs:
            bits.append(f"{runs} run{'s' if runs != 1 else ''} per row"
                        + (" (medians)" if runs > 1 else "")
                        + (f", {m['phase_s']} s phases" if m.get("phase_s") else ""))
        return "; ".join(bits)


def short_path(p: str) -> str:
    """A path inside the checkout, relative to it."""
    if os.path.isabs(p) and (p + "/").startswith(ROOT + "/"):
        return os.path.relpath(p, ROOT)
    return p


def merge(runs: list[Run]) -> dict:
    """(scenario, server) -> (run, row): the newest run's row; a skipped row
    never replaces a measured one."""
    won: dict = {}
    for run in sorted(runs, key=lambda r: (r.date, r.index)):
        for row in run.results:
            key = (row["scenario"], row["server"])
            old = won.get(key)
            if old is not None and row.get("status") == "skipped" and old[1].get("status") != "skipped":
                continue
            won[key] = (run, row)
    return won


def ratio_rows(won: dict) -> dict:
    """(scenario, label) -> (run, entry): bench.py's ratios over the kept rows
    of each run alone; the per-lookup form where a pair has both."""
    by_run: dict = {}
    for run, row in won.values():
        by_run.setdefault(run.index, (run, []))[1].append(row)
    out: dict = {}
    for run, rows in by_run.values():
        for e in B.ratios(rows):
            keys = B.LOOKUP_KEYS if e.get("per_lookup") else B.RATIO_KEYS
            if not any(e.get(k) is not None for k in keys):
                continue
            key = (e["scenario"], e["server"])
            if key in out and out[key][1].get("per_lookup") and not e.get("per_lookup"):
                continue
            out[key] = (run, e)
    return out


# --------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------

AUTOPATH_ROWS = [v[0] for v in B.Autopath.VARIANTS]


def group_of(sc: str) -> str:
    """The bench scenario (--scenario name) a row's scenario label belongs to."""
    if sc in AUTOPATH_ROWS:
        return "autopath"
    if sc.startswith("node-cache-"):
        return "node-cache"
    if sc in ("memory-1k-svc", "memory-10k-svc"):
        return "memory"
    m = re.fullmatch(r"memory-10k-svc-\d+k-pods(-autopath|-compact)?", sc)
    if m:
        return "memory-pods" + (m[1] or "")
    return sc


def group_rank(g: str) -> tuple:
    order = B.ALL_SCENARIOS
    return (order.index(g), "") if g in order else (len(order), g)


def row_rank(sc: str, first_seen: dict) -> tuple:
    if sc in AUTOPATH_ROWS:
        return (AUTOPATH_ROWS.index(sc), 0, "")
    m = re.fullmatch(r"memory-10k-svc-(\d+)k-pods.*", sc)
    if m:
        return (int(m[1]), 0, sc)
    return (first_seen[sc], 0, "")


def server_rank(s: str) -> int:
    return B.SERVERS.index(s) if s in B.SERVERS else len(B.SERVERS)


class Col:
    """A column: HEAD, the row's KEY with ND decimals (or GET(row) -> text),
    the ratio entry's RATIO key (default KEY when a ratio has it), WHEN(rows)
    whether the table shows it (default: any row has a value); RATE: the rate
    achieved at the fixed load, whose head names the rate offered when the
    table has one."""

    def __init__(self, head, key=None, nd=0, get=None, ratio=None, when=None, text=False,
                 rate=False):
        self.head, self.key, self.nd, self.get, self.rate = head, key, nd, get, rate
        self.ratio = ratio or key
        self.when, self.text = when, text

    def cell(self, row: dict) -> str | None:
        if self.get:
            return self.get(row)
        v = row.get(self.key)
        if v is None:
            return None
        if isinstance(v, str):
            return v
        return B.fmt(v, self.nd)

    def shown(self, rows: list[dict]) -> bool:
        if self.when:
            return self.when(rows)
        return any(self.cell(r) is not None for r in rows)


def runs_of(row: dict) -> list:
    pr = row.get("per_run")
    return pr if isinstance(pr, list) and len(pr) > 1 else []


def per_run(key: str, nd: int):
    def get(row):
        xs = runs_of(row)
        if not xs or not all(isinstance(x, dict) for x in xs):
            return None
        return ", ".join(B.fmt(x.get(key), nd) for x in xs)
    return get


def per_run_values(nd: int):
    def get(row):
        xs = runs_of(row)
        if not xs or not all(isinstance(x, (int, float)) or x is None for x in xs):
            return None
        return ", ".join(B.fmt(x, nd) for x in xs)
    return get


def got(row):
    return None if row.get("fixed_qps") is None else B.fmt(row["fixed_qps"], 0)


def lost(row):
    a = row.get("fixed_lost_pct")
    return None if a is None else B.fmt(a, 2)


def per_kind(row):
    pk = row.get("per_kind")
    if not isinstance(pk, dict) or len(pk) < 2:
        return None
    return ", ".join(f"{k} {B.fmt(v.get('queries_per_lookup'), 2)}" for k, v in pk.items()
                     if isinstance(v, dict))


def checks(row):
    if row.get("pod_checks_total") is None:
        return None
    return f"{row.get('pod_checks_passed')}/{row['pod_checks_total']}"


def startup_runs(key: str):
    def get(row):
        pr = row.get("per_run")
        xs = pr.get(key) if isinstance(pr, dict) else None
        if not isinstance(xs, list) or len(xs) < 2:
            return None
        return ", ".join(B.fmt(x, 0) for x in xs)
    return get


def missed_of(row):
    if row.get("propagation_samples") is None:
        return None
    return f"{row.get('propagation_missed')} of {row['propagation_samples']}"


def idle_differs(rows):
    return any(r.get("cpu_us_per_lookup_less_idle") is not None and r.get("cpu_us_per_lookup") is not None
               and abs(r["cpu_us_per_lookup_less_idle"] - r["cpu_us_per_lookup"]) >= 0.05 for r in rows)


# The columns several kinds of table share (a Col holds no state).
CPU_QUERY = Col("CPU µs/query", "cpu_us_per_query", 2)
P50 = Col("p50 µs", "p50_us", 0)
P99 = Col("p99 µs", "p99_us", 0)
RSS = Col("RSS MiB", "rss_mib", 1)
QUERY_COLS = [
    Col("max q/s", "qps", 0),
    CPU_QUERY,
    Col("kernel µs/query", "sys_us_per_query", 2),
    P50, P99, RSS,
    Col("RSS at start MiB", "idle_rss_mib", 1),
    Col("cache entries", "cache_entries", 0),
    Col("got q/s", get=got, rate=True),
    Col("lost %", get=lost),
    Col("CPU µs/query each run", get=per_run("cpu_us_per_query", 2)),
]
LOOKUP_COLS = [
    Col("lookups/s", "lookups_per_s", 0, rate=True),
    Col("queries/lookup", "queries_per_lookup", 2),
    Col("per kind", get=per_kind, text=True),
    Col("CPU µs/lookup", "cpu_us_per_lookup", 1),
    Col("less idle", "cpu_us_per_lookup_less_idle", 1, when=idle_differs),
    P50, P99, RSS,
    Col("bad lookups", "lookups_bad", 0, when=lambda rows: any(r.get("lookups_bad") for r in rows)),
    Col("CPU µs/lookup each run", get=per_run("cpu_us_per_lookup", 1)),
]
MEMORY_COLS = [
    RSS,
    Col("RSS each run", get=per_run_values(1)),
    Col("peak (VmHWM) MiB", "hwm_mib", 1),
    Col("names checked right", get=checks),
    Col("options", "options", text=True),
]
STARTUP_COLS = [
    Col("exec → ready ms", "startup_ms", 0),
    Col("exec → last Service answered ms", "first_answer_ms", 0),
    Col("ready ms each run", get=startup_runs("ready_ms")),
]
PROPAGATION_COLS = [
    Col("p50 ms", "p50_ms", 1, ratio="p50_us"),
    Col("p99 ms", "p99_ms", 1, ratio="p99_us"),
    Col("changes", "changes", 0),
    Col("missed", "missed", 0),
]
CHURN_COLS = [
    Col("answered q/s", "qps", 0),
    CPU_QUERY, P50, P99, RSS,
    Col("lost", "lost", 0),
    Col("changes/s", "changes_per_s", 0),
    Col("propagation p50 ms", "propagation_p50_ms", 1),
    Col("propagation p99 ms", "propagation_p99_ms", 1),
    Col("changes missed", get=missed_of),
    Col("CPUs busy", "machine_cpus_busy", 2),
    Col("API server CPU ms/change", "apiserver_cpu_ms_per_change", 2),
    Col("etcd CPU ms/change", "etcd_cpu_ms_per_change", 2),
]


def columns_for(group: str, rows: list[dict]) -> list[Col]:
    if group == "autopath" or any(r.get("queries_per_lookup") is not None for r in rows):
        return LOOKUP_COLS
    if group.startswith("memory"):
        return MEMORY_COLS
    return {"startup": STARTUP_COLS, "propagation": PROPAGATION_COLS,
            "churn": CHURN_COLS}.get(group, QUERY_COLS)


def esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def clip(text: str, n: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def ratio_label(label: str) -> str:
    """bench.py's ratio label with the servers' names as the page writes them."""
    return re.sub(r"\b(coredns|unbound)\b", lambda m: SERVER_NAMES[m[1]], label)


def fmt_ratio(x) -> str:
    return "" if x is None else f"{x:.2f}×"


def table(group: str, items: list, ratios: list, first_seen: dict) -> list[str]:
    """The Markdown of one scenario: ITEMS (run, row) of it, RATIOS (run, entry)."""
    items = sorted(items, key=lambda it: (row_rank(it[1]["scenario"], first_seen),
                                          server_rank(it[1]["server"])))
    shown = [it for it in items if it[1].get("status") != "skipped"]
    skipped = [it for it in items if it[1].get("status") == "skipped"]
    out = [f"### {group}", ""]
    used = {}
    for run, _ in items:
        used.setdefault(run.index, run)
    runs = sorted(used.values(), key=lambda r: (r.date, r.index))
    if len(runs) == 1:
        out.append(runs[0].provenance() + ".")
    else:
        out.append(f"Rows from {len(runs)} runs (ratios only between rows of one run):")
        for run in runs:
            who = sorted({(row_rank(r['scenario'], first_seen), server_rank(r['server']),
                           r['scenario'], r['server']) for rn, r in items if rn is run})
            names = dict.fromkeys(SERVER_NAMES.get(w[3], w[3]) for w in who)
            out.append(f"- {', '.join(names)}: {run.provenance()}")
    offered = {}
    for _, r in shown:
        if r.get("offered_lookups"):
            offered.setdefault(r["scenario"], f"{B.fmt(r['offered_lookups'], 0)} lookups/s")
        elif r.get("offered_qps"):
            offered.setdefault(r["scenario"], f"{B.fmt(r['offered_qps'], 0)} q/s")
    one_rate = next(iter(offered.values())).split()[0] if len(set(offered.values())) == 1 else None
    if len(set(offered.values())) > 1:
        if len(runs) > 1:
            out.append("")
        out.append("Fixed load offered: " + ", ".join(f"{k} {v}" for k, v in offered.items()) + ".")
    out.append("")
    if shown:
        rows = [r for _, r in shown]
        multi = len({r["scenario"] for r in rows}) > 1 or any(e["scenario"] != rows[0]["scenario"]
                                                              for _, e in ratios)
        cols = [c for c in columns_for(group, rows) if c.shown(rows)]
        notes = any(r.get("status", "ok") != "ok" or (r.get("reason") and group in B.DNSPERF_SCENARIOS)
                    for r in rows)
        heads = [c.head + (f" (of {one_rate})" if one_rate and c.rate else "") for c in cols]
        head = (["row"] if multi else []) + ["server"] + heads + (["note"] if notes else [])
        align = (["---"] if multi else []) + ["---"] + ["---" if c.text else "---:" for c in cols] + (
            ["---"] if notes else [])
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join(align) + "|")
        # Each row's results, then its ratios; its name on its first line only.
        lines: list[tuple] = [(row_rank(r["scenario"], first_seen), 0, r) for r in rows]
        lines += [(row_rank(e["scenario"], first_seen), 1, e) for _, e in ratios]
        last = None
        for _, is_ratio, x in sorted(lines, key=lambda t: (t[0], t[1])):
            cells = [x["scenario"] if x["scenario"] != last else ""] if multi else []
            last = x["scenario"]
            if is_ratio:
                cells.append(ratio_label(x["server"]))
                cells += [fmt_ratio(x.get(c.ratio)) if c.ratio and c.ratio in x else "" for c in cols]
                if notes:
                    cells.append("")
            else:
                cells.append(SERVER_NAMES.get(x["server"], x["server"]))
                cells += [c.cell(x) or "-" for c in cols]
                if notes:
                    note = ""
                    if x.get("status", "ok") != "ok":
                        note = f"{x['status']}: {clip(x.get('reason') or '')}"
                    elif x.get("reason") and group in B.DNSPERF_SCENARIOS:
                        note = clip(x["reason"])
                    cells.append(note)
            out.append("| " + " | ".join(esc(c) for c in cells) + " |")
        out.append("")
    if skipped:
        every = {r["scenario"] for _, r in items}
        names = sorted(every, key=len, reverse=True)
        by: dict = {}
        for _, r in skipped:
            # One line for a server's rows whose reasons differ only by naming another row.
            reason = clip(r.get("reason") or "", 160)
            key = reason
            for n in names:
                key = re.sub(rf"(?<![\w-]){re.escape(n)}(?![\w-])", "…", key)
            by.setdefault((r["server"], key), []).append((r["scenario"], reason))
        bits = []
        for (server, key), entries in by.items():
            scs = [sc for sc, _ in entries]
            where = "" if set(scs) == every or len(every) == 1 else f" ({', '.join(scs)})"
            same = len({reason for _, reason in entries}) == 1
            bits.append(f"{SERVER_NAMES.get(server, server)}{where}: {entries[0][1] if same else key}")
        out += ["Not measured: " + "; ".join(esc(b) for b in bits) + ".", ""]
    return out


def render(runs: list[Run], won: dict, rats: dict, svgs: list[tuple[str, str]]) -> str:
    first_seen: dict = {}
    for run, row in won.values():
        first_seen.setdefault(row["scenario"], len(first_seen))
    groups: dict = {}
    for run, row in won.values():
        groups.setdefault(group_of(row["scenario"]), []).append((run, row))
    gratios: dict = {}
    for run, e in rats.values():
        gratios.setdefault(group_of(e["scenario"]), []).append((run, e))
    used = sorted({run.index: run for run, _ in won.values()}.values(), key=lambda r: (r.date, r.index))
    out = ["<!-- scripts/bench --report from "
           + ", ".join(short_path(os.path.abspath(r.dir)) for r in used)
           + " (scripts/bench.d/report.py): re-run it, do not edit this text. -->", ""]
    out.append("Runs:")
    for run in used:
        out.append(f"- {run.machine()}.")
    out.append("")
    for title, path in svgs:
        out.append(f"![{title}]({path})")
    if svgs:
        out.append("")
    for g in sorted(groups, key=group_rank):
        out += table(g, groups[g], gratios.get(g, []), first_seen)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out)


# --------------------------------------------------------------------------
# plots
# --------------------------------------------------------------------------

def pyplot():
    try:
        import matplotlib  # noqa: PLC0415
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise Fail(f"matplotlib is not installed for {sys.executable}: scripts/install-deps installs "
                   "Debian's python3-matplotlib (for /usr/bin/python3, which scripts/bench --report "
                   "uses when it has it), or pass --no-plots") from None
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "clusterdns-bench",
                                "font.size": 8, "axes.titlesize": 8})
    return plt


def save(fig, path: str) -> None:
    fig.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")


def ordered_scenarios(won: dict) -> list[str]:
    first_seen: dict = {}
    for _, row in won.values():
        first_seen.setdefault(row["scenario"], len(first_seen))
    return sorted(first_seen, key=lambda sc: (group_rank(group_of(sc)), row_rank(sc, first_seen)))


RATIO_METRICS = (("throughput", ("lookups_per_s", "qps"), "#4c72b0"),
                 ("CPU per query (per lookup)", ("cpu_us_per_lookup", "cpu_us_per_query"), "#dd8452"),
                 ("RSS", ("rss_mib",), "#55a868"))


def ratio_data(won: dict, rats: dict) -> list:
    """[(scenario, [throughput, CPU, RSS ratio or None])] of clusterdns/CoreDNS."""
    data = []
    for sc in ordered_scenarios(won):
        e = rats.get((sc, "clusterdns/coredns"))
        if e is None:
            continue
        e = e[1]
        vals = [next((e[k] for k in keys if e.get(k) is not None), None)
                for _, keys, _ in RATIO_METRICS]
        if any(v is not None for v in vals):
            data.append((sc, vals))
    return data


def plot_ratios(plt, data: list, path: str) -> None:
    """clusterdns/CoreDNS per scenario: throughput, CPU per query (or lookup), RSS."""
    n = len(data)
    fig, ax = plt.subplots(figsize=(7, 0.42 * n + 1.2))
    h = 0.26
    for m, (label, _, color) in enumerate(RATIO_METRICS):
        ys = [i + (m - 1) * h for i in range(n)]
        xs = [vals[m] if vals[m] is not None else 0 for _, vals in data]
        bars = ax.barh(ys, xs, height=h, color=color, label=label)
        for bar, (_, vals) in zip(bars, data):
            if vals[m] is not None:
                ax.text(bar.get_width(), bar.get_y() + h / 2, f" {vals[m]:.2f}", va="center", fontsize=6)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(n))
    ax.set_yticklabels([sc for sc, _ in data])
    ax.invert_yaxis()
    ax.set_xlabel("clusterdns / CoreDNS (1 = level; below 1: less CPU or memory, above: more throughput)")
    ax.set_title("clusterdns / CoreDNS, same run, per scenario")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.5 / (0.42 * n + 1.2)), ncol=3, fontsize=7,
              frameon=False)
    ax.set_xlim(0, max(max(v for v in vals if v is not None) for _, vals in data) * 1.15)
    save(fig, path)
    plt.close(fig)


def latency_data(won: dict) -> list:
    """[(scenario, rows with a p50)] in the tables' order."""
    panels = []
    for sc in ordered_scenarios(won):
        rows = sorted((row for (s, _), (_, row) in won.items() if s == sc
                       and row.get("status") != "skipped" and row.get("p50_us") is not None),
                      key=lambda r: server_rank(r["server"]))
        if rows:
            panels.append((sc, rows))
    return panels


def plot_latency(plt, panels: list, path: str) -> None:
    """p50 and p99 per scenario and server (log scale), each run's as dots."""
    from matplotlib import ticker  # noqa: PLC0415
    ncols = min(4, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.3 * ncols, 2.1 * nrows), squeeze=False)
    for k, (sc, rows) in enumerate(panels):
        ax = axes[k // ncols][k % ncols]
        w = 0.38
        vals = [v for r in rows for key in ("p50_us", "p99_us") for v in
                [r.get(key)] + [x.get(key) for x in runs_of(r) if isinstance(x, dict)] if v]
        for i, r in enumerate(rows):
            c = COLORS.get(r["server"], "#333333")
            for j, (key, alpha) in enumerate((("p50_us", 1.0), ("p99_us", 0.45))):
                if r.get(key) is not None:
                    ax.bar(i + (j - 0.5) * w, r[key], width=w, color=c, alpha=alpha)
                pts = [x.get(key) for x in runs_of(r) if isinstance(x, dict) and x.get(key) is not None]
                if pts:
                    ax.plot([i + (j - 0.5) * w] * len(pts), pts, "k.", markersize=3)
        ax.set_yscale("log")
        # Ticks at 1, 2 and 5 of each decade, plainly written, and no minor ones
        # (a log axis' minor ticks are most of an SVG's elements).
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
        ax.yaxis.set_minor_locator(ticker.NullLocator())
        # Every bar from the decade below the smallest figure, not from the
        # axis' own edge, so a p50 bar's height means something.
        if vals:
            ax.set_ylim(10 ** math.floor(math.log10(min(vals))), max(vals) * 1.6)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([SERVER_NAMES.get(r["server"], r["server"]) for r in rows], fontsize=6.5,
                           rotation=25, ha="right", rotation_mode="anchor")
        ax.set_title(sc)
        ax.grid(axis="y", which="major", linewidth=0.3)
        if k % ncols == 0:
            ax.set_ylabel("µs")
    for k in range(len(panels), nrows * ncols):
        axes[k // ncols][k % ncols].axis("off")
    fig.suptitle("Latency at the fixed load, µs (log): p50 solid, p99 light, each run's as dots; "
                 "autopath rows per lookup, propagation from change to answer", y=1.0)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


# --------------------------------------------------------------------------
# the page
# --------------------------------------------------------------------------

def splice(page_path: str, text: str, md: str) -> str:
    nb, ne = text.count(BEGIN), text.count(END)
    i, j = text.find(BEGIN), text.find(END)
    if nb != 1 or ne != 1 or j < i:
        raise Fail(f"{page_path}: needs exactly one line {BEGIN} and, after it, one line {END} "
                   f"(found {nb} and {ne}{', in the wrong order' if nb == ne == 1 else ''}); "
                   "the generated figures go between them")
    # Blank lines around the text, so that no table runs into a marker.
    return text[: i + len(BEGIN)] + "\n" + md + "\n\n" + text[j:]


def main() -> int:
    ap = argparse.ArgumentParser(prog="scripts/bench --report",
                                 description="BENCHMARKS.md's current figures and docs/bench/*.svg "
                                 "from scripts/bench's report.json and meta.json.")
    ap.add_argument("dirs", nargs="*", metavar="DIR",
                    help="report directories (default target/bench; target/bench/runs/* keeps every run)")
    ap.add_argument("--page", default=os.path.join(ROOT, "BENCHMARKS.md"),
                    help="the page whose text between the bench markers is replaced (default BENCHMARKS.md)")
    ap.add_argument("--svg-dir", default=os.path.join(ROOT, "docs", "bench"),
                    help="where the plots go (default docs/bench)")
    ap.add_argument("--print", action="store_true", dest="dry",
                    help="print the Markdown on stdout and write nothing")
    ap.add_argument("--no-plots", action="store_true", help="tables only (no matplotlib needed)")
    args = ap.parse_args()
    dirs = args.dirs or [os.path.join(ROOT, "target", "bench")]
    seen, runs = set(), []
    for d in dirs:
        real = os.path.realpath(d)
        if real not in seen:
            seen.add(real)
            runs.append(Run(d, len(runs)))
    won = merge(runs)
    rats = ratio_rows(won)

    page_text = None
    if not args.dry:
        try:
            with open(args.page, encoding="utf-8") as f:
                page_text = f.read()
        except OSError as e:
            raise Fail(f"{args.page}: {e.strerror or e}") from None
        splice(args.page, page_text, "")  # the markers are checked before anything is written

    svgs: list[tuple[str, str]] = []
    if not args.no_plots:
        plt = None if args.dry else pyplot()
        page_dir = os.path.dirname(os.path.abspath(args.page))
        svg_dir = os.path.abspath(args.svg_dir)
        if not args.dry:
            os.makedirs(svg_dir, exist_ok=True)
        for name, title, data, draw in (
                ("ratios.svg", "clusterdns/CoreDNS per scenario: throughput, CPU, RSS",
                 ratio_data(won, rats), plot_ratios),
                ("latency.svg", "p50 and p99 latency per scenario and server",
                 latency_data(won), plot_latency)):
            if not data:
                continue
            path = os.path.join(svg_dir, name)
            if not args.dry:
                draw(plt, data, path + ".tmp")
                os.replace(path + ".tmp", path)
                print(f"wrote {short_path(path)}", file=sys.stderr)
            svgs.append((title, os.path.relpath(path, page_dir)))
    md = render(runs, won, rats, svgs)
    if args.dry:
        print(md)
        return 0
    new = splice(args.page, page_text, md)
    tmp = args.page + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(new)
    os.replace(tmp, args.page)
    size = len(new.encode("utf-8"))
    print(f"wrote {short_path(os.path.abspath(args.page))}: {size / 1024:.1f} KB, the generated part "
          f"{len(md.encode('utf-8')) / 1024:.1f} KB", file=sys.stderr)
    if size > PAGE_LIMIT:
        print(f"warning: {args.page} is over {PAGE_LIMIT // 1024} KB (issue 36)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Fail as e:
        print(f"scripts/bench --report: error: {e}", file=sys.stderr)
        sys.exit(1)
    except BrokenPipeError:  # --print into a pager or head that stopped reading
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except OSError as e:
        where = f"{e.filename}: " if e.filename else ""
        print(f"scripts/bench --report: error: {where}{e.strerror or e}", file=sys.stderr)
        sys.exit(1)
