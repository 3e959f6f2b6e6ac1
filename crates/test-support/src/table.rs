//! Table-driven differential tests: one fixture (Kubernetes objects), one
//! Corefile, many queries; each case either agrees or is an intended,
//! documented difference.

use std::fmt;
use std::io;
use std::time::Duration;

use crate::diff::{Comparison, Differential, ServerSpec, TtlMode};
use crate::dns::{Query, Transport};
use crate::rig::Rig;

/// One query of a table.
#[derive(Debug, Clone)]
pub struct Case {
    /// A name for the report.
    pub name: String,
    /// The query.
    pub query: Query,
    /// Also send it over the other transport (UDP and TCP).
    pub both_transports: bool,
    /// TTL mode for this case (default: the table's).
    pub ttl: Option<TtlMode>,
    /// Why the responses are expected to differ: the case then passes when
    /// they differ, and the differences are printed.
    pub intended_difference: Option<String>,
}

impl Case {
    /// A case for `query`, compared over the query's transport.
    pub fn new(name: &str, query: Query) -> Case {
        Case {
            name: name.into(),
            query,
            both_transports: false,
            ttl: None,
            intended_difference: None,
        }
    }

    /// Sends the query over both UDP and TCP.
    pub fn udp_and_tcp(mut self) -> Case {
        self.both_transports = true;
        self
    }

    /// Compares TTLs this way.
    pub fn ttl(mut self, ttl: TtlMode) -> Case {
        self.ttl = Some(ttl);
        self
    }

    /// Marks the case as an intended difference, with the reason.
    pub fn intended_difference(mut self, reason: &str) -> Case {
        self.intended_difference = Some(reason.into());
        self
    }
}

/// What happened to one case.
#[derive(Debug, Clone)]
pub struct CaseResult {
    /// The case's name.
    pub name: String,
    /// The intended-difference reason, if the case had one.
    pub intended_difference: Option<String>,
    /// One comparison per transport.
    pub comparisons: Vec<Comparison>,
}

impl CaseResult {
    /// Whether every transport agreed.
    pub fn agree(&self) -> bool {
        self.comparisons.iter().all(Comparison::agree)
    }

    /// Whether the case failed: a difference that was not intended.
    pub fn failed(&self) -> bool {
        self.intended_difference.is_none() && !self.agree()
    }
}

/// The results of a table.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// One result per case, in order.
    pub cases: Vec<CaseResult>,
}

impl Report {
    /// The cases with unintended differences.
    pub fn failures(&self) -> impl Iterator<Item = &CaseResult> {
        self.cases.iter().filter(|c| c.failed())
    }

    /// Panics with the report unless every difference is intended.
    #[track_caller]
    pub fn assert_ok(&self) {
        let failed = self.failures().count();
        assert!(
            failed == 0,
            "{failed} case(s) with unintended differences\n{self}"
        );
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.cases {
            let status = match (&c.intended_difference, c.agree()) {
                (None, true) => "ok".to_string(),
                (None, false) => "DIFFERENT".to_string(),
                (Some(why), false) => format!("intended difference ({why})"),
                (Some(why), true) => {
                    format!("ok, but marked intended difference ({why}): no longer differs?")
                }
            };
            writeln!(f, "case {}: {status}", c.name)?;
            if !c.agree() || c.failed() {
                for cmp in &c.comparisons {
                    for line in cmp.to_string().lines() {
                        writeln!(f, "    {line}")?;
                    }
                }
            }
        }
        let failed = self.failures().count();
        writeln!(
            f,
            "{} case(s), {failed} with unintended differences",
            self.cases.len()
        )
    }
}

/// A differential table: Kubernetes objects, a Corefile, cases.
///
/// [`Table::run`] applies the objects, then starts both servers (so they
/// start from a synced state), runs every case, stops the servers and
/// deletes the objects.
#[derive(Debug, Clone)]
pub struct Table {
    corefile: String,
    objects: Vec<String>,
    cases: Vec<Case>,
    ttl: TtlMode,
    settle: Duration,
    reference: Option<ServerSpec>,
    candidate: Option<ServerSpec>,
    keep_objects: bool,
    twice: bool,
}

