//! Parser micro-benchmarks: framing plus parsing of typical request lines.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use protocol::text::{frame_line, parse_request, LineFrame, Request};

fn parse_all(buf: &[u8]) -> usize {
    let mut pos = 0;
    let mut keys = 0;
    while let LineFrame::Line { end, next } = frame_line(&buf[pos..]) {
        match parse_request(&buf[pos..pos + end]) {
            Request::Get { keys: k, .. } => keys += k.count(),
            Request::Store { len, .. } => {
                keys += 1;
                pos += len + 2;
            }
            _ => {}
        }
        pos += next;
        if pos >= buf.len() {
            break;
        }
    }
    keys
}

fn bench(c: &mut Criterion) {
    let key = "k".repeat(20);
    let get = format!("get {key}\r\n");
    let set = format!("set {key} 0 0 20\r\n{}\r\n", "v".repeat(20));
    let get48 = format!(
        "get {}\r\n",
        (0..48)
            .map(|i| format!("{key:.17}{i:03}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let pipeline16: String = (0..16)
        .map(|i| if i % 2 == 0 { get.clone() } else { set.clone() })
        .collect();

    let mut g = c.benchmark_group("parse");
    for (name, input) in [
        ("get/20B", &get),
        ("set/20B", &set),
        ("get48/20B", &get48),
        ("pipeline16/mixed", &pipeline16),
    ] {
        g.throughput(Throughput::Bytes(input.len() as u64));
        g.bench_function(name, |b| b.iter(|| parse_all(black_box(input.as_bytes()))));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
