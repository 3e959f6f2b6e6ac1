"""Kubernetes side of the benchmark (stdlib only): the deterministic data set
(Services with fixed ClusterIPs, EndpointSlices), a parallel loader that talks
to the rig's API server directly, and the propagation measurement.

Data set: Service i (0 <= i < 10000) is svc-(i%1000) in namespace
bench-(i//1000); every 10th (i%10 == 9) is headless; every Service has one
EndpointSlice with 5 ready endpoints (50k endpoints for 10k Services).

Pods (for `pods verified`): Pod j is pod-j in namespace bench-(j%10), one
container, bound to node-(j%50), with status.phase Running and
status.podIP/podIPs pod_ip(j) (in 10.100.0.0/15, disjoint from the endpoint
IPs) set through the status subresource: the rig has no kubelet, and the API
server resets the status of a Pod on create."""

import base64
import http.client
import json
import ssl
import threading
import time

PER_NS = 1000
ENDPOINTS_PER_SVC = 5


def ns_of(i: int) -> str:
    return f"bench-{i // PER_NS}"


def svc_name(i: int) -> str:
    return f"svc-{i % PER_NS}"


def headless(i: int) -> bool:
    return i % 10 == 9


def cluster_ip(i: int) -> str:
    return f"10.96.{10 + i // 250}.{i % 250 + 1}"


def endpoint_ip(i: int, k: int) -> str:
    idx = i * ENDPOINTS_PER_SVC + k
    return f"10.244.{idx // 250}.{idx % 250 + 1}"


def fqdn(i: int) -> str:
    return f"{svc_name(i)}.{ns_of(i)}.svc.cluster.local"


def service_obj(i: int) -> dict:
    spec = {"ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
            "type": "ClusterIP"}
    spec["clusterIP"] = "None" if headless(i) else cluster_ip(i)
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": svc_name(i), "namespace": ns_of(i)}, "spec": spec}


def slice_obj(i: int) -> dict:
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": f"{svc_name(i)}-bench", "namespace": ns_of(i),
                     "labels": {"kubernetes.io/service-name": svc_name(i)}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [endpoint_ip(i, k)], "conditions": {"ready": True}}
                      for k in range(ENDPOINTS_PER_SVC)],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


class Api:
    """Minimal client for the rig's kube-apiserver (token + CA from the kubeconfig)."""

    def __init__(self, kubeconfig: str):
        server = ca = token = None
        with open(kubeconfig, encoding="utf-8") as f:
            for line in f:
                s = line.strip()
                if s.startswith("server:"):
                    server = s.split(":", 1)[1].strip()
                elif s.startswith("certificate-authority-data:"):
                    ca = base64.b64decode(s.split(":", 1)[1].strip()).decode()
                elif s.startswith("token:"):
                    token = s.split(":", 1)[1].strip()
        if not (server and ca and token):
            raise RuntimeError(f"cannot read server/CA/token from {kubeconfig}")
        hostport = server.split("://", 1)[1].rstrip("/")
        self.host, port = hostport.rsplit(":", 1)
        self.port = int(port)
        self.ctx = ssl.create_default_context(cadata=ca)
        self.token = token
        self.local = threading.local()

    def _conn(self) -> http.client.HTTPSConnection:
        c = getattr(self.local, "conn", None)
        if c is None:
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=30)
            self.local.conn = c
        return c

    def request(self, method: str, path: str, body: dict | bytes | None = None,
                content_type: str = "application/json"):
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in range(3):
            c = self._conn()
            try:
                c.request(method, path, body=data, headers=headers)
                r = c.getresponse()
                payload = r.read()
                return r.status, payload
            except (OSError, http.client.HTTPException):
                self.local.conn = None
                c.close()
                if attempt == 2:
                    raise
                time.sleep(0.2)
        raise RuntimeError("unreachable")

    def create(self, path: str, obj: dict | bytes) -> None:
        st, payload = self.request("POST", path, obj)
        if st not in (200, 201, 409):  # 409: already there (re-run on a kept rig)
            raise RuntimeError(f"POST {path}: HTTP {st}: {payload[:300]!r}")

    def merge_patch(self, path: str, patch: dict | bytes) -> None:
        st, payload = self.request("PATCH", path, patch, "application/merge-patch+json")
        if st != 200:
            raise RuntimeError(f"PATCH {path}: HTTP {st}: {payload[:300]!r}")

    def delete(self, path: str) -> None:
        st, payload = self.request("DELETE", path)
        if st not in (200, 202, 404):
            raise RuntimeError(f"DELETE {path}: HTTP {st}: {payload[:300]!r}")


