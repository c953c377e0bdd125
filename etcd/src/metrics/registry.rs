// A small Prometheus registry: counters, gauges and histograms on atomics (labelled ones in a
// map), and the text exposition format (0.0.4) written as Go's client prints it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// `start`, `start*factor`, ... (`count` bounds), as Go's prometheus.ExponentialBuckets.
pub fn exponential_buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(count);
    let mut b = start;
    for _ in 0..count {
        out.push(b);
        b *= factor;
    }
    out
}

/// A monotonically increasing count.
#[derive(Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A value that goes up and down.
#[derive(Default)]
pub struct Gauge(AtomicI64);

impl Gauge {
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
    pub fn dec(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
    pub fn sub(&self, n: i64) {
        self.0.fetch_sub(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Observations counted into fixed buckets (upper bounds, `+Inf` implied), plus sum and count.
pub struct Histogram {
    bounds: Vec<f64>,
    /// Non-cumulative: `counts[i]` holds observations in (bounds[i-1], bounds[i]]; the last slot
    /// is +Inf.
    counts: Vec<AtomicU64>,
    /// The sum as f64 bits, updated by compare-and-swap.
    sum: AtomicU64,
}

impl Histogram {
    pub fn new(bounds: Vec<f64>) -> Histogram {
        let counts = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Histogram {
            bounds,
            counts,
            sum: AtomicU64::new(0f64.to_bits()),
        }
    }

    pub fn observe(&self, v: f64) {
        let i = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        let _ = self
            .sum
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + v).to_bits())
            });
    }

    /// The total number of observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    fn write(&self, out: &mut Family, name: &str, labels: &[(&str, &str)]) {
        let mut cumulative = 0u64;
        for (i, c) in self.counts.iter().enumerate() {
            cumulative += c.load(Ordering::Relaxed);
            let le = match self.bounds.get(i) {
                Some(b) => go_float(*b),
                None => "+Inf".to_string(),
            };
            let mut l: Vec<(&str, &str)> = labels.to_vec();
            l.push(("le", &le));
            out.sample(&format!("{name}_bucket"), &l, &cumulative.to_string());
        }
        out.sample(
            &format!("{name}_sum"),
            labels,
            &go_float(f64::from_bits(self.sum.load(Ordering::Relaxed))),
        );
        out.sample(&format!("{name}_count"), labels, &cumulative.to_string());
    }
}

/// Counters keyed by label values (in the order of `labels`).
pub struct CounterVec {
    labels: &'static [&'static str],
    values: Mutex<BTreeMap<Vec<String>, Arc<AtomicU64>>>,
}

impl CounterVec {
    pub const fn new(labels: &'static [&'static str]) -> CounterVec {
        CounterVec {
            labels,
            values: Mutex::new(BTreeMap::new()),
        }
    }

    /// The series with these label values (created at 0 first), to count into without
    /// looking it up again: what a gRPC call does for each of its messages.
    pub fn handle(&self, values: &[&str]) -> Arc<AtomicU64> {
        let key: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        let mut m = self.values.lock().unwrap_or_else(|e| e.into_inner());
        m.entry(key).or_default().clone()
    }

    /// Adds `n` to the series with these label values (creating it at 0 first).
    pub fn add(&self, values: &[&str], n: u64) {
        self.handle(values).fetch_add(n, Ordering::Relaxed);
    }

    pub fn get(&self, values: &[&str]) -> u64 {
        let key: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        let m = self.values.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&key).map_or(0, |n| n.load(Ordering::Relaxed))
    }

    pub fn write(&self, out: &mut Exposition, name: &str, help: &str) {
        let m = self.values.lock().unwrap_or_else(|e| e.into_inner());
        if m.is_empty() {
            return; // Go prints nothing for a vector without children.
        }
        let mut f = out.family(name, help, "counter");
        for (vals, n) in m.iter() {
            let l: Vec<(&str, &str)> = self
                .labels
                .iter()
                .copied()
                .zip(vals.iter().map(String::as_str))
                .collect();
            f.sample(name, &l, &n.load(Ordering::Relaxed).to_string());
        }
        f.finish();
    }
}

/// Histograms keyed by label values.
pub struct HistogramVec {
    labels: &'static [&'static str],
    bounds: Vec<f64>,
    values: Mutex<BTreeMap<Vec<String>, std::sync::Arc<Histogram>>>,
}

impl HistogramVec {
    pub fn new(labels: &'static [&'static str], bounds: Vec<f64>) -> HistogramVec {
        HistogramVec {
            labels,
            bounds,
            values: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn observe(&self, values: &[&str], v: f64) {
        let key: Vec<String> = values.iter().map(|s| s.to_string()).collect();
        let h = {
            let mut m = self.values.lock().unwrap_or_else(|e| e.into_inner());
            m.entry(key)
                .or_insert_with(|| std::sync::Arc::new(Histogram::new(self.bounds.clone())))
                .clone()
        };
        h.observe(v);
    }

    pub fn write(&self, out: &mut Exposition, name: &str, help: &str) {
        let m = self.values.lock().unwrap_or_else(|e| e.into_inner());
        if m.is_empty() {
            return;
        }
        let mut f = out.family(name, help, "histogram");
        for (vals, h) in m.iter() {
            let l: Vec<(&str, &str)> = self
                .labels
                .iter()
                .copied()
                .zip(vals.iter().map(String::as_str))
                .collect();
            h.write(&mut f, name, &l);
        }
        f.finish();
    }
}

/// The text being built: families are kept apart and sorted by name at the end, as Go's
/// registry gathers them.
#[derive(Default)]
pub struct Exposition {
    families: Vec<(String, String)>,
}

/// One metric family under construction (HELP and TYPE lines, then samples).
pub struct Family<'a> {
    out: &'a mut Exposition,
    name: String,
    text: String,
}

