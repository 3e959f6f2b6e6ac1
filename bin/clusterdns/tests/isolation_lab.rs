//! *kubernetes* `isolate` with `isolate_namespace_labels` (beyond CoreDNS)
//! in a network-namespace lab: one network namespace per client, each a
//! Pod of another Kubernetes namespace (its `status.podIP` is the address
//! of its end of a veth pair; the rig runs no kubelet) with a Pod's
//! `resolv.conf` (search path, ndots:5), plus one that is no Pod. Real
//! glibc lookups (`getent ahostsv4`) and `dig` from inside each show that
//! each client resolves its own namespace's Services, the namespaces
//! allowed by name and those whose labels the selector allows, and
//! nothing else; that a label change is followed; and that without the
//! option every client resolves exactly what the reference CoreDNS
//! resolves for it.

mod common;

use std::net::SocketAddr;
use std::path::Path;

use std::time::{Duration, Instant};

use clusterdns_test_support::{PrivateRig, Rig, ScratchDir, ServerProcess};
use common::netns::Netns;

/// The lab's third octet: 10.249.`S`.0/24, one /30 per client.
fn subnet() -> u8 {
    (std::process::id() % 250) as u8
}

/// Client `i`'s nameserver (the host end of its link) and its own address.
fn addrs(i: u8) -> (String, String) {
    let s = subnet();
    (
        format!("10.249.{s}.{}", 4 * i + 1),
        format!("10.249.{s}.{}", 4 * i + 2),
    )
}

/// One client's network namespace, linked to the host by a veth pair;
/// `/etc/netns/NAME` holds its `resolv.conf`. Removed on drop.
struct Client {
    netns: Netns,
}

impl Client {
    /// Client `i` searching as a Pod of Kubernetes namespace `search_ns`.
    fn create(i: u8, search_ns: &str) -> Option<Client> {
        let id = std::process::id() % 10_000;
        let mut netns = Netns::new(&format!("isolab-{id}-{i}"))?;
        let (host, own) = addrs(i);
        netns.link_host(
            &format!("isoh{id}x{i}"),
            &format!("{host}/30"),
            &format!("ison{id}x{i}"),
            &format!("{own}/30"),
        );
        netns.write_pod_etc(&host, search_ns, "ndots:5 attempts:1 timeout:2");
        Some(Client { netns })
    }

    /// A program in the namespace: its exit status and output.
    fn run(&self, argv: &[&str]) -> String {
        let out = self.netns.output(argv);
        format!(
            "{} {}",
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).trim()
        )
    }

    /// glibc's lookup of `name`: the sorted addresses, or `not found`.
    fn getent(&self, name: &str) -> String {
        let out = self.run(&["getent", "ahostsv4", name]);
        if !out.starts_with("0 ") {
            return "not found".to_string();
        }
        let mut ips: Vec<&str> = out[2..]
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        ips.sort_unstable();
        ips.dedup();
        ips.join(",")
    }

    /// `dig`'s status for `name` A from the namespace.
    fn dig_status(&self, server: &str, name: &str) -> String {
        let out = self.run(&[
            "dig",
            "+tries=1",
            "+time=2",
            &format!("@{server}"),
            name,
            "A",
        ]);
        out.split("status: ")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .unwrap_or("no reply")
            .to_string()
    }
}

fn label(rig: &Rig, ns: &str, kv: &str) {
    rig.kubectl(&["label", "--overwrite", "namespace", ns, kv])
        .expect("label namespace");
}

fn web(rig: &Rig, ns: &str) {
    rig.apply_yaml(&common::web_service_yaml(ns))
        .expect("service");
}

/// A server of `program` with the lab's Corefile on port 53 of every
/// client's nameserver address, `policy` in the *kubernetes* block.
struct Lab<'a> {
    rig: &'a Rig,
    dir: &'a ScratchDir,
    clients: u8,
}

impl Lab<'_> {
    fn serve(&self, label: &str, program: &Path, policy: &str) -> ServerProcess {
        let binds: Vec<String> = (0..self.clients).map(|i| addrs(i).0).collect();
        let corefile = format!(
            ".:53 {{\n    bind {}\n    kubernetes cluster.local in-addr.arpa ip6.arpa {{\n        kubeconfig {}\n        {policy}\n    }}\n}}\n",
            binds.join(" "),
            self.rig.kubeconfig().display()
        );
        let path = self.dir.path().join(format!("{label}.Corefile"));
        std::fs::write(&path, corefile).expect("Corefile");
        let log = self.dir.path().join(format!("{label}.log"));
        let args = vec!["-conf".to_string(), path.display().to_string()];
        let mut server = ServerProcess::spawn(label, program, &args, &log).expect("start");
        for b in &binds {
            let at: SocketAddr = format!("{b}:53").parse().expect("address");
            server
                .wait_listening(at, Duration::from_secs(30))
                .expect("listening");
        }
        server
    }
}