def ensure_namespace(api: Api, ns: str) -> None:
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                      "metadata": {"name": ns}})


def _parallel(start: int, end: int, threads: int, what: str, one) -> None:
    """Runs ONE(i) for start <= i < end on THREADS threads; the first error
    stops every thread and is raised."""
    errors: list[str] = []
    lock = threading.Lock()
    nxt = [start]

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= end or errors:
                return
            try:
                one(i)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(str(e))
                return

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise RuntimeError(f"loading {what} failed: {errors[0]}")


def load(api: Api, start: int, end: int, threads: int = 8) -> float:
    """Creates Services and EndpointSlices start..end; returns seconds taken."""
    t0 = time.monotonic()
    for n in sorted({ns_of(i) for i in range(start, end)}):
        ensure_namespace(api, n)

    def one(i: int) -> None:
        api.create(f"/api/v1/namespaces/{ns_of(i)}/services", service_obj(i))
        api.create(f"/apis/discovery.k8s.io/v1/namespaces/{ns_of(i)}/endpointslices",
                   slice_obj(i))

    _parallel(start, end, threads, "services", one)
    return time.monotonic() - t0


# --------------------------------------------------------------------------
# Pods (pods verified)
# --------------------------------------------------------------------------

POD_NAMESPACES = 10


def pod_ns(j: int) -> str:
    return f"bench-{j % POD_NAMESPACES}"


def pod_name(j: int) -> str:
    return f"pod-{j}"


def pod_ip(j: int) -> str:
    """Distinct for j < 125,000: 10.100.0.1 .. 10.101.249.250."""
    return f"10.{100 + j // 62500}.{j // 250 % 250}.{j % 250 + 1}"


def pod_fqdn(j: int, ns: str | None = None) -> str:
    """The `pods verified` name of Pod j (in namespace NS if given)."""
    return f"{pod_ip(j).replace('.', '-')}.{ns or pod_ns(j)}.pod.cluster.local"


def pod_obj(j: int) -> bytes:
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name(j), "namespace": pod_ns(j),
                     "labels": {"app": f"app-{j % 100}"}},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                 "nodeName": f"node-{j % 50}"},
    }, separators=(",", ":")).encode()


def pod_status_patch(j: int) -> bytes:
    ip = pod_ip(j)
    return json.dumps({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}},
                      separators=(",", ":")).encode()


def load_pods(api: Api, start: int, end: int, threads: int = 16) -> float:
    """Creates Pods start..end and gives each its IP and phase Running through
    pods/status (a merge patch); returns seconds taken."""
    t0 = time.monotonic()
    for n in sorted({pod_ns(j) for j in range(start, min(end, start + POD_NAMESPACES))}):
        ensure_namespace(api, n)

    def one(j: int) -> None:
        ns = pod_ns(j)
        api.create(f"/api/v1/namespaces/{ns}/pods", pod_obj(j))
        api.merge_patch(f"/api/v1/namespaces/{ns}/pods/{pod_name(j)}/status", pod_status_patch(j))

    _parallel(start, end, threads, "pods", one)
    return time.monotonic() - t0


