# shellcheck shell=bash
# Sourced by scripts/rig: the real node (`up --node`, `import`, and its part
# of `down` and `status`). One node, rig-node: containerd, kubelet and
# kube-proxy started by hand (no systemd here), on a bridge of the rig's own.
# docs/rig.md ("A real node") says what each setting works around.

NODE_NAME=rig-node
# The bridge that carries the node's address (the kubelet and the API server
# are reached there, by the API server and by Pods), and the CNI plugin's
# bridge, the Pods' gateway. Names of the rig's own: down removes exactly these.
NODE_BRIDGE=rignode0
CNI_BRIDGE=rigcni0
NODE_POD_CIDR=10.244.0.0/24
NODE_CLUSTER_CIDR=10.244.0.0/16
NODE_CLUSTER_DNS=10.96.0.10
# The comment that marks the rig's own rule (the drop of Pod traffic leaving
# the machine), so down deletes that rule and nothing else.
NODE_DROP_COMMENT=clusterdns-rig-node-no-egress
# The sysctls the kubelet (kernel tunables), the CNI bridge plugin
# (ip_forward) and kube-proxy (route_localnet, conntrack) may change; saved at
# up and written back at down.
NODE_SYSCTLS=(kernel.panic kernel.panic_on_oops vm.overcommit_memory vm.panic_on_oom
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes
    net.ipv4.ip_forward net.ipv4.conf.all.forwarding net.ipv6.conf.all.forwarding
    net.ipv4.conf.all.route_localnet
    net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables
    net.netfilter.nf_conntrack_max net.netfilter.nf_conntrack_tcp_timeout_established
    net.netfilter.nf_conntrack_tcp_timeout_close_wait)

node_dir() { echo "$RUN/node"; }
containerd_sock() { echo "$RUN/node/containerd/containerd.sock"; }
ctr_k8s() { ctr --address "$(containerd_sock)" --namespace k8s.io "$@"; }

need_node_real_bins() {
    local b
    for b in kubelet kube-proxy kube-scheduler rig-pause.oci.tar rig-busybox.oci.tar; do
        [[ -e $BIN/$b ]] || die "$BIN/$b is missing: run scripts/rig build --node first"
    done
    for b in containerd containerd-shim-runc-v2 runc ctr iptables ip6tables ip; do
        command -v "$b" >/dev/null || die "$b is not installed: run scripts/rig build --node first"
    done
    [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/portmap ]] ||
        die "the CNI plugins are not in /usr/lib/cni: run scripts/rig build --node first"
    [[ $(id -u) == 0 ]] || die "the real node needs root"
}

# What the machine looked like before up (compared, and partly restored, at down).
node_snapshot() {
    local d=$1 s
    mkdir -p "$d"
    iptables-save 2>/dev/null | sed '/^#/d; s/\[[0-9]*:[0-9]*\]//' >"$d/iptables" || true
    ip6tables-save 2>/dev/null | sed '/^#/d; s/\[[0-9]*:[0-9]*\]//' >"$d/ip6tables" || true
    ip -o link show | sed 's/^[0-9]*: //' | cut -d' ' -f1 | sort >"$d/links"
    ip netns list 2>/dev/null | cut -d' ' -f1 | sort >"$d/netns"
    findmnt -rn -o TARGET | sort >"$d/mounts"
    # shellcheck disable=SC2012 # names only
    for s in /sys/fs/cgroup/*/; do echo "$s: $(ls "$s" | tr '\n' ' ')"; done >"$d/cgroups"
    for s in "${NODE_SYSCTLS[@]}"; do
        if [[ -r /proc/sys/${s//.//} ]]; then echo "$s=$(sysctl -n "$s")"; fi
    done >"$d/sysctls"
    for s in /var/lib/cni /var/lib/kubelet /var/log/pods /var/log/containers /run/containerd /run/netns; do
        if [[ -e $s ]]; then echo "$s"; fi
    done >"$d/paths"
}

# The chains of a family's table that match PREFIX (KUBE-, CNI-).
chains_of() {
    local fam=$1 table=$2
    "$fam-save" -t "$table" 2>/dev/null | sed -n 's/^:\(\(KUBE\|CNI\)-[^ ]*\) .*/\1/p'
}

