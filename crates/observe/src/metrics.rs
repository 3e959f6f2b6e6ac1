//! A small, lock-free-on-update Prometheus registry.
//!
//! Counters, gauges and histograms are atomics. A labelled family resolves
//! a label set to its series once (taking a lock and allocating); hot
//! paths keep the returned `Arc` handle and update it with a single atomic
//! operation. The registry outlives reloads: `get_or_register` hands back
//! the family a previous configuration created, so counters never reset.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

/// A metric family that can render itself in the text exposition format.
pub trait Collector: Send + Sync + Any {
    /// The full metric name, e.g. `coredns_dns_requests_total`.
    fn name(&self) -> &str;
    /// Appends `# HELP`, `# TYPE` and the samples.
    fn render(&self, out: &mut String);
    /// For downcasting in [`Registry::get_or_register`].
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// All metric families of the process.
#[derive(Default)]
pub struct Registry {
    families: Mutex<Vec<Arc<dyn Collector>>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Returns the family called `name`, creating it with `make` the
    /// first time. Panics never: a family registered under the same name
    /// with another type is replaced by a fresh one.
    pub fn get_or_register<T: Collector>(&self, name: &str, make: impl FnOnce() -> T) -> Arc<T> {
        let mut fams = self.families.lock();
        if let Some(pos) = fams.iter().position(|c| c.name() == name) {
            if let Ok(t) = fams[pos].clone().as_any().downcast::<T>() {
                return t;
            }
            fams.remove(pos);
        }
        let t = Arc::new(make());
        fams.push(t.clone());
        t
    }

    /// Renders every family, sorted by name.
    pub fn render(&self) -> String {
        let mut fams: Vec<Arc<dyn Collector>> = self.families.lock().clone();
        fams.sort_by(|a, b| a.name().cmp(b.name()));
        let mut out = String::with_capacity(4096);
        for f in fams {
            f.render(&mut out);
        }
        out
    }
}

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter {
    value: AtomicU64,
    used: AtomicBool,
}

impl Counter {
    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.value.fetch_add(n, Ordering::Relaxed);
        if !self.used.load(Ordering::Relaxed) {
            self.used.store(true, Ordering::Relaxed);
        }
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.value.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down (stored as `f64` bits).
#[derive(Debug, Default)]
pub struct Gauge {
    bits: AtomicU64,
}

impl Gauge {
    /// Sets the value.
    pub fn set(&self, v: f64) {
        self.bits.store(v.to_bits(), Ordering::Relaxed);
    }

    /// Adds `d` (may be negative).
    pub fn add(&self, d: f64) {
        let _ = self
            .bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some((f64::from_bits(b) + d).to_bits())
            });
    }

    /// The current value.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.bits.load(Ordering::Relaxed))
    }
}

/// A histogram with fixed upper bounds.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    sum_bits: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_bits: AtomicU64::new(0f64.to_bits()),
        }
    }

    /// Records one observation.
    #[inline]
    pub fn observe(&self, v: f64) {
        if let Some(i) = self.bounds.iter().position(|b| v <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let _ = self
            .sum_bits
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                Some((f64::from_bits(b) + v).to_bits())
            });
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// Prometheus' default buckets for durations in seconds, as CoreDNS uses
/// for `coredns_dns_request_duration_seconds` (`plugin.TimeBuckets`).
pub const TIME_BUCKETS: &[f64] = &[
    0.00025, 0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024,
    2.048, 4.096, 8.192,
];

/// Buckets for message sizes in bytes (CoreDNS `plugin.SizeBuckets`).
pub const SIZE_BUCKETS: &[f64] = &[
    0.0, 100.0, 200.0, 300.0, 400.0, 511.0, 1023.0, 2047.0, 4095.0, 8291.0, 16000.0, 32000.0,
    48000.0, 64000.0,
];

/// What kind of series a [`Family`] holds.
pub trait Series: Send + Sync + Default + 'static {
    /// `counter`, `gauge` or `histogram`.
    const TYPE: &'static str;
    /// Appends the samples of this series.
    fn render(&self, name: &str, labels: &str, out: &mut String);
    /// Whether the series is shown (counters created ahead of use stay
    /// hidden until first used, so pre-resolved handles add no noise).
    fn visible(&self) -> bool {
        true
    }
}

