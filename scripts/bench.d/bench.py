#!/usr/bin/env python3
"""The benchmark suite behind scripts/bench (see BENCHMARKS.md).

Every server under test runs pinned to CPU 1, dnsperf (and any upstream) to
CPU 0, on loopback only. Per (scenario, server, run): start the server, warm
it, (a) offer a fixed load (dnsperf -Q) and take the server's CPU time per
answered query from /proc/PID/stat plus latency percentiles from dnsperf -v,
(b) run dnsperf unthrottled for the maximum throughput, read VmRSS, stop the
server. Medians over the runs. Servers that cannot run a scenario get a
`skipped` row with the reason; no figure is ever invented."""

import argparse
import datetime
import json
import os
import random
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, HERE)
import dnsq  # noqa: E402
import k8s  # noqa: E402
import churn  # noqa: E402
import nodecache  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "target", "bench")
CLK_TCK = os.sysconf("SC_CLK_TCK")
IDLE_S = 2.0  # autopath: seconds of no queries over which a server's idle CPU is read
SERVERS = ["clusterdns", "coredns", "unbound", "ceiling"]
DNSPERF_SCENARIOS = ["hosts", "rewrite", "whoami", "cache-hit", "forward", "search-path", "cluster"]
K8S_SCENARIOS = ["search-path", "autopath", "cluster", "memory", "propagation", "startup",
                 "memory-pods", "memory-pods-autopath", "memory-pods-compact", "churn"]
ALL_SCENARIOS = ["hosts", "rewrite", "whoami", "cache-hit", "forward", "search-path", "autopath",
                 "cluster", "node-cache", "memory", "propagation", "startup", "memory-pods",
                 "memory-pods-autopath", "memory-pods-compact", "churn"]
SERVER_CPU = "1"
CLIENT_CPU = "0"

# CLUSTERDNS_BIN: another build (a smoke run of a debug build; its figures
# mean nothing).
CLUSTERDNS = os.environ.get("CLUSTERDNS_BIN") or os.path.join(ROOT, "target", "release", "clusterdns")
COREDNS = os.environ.get("COREDNS_BIN") or os.path.join(ROOT, ".rig", "bin", "coredns")
CEILING = os.path.join(OUT, "ceiling")
UNBOUND = "/usr/sbin/unbound"

PROCS: list[subprocess.Popen] = []  # every process we started and have not reaped
PIDFILE = os.path.join(OUT, "pids")


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load_avg() -> str:
    with open("/proc/loadavg", encoding="ascii") as f:
        return " ".join(f.read().split()[:3])


def print_uptime() -> str:
    up = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    log(f"uptime: {up}")
    return load_avg()


def record_pids() -> None:
    with open(PIDFILE, "w", encoding="ascii") as f:
        for p in PROCS:
            if p.poll() is None:
                f.write(f"{p.pid}\n")


def spawn(args: list[str], log_path: str, env: dict | None = None) -> subprocess.Popen:
    lf = open(log_path, "ab")  # noqa: SIM115 - owned by the child
    p = subprocess.Popen(args, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         env=env)
    lf.close()
    PROCS.append(p)
    record_pids()
    return p


def stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
    if p in PROCS:
        PROCS.remove(p)
    record_pids()


def stop_all() -> None:
    for p in list(PROCS):
        try:
            stop(p)
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass


def free_port() -> int:
    """A port free for both UDP and TCP on 127.0.0.1 (small race accepted)."""
    for _ in range(100):
        port = random.randint(20000, 45000)
        ok = True
        for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
            s = socket.socket(socket.AF_INET, kind)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                ok = False
            finally:
                s.close()
        if ok:
            return port
    raise RuntimeError("no free port")


def cpu_split(pid: int) -> tuple:
    """(utime, stime) of a process, in ticks (fields 14 and 15)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]), int(rest[12])


def status_mib(pid: int, key: str) -> float | None:
    """A kB field of /proc/PID/status (VmRSS:, VmHWM:) in MiB."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def rss_mib(pid: int) -> float | None:
    return status_mib(pid, "VmRSS:")


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def pct(sorted_xs, q):
    if not sorted_xs:
        return None
    i = min(len(sorted_xs) - 1, max(0, int(round(q * (len(sorted_xs) - 1)))))
    return sorted_xs[i]


# --------------------------------------------------------------------------
# dnsperf
# --------------------------------------------------------------------------

