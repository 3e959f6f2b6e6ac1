# shellcheck shell=bash
# Sourced by scripts/rig: up / down / status / apiserver-stop / apiserver-start /
# etcd-compact. Everything listens on loopback only, except with the real node
# (`up --node`, rig.d/node.sh): then the API server and the kubelet listen on
# the node's bridge address, where Pods reach them.

# Settings for a new `up`. Once the rig is up they are saved in $RUN/rig.env and
# every later command uses the saved values.
rig_defaults() {
    ETCD_PORT=${RIG_ETCD_PORT:-23790}
    ETCD_PEER_PORT=${RIG_ETCD_PEER_PORT:-23800}
    APISERVER_PORT=${RIG_APISERVER_PORT:-16443}
    KCM_PORT=${RIG_KCM_PORT:-16444}
    ADMIN_TOKEN=${RIG_ADMIN_TOKEN:-clusterdns-rig-admin}
    # The real node (`up --node`): its address on a bridge of the rig's.
    NODE=${RIG_NODE:-0}
    NODE_IP=${RIG_NODE_IP:-10.250.0.1}
    if ((NODE)); then
        # kubeadm's default range, single-stack: the node's Pods are IPv4 only,
        # and deploy/'s kube-dns Service is 10.96.0.10.
        SERVICE_CIDR=${RIG_SERVICE_CIDR:-10.96.0.0/12}
        # The `kubernetes` Service gets a real endpoint, the node's address,
        # which Pods (an in-cluster DNS) reach through kube-proxy.
        ADVERTISE_ADDRESS=${RIG_ADVERTISE_ADDRESS:-$NODE_IP}
    else
        SERVICE_CIDR=${RIG_SERVICE_CIDR:-10.96.0.0/16,fd00:10:96::/112}
        ADVERTISE_ADDRESS=${RIG_ADVERTISE_ADDRESS:-127.0.0.1}
    fi
    WATCH_CACHE=${RIG_WATCH_CACHE:-true}
    AUTHZ=${RIG_AUTHZ:-RBAC}
    KCM=${RIG_KCM:-auto}
    SCHEDULER_PORT=${RIG_SCHEDULER_PORT:-16445}
    KWOK_PORT=${RIG_KWOK_PORT:-16446}
    # Fake nodes (0 = the plain rig: no scheduler, no KWOK). `up --nodes N` sets it.
    NODES=${RIG_NODES:-0}
    local controllers=endpoints-controller,endpointslice-controller,endpointslice-mirroring-controller,namespace-controller,garbage-collector-controller,serviceaccount-controller
    # With nodes, Deployments, ReplicaSets and DaemonSets must turn into Pods,
    # and node-lifecycle takes the not-ready taint (added at registration)
    # off Ready nodes, and puts it back on nodes whose Lease stops.
    if ((NODES > 0 || NODE)); then controllers+=,deployment-controller,replicaset-controller,daemonset-controller,node-lifecycle-controller; fi
    # Real Pods mount their service account token with the cluster's CA,
    # from the kube-root-ca.crt ConfigMap this controller publishes.
    if ((NODE)); then controllers+=,root-ca-certificate-publisher-controller,pod-garbage-collector-controller; fi
    KCM_CONTROLLERS=${RIG_KCM_CONTROLLERS:-$controllers}
}

RIG_SAVED_VARS=(ETCD_PORT ETCD_PEER_PORT APISERVER_PORT KCM_PORT SCHEDULER_PORT KWOK_PORT NODES NODE NODE_IP ADMIN_TOKEN SERVICE_CIDR ADVERTISE_ADDRESS WATCH_CACHE AUTHZ KCM KCM_CONTROLLERS)

load_settings() {
    rig_defaults
    if [[ -f $RUN/rig.env ]]; then
        # shellcheck source=/dev/null
        source "$RUN/rig.env"
    fi
    # Where the API server listens: loopback, or with the real node the
    # node's address (Pods must reach it; the machine reaches it there too).
    API_HOST=127.0.0.1
    if ((NODE)); then API_HOST=$NODE_IP; fi
}

