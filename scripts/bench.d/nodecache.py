"""The node-cache scenario (scripts/bench --scenario node-cache): a node, a
pod and a cluster DNS in network namespaces the run creates (as
bin/clusterdns/tests/node_cache.rs and shared/reference/nodelocal-netns-lab.md
build them), dnsperf in the pod asking the link-local address through the
interception path, the node-local server under test in the node namespace
pinned to CPU 1, the cluster DNS (a clusterdns `serve`) and dnsperf on CPU 0.

Two rows per server, in the same run:
  node-cache-hit   names the cluster DNS answers, warmed into the cache first;
  node-cache-miss  unique cluster.local names, each one forwarded over TCP to
                   the cluster DNS through kube-proxy-style DNAT (the
                   template's `forward . __PILLAR__CLUSTER__DNS__ { force_tcp }`).

Servers: clusterdns runs as the real agent (`clusterdns node-cache`: it makes
the interface and its crash-safe interception itself, from the node-cache
template and a kube-dns ConfigMap); CoreDNS runs the Corefile that agent
rendered, byte for byte, and Unbound an equivalent configuration, both behind
upstream's iptables NOTRACK rules and an interface the run makes for them.
The fixed-answer responder (the ceiling; hit row only: it has no misses) binds
the link-local address in the node namespace behind the crash-safe table the
agent installed, captured with `nft list table` while the agent served and
loaded again for it, so its packets take the agent's path exactly.
Needs root (network namespaces); every namespace is deleted at the end."""

import os
import signal
import subprocess
import time

B = None  # the bench module (bench.py runs as __main__), set by run()
CEILING_ADDR = ""  # the ceiling built to bind an address (scripts/bench), set by run()

LOCAL = "169.254.20.10"
CLUSTER = "10.96.0.10"
UPSTREAM_SVC = "10.96.0.11"
CDNS = "10.244.1.2"
SERVICES = 1000
# What the fixed-answer responder answers to every query.
CEILING_ANSWER = "10.96.0.1"

TEMPLATE = """cluster.local:53 {
    errors
    cache {
        success 9984 30
        denial 9984 5
    }
    reload
    loop
    bind 169.254.20.10 10.96.0.10
    forward . __PILLAR__CLUSTER__DNS__ {
        force_tcp
    }
    prometheus :9253
    health 169.254.20.10:8080
}
in-addr.arpa:53 {
    errors
    cache 30
    reload
    loop
    bind 169.254.20.10 10.96.0.10
    forward . __PILLAR__CLUSTER__DNS__ {
        force_tcp
    }
    prometheus :9253
}
.:53 {
    errors
    cache 30
    reload
    loop
    bind 169.254.20.10 10.96.0.10
    forward . __PILLAR__UPSTREAM__SERVERS__
    prometheus :9253
}
"""

UNBOUND = """server:
    interface: 169.254.20.10
    interface: 10.96.0.10
    port: 53
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
    access-control: 10.244.0.0/16 allow
    module-config: "iterator"
    qname-minimisation: no
    do-not-query-localhost: no
    num-queries-per-thread: 4096
    outgoing-range: 8192
    minimal-responses: yes
    rrset-roundrobin: no
    prefetch: no
    msg-cache-size: 64m
    rrset-cache-size: 64m
forward-zone:
    name: "cluster.local."
    forward-addr: 10.96.0.11
    forward-tcp-upstream: yes
forward-zone:
    name: "."
    forward-addr: 10.244.1.2
"""


def sh(cmd: str, check: bool = True) -> str:
    r = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{cmd}: {r.stdout}{r.stderr}")
    return r.stdout + r.stderr


