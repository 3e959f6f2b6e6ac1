//! Beyond upstream: one autoscaler at a time scales (cluster-proportional-autoscaler#112).
//! The holder of a `coordination.k8s.io` Lease named after the ConfigMap polls; the others
//! wait. A holder that stops renewing is replaced once its lease has not changed for the
//! lease's duration, measured on the waiting replica's own clock (as client-go's leader
//! election does), so clocks need not agree. Without RBAC on Leases (upstream's ClusterRole)
//! the autoscaler runs as upstream does, without election.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::log::{error, info};

/// This replica's side of the election.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    namespace: String,
    identity: String,
    duration: Duration,
    /// Leases are forbidden: every replica scales, as upstream.
    disabled: bool,
    leader: bool,
    /// The lease's resourceVersion as last seen, and when it was first seen.
    observed: Option<(String, Instant)>,
}

fn now() -> MicroTime {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    MicroTime(jiff::Timestamp::from_microsecond(micros).unwrap_or(jiff::Timestamp::UNIX_EPOCH))
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == code)
}

impl Elector {
    /// An elector for the Lease `name` in `namespace`, held for `duration` between renewals.
    pub fn new(client: kube::Client, namespace: &str, name: &str, duration: Duration) -> Elector {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "autoscaler".into());
        Elector {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            identity: format!("{host}_{}", std::process::id()),
            duration,
            disabled: false,
            leader: false,
            observed: None,
        }
    }

    /// Whether this replica may scale now: it holds (or has just taken) the Lease.
    pub async fn lead(&mut self) -> bool {
        if self.disabled {
            return true;
        }
        let lead = match self.step().await {
            Ok(lead) => lead,
            Err(e) if is_status(&e, 403) => {
                error!(
                    "Leases are forbidden ({e}): running without leader election, as cluster-proportional-autoscaler does"
                );
                self.disabled = true;
                return true;
            }
            Err(e) => {
                error!("Lease {}/{}: {e}", self.namespace, self.name);
                false
            }
        };
        if lead != self.leader {
            if lead {
                info!(
                    0,
                    "Holding lease {}/{} as {}", self.namespace, self.name, self.identity
                );
            } else {
                info!(
                    0,
                    "Lost lease {}/{}: not scaling", self.namespace, self.name
                );
            }
        }
        self.leader = lead;
        lead
    }

    fn spec(&self, now: MicroTime, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let ours = previous.is_some_and(|p| p.holder_identity.as_deref() == Some(&self.identity));
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX),
            ),
            acquire_time: if ours {
                previous.and_then(|p| p.acquire_time.clone())
            } else {
                Some(now.clone())
            },
            renew_time: Some(now),
            lease_transitions: match previous {
                None => Some(0),
                Some(p) if ours => p.lease_transitions,
                Some(p) => Some(p.lease_transitions.unwrap_or(0).saturating_add(1)),
            },
            ..LeaseSpec::default()
        }
    }

    async fn step(&mut self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now(), None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                // Another replica created it first.
                Err(e) if is_status(&e, 409) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        let seen = match &self.observed {
            Some((v, at)) if *v == version => *at,
            _ => {
                let at = Instant::now();
                self.observed = Some((version, at));
                at
            }
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let held = spec.lease_duration_seconds.map_or(self.duration, |s| {
            Duration::from_secs(s.max(0).unsigned_abs().into())
        });
        if !holder.is_empty() && holder != self.identity && seen.elapsed() < held {
            return Ok(false);
        }
        lease.spec = Some(self.spec(now(), Some(&spec)));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            // Renewed or taken by another replica in between.
            Err(e) if is_status(&e, 409) => Ok(false),
            Err(e) => Err(e),
        }
    }
}
