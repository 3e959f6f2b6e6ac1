//! Slim objects: only what DNS needs from each Kubernetes kind.
//!
//! Every API object is converted to one of these right after it is decoded (see
//! `convert.rs`); the raw object is dropped at once. Strings that repeat across
//! many objects (namespace, node and port names) are interned `Arc<str>`s, so a cluster with
//! 100k pods in 50 namespaces keeps 50 namespace strings, not 100k.

use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::sync::Arc;

use hashbrown::Equivalent;

/// A Service's `spec.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServiceKind {
    /// `ClusterIP` (also the default when `type` is absent), including headless services.
    ClusterIp,
    /// `NodePort`.
    NodePort,
    /// `LoadBalancer`.
    LoadBalancer,
    /// `ExternalName`: a CNAME to [`Service::external_name`].
    ExternalName,
}

/// Transport protocol of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// TCP (the API default when `protocol` is absent).
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// The API spelling: `TCP`, `UDP`, `SCTP`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }

    /// Parses the API spelling, ignoring ASCII case.
    pub fn parse(s: &str) -> Option<Protocol> {
        [Protocol::Tcp, Protocol::Udp, Protocol::Sctp]
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
    }
}

/// A port of a Service or an EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Port {
    pub(crate) name: Option<Arc<str>>,
    pub(crate) protocol: Protocol,
    pub(crate) port: u16,
}

impl Port {
    /// Builds a port; an empty name is no name.
    pub fn new(name: Option<&str>, protocol: Protocol, port: u16) -> Port {
        Port {
            name: name.filter(|n| !n.is_empty()).map(Arc::from),
            protocol,
            port,
        }
    }
    /// The port's name; unnamed ports get no SRV records.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
    /// The protocol.
    pub fn protocol(&self) -> Protocol {
        self.protocol
    }
    /// The port number (never 0).
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// The fields of a Service that only some services have, boxed to keep [`Service`] small.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ServiceExtra {
    pub(crate) external_name: Option<Box<str>>,
    pub(crate) external_ips: Box<[IpAddr]>,
    pub(crate) external_hostnames: Box<[Box<str>]>,
}

/// A Service, slimmed (CoreDNS `object.Service`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Service {
    pub(crate) namespace: Arc<str>,
    pub(crate) name: Arc<str>,
    pub(crate) kind: ServiceKind,
    pub(crate) headless: bool,
    pub(crate) publish_not_ready: bool,
    pub(crate) has_selector: bool,
    pub(crate) cluster_ips: Box<[IpAddr]>,
    pub(crate) ports: Box<[Port]>,
    pub(crate) extra: Option<Box<ServiceExtra>>,
}

impl Service {
    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// `spec.type`.
    pub fn kind(&self) -> ServiceKind {
        self.kind
    }
    /// `spec.clusterIP` is `None`: answers come from the endpoints.
    pub fn is_headless(&self) -> bool {
        self.headless
    }
    /// `spec.clusterIPs` (or `[spec.clusterIP]`), valid addresses only, in API order
    /// (primary family first). Empty for headless and ExternalName services.
    pub fn cluster_ips(&self) -> &[IpAddr] {
        &self.cluster_ips
    }
    /// `spec.ports`, valid ports only, in API order.
    pub fn ports(&self) -> &[Port] {
        &self.ports
    }
    /// `spec.publishNotReadyAddresses`. CoreDNS itself never reads it (the EndpointSlice
    /// controller folds it into `ready`); it is kept for adapters and debugging.
    pub fn publish_not_ready(&self) -> bool {
        self.publish_not_ready
    }
    /// `spec.selector` is non-empty (the `headless_with_selector` metric label).
    pub fn has_selector(&self) -> bool {
        self.has_selector
    }
    /// `spec.externalName` of an ExternalName service.
    pub fn external_name(&self) -> Option<&str> {
        self.extra.as_ref()?.external_name.as_deref()
    }
    /// `spec.externalIPs` plus the IPs of `status.loadBalancer.ingress`.
    pub fn external_ips(&self) -> &[IpAddr] {
        self.extra.as_ref().map_or(&[], |e| &e.external_ips)
    }
    /// The hostnames of `status.loadBalancer.ingress`.
    pub fn external_hostnames(&self) -> impl Iterator<Item = &str> {
        self.extra
            .iter()
            .flat_map(|e| e.external_hostnames.iter().map(|h| &**h))
    }
}