save_settings() {
    local v
    for v in "${RIG_SAVED_VARS[@]}"; do printf '%s=%q\n' "$v" "${!v}"; done >"$RUN/rig.env"
}

need_bins() {
    local b
    for b in etcd kube-apiserver kubectl coredns; do
        [[ -x $BIN/$b ]] || die "$BIN/$b is missing: run scripts/rig build first"
    done
}

# is_running NAME: the pid in $RUN/NAME.pid is alive and is that program.
is_running() {
    local name=$1 pid exe
    [[ -f $RUN/$name.pid ]] || return 1
    pid=$(<"$RUN/$name.pid")
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 1
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
    [[ $(basename "${exe% (deleted)}") == "$name" ]]
}

# port_in_use PORT [HOST]: something accepts TCP there (default 127.0.0.1).
port_in_use() { (exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1") 2>/dev/null; }

# start_proc NAME ARGS...: start $BIN/NAME detached (own session), log and pid under $RUN.
start_proc() {
    local name=$1
    shift
    mkdir -p "$RUN/logs"
    echo "--- start $(date -u +%FT%TZ)" >>"$RUN/logs/$name.log"
    setsid "$BIN/$name" "$@" </dev/null >>"$RUN/logs/$name.log" 2>&1 &
    local pid=$! i
    echo "$pid" >"$RUN/$name.pid"
    # Until the background shell has exec'd setsid and setsid the program,
    # /proc/PID/exe names bash or setsid and is_running would call the
    # program dead: wait for the exec (it can take a while on a loaded machine).
    for ((i = 0; i < 100; i++)); do
        is_running "$name" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    log "$name: started, pid $pid, log $RUN/logs/$name.log"
}

# stop_proc NAME [GRACE_SECONDS]: SIGTERM, then SIGKILL after the grace period
# (default 30 s; 0 = SIGKILL at once).
stop_proc() {
    local name=$1 grace=${2:-30} pid i
    if ! is_running "$name"; then
        rm -f "$RUN/$name.pid"
        return 0
    fi
    pid=$(<"$RUN/$name.pid")
    if ((grace > 0)); then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < grace * 10; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    if kill -0 "$pid" 2>/dev/null; then
        ((grace > 0)) && log "$name: still running ${grace}s after SIGTERM, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    rm -f "$RUN/$name.pid"
    log "$name: stopped (pid $pid)"
}

# wait_for WHAT SECONDS NAME CMD...: poll CMD until it succeeds; fail if NAME died.
wait_for() {
    local what=$1 secs=$2 name=$3 i
    shift 3
    for ((i = 0; i < secs * 4; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        if [[ -n $name ]] && ! is_running "$name"; then
            tail -n 30 "$RUN/logs/$name.log" >&2 || true
            die "$name exited while waiting for $what"
        fi
        sleep 0.25
    done
    [[ -n $name ]] && tail -n 30 "$RUN/logs/$name.log" >&2
    die "timed out after ${secs}s waiting for $what"
}

gen_certs() {
    local c=$RUN/certs
    [[ -f $c/apiserver.crt && -f $c/sa.key && -f $c/ca.crt ]] && return 0
    mkdir -p "$c"
    (
        cd "$c" || exit 1
        umask 077
        openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
        openssl req -x509 -new -key ca.key -subj "/CN=clusterdns-rig-ca" -days 3650 -out ca.crt \
            -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
        openssl ecparam -name prime256v1 -genkey -noout -out apiserver.key 2>/dev/null
        # The first address of the IPv4 Service range too (the `kubernetes`
        # Service, 10.96.0.1), as kubeadm's certificate has it: a client that
        # reaches the apiserver through KUBERNETES_SERVICE_HOST, as a pod does,
        # verifies that address (tests/in_cluster.rs).
        local range=${SERVICE_CIDR%%,*}
        range=${range%/*}
        local service_ip=${range%.*}.$((${range##*.} + 1))
        local node_san=
        if ((NODE)); then node_san=IP:$NODE_IP,; fi
        printf '%s\n' \
            "subjectAltName=${node_san}IP:127.0.0.1,IP:::1,IP:$service_ip,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
            "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
            "extendedKeyUsage=serverAuth" >apiserver.ext
        openssl req -new -key apiserver.key -subj "/CN=kube-apiserver" 2>/dev/null |
            openssl x509 -req -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
                -extfile apiserver.ext -out apiserver.crt 2>/dev/null
        # Service-account signing key (EC P-256: fast to generate).
        openssl ecparam -name prime256v1 -genkey -noout -out sa.key 2>/dev/null
        openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
        echo "$ADMIN_TOKEN,admin,admin,\"system:masters\"" >token.csv
    )
}

write_kubeconfig() {
    local tmp=$KUBECONFIG_FILE.tmp.$$
    cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: clusterdns-rig
  cluster:
    server: https://$API_HOST:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$RUN/certs/ca.crt")
users:
- name: admin
  user:
    token: $ADMIN_TOKEN
contexts:
- name: clusterdns-rig
  context:
    cluster: clusterdns-rig
    user: admin
current-context: clusterdns-rig
EOF
    chmod 600 "$tmp"
    mv "$tmp" "$KUBECONFIG_FILE"
}

etcd_url() { echo "http://127.0.0.1:$ETCD_PORT"; }

start_etcd() {
    is_running etcd && return 0
    port_in_use "$ETCD_PORT" && die "port $ETCD_PORT is taken by something else (set RIG_ETCD_PORT)"
    mkdir -p "$RUN/etcd"
    chmod 700 "$RUN/etcd"
    start_proc etcd --name rig --data-dir "$RUN/etcd" \
        --listen-client-urls "$(etcd_url)" --advertise-client-urls "$(etcd_url)" \
        --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
        --initial-cluster "rig=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
        --unsafe-no-fsync --log-level warn
    wait_for "etcd health" 60 etcd curl -fsS "$(etcd_url)/health"
}

api_ready() {
    curl -fsS --cacert "$RUN/certs/ca.crt" -H "Authorization: Bearer $ADMIN_TOKEN" \
        "https://$API_HOST:$APISERVER_PORT/readyz"
}

# The apiserver publishes its advertise address in the default/kubernetes
# Endpoints and EndpointSlice, and validation rejects loopback addresses there.
# The rig only uses loopback, so by default nothing is published (the
# kubernetes Service exists, with no EndpointSlice); set RIG_ADVERTISE_ADDRESS
# to a non-loopback address to get them (nothing connects to it).
endpoint_reconciler() {
    case $ADVERTISE_ADDRESS in
        127.* | ::1) echo none ;;
        *) echo lease ;;
    esac
}

start_apiserver() {
    is_running kube-apiserver && return 0
    port_in_use "$APISERVER_PORT" "$API_HOST" && die "port $APISERVER_PORT is taken by something else (set RIG_APISERVER_PORT)"
    local c=$RUN/certs
    # The plain rig creates Pods right after their namespace, before the
    # service account controller made its `default` account; real Pods (the
    # node's) need their account's token, so the real node keeps the plugin.
    local admission=(--disable-admission-plugins=ServiceAccount)
    if ((NODE)); then admission=(); fi
    # --kubelet-preferred-address-types=InternalIP: for logs, exec and
    # port-forward the API server dials the node's address, never its name
    # (which it would look up through the machine's resolver).
    start_proc kube-apiserver \
        --etcd-servers="$(etcd_url)" \
        --bind-address="$API_HOST" --secure-port="$APISERVER_PORT" \
        --kubelet-preferred-address-types=InternalIP \
        --advertise-address="$ADVERTISE_ADDRESS" \
        --endpoint-reconciler-type="$(endpoint_reconciler)" \
        --tls-cert-file="$c/apiserver.crt" --tls-private-key-file="$c/apiserver.key" \
        --client-ca-file="$c/ca.crt" \
        --token-auth-file="$c/token.csv" \
        --authorization-mode="$AUTHZ" \
        --service-account-key-file="$c/sa.pub" \
        --service-account-signing-key-file="$c/sa.key" \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-cluster-ip-range="$SERVICE_CIDR" \
        "${admission[@]}" \
        --watch-cache="$WATCH_CACHE" \
        --profiling=false \
        --v="${RIG_APISERVER_V:-1}"
    wait_for "kube-apiserver /readyz" 180 kube-apiserver api_ready
}

kcm_wanted() {
    case $KCM in
        0 | false | no) return 1 ;;
        *) [[ -x $BIN/kube-controller-manager ]] ;;
    esac
}

start_kcm() {
    kcm_wanted || return 0
    is_running kube-controller-manager && return 0
    port_in_use "$KCM_PORT" && die "port $KCM_PORT is taken by something else (set RIG_KCM_PORT)"
    start_proc kube-controller-manager \
        --kubeconfig="$KUBECONFIG_FILE" \
        --bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
        --leader-elect=false \
        --controllers="$KCM_CONTROLLERS" \
        --root-ca-file="$RUN/certs/ca.crt" \
        --service-account-private-key-file="$RUN/certs/sa.key" \
        --use-service-account-credentials=false \
        --profiling=false \
        --v="${RIG_KCM_V:-1}"
}

kc() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }

# --------------------------------------------------------------------------
# fake nodes: kube-scheduler + KWOK (opt-in, `up --nodes N`)
# --------------------------------------------------------------------------

# The annotation KWOK selects its nodes by: a Node without it is left alone
# (nobody heartbeats it), which is how a test gets a node that stays NotReady.
KWOK_ANNOTATION=kwok.x-k8s.io/node=fake

need_node_bins() {
    local b
    for b in kube-scheduler kwok kwok-stages.yaml; do
        [[ -e $BIN/$b ]] || die "$BIN/$b is missing: run scripts/rig build --nodes first"
    done
}

start_scheduler() {
    is_running kube-scheduler && return 0
    port_in_use "$SCHEDULER_PORT" && die "port $SCHEDULER_PORT is taken by something else (set RIG_SCHEDULER_PORT)"
    start_proc kube-scheduler \
        --kubeconfig="$KUBECONFIG_FILE" \
        --authentication-kubeconfig="$KUBECONFIG_FILE" \
        --authorization-kubeconfig="$KUBECONFIG_FILE" \
        --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" \
        --leader-elect=false \
        --profiling=false \
        --v="${RIG_SCHEDULER_V:-1}"
}

kwok_healthy() { curl -fsS "http://127.0.0.1:$KWOK_PORT/healthz"; }

start_kwok() {
    is_running kwok && return 0
    port_in_use "$KWOK_PORT" && die "port $KWOK_PORT is taken by something else (set RIG_KWOK_PORT)"
    # The stage file replaces KWOK's default ~/.kwok/kwok.yaml: nothing is read
    # from the home directory. Pod IPs come from each node's spec.podCIDRs.
    # Leases as a kubelet keeps them (kubeadm's 40 s), renewed by KWOK.
    start_proc kwok \
        --config="$BIN/kwok-stages.yaml" \
        --kubeconfig="$KUBECONFIG_FILE" \
        --manage-nodes-with-annotation-selector="$KWOK_ANNOTATION" \
        --node-ip=127.0.0.1 \
        --node-lease-duration-seconds=40 \
        --server-address="127.0.0.1:$KWOK_PORT"
    wait_for "kwok /healthz" 60 kwok kwok_healthy
}

# node_yaml I: fake node rig-node-I. Its addresses and Pod CIDRs are data only
# (nothing is ever sent to them); the IPv6 CIDR makes Pods dual-stack like the
# Services.
node_yaml() {
    local i=$1 v6
    # The API server wants RFC 5952 form: no leading zeros, "::" for a zero group.
    v6=fd00:10:244:$(printf %x "$i")::/64
    ((i > 0)) || v6=fd00:10:244::/64
    cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: rig-node-$i
  annotations:
    ${KWOK_ANNOTATION%%=*}: ${KWOK_ANNOTATION#*=}
  labels:
    kubernetes.io/hostname: rig-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
spec:
  podCIDR: 10.244.$i.0/24
  podCIDRs: [10.244.$i.0/24, "$v6"]
status:
  capacity: {cpu: "${RIG_NODE_CPU:-4}", memory: 16Gi, pods: "110"}
  allocatable: {cpu: "${RIG_NODE_CPU:-4}", memory: 16Gi, pods: "110"}
EOF
}

fake_nodes_untainted() {
    [[ -z $(kc get nodes -l type=kwok -o jsonpath='{.items[*].spec.taints}') ]]
}

# cmd_nodes N: make the fake nodes exactly rig-node-0 .. rig-node-(N-1), all
# Ready. Other nodes (a test's own) are not touched.
cmd_nodes() {
    local n=${1:-}
    [[ $n =~ ^[0-9]+$ ]] && ((n <= 250)) || die "nodes: want a node count 0..250, got '${n}'"
    load_settings
    [[ -f $RUN/rig.env ]] || die "the rig is not up (use scripts/rig up --nodes $n)"
    is_running kwok && is_running kube-scheduler || die "the rig runs without nodes: scripts/rig down, then scripts/rig up --nodes $n"
    local i have
    if ((n > 0)); then
        for ((i = 0; i < n; i++)); do node_yaml "$i" && echo "---"; done |
            kc apply -f - >/dev/null || die "nodes: creating the fake nodes failed"
    fi
    for have in $(kc get nodes -l type=kwok -o name); do
        i=${have#node/rig-node-}
        if [[ $i =~ ^[0-9]+$ ]] && ((i >= n)); then kc delete "$have" --wait=false >/dev/null; fi
    done
    if ((n > 0)); then
        wait_for "$n fake nodes Ready" 60 kwok kc wait --for=condition=Ready node -l type=kwok --timeout=1s
        # ... and schedulable: node-lifecycle has taken the not-ready taint off.
        wait_for "the not-ready taint off the fake nodes" 60 kwok fake_nodes_untainted
    fi
    if [[ $NODES != "$n" ]]; then
        NODES=$n
        save_settings
    fi
    log "nodes: $n fake node(s) Ready"
}

cmd_up() {
    local want_nodes= want_node=0
    while (($#)); do
        case $1 in
            --nodes)
                want_nodes=${2:-}
                [[ $want_nodes =~ ^[0-9]+$ ]] && ((want_nodes > 0)) || die "up: --nodes wants a node count > 0"
                shift 2
                ;;
            --node)
                want_node=1
                shift
                ;;
            *) die "up: unknown option '$1' (known: --nodes N, --node)" ;;
        esac
    done
    need_bins
    mkdir -p "$RUN"
    if [[ -n $want_nodes && ! -f $RUN/rig.env ]]; then RIG_NODES=$want_nodes; fi
    if ((want_node)) && [[ ! -f $RUN/rig.env ]]; then RIG_NODE=1; fi
    load_settings
    if ((want_node)); then
        need_node_real_bins
        ((NODE)) || die "the rig is up without the real node: scripts/rig down, then scripts/rig up --node"
    fi
    if [[ -n $want_nodes ]]; then
        need_node_bins
        ((NODES > 0)) || die "the rig is up without nodes: scripts/rig down, then scripts/rig up --nodes $want_nodes"
    fi
    if is_running etcd && is_running kube-apiserver && { ! kcm_wanted || is_running kube-controller-manager; } &&
        { ((NODES == 0)) || { is_running kube-scheduler && is_running kwok; }; } &&
        { ((NODE == 0)) || { is_running kube-scheduler && is_running containerd && is_running kubelet && is_running kube-proxy; }; } &&
        [[ -f $KUBECONFIG_FILE ]] && kc get ns >/dev/null 2>&1; then
        if [[ -n $want_nodes && $want_nodes != "$NODES" ]]; then cmd_nodes "$want_nodes"; fi
        log "already up: https://$API_HOST:$APISERVER_PORT, kubeconfig $KUBECONFIG_FILE"
        return 0
    fi
    local start
    start=$(date +%s)
    save_settings
    if ((NODE)); then node_prepare; fi
    gen_certs
    write_kubeconfig
    start_etcd
    start_apiserver
    start_kcm
    # The apiserver's bootstrap controllers create these shortly after /readyz.
    wait_for "namespace default and Service default/kubernetes" 60 kube-apiserver \
        kc get -n default service/kubernetes
    kc get ns >/dev/null || die "kubectl get ns failed"
    # The real node's Deployments need the scheduler too.
    if ((NODES > 0 || NODE)); then start_scheduler; fi
    if ((NODE)); then start_node; fi
    if ((NODES > 0)); then
        need_node_bins
        start_kwok
        cmd_nodes "$NODES"
    fi
    log "up in $(($(date +%s) - start))s: https://$API_HOST:$APISERVER_PORT, kubeconfig $KUBECONFIG_FILE"
}

cmd_down() {
    load_settings
    stop_proc kwok 5
    stop_proc kube-scheduler 5
    stop_proc kube-controller-manager 5
    # The node while the API server still answers (its Pods are deleted
    # through it); after the controller-manager, so nothing recreates them.
    stop_node
    stop_proc kube-apiserver 3
    stop_proc etcd 10
    rm -rf "$RUN" "$KUBECONFIG_FILE"
    log "down"
}

# The apiserver stops listening at once on SIGTERM but then waits for open
# watch connections (up to its request timeout, 60 s); after
# RIG_APISERVER_STOP_GRACE seconds (default 3) it gets SIGKILL. `--kill` sends
# SIGKILL straight away (a crash).
cmd_apiserver_stop() {
    load_settings
    [[ -f $RUN/rig.env ]] || die "the rig is not up"
    local grace=${RIG_APISERVER_STOP_GRACE:-3}
    [[ ${1:-} == --kill ]] && grace=0
    stop_proc kube-apiserver "$grace"
}

cmd_apiserver_start() {
    need_bins
    load_settings
    [[ -f $RUN/rig.env ]] || die "the rig is not up (use scripts/rig up)"
    is_running etcd || start_etcd
    start_apiserver
    log "kube-apiserver ready"
}

# Compacts etcd up to its current revision (after one write outside /registry so
# the revision moves). Watches resumed from an older resourceVersion then get
# 410 Gone: always when --watch-cache=false; with the watch cache (the default)
# for watches resumed across an apiserver restart (apiserver-stop,
# etcd-compact, apiserver-start), exactly like a real cluster after an outage.
cmd_etcd_compact() {
    load_settings
    is_running etcd || die "etcd is not running"
    local key val out rev
    key=$(printf '/clusterdns-rig/compact' | base64 -w0)
    val=$(date +%s%N | base64 -w0)
    out=$(curl -fsS -X POST "$(etcd_url)/v3/kv/put" -d "{\"key\":\"$key\",\"value\":\"$val\"}")
    rev=$(sed -n 's/.*"revision":"\([0-9]*\)".*/\1/p' <<<"$out")
    [[ -n $rev ]] || die "could not read the etcd revision from: $out"
    out=$(curl -fsS -X POST "$(etcd_url)/v3/kv/compaction" -d "{\"revision\":\"$rev\",\"physical\":true}")
    log "etcd compacted to revision $rev"
    echo "$rev"
}

cmd_status() {
    load_settings
    local n st
    echo "rig dir:    $RIG_DIR"
    echo "kubeconfig: $KUBECONFIG_FILE$([[ -f $KUBECONFIG_FILE ]] || echo ' (absent)')"
    [[ -f $BIN/VERSIONS ]] && sed 's/^/binary:     /' "$BIN/VERSIONS"
    for n in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
        if is_running "$n"; then st="running, pid $(<"$RUN/$n.pid")"; else st="stopped"; fi
        printf '%-24s %s\n' "$n" "$st"
    done
    echo "etcd:       $(etcd_url)"
    echo "apiserver:  https://$API_HOST:$APISERVER_PORT"
    echo "nodes:      $NODES fake$( ((NODES > 0)) && echo " (kube-scheduler :$SCHEDULER_PORT, kwok :$KWOK_PORT)")"
    if ((NODE)); then node_status; fi
    if [[ -f $KUBECONFIG_FILE ]] && kc get ns >/dev/null 2>&1; then
        echo "api:        answering (kubectl get ns works)"
    else
        echo "api:        not answering"
        return 1
    fi
}

# shellcheck source=scripts/rig.d/node.sh
source "$RIG_D/node.sh"

cmd_env() {
    echo "export KUBECONFIG=$KUBECONFIG_FILE"
    echo "export PATH=$BIN:\$PATH"
}