node_bridge_up() {
    if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
        ip link add "$NODE_BRIDGE" type bridge
    fi
    ip addr replace "$NODE_IP/24" dev "$NODE_BRIDGE"
    ip link set "$NODE_BRIDGE" up
}

# Pods can reach nothing outside the machine: every forwarded packet from
# the Pod CIDR that does not go back to a Pod (the CNI bridge) is dropped.
# In the mangle table, which neither kube-proxy nor the CNI plugins touch,
# so none of their rules (inserted in filter FORWARD at the top) comes first.
node_egress_drop() {
    local op=$1
    iptables -t mangle "$op" FORWARD -s "$NODE_CLUSTER_CIDR" ! -o "$CNI_BRIDGE" \
        -m comment --comment "$NODE_DROP_COMMENT" -j DROP
}

# put FILE: stdin into FILE, unless FILE already holds exactly that
# (kube-proxy exits when its configuration file changes, so a second `up`
# must not touch it).
put() {
    local t=$1.tmp.$$
    cat >"$t"
    if cmp -s "$t" "$1"; then rm -f "$t"; else mv "$t" "$1"; fi
}

write_node_config() {
    local d
    d=$(node_dir)
    mkdir -p "$d/containerd/root" "$d/containerd/state" "$d/cni/net.d" "$d/cni/ipam" \
        "$d/kubelet" "$d/pod-logs"
    # The Pods' (dnsPolicy: Default) and the kubelet's resolv.conf: only the
    # node's own address, where a test starts its upstream. Never the
    # machine's resolver.
    echo "nameserver $NODE_IP" | put "$d/resolv.conf"
    put "$d/containerd/config.toml" <<EOF
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
[grpc]
  address = "$(containerd_sock)"
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/rig-pause:1"
  # Negative oom_score_adj is refused here (EACCES): without this containerd
  # asks -998 for sandboxes and runc fails.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$d/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$d/cni/net.d"
EOF
    put "$d/cni/net.d/10-rig.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "rig",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$NODE_POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$d/cni/ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
    put "$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 here: 1.35 refuses it unless told (KEP-5573); no systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
# Negative oom_score_adj is refused here.
oomScoreAdj: 0
containerRuntimeEndpoint: unix://$(containerd_sock)
address: $NODE_IP
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
clusterDNS: [$NODE_CLUSTER_DNS]
clusterDomain: cluster.local
resolvConf: $d/resolv.conf
podCIDR: $NODE_POD_CIDR
podLogsDir: $d/pod-logs
# RuntimeDefault for every container that asks for no seccomp profile, as
# hardened clusters run (kubeadm's CoreDNS objects ask for none).
seccompDefault: true
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
# The machine's disk and memory are shared: do not evict the rig's Pods.
evictionHard: {memory.available: 1Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
failSwapOn: false
serializeImagePulls: false
EOF
    put "$d/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
# No IPVS in this kernel.
mode: iptables
clusterCIDR: $NODE_CLUSTER_CIDR
hostnameOverride: $NODE_NAME
# Negative oom_score_adj is refused here.
oomScoreAdj: 0
clientConnection: {kubeconfig: $KUBECONFIG_FILE}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["$NODE_IP/32"]
# Leave the machine's conntrack settings and route_localnet alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
EOF
}

containerd_ready() { ctr --address "$(containerd_sock)" version; }
node_ready() {
    [[ $(kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}
node_untainted() {
    [[ -z $(kc get node "$NODE_NAME" -o jsonpath='{.spec.taints}') ]]
}
proxy_healthy() { curl -fsS http://127.0.0.1:10256/healthz; }

# Before the API server starts: it listens on the node's bridge. The
# machine's state is recorded first (down compares against it).
node_prepare() {
    need_node_real_bins
    local d
    d=$(node_dir)
    if ! [[ -f $d/before/sysctls ]]; then node_snapshot "$d/before"; fi
    node_bridge_up
    node_egress_drop -C 2>/dev/null || node_egress_drop -I
}

start_node() {
    local d start
    d=$(node_dir)
    start=$(date +%s)
    write_node_config
    ln -sfn "$(command -v containerd)" "$BIN/containerd"
    if ! is_running containerd; then
        start_proc containerd --config "$d/containerd/config.toml" --log-level warn
        wait_for "containerd" 60 containerd containerd_ready
    fi
    rig_import "$BIN/rig-pause.oci.tar" "$BIN/rig-busybox.oci.tar" >/dev/null
    if ! is_running kubelet; then
        start_proc kubelet --config "$d/kubelet.yaml" --kubeconfig "$KUBECONFIG_FILE" \
            --root-dir "$d/kubelet" --cert-dir "$d/kubelet/pki" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" \
            --v="${RIG_KUBELET_V:-1}"
    fi
    if ! is_running kube-proxy; then
        start_proc kube-proxy --config "$d/kube-proxy.yaml" --v="${RIG_KUBE_PROXY_V:-1}"
    fi
    wait_for "node $NODE_NAME Ready" 90 kubelet node_ready
    wait_for "the not-ready taint off $NODE_NAME" 60 kubelet node_untainted
    wait_for "kube-proxy /healthz" 60 kube-proxy proxy_healthy
    log "node: $NODE_NAME Ready in $(($(date +%s) - start))s (kubelet, kube-proxy, containerd on $NODE_IP)"
}

# scripts/rig import FILE...: OCI archives into the node's containerd, where
# the kubelet finds them (imagePullPolicy Never or IfNotPresent). Prints each
# image reference imported, one a line (what a Pod's `image` names).
rig_import() {
    local f out
    for f; do
        [[ -f $f ]] || die "import: $f does not exist"
        out=$(ctr_k8s images import "$f") || die "import: ctr images import $f failed"
        # The references are the archive's own (its index.json), as ctr names
        # the images it imports.
        tar -xOf "$f" index.json | grep -o '"org.opencontainers.image.ref.name":"[^"]*"' | cut -d'"' -f4
        log "import: $f into the node's containerd: ${out//$'\n'/; }"
    done
}

cmd_import() {
    (($#)) || die "import: want OCI archive files (FILE.oci.tar ...)"
    load_settings
    ((NODE)) && is_running containerd || die "the rig's node is not up (scripts/rig up --node)"
    rig_import "$@"
}

# The processes in the node's Pod cgroups (every container, shims excluded).
kubepods_pids() {
    local h
    for h in /sys/fs/cgroup/*/kubepods; do
        if [[ -d $h ]]; then find "$h" -name cgroup.procs -exec cat {} + 2>/dev/null || true; fi
    done | sort -u
}

# The node's containerd shims: started by our containerd, with its socket on
# their command line.
shim_pids() {
    local sock p
    sock=$(containerd_sock)
    for p in /proc/[0-9]*; do
        if { tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | grep -qF -- "-address $sock "; then echo "${p#/proc/}"; fi
    done
}

# new_netns BEFORE: the Pods' network namespaces (containerd names them
# cni-UUID) not listed in BEFORE. Other namespaces are other programs' (tests
# make their own): never touched.
new_netns() {
    local ns
    for ns in $(ip netns list 2>/dev/null | cut -d' ' -f1); do
        if [[ $ns == cni-* ]] && ! grep -qx -- "$ns" "$1"; then echo "$ns"; fi
    done
}

# Removes every KUBE-* and CNI-* chain that was not there before up, with the
# rules of other chains that jump to it, in every table of a family.
remove_new_chains() {
    local fam=$1 before=$2 table chain rule
    for table in filter nat mangle raw security; do
        local new=()
        for chain in $(chains_of "$fam" "$table"); do
            grep -q -- "^:$chain " "$before" 2>/dev/null || new+=("$chain")
        done
        ((${#new[@]})) || continue
        for chain in "${new[@]}"; do
            # Jumps to it from any chain.
            while read -r rule; do
                [[ -n $rule ]] || continue
                eval "$fam -t $table ${rule/-A /-D }" 2>/dev/null || true
            done < <("$fam-save" -t "$table" | grep -E -- "^-A .* -j $chain( |$)")
        done
        for chain in "${new[@]}"; do "$fam" -t "$table" -F "$chain" 2>/dev/null || true; done
        for chain in "${new[@]}"; do "$fam" -t "$table" -X "$chain" 2>/dev/null || true; done
    done
}

# iptables-nft creates the built-in tables it touches (kube-proxy's cleanup
# included); drop those that were not there at up and hold nothing now.
remove_new_empty_tables() {
    local fam=$1 nftfam=$2 before=$3 table
    "$fam" -V 2>/dev/null | grep -q nf_tables || return 0
    command -v nft >/dev/null || return 0
    for table in filter nat mangle raw security; do
        if grep -qx -- "\*$table" "$before"; then continue; fi
        nft list table "$nftfam" "$table" >/dev/null 2>&1 || continue
        # A rule, or a chain of someone's own (policy "-"): leave it.
        if "$fam-save" -t "$table" 2>/dev/null | grep -qE '^(-A |:[^ ]+ - )'; then continue; fi
        nft delete table "$nftfam" "$table" 2>/dev/null || true
    done
}

stop_node() {
    local d
    d=$(node_dir)
    [[ -d $d ]] || return 0
    # 1. Pods: delete them through the API (the controller-manager is already
    # stopped, so nothing recreates them) and let the kubelet tear them down
    # (CNI DEL, netns, mounts), as a drained node does. Gracefully, with 1 s
    # of grace: a Pod deleted by force (the API object gone at once) was
    # seen to outlive a 30 s wait on the kubelet.
    if is_running kubelet && is_running kube-apiserver; then
        kc delete pods --all-namespaces --all --field-selector "spec.nodeName=$NODE_NAME" \
            --grace-period=1 --wait=false >/dev/null 2>&1 || true
        # Done when no process is left in the Pod cgroups and every Pod's
        # network namespace is gone (the sandbox torn down, CNI DEL run).
        # containerd keeps exited tasks listed, so those are not waited for.
        local i
        for ((i = 0; i < 60; i++)); do
            [[ -z $(kubepods_pids) && -z $(new_netns "$d/before/netns") ]] && break
            sleep 0.5
        done
        if ((i == 60)); then
            local left
            left=$(kubepods_pids | tr '\n' ',')
            log "node: after 30 s, still in the Pod cgroups: $( [[ -z $left ]] || ps -o pid=,args= -p "${left%,}" | tr -s ' \n' ' ')netns: $(new_netns "$d/before/netns" | tr '\n' ' ')(killed and removed below)"
        fi
    fi
    stop_proc kube-proxy 5
    stop_proc kubelet 10
    # 2. What the kubelet left: containers still running, then the runtime.
    local p
    for p in $(kubepods_pids); do kill -KILL "$p" 2>/dev/null || true; done
    stop_proc containerd 10
    for p in $(shim_pids); do kill -KILL "$p" 2>/dev/null || true; done
    # 3. kube-proxy's rules (every mode's), then what kube-proxy --cleanup
    # leaves: the kubelet's KUBE-FIREWALL, KUBE-KUBELET-CANARY and
    # KUBE-IPTABLES-HINT, the CNI plugins' CNI-* chains, IPv4 and IPv6.
    if [[ -x $BIN/kube-proxy ]]; then
        "$BIN/kube-proxy" --cleanup >>"$RUN/logs/kube-proxy.log" 2>&1 || true
    fi
    remove_new_chains iptables "$d/before/iptables"
    remove_new_chains ip6tables "$d/before/ip6tables"
    while node_egress_drop -D 2>/dev/null; do :; done
    remove_new_empty_tables iptables ip "$d/before/iptables"
    remove_new_empty_tables ip6tables ip6 "$d/before/ip6tables"
    # 4. Mounts under the rig's node directory (kubelet volumes, containerd's
    # rootfs and shm), deepest first, then the Pods' network namespaces.
    local m
    for m in $(findmnt -rn -o TARGET | grep -F -- "$d/" | awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2-); do
        umount -l "$m" 2>/dev/null || true
    done
    local ns
    for ns in $(new_netns "$d/before/netns"); do ip netns delete "$ns" 2>/dev/null || true; done
    # 5. Links: the Pods' veths on the CNI bridge, both bridges.
    local l
    for l in $(ip -o link show master "$CNI_BRIDGE" 2>/dev/null | sed 's/^[0-9]*: //; s/[@:].*//'); do
        ip link delete "$l" 2>/dev/null || true
    done
    ip link delete "$CNI_BRIDGE" 2>/dev/null || true
    ip link delete "$NODE_BRIDGE" 2>/dev/null || true
    # 6. The Pod cgroups in every hierarchy, deepest first.
    # A killed process leaves its cgroup only once it has exited: retry.
    local h i
    for ((i = 0; i < 20; i++)); do
        for h in /sys/fs/cgroup/*/kubepods; do
            if [[ -d $h ]]; then find "$h" -depth -type d -exec rmdir {} + 2>/dev/null || true; fi
        done
        compgen -G '/sys/fs/cgroup/*/kubepods' >/dev/null || break
        sleep 0.5
    done
    for h in /sys/fs/cgroup/*/kubepods; do
        if [[ -d $h ]]; then log "node: could not remove $h"; fi
    done
    # 7. Sysctls back as they were.
    local kv
    while IFS= read -r kv; do
        [[ -n $kv ]] || continue
        [[ $(sysctl -n "${kv%%=*}" 2>/dev/null) == "${kv#*=}" ]] || sysctl -q -w "$kv" >/dev/null || log "node: could not restore $kv"
    done <"$d/before/sysctls"
    # 8. Paths the node created outside the rig's directory (the kubelet's
    # /var/log/containers symlinks, libcni's cache, containerd's shim sockets).
    for p in /var/lib/cni /var/lib/kubelet /var/log/pods /var/log/containers /run/containerd; do
        if [[ -e $p ]] && ! grep -qx -- "$p" "$d/before/paths"; then rm -rf "$p"; fi
    done
    rm -f "$BIN/containerd"
    node_snapshot "$d/after"
    local what diffs=0
    for what in iptables ip6tables links netns mounts cgroups sysctls paths; do
        if ! diff -q "$d/before/$what" "$d/after/$what" >/dev/null; then
            log "node: $what differ from before up:"
            diff "$d/before/$what" "$d/after/$what" >&2 || true
            diffs=1
        fi
    done
    ((diffs)) || log "node: the machine is as before up (iptables, ip6tables, links, netns, mounts, cgroups, sysctls, paths)"
    # Kept for a look after down (the run directory goes).
    rm -rf "$RIG_DIR/node-down"
    mkdir -p "$RIG_DIR/node-down"
    cp -r "$d/before" "$d/after" "$RIG_DIR/node-down/"
}

node_status() {
    local n st
    for n in containerd kubelet kube-proxy; do
        if is_running "$n"; then st="running, pid $(<"$RUN/$n.pid")"; else st="stopped"; fi
        printf '%-24s %s\n' "$n" "$st"
    done
    echo "node:       $NODE_NAME on $NODE_IP ($NODE_BRIDGE), Pods $NODE_POD_CIDR ($CNI_BRIDGE), containerd $(containerd_sock)"
}