class Lab:
    """pod --veth-- node (kube-proxy DNAT of both Services) --veth-- cdns."""

    def __init__(self, ctx):
        tag = f"bnc{os.getpid()}"
        self.pod, self.node, self.cdns = f"{tag}p", f"{tag}n", f"{tag}c"
        self.dir = os.path.join(ctx.work, "node-cache")
        os.makedirs(self.dir, exist_ok=True)
        self.made = False
        # `nft list table` of the agent's crash-safe table, taken while it
        # served (its teardown deletes it), for the ceiling to run behind.
        self.crashsafe: str | None = None

    def up(self) -> None:
        p, n, c = self.pod, self.node, self.cdns
        sh(f"ip netns add {p} && ip netns add {n} && ip netns add {c}")
        self.made = True
        sh(f"ip -n {n} link add vpod type veth peer name eth0 netns {p} && "
           f"ip -n {n} link add vcdns type veth peer name eth0 netns {c} && "
           f"ip -n {n} addr add 10.244.0.1/24 dev vpod && ip -n {n} addr add 10.244.1.1/24 dev vcdns && "
           f"ip -n {n} link set vpod up && ip -n {n} link set vcdns up && ip -n {n} link set lo up && "
           f"ip -n {p} addr add 10.244.0.2/24 dev eth0 && ip -n {p} link set eth0 up && ip -n {p} link set lo up && "
           f"ip -n {p} route add default via 10.244.0.1 && "
           f"ip -n {c} addr add {CDNS}/24 dev eth0 && ip -n {c} link set eth0 up && ip -n {c} link set lo up && "
           f"ip -n {c} route add default via 10.244.1.1 && ip -n {n} route add default via {CDNS} && "
           f"ip netns exec {n} sysctl -qw net.ipv4.ip_forward=1")
        for svc in (CLUSTER, UPSTREAM_SVC):
            for proto in ("udp", "tcp"):
                for chain in ("PREROUTING", "OUTPUT"):
                    sh(f"ip netns exec {n} iptables-nft -w 5 -t nat -A {chain} -d {svc}/32 -p {proto} "
                       f"--dport 53 -j DNAT --to-destination {CDNS}:53")

    def down(self) -> None:
        if self.made:
            for ns in (self.pod, self.node, self.cdns):
                sh(f"ip netns del {ns}", check=False)
            self.made = False

    def dig(self, name: str) -> str:
        return sh(f"ip netns exec {self.pod} dig +short +time=1 +tries=1 @{LOCAL} {name}",
                  check=False).strip()

    def wait_answer(self, name: str, want: str, p, secs: float = 30) -> str | None:
        end = time.monotonic() + secs
        got = ""
        while time.monotonic() < end:
            if p is not None and p.poll() is not None:
                return f"exited with status {p.returncode}"
            got = self.dig(name)
            if got == want:
                return None
            time.sleep(0.1)
        return f"{name} @{LOCAL}: {got!r}, not {want}"

    def capture_crashsafe(self) -> None:
        self.crashsafe = sh(f"ip netns exec {self.node} nft list table ip clusterdns_nodecache")

    def interface(self, on: bool, crashsafe: bool = False) -> None:
        """The interface and upstream's NOTRACK rules (or, with CRASHSAFE,
        the agent's own table as captured), for the servers that are not
        the agent (which makes its own)."""
        n = self.node
        if not on:
            sh(f"ip -n {n} link del nodelocaldns", check=False)
            sh(f"ip netns exec {n} iptables-nft -w 5 -t raw -F PREROUTING", check=False)
            sh(f"ip netns exec {n} iptables-nft -w 5 -t raw -F OUTPUT", check=False)
            sh(f"ip netns exec {n} nft delete table ip clusterdns_nodecache", check=False)
            return
        if crashsafe and not self.crashsafe:
            raise RuntimeError("no crash-safe table captured from clusterdns node-cache")
        # No dummy driver on these kernels: an empty bridge, as the agent does.
        sh(f"ip -n {n} link add nodelocaldns type bridge")
        for ip in (LOCAL, CLUSTER):
            sh(f"ip -n {n} addr add {ip}/32 dev nodelocaldns")
        if crashsafe:
            table = B.write(os.path.join(self.dir, "crashsafe.nft"), self.crashsafe)
            sh(f"ip netns exec {n} nft -f {table}")
            return
        for ip in (LOCAL, CLUSTER):
            for proto in ("udp", "tcp"):
                for rule in (f"PREROUTING -p {proto} -d {ip} --dport 53",
                             f"OUTPUT -p {proto} -s {ip} --sport 53",
                             f"OUTPUT -p {proto} -d {ip} --dport 53"):
                    sh(f"ip netns exec {n} iptables-nft -w 5 -t raw -I {rule} -j NOTRACK")


def dnsperf_pod(lab: Lab, qfile: str, duration: int, qps: int | None = None,
                verbose: bool = False, passes: int | None = None) -> dict:
    return B.dnsperf(53, qfile, duration, qps=qps, verbose=verbose, passes=passes,
                     server=LOCAL, netns=lab.pod)


