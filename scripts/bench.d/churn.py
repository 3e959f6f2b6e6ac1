"""The churn scenario (issue 18, "churn at scale"), stdlib only.

With the data set of k8s.py loaded (10k Services with their EndpointSlices,
and the memory-pods scenario's Pods when it ran first), every server watches
the private rig under `pods verified` at the same time. Then, one server after
the other, dnsperf offers RATE queries/s of Service names to that server while
a writer patches EndpointSlices at CHANGES per second and a prober measures how
long each sampled change takes to show in that server's answers. The writer
runs through both servers' phases, so each server also takes in the changes
while the other one is loaded.

Changes: the writer walks the 1,000 headless Services (k8s.headless) round
robin and rewrites the first endpoint address of each one's slice to a fresh
address in 10.250.0.0/16 (a JSON merge patch of `endpoints`), so every change
is visible in the A answer of a headless name. The prober takes the newest
change every PROBE_EVERY seconds and asks the loaded server for that name
until the new address is in the answer (propagation = time from the PATCH
returning to the first answer with it; a change overwritten before it was
seen, or not seen within 10 s, counts as missed). At the end every touched
slice gets its original endpoints back."""

import json
import os
import threading
import time

import dnsq
import k8s

PROBE_EVERY = 0.1
PROBE_TIMEOUT = 10.0


def _churn_ip(c: int) -> str:
    return f"10.250.{(c // 250) % 250}.{c % 250 + 1}"


def _slice_path(i: int) -> str:
    return (f"/apis/discovery.k8s.io/v1/namespaces/{k8s.ns_of(i)}/endpointslices/"
            f"{k8s.svc_name(i)}-bench")


def _endpoints(i: int, first: str | None) -> dict:
    eps = [{"addresses": [k8s.endpoint_ip(i, k)], "conditions": {"ready": True}}
           for k in range(k8s.ENDPOINTS_PER_SVC)]
    if first is not None:
        eps[0]["addresses"] = [first]
    return {"endpoints": eps}


class Writer:
    """Patches headless slices at RATE per second from THREADS threads
    (k8s.Api keeps a connection per thread), until stopped. Each thread waits
    for its PATCH to return, so THREADS / (mean PATCH time) bounds the rate:
    the phase's note gives that time, to tell a writer short of threads from an
    API server short of CPU."""

    def __init__(self, api, rate: int, threads: int = 32):
        self.api = api
        self.rate = rate
        self.threads = threads
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.count = 0
        self.errors = 0
        self.busy_s = 0.0  # summed PATCH round trips
        self.latest: tuple | None = None  # (service index, address, monotonic time)
        self.touched: set[int] = set()
        self.heads = [i for i in range(10000) if k8s.headless(i)]
        self.workers: list[threading.Thread] = []
        self.t0 = 0.0

    def start(self) -> None:
        self.t0 = time.monotonic()
        for w in range(self.threads):
            t = threading.Thread(target=self._run, args=(w,), daemon=True)
            t.start()
            self.workers.append(t)

    def _run(self, w: int) -> None:
        api = self.api
        per = self.rate / self.threads
        n = 0
        while not self.stop_ev.is_set():
            due = self.t0 + n / per
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            with self.lock:
                c = self.count
                self.count += 1
            i = self.heads[c % len(self.heads)]
            ip = _churn_ip(c)
            sent = time.monotonic()
            try:
                api.merge_patch(_slice_path(i), json.dumps(_endpoints(i, ip)).encode())
            except Exception:  # noqa: BLE001 - counted; the rate goes on
                with self.lock:
                    self.errors += 1
                    self.busy_s += time.monotonic() - sent
                n += 1
                continue
            with self.lock:
                self.busy_s += time.monotonic() - sent
                self.touched.add(i)
                if self.latest is None or self.latest[2] < time.monotonic():
                    self.latest = (i, ip, time.monotonic())
            n += 1

    def stop(self) -> None:
        self.stop_ev.set()
        for t in self.workers:
            t.join(timeout=30)

    def rate_done(self) -> float:
        secs = time.monotonic() - self.t0
        return (self.count - self.errors) / secs if secs > 0 else 0.0

    def restore(self, api) -> None:
        touched = sorted(self.touched)
        k8s._parallel(0, len(touched), 8, "churn restore",
                      lambda k: api.merge_patch(_slice_path(touched[k]),
                                                json.dumps(_endpoints(touched[k], None)).encode()))


def probe(writer: Writer, port: int, stop_ev: threading.Event, out: list) -> None:
    """Samples the newest change every PROBE_EVERY s until STOP_EV; appends
    the delay in ms (None when missed) to OUT."""
    seen_last = None
    while not stop_ev.is_set():
        time.sleep(PROBE_EVERY)
        with writer.lock:
            latest = writer.latest
        if latest is None or latest == seen_last:
            continue
        seen_last = latest
        i, ip, t0 = latest
        name = k8s.fqdn(i)
        got = None
        while time.monotonic() - t0 < PROBE_TIMEOUT:
            r = dnsq.ask(port, name, 1, timeout=0.2)
            if r and r[1] == 0 and ip in r[3]:
                got = (time.monotonic() - t0) * 1000
                break
            with writer.lock:
                # Overwritten: the same Service changed again before we saw it.
                if writer.latest and writer.latest[0] == i and writer.latest[1] != ip:
                    break
            time.sleep(0.001)
        out.append(got)


def _machine_ticks() -> tuple:
    """(busy, all) jiffies of every CPU together, from /proc/stat."""
    with open("/proc/stat", encoding="ascii") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle + iowait
    return sum(v) - idle, sum(v)