impl Exposition {
    pub fn family(&mut self, name: &str, help: &str, typ: &str) -> Family<'_> {
        let mut text = String::new();
        let _ = writeln!(text, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(text, "# TYPE {name} {typ}");
        Family {
            out: self,
            name: name.to_string(),
            text,
        }
    }

    /// A family with one unlabelled sample.
    pub fn single(&mut self, name: &str, help: &str, typ: &str, value: f64) {
        let mut f = self.family(name, help, typ);
        f.sample(name, &[], &go_float(value));
        f.finish();
    }

    pub fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        let mut f = self.family(name, help, "histogram");
        h.write(&mut f, name, &[]);
        f.finish();
    }

    pub fn render(mut self) -> String {
        self.families.sort_by(|a, b| a.0.cmp(&b.0));
        self.families.into_iter().map(|(_, t)| t).collect()
    }
}

impl Family<'_> {
    /// One sample line; labels are printed sorted by name, as Go does.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: &str) {
        self.text.push_str(name);
        if !labels.is_empty() {
            let mut l = labels.to_vec();
            l.sort_by(|a, b| a.0.cmp(b.0));
            self.text.push('{');
            for (i, (k, v)) in l.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{k}=\"{}\"", escape_label(v));
            }
            self.text.push('}');
        }
        self.text.push(' ');
        self.text.push_str(value);
        self.text.push('\n');
    }

    pub fn finish(self) {
        self.out.families.push((self.name, self.text));
    }
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('"', "\\\"")
}

/// A float as Go's strconv.FormatFloat(v, 'g', -1, 64) prints it (the exposition format's
/// number syntax): shortest digits, exponent form below 1e-4 and from 1e6 up (so a
/// million prints as 1e+06, as in etcd's output).
pub fn go_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if v == 0.0 {
        return "0".into();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "d.ddddde[-]x".
    let e = format!("{v:e}");
    let Some((mant, exp)) = e.split_once('e') else {
        return e;
    };
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mant}e{sign}{:02}", exp.abs());
    }
    // Plain notation with exactly the shortest digits.
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let point = exp + 1; // digits before the decimal point
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    if point <= 0 {
        s.push_str("0.");
        for _ in 0..(-point) {
            s.push('0');
        }
        s.push_str(&digits);
    } else if point as usize >= digits.len() {
        s.push_str(&digits);
        for _ in 0..(point as usize - digits.len()) {
            s.push('0');
        }
    } else {
        s.push_str(&digits[..point as usize]);
        s.push('.');
        s.push_str(&digits[point as usize..]);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_go_does() {
        assert_eq!(go_float(2147483648.0), "2.147483648e+09");
        assert_eq!(go_float(20480.0), "20480");
        assert_eq!(go_float(0.001), "0.001");
        assert_eq!(go_float(8.192), "8.192");
        assert_eq!(go_float(0.048487348), "0.048487348");
        assert_eq!(go_float(1e-5), "1e-05");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(1234567.0), "1.234567e+06");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(-1.5), "-1.5");
    }

    #[test]
    fn vectors_print_nothing_until_fed_then_sorted_series() {
        let rtt = HistogramVec::new(&["To"], exponential_buckets(0.0001, 2.0, 14));
        let mut e = Exposition::default();
        rtt.write(
            &mut e,
            "etcd_network_peer_round_trip_time_seconds",
            "Round-Trip-Time histogram between peers.",
        );
        assert_eq!(e.render(), "");
        rtt.observe(&["b"], 0.00015);
        rtt.observe(&["a"], 1.0);
        let c = CounterVec::new(&["grpc_code", "grpc_method"]);
        c.add(&["OK", "Range"], 2);
        c.add(&["Canceled", "Watch"], 1);
        let mut e = Exposition::default();
        rtt.write(
            &mut e,
            "etcd_network_peer_round_trip_time_seconds",
            "Round-Trip-Time histogram between peers.",
        );
        c.write(&mut e, "grpc_server_handled_total", "Handled.");
        let t = e.render();
        let a = t.find("{To=\"a\",le=\"0.0001\"} 0").unwrap();
        let b = t.find("{To=\"b\",le=\"0.0002\"} 1").unwrap();
        assert!(a < b, "{t}");
        assert!(t.contains(
            "etcd_network_peer_round_trip_time_seconds_bucket{To=\"a\",le=\"+Inf\"} 1\n"
        ));
        // Families sorted by name: etcd_* before grpc_*; series by label values.
        assert!(t.find("# HELP etcd_network").unwrap() < t.find("# HELP grpc_server").unwrap());
        assert!(t.find("grpc_code=\"Canceled\"").unwrap() < t.find("grpc_code=\"OK\"").unwrap());
    }

    #[test]
    fn histogram_is_cumulative() {
        let h = Histogram::new(exponential_buckets(0.001, 2.0, 3));
        h.observe(0.0005);
        h.observe(0.003);
        h.observe(10.0);
        let mut e = Exposition::default();
        e.histogram("x_seconds", "X.", &h);
        let t = e.render();
        assert!(t.contains("x_seconds_bucket{le=\"0.001\"} 1\n"), "{t}");
        assert!(t.contains("x_seconds_bucket{le=\"0.002\"} 1\n"), "{t}");
        assert!(t.contains("x_seconds_bucket{le=\"0.004\"} 2\n"), "{t}");
        assert!(t.contains("x_seconds_bucket{le=\"+Inf\"} 3\n"), "{t}");
        assert!(t.contains("x_seconds_count 3\n"), "{t}");
    }
}