def start(ctx, lab: Lab, server: str, rendered: str | None):
    logp = os.path.join(lab.dir, f"{server}.log")
    pin = ["ip", "netns", "exec", lab.node, "taskset", "-c", B.SERVER_CPU]
    if server == "clusterdns":
        # The template in a directory of its own, as the DaemonSet's ConfigMap
        # mount (/etc/coredns) is: the agent polls that directory, and the
        # query files beside the Corefile would otherwise be read with it.
        conf_dir = os.path.join(lab.dir, "config")
        os.makedirs(conf_dir, exist_ok=True)
        base = B.write(os.path.join(conf_dir, "Corefile.base"), TEMPLATE)
        cm = os.path.join(lab.dir, "kube-dns")
        os.makedirs(cm, exist_ok=True)
        B.write(os.path.join(cm, "upstreamNameservers"), f'["{CDNS}"]')
        env = dict(os.environ, KUBE_DNS_UPSTREAM_SERVICE_HOST=UPSTREAM_SVC)
        return B.spawn(pin + [B.CLUSTERDNS, "node-cache", "-localip", f"{LOCAL},{CLUSTER}",
                              "-basecorefile", base, "-conf", os.path.join(lab.dir, "Corefile"),
                              "-kubednscm", cm, "-upstreamsvc", "kube-dns-upstream",
                              "-handover-socket", "", "-metrics-listen-address",
                              "127.0.0.1:9353", "-quiet"], logp, env=env)
    if server == "coredns":
        cf = B.write(os.path.join(lab.dir, "Corefile.coredns"), rendered or "")
        return B.spawn(pin + [B.COREDNS, "-conf", cf, "-quiet"], logp)
    if server == "unbound":
        conf = B.write(os.path.join(lab.dir, "unbound.conf"), UNBOUND.format(dir=lab.dir))
        return B.spawn(pin + [B.UNBOUND, "-d", "-c", conf], logp)
    if server == "ceiling":
        # UDP on the link-local address only: the one dnsperf asks.
        return B.spawn(pin + [CEILING_ADDR, "53", LOCAL], logp)
    raise ValueError(server)


def measure(ctx, lab: Lab, server: str, files: dict, rendered: str | None,
            run: int) -> dict:
    """Both rows' figures for one server, one run."""
    if server != "clusterdns":
        lab.interface(True, crashsafe=server == "ceiling")
    p = start(ctx, lab, server, rendered)
    try:
        want = CEILING_ANSWER if server == "ceiling" else "10.0.0.1"
        why = lab.wait_answer("svc0.default.svc.cluster.local", want, p)
        if why:
            raise RuntimeError(f"{server} not serving: {why}: {B.last_log_line(ctx, os.path.join('node-cache', server))}")
        if server == "clusterdns":
            lab.capture_crashsafe()
        out = {}
        idle = B.rss_mib(p.pid)
        # Hits: warm every name, then measure.
        dnsperf_pod(lab, files["hit"], 30, qps=20000, passes=1)
        out["hit"] = phase(ctx, lab, p, files["hit"], files["hit"], 20000, "hit", server)
        if server == "ceiling":
            return out
        # Misses: every name unique (this run's own files).
        out["miss"] = phase(ctx, lab, p, files[f"miss-fixed-{run}-{server}"],
                            files[f"miss-max-{run}-{server}"], 3000, "miss", server)
        for kind in out:
            out[kind]["idle_rss_mib"] = idle
        if p.poll() is not None:
            raise RuntimeError(f"{server} died during the run")
    finally:
        B.stop(p)
        if server != "clusterdns":
            lab.interface(False)
    return out


def ctxt_switches(pid: int) -> int:
    """Voluntary plus involuntary context switches of every thread of PID
    (wakeups: each time a thread slept and was woken, or was preempted)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                        total += int(line.split()[1])
        except OSError:
            pass  # a thread that ended meanwhile
    return total


def attach(kind: str, server: str, pid: int):
    """NODECACHE_ATTACH (a command with {pid}, {kind}, {server}; e.g.
    `strace -c -f -o /tmp/sc-{server}-{kind}.txt -p {pid}` or `perf stat -e
    context-switches,raw_syscalls:sys_enter -o /tmp/ps-{server}-{kind}.txt -p {pid}`)
    attached to the server under test for the fixed-rate phase of
    NODECACHE_ATTACH_KIND (default miss), stopped with SIGINT after it: the
    attribution runs in BENCHMARKS.md at commit b22f0be. Its overhead skews that
    run's CPU."""
    cmd = os.environ.get("NODECACHE_ATTACH")
    if not cmd or kind != os.environ.get("NODECACHE_ATTACH_KIND", "miss"):
        return None
    a = subprocess.Popen(cmd.format(pid=pid, kind=kind, server=server), shell=True,
                         start_new_session=True)
    time.sleep(1.0)  # let it attach before the measured queries start
    return a