impl Series for Counter {
    const TYPE: &'static str = "counter";
    fn render(&self, name: &str, labels: &str, out: &mut String) {
        let _ = writeln!(out, "{name}{labels} {}", fmt_f64(self.get() as f64));
    }
    fn visible(&self) -> bool {
        self.used.load(Ordering::Relaxed)
    }
}

impl Series for Gauge {
    const TYPE: &'static str = "gauge";
    fn render(&self, name: &str, labels: &str, out: &mut String) {
        let _ = writeln!(out, "{name}{labels} {}", fmt_f64(self.get()));
    }
}

/// A histogram series with the bounds of its family.
#[derive(Debug)]
pub struct HistogramSeries(pub Histogram);

impl Default for HistogramSeries {
    fn default() -> Self {
        Self(Histogram::new(TIME_BUCKETS))
    }
}

impl std::ops::Deref for HistogramSeries {
    type Target = Histogram;
    fn deref(&self) -> &Histogram {
        &self.0
    }
}

impl Series for HistogramSeries {
    const TYPE: &'static str = "histogram";
    fn render(&self, name: &str, labels: &str, out: &mut String) {
        let h = &self.0;
        let inner = labels.trim_start_matches('{').trim_end_matches('}');
        let sep = if inner.is_empty() { "" } else { "," };
        let mut cum = 0u64;
        for (b, c) in h.bounds.iter().zip(h.buckets.iter()) {
            cum += c.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{inner}{sep}le=\"{}\"}} {}",
                fmt_f64(*b),
                fmt_f64(cum as f64)
            );
        }
        let count = h.count();
        let count_text = fmt_f64(count as f64);
        let _ = writeln!(out, "{name}_bucket{{{inner}{sep}le=\"+Inf\"}} {count_text}");
        let sum = f64::from_bits(h.sum_bits.load(Ordering::Relaxed));
        let _ = writeln!(out, "{name}_sum{labels} {}", fmt_f64(sum));
        let _ = writeln!(out, "{name}_count{labels} {count_text}");
    }
}

/// A sample value as Prometheus' Go client writes it
/// (`strconv.FormatFloat(v, 'g', -1, 64)`): the shortest digits that read
/// back the same, in exponent form (`1.7961153318196037e+09`, `1e+06`)
/// when the decimal exponent is below -4 or at least 6 (Go's shortest
/// `%g` precision), plain otherwise (`0.00025`, `12`). Counts are written
/// the same way, since the Go client holds them as floats.
pub(crate) fn fmt_f64(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if v == 0.0 {
        return "0".into();
    }
    // Rust's `{:e}` is the shortest round-trip form too: `d.ddde[-]x`.
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{v}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

/// A labelled metric family: `name{l1="..",l2=".."}`.
pub struct Family<S: Series> {
    name: String,
    help: String,
    labels: Vec<&'static str>,
    buckets: Option<&'static [f64]>,
    series: Mutex<BTreeMap<Vec<String>, Arc<S>>>,
}

impl<S: Series> std::fmt::Debug for Family<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Family").field("name", &self.name).finish()
    }
}

