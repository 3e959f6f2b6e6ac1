//! Upstream's interception rules (iptables mode): for every `-localip` the
//! twelve NOTRACK/ACCEPT rules of node-cache's `initIptables`, argument for
//! argument and comment for comment, so an upstream node-cache and ours
//! find and delete each other's rules.
//!
//! They are installed with `iptables`/`ip6tables` (the family of the
//! first address), with the backend chosen as kubernetes-sigs'
//! iptables-wrappers chooses it. Errors are logged and counted, never
//! fatal: the cache keeps answering whatever the rules' state.

use std::net::IpAddr;
use std::sync::Arc;

use clusterdns_observe::{error, info, warning};
use tokio::process::Command;

use crate::metrics::SetupMetrics;

/// Comment of the NOTRACK rules.
pub const SKIP_CONNTRACK: &str = "NodeLocal DNS Cache: skip conntrack";
/// Comment of the ACCEPT rules.
pub const ALLOW_DNS: &str = "NodeLocal DNS Cache: allow DNS traffic";

/// One rule: table, chain and the arguments after them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `raw` or `filter`.
    pub table: &'static str,
    /// `PREROUTING`, `INPUT` or `OUTPUT`.
    pub chain: &'static str,
    /// The match and target, as upstream writes them.
    pub args: Vec<String>,
}

impl Rule {
    /// Whether this is one of the filter table's ACCEPT rules (the rest
    /// are the raw table's NOTRACK rules). Only the NOTRACK rules
    /// intercept: an ACCEPT rule left behind after a crash accepts DNS to
    /// an address nothing else answers, and blackholes nothing.
    pub fn is_accept(&self) -> bool {
        self.table == "filter"
    }
}

impl std::fmt::Display for Rule {
    /// Go's `%v` of upstream's rule struct, as its log lines show it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{{{} {} [{}]}}",
            self.table,
            self.chain,
            self.args.join(" ")
        )
    }
}

/// Upstream's rules for these addresses, DNS port and health port, in
/// upstream's order.
pub fn rules(ips: &[IpAddr], dns_port: u16, health_port: u16) -> Vec<Rule> {
    let mut out = Vec::with_capacity(ips.len() * 12);
    let p = dns_port.to_string();
    let h = health_port.to_string();
    for ip in ips {
        let ip = ip.to_string();
        let r = |table: &'static str,
                 chain: &'static str,
                 proto: &str,
                 dir: &str,
                 port_flag: &str,
                 port: &str,
                 target: &str,
                 comment: &str| Rule {
            table,
            chain,
            args: [
                "-p",
                proto,
                dir,
                &ip,
                port_flag,
                port,
                "-j",
                target,
                "-m",
                "comment",
                "--comment",
                comment,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        };
        let (nt, ac) = (SKIP_CONNTRACK, ALLOW_DNS);
        out.extend([
            r(
                "raw",
                "PREROUTING",
                "tcp",
                "-d",
                "--dport",
                &p,
                "NOTRACK",
                nt,
            ),
            r(
                "raw",
                "PREROUTING",
                "udp",
                "-d",
                "--dport",
                &p,
                "NOTRACK",
                nt,
            ),
            r("filter", "INPUT", "tcp", "-d", "--dport", &p, "ACCEPT", ac),
            r("filter", "INPUT", "udp", "-d", "--dport", &p, "ACCEPT", ac),
            r("raw", "OUTPUT", "tcp", "-s", "--sport", &p, "NOTRACK", nt),
            r("raw", "OUTPUT", "udp", "-s", "--sport", &p, "NOTRACK", nt),
            r("filter", "OUTPUT", "tcp", "-s", "--sport", &p, "ACCEPT", ac),
            r("filter", "OUTPUT", "udp", "-s", "--sport", &p, "ACCEPT", ac),
            r("raw", "OUTPUT", "tcp", "-d", "--dport", &p, "NOTRACK", nt),
            r("raw", "OUTPUT", "udp", "-d", "--dport", &p, "NOTRACK", nt),
            r("raw", "OUTPUT", "tcp", "-d", "--dport", &h, "NOTRACK", nt),
            r("raw", "OUTPUT", "tcp", "-s", "--sport", &h, "NOTRACK", nt),
        ]);
    }
    out
}

/// Which iptables backend the node uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `iptables-legacy` (x_tables).
    Legacy,
    /// `iptables-nft` (nf_tables).
    Nft,
    /// Only a plain `iptables` binary: whatever it is.
    Default,
}

/// The binaries for one family and backend.
#[derive(Debug, Clone)]
pub struct Iptables {
    bin: String,
    save: String,
    backend: Backend,
}