/// What each client resolves: (client, name) → addresses or `not found`.
fn matrix(clients: &[(&str, &Client)], names: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for (who, c) in clients {
        for n in names {
            out.push(format!("{who} {n}: {}", c.getent(n)));
        }
    }
    out
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not in time");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn each_client_resolves_only_what_the_policy_allows() {
    let Some(private) = PrivateRig::start(&[]) else {
        return;
    };
    let rig = private.rig();
    let guards: Vec<_> = ["iso-a", "iso-b", "iso-shared", "iso-named", "iso-private"]
        .iter()
        .map(|p| rig.namespace(p).expect("namespace"))
        .collect();
    let ns: Vec<&str> = guards.iter().map(|g| g.name()).collect();
    let (a, b, shared, named, private_ns) = (ns[0], ns[1], ns[2], ns[3], ns[4]);
    label(rig, shared, "dns-tier=shared");
    label(rig, private_ns, "dns-tier=internal");
    for n in &ns {
        web(rig, n);
    }
    // Clients 0..2 are Pods of A, B and the shared namespace; 3 is no Pod.
    let mut clients = Vec::new();
    for (i, home) in [a, b, shared, a].iter().enumerate() {
        let Some(c) = Client::create(i as u8, home) else {
            return;
        };
        clients.push(c);
    }
    common::pod_at(rig, a, "client", None, addrs(0).1.parse().expect("address"));
    common::pod_at(rig, b, "client", None, addrs(1).1.parse().expect("address"));
    common::pod_at(
        rig,
        shared,
        "client",
        None,
        addrs(2).1.parse().expect("address"),
    );
    let who = [
        ("pod-of-a", &clients[0]),
        ("pod-of-b", &clients[1]),
        ("pod-of-shared", &clients[2]),
        ("no-pod", &clients[3]),
    ];
    let fqdn = |n: &str| format!("web.{n}.svc.cluster.local.");
    let mut names: Vec<String> = ns.iter().map(|n| fqdn(n)).collect();
    // The search walk: `web` is the own namespace's (no-pod searches A's).
    names.push("web".into());

    let dir = ScratchDir::new("isolation-lab").expect("dir");
    let lab = Lab {
        rig,
        dir: &dir,
        clients: clients.len() as u8,
    };

    // Without the option: what the reference CoreDNS resolves, client by
    // client, and every client resolves every name.
    let mut off = Vec::new();
    for (label, program) in [
        ("coredns", rig.coredns()),
        ("clusterdns", common::binary().to_path_buf()),
    ] {
        let server = lab.serve(label, &program, "");
        wait_for(&format!("{label} synced"), || {
            clients[0].getent(&fqdn(private_ns)) != "not found"
        });
        off.push(matrix(&who, &names));
        drop(server);
    }
    assert_eq!(
        off[0], off[1],
        "coredns (left) and clusterdns (right) differ"
    );
    assert!(
        !off[1].iter().any(|l| l.ends_with("not found")),
        "{:#?}",
        off[1]
    );
    let plain = &off[1];

    // The policy: own namespace, `named` by name, namespaces labelled
    // dns-tier=shared or =infra by label; a client that is no Pod only
    // the allowed ones.
    let policy = format!(
        "isolate {named}\n        isolate_namespace_labels dns-tier in (shared, infra)\n        isolate_unknown deny"
    );
    let server = lab.serve("isolated", common::binary(), &policy);
    wait_for("the Pods known", || {
        clients[0].getent(&fqdn(b)) == "not found" && clients[0].getent(&fqdn(a)) != "not found"
    });
    let sees = |client: usize, n: &str| -> bool {
        let own = [Some(a), Some(b), Some(shared), None][client];
        own == Some(n) || n == named || n == shared
    };
    let expected = |allowed: &dyn Fn(usize, &str) -> bool| -> Vec<String> {
        let mut want = Vec::new();
        let mut k = 0;
        for (ci, _) in who.iter().enumerate() {
            for (ni, n) in names.iter().enumerate() {
                // `web` resolves in the searched namespace (A's for no-pod).
                let target = if ni < ns.len() {
                    ns[ni]
                } else {
                    [a, b, shared, a][ci]
                };
                let line = &plain[k];
                k += 1;
                if allowed(ci, target) {
                    want.push(line.clone());
                } else {
                    want.push(format!("{} {n}: not found", who[ci].0));
                }
            }
        }
        want
    };
    let isolated = matrix(&who, &names);
    eprintln!("without the option:\n{plain:#?}\nwith it:\n{isolated:#?}");
    assert_eq!(isolated, expected(&sees), "the policy");

    // A hidden name reads as one that does not exist, to dig as well.
    let (ns0, _) = addrs(0);
    for n in [
        fqdn(b),
        fqdn(private_ns),
        format!("nosuch.{a}.svc.cluster.local."),
    ] {
        assert_eq!(clients[0].dig_status(&ns0, &n), "NXDOMAIN", "{n} from A");
    }
    assert_eq!(clients[0].dig_status(&ns0, &fqdn(shared)), "NOERROR");

    // Labels are followed: the private namespace joins the allowed tier,
    // the shared one leaves it.
    label(rig, private_ns, "dns-tier=infra");
    label(rig, shared, "dns-tier=retired");
    wait_for("the relabelling seen", || {
        clients[1].getent(&fqdn(private_ns)) != "not found"
            && clients[1].getent(&fqdn(shared)) == "not found"
    });
    let relabelled = |client: usize, n: &str| -> bool {
        let own = [Some(a), Some(b), Some(shared), None][client];
        own == Some(n) || n == named || n == private_ns
    };
    assert_eq!(
        matrix(&who, &names),
        expected(&relabelled),
        "after relabelling"
    );
    drop(server);
}

