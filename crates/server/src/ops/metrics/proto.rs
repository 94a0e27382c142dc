//! Prometheus' protobuf exposition format (`io.prometheus.client.MetricFamily`,
//! length-delimited), the one that carries native histograms. Prometheus asks for it
//! in its `Accept` header when native histograms are enabled
//! (`--enable-feature=native-histograms` in 2.x).
//!
//! The few messages needed are written by hand (field numbers from Prometheus'
//! `metrics.proto`, proto2): a generated codec would be a build dependency for six
//! messages. Repeated scalars are written unpacked, which every proto2 reader accepts.

use super::{Families, Histogram, Kind, Value};

/// The content type of [`render`]'s output.
pub const CONTENT_TYPE: &str =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited";

/// Whether an `Accept` header asks for this format.
#[must_use]
pub fn accepted(accept: &str) -> bool {
    accept.contains("application/vnd.google.protobuf")
        && accept.contains("proto=io.prometheus.client.MetricFamily")
}

/// A native histogram's zero bucket: client_golang's default threshold, 2^-128. A
/// nonzero threshold is also what marks a histogram with no observations as native.
const ZERO_THRESHOLD: f64 = 2.938_735_877_055_719e-39;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn key(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, u64::from(field) << 3 | u64::from(wire));
}

fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    key(out, field, 0);
    varint(out, v);
}

fn sint(out: &mut Vec<u8>, field: u32, v: i64) {
    uint(out, field, zigzag(v));
}

fn double(out: &mut Vec<u8>, field: u32, v: f64) {
    key(out, field, 1);
    out.extend_from_slice(&v.to_le_bytes());
}

fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    key(out, field, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// An embedded message written by `write`.
fn message(out: &mut Vec<u8>, field: u32, write: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    write(&mut inner);
    bytes(out, field, &inner);
}

fn histogram(out: &mut Vec<u8>, h: &Histogram) {
    uint(out, 1, h.count); // sample_count
    double(out, 2, h.sum_secs); // sample_sum
    for (le, n) in &h.classic {
        message(out, 3, |b| {
            uint(b, 1, *n); // cumulative_count
            double(b, 2, *le); // upper_bound
        });
    }
    sint(out, 5, 0); // schema
    double(out, 6, ZERO_THRESHOLD); // zero_threshold
    uint(out, 7, 0); // zero_count
    if !h.native_counts.is_empty() {
        // One span over every bucket from the first to the last that holds anything.
        message(out, 12, |b| {
            sint(b, 1, i64::from(h.native_offset)); // offset
            uint(b, 2, h.native_counts.len() as u64); // length
        });
        let mut previous = 0i64;
        for &n in &h.native_counts {
            sint(out, 13, n as i64 - previous); // positive_delta
            previous = n as i64;
        }
    }
}

/// Every family, each a length-prefixed `MetricFamily`.
#[must_use]
pub fn render(families: &Families) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 * 1024);
    for f in families.list.iter().filter(|f| !f.metrics.is_empty()) {
        let mut family = Vec::new();
        bytes(&mut family, 1, f.name.as_bytes());
        bytes(&mut family, 2, f.help.as_bytes());
        let kind = match f.kind {
            Kind::Counter => 0,
            Kind::Gauge => 1,
            Kind::Histogram => 4,
        };
        uint(&mut family, 3, kind);
        for m in &f.metrics {
            message(&mut family, 4, |b| {
                for (name, value) in &m.labels {
                    message(b, 1, |l| {
                        bytes(l, 1, name.as_bytes());
                        bytes(l, 2, value.as_bytes());
                    });
                }
                match (&m.value, f.kind) {
                    (Value::Number(v), Kind::Counter) => message(b, 3, |c| double(c, 1, *v)),
                    (Value::Number(v), _) => message(b, 2, |g| double(g, 1, *v)),
                    (Value::Histogram(h), _) => message(b, 7, |x| histogram(x, h)),
                }
            });
        }
        varint(&mut out, family.len() as u64);
        out.extend_from_slice(&family);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_zigzag_as_protobuf_writes_them() {
        let mut b = Vec::new();
        varint(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
        assert_eq!(zigzag(0), 0);
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
        assert_eq!(zigzag(-10), 19);
        let mut m = Vec::new();
        bytes(&mut m, 1, b"up");
        assert_eq!(m, [0x0a, 2, b'u', b'p']);
        assert!(accepted(
            "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3"
        ));
        assert!(!accepted("text/plain;version=0.0.4;q=0.3,*/*;q=0.2"));
    }
}