async fn run(bin: &str, args: &[&str]) -> Option<std::process::Output> {
    Command::new(bin).args(args).output().await.ok()
}

/// Counts lines of `save -t mangle` naming kubelet's hint chains, and the
/// rule lines of a full save, as iptables-wrappers does.
async fn save_counts(saves: &[String]) -> (usize, usize) {
    let mut hints = 0;
    let mut rules = 0;
    for s in saves {
        if let Some(o) = run(s, &["-t", "mangle"]).await {
            hints += String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| {
                    l.starts_with(":KUBE-IPTABLES-HINT") || l.starts_with(":KUBE-KUBELET-CANARY")
                })
                .count();
        }
        if let Some(o) = run(s, &[]).await {
            rules += String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.starts_with('-'))
                .count();
        }
    }
    (hints, rules)
}

fn exists(bin: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
}

impl Iptables {
    /// Picks the binaries for `ipv6` or IPv4. The backend is the one whose
    /// tables hold kubelet's `KUBE-IPTABLES-HINT`/`KUBE-KUBELET-CANARY`
    /// chains (nft first), else the one holding more rules (nft on a
    /// tie), as iptables-wrappers decides; `force` skips the detection.
    pub async fn detect(ipv6: bool, force: Option<Backend>) -> Self {
        let base = if ipv6 { "ip6tables" } else { "iptables" };
        let have = |b: &str| exists(&format!("{base}-{b}"));
        let backend = match force {
            Some(b) => b,
            None if !(have("legacy") && have("nft")) => {
                if have("nft") {
                    Backend::Nft
                } else if have("legacy") {
                    Backend::Legacy
                } else {
                    Backend::Default
                }
            }
            None => {
                let saves =
                    |b: &str| vec![format!("iptables-{b}-save"), format!("ip6tables-{b}-save")];
                let (nft_hints, nft_rules) = save_counts(&saves("nft")).await;
                let (legacy_hints, legacy_rules) = save_counts(&saves("legacy")).await;
                if nft_hints > 0 {
                    Backend::Nft
                } else if legacy_hints > 0 || legacy_rules > nft_rules {
                    Backend::Legacy
                } else {
                    Backend::Nft
                }
            }
        };
        let suffix = match backend {
            Backend::Legacy => "-legacy",
            Backend::Nft => "-nft",
            Backend::Default => "",
        };
        Iptables {
            bin: format!("{base}{suffix}"),
            save: format!("{base}{suffix}-save"),
            backend,
        }
    }

    /// Whether the binary is on `PATH` at all.
    pub fn available(&self) -> bool {
        exists(&self.bin)
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The binary in use (`iptables-nft`, …).
    pub fn binary(&self) -> &str {
        &self.bin
    }

    /// Runs `BIN -w 5 OP CHAIN -t TABLE ARGS`: Ok(true) on exit 0,
    /// Ok(false) on exit 1 (for `-C`: absent), else the error text.
    async fn op(&self, op: &str, r: &Rule) -> Result<bool, String> {
        let mut args = vec!["-w", "5", op, r.chain, "-t", r.table];
        args.extend(r.args.iter().map(String::as_str));
        let out = Command::new(&self.bin)
            .args(&args)
            .output()
            .await
            .map_err(|e| format!("{}: {e}", self.bin))?;
        match out.status.code() {
            Some(0) => Ok(true),
            Some(1) if op == "-C" => Ok(false),
            _ => Err(format!(
                "{} {}: {}",
                self.bin,
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )),
        }
    }

    /// The rule lines of `save -t TABLE` (`-A …`).
    pub async fn save(&self, table: &str) -> Result<Vec<String>, String> {
        let out = Command::new(&self.save)
            .args(["-t", table])
            .output()
            .await
            .map_err(|e| format!("{}: {e}", self.save))?;
        if !out.status.success() {
            return Err(format!(
                "{} -t {table}: {}",
                self.save,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("-A "))
            .map(str::to_string)
            .collect())
    }
}

/// Installs, re-ensures and removes one set of rules.
#[derive(Debug, Clone)]
pub struct RuleSet {
    ipt: Arc<Iptables>,
    rules: Vec<Rule>,
    metrics: SetupMetrics,
}

/// What one ensure pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Ensured {
    /// Rules that were missing and were inserted.
    pub added: usize,
    /// Duplicate copies deleted.
    pub deduplicated: usize,
    /// Commands that failed.
    pub errors: usize,
}

impl RuleSet {
    /// The rules for `ips`, applied with `ipt`.
    pub fn new(ipt: Iptables, rules: Vec<Rule>, metrics: SetupMetrics) -> Self {
        RuleSet {
            ipt: Arc::new(ipt),
            rules,
            metrics,
        }
    }