def dnsperf(port: int, qfile: str, duration: int, qps: int | None = None, verbose: bool = False,
            passes: int | None = None, clients: int = 32, outstanding: int = 500,
            server: str = "127.0.0.1", netns: str | None = None) -> dict:
    """dnsperf at SERVER:PORT (from network namespace NETNS when given)."""
    args = ["ip", "netns", "exec", netns] if netns else []
    args += ["taskset", "-c", CLIENT_CPU, "dnsperf", "-s", server, "-p", str(port),
            "-d", qfile, "-l", str(duration), "-c", str(clients), "-q", str(outstanding),
            "-t", "2"]
    if qps:
        args += ["-Q", str(qps)]
    if passes:
        args += ["-n", str(passes)]
    if verbose:
        args.append("-v")
    lat: list[float] = []
    stats: dict = {"cmd": " ".join(args)}
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         bufsize=1 << 20)
    PROCS.append(p)
    try:
        assert p.stdout is not None
        for line in p.stdout:
            if line.startswith("> "):
                parts = line.split()
                if len(parts) >= 5 and parts[1] != "T":
                    try:
                        lat.append(float(parts[-1]))
                    except ValueError:
                        pass
                continue
            s = line.strip()
            if s.startswith("Response codes:"):
                stats["rcodes"] = s[len("Response codes:"):].strip()
            for key, field in (("Queries sent:", "sent"), ("Queries completed:", "completed"),
                               ("Queries lost:", "lost"), ("Run time (s):", "runtime"),
                               ("Queries per second:", "qps")):
                if s.startswith(key):
                    v = s[len(key):].split()[0]
                    stats[field] = float(v)
        p.wait(duration + 60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        PROCS.remove(p)
    if "completed" not in stats:
        raise RuntimeError(f"dnsperf gave no statistics: {' '.join(args)}")
    if lat:
        lat.sort()
        stats["p50_us"] = pct(lat, 0.50) * 1e6
        stats["p99_us"] = pct(lat, 0.99) * 1e6
    sent = stats.get("sent") or 0
    stats["lost_pct"] = 100.0 * stats.get("lost", 0) / sent if sent else None
    return stats


# --------------------------------------------------------------------------
# configurations
# --------------------------------------------------------------------------

class Ctx:
    """Per-invocation settings and paths."""

    def __init__(self, quick: bool, runs: int | None, duration: int | None,
                 pods: int | None = None):
        self.quick = quick
        # memory-pods: 10k Pods, then this many (100k; 20k with --quick, as
        # the API server creates only ~250 Pods/s on 2 shared cores).
        self.pods = pods or (20000 if quick else 100000)
        self.runs = runs or (1 if quick else 3)
        self.fixed_dur = duration or (5 if quick else 10)
        self.max_dur = duration or (5 if quick else 10)
        self.work = os.path.join(OUT, "work")
        os.makedirs(self.work, exist_ok=True)
        self.kubeconfig: str | None = None
        self.k8s_ok_reason: str | None = None  # None = usable
        self.upstream_port: int | None = None
        self.autopath_rows: set[str] = set()  # empty = all rows of the autopath scenario


def write(path: str, text: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


UNBOUND_BASE = """server:
    interface: 127.0.0.1
    port: {port}
    num-threads: 1
    do-ip6: no
    do-daemonize: no
    chroot: ""
    username: ""
    directory: "{dir}"
    pidfile: ""
    use-syslog: no
    logfile: ""
    verbosity: 0
    access-control: 127.0.0.0/8 allow
    so-reuseport: yes
    module-config: "iterator"
    qname-minimisation: no
    do-not-query-localhost: no
    num-queries-per-thread: 4096
    outgoing-range: 8192
    minimal-responses: yes
    rrset-roundrobin: no
    prefetch: no
"""


def unbound_conf(ctx: Ctx, name: str, port: int, local: str = "", forward: int | None = None) -> str:
    text = UNBOUND_BASE.format(port=port, dir=ctx.work) + local
    if forward:
        text += f'forward-zone:\n    name: "."\n    forward-addr: 127.0.0.1@{forward}\n'
    return write(os.path.join(ctx.work, f"unbound-{name}.conf"), text)


def upstream_conf(ctx: Ctx, port: int) -> str:
    """The fast loopback upstream: answers every name under ext.bench. and
    example.com. with one A record (local-zone redirect)."""
    local = ('    local-zone: "ext.bench." redirect\n'
             '    local-data: "ext.bench. 300 IN A 10.1.2.3"\n'
             '    local-zone: "example.com." redirect\n'
             '    local-data: "example.com. 300 IN A 10.1.2.4"\n')
    return unbound_conf(ctx, "upstream", port, local)


def k8s_block(ctx: Ctx, pods: str = "insecure", extra: str = "") -> str:
    return ("    kubernetes cluster.local in-addr.arpa ip6.arpa {\n"
            f"        kubeconfig {ctx.kubeconfig} clusterdns-rig\n"
            f"        pods {pods}\n{extra}"
            "        fallthrough in-addr.arpa ip6.arpa\n"
            "    }\n")


class Scenario:
    """What a dnsperf scenario needs: query files, server configs, a probe."""

    name = ""
    offered = 80000
    needs_upstream = False
    needs_k8s = False

    def __init__(self, ctx: Ctx):
        self.ctx = ctx
        self.dir = os.path.join(ctx.work, self.name)
        os.makedirs(self.dir, exist_ok=True)

    def prepare(self) -> None:
        """Writes query files."""

    def corefile(self, port: int) -> str | None:
        return None

    def unbound_local(self) -> str | None:
        """Unbound local-data text, or None when Unbound has no equivalent."""
        return None

    def unbound_forward(self) -> bool:
        return False

    probe = ("host0.hosts.bench", 1)
    probe_needs_answer = True
    fixed_file = ""
    max_file = ""
    warm_file = ""
    warm_passes: int | None = None


class Hosts(Scenario):
    name = "hosts"
    N = 1000

    def prepare(self):
        lines = [f"10.0.{i // 250}.{i % 250 + 1} host{i}.hosts.bench" for i in range(self.N)]
        self.hosts = write(os.path.join(self.dir, "hosts"), "\n".join(lines) + "\n")
        q = [f"host{i}.hosts.bench A" for i in range(self.N)]
        random.Random(1).shuffle(q)
        self.fixed_file = self.max_file = self.warm_file = write(
            os.path.join(self.dir, "queries.txt"), "\n".join(q) + "\n")

    def corefile(self, port):
        return f".:{port} {{\n    hosts {self.hosts}\n}}\n"

    def unbound_local(self):
        out = ['    local-zone: "hosts.bench." static\n']
        for i in range(self.N):
            out.append(f'    local-data: "host{i}.hosts.bench. 3600 IN A 10.0.{i // 250}.{i % 250 + 1}"\n')
        return "".join(out)


class Rewrite(Hosts):
    """The hosts scenario's names asked under an alias suffix that a
    `rewrite name suffix ... answer auto` rule maps onto them: beside the
    hosts rows, the cost of the rewrite path (issue 17: <= 1.1x)."""

    name = "rewrite"
    probe = ("host0.alias.bench", 1)

    def prepare(self):
        super().prepare()
        q = [f"host{i}.alias.bench A" for i in range(self.N)]
        random.Random(1).shuffle(q)
        self.fixed_file = self.max_file = self.warm_file = write(
            os.path.join(self.dir, "queries.txt"), "\n".join(q) + "\n")

    def corefile(self, port):
        return (f".:{port} {{\n    rewrite name suffix .alias.bench. .hosts.bench. answer auto\n"
                f"    hosts {self.hosts}\n}}\n")

    def unbound_local(self):
        return None


class Whoami(Scenario):
    """Not in the issue's list: the server's own path (parse, chain, build),
    runnable before the data plugins exist."""

    name = "whoami"
    probe = ("probe.whoami.bench", 1)
    probe_needs_answer = False

    def prepare(self):
        q = [f"w{i}.whoami.bench A" for i in range(1000)]
        self.fixed_file = self.max_file = self.warm_file = write(
            os.path.join(self.dir, "queries.txt"), "\n".join(q) + "\n")

    def corefile(self, port):
        return f".:{port} {{\n    whoami\n}}\n"


class CacheHit(Scenario):
    name = "cache-hit"
    needs_upstream = True
    probe = ("name0.ext.bench", 1)
    warm_passes = 1

    def prepare(self):
        q = [f"name{i}.ext.bench A" for i in range(1000)]
        random.Random(2).shuffle(q)
        self.fixed_file = self.max_file = self.warm_file = write(
            os.path.join(self.dir, "queries.txt"), "\n".join(q) + "\n")

    def corefile(self, port):
        return (f".:{port} {{\n    forward . 127.0.0.1:{self.ctx.upstream_port}\n"
                "    cache 300\n}\n")

    def unbound_local(self):
        return ""

    def unbound_forward(self):
        return True


class Forward(Scenario):
    name = "forward"
    offered = 10000
    needs_upstream = True
    probe = ("probe.ext.bench", 1)

    def prepare(self):
        ctx = self.ctx
        # Unique names: each server process is fresh, and the fixed and the max
        # phase use disjoint files sized so that dnsperf never wraps around.
        nfix = int(self.offered * ctx.fixed_dur * 1.3) + 1000
        nmax = 300000 * ctx.max_dur
        self.fixed_file = write(os.path.join(self.dir, "fixed.txt"),
                                "".join(f"f{i}.ext.bench A\n" for i in range(nfix)))
        self.max_file = write(os.path.join(self.dir, "max.txt"),
                              "".join(f"m{i}.ext.bench A\n" for i in range(nmax)))
        self.warm_file = write(os.path.join(self.dir, "warm.txt"),
                               "".join(f"w{i}.ext.bench A\n" for i in range(1000)))
        self.warm_passes = 1

    def corefile(self, port):
        return f".:{port} {{\n    forward . 127.0.0.1:{self.ctx.upstream_port}\n}}\n"

    def unbound_local(self):
        return ""

    def unbound_forward(self):
        return True


def cluster_unbound_local(n: int) -> str:
    out = ['    local-zone: "cluster.local." static\n']
    for i in range(n):
        name = k8s.fqdn(i)
        if k8s.headless(i):
            for k in range(k8s.ENDPOINTS_PER_SVC):
                out.append(f'    local-data: "{name}. 5 IN A {k8s.endpoint_ip(i, k)}"\n')
        else:
            out.append(f'    local-data: "{name}. 5 IN A {k8s.cluster_ip(i)}"\n')
            out.append(f'    local-data-ptr: "{k8s.cluster_ip(i)} 5 {name}."\n')
        out.append(f'    local-data: "_http._tcp.{name}. 5 IN SRV 0 100 80 {name}."\n')
    return "".join(out)


class Cluster(Scenario):
    name = "cluster"
    needs_k8s = True
    N = 10000

    @property
    def probe(self):
        return (k8s.fqdn(self.N - 1), 1)

    def prepare(self):
        rnd = random.Random(3)
        q = []
        for _ in range(20000):
            i = rnd.randrange(self.N)
            r = rnd.random()
            name = k8s.fqdn(i)
            if r < 0.40:
                q.append(f"{name} A")
            elif r < 0.50:
                q.append(f"{name} AAAA")
            elif r < 0.65:
                q.append(f"_http._tcp.{name} SRV")
            elif r < 0.80 and not k8s.headless(i):
                a, b, c, d = k8s.cluster_ip(i).split(".")
                q.append(f"{d}.{c}.{b}.{a}.in-addr.arpa PTR")
            else:
                q.append(f"nosuch-{i % 1000}.{k8s.ns_of(i)}.svc.cluster.local A")
        self.fixed_file = self.max_file = self.warm_file = write(
            os.path.join(self.dir, "queries.txt"), "\n".join(q) + "\n")

    def corefile(self, port):
        return f".:{port} {{\n{k8s_block(self.ctx)}}}\n"

    def unbound_local(self):
        return cluster_unbound_local(self.N)


class SearchPath(Cluster):
    """Pods in namespace bench-0 with the default ndots:5 resolv.conf: every
    lookup walks bench-0.svc.cluster.local, svc.cluster.local, cluster.local,
    then the name as given; A and AAAA for each."""

    name = "search-path"
    needs_upstream = True
    SEARCH = ["bench-0.svc.cluster.local", "svc.cluster.local", "cluster.local"]

    def prepare(self):
        rnd = random.Random(4)
        q = []
        while len(q) < 20000:
            r = rnd.random()
            i = rnd.randrange(self.N)
            if r < 0.3:
                target, stop_at = f"svc-{i % 1000}", 0  # same namespace: first try hits
            elif r < 0.6:
                target, stop_at = f"{k8s.svc_name(i)}.{k8s.ns_of(i)}", 1 if k8s.ns_of(i) != "bench-0" else 0
            else:
                target, stop_at = f"www{i % 200}.example.com", 3  # external: all 3 miss
            names = [f"{target}.{s}" for s in self.SEARCH][: stop_at + 1]
            if stop_at == 3:
                names = [f"{target}.{s}" for s in self.SEARCH] + [target]
            for n in names:
                q.append(f"{n} A")
                q.append(f"{n} AAAA")
        self.fixed_file = self.max_file = self.warm_file = write(
            os.path.join(self.dir, "queries.txt"), "\n".join(q) + "\n")
        self.warm_passes = 1

    def corefile(self, port):
        return (f".:{port} {{\n    errors\n{k8s_block(self.ctx)}"
                f"    forward . 127.0.0.1:{self.ctx.upstream_port}\n    cache 30\n}}\n")

    def unbound_forward(self):
        return True


class Autopath(SearchPath):
    """The search walk of a Pod in bench-0 (ndots:5, SEARCH) as lookups, not
    queries: walk.py asks A for each search name in turn and stops at the
    first answer, from the Pod's IP, so `autopath @kubernetes` can answer the
    whole walk in one round trip (CNAME + A). Measured per lookup: round
    trips, server CPU, latency; once with autopath, once without (the same
    Corefile minus the autopath line) as the baseline. Mix: same-namespace
    short names, `svc.ns` names, external names (the upstream Unbound)."""

    name = "autopath"
    offered = 1500  # lookups/s: within what the Python driver sustains on CPU 0
    inflight = 32
    POD_NS, POD_NAME, POD_IP = "bench-0", "bench-client", "127.0.0.50"
    # (row name, autopath on, kinds of lookup): the mix, and the external
    # names alone (the issue's target: one round trip for those). `external`
    # repeats 200 names, so after the warm-up every name of the walk is a
    # cache hit in both servers (the cache sits behind autopath, as in
    # CoreDNS); `external-new` asks every name once (walk.py --start skips
    # what the warm-up asked), so each lookup is three kubernetes NXDOMAINs
    # and one forward, all cache misses.
    MIX = "same-ns,svc.ns,external"
    VARIANTS = (("autopath", True, MIX), ("autopath-off", False, MIX),
                ("autopath-external", True, "external"), ("autopath-external-off", False, "external"),
                ("autopath-external-new", True, "external-new"),
                ("autopath-external-new-off", False, "external-new"),
                # Issue 19: clusterdns's autopath on `client_index compact`
                # with `pods disabled`, against CoreDNS's `autopath` rows
                # (`pods verified`; it has no other Pod source for autopath).
                ("autopath-compact", True, MIX), ("autopath-external-compact", True, "external"),
                ("autopath-external-new-compact", True, "external-new"))
    NEW_NAMES = 60000

    def prepare(self):
        rnd = random.Random(5)
        lines = []
        for _ in range(20000):
            r = rnd.random()
            i = rnd.randrange(self.N)
            if r < 0.3:
                j = i % k8s.PER_NS  # Service j lives in bench-0
                kind, name = "same-ns", k8s.svc_name(j)
            elif r < 0.6:
                j = i
                kind, name = "svc.ns", f"{k8s.svc_name(i)}.{k8s.ns_of(i)}"
            else:
                lines.append(f"external www{i % 200}.example.com 10.1.2.4")
                continue
            want = ([k8s.endpoint_ip(j, k) for k in range(k8s.ENDPOINTS_PER_SVC)]
                    if k8s.headless(j) else [k8s.cluster_ip(j)])
            lines.append(f"{kind} {name} {','.join(want)}")
        lines += [f"external-new n{k}.example.com 10.1.2.4" for k in range(self.NEW_NAMES)]
        self.lookup_file = write(os.path.join(self.dir, "lookups.txt"), "\n".join(lines) + "\n")

    @staticmethod
    def compact(variant: str) -> bool:
        return variant.endswith("-compact")

    def corefile(self, port, autopath: bool = True, compact: bool = False):
        block = (k8s_block(self.ctx, "disabled", "        client_index compact\n") if compact
                 else k8s_block(self.ctx, "verified"))
        return (f".:{port} {{\n    errors\n{block}"
                + ("    autopath @kubernetes\n" if autopath else "")
                + f"    forward . 127.0.0.1:{self.ctx.upstream_port}\n    cache 30\n}}\n")


SCENARIO_CLASSES = {c.name: c for c in (Hosts, Rewrite, Whoami, CacheHit, Forward, SearchPath, Cluster)}


# --------------------------------------------------------------------------
# servers
# --------------------------------------------------------------------------

def start_server(ctx: Ctx, server: str, sc: Scenario | None, port: int, corefile: str | None = None,
                 tag: str = "") -> subprocess.Popen:
    logp = os.path.join(ctx.work, f"{server}{tag}.log")
    pin = ["taskset", "-c", SERVER_CPU]
    if server in ("clusterdns", "coredns"):
        cf = write(os.path.join(ctx.work, f"Corefile.{server}{tag}"), corefile or sc.corefile(port))
        binary = CLUSTERDNS if server == "clusterdns" else COREDNS
        return spawn(pin + [binary, "-conf", cf, "-quiet"], logp)
    if server == "unbound":
        local = sc.unbound_local()
        conf = unbound_conf(ctx, sc.name, port, local or "",
                            ctx.upstream_port if sc.unbound_forward() else None)
        return spawn(pin + [UNBOUND, "-d", "-c", conf], logp)
    if server == "ceiling":
        return spawn(pin + [CEILING, str(port)], logp)
    raise ValueError(server)


def wait_up(p: subprocess.Popen, port: int, probe, need_answer: bool, secs: float = 30) -> str | None:
    """None when the server answers the probe; else the reason it is not usable."""
    end = time.monotonic() + secs
    last = None
    while time.monotonic() < end:
        if p.poll() is not None:
            return f"exited with status {p.returncode}"
        r = dnsq.ask(port, probe[0], probe[1], timeout=0.3)
        if r is not None:
            last = r
            if not need_answer or (r[1] == 0 and r[2] > 0):
                return None
        time.sleep(0.1)
    if last is not None:
        return f"probe {probe[0]} answered rcode {last[1]} with {last[2]} answers"
    return f"no answer to {probe[0]} within {secs:.0f}s"


def last_log_line(ctx: Ctx, server: str, tag: str = "") -> str:
    try:
        with open(os.path.join(ctx.work, f"{server}{tag}.log"), encoding="utf-8", errors="replace") as f:
            lines = [x.strip() for x in f if x.strip()]
        return lines[-1][:300] if lines else ""
    except OSError:
        return ""


def availability(ctx: Ctx, server: str, sc: Scenario | None) -> str | None:
    """None if SERVER can run scenario SC, else why not."""
    if server == "clusterdns" and not os.access(CLUSTERDNS, os.X_OK):
        return f"{CLUSTERDNS} missing (cargo build --release -p clusterdns failed?)"
    if server == "coredns" and not os.access(COREDNS, os.X_OK):
        return f"{COREDNS} missing: run scripts/rig build"
    if server == "unbound" and not os.access(UNBOUND, os.X_OK):
        return "unbound not installed"
    if server == "ceiling" and not os.access(CEILING, os.X_OK):
        return "ceiling responder not built"
    if sc is None:
        return None
    if sc.needs_k8s and server in ("clusterdns", "coredns") and ctx.k8s_ok_reason:
        return ctx.k8s_ok_reason
    if server == "unbound" and sc.unbound_local() is None:
        return "no Unbound equivalent"
    if server in ("clusterdns", "coredns"):
        # Trial run: a Corefile naming a plugin that is missing or a
        # placeholder is rejected at start-up.
        port = free_port()
        tag = f".trial-{sc.name}"
        p = start_server(ctx, server, sc, port, tag=tag)
        try:
            why = wait_up(p, port, sc.probe, sc.probe_needs_answer, secs=60 if sc.needs_k8s else 15)
        finally:
            stop(p)
        if why:
            return f"{why}: {last_log_line(ctx, server, tag)}".rstrip(": ")
    return None


# --------------------------------------------------------------------------
# measuring
# --------------------------------------------------------------------------

def measure_once(ctx: Ctx, sc: Scenario, server: str) -> dict:
    port = free_port()
    load = print_uptime()
    p = start_server(ctx, server, sc, port)
    try:
        why = wait_up(p, port, sc.probe, sc.probe_needs_answer and server != "ceiling")
        if why:
            raise RuntimeError(f"{server} not serving {sc.name}: {why}: {last_log_line(ctx, server)}")
        dnsperf(port, sc.warm_file, 2 if sc.warm_passes is None else 30, qps=20000,
                passes=sc.warm_passes)
        u0, k0 = cpu_split(p.pid)
        fixed = dnsperf(port, sc.fixed_file, ctx.fixed_dur, qps=sc.offered, verbose=True)
        u1, k1 = cpu_split(p.pid)
        t0, t1 = u0 + k0, u1 + k1
        mx = dnsperf(port, sc.max_file, ctx.max_dur)
        rss = rss_mib(p.pid)
        if p.poll() is not None:
            raise RuntimeError(f"{server} died during the run: {last_log_line(ctx, server)}")
    finally:
        stop(p)
    done = fixed.get("completed") or 0
    cpu_us = (t1 - t0) * 1e6 / CLK_TCK / done if done else None
    # The kernel's share (stime): the part no user-space work can remove.
    sys_us = (k1 - k0) * 1e6 / CLK_TCK / done if done else None
    r = {"load1": load, "qps": mx.get("qps"), "cpu_us_per_query": cpu_us,
         "sys_us_per_query": sys_us,
         "p50_us": fixed.get("p50_us"), "p99_us": fixed.get("p99_us"), "rss_mib": rss,
         "fixed_qps": fixed.get("qps"), "fixed_lost_pct": fixed.get("lost_pct"),
         "max_lost_pct": mx.get("lost_pct"), "cpu_ticks": t1 - t0,
         "fixed_rcodes": fixed.get("rcodes"), "max_rcodes": mx.get("rcodes"),
         "fixed_cmd": fixed["cmd"], "max_cmd": mx["cmd"]}
    log(f"  {sc.name}/{server}: max {fmt(r['qps'], 0)} q/s, {fmt(cpu_us, 2)} us/q "
        f"({fmt(sys_us, 2)} in the kernel) at "
        f"{fmt(r['fixed_qps'], 0)} q/s, p50 {fmt(r['p50_us'], 0)} us, p99 {fmt(r['p99_us'], 0)} us, "
        f"RSS {fmt(rss, 1)} MiB, lost {fmt(r['fixed_lost_pct'], 2)}%/{fmt(r['max_lost_pct'], 2)}%")
    return r


def fmt(x, nd):
    if x is None:
        return "-"
    return f"{x:,.{nd}f}"


def row(scenario: str, server: str, **kw) -> dict:
    base = {"kind": "result", "scenario": scenario, "server": server, "status": "ok",
            "reason": None, "qps": None, "cpu_us_per_query": None, "p50_us": None,
            "p99_us": None, "rss_mib": None}
    base.update(kw)
    return base


def skipped(scenario: str, server: str, reason: str) -> dict:
    log(f"  {scenario}/{server}: skipped: {reason}")
    return row(scenario, server, status="skipped", reason=reason)


def start_upstream(ctx: Ctx) -> subprocess.Popen:
    """The loopback upstream Unbound (upstream_conf) on CPU 0; sets ctx.upstream_port."""
    ctx.upstream_port = free_port()
    up = spawn(["taskset", "-c", CLIENT_CPU, UNBOUND, "-d", "-c",
                upstream_conf(ctx, ctx.upstream_port)],
               os.path.join(ctx.work, "unbound-upstream.log"))
    why = wait_up(up, ctx.upstream_port, ("probe.ext.bench", 1), True)
    if why:
        stop(up)
        raise RuntimeError(f"upstream unbound: {why}")
    return up


def run_dnsperf_scenario(ctx: Ctx, name: str) -> list[dict]:
    log(f"== scenario {name}")
    sc = SCENARIO_CLASSES[name](ctx)
    if sc.needs_k8s and ctx.kubeconfig is None and ctx.k8s_ok_reason:
        pass  # rows for clusterdns/coredns become skipped below
    sc.prepare()
    up = None
    rows: list[dict] = []
    try:
        if sc.needs_upstream:
            up = start_upstream(ctx)
        usable = []
        for s in SERVERS:
            why = availability(ctx, s, sc)
            if why:
                rows.append(skipped(name, s, why))
            else:
                usable.append(s)
        runs: dict[str, list[dict]] = {s: [] for s in usable}
        errors: dict[str, str] = {}
        for n in range(ctx.runs):
            log(f"-- {name}: run {n + 1}/{ctx.runs}")
            for s in usable:
                if s in errors:
                    continue
                try:
                    runs[s].append(measure_once(ctx, sc, s))
                except RuntimeError as e:
                    errors[s] = str(e)
                    log(f"  {name}/{s}: failed: {e}")
        for s in usable:
            rs = runs[s]
            if not rs:
                rows.append(row(name, s, status="failed", reason=errors.get(s)))
                continue
            agg = {k: median([r[k] for r in rs]) for k in
                   ("qps", "cpu_us_per_query", "sys_us_per_query", "p50_us", "p99_us",
                    "rss_mib", "fixed_qps", "fixed_lost_pct", "max_lost_pct")}
            rows.append(row(name, s, offered_qps=sc.offered, runs=len(rs),
                            load1=[r["load1"] for r in rs], per_run=rs,
                            reason=errors.get(s), **agg))
    finally:
        if up is not None:
            stop(up)
    rows.sort(key=lambda r: SERVERS.index(r["server"]))
    return rows


# --------------------------------------------------------------------------
# kubernetes: private rig, memory, startup, propagation
# --------------------------------------------------------------------------

class Rig:
    """A private rig (own RIG_DIR and ports) so the shared one is untouched.

    One scripts/bench at a time owns it: up() takes an exclusive lock on
    target/bench/rig.lock (waiting for another run's kubernetes scenarios,
    at most 45 minutes) and writes the driver's pid to target/bench/rig.owner;
    scripts/bench's exit handler only stops a rig its own driver owned."""

    LOCK = os.path.join(OUT, "rig.lock")
    OWNER = os.path.join(OUT, "rig.owner")

    def __init__(self, ctx: Ctx):
        self.dir = os.path.join(OUT, "rig")
        self.env = dict(os.environ, RIG_DIR=self.dir, RIG_KCM="0",
                        RIG_ETCD_PORT=str(free_port()), RIG_ETCD_PEER_PORT=str(free_port()),
                        RIG_APISERVER_PORT=str(free_port()), RIG_KCM_PORT=str(free_port()))
        self.up_done = False
        self.lockf = None

    def lock(self, wait_s: float = 45 * 60) -> None:
        import fcntl

        self.lockf = open(self.LOCK, "a")  # noqa: SIM115 - held until the process exits
        end = time.monotonic() + wait_s
        said = 0.0
        while True:
            try:
                fcntl.flock(self.lockf, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > end:
                    raise RuntimeError(f"{self.LOCK} held by another scripts/bench for "
                                       f"{wait_s / 60:.0f} min") from None
                if time.monotonic() - said > 60:
                    log(f"waiting for another scripts/bench to release the private rig ({self.LOCK})")
                    said = time.monotonic()
                time.sleep(2)
        write(self.OWNER, f"{os.getpid()}\n")

    def up(self) -> None:
        self.lock()
        src = os.path.join(ROOT, ".rig", "bin")
        need = ["etcd", "kube-apiserver", "kubectl", "coredns"]
        missing = [b for b in need if not os.access(os.path.join(src, b), os.X_OK)]
        if missing:
            raise RuntimeError(f"rig binaries missing ({', '.join(missing)}): run scripts/rig build")
        os.makedirs(os.path.join(self.dir, "bin"), exist_ok=True)
        for b in need:
            dst = os.path.join(self.dir, "bin", b)
            if os.path.lexists(dst):
                os.remove(dst)
            os.symlink(os.path.realpath(os.path.join(src, b)), dst)
        self.down()  # stale run data from an interrupted run
        log(f"starting a private rig in {self.dir}")
        self.up_done = True
        r = subprocess.run([os.path.join(ROOT, "scripts", "rig"), "up"], env=self.env,
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"scripts/rig up failed: {r.stderr.strip().splitlines()[-1:]}")

    def down(self) -> None:
        if os.path.isdir(os.path.join(self.dir, "run")):
            subprocess.run([os.path.join(ROOT, "scripts", "rig"), "down"], env=self.env,
                           capture_output=True, text=True, timeout=120)

    @property
    def kubeconfig(self) -> str:
        return os.path.join(self.dir, "kubeconfig")


def k8s_servers(ctx: Ctx) -> tuple[list[str], list[dict], dict[str, str]]:
    """Which of clusterdns/coredns can serve the kubernetes plugin now."""
    ok, why = [], {}
    for s in ("clusterdns", "coredns"):
        w = ctx.k8s_ok_reason or availability(ctx, s, None)
        if not w:
            port = free_port()
            cf = f".:{port} {{\n{k8s_block(ctx)}}}\n"
            tag = ".trial-k8s"
            p = start_server(ctx, s, None, port, corefile=cf, tag=tag)
            try:
                w = wait_up(p, port, ("kubernetes.default.svc.cluster.local", 1), True, secs=60)
            finally:
                stop(p)
            if w:
                w = f"kubernetes plugin trial: {w}: {last_log_line(ctx, s, tag)}"
        if w:
            why[s] = w
        else:
            ok.append(s)
    return ok, [], why


def memory_run(ctx: Ctx, s: str, cf: str, port: int, wait: list[tuple],
               timeout: float, tag: str) -> tuple[float | None, float | None, str | None, subprocess.Popen | None]:
    """Starts S with Corefile CF, waits until every (name, address[, source])
    in WAIT answers (with that A address when given, asked from that source
    address when given), waits 2 s, reads VmRSS and VmHWM. Returns (rss, hwm,
    why-not, the still running process or None)."""
    p = start_server(ctx, s, None, port, corefile=cf, tag=tag)
    t0 = time.monotonic()
    for name, addr, *src in wait:
        src = src[0] if src else None
        while True:  # in slices, to notice a server that died
            left = timeout - (time.monotonic() - t0)
            if p.poll() is not None:
                stop(p)
                return None, None, f"exited ({p.returncode}): {last_log_line(ctx, s, tag)}", None
            if left > 0 and dnsq.wait_answer(port, name, min(left, 5), want_addr=addr,
                                             interval=0.05, src=src) is not None:
                break
            if left <= 5:
                r = dnsq.ask(port, name, 1, timeout=0.5, src=src)
                stop(p)
                got = f"rcode {r[1]}, {r[2]} answers {r[3]}" if r else "no reply"
                return (None, None,
                        f"{name}{f' from {src}' if src else ''} did not answer {addr or ''} "
                        f"within {timeout:.0f}s ({got})", None)
    time.sleep(2)
    return rss_mib(p.pid), status_mib(p.pid, "VmHWM:"), None, p


def measure_memory(ctx: Ctx, servers: list[str], label: str, last: int) -> list[dict]:
    rows = []
    for s in servers:
        vals, why = [], None
        for _ in range(ctx.runs):
            port = free_port()
            cf = f".:{port} {{\n{k8s_block(ctx)}}}\n"
            rss, _hwm, why, p = memory_run(ctx, s, cf, port, [(k8s.fqdn(last), None)], 120, ".memory")
            if p is not None:
                stop(p)
            if why:
                break
            vals.append(rss)
        rows.append(row(f"memory-{label}", s, rss_mib=median(vals), runs=len(vals),
                        per_run=vals, status="ok" if vals else "failed",
                        reason=None if vals else why))
        log(f"  memory-{label}/{s}: RSS {fmt(median(vals), 1)} MiB")
    return rows


def pod_checks(n: int) -> list[tuple[str, str | None]]:
    """(name, expected A address or None for NXDOMAIN) proving that `pods
    verified` answers pod names from the watched Pods: 6 Pods spread over the
    data set, and 3 names insecure mode would answer but verified must not."""
    out: list[tuple[str, str | None]] = [(k8s.pod_fqdn(j), k8s.pod_ip(j))
                                         for j in sorted({0, 1, n // 3, n // 2, n - 2, n - 1})]
    out.append((k8s.pod_fqdn(0, ns=k8s.pod_ns(1)), None))  # a real Pod IP, other namespace
    out.append(("10-100-250-1.bench-0.pod.cluster.local", None))  # no Pod has 10.100.250.1
    out.append((k8s.pod_fqdn(n + 1000), None))  # a Pod not created (yet)
    return out


def check_names(port: int, checks: list[tuple]) -> tuple[int, list[str]]:
    """Asks every check (name, expected A address or None for NXDOMAIN[,
    source address]) once (UDP, 3 tries); returns (passed, failures)."""
    ok, bad = 0, []
    for name, addr, *src in checks:
        src = src[0] if src else None
        r = None
        for _ in range(3):
            r = dnsq.ask(port, name, 1, timeout=1.0, src=src)
            if r is not None:
                break
        where = f"{name} from {src}" if src else name
        if r is None:
            bad.append(f"{where}: no reply")
        elif addr is not None and not (r[1] == 0 and r[3] == [addr]):
            bad.append(f"{where}: rcode {r[1]} {r[3]}, want {addr}")
        elif addr is None and r[1] != 3:
            bad.append(f"{where}: rcode {r[1]} {r[3]}, want NXDOMAIN")
        else:
            ok += 1
    return ok, bad


# memory-pods-compact: a Pod created after the large point's Pods, on a
# loopback address the check binds to. Its walk answering proves the server
# took in the whole Pod list (one consistent list holds it and every Pod
# before it) without asking a pod name, which `client_index compact` under
# `pods disabled` does not answer.
WALK_NS, WALK_POD, WALK_IP = "bench-walk", "bench-walk-client", "127.0.0.51"
WALK_SVC = 9998  # a ClusterIP Service (9999 is headless)


def walk_checks() -> list[tuple]:
    """The search walk of the WALK_POD: a `svc.ns` name under its first search
    domain is answered (CNAME + the ClusterIP) from its address, NXDOMAIN from
    an address that is no Pod's."""
    name = f"{k8s.svc_name(WALK_SVC)}.{k8s.ns_of(WALK_SVC)}.{WALK_NS}.svc.cluster.local"
    return [(name, k8s.cluster_ip(WALK_SVC), WALK_IP), (name, None, "127.0.0.1")]


def measure_memory_pods(ctx: Ctx, servers: list[str], n: int, load_s: float,
                        mode: str = "plain") -> list[dict]:
    """RSS after sync with 10k Services and N Pods under `pods verified`;
    every run also checks that pod names are answered (pod_checks). MODE
    `autopath`: the Corefile also has `autopath @kubernetes` (issue 17's
    memory clause: the same objects, autopath on). MODE `compact` (issue 19):
    clusterdns runs autopath on `client_index compact` with `pods disabled`,
    CoreDNS on `pods verified` (it has no other Pod source for autopath);
    both are checked with the WALK_POD's search walk (walk_checks), CoreDNS
    also with the pod names."""
    label = f"memory-10k-svc-{n // 1000}k-pods" + ("" if mode == "plain" else f"-{mode}")
    # The last Pod in list order (namespace, then name as a string) and the
    # last one created: both answering = the Pod list has been taken in.
    lex_last = max(range(n), key=lambda j: (k8s.pod_ns(j), k8s.pod_name(j)))
    rows = []
    for s in servers:
        compact = mode == "compact" and s == "clusterdns"
        if compact:
            block = k8s_block(ctx, "disabled", "        client_index compact\n")
            wait: list[tuple] = [(k8s.fqdn(9999), None)] + walk_checks()[:1]
            checks = walk_checks()
            opts = "pods disabled, client_index compact, autopath @kubernetes"
        else:
            block = k8s_block(ctx, "verified")
            wait = [(k8s.fqdn(9999), None), (k8s.pod_fqdn(lex_last), k8s.pod_ip(lex_last)),
                    (k8s.pod_fqdn(n - 1), k8s.pod_ip(n - 1))]
            checks = pod_checks(n)
            opts = "pods verified" + (", autopath @kubernetes" if mode != "plain" else "")
            if mode == "compact":
                wait += walk_checks()[:1]
                checks += walk_checks()
        vals, hwms, why, fails, passed = [], [], None, [], 0
        for _ in range(ctx.runs):
            port = free_port()
            cf = (f".:{port} {{\n{block}"
                  + ("    autopath @kubernetes\n" if mode != "plain" else "") + "}\n")
            rss, hwm, why, p = memory_run(ctx, s, cf, port, wait, 120 + n / 500,
                                          ".memory-pods" + ("" if mode == "plain" else f"-{mode}"))
            if p is None:
                break
            try:
                ok, bad = check_names(port, checks)
            finally:
                stop(p)
            passed += ok
            fails += bad
            vals.append(rss)
            hwms.append(hwm)
        total = len(checks) * len(vals)
        if compact:
            what = (f"walk checked: {passed}/{total} right (a Pod created after the {n:,}: "
                    "CNAME + ClusterIP from its address, NXDOMAIN from a non-Pod)")
        else:
            what = (f"pod names checked: {passed}/{total} right ({len(pod_checks(n)) - 3} Pods "
                    "answer their IP, 3 unverifiable names NXDOMAIN"
                    + ("; the walk from a Pod's address and a non-Pod's" if mode == "compact" else "")
                    + ")")
        check = what if vals else "not checked (never synced)"
        if fails:
            check = f"check FAILED ({passed}/{total}): " + "; ".join(fails[:4])
        note = (f"10k Services + {n:,} Pods, {opts}; {check}; peak (VmHWM) "
                f"{fmt(median(hwms), 1)} MiB; Pods loaded at {load_s:.0f} Pods/s")
        if n == ctx.pods and n < 100000:
            note += (f"; {n // 1000}k Pods instead of 100k"
                     + (" (--quick: the API server creates 100-500 Pods/s on 2 shared "
                        "cores; the full run loads 100k)" if ctx.quick else " (--pods)"))
        status = "ok" if vals and not fails else "failed"
        rows.append(row(label, s, rss_mib=median(vals), hwm_mib=median(hwms), runs=len(vals),
                        per_run=vals, pods=n, services=10000, pod_checks_passed=passed,
                        pod_checks_total=total, pod_check_failures=fails, status=status,
                        options=opts, reason=note if vals else f"{why}; {note}"))
        log(f"  {label}/{s}: RSS {fmt(median(vals), 1)} MiB (peak {fmt(median(hwms), 1)}), "
            f"{check}" + (f"; {why}" if why else ""))
    return rows


def measure_startup(ctx: Ctx, servers: list[str], last: int) -> list[dict]:
    rows = []
    for s in servers:
        ready_ms, answer_ms = [], []
        for _ in range(ctx.runs):
            port, rport = free_port(), free_port()
            cf = f".:{port} {{\n{k8s_block(ctx)}    ready 127.0.0.1:{rport}\n}}\n"
            t0 = time.monotonic()
            p = start_server(ctx, s, None, port, corefile=cf, tag=".startup")
            r_at = a_at = None
            try:
                while time.monotonic() - t0 < 120 and (r_at is None or a_at is None):
                    if p.poll() is not None:
                        break
                    if r_at is None:
                        try:
                            with urllib.request.urlopen(f"http://127.0.0.1:{rport}/ready", timeout=0.2) as resp:
                                if resp.status == 200:
                                    r_at = time.monotonic()
                        except OSError:
                            pass
                    if a_at is None:
                        r = dnsq.ask(port, k8s.fqdn(last), 1, timeout=0.05)
                        if r and r[1] == 0 and r[2] > 0:
                            a_at = time.monotonic()
                    time.sleep(0.005)
            finally:
                stop(p)
            ready_ms.append((r_at - t0) * 1000 if r_at else None)
            answer_ms.append((a_at - t0) * 1000 if a_at else None)
        rows.append(row("startup", s, startup_ms=median(ready_ms), first_answer_ms=median(answer_ms),
                        per_run={"ready_ms": ready_ms, "first_answer_ms": answer_ms},
                        status="ok" if median(ready_ms) or median(answer_ms) else "failed",
                        reason=None if median(ready_ms) else "ready never returned 200"))
        log(f"  startup/{s}: ready {fmt(median(ready_ms), 0)} ms, last Service answered "
            f"{fmt(median(answer_ms), 0)} ms after exec")
    return rows


def measure_propagation(ctx: Ctx, servers: list[str], api: k8s.Api) -> list[dict]:
    changes = 50 if ctx.quick else 200
    procs, ports = [], {}
    try:
        for s in servers:
            port = free_port()
            p = start_server(ctx, s, None, port, corefile=f".:{port} {{\n{k8s_block(ctx)}}}\n",
                             tag=".propagation")
            procs.append(p)
            if dnsq.wait_answer(port, "kubernetes.default.svc.cluster.local", 60) is None:
                raise RuntimeError(f"{s} not answering for propagation")
            ports[s] = port
        res = k8s.propagation(api, ports, changes)
    finally:
        for p in procs:
            stop(p)
    rows = []
    for s, ds in res.items():
        seen = sorted(d for d in ds if d is not None)
        missed = len(ds) - len(seen)
        rows.append(row("propagation", s, p50_us=pct(seen, 0.5) * 1000 if seen else None,
                        p99_us=pct(seen, 0.99) * 1000 if seen else None,
                        p50_ms=pct(seen, 0.5), p99_ms=pct(seen, 0.99), changes=len(ds),
                        missed=missed, reason=f"{missed} changes not seen within 10 s" if missed else None))
        log(f"  propagation/{s}: p50 {fmt(pct(seen, 0.5), 1)} ms, p99 {fmt(pct(seen, 0.99), 1)} ms "
            f"over {len(ds)} changes, {missed} missed")
    return rows


def walk(sc: "Autopath", port: int, duration: float, kinds: str, start: int = 0,
         any_answer: bool = False) -> dict:
    """walk.py on CPU 0 against PORT for DURATION seconds (lookups of KINDS
    only, when given, from the START-th on; ANY_ANSWER: every reply with
    addresses is right, for the fixed-answer responder); its JSON summary."""
    args = ["taskset", "-c", CLIENT_CPU, sys.executable, os.path.join(HERE, "walk.py"),
            "--port", str(port), "--src", sc.POD_IP, "--file", sc.lookup_file,
            "--rate", str(sc.offered), "--duration", str(duration),
            "--inflight", str(sc.inflight), "--search", ",".join(sc.SEARCH), "--kinds", kinds,
            "--start", str(start)] + (["--any-answer"] if any_answer else [])
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    PROCS.append(p)
    try:
        out, err = p.communicate(timeout=duration + 60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        PROCS.remove(p)
    try:
        res = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise RuntimeError(f"walk.py gave no summary: {err.strip()[-300:]}") from None
    if "error" in res:
        raise RuntimeError(f"walk.py: {res['error']} ({' '.join(args)})")
    res["cmd"] = " ".join(args)
    return res


def measure_walk_once(ctx: Ctx, sc: "Autopath", server: str, variant: str, autopath: bool,
                      kinds: str) -> dict:
    port = free_port()
    load = print_uptime()
    tag = f".{variant}"
    ceiling = server == "ceiling"
    p = start_server(ctx, server, None, port, corefile=sc.corefile(port, autopath, sc.compact(variant)),
                     tag=tag)
    try:
        why = wait_up(p, port, sc.probe, not ceiling, secs=60)
        if why:
            raise RuntimeError(f"{server} not serving {variant}: {why}: {last_log_line(ctx, server, tag)}")
        # The client Pod must be in the server's Pod index before autopath
        # can know the client: wait for the first search name of an external
        # lookup to come back answered (CNAME + A).
        if autopath and not ceiling:
            first = f"www0.example.com.{sc.SEARCH[0]}"
            end = time.monotonic() + 60
            while True:
                r = dnsq.ask(port, first, 1, timeout=0.3, src=sc.POD_IP)
                if r and r[1] == 0 and r[3]:
                    break
                if time.monotonic() > end or p.poll() is not None:
                    raise RuntimeError(f"{server}: autopath never answered {first} from "
                                       f"{sc.POD_IP} (last: {r}): {last_log_line(ctx, server, tag)}")
                time.sleep(0.2)
        warm = walk(sc, port, 2, kinds, any_answer=ceiling)  # warm: caches, connections upstream
        # What the server burns with no queries (timers, the API watch), per
        # second: at 1,500 lookups/s it is spread over few lookups, so the
        # per-lookup figure is also given without it.
        time.sleep(0.5)
        i0, t_i0 = sum(cpu_split(p.pid)), time.monotonic()
        time.sleep(IDLE_S)
        i1, t_i1 = sum(cpu_split(p.pid)), time.monotonic()
        idle_us_per_s = (i1 - i0) * 1e6 / CLK_TCK / (t_i1 - t_i0)
        u0, k0 = cpu_split(p.pid)
        w = walk(sc, port, ctx.fixed_dur, kinds, start=warm.get("started") or 0, any_answer=ceiling)
        u1, k1 = cpu_split(p.pid)
        rss = rss_mib(p.pid)
        if p.poll() is not None:
            raise RuntimeError(f"{server} died during the run: {last_log_line(ctx, server, tag)}")
    finally:
        stop(p)
    done, queries = w.get("done") or 0, w.get("queries") or 0
    ticks = (u1 + k1) - (u0 + k0)
    cpu_us = ticks * 1e6 / CLK_TCK
    net_us = cpu_us - idle_us_per_s * (w.get("elapsed_s") or 0)
    r = {"load1": load, "lookups_per_s": w.get("lookups_per_s"),
         "queries_per_lookup": w.get("queries_per_lookup"),
         "cpu_us_per_lookup": cpu_us / done if done else None,
         "idle_cpu_us_per_s": idle_us_per_s,
         "cpu_us_per_lookup_less_idle": net_us / done if done else None,
         "cpu_us_per_query": cpu_us / queries if queries else None,
         "sys_us_per_lookup": (k1 - k0) * 1e6 / CLK_TCK / done if done else None,
         "p50_us": w.get("p50_us"), "p99_us": w.get("p99_us"), "rss_mib": rss,
         "cpu_ticks": ticks, "walk": w}
    by_kind = ", ".join(f"{k} {fmt(v['queries_per_lookup'], 2)}" for k, v in w["per_kind"].items())
    log(f"  {variant}/{server}: {fmt(r['lookups_per_s'], 0)} lookups/s (offered {sc.offered}), "
        f"{fmt(r['queries_per_lookup'], 2)} queries/lookup ({by_kind}), "
        f"{fmt(r['cpu_us_per_lookup'], 1)} us CPU/lookup "
        f"({fmt(r['cpu_us_per_lookup_less_idle'], 1)} less {fmt(idle_us_per_s / 1000, 2)} ms/s idle), "
        f"p50 {fmt(r['p50_us'], 0)} us, "
        f"RSS {fmt(rss, 1)} MiB; {w['answered']}/{w['done']} answered right, {w['wrong']} wrong, "
        f"{w['unanswered']} unanswered, {w['lost']} lost, {w['late_starts']} started late")
    return r


def measure_autopath(ctx: Ctx, servers: list[str], api: k8s.Api) -> list[dict]:
    """The autopath scenario: each server with and without autopath, per lookup."""
    log("== scenario autopath")
    sc = Autopath(ctx)
    sc.prepare()
    k8s.ensure_client_pod(api, sc.POD_NS, sc.POD_NAME, sc.POD_IP)
    rows: list[dict] = []
    up = start_upstream(ctx)
    try:
        for variant, autopath, kinds in sc.VARIANTS:
            if ctx.autopath_rows and variant not in ctx.autopath_rows:
                continue
            # The kernel's floor: the fixed-answer responder on the server's
            # CPU, given the external rows' rate of single queries (it answers
            # the first search name, so each lookup is one query, as with
            # autopath): one wake-up, one receive, one send, no user-space work.
            with_ceiling = variant == "autopath-external" and not availability(ctx, "ceiling", None)
            for s in servers + (["ceiling"] if with_ceiling else []):
                if sc.compact(variant) and s != "clusterdns":
                    rows.append(skipped(variant, s, "no compact Pod index: see its "
                                        f"{variant.removesuffix('-compact')} row (pods verified)"))
                    continue
                runs, err = [], None
                for _ in range(ctx.runs):
                    try:
                        runs.append(measure_walk_once(ctx, sc, s, variant, autopath, kinds))
                    except RuntimeError as e:
                        err = str(e)
                        log(f"  {variant}/{s}: failed: {e}")
                        break
                if not runs:
                    rows.append(row(variant, s, status="failed", reason=err))
                    continue
                agg = {k: median([r[k] for r in runs]) for k in
                       ("lookups_per_s", "queries_per_lookup", "cpu_us_per_lookup",
                        "cpu_us_per_query", "sys_us_per_lookup", "p50_us", "p99_us", "rss_mib",
                        "idle_cpu_us_per_s", "cpu_us_per_lookup_less_idle")}
                last = runs[-1]["walk"]
                bad = sum(r["walk"]["wrong"] + r["walk"]["unanswered"] + r["walk"]["lost"]
                          for r in runs)
                # Wrong or unanswered lookups fail the row; lost ones (a busy
                # machine) are only counted in the note.
                wrong = sum(r["walk"]["wrong"] + r["walk"]["unanswered"] for r in runs)
                by_kind = ", ".join(f"{k} {fmt(v['queries_per_lookup'], 2)}"
                                   for k, v in last["per_kind"].items())
                note = (f"{fmt(agg['lookups_per_s'], 0)} lookups/s at {sc.offered}/s offered, "
                        f"{fmt(agg['queries_per_lookup'], 2)} queries/lookup ({by_kind}), "
                        f"{fmt(agg['cpu_us_per_lookup'], 1)} µs CPU/lookup "
                        f"({fmt(agg['cpu_us_per_lookup_less_idle'], 1)} less the idle "
                        f"{fmt(agg['idle_cpu_us_per_s'] / 1000, 2)} ms CPU/s); p50/p99 per lookup")
                if bad:
                    note += (f"; {bad} lookups not answered right (e.g. "
                             f"{'; '.join(last['wrong_examples'][:2]) or 'lost/unanswered'})")
                if err:
                    note += f"; {err}"
                rows.append(row(variant, s, offered_lookups=sc.offered, runs=len(runs),
                                per_run=runs, per_kind=last["per_kind"], lookups_bad=bad,
                                status="failed" if wrong else "ok", reason=note,
                                load1=[r["load1"] for r in runs], **agg))
    finally:
        stop(up)
    for variant, *_ in sc.VARIANTS:
        if ctx.autopath_rows and variant not in ctx.autopath_rows:
            continue
        rows.append(skipped(variant, "unbound", "not applicable: no Pod index, no autopath"))
        if variant == "autopath-external" and availability(ctx, "ceiling", None):
            rows.append(skipped(variant, "ceiling", availability(ctx, "ceiling", None)))
    return rows


# --------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------

RATIO_KEYS = ("qps", "cpu_us_per_query", "p50_us", "p99_us", "rss_mib")
LOOKUP_KEYS = ("lookups_per_s", "queries_per_lookup", "cpu_us_per_lookup",
               "cpu_us_per_lookup_less_idle", "p50_us", "p99_us", "rss_mib")


def ratios(rows: list[dict]) -> list[dict]:
    out = []
    by = {(r["scenario"], r["server"]): r for r in rows if r.get("kind") == "result"}
    for sc in dict.fromkeys(r["scenario"] for r in rows):
        mine = by.get((sc, "clusterdns"))
        for other in ("coredns", "unbound", "ceiling"):
            theirs = by.get((sc, other))
            entry = {"kind": "ratio", "scenario": sc, "server": f"clusterdns/{other}"}
            for k in RATIO_KEYS:
                a = mine.get(k) if mine else None
                b = theirs.get(k) if theirs else None
                entry[k] = a / b if (a is not None and b) else None
            out.append(entry)
    def ratio(label: str, sc: str, a: dict | None, b: dict | None, keys: tuple, **extra) -> None:
        if a and b:
            entry = {"kind": "ratio", "scenario": sc, "server": label, **extra}
            for k in keys:
                x, y = a.get(k), b.get(k)
                entry[k] = x / y if (x is not None and y) else None
            out.append(entry)

    # Per lookup (autopath): clusterdns against CoreDNS, and each server with
    # autopath against itself without.
    for on in ("autopath", "autopath-external", "autopath-external-new"):
        off = f"{on}-off"
        for sc in (on, off):
            ratio("clusterdns/coredns", sc, by.get((sc, "clusterdns")), by.get((sc, "coredns")),
                  LOOKUP_KEYS, per_lookup=True)
        for srv in ("clusterdns", "coredns"):
            ratio(f"{srv} autopath/off", on, by.get((on, srv)), by.get((off, srv)), LOOKUP_KEYS,
                  per_lookup=True)
        ratio("clusterdns/ceiling", on, by.get((on, "clusterdns")), by.get((on, "ceiling")),
              LOOKUP_KEYS, per_lookup=True)
        ratio("clusterdns autopath/coredns off", on, by.get((on, "clusterdns")),
              by.get((off, "coredns")), LOOKUP_KEYS, per_lookup=True)
        # client_index compact against CoreDNS's autopath on pods verified,
        # and against clusterdns's own on pods verified.
        ratio("clusterdns compact/coredns autopath", f"{on}-compact",
              by.get((f"{on}-compact", "clusterdns")), by.get((on, "coredns")), LOOKUP_KEYS,
              per_lookup=True)
        ratio("clusterdns compact/verified", f"{on}-compact", by.get((f"{on}-compact", "clusterdns")),
              by.get((on, "clusterdns")), LOOKUP_KEYS, per_lookup=True)
    # The rewrite path against the same answers without it, per server.
    for srv in ("clusterdns", "coredns"):
        ratio(f"{srv} rewrite/hosts", "rewrite", by.get(("rewrite", srv)), by.get(("hosts", srv)),
              RATIO_KEYS)
    return out


def markdown(rows: list[dict], rats: list[dict]) -> str:
    lines = ["| scenario | server | max q/s | CPU µs/query @ offered | p50 µs | p99 µs | RSS MiB | note |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        note = ""
        if r["status"] != "ok":
            note = f"{r['status']}: {r.get('reason') or ''}"
        else:
            bits = []
            if r.get("offered_qps"):
                bits.append(f"offered {r['offered_qps']:,}/s, got {fmt(r.get('fixed_qps'), 0)}/s")
            if r.get("sys_us_per_query") is not None:
                bits.append(f"kernel {fmt(r['sys_us_per_query'], 2)} µs/query")
            if r.get("fixed_lost_pct") is not None:
                bits.append(f"lost {r['fixed_lost_pct']:.2f}% / max {fmt(r.get('max_lost_pct'), 2)}%")
            if r.get("startup_ms") is not None or r.get("first_answer_ms") is not None:
                bits.append(f"ready {fmt(r.get('startup_ms'), 0)} ms, last Service answered "
                            f"{fmt(r.get('first_answer_ms'), 0)} ms")
            if r.get("p50_ms") is not None:
                bits.append(f"propagation over {r.get('changes')} changes")
            if r.get("reason"):
                bits.append(str(r["reason"]))
            note = "; ".join(bits)
        note = note.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r['scenario']} | {r['server']} | {fmt(r.get('qps'), 0)} | "
                     f"{fmt(r.get('cpu_us_per_query'), 2)} | {fmt(r.get('p50_us'), 0)} | "
                     f"{fmt(r.get('p99_us'), 0)} | {fmt(r.get('rss_mib'), 1)} | {note} |")
    walks = [r for r in rows if r.get("queries_per_lookup") is not None]
    if walks:
        lines += ["", "| scenario | server | lookups/s | queries/lookup | CPU µs/lookup | "
                  "less idle | p50 µs/lookup | p99 µs/lookup | RSS MiB |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in walks:
            lines.append(f"| {r['scenario']} | {r['server']} | {fmt(r['lookups_per_s'], 0)} | "
                         f"{fmt(r['queries_per_lookup'], 2)} | {fmt(r['cpu_us_per_lookup'], 1)} | "
                         f"{fmt(r.get('cpu_us_per_lookup_less_idle'), 1)} | "
                         f"{fmt(r.get('p50_us'), 0)} | {fmt(r.get('p99_us'), 0)} | "
                         f"{fmt(r.get('rss_mib'), 1)} |")
    def ratio_table(heads: list[str], keys: tuple, entries: list[dict]) -> None:
        if entries:
            lines.extend(["", "| scenario | ratio | " + " | ".join(heads) + " |",
                          "|---|---|" + "---:|" * len(heads)])
            for x in entries:
                lines.append(f"| {x['scenario']} | {x['server']} | " +
                             " | ".join(fmt(x[k], 2) for k in keys) + " |")

    ratio_table(["lookups/s", "queries/lookup", "CPU/lookup", "less idle", "p50", "p99", "RSS"],
                LOOKUP_KEYS,
                [x for x in rats if x.get("per_lookup")
                 and any(x[k] is not None for k in LOOKUP_KEYS)])
    ratio_table(["max q/s", "CPU/query", "p50", "p99", "RSS"], RATIO_KEYS,
                [x for x in rats if not x.get("per_lookup")
                 and any(x[k] is not None for k in RATIO_KEYS)])
    return "\n".join(lines)


def dnsperf_version() -> str | None:
    try:
        out = subprocess.run(["dnsperf", "-h"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in (out.stdout + out.stderr).splitlines():
        if line.startswith("Version"):
            return "dnsperf " + line.split()[-1]
    return None


def machine() -> dict:
    model = ""
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    def ver(args):
        try:
            return subprocess.run(args, capture_output=True, text=True, timeout=10).stdout.splitlines()[0].strip()
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return None
    return {"date": utc_now(), "nproc": os.cpu_count(), "cpu_model": model,
            "kernel": os.uname().release, "load_at_start": load_avg(),
            "clusterdns": ver([CLUSTERDNS, "-version"]), "coredns": ver([COREDNS, "-version"]),
            "unbound": ver([UNBOUND, "-V"]), "dnsperf": dnsperf_version(), **provenance()}


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


# What a run's command needs beside its arguments to be repeated.
RUN_ENV = ("CLUSTERDNS_BIN", "COREDNS_BIN", "CEILING_SRC", "NODECACHE_SERVERS", "NODECACHE_ATTACH",
           "NODECACHE_ATTACH_KIND")


def provenance() -> dict:
    """Where the figures come from, for meta.json (scripts/bench.d/report.py heads each
    table with it): the checkout's commit and whether it had uncommitted changes, the
    clusterdns binary and the commit it was built from when known (the commit its
    -version names when its build set CLUSTERDNS_COMMIT; the checkout's when scripts/bench
    built it for this run), the command as typed (scripts/bench passes it in
    BENCH_COMMAND, with --build, which bench.py never sees), sys.argv, and RUN_ENV."""
    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    built = None
    try:
        out = subprocess.run([CLUSTERDNS, "-version"], capture_output=True, text=True,
                             timeout=10).stdout.splitlines()
        # "clusterdns-X.Y.Z" then "OS/ARCH, rustc, COMMIT" (COMMIT empty unless set at build).
        if len(out) > 1 and "," in out[1]:
            built = out[1].rsplit(",", 1)[1].strip() or None
    except (OSError, subprocess.TimeoutExpired):
        pass
    if built is None and os.environ.get("BENCH_BUILT") == "1" and commit:
        built = commit + ("+uncommitted" if status else "")
    try:
        mtime = datetime.datetime.fromtimestamp(os.stat(CLUSTERDNS).st_mtime, datetime.timezone.utc)
        bin_date = mtime.strftime("%Y-%m-%d %H:%M UTC")
    except OSError:
        bin_date = None
    return {"commit": commit, "uncommitted_changes": bool(status) if status is not None else None,
            "clusterdns_bin": CLUSTERDNS, "clusterdns_bin_date": bin_date,
            "clusterdns_commit": built,
            "command": os.environ.get("BENCH_COMMAND") or shlex.join(["scripts/bench", *sys.argv[1:]]),
            "argv": sys.argv, "env": {k: os.environ[k] for k in RUN_ENV if os.environ.get(k)}}


def main() -> int:
    ap = argparse.ArgumentParser(prog="scripts/bench")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--scenario", action="append", choices=ALL_SCENARIOS)
    ap.add_argument("--runs", type=int)
    ap.add_argument("--duration", type=int, help="seconds per dnsperf phase")
    ap.add_argument("--pods", type=int,
                    help="memory-pods: the large point (default 100000; 20000 with --quick)")
    ap.add_argument("--autopath-rows", default="",
                    help="autopath: only these rows (comma list, e.g. autopath-external)")
    args = ap.parse_args()
    if args.pods is not None and not 10000 <= args.pods <= 120000:
        ap.error("--pods must be within 10000..120000")
    ctx = Ctx(args.quick, args.runs, args.duration, args.pods)
    ctx.autopath_rows = {r for r in args.autopath_rows.split(",") if r}
    chosen = args.scenario or ALL_SCENARIOS
    started = time.time()
    meta = machine()
    meta["quick"] = ctx.quick
    meta["runs"] = ctx.runs
    meta["phase_s"] = ctx.fixed_dur  # each dnsperf phase, and autopath's walk
    log(f"machine: {meta['nproc']} CPUs, {meta['cpu_model']}, kernel {meta['kernel']}, "
        f"load {meta['load_at_start']}")
    rows: list[dict] = []
    rig = None

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    try:
        for name in [n for n in chosen if n in DNSPERF_SCENARIOS and n not in K8S_SCENARIOS]:
            rows += run_dnsperf_scenario(ctx, name)
        if "node-cache" in chosen:
            rows += nodecache.run(ctx, sys.modules[__name__])
        k8s_chosen = [n for n in chosen if n in K8S_SCENARIOS]
        if k8s_chosen:
            log("== kubernetes scenarios: " + ", ".join(k8s_chosen))
            try:
                rig = Rig(ctx)
                rig.up()
                ctx.kubeconfig = rig.kubeconfig
                api = k8s.Api(rig.kubeconfig)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
                ctx.k8s_ok_reason = f"no rig: {e}"
                api = None
            servers, _, why = k8s_servers(ctx)
            for s, w in why.items():
                log(f"  kubernetes/{s}: unusable: {w}")
            if api is not None and servers:
                secs = k8s.load(api, 0, 1000)
                log(f"loaded 1000 Services + EndpointSlices in {secs:.1f}s")
            if "memory" in k8s_chosen:
                if api is not None and servers:
                    rows += measure_memory(ctx, servers, "1k-svc", 999)
            if api is not None and servers:
                secs = k8s.load(api, 1000, 10000)
                log(f"loaded 9000 more Services + EndpointSlices in {secs:.1f}s")
            if "memory" in k8s_chosen:
                if api is not None and servers:
                    rows += measure_memory(ctx, servers, "10k-svc", 9999)
                for s, w in why.items():
                    rows.append(skipped("memory-1k-svc", s, w))
                    rows.append(skipped("memory-10k-svc", s, w))
            if "startup" in k8s_chosen:
                if api is not None and servers:
                    rows += measure_startup(ctx, servers, 9999)
                for s, w in why.items():
                    rows.append(skipped("startup", s, w))
            for name in ("cluster", "search-path"):
                if name in k8s_chosen:
                    rows += run_dnsperf_scenario(ctx, name)
            if "autopath" in k8s_chosen:
                if api is not None and servers:
                    rows += measure_autopath(ctx, servers, api)
                for s, w in why.items():
                    for variant, *_ in Autopath.VARIANTS:
                        rows.append(skipped(variant, s, w))
            if "propagation" in k8s_chosen:
                if api is not None and servers:
                    rows += measure_propagation(ctx, servers, api)
                for s, w in why.items():
                    rows.append(skipped("propagation", s, w))
            have = 0  # Pods loaded
            plain = "memory-pods" in k8s_chosen
            # The variants measured at the large point only.
            large = [m for m in ("autopath", "compact") if f"memory-pods-{m}" in k8s_chosen]
            if plain or large:
                # Late: 100k Pods weigh on the API server and etcd.
                for n in sorted({10000, ctx.pods}):
                    if not plain and n != ctx.pods:
                        continue
                    labels = ([f"memory-10k-svc-{n // 1000}k-pods"] if plain else []) + (
                        [f"memory-10k-svc-{n // 1000}k-pods-{m}" for m in large]
                        if n == ctx.pods else [])
                    if api is None or not servers:
                        for s, w in why.items():
                            rows += [skipped(label, s, w) for label in labels]
                        continue
                    log(f"loading Pods {have}..{n} (create + pods/status patch)")
                    try:
                        secs = k8s.load_pods(api, have, n)
                    except (RuntimeError, OSError) as e:
                        for s in servers:
                            rows += [row(label, s, status="failed", reason=str(e))
                                     for label in labels]
                        log(f"  {', '.join(labels)}: loading Pods failed: {e}")
                        break
                    log(f"loaded {n - have} Pods in {secs:.1f}s ({(n - have) / secs:.0f}/s)")
                    if plain:
                        rows += measure_memory_pods(ctx, servers, n, (n - have) / secs)
                    if n == ctx.pods:
                        if "compact" in large:
                            # After the N Pods: see WALK_POD.
                            k8s.ensure_client_pod(api, WALK_NS, WALK_POD, WALK_IP)
                        for m in large:
                            rows += measure_memory_pods(ctx, servers, n, (n - have) / secs, mode=m)
                    have = n
                    for s, w in why.items():
                        rows += [skipped(label, s, w) for label in labels]
            if "churn" in k8s_chosen:
                # Last: it rewrites slices (restored at its end) under the 10k
                # Services and the memory-pods scenario's Pods.
                if api is not None and servers:
                    if have < ctx.pods:
                        log(f"loading Pods {have}..{ctx.pods} for churn")
                        secs = k8s.load_pods(api, have, ctx.pods)
                        log(f"loaded {ctx.pods - have} Pods in {secs:.1f}s")
                    rows += churn.run(ctx, sys.modules[__name__], api, servers)
                for s, w in why.items():
                    rows.append(skipped("churn", s, w))
    except KeyboardInterrupt:
        log("interrupted: stopping every server started")
        stop_all()
        if rig is not None and rig.up_done:
            rig.down()
        return 130
    finally:
        stop_all()
        if rig is not None and rig.up_done:
            rig.down()
    order = {sc: i for i, sc in enumerate(dict.fromkeys(r["scenario"] for r in rows))}
    rows.sort(key=lambda r: (order[r["scenario"]], SERVERS.index(r["server"])))
    rats = ratios(rows)
    meta["load_at_end"] = load_avg()
    meta["finished"] = utc_now()
    # target/bench/report.json is the last run's; runs/DATE/ keeps each run for
    # `scripts/bench --report target/bench/runs/*` (the newest row of each wins).
    kept = os.path.join(OUT, "runs", time.strftime("%Y%m%d-%H%M%S", time.gmtime(started)))
    os.makedirs(kept, exist_ok=True)
    for d in (OUT, kept):
        with open(os.path.join(d, "report.json"), "w", encoding="utf-8") as f:
            json.dump(rows + rats, f, indent=1)
        with open(os.path.join(d, "meta.json"), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)
    md = markdown(rows, rats)
    with open(os.path.join(OUT, "report.md"), "w", encoding="utf-8") as f:
        f.write(f"{meta['date']}, {meta['nproc']} CPUs ({meta['cpu_model']}), load at start "
                f"{meta['load_at_start']}, at end {meta['load_at_end']}; runs {ctx.runs}"
                f"{' (--quick)' if ctx.quick else ''}\n\n{md}\n")
    print(md)
    log(f"wrote {os.path.join(OUT, 'report.json')} and report.md (kept in {kept}); "
        "scripts/bench --report puts them in BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