def detach(a) -> None:
    if a is None:
        return
    os.killpg(a.pid, signal.SIGINT)
    try:
        a.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(a.pid, signal.SIGKILL)
        a.wait(5)


def phase(ctx, lab: Lab, p, fixed_file: str, max_file: str, offered: int,
          kind: str = "", server: str = "") -> dict:
    a = attach(kind, server, p.pid)
    c0 = ctxt_switches(p.pid)
    u0, k0 = B.cpu_split(p.pid)
    fixed = dnsperf_pod(lab, fixed_file, ctx.fixed_dur, qps=offered, verbose=True)
    u1, k1 = B.cpu_split(p.pid)
    c1 = ctxt_switches(p.pid)
    detach(a)
    mx = dnsperf_pod(lab, max_file, ctx.max_dur)
    rss = B.rss_mib(p.pid)
    entries = cache_entries(lab)
    done = fixed.get("completed") or 0
    t = (u1 + k1) - (u0 + k0)
    return {"qps": mx.get("qps"), "offered_qps": offered,
            "cpu_us_per_query": t * 1e6 / B.CLK_TCK / done if done else None,
            "sys_us_per_query": (k1 - k0) * 1e6 / B.CLK_TCK / done if done else None,
            "ctxt_per_query": (c1 - c0) / done if done else None,
            "p50_us": fixed.get("p50_us"), "p99_us": fixed.get("p99_us"), "rss_mib": rss,
            "fixed_qps": fixed.get("qps"), "fixed_lost_pct": fixed.get("lost_pct"),
            "max_lost_pct": mx.get("lost_pct"), "fixed_rcodes": fixed.get("rcodes"),
            "fixed_cmd": fixed["cmd"], "max_cmd": mx["cmd"], "cache_entries": entries}


def cache_entries(lab: Lab) -> int | None:
    """The entries in every cache of the server under test, from the
    template's `prometheus :9253` (coredns_cache_entries, success and
    denial of every block); None for a server without it (Unbound)."""
    text = sh(f"ip netns exec {lab.node} curl -s --max-time 2 http://127.0.0.1:9253/metrics",
              check=False)
    total = None
    for line in text.splitlines():
        if line.startswith("coredns_cache_entries{"):
            try:
                total = (total or 0) + int(float(line.rsplit(None, 1)[1]))
            except (ValueError, IndexError):
                pass
    return total


def note(agg: dict, reason: str | None) -> str:
    """The row's note: RSS right after start-up and the cache's entries."""
    bits = [f"RSS at start {B.fmt(agg.get('idle_rss_mib'), 1)} MiB"]
    if agg.get("cache_entries") is not None:
        bits.append(f"{agg['cache_entries']:,.0f} cache entries")
    if reason:
        bits.append(reason)
    return "; ".join(bits)


