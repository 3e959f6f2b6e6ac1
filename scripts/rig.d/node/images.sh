#!/usr/bin/env bash
# Builds the real node's images as OCI archives, from scratch (nothing can be
# pulled from a registry on these machines):
#   OUT/pause.oci.tar    localhost/rig-pause:1  containerd's sandbox_image: a
#                        few lines of C, linked statically
#   OUT/busybox.oci.tar  localhost/rig-busybox:1  Debian's busybox-static, with
#                        its applets linked under /bin (sh, nslookup, wget ...)
# Called by `scripts/rig build --node` with a scratch directory WORK for the
# buildah store (vfs: no overlay mounts needed).
#
#   images.sh OUT WORK
set -euo pipefail
out=${1:?images.sh OUT WORK}
work=${2:?images.sh OUT WORK}
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
rm -rf "$work"
