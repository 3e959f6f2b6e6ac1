#!/usr/bin/env python3
"""The lookup driver of the autopath scenario (stdlib only): a stub resolver
that walks a search list the way glibc does with `ndots:5`, at a fixed
offered rate of lookups with several in flight, from one source address
(the benchmark Pod's IP, so `pods verified` + `autopath @kubernetes` know the
client). dnsperf cannot do this: it cannot stop a walk at the first answer.

For each lookup of NAME (fewer than 5 dots, so the search list comes first):
ask A for NAME.SUFFIX for each search suffix in turn, go on while the reply is
NXDOMAIN or NOERROR without answers (glibc does the same for NODATA), stop at
the first reply with answers (autopath's CNAME + A counts), else ask NAME
itself. Only A is asked (glibc asks A and AAAA side by side; both walk the
same way, so round trips per lookup are the same).

Input file: one lookup per line, `KIND NAME ADDR[,ADDR...]` (the addresses a
right answer may hold). Output: one JSON object on stdout.

    walk.py --port P --src 127.0.0.50 --file F --rate R --duration S [--inflight N]
            [--kinds external,...] [--start N] [--any-answer]

--any-answer counts every reply with addresses as right: the autopath
scenario's `ceiling` row, where a fixed-answer responder (which answers the
first search name with its one A record) gives the kernel's cost of a wake-up,
a receive and a send at the same rate."""

import argparse
import json
import os
import selectors
import socket
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dnsq  # noqa: E402

NXDOMAIN = 3
QUERY_TIMEOUT = 1.0  # per query; a lookup with a lost query is abandoned


class Slot:
    """One lookup in flight, on its own socket bound to the client address."""

    def __init__(self, src: str):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((src, 0))
        self.sock.setblocking(False)
        self.busy = False
        self.qid = 0
        self.names: list[str] = []
        self.step = 0
        self.kind = ""
        self.want: set[str] = set()
        self.started = 0.0
        self.sent_at = 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--file", required=True)
    ap.add_argument("--rate", type=float, required=True, help="lookups started per second")
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--inflight", type=int, default=32)
    ap.add_argument("--kinds", default="", help="only lookups of these KINDs (comma list)")
    ap.add_argument("--start", type=int, default=0,
                    help="begin at this lookup of the file (a run after a warm-up asks names "
                         "the warm-up did not)")
    ap.add_argument("--any-answer", action="store_true",
                    help="take any reply with addresses as right (the fixed-answer responder)")
    ap.add_argument("--search", default="bench-0.svc.cluster.local,svc.cluster.local,cluster.local")
    a = ap.parse_args()
    search = [s for s in a.search.split(",") if s]
    kinds = {k for k in a.kinds.split(",") if k}
    lookups = []
    with open(a.file, encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and (not kinds or parts[0] in kinds):
                lookups.append((parts[0], parts[1], set(parts[2].split(","))))
    if not lookups:
        print(json.dumps({"error": f"no lookups in {a.file}"}))
        return 1
    dest = (a.server, a.port)
    sel = selectors.DefaultSelector()
    slots = [Slot(a.src) for _ in range(a.inflight)]
    for s in slots:
        sel.register(s.sock, selectors.EVENT_READ, s)
    free = list(slots)
    stats: dict = {"started": 0, "done": 0, "answered": 0, "wrong": 0, "unanswered": 0,
                   "lost": 0, "queries": 0, "late_starts": 0}
    per_kind: dict[str, list[int]] = {}  # kind -> [lookups done, queries]
    lat: list[float] = []
    wrong_examples: list[str] = []
    qid = [0]

    def send(s: Slot) -> None:
        qid[0] = (qid[0] + 1) & 0xFFFF
        s.qid = qid[0]
        s.sent_at = time.monotonic()
        stats["queries"] += 1
        per_kind[s.kind][1] += 1
        try:
            s.sock.sendto(dnsq.build_query(s.names[s.step], 1, s.qid), dest)
        except OSError:
            pass  # counted as lost when it times out

    def finish(s: Slot, outcome: str) -> None:
        stats[outcome] += 1
        stats["done"] += 1
        per_kind[s.kind][0] += 1
        if outcome != "lost":
            lat.append(time.monotonic() - s.started)
        s.busy = False
        free.append(s)

    t0 = time.monotonic()
    end = t0 + a.duration
    n = 0
    while True:
        now = time.monotonic()
        # Start every lookup that is due, as far as slots allow.
        while now < end and t0 + n / a.rate <= now:
            if not free:
                break  # every slot busy: this lookup starts late
            if now - (t0 + n / a.rate) > 0.01:
                stats["late_starts"] += 1
            kind, name, want = lookups[(a.start + n) % len(lookups)]
            n += 1
            s = free.pop()
            s.busy, s.kind, s.want, s.step, s.started = True, kind, want, 0, now
            per_kind.setdefault(kind, [0, 0])
            s.names = [f"{name}.{x}" for x in search] + [name]
            stats["started"] += 1
            send(s)
        busy = [s for s in slots if s.busy]
        if now >= end and not busy:
            break
        for s in busy:
            if now - s.sent_at > QUERY_TIMEOUT:
                finish(s, "lost")
        # Sleep until the next lookup is due, or (every slot busy, or the
        # run over) until a reply or a timeout check.
        nxt = t0 + n / a.rate if now < end and free else now + QUERY_TIMEOUT / 4
        wait = max(0.0, min(nxt - now, QUERY_TIMEOUT / 4))
        for key, _ in sel.select(wait):
            s = key.data
            while True:
                try:
                    data = s.sock.recv(4096)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break
                r = dnsq.parse_reply(data)
                if not s.busy or r is None or r[0] != s.qid:
                    continue  # late or stray reply
                _, rcode, an, addrs = r
                if (rcode == NXDOMAIN or (rcode == 0 and an == 0)) and s.step + 1 < len(s.names):
                    s.step += 1
                    send(s)
                elif rcode == 0 and addrs:
                    if a.any_answer or set(addrs) <= s.want:
                        finish(s, "answered")
                    else:
                        if len(wrong_examples) < 5:
                            wrong_examples.append(f"{s.names[s.step]}: {addrs}")
                        finish(s, "wrong")
                else:
                    finish(s, "unanswered")
                break
    elapsed = time.monotonic() - t0
    lat.sort()
    out = dict(stats)
    out["elapsed_s"] = elapsed
    out["lookups_per_s"] = stats["done"] / elapsed if elapsed else None
    out["queries_per_lookup"] = stats["queries"] / stats["done"] if stats["done"] else None
    out["per_kind"] = {k: {"lookups": v[0], "queries_per_lookup": v[1] / v[0] if v[0] else None}
                       for k, v in sorted(per_kind.items())}
    out["p50_us"] = dnsq_pct(lat, 0.5)
    out["p99_us"] = dnsq_pct(lat, 0.99)
    out["wrong_examples"] = wrong_examples
    print(json.dumps(out))
    return 0


def dnsq_pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] * 1e6


if __name__ == "__main__":
    sys.exit(main())
