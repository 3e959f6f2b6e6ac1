#!/usr/bin/env python3
"""A CycloneDX 1.5 SBOM (JSON) of an image scripts/image built.

What the image holds, and nothing else:
- every crate linked into the binary: the `clusterdns` package's normal
  dependencies, transitively, for the image's target (`cargo metadata`), with
  their licences and, for crates.io ones, the SHA-256 Cargo.lock records;
- every other file in the image's root filesystem, by the Debian package that
  installed it on the build host (`dpkg -S`), with that package's version.

The BOM's subject is the image itself, named by its manifest digest; its date
is the build's (SOURCE_DATE_EPOCH), and its serial number is derived from the
digest, so two builds of one commit give the same BOM.

Usage: sbom.py --root WORKSPACE --rootfs DIR --name NAME --version VERSION
               --tag TAG --digest sha256:... --epoch SECONDS --target TRIPLE
Writes the BOM to stdout.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tomllib
import uuid


def cargo_components(root, target):
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--locked", "--format-version", "1",
             "--filter-platform", target],
            cwd=root, check=True, capture_output=True, text=True,
        ).stdout
    )
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    start = next(
        p["id"] for p in meta["packages"]
        if p["name"] == "clusterdns" and p["source"] is None
    )

    # Normal (linked) edges only: build scripts, proc macros' own deps and
    # dev-dependencies are not in the binary. A proc macro is a normal dep
    # whose code runs at build time; it is listed, as it shapes the binary.
    def linked(dep):
        return any(k["kind"] is None for k in dep["dep_kinds"])

    seen, todo, edges = set(), [start], {}
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        deps = [d["pkg"] for d in nodes[pid]["deps"] if linked(d)]
        edges[pid] = deps
        todo.extend(deps)

    with open(os.path.join(root, "Cargo.lock"), "rb") as f:
        lock = tomllib.load(f)
    checksums = {
        (p["name"], p["version"]): p["checksum"]
        for p in lock.get("package", []) if "checksum" in p
    }

    def ref(pid):
        p = packages[pid]
        return f"crate:{p['name']}@{p['version']}"

    components = []
    for pid in sorted(seen, key=lambda i: (packages[i]["name"], packages[i]["version"])):
        p = packages[pid]
        c = {
            "type": "application" if pid == start else "library",
            "bom-ref": ref(pid),
            "name": p["name"],
            "version": p["version"],
        }
        if p["source"] and p["source"].startswith("registry+"):
            c["purl"] = f"pkg:cargo/{p['name']}@{p['version']}"
            digest = checksums.get((p["name"], p["version"]))
            if digest:
                c["hashes"] = [{"alg": "SHA-256", "content": digest}]
        else:
            # A workspace crate: the project's own code.
            c["description"] = "clusterdns workspace crate"
        if p.get("license"):
            c["licenses"] = [{"expression": p["license"]}]
        components.append(c)
    dependencies = [
        {"ref": ref(pid), "dependsOn": sorted({ref(d) for d in edges[pid]})}
        for pid in sorted(seen, key=ref)
    ]
    return ref(start), components, dependencies


# Files a package's maintainer script writes rather than ships, so dpkg
# does not list them: update-ca-certificates builds the bundle from the
# ca-certificates package's certificates.
GENERATED = {"/etc/ssl/certs/ca-certificates.crt": "ca-certificates"}


def dpkg_components(rootfs):
    """The Debian packages the root filesystem's files came from."""
    files = []
    for dirpath, _dirs, names in os.walk(rootfs):
        for n in names:
            path = os.path.join(dirpath, n)
            if os.path.islink(path):
                continue
            inside = "/" + os.path.relpath(path, rootfs)
            if inside == "/clusterdns":
                continue
            files.append(inside)
    owners = {}
    for f in sorted(files):
        owner = GENERATED.get(f)
        # Usr-merged hosts record some files under /lib, others under /usr/lib.
        for candidate in (f, os.path.realpath(f), f.replace("/usr/lib/", "/lib/", 1)):
            if owner is not None:
                break
            out = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
            if out.returncode == 0:
                owner = out.stdout.split(":", 1)[0].split(",")[0].strip()
        if owner is None:
            sys.exit(f"sbom: no Debian package owns {f}: say where it comes from")
        owners.setdefault(owner, []).append(f)
    components = []
    for pkg in sorted(owners):
        fields = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${Architecture}", pkg],
            check=True, capture_output=True, text=True,
        ).stdout.split("\t")
        name, version, arch = fields[0], fields[1], fields[2]
        components.append({
            "type": "library",
            "bom-ref": f"deb:{name}@{version}",
            "name": name,
            "version": version,
            "purl": f"pkg:deb/debian/{name}@{version}?arch={arch}",
            "properties": [
                {"name": "clusterdns:file", "value": f} for f in owners[pkg]
            ],
        })
    return components


def main():
    ap = argparse.ArgumentParser()
    for a in ("root", "rootfs", "name", "version", "tag", "digest", "epoch", "target"):
        ap.add_argument("--" + a, required=True)
    args = ap.parse_args()

    binary_ref, crates, deps = cargo_components(args.root, args.target)
    debs = dpkg_components(args.rootfs)
    when = datetime.datetime.fromtimestamp(int(args.epoch), datetime.timezone.utc)
    repo = args.tag.rsplit(":", 1)[0]
    image = {
        "type": "container",
        "bom-ref": "image",
        "name": args.name,
        "version": args.version,
        "purl": f"pkg:oci/{args.name}@{args.digest.replace(':', '%3A')}"
                f"?repository_url={repo.rsplit('/', 1)[0]}&tag={args.version}",
        "hashes": [{"alg": "SHA-256", "content": args.digest.split(":", 1)[1]}],
    }
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": "urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, "oci:" + args.digest)),
        "version": 1,
        "metadata": {
            "timestamp": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": [{"type": "application", "name": "scripts/image.d/sbom.py"}]},
            "component": image,
        },
        "components": crates + debs,
        "dependencies": [{"ref": "image", "dependsOn": [binary_ref] + [d["bom-ref"] for d in debs]}]
        + deps,
    }
    json.dump(bom, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