def run(ctx, bench) -> list[dict]:
    global B
    B = bench
    B.log("== scenario node-cache")
    global CEILING_ADDR
    CEILING_ADDR = os.path.join(B.OUT, "ceiling-addr")
    names = ("node-cache-hit", "node-cache-miss")
    # NODECACHE_SERVERS (comma-separated, e.g. clusterdns,coredns): only
    # those, for attribution runs; coredns needs clusterdns before it.
    only = [x for x in os.environ.get("NODECACHE_SERVERS", "").split(",") if x]
    servers = [s for s in B.SERVERS if not only or s in only]
    if os.geteuid() != 0:
        return [B.skipped(n, s, "needs root (network namespaces)") for n in names for s in servers]
    lab = Lab(ctx)
    rows: list[dict] = []
    cdns = None
    try:
        lab.up()
        # The cluster DNS: the Services by name (hits), any other name by whoami (misses).
        hosts = "".join(f"        10.0.{i // 250}.{i % 250 + 1} svc{i}.default.svc.cluster.local\n"
                        for i in range(SERVICES))
        cf = B.write(os.path.join(lab.dir, "Corefile.cdns"),
                     f".:53 {{\n    bind {CDNS}\n    hosts {{\n{hosts}        fallthrough\n    }}\n"
                     "    whoami\n}\n")
        cdns = B.spawn(["ip", "netns", "exec", lab.cdns, "taskset", "-c", B.CLIENT_CPU,
                        B.CLUSTERDNS, "-conf", cf, "-quiet"], os.path.join(lab.dir, "cdns.log"))
        time.sleep(0.5)
        files = {"hit": B.write(os.path.join(lab.dir, "hit.txt"),
                                "".join(f"svc{i}.default.svc.cluster.local A\n" for i in range(SERVICES)))}
        nfix = int(3000 * ctx.fixed_dur * 1.3) + 1000
        nmax = 60000 * ctx.max_dur
        for r in range(ctx.runs):
            for s in servers:
                if s == "ceiling":
                    continue
                files[f"miss-fixed-{r}-{s}"] = B.write(
                    os.path.join(lab.dir, f"miss-fixed-{r}-{s}.txt"),
                    "".join(f"f{r}-{s}-{i}.default.svc.cluster.local A\n" for i in range(nfix)))
                files[f"miss-max-{r}-{s}"] = B.write(
                    os.path.join(lab.dir, f"miss-max-{r}-{s}.txt"),
                    "".join(f"m{r}-{s}-{i}.default.svc.cluster.local A\n" for i in range(nmax)))
        usable = []
        for s in servers:
            why = B.availability(ctx, s, None)
            if s == "ceiling" and not why and not os.access(CEILING_ADDR, os.X_OK):
                why = "ceiling responder bound to an address not built (see scripts/bench)"
            if why:
                rows += [B.skipped(n, s, why) for n in names]
            else:
                usable.append(s)
        # clusterdns first: CoreDNS runs the Corefile it rendered.
        rendered = None
        runs: dict[str, list[dict]] = {s: [] for s in usable}
        errors: dict[str, str] = {}
        for r in range(ctx.runs):
            B.log(f"-- node-cache: run {r + 1}/{ctx.runs}")
            for s in usable:
                if s in errors:
                    continue
                if s == "coredns" and rendered is None:
                    path = os.path.join(lab.dir, "Corefile")
                    if not os.path.exists(path):
                        errors[s] = "no Corefile rendered by clusterdns node-cache to run"
                        continue
                    with open(path, encoding="utf-8") as f:
                        rendered = f.read()
                try:
                    got = measure(ctx, lab, s, files, rendered, r)
                    runs[s].append(got)
                    for kind in got:
                        g = got[kind]
                        B.log(f"  node-cache-{kind}/{s}: max {B.fmt(g['qps'], 0)} q/s, "
                              f"{B.fmt(g['cpu_us_per_query'], 2)} us/q at {B.fmt(g['fixed_qps'], 0)} q/s, "
                              f"sys {B.fmt(g['sys_us_per_query'], 2)} us/q, "
                              f"{B.fmt(g['ctxt_per_query'], 2)} ctxt/q, "
                              f"p50 {B.fmt(g['p50_us'], 0)} us, p99 {B.fmt(g['p99_us'], 0)} us, "
                              f"RSS {B.fmt(g['rss_mib'], 1)} MiB, lost {B.fmt(g['fixed_lost_pct'], 2)}%"
                              f"/{B.fmt(g['max_lost_pct'], 2)}%, rcodes {g['fixed_rcodes']}, "
                              f"RSS at start {B.fmt(g.get('idle_rss_mib'), 1)} MiB, "
                              f"cache entries {g.get('cache_entries')}")
                except (RuntimeError, OSError) as e:
                    errors[s] = str(e)
                    B.log(f"  node-cache/{s}: failed: {e}")
        for s in usable:
            for kind in ("hit", "miss"):
                name = f"node-cache-{kind}"
                if s == "ceiling" and kind == "miss":
                    rows.append(B.skipped(name, s, "not applicable: a fixed answer, no cache"))
                    continue
                rs = [x[kind] for x in runs[s]]
                if not rs:
                    rows.append(B.row(name, s, status="failed", reason=errors.get(s)))
                    continue
                agg = {k: B.median([x.get(k) for x in rs]) for k in
                       ("qps", "cpu_us_per_query", "sys_us_per_query", "p50_us", "p99_us",
                        "rss_mib", "fixed_qps", "fixed_lost_pct", "max_lost_pct",
                        "idle_rss_mib", "cache_entries")}
                rows.append(B.row(name, s, offered_qps=rs[0]["offered_qps"], runs=len(rs),
                                  per_run=rs, reason=note(agg, errors.get(s)), **agg))
    except RuntimeError as e:
        B.log(f"  node-cache: lab failed: {e}")
        rows += [B.row(n, s, status="failed", reason=str(e)) for n in names for s in servers]
    finally:
        if cdns is not None:
            B.stop(cdns)
        lab.down()
    return rows