/// `addressType` of an EndpointSlice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AddressType {
    /// `IPv4`.
    V4,
    /// `IPv6`.
    V6,
    /// `FQDN` (deprecated; its addresses are not IPs and are skipped).
    Fqdn,
}

/// Endpoint conditions, with the API's nil defaults applied
/// (`ready` and `serving`: nil means true; `terminating`: nil means false).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conditions(u8);

impl Conditions {
    const READY: u8 = 1;
    const SERVING: u8 = 2;
    const TERMINATING: u8 = 4;

    /// Builds conditions from the API's optional booleans.
    pub fn new(ready: Option<bool>, serving: Option<bool>, terminating: Option<bool>) -> Self {
        let mut bits = 0;
        if ready.unwrap_or(true) {
            bits |= Self::READY;
        }
        if serving.unwrap_or(true) {
            bits |= Self::SERVING;
        }
        if terminating.unwrap_or(false) {
            bits |= Self::TERMINATING;
        }
        Conditions(bits)
    }
    /// `conditions.ready`: the only condition CoreDNS looks at.
    pub fn ready(self) -> bool {
        self.0 & Self::READY != 0
    }
    /// `conditions.serving`.
    pub fn serving(self) -> bool {
        self.0 & Self::SERVING != 0
    }
    /// `conditions.terminating`.
    pub fn terminating(self) -> bool {
        self.0 & Self::TERMINATING != 0
    }
}

/// One address of an EndpointSlice endpoint. An endpoint with several addresses (the API
/// allows up to 100; controllers write one) becomes several of these, as in CoreDNS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub(crate) ip: IpAddr,
    pub(crate) conditions: Conditions,
    pub(crate) hostname: Option<Box<str>>,
    pub(crate) node_name: Option<Arc<str>>,
    pub(crate) target_pod: Option<Box<str>>,
    /// `zone` and `hints`, shared by the endpoints of a slice that have the same: one
    /// pointer per endpoint address, none when the slice has neither.
    pub(crate) topology: Option<Arc<Topology>>,
}

/// An endpoint's `zone` and `hints.forZones[].name` (interned).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Topology {
    pub(crate) zone: Option<Arc<str>>,
    /// Empty without hints.
    pub(crate) for_zones: Box<[Arc<str>]>,
}

impl Endpoint {
    /// The address.
    pub fn ip(&self) -> IpAddr {
        self.ip
    }
    /// Conditions.
    pub fn conditions(&self) -> Conditions {
        self.conditions
    }
    /// Shorthand for `conditions().ready()`.
    pub fn is_ready(&self) -> bool {
        self.conditions.ready()
    }
    /// `hostname` (valid DNS labels only).
    pub fn hostname(&self) -> Option<&str> {
        self.hostname.as_deref()
    }
    /// `nodeName`.
    pub fn node_name(&self) -> Option<&str> {
        self.node_name.as_deref()
    }
    /// `targetRef.name` when the target is a Pod and the name is shorter than 64 bytes
    /// (what `endpoint_pod_names` uses).
    pub fn target_pod(&self) -> Option<&str> {
        self.target_pod.as_deref()
    }
    /// `zone`: the zone the endpoint runs in.
    pub fn zone(&self) -> Option<&str> {
        self.topology.as_ref()?.zone.as_deref()
    }
    /// `hints.forZones`: the zones the EndpointSlice controller meant this endpoint
    /// for (topology-aware routing); empty when the slice carries no hints.
    pub fn for_zones(&self) -> impl Iterator<Item = &str> {
        self.topology
            .iter()
            .flat_map(|t| t.for_zones.iter().map(|z| &**z))
    }
    /// Whether the endpoint has `hints.forZones`.
    pub fn has_zone_hints(&self) -> bool {
        self.topology
            .as_ref()
            .is_some_and(|t| !t.for_zones.is_empty())
    }
}

/// An EndpointSlice, slimmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointSlice {
    pub(crate) namespace: Arc<str>,
    pub(crate) name: Arc<str>,
    pub(crate) service: Arc<str>,
    pub(crate) address_type: AddressType,
    pub(crate) endpoints: Box<[Endpoint]>,
    pub(crate) ports: Box<[Port]>,
}

impl EndpointSlice {
    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
    /// The slice's own name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The owning service: label `kubernetes.io/service-name`.
    pub fn service(&self) -> &str {
        &self.service
    }
    /// `addressType`.
    pub fn address_type(&self) -> AddressType {
        self.address_type
    }
    /// All endpoint addresses, ready or not.
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }
    /// The slice's ports (shared by all its endpoints). Empty for a portless slice.
    pub fn ports(&self) -> &[Port] {
        &self.ports
    }
}