impl<S: Series> Family<S> {
    /// A family called `name` with these label names.
    pub fn new(name: impl Into<String>, help: impl Into<String>, labels: &[&'static str]) -> Self {
        Self {
            name: name.into(),
            help: help.into(),
            labels: labels.to_vec(),
            buckets: None,
            series: Mutex::new(BTreeMap::new()),
        }
    }

    /// The series for these label values (in the order of the label
    /// names), created on first use. Resolve once, keep the handle.
    pub fn with(&self, values: &[&str]) -> Arc<S> {
        let key: Vec<String> = values.iter().map(|v| (*v).to_string()).collect();
        self.series.lock().entry(key).or_default().clone()
    }

    /// Removes every series (for gauges describing current state).
    pub fn clear(&self) {
        self.series.lock().clear();
    }
}

impl Family<HistogramSeries> {
    /// A histogram family with custom bucket bounds.
    pub fn histogram(
        name: impl Into<String>,
        help: impl Into<String>,
        labels: &[&'static str],
        buckets: &'static [f64],
    ) -> Self {
        let mut f = Self::new(name, help, labels);
        f.buckets = Some(buckets);
        f
    }

    /// The histogram series for these label values.
    pub fn histogram_with(&self, values: &[&str]) -> Arc<HistogramSeries> {
        let key: Vec<String> = values.iter().map(|v| (*v).to_string()).collect();
        let buckets = self.buckets.unwrap_or(TIME_BUCKETS);
        self.series
            .lock()
            .entry(key)
            .or_insert_with(|| Arc::new(HistogramSeries(Histogram::new(buckets))))
            .clone()
    }
}

/// Escapes a label value for the text format.
fn escape(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

impl<S: Series> Collector for Family<S> {
    fn name(&self) -> &str {
        &self.name
    }

    fn render(&self, out: &mut String) {
        let series = self.series.lock();
        // Like Prometheus' Go client, a family with no visible series
        // (a vector never used) is not shown at all.
        if !series.values().any(|s| s.visible()) {
            return;
        }
        let _ = writeln!(out, "# HELP {} {}", self.name, self.help);
        let _ = writeln!(out, "# TYPE {} {}", self.name, S::TYPE);
        for (values, s) in series.iter() {
            if !s.visible() {
                continue;
            }
            let mut labels = String::new();
            if !self.labels.is_empty() {
                labels.push('{');
                // Label pairs in name order, as Prometheus' Go client
                // prints them (a histogram's `le` comes last).
                let mut pairs: Vec<(&str, &String)> =
                    self.labels.iter().copied().zip(values).collect();
                pairs.sort_by(|a, b| a.0.cmp(b.0));
                for (i, (k, v)) in pairs.into_iter().enumerate() {
                    if i > 0 {
                        labels.push(',');
                    }
                    labels.push_str(k);
                    labels.push_str("=\"");
                    escape(v, &mut labels);
                    labels.push('"');
                }
                labels.push('}');
            }
            s.render(&self.name, &labels, out);
        }
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_hides_unused() {
        let r = Registry::new();
        let f = r.get_or_register("coredns_x_total", || {
            Family::<Counter>::new("coredns_x_total", "Test.", &["server", "zone"])
        });
        let used = f.with(&["dns://:53", "."]);
        let _unused = f.with(&["dns://:53", "example.org."]);
        used.inc();
        used.add(2);
        let again = r.get_or_register("coredns_x_total", || {
            Family::<Counter>::new("coredns_x_total", "Other.", &["server", "zone"])
        });
        again.with(&["dns://:53", "."]).inc();
        let text = r.render();
        assert!(text.contains("# TYPE coredns_x_total counter"));
        assert!(text.contains("coredns_x_total{server=\"dns://:53\",zone=\".\"} 4"));
        assert!(!text.contains("example.org."));
    }

    #[test]
    fn values_are_written_as_go_writes_them() {
        for (v, want) in [
            (0.0, "0"),
            (12.0, "12"),
            (999_999.0, "999999"),
            (1e6, "1e+06"),
            (1_234_567.0, "1.234567e+06"),
            (1.7961153318196037e9, "1.7961153318196037e+09"),
            (0.00025, "0.00025"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (8.192, "8.192"),
            (-3.5, "-3.5"),
            (f64::INFINITY, "+Inf"),
        ] {
            assert_eq!(fmt_f64(v), want, "{v}");
        }
    }

    #[test]
    fn renders_histograms_cumulatively() {
        let f = Family::histogram("h", "Test.", &["a"], &[1.0, 2.0]);
        let h = f.histogram_with(&["x"]);
        h.observe(0.5);
        h.observe(1.5);
        h.observe(5.0);
        let mut out = String::new();
        f.render(&mut out);
        assert!(out.contains("h_bucket{a=\"x\",le=\"1\"} 1"), "{out}");
        assert!(out.contains("h_bucket{a=\"x\",le=\"2\"} 2"), "{out}");
        assert!(out.contains("h_bucket{a=\"x\",le=\"+Inf\"} 3"), "{out}");
        assert!(out.contains("h_sum{a=\"x\"} 7"), "{out}");
        assert!(out.contains("h_count{a=\"x\"} 3"), "{out}");
    }
}
