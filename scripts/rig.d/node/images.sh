#!/usr/bin/env bash
# Builds the real node's images as OCI archives, from scratch (nothing can be
# pulled from a registry on these machines):
#   OUT/pause.oci.tar    localhost/rig-pause:1  containerd's sandbox_image: a
#                        few lines of C, linked statically
#   OUT/busybox.oci.tar  localhost/rig-busybox:1  Debian's busybox-static, with
#                        its applets linked under /bin (sh, nslookup, wget ...)
#   OUT/glibc.oci.tar    localhost/rig-glibc:1  glibc's resolver: getent and
#                        tests/clients/getaddrinfo.c linked against the C library
#   OUT/musl.oci.tar     localhost/rig-musl:1  musl's getaddrinfo (that program
#                        linked statically with musl-gcc), as Alpine images resolve
#   OUT/go.oci.tar       localhost/rig-go:1  Go's own resolver (golookup/,
#                        CGO_ENABLED=0), as most cluster software resolves
#   OUT/coredns.oci.tar  localhost/coredns:VERSION  the rig's CoreDNS build, as
#                        upstream's image runs it (entrypoint /coredns)
# The three clients also carry busybox (a shell, the applets), dig (with the
# libraries it links) and resolve-loop, the scenarios' lookup loop.
# Called by `scripts/rig build --node` with a scratch directory WORK for the
# buildah store (vfs: no overlay mounts needed), the rig's scripts directory
# RIG_D, the repository's tests/clients CLIENTS and the CoreDNS binary and
# version (from the rig's cache).
#
#   images.sh OUT WORK RIG_D CLIENTS COREDNS_BIN COREDNS_VERSION
set -euo pipefail
usage="images.sh OUT WORK RIG_D CLIENTS COREDNS_BIN COREDNS_VERSION"
out=${1:?$usage}
work=${2:?$usage}
rig_d=${3:?$usage}
clients=${4:?$usage}
coredns_bin=${5:?$usage}
coredns_version=${6:?$usage}
mkdir -p "$out" "$work"
store=(--root "$work/storage" --runroot "$work/run" --storage-driver vfs)

# image NAME TAG ROOTFS ENTRYPOINT CMD: a one-layer image from a staged root fs.
image() {
    local name=$1 tag=$2 rootfs=$3 entrypoint=$4 cmd=$5 ctr
    ctr=$(buildah "${store[@]}" from --format oci scratch)
    tar --numeric-owner --owner=0 --group=0 -C "$rootfs" -cf "$work/$name.tar" .
    buildah "${store[@]}" add "$ctr" "$work/$name.tar" / >/dev/null
    buildah "${store[@]}" config --entrypoint "$entrypoint" --cmd "$cmd" --env PATH=/bin --workingdir / \
        --os linux --arch amd64 --created-by "scripts/rig.d/node/images.sh" "$ctr"
    rm -f "$out/$name.oci.tar"
    buildah "${store[@]}" commit --format oci --rm "$ctr" "oci-archive:$out/$name.oci.tar:$tag" >/dev/null
}

# pause: holds the Pod's namespaces; exits on SIGTERM/SIGINT, reaps zombies
# (it is PID 1 when the Pod shares its process namespace), as upstream's.
mkdir -p "$work/pause/rootfs"
cat >"$work/pause/pause.c" <<'C'
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
static void quit(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
    signal(SIGINT, quit);
    signal(SIGTERM, quit);
    signal(SIGCHLD, reap);
    for (;;) pause();
}
C
gcc -static -O2 -s -o "$work/pause/rootfs/pause" "$work/pause/pause.c"
image pause localhost/rig-pause:1 "$work/pause/rootfs" '["/pause"]' ''

