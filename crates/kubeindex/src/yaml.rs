//! Offline source: the index fed from Kubernetes objects in YAML, as
//! `kubectl get ns,svc,endpointslices,pods -A -o yaml` prints them (one `List` with `items`),
//! or as multi-document YAML of individual objects (`---` separated), or any mix.
//!
//! Loading is a relist of every kind: objects absent from the YAML are removed, so loading
//! the same file again after editing it is a reload. A YAML without any Namespace object
//! marks namespaces as not followed ([`Snapshot::namespaces_watched`](crate::Snapshot::namespaces_watched)). Objects of other kinds (Deployments,
//! core `Endpoints`, ...) are ignored; objects that fail to decode are skipped and counted.

use std::path::Path;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use serde::Deserialize as _;
use serde_norway::Value;

use crate::error::Error;
use crate::hooks::{Kind, SkipReason};
use crate::index::{Index, Scope};

/// What a load found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Services decoded.
    pub services: usize,
    /// EndpointSlices decoded.
    pub endpoint_slices: usize,
    /// Pods decoded.
    pub pods: usize,
    /// Namespaces decoded.
    pub namespaces: usize,
    /// Nodes decoded.
    pub nodes: usize,
    /// Objects of other kinds, ignored.
    pub ignored: usize,
    /// Objects of a known kind that failed to decode.
    pub undecodable: usize,
}

fn flatten(value: Value, out: &mut Vec<Value>) {
    match value {
        Value::Null => {}
        Value::Mapping(mut map) => {
            let is_list = map
                .get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List"));
            if is_list {
                if let Some(Value::Sequence(items)) = map.remove("items") {
                    for item in items {
                        flatten(item, out);
                    }
                }
            } else {
                out.push(Value::Mapping(map));
            }
        }
        other => out.push(other),
    }
}

/// Parses `text` and replaces the index's content with its objects; marks the index synced
/// and publishes. On a YAML syntax error nothing is changed.
pub fn load_str(index: &mut Index, text: &str) -> Result<LoadReport, Error> {
    let mut objects = Vec::new();
    for doc in serde_norway::Deserializer::from_str(text) {
        flatten(Value::deserialize(doc)?, &mut objects);
    }
    let mut report = LoadReport::default();
    for kind in Kind::ALL {
        index.relist_begin(kind, &Scope::All);
    }
    for obj in objects {
        let kind = obj
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        match kind.as_str() {
            "Service" => {
                decode::<core::Service>(index, obj, &mut report.services, &mut report.undecodable)
            }
            "EndpointSlice" => decode::<discovery::EndpointSlice>(
                index,
                obj,
                &mut report.endpoint_slices,
                &mut report.undecodable,
            ),
            "Pod" => decode::<core::Pod>(index, obj, &mut report.pods, &mut report.undecodable),
            "Namespace" => decode::<core::Namespace>(
                index,
                obj,
                &mut report.namespaces,
                &mut report.undecodable,
            ),
            "Node" => decode::<core::Node>(index, obj, &mut report.nodes, &mut report.undecodable),
            _ => {
                tracing::debug!(kind = %kind.escape_debug(), "ignoring object of another kind");
                report.ignored += 1;
            }
        }
    }
    for kind in Kind::ALL {
        index.relist_end(kind, &Scope::All);
    }
    // A dump without Namespace objects (`kubectl get svc,endpointslices`) must not make every
    // namespace look missing.
    index.set_namespaces_watched(report.namespaces > 0);
    index.mark_synced();
    index.publish();
    Ok(report)
}

fn decode<K>(index: &mut Index, value: Value, count: &mut usize, bad: &mut usize)
where
    K: crate::index::IndexedObject + serde::de::DeserializeOwned,
{
    match serde_norway::from_value::<K>(value) {
        Ok(obj) => {
            *count += 1;
            index.relist_apply(&Scope::All, obj);
        }
        Err(err) => {
            tracing::warn!(kind = %K::KIND, error = %err, "skipping undecodable object");
            index.note_skip(K::KIND, SkipReason::Undecodable);
            *bad += 1;
        }
    }
}

/// Reads `path` and loads it with [`load_str`].
pub fn load_file(index: &mut Index, path: &Path) -> Result<LoadReport, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    load_str(index, &text)
}