def ensure_client_pod(api: Api, ns: str, name: str, ip: str) -> None:
    """A Running Pod NS/NAME whose status.podIP is IP (a loopback address the
    benchmark's lookup driver binds to, so the server sees it as that Pod)."""
    ensure_namespace(api, ns)
    api.create(f"/api/v1/namespaces/{ns}/pods", json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}],
                 "nodeName": "node-0"},
    }).encode())
    api.merge_patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", json.dumps(
        {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}}).encode())


def propagation(api: Api, ports: dict[str, int], changes: int, timeout_s: float = 10.0):
    """Creates CHANGES Services one by one in namespace bench-prop; after each
    POST returns, polls every server in PORTS (name -> DNS port) until the new
    name resolves to its ClusterIP. Returns name -> list of delays in ms
    (None for a change never seen within TIMEOUT_S). The Services are deleted
    again at the end, so later scenarios see the 10k Services only."""
    ensure_namespace(api, "bench-prop")
    made: list[str] = []
    try:
        return _propagation(api, ports, changes, timeout_s, made)
    finally:
        _parallel(0, len(made), 8, "propagation cleanup",
                  lambda k: api.delete(f"/api/v1/namespaces/bench-prop/services/{made[k]}"))


def _propagation(api: Api, ports: dict[str, int], changes: int, timeout_s: float,
                 made: list[str]):
    import dnsq

    out: dict[str, list] = {k: [] for k in ports}
    for k in range(changes):
        name = f"prop-{k}-{int(time.time())}"
        ip = f"10.96.{200 + k // 250}.{k % 250 + 1}"
        obj = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": "bench-prop"},
               "spec": {"clusterIP": ip, "ports": [{"name": "http", "port": 80}]}}
        api.create("/api/v1/namespaces/bench-prop/services", obj)
        made.append(name)
        t0 = time.monotonic()
        fq = f"{name}.bench-prop.svc.cluster.local"
        pending = dict(ports)
        while pending and time.monotonic() - t0 < timeout_s:
            for srv, port in list(pending.items()):
                r = dnsq.ask(port, fq, 1, timeout=0.05)
                if r and r[1] == 0 and ip in r[3]:
                    out[srv].append((time.monotonic() - t0) * 1000)
                    del pending[srv]
            time.sleep(0.0005)
        for srv in pending:
            out[srv].append(None)
    return out


# --------------------------------------------------------------------------
# Command line, for tests that load a data set of their own
# --------------------------------------------------------------------------

def bulk(api: Api, lines: list[str], threads: int = 16) -> float:
    """Sends the requests of LINES, each `METHOD PATH [JSON]` (POST creates,
    PATCH is a merge patch, DELETE deletes), on THREADS threads, in no
    particular order; returns seconds taken."""
    t0 = time.monotonic()
    reqs = [ln.split(" ", 2) for ln in lines if ln.strip()]

    def one(k: int) -> None:
        method, path, *body = reqs[k]
        data = body[0].encode() if body else None
        if method == "POST":
            api.create(path, data)
        elif method == "PATCH":
            api.merge_patch(path, data)
        elif method == "DELETE":
            api.delete(path)
        else:
            raise RuntimeError(f"unknown method {method!r}")

    _parallel(0, len(reqs), threads, "requests", one)
    return time.monotonic() - t0


def _main(argv: list[str]) -> int:
    """`k8s.py bulk KUBECONFIG [THREADS] < REQUESTS`: the requests of stdin
    (see `bulk`); `k8s.py pods KUBECONFIG START END`: Pods START..END as
    `load_pods` makes them. Prints the seconds taken."""
    import sys

    if len(argv) >= 2 and argv[0] == "bulk":
        threads = int(argv[2]) if len(argv) > 2 else 16
        secs = bulk(Api(argv[1]), sys.stdin.read().splitlines(), threads)
    elif len(argv) == 4 and argv[0] == "pods":
        secs = load_pods(Api(argv[1]), int(argv[2]), int(argv[3]))
    else:
        print(_main.__doc__, file=sys.stderr)
        return 2
    print(f"{secs:.1f}")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(_main(sys.argv[1:]))