impl Table {
    /// A table on this Corefile template (see [`ServerSpec`]).
    pub fn new(corefile_template: &str) -> Table {
        Table {
            corefile: corefile_template.into(),
            objects: Vec::new(),
            cases: Vec::new(),
            ttl: TtlMode::Exact,
            settle: Duration::from_secs(3),
            reference: None,
            candidate: None,
            keep_objects: false,
            twice: false,
        }
    }

    /// Kubernetes objects (YAML) to apply before the servers start.
    pub fn objects(mut self, yaml: &str) -> Table {
        self.objects.push(yaml.into());
        self
    }

    /// Adds a case.
    pub fn case(mut self, case: Case) -> Table {
        self.cases.push(case);
        self
    }

    /// Default TTL mode (default: exact).
    pub fn ttl(mut self, ttl: TtlMode) -> Table {
        self.ttl = ttl;
        self
    }

    /// How long a case is retried until both servers agree (default 3 s):
    /// covers the time both need to see the objects through their watches.
    pub fn settle(mut self, settle: Duration) -> Table {
        self.settle = settle;
        self
    }

    /// Uses another reference server (default: the rig's CoreDNS on the
    /// table's Corefile).
    pub fn reference(mut self, spec: ServerSpec) -> Table {
        self.reference = Some(spec);
        self
    }

    /// Uses another candidate server (default: clusterdns on the table's
    /// Corefile).
    pub fn candidate(mut self, spec: ServerSpec) -> Table {
        self.candidate = Some(spec);
        self
    }

    /// Leaves the objects in place after the run.
    pub fn keep_objects(mut self) -> Table {
        self.keep_objects = true;
        self
    }

    /// Asks every query a second time, right after the first, and compares
    /// both replies: the second is the one a server that remembers its
    /// answers (clusterdns's kubernetes answer memo) replays.
    pub fn twice(mut self) -> Table {
        self.twice = true;
        self
    }

    /// Runs the table. Errors are setup failures (kubectl, starting a server).
    pub fn run(&self, rig: &Rig) -> io::Result<Report> {
        for yaml in &self.objects {
            rig.apply_yaml(yaml)?;
        }
        let result = self.run_cases(rig);
        if !self.keep_objects {
            for yaml in self.objects.iter().rev() {
                if let Err(e) = rig.delete_yaml(yaml) {
                    eprintln!("deleting the table's objects: {e}");
                }
            }
        }
        let report = result?;
        eprint!("{report}");
        Ok(report)
    }

    fn run_cases(&self, rig: &Rig) -> io::Result<Report> {
        let reference = match &self.reference {
            Some(s) => s.clone(),
            None => ServerSpec::coredns(rig, &self.corefile),
        };
        let candidate = match &self.candidate {
            Some(s) => s.clone(),
            None => ServerSpec::clusterdns(&self.corefile)?,
        };
        let diff = Differential::between(Some(rig), reference, candidate)?.with_ttl(self.ttl);
        let mut report = Report::default();
        for case in &self.cases {
            let ttl = case.ttl.unwrap_or(self.ttl);
            let mut queries = vec![case.query.clone()];
            if case.both_transports {
                let other = match case.query.transport {
                    Transport::Udp => Transport::Tcp,
                    Transport::Tcp => Transport::Udp,
                };
                queries.push(case.query.clone().transport(other));
            }
            if self.twice {
                queries.extend(queries.clone());
            }
            let comparisons = queries
                .iter()
                .map(|q| diff.query_settled_with(q, ttl, self.settle))
                .collect();
            report.cases.push(CaseResult {
                name: case.name.clone(),
                intended_difference: case.intended_difference.clone(),
                comparisons,
            });
        }
        Ok(report)
    }
}