# busybox: the client Pods' tools. Its nslookup reads the resolv.conf the
# kubelet writes (search path, ndots), as an application's resolver does.
bb=/bin/busybox
[[ -x $bb ]] || { echo "images.sh: $bb missing (apt-get install busybox-static)" >&2; exit 1; }
mkdir -p "$work/busybox/rootfs/bin" "$work/busybox/rootfs/tmp" "$work/busybox/rootfs/etc"
install -m 0755 "$bb" "$work/busybox/rootfs/bin/busybox"
for a in $("$bb" --list); do
    [[ $a == busybox ]] || ln -s busybox "$work/busybox/rootfs/bin/$a"
done
chmod 1777 "$work/busybox/rootfs/tmp"
echo "root:x:0:0:root:/:/bin/sh" >"$work/busybox/rootfs/etc/passwd"
echo "root:x:0:" >"$work/busybox/rootfs/etc/group"
# No entrypoint, a shell as the command, PATH /bin: as Docker's busybox, so
# that `kubectl run ... -- nslookup NAME` runs nslookup.
image busybox localhost/rig-busybox:1 "$work/busybox/rootfs" '[]' '["/bin/sh"]'

# with_libs ROOTFS BIN...: BIN into ROOTFS/bin and every library it loads
# (ldd's list, the loader included) at the same path.
with_libs() {
    local root=$1 b lib
    shift
    for b in "$@"; do
        install -m 0755 "$b" "$root/bin/$(basename "$b")"
        for lib in $(ldd "$b" | grep -o '/[^ ]*'); do
            mkdir -p "$root$(dirname "$lib")"
            cp -L "$lib" "$root$lib"
        done
    done
}

# client NAME: a root fs with busybox, dig, resolve-loop, /etc for a Pod.
client() {
    local root=$work/$1/rootfs
    rm -rf "$root"
    mkdir -p "$work/$1"
    cp -a "$work/busybox/rootfs" "$root"
    with_libs "$root" /usr/bin/dig
    install -m 0755 "$rig_d/node/resolve-loop" "$root/bin/resolve-loop"
    # glibc reads nsswitch.conf (absent: `files dns` anyway, said here).
    echo "hosts: files dns" >"$root/etc/nsswitch.conf"
    echo "$root"
}
command -v dig >/dev/null || { echo "images.sh: dig missing (apt-get install bind9-dnsutils)" >&2; exit 1; }

root=$(client glibc)
gcc -O2 -o "$work/getaddrinfo-glibc" "$clients/getaddrinfo.c"
with_libs "$root" /usr/bin/getent "$work/getaddrinfo-glibc"
mv "$root/bin/getaddrinfo-glibc" "$root/bin/getaddrinfo"
# glibc loads its NSS modules at run time: ldd does not list them.
for lib in /lib/x86_64-linux-gnu/libnss_files.so.2 /lib/x86_64-linux-gnu/libnss_dns.so.2; do
    if [[ -e $lib ]]; then cp -L "$lib" "$root$lib"; fi
done
image glibc localhost/rig-glibc:1 "$root" '[]' '["/bin/sh"]'

command -v musl-gcc >/dev/null || { echo "images.sh: musl-gcc missing (apt-get install musl-tools)" >&2; exit 1; }
root=$(client musl)
musl-gcc -static -O2 -s -o "$root/bin/getaddrinfo" "$clients/getaddrinfo.c"
image musl localhost/rig-musl:1 "$root" '[]' '["/bin/sh"]'

root=$(client go)
(cd "$rig_d/node/golookup" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$root/bin/golookup" .)
image go localhost/rig-go:1 "$root" '[]' '["/bin/sh"]'

# CoreDNS as its upstream image runs it: the binary alone, entrypoint
# /coredns, the Corefile given by the Deployment's args.
mkdir -p "$work/coredns/rootfs/etc"
install -m 0755 "$coredns_bin" "$work/coredns/rootfs/coredns"
echo "nonroot:x:65532:65532::/home/nonroot:/sbin/nologin" >"$work/coredns/rootfs/etc/passwd"
image coredns "localhost/coredns:$coredns_version" "$work/coredns/rootfs" '["/coredns"]' ''
rm -rf "$work"
