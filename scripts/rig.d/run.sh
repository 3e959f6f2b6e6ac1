# shellcheck shell=bash
# Sourced by scripts/rig: up / down / status / apiserver-stop / apiserver-start /
# etcd-compact. Everything listens on loopback only.

# Settings for a new `up`. Once the rig is up they are saved in $RUN/rig.env and
# every later command uses the saved values.
rig_defaults() {
    ETCD_PORT=${RIG_ETCD_PORT:-23790}
    ETCD_PEER_PORT=${RIG_ETCD_PEER_PORT:-23800}
    APISERVER_PORT=${RIG_APISERVER_PORT:-16443}
    KCM_PORT=${RIG_KCM_PORT:-16444}
    ADMIN_TOKEN=${RIG_ADMIN_TOKEN:-clusterdns-rig-admin}
    SERVICE_CIDR=${RIG_SERVICE_CIDR:-10.96.0.0/16,fd00:10:96::/112}
    ADVERTISE_ADDRESS=${RIG_ADVERTISE_ADDRESS:-127.0.0.1}
    WATCH_CACHE=${RIG_WATCH_CACHE:-true}
    AUTHZ=${RIG_AUTHZ:-RBAC}
    KCM=${RIG_KCM:-auto}
    KCM_CONTROLLERS=${RIG_KCM_CONTROLLERS:-endpoints-controller,endpointslice-controller,endpointslice-mirroring-controller,namespace-controller,garbage-collector-controller,serviceaccount-controller}
}

RIG_SAVED_VARS=(ETCD_PORT ETCD_PEER_PORT APISERVER_PORT KCM_PORT ADMIN_TOKEN SERVICE_CIDR ADVERTISE_ADDRESS WATCH_CACHE AUTHZ KCM KCM_CONTROLLERS)

load_settings() {
    rig_defaults
    if [[ -f $RUN/rig.env ]]; then
        # shellcheck source=/dev/null
        source "$RUN/rig.env"
    fi
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

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start_proc NAME ARGS...: start $BIN/NAME detached (own session), log and pid under $RUN.
start_proc() {
    local name=$1
    shift
    mkdir -p "$RUN/logs"
    echo "--- start $(date -u +%FT%TZ)" >>"$RUN/logs/$name.log"
    setsid "$BIN/$name" "$@" </dev/null >>"$RUN/logs/$name.log" 2>&1 &
    echo $! >"$RUN/$name.pid"
    log "$name: started, pid $!, log $RUN/logs/$name.log"
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
        printf '%s\n' \
            "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
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
    server: https://127.0.0.1:$APISERVER_PORT
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
        "https://127.0.0.1:$APISERVER_PORT/readyz"
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
    port_in_use "$APISERVER_PORT" && die "port $APISERVER_PORT is taken by something else (set RIG_APISERVER_PORT)"
    local c=$RUN/certs
    start_proc kube-apiserver \
        --etcd-servers="$(etcd_url)" \
        --bind-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
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
        --disable-admission-plugins=ServiceAccount \
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

cmd_up() {
    need_bins
    mkdir -p "$RUN"
    load_settings
    if is_running etcd && is_running kube-apiserver && { ! kcm_wanted || is_running kube-controller-manager; } &&
        [[ -f $KUBECONFIG_FILE ]] && kc get ns >/dev/null 2>&1; then
        log "already up: https://127.0.0.1:$APISERVER_PORT, kubeconfig $KUBECONFIG_FILE"
        return 0
    fi
    local start
    start=$(date +%s)
    save_settings
    gen_certs
    write_kubeconfig
    start_etcd
    start_apiserver
    start_kcm
    # The apiserver's bootstrap controllers create these shortly after /readyz.
    wait_for "namespace default and Service default/kubernetes" 60 kube-apiserver \
        kc get -n default service/kubernetes
    kc get ns >/dev/null || die "kubectl get ns failed"
    log "up in $(($(date +%s) - start))s: https://127.0.0.1:$APISERVER_PORT, kubeconfig $KUBECONFIG_FILE"
}

cmd_down() {
    load_settings
    stop_proc kube-controller-manager 5
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
    for n in etcd kube-apiserver kube-controller-manager; do
        if is_running "$n"; then st="running, pid $(<"$RUN/$n.pid")"; else st="stopped"; fi
        printf '%-24s %s\n' "$n" "$st"
    done
    echo "etcd:       $(etcd_url)"
    echo "apiserver:  https://127.0.0.1:$APISERVER_PORT"
    if [[ -f $KUBECONFIG_FILE ]] && kc get ns >/dev/null 2>&1; then
        echo "api:        answering (kubectl get ns works)"
    else
        echo "api:        not answering"
        return 1
    fi
}

cmd_env() {
    echo "export KUBECONFIG=$KUBECONFIG_FILE"
    echo "export PATH=$BIN:\$PATH"
}