    /// The rules.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The iptables in use.
    pub fn iptables(&self) -> &Iptables {
        &self.ipt
    }

    /// Splits the set into its ACCEPT rules and its NOTRACK rules, both
    /// applied with the same iptables (crash-safe mode keeps the first
    /// and removes the second).
    pub fn partition(self) -> (RuleSet, RuleSet) {
        let (accept, notrack) = self.rules.into_iter().partition(Rule::is_accept);
        let part = |rules| RuleSet {
            ipt: self.ipt.clone(),
            rules,
            metrics: self.metrics.clone(),
        };
        (part(accept), part(notrack))
    }

    /// The rules in the order they go in (`going_in`) or come out (the
    /// reverse), in three stages, upstream's order within each (so within
    /// one chain it is upstream's):
    /// 1. The ACCEPT rules, before any NOTRACK rule and out after all of
    ///    them: where the node's policy drops, a query that a NOTRACK rule
    ///    untracked is never there without its ACCEPT rule.
    /// 2. The OUTPUT chain's NOTRACK rules, among them those of our
    ///    replies, before the PREROUTING ones of the Pods' queries and out
    ///    after them. A Pod's query untracked while our reply is tracked
    ///    leaves a conntrack entry from our address to the Pod's port
    ///    without kube-proxy's NAT; once we stop, a new socket the kernel
    ///    gives that port within the entry's timeout reaches an address
    ///    nobody serves, every retry of it too (a glibc lookup at the
    ///    kube-dns ClusterIP failing after 10 s). The teardown deletes
    ///    such entries (see `conntrack`); this order makes fewer.
    /// 3. The PREROUTING NOTRACK rules.
    fn ordered(&self, going_in: bool) -> impl Iterator<Item = &Rule> {
        fn stage(r: &Rule) -> u8 {
            if r.is_accept() {
                0
            } else if r.chain == "OUTPUT" {
                1
            } else {
                2
            }
        }
        let stages: [u8; 3] = if going_in { [0, 1, 2] } else { [2, 1, 0] };
        stages
            .into_iter()
            .flat_map(move |s| self.rules.iter().filter(move |r| stage(r) == s))
    }

    fn count_error(&self, e: &str) {
        let kind = if e.contains("holding the xtables lock") {
            "iptables_lock"
        } else {
            "iptables"
        };
        self.metrics.error(kind);
        error!("", "Error checking/adding iptables rule: {e}");
    }

    /// Upstream's `EnsureRule(Prepend, …)` for every rule: `-C`, then `-I`
    /// when absent, logging "Added back". Then copies of one rule (a flaky
    /// `-C`, kubernetes/dns#568, or two agents racing) are deleted down to
    /// one, so the rules never pile up.
    pub async fn ensure(&self) -> Ensured {
        let mut done = Ensured::default();
        for r in self.ordered(true) {
            match self.ipt.op("-C", r).await {
                Ok(true) => {}
                Ok(false) => match self.ipt.op("-I", r).await {
                    Ok(_) => {
                        done.added += 1;
                        info!("", "Added back nodelocaldns rule - {r}");
                    }
                    Err(e) => {
                        done.errors += 1;
                        self.count_error(&e);
                    }
                },
                Err(e) => {
                    done.errors += 1;
                    self.count_error(&e);
                }
            }
        }
        match self.dedup().await {
            Ok(n) => done.deduplicated = n,
            Err(e) => {
                done.errors += 1;
                self.count_error(&e);
            }
        }
        done
    }

    /// Deletes all but one copy of every rule line carrying our comments.
    async fn dedup(&self) -> Result<usize, String> {
        let mut removed = 0;
        for table in ["raw", "filter"] {
            let lines = self.ipt.save(table).await?;
            let mut seen: Vec<&str> = Vec::new();
            for l in &lines {
                if !(l.contains(SKIP_CONNTRACK) || l.contains(ALLOW_DNS)) {
                    continue;
                }
                if !seen.contains(&l.as_str()) {
                    seen.push(l);
                    continue;
                }
                let words = split_save_line(l);
                let Some((chain, args)) = words.get(1).zip(words.get(2..)) else {
                    continue;
                };
                let mut argv = vec!["-w", "5", "-D", chain, "-t", table];
                argv.extend(args.iter().map(String::as_str));
                let out = Command::new(&self.ipt.bin)
                    .args(&argv)
                    .output()
                    .await
                    .map_err(|e| e.to_string())?;
                if !out.status.success() {
                    return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
                }
                removed += 1;
                warning!("", "Removed a duplicate nodelocaldns rule - {l}");
            }
        }
        Ok(removed)
    }