/// A Pod, slimmed: only pods with an IP are kept (`pods verified`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pod {
    pub(crate) namespace: Arc<str>,
    pub(crate) name: Arc<str>,
    pub(crate) ip: IpAddr,
    pub(crate) ip2: Option<IpAddr>,
    /// `spec.nodeName` (interned).
    pub(crate) node: Option<Arc<str>>,
}

impl Pod {
    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// `status.podIP`: the only address CoreDNS indexes.
    pub fn primary_ip(&self) -> IpAddr {
        self.ip
    }
    /// `status.podIPs`: the primary, then the other family's address if any.
    pub fn ips(&self) -> impl Iterator<Item = IpAddr> {
        std::iter::once(self.ip).chain(self.ip2)
    }
    /// `spec.nodeName`: the node the Pod was scheduled to.
    pub fn node_name(&self) -> Option<&str> {
        self.node.as_deref()
    }
}

/// The label a Node's zone is read from.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The label's name before Kubernetes 1.17, still set by some providers.
pub const LEGACY_ZONE_LABEL: &str = "failure-domain.beta.kubernetes.io/zone";

/// A Node, slimmed: its name and zone label only (watched for `zone_aware`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub(crate) name: Arc<str>,
    pub(crate) zone: Option<Arc<str>>,
}

impl Node {
    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Label [`ZONE_LABEL`], else [`LEGACY_ZONE_LABEL`].
    pub fn zone(&self) -> Option<&str> {
        self.zone.as_deref()
    }
}

/// A Namespace, slimmed: its name and labels (for `namespace_labels` debugging).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Namespace {
    pub(crate) name: Arc<str>,
    pub(crate) labels: Box<[(Box<str>, Box<str>)]>,
}

impl Namespace {
    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Labels, sorted by key.
    pub fn labels(&self) -> impl Iterator<Item = (&str, &str)> {
        self.labels.iter().map(|(k, v)| (&**k, &**v))
    }
    /// One label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }
}

/// Hashes `s` so that strings equal ignoring ASCII case hash the same, without allocating:
/// eight bytes at a time with bit 5 set in every byte (which maps `A`–`Z` onto `a`–`z`; the
/// few other bytes it merges only cost a comparison), folded into one word handed to `state`.
pub(crate) fn hash_lower<H: Hasher>(bytes: &[u8], state: &mut H) {
    const CASE: u64 = 0x2020_2020_2020_2020;
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h.rotate_left(5) ^ (u64::from_le_bytes(w) | CASE)).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ (u64::from_le_bytes(w) | CASE)).wrapping_mul(K);
    }
    state.write_u64(h);
}

/// `a` and `b` are equal ignoring ASCII case; exact equality (the usual case: API names are
/// lowercase, query names are lowercased) is checked first, with a plain comparison.
pub(crate) fn eq_lower(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && (a == b || a.eq_ignore_ascii_case(b))
}

/// Compares two strings by their ASCII-lowercase bytes.
pub(crate) fn cmp_lower(a: &str, b: &str) -> std::cmp::Ordering {
    a.bytes()
        .map(|c| c.to_ascii_lowercase())
        .cmp(b.bytes().map(|c| c.to_ascii_lowercase()))
}

/// `(namespace, name)` of a namespaced object; equality and hashing ignore ASCII case.
#[derive(Clone, Debug)]
pub struct ObjKey {
    pub(crate) namespace: Arc<str>,
    pub(crate) name: Arc<str>,
}

impl ObjKey {
    pub(crate) fn new(namespace: &Arc<str>, name: &Arc<str>) -> Self {
        ObjKey {
            namespace: Arc::clone(namespace),
            name: Arc::clone(name),
        }
    }
    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }
    pub(crate) fn as_ref(&self) -> KeyRef<'_> {
        KeyRef {
            namespace: &self.namespace,
            name: &self.name,
        }
    }
}

impl PartialEq for ObjKey {
    fn eq(&self, other: &Self) -> bool {
        other.as_ref().equivalent(self)
    }
}
impl Eq for ObjKey {}
impl Hash for ObjKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_ref().hash(state);
    }
}
impl PartialOrd for ObjKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ObjKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        cmp_lower(&self.namespace, &other.namespace)
            .then_with(|| cmp_lower(&self.name, &other.name))
    }
}

