"""A tiny DNS-over-UDP client (stdlib only) for readiness probes and the
propagation scenario: build one query, send it, decode the rcode and the
answer count / first A address. Loopback only."""

import random
import socket
import struct
import time


def build_query(name: str, qtype: int = 1, qid: int | None = None) -> bytes:
    """Wire form of a recursion-desired query for NAME/QTYPE IN."""
    if qid is None:
        qid = random.randint(0, 0xFFFF)
    out = bytearray(struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0))
    for label in name.rstrip(".").split("."):
        if label:
            b = label.encode()
            out.append(len(b))
            out += b
    out.append(0)
    out += struct.pack(">HH", qtype, 1)
    return bytes(out)


def _skip_name(msg: bytes, off: int) -> int:
    while off < len(msg):
        n = msg[off]
        if n == 0:
            return off + 1
        if n & 0xC0 == 0xC0:
            return off + 2
        off += n + 1
    return off


def parse_reply(msg: bytes):
    """(id, rcode, answer_count, [A addresses in the answer section])."""
    if len(msg) < 12:
        return None
    qid, flags, qd, an, _ns, _ar = struct.unpack(">HHHHHH", msg[:12])
    off = 12
    for _ in range(qd):
        off = _skip_name(msg, off) + 4
    addrs = []
    for _ in range(an):
        off = _skip_name(msg, off)
        if off + 10 > len(msg):
            break
        rtype, _cls, _ttl, rdlen = struct.unpack(">HHIH", msg[off : off + 10])
        off += 10
        if rtype == 1 and rdlen == 4:
            addrs.append(socket.inet_ntoa(msg[off : off + 4]))
        off += rdlen
    return qid, flags & 0xF, an, addrs


def ask(port: int, name: str, qtype: int = 1, timeout: float = 0.5, host: str = "127.0.0.1",
        src: str | None = None):
    """One query (from address SRC when given); returns parse_reply(...) or
    None on timeout/garbage."""
    qid = random.randint(0, 0xFFFF)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        if src:
            s.bind((src, 0))
        try:
            s.sendto(build_query(name, qtype, qid), (host, port))
            deadline = time.monotonic() + timeout
            while True:
                data, _ = s.recvfrom(4096)
                r = parse_reply(data)
                if r and r[0] == qid:
                    return r
                if time.monotonic() > deadline:
                    return None
        except OSError:
            return None


def wait_answer(port: int, name: str, deadline_s: float, want_addr: str | None = None,
                qtype: int = 1, interval: float = 0.05, src: str | None = None) -> float | None:
    """Poll until NAME answers (NOERROR with an answer, or with WANT_ADDR among
    the A records), asked from SRC when given. Returns the monotonic time of
    success, None on timeout."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        r = ask(port, name, qtype, timeout=min(0.5, max(0.01, interval * 4)), src=src)
        if r and r[1] == 0 and r[2] > 0 and (want_addr is None or want_addr in r[3]):
            return time.monotonic()
        time.sleep(interval)
    return None