    /// How many of the rules are there (`-C`); errors count as absent.
    pub async fn present(&self) -> usize {
        let mut n = 0;
        for r in &self.rules {
            if let Ok(true) = self.ipt.op("-C", r).await {
                n += 1;
            }
        }
        n
    }

    /// Deletes every rule, every copy of it, as upstream's teardown does
    /// (without its re-adding loop). Errors are logged and counted.
    pub async fn remove(&self) -> usize {
        let mut removed = 0;
        for r in self.ordered(false) {
            // Bounded: a rule that cannot be deleted must not hang the exit.
            for _ in 0..64 {
                match self.ipt.op("-C", r).await {
                    Ok(true) => match self.ipt.op("-D", r).await {
                        Ok(_) => removed += 1,
                        Err(e) => {
                            self.count_error(&e);
                            break;
                        }
                    },
                    Ok(false) => break,
                    Err(e) => {
                        self.count_error(&e);
                        break;
                    }
                }
            }
        }
        removed
    }
}

/// Splits an `iptables-save` line into words, honouring its double quotes.
fn split_save_line(l: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut any = false;
    let mut chars = l.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            '\\' if quoted => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            ' ' if !quoted => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            c => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twelve_rules_per_address_as_upstream() {
        let ip: IpAddr = "169.254.20.10".parse().expect("ip");
        let r = rules(&[ip], 53, 8080);
        assert_eq!(r.len(), 12);
        assert_eq!(
            r[0].to_string(),
            "{raw PREROUTING [-p tcp -d 169.254.20.10 --dport 53 -j NOTRACK -m comment --comment NodeLocal DNS Cache: skip conntrack]}"
        );
        assert_eq!(
            r[11].to_string(),
            "{raw OUTPUT [-p tcp -s 169.254.20.10 --sport 8080 -j NOTRACK -m comment --comment NodeLocal DNS Cache: skip conntrack]}"
        );
    }

    #[test]
    fn accept_then_output_then_prerouting_rules_go_in_and_come_out_reversed() {
        let ip: IpAddr = "10.96.0.10".parse().expect("ip");
        let set = RuleSet::new(
            Iptables {
                bin: "iptables".into(),
                save: "iptables-save".into(),
                backend: Backend::Default,
            },
            rules(&[ip], 53, 8080),
            SetupMetrics::new(&clusterdns_observe::metrics::Registry::new()),
        );
        let chains = |going_in| {
            set.ordered(going_in)
                .map(|r| format!("{} {}", r.table, r.chain))
                .collect::<Vec<_>>()
        };
        let going_in = chains(true);
        let mut want = vec![
            "filter INPUT",
            "filter INPUT",
            "filter OUTPUT",
            "filter OUTPUT",
        ];
        want.extend(["raw OUTPUT"; 6]);
        want.extend(["raw PREROUTING"; 2]);
        assert_eq!(going_in, want);
        // Out: PREROUTING first, then OUTPUT, then ACCEPT.
        let out = chains(false);
        assert_eq!(out[..2], going_in[10..]);
        assert_eq!(out[2..8], going_in[4..10]);
        assert_eq!(out[8..], going_in[..4]);
        // Within a chain, upstream's order, both ways.
        for going_in in [true, false] {
            for (table, chain) in [
                ("filter", "INPUT"),
                ("filter", "OUTPUT"),
                ("raw", "OUTPUT"),
                ("raw", "PREROUTING"),
            ] {
                let here = |r: &&Rule| r.table == table && r.chain == chain;
                let ours: Vec<&Rule> = set.ordered(going_in).filter(here).collect();
                let upstream: Vec<&Rule> = set.rules().iter().filter(here).collect();
                assert_eq!(ours, upstream, "{table} {chain}");
            }
        }
        let (accept, notrack) = set.partition();
        assert_eq!((accept.rules().len(), notrack.rules().len()), (4, 8));
        assert!(accept.rules().iter().all(Rule::is_accept));
        assert!(!notrack.rules().iter().any(Rule::is_accept));
    }

    #[test]
    fn save_lines_split() {
        assert_eq!(
            split_save_line(r#"-A INPUT -d 1.2.3.4/32 -m comment --comment "a \"b\" c" -j ACCEPT"#),
            [
                "-A",
                "INPUT",
                "-d",
                "1.2.3.4/32",
                "-m",
                "comment",
                "--comment",
                "a \"b\" c",
                "-j",
                "ACCEPT"
            ]
        );
    }
}