/// A borrowed lookup key for [`ObjKey`] maps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyRef<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
}

impl<'a> KeyRef<'a> {
    fn bytes(&self) -> KeyBytes<'a> {
        KeyBytes {
            namespace: self.namespace.as_bytes(),
            name: self.name.as_bytes(),
        }
    }
}

impl Hash for KeyRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.bytes().hash(state);
    }
}

/// A borrowed lookup key for [`ObjKey`] maps from raw bytes (DNS labels, which need not be
/// UTF-8); hashes exactly as [`KeyRef`] does.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyBytes<'a> {
    pub(crate) namespace: &'a [u8],
    pub(crate) name: &'a [u8],
}

impl Hash for KeyBytes<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_lower(self.namespace, state);
        hash_lower(self.name, state);
    }
}

impl Equivalent<ObjKey> for KeyBytes<'_> {
    fn equivalent(&self, key: &ObjKey) -> bool {
        eq_lower(self.name, key.name.as_bytes())
            && eq_lower(self.namespace, key.namespace.as_bytes())
    }
}

impl Equivalent<ObjKey> for KeyRef<'_> {
    fn equivalent(&self, key: &ObjKey) -> bool {
        self.bytes().equivalent(key)
    }
}

/// A cluster-scoped name (namespaces); equality and hashing ignore ASCII case.
#[derive(Clone, Debug)]
pub(crate) struct NameKey(pub(crate) Arc<str>);

impl PartialEq for NameKey {
    fn eq(&self, other: &Self) -> bool {
        eq_lower(self.0.as_bytes(), other.0.as_bytes())
    }
}
impl Eq for NameKey {}
impl Hash for NameKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        NameRef(&self.0).hash(state);
    }
}

/// A borrowed lookup key for [`NameKey`] maps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NameRef<'a>(pub(crate) &'a str);

impl Hash for NameRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        NameBytes(self.0.as_bytes()).hash(state);
    }
}
impl Equivalent<NameKey> for NameRef<'_> {
    fn equivalent(&self, key: &NameKey) -> bool {
        NameBytes(self.0.as_bytes()).equivalent(key)
    }
}

/// A borrowed lookup key for [`NameKey`] maps from raw bytes; hashes as [`NameRef`] does.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NameBytes<'a>(pub(crate) &'a [u8]);

impl Hash for NameBytes<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_lower(self.0, state);
    }
}
impl Equivalent<NameKey> for NameBytes<'_> {
    fn equivalent(&self, key: &NameKey) -> bool {
        eq_lower(self.0, key.0.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    fn h(ns: &str, name: &str) -> u64 {
        hashbrown::DefaultHashBuilder::default().hash_one(KeyRef {
            namespace: ns,
            name,
        })
    }

    #[test]
    fn case_insensitive_keys_hash_and_compare_alike() {
        let cases = [
            ("default", "kubernetes"),
            ("Kube-System", "KUBE-DNS"),
            ("a-very-long-namespace-name-1", "Service-Name-Longer-Than-8"),
            ("", ""),
        ];
        let b = hashbrown::DefaultHashBuilder::default();
        for (ns, name) in cases {
            let up = (ns.to_ascii_uppercase(), name.to_ascii_uppercase());
            let lo = (ns.to_ascii_lowercase(), name.to_ascii_lowercase());
            let key = ObjKey::new(&Arc::from(&*lo.0), &Arc::from(&*lo.1));
            let hash = |k: KeyRef<'_>| b.hash_one(k);
            assert_eq!(
                hash(KeyRef {
                    namespace: &up.0,
                    name: &up.1
                }),
                hash(key.as_ref())
            );
            assert!(
                KeyRef {
                    namespace: &up.0,
                    name: &up.1
                }
                .equivalent(&key)
            );
            assert_eq!(
                b.hash_one(NameRef(&up.0)),
                b.hash_one(NameKey(Arc::from(&*lo.0)))
            );
        }
        // Different names differ (no exact rule, but these must not all collide).
        assert_ne!(h("a", "bc"), h("ab", "c"));
        assert_ne!(h("ns", "svc1"), h("ns", "svc2"));
        assert!(
            !KeyRef {
                namespace: "ns",
                name: "svc1"
            }
            .equivalent(&ObjKey::new(&Arc::from("ns"), &Arc::from("svc2")))
        );
        assert!(!eq_lower(b"a@", b"a`"));
        assert!(eq_lower(b"AbC", b"aBc"));
    }
}