/// The selector without a cluster or network namespaces: Namespaces with
/// labels, a Pod and Services from a `snapshot` file, queried from the
/// Pod's (loopback) address.
#[test]
fn isolate_namespace_labels_from_a_snapshot() {
    let mut objects = String::new();
    for (ns, labels) in [
        ("home", "{}"),
        ("shared", "{dns-tier: shared}"),
        ("infra", "{dns-tier: infra, team: x}"),
        ("legacy", "{dns-tier: shared, legacy: \"true\"}"),
        ("other", "{dns-tier: internal}"),
    ] {
        objects.push_str(&format!(
            "---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {labels}}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: web, namespace: {ns}}}\nspec: {{clusterIP: 10.96.0.{}, ports: [{{name: http, port: 80}}]}}\n",
            objects.len() % 200 + 1
        ));
    }
    let client = common::pod_addr(7);
    objects.push_str(&format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: c, namespace: home}}\nspec: {{containers: [{{name: c, image: none}}]}}\nstatus: {{podIP: {client}}}\n"
    ));
    let corefile = ".:{PORT} {\n    kubernetes cluster.local {\n        snapshot objects.yaml\n        isolate\n        isolate_namespace_labels dns-tier in (shared, infra), !legacy\n        isolate_namespace_labels team=y\n    }\n}\n";
    let server = common::Server::start_with(corefile, &[("objects.yaml", &objects)]);
    let at = SocketAddr::from(([127, 0, 0, 1], server.port));
    for (ns, want) in [
        ("home", "NOERROR"),
        ("shared", "NOERROR"),
        ("infra", "NOERROR"),
        ("legacy", "NXDOMAIN"),
        ("other", "NXDOMAIN"),
    ] {
        let o = common::ask_from(client, at, &format!("web.{ns}.svc.cluster.local."), "A");
        assert_eq!(common::rcode_name(&o), want, "web.{ns} from a Pod of home");
    }
}

#[test]
fn isolate_namespace_labels_setup_errors_name_the_line() {
    let corefile = |body: &str| {
        format!(".:{{PORT}} {{\n    kubernetes cluster.local {{\n        {body}\n    }}\n}}\n")
    };
    for (body, want) in [
        (
            "isolate\n        isolate_namespace_labels team in (a",
            "unable to parse label selector value: 'team in (a'",
        ),
        (
            "isolate\n        isolate_namespace_labels",
            "Wrong argument count",
        ),
        (
            "isolate_namespace_labels team=a",
            "isolate_namespace_labels needs isolate",
        ),
    ] {
        let out = common::config_error(&corefile(body));
        assert!(out.contains(want), "{body}: {out}");
        assert!(out.contains("Corefile:"), "{body}: no file:line in {out}");
    }
}
