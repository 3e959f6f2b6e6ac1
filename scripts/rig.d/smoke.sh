#!/usr/bin/env bash
# Smoke test of the rig (run as `scripts/rig smoke`; the rig must be up):
#  1. create a Namespace, a ClusterIP Service, a headless Service and an
#     EndpointSlice through the API;
#  2. the reference CoreDNS (kubernetes plugin, kubeconfig .rig/kubeconfig)
#     answers them;
#  3. apiserver-stop / apiserver-start: CoreDNS keeps answering during the
#     outage and sees a new Service after it;
#  4. etcd-compact: a watch resumed from an old resourceVersion gets 410 Gone.
set -euo pipefail
RIG=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../rig
ROOT=$(cd "$(dirname "$RIG")/.." && pwd)
RIG_DIR=${RIG_DIR:-$ROOT/.rig}
KCFG=$RIG_DIR/kubeconfig
NS=smoke-$$-$RANDOM
WORK=$(mktemp -d)
COREDNS_PID=

say() { printf '[smoke] %s\n' "$*" >&2; }
fail() {
    say "FAIL: $*"
    exit 1
}
cleanup() {
    local rc=$?
    [[ -n $COREDNS_PID ]] && kill "$COREDNS_PID" 2>/dev/null && wait "$COREDNS_PID" 2>/dev/null
    "$RIG" kubectl delete ns "$NS" --wait=false >/dev/null 2>&1 || true
    if ((rc != 0)) && [[ -f $WORK/coredns.log ]]; then
        say "coredns log:"
        tail -n 40 "$WORK/coredns.log" >&2
    fi
    rm -rf "$WORK"
    exit $rc
}
trap cleanup EXIT

kc() { "$RIG" kubectl "$@"; }

# A free UDP+TCP port on 127.0.0.1 (a small race is acceptable here).
free_port() {
    local p
    for _ in $(seq 1 50); do
        p=$((20000 + RANDOM % 20000))
        if ! ss -Hlnu "sport = :$p" | grep -q . && ! ss -Hlnt "sport = :$p" | grep -q .; then
            echo "$p"
            return
        fi
    done
    fail "no free port"
}

# expect NAME TYPE WANT...: dig until the sorted answer equals WANT (30 s).
expect() {
    local name=$1 type=$2 want got=""
    shift 2
    want=$(printf '%s\n' "$@" | sort | tr '\n' ' ')
    for _ in $(seq 1 60); do
        got=$(dig +short +time=1 +tries=1 @127.0.0.1 -p "$PORT" "$name" "$type" 2>/dev/null | sort | tr '\n' ' ') || true
        [[ $got == "$want" ]] && {
            say "ok: $name $type -> $got"
            return 0
        }
        sleep 0.5
    done
    fail "$name $type: want '$want', got '$got'"
}

"$RIG" status >/dev/null || fail "the rig is not up (scripts/rig up)"

say "namespace $NS"
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: $NS}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: $NS}
spec:
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: v1
kind: Service
metadata: {name: db, namespace: $NS}
spec:
  clusterIP: None
  ports: [{name: pg, port: 5432, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: db-1
  namespace: $NS
  labels: {kubernetes.io/service-name: db}
addressType: IPv4
ports: [{name: pg, port: 5432, protocol: TCP}]
endpoints:
- addresses: [10.244.1.10]
  hostname: db-0
  conditions: {ready: true}
- addresses: [10.244.1.11]
  conditions: {ready: true}
EOF
WEB_IP=$(kc get -n "$NS" svc web -o jsonpath='{.spec.clusterIP}')
[[ -n $WEB_IP ]] || fail "service web got no ClusterIP"

PORT=$(free_port)
cat >"$WORK/Corefile" <<EOF
.:$PORT {
    bind 127.0.0.1
    errors
    kubernetes cluster.local {
        kubeconfig $KCFG
    }
}
EOF
"$RIG" coredns -conf "$WORK/Corefile" >"$WORK/coredns.log" 2>&1 &
COREDNS_PID=$!
say "coredns pid $COREDNS_PID on 127.0.0.1:$PORT"

expect "web.$NS.svc.cluster.local" A "$WEB_IP"
expect "db.$NS.svc.cluster.local" A 10.244.1.10 10.244.1.11
expect "db-0.db.$NS.svc.cluster.local" A 10.244.1.10
expect "_http._tcp.web.$NS.svc.cluster.local" SRV "0 100 80 web.$NS.svc.cluster.local."
expect "kubernetes.default.svc.cluster.local" A "$(kc get -n default svc kubernetes -o jsonpath='{.spec.clusterIP}')"

# A resourceVersion from before the outage, for the 410 check.
OLD_RV=$(kc get --raw "/api/v1/namespaces/$NS/services" | grep -o '"resourceVersion":"[0-9]*"' | sed -n 1p | grep -o '[0-9][0-9]*')
[[ -n $OLD_RV ]] || fail "no list resourceVersion"

say "apiserver outage"
"$RIG" apiserver-stop
if kc get ns --request-timeout=2s >/dev/null 2>&1; then fail "apiserver still answers after apiserver-stop"; fi
expect "web.$NS.svc.cluster.local" A "$WEB_IP"
say "etcd-compact while the apiserver is down"
"$RIG" etcd-compact >/dev/null
"$RIG" apiserver-start
kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Service
metadata: {name: after, namespace: $NS}
spec:
  ports: [{port: 8080, protocol: TCP}]
EOF
AFTER_IP=$(kc get -n "$NS" svc after -o jsonpath='{.spec.clusterIP}')
expect "after.$NS.svc.cluster.local" A "$AFTER_IP"

say "watch from resourceVersion $OLD_RV (before the compaction)"
OUT=$(kc get --raw "/api/v1/namespaces/$NS/services?watch=1&resourceVersion=$OLD_RV&timeoutSeconds=2" 2>&1 || true)
if ! grep -q '"code":410' <<<"$OUT" && ! grep -qi 'gone\|too old' <<<"$OUT"; then
    fail "expected 410 Gone, got: $OUT"
fi
say "ok: 410 Gone ($(grep -o '"message":"[^"]*"' <<<"$OUT" | sed -n 1p))"

say "PASS"
