#!/usr/bin/env python3
"""A NODECACHE_ATTACH helper (scripts/bench.d/nodecache.py): the context
switches and CPU ticks of every thread of PID, and the TCP/UDP counters of
PID's network namespace (/proc/PID/net/snmp and netstat), read when it
starts and again at SIGINT (the end of the phase); writes the differences
to OUT. Usage: proc-snap.py PID OUT, e.g.
  NODECACHE_ATTACH='python3 scripts/bench.d/proc-snap.py {pid} /tmp/snap-{server}.txt'
It only reads /proc, twenty times a second."""
import os, signal, sys, time
pid, out = int(sys.argv[1]), sys.argv[2]
def threads():
    r = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            st = open(f"/proc/{pid}/task/{tid}/stat").read()
            comm = st[st.index("(")+1:st.rindex(")")]
            f = st[st.rindex(")")+2:].split()
            ut, kt = int(f[11]), int(f[12])
            v = n = 0
            for line in open(f"/proc/{pid}/task/{tid}/status"):
                if line.startswith("voluntary_ctxt_switches:"): v = int(line.split()[1])
                if line.startswith("nonvoluntary_ctxt_switches:"): n = int(line.split()[1])
            r[tid] = (comm, ut, kt, v, n)
        except OSError:
            pass
    return r
def snmp():
    r = {}
    for fn in ("snmp", "netstat"):
        lines = open(f"/proc/{pid}/net/{fn}").read().splitlines()
        for a, b in zip(lines[::2], lines[1::2]):
            ka, kb = a.split(), b.split()
            for k, v in zip(ka[1:], kb[1:]):
                try: r[ka[0] + k] = int(v)
                except ValueError: pass
    return r
t0, s0, w0 = threads(), snmp(), time.monotonic()
done = []
signal.signal(signal.SIGINT, lambda *a: done.append(1))
while not done:
    time.sleep(0.05)
t1, s1, w1 = threads(), snmp(), time.monotonic()
with open(out, "w") as f:
    f.write(f"wall {w1-w0:.2f}s\n")
    for tid, (c, ut, kt, v, n) in sorted(t1.items()):
        a = t0.get(tid, (c, 0, 0, 0, 0))
        d = (ut-a[1], kt-a[2], v-a[3], n-a[4])
        if any(d): f.write(f"thread {tid} {c}: utime {d[0]} stime {d[1]} ticks, vol {d[2]} invol {d[3]}\n")
    for k in sorted(s1):
        d = s1[k] - s0.get(k, 0)
        if d and (k.startswith("Tcp:") or k.startswith("Udp:") or k.startswith("TcpExt:")):
            f.write(f"{k} {d}\n")
