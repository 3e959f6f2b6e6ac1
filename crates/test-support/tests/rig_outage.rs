//! The rig's outage switches: stopping and starting the apiserver, and
//! compacting etcd so that resumed watches get 410 Gone. These hold the rig
//! exclusively (other tests wait).

use std::time::{Duration, Instant};

use clusterdns_test_support::{Differential, Query, ServerSpec, rig_or_skip};

const COREFILE: &str = "\
.:@PORT@ {
    bind 127.0.0.1
    ready 127.0.0.1:@PORT_READY@
    kubernetes cluster.local {
        kubeconfig @KUBECONFIG@
    }
}
";

fn service(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  ports: [{{port: 80, protocol: TCP}}]\n"
    )
}

/// The `metadata.resourceVersion` of a raw LIST response (its first one).
fn list_resource_version(json: &str) -> String {
    let key = "\"resourceVersion\":\"";
    let start = json.find(key).expect("a resourceVersion in the list") + key.len();
    let rv: String = json[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    assert!(!rv.is_empty(), "no resourceVersion in {json}");
    rv
}

#[test]
fn apiserver_outage_and_etcd_compaction() {
    let rig = rig_or_skip!(exclusive);
    let ns = rig.namespace("outage").unwrap();
    rig.apply_yaml(&service(ns.name(), "before")).unwrap();
    let spec = ServerSpec::coredns(&rig, COREFILE);
    let diff = Differential::between(
        Some(&rig),
        spec.clone().named("coredns-a"),
        spec.named("coredns-b"),
    )
    .unwrap();
    let before = Query::new(&format!("before.{}.svc.cluster.local", ns.name()), "A");
    let c = diff.query_settled(&before, Duration::from_secs(5));
    c.assert_agree();
    assert_eq!(c.reference.response().unwrap().answer.len(), 1, "{c}");

    let list = rig
        .kubectl(&[
            "get",
            "--raw",
            &format!("/api/v1/namespaces/{}/services", ns.name()),
        ])
        .unwrap();
    let old_rv = list_resource_version(&list);

    rig.apiserver_stop().unwrap();
    let down = rig.kubectl(&["get", "ns", "--request-timeout=2s"]);
    assert!(
        down.is_err(),
        "the apiserver still answers after apiserver_stop"
    );
    // CoreDNS keeps serving what it knows during the outage.
    diff.query(&before).assert_agree();
    assert_eq!(
        diff.query(&before)
            .reference
            .response()
            .unwrap()
            .answer
            .len(),
        1
    );

    let rev = rig.etcd_compact().unwrap();
    assert!(rev > 0);
    rig.apiserver_start().unwrap();
    rig.kubectl(&["get", "ns"]).unwrap();

    // Both servers reconnect and see a Service created after the outage.
    rig.apply_yaml(&service(ns.name(), "after")).unwrap();
    let after = Query::new(&format!("after.{}.svc.cluster.local", ns.name()), "A");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let c = diff.query(&after);
        if c.agree() && c.reference.response().is_some_and(|r| r.answer.len() == 1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not answered after the outage:\n{c}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }

    // A watch resumed from before the compaction gets 410 Gone.
    let path = format!(
        "/api/v1/namespaces/{}/services?watch=1&resourceVersion={old_rv}&timeoutSeconds=2",
        ns.name()
    );
    let out = match rig.kubectl(&["get", "--raw", &path]) {
        Ok(stdout) => stdout,
        Err(e) => e.to_string(),
    };
    assert!(
        out.contains("\"code\":410")
            || out.contains("too old resource version")
            || out.contains("Gone"),
        "expected 410 Gone for a watch from {old_rv}, got: {out}"
    );
}