def _rig_ticks(bench) -> dict:
    """utime+stime ticks of the private rig's kube-apiserver and etcd (absent: 0)."""
    out = {}
    for name in ("kube-apiserver", "etcd"):
        try:
            with open(os.path.join(bench.OUT, "rig", "run", f"{name}.pid"), encoding="ascii") as f:
                out[name] = sum(bench.cpu_split(int(f.read().split()[0])))
        except (OSError, ValueError, IndexError):
            out[name] = 0
    return out


def run(ctx, bench, api, servers: list[str]) -> list[dict]:
    B = bench
    B.log("== scenario churn")
    quick = ctx.quick
    rate_q = 50000
    changes = 500
    secs = 15 if quick else 300
    names = B.write(os.path.join(ctx.work, "churn-names.txt"),
                    "".join(f"{k8s.fqdn(i)} A\n" for i in range(10000)))
    procs, ports = {}, {}
    rows = []
    writer = None
    try:
        for s in servers:
            port = B.free_port()
            p = B.start_server(ctx, s, None, port,
                               corefile=f".:{port} {{\n{B.k8s_block(ctx, 'verified')}}}\n",
                               tag=".churn")
            procs[s], ports[s] = p, port
            if dnsq.wait_answer(port, k8s.fqdn(9999), 180) is None:
                raise RuntimeError(f"{s} not answering for churn: {B.last_log_line(ctx, s, '.churn')}")
        writer = Writer(api, changes)
        writer.start()
        time.sleep(2)  # the writer at its rate before the first phase
        for s in servers:
            p, port = procs[s], ports[s]
            delays: list = []
            stop_ev = threading.Event()
            prober = threading.Thread(target=probe, args=(writer, port, stop_ev, delays), daemon=True)
            c0, w0 = writer.count, writer.busy_s
            m0, r0, t0, sh0 = _machine_ticks(), _rig_ticks(B), time.monotonic(), os.times()
            u0, k0 = B.cpu_split(p.pid)
            prober.start()
            try:
                st = B.dnsperf(port, names, secs, qps=rate_q, verbose=True)
            finally:
                stop_ev.set()
                prober.join(timeout=PROBE_TIMEOUT + 5)
            u1, k1 = B.cpu_split(p.pid)
            m1, r1, wall, sh1 = _machine_ticks(), _rig_ticks(B), time.monotonic() - t0, os.times()
            done = st.get("completed") or 0
            cpu_us = ((u1 + k1) - (u0 + k0)) * 1e6 / B.CLK_TCK
            seen = sorted(d for d in delays if d is not None)
            missed = len(delays) - len(seen)
            made = writer.count - c0
            rate_w = made / (st.get("runtime") or secs)
            # Where the two cores went in the phase: is 500 changes/s the
            # writer's limit, the API server's, or the machine's?
            nproc = os.cpu_count() or 1
            busy = (m1[0] - m0[0]) / max(1, m1[1] - m0[1]) * nproc
            api_ms = {k: (r1[k] - r0[k]) * 1e3 / B.CLK_TCK / made if made else None for k in r1}
            own = ((sh1.user - sh0.user) + (sh1.system - sh0.system)) / wall
            kids = ((sh1.children_user - sh0.children_user)
                    + (sh1.children_system - sh0.children_system)) / wall
            patch_ms = (writer.busy_s - w0) * 1e3 / made if made else None
            cpu_note = (f"machine {busy:.2f} of {nproc} CPUs busy; CPU ms per change: "
                        f"kube-apiserver {B.fmt(api_ms['kube-apiserver'], 2)}, etcd "
                        f"{B.fmt(api_ms['etcd'], 2)}; writer and prober {own:.2f} CPUs, dnsperf "
                        f"{kids:.2f}; mean PATCH {B.fmt(patch_ms, 1)} ms over {writer.threads} "
                        f"writer threads (their bound {B.fmt(writer.threads * 1e3 / patch_ms if patch_ms else None, 0)}/s)")
            note = (f"{st.get('qps', 0):,.0f} q/s answered of {rate_q:,} offered, "
                    f"{st.get('lost', 0):.0f} lost; {rate_w:.0f} slice changes/s "
                    f"({changes}/s asked, {writer.errors} failed PATCHes so far); propagation "
                    f"p50 {B.fmt(B.pct(seen, 0.5), 1)} ms, p99 {B.fmt(B.pct(seen, 0.99), 1)} ms "
                    f"over {len(delays)} sampled changes, {missed} missed; {secs} s, "
                    f"10k Services, pods verified; {cpu_note}")
            rows.append(B.row("churn", s, qps=st.get("qps"), cpu_us_per_query=cpu_us / done if done else None,
                              p50_us=st.get("p50_us"), p99_us=st.get("p99_us"),
                              rss_mib=B.rss_mib(p.pid), lost=st.get("lost"),
                              changes_per_s=rate_w, propagation_p50_ms=B.pct(seen, 0.5),
                              propagation_p99_ms=B.pct(seen, 0.99), propagation_samples=len(delays),
                              propagation_missed=missed, dnsperf=st.get("cmd"), reason=note,
                              machine_cpus_busy=busy, apiserver_cpu_ms_per_change=api_ms["kube-apiserver"],
                              etcd_cpu_ms_per_change=api_ms["etcd"], patch_ms=patch_ms,
                              status="ok" if p.poll() is None else "failed"))
            B.log(f"  churn/{s}: {note}")
    finally:
        if writer is not None:
            writer.stop()
            try:
                writer.restore(api)
            except (RuntimeError, OSError) as e:
                B.log(f"  churn: restoring the slices failed: {e}")
        for p in procs.values():
            B.stop(p)
    return rows
