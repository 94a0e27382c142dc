//! `--metrics-listen ADDR:PORT`: Prometheus' `/metrics` over HTTP/1.1, on a thread of
//! its own, away from the workers.
//!
//! A scrape every few seconds needs no event loop: the thread accepts one connection
//! at a time, reads one request with a deadline, answers it and closes
//! (`Connection: close`), so a client that stalls holds it for at most
//! [`IO_TIMEOUT`], and nothing it sends grows memory past [`MAX_REQUEST_BYTES`]. The
//! page is built on each scrape from the statistics (`ops/metrics.rs`); building it
//! reads the same counters `stats` does, with no lock a worker waits on.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::state::Shared;

/// How long one client may take to send its request and read the reply.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// The most of a request that is read; a longer head is refused.
const MAX_REQUEST_BYTES: usize = 8 * 1024;

/// Bind `addr` (before privileges are dropped, as the other listeners are).
pub fn bind(addr: &str) -> Result<TcpListener> {
    TcpListener::bind(addr).with_context(|| format!("failed to listen on metrics address {addr}"))
}

/// Serve `/metrics` on `listener` until the process exits.
pub fn spawn(shared: Arc<Shared>, listener: TcpListener) -> Result<()> {
    if shared.settings.verbose > 0 {
        if let Ok(a) = listener.local_addr() {
            eprintln!("ferrocache: serving metrics on http://{a}/metrics");
        }
    }
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                match stream {
                    Ok(s) => serve_one(&shared, s),
                    // Out of descriptors, or the client left before the accept: the
                    // next scrape tries again.
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        })
        .context("starting the metrics thread")?;
    Ok(())
}

fn serve_one(shared: &Shared, mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    let Some(head) = read_head(&mut stream) else {
        return;
    };
    let (status, kind, body) = respond(shared, &head);
    let head_reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head_reply.as_bytes());
    if !head.starts_with("HEAD ") {
        let _ = stream.write_all(&body);
    }
}

/// The request's head (up to the blank line), or `None` if it never came whole.
fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && !buf.windows(2).any(|w| w == b"\n\n") {
        if buf.len() >= MAX_REQUEST_BYTES {
            let _ = stream.write_all(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            // Read (a bounded amount of) what is left before closing, so that the
            // close is not a reset that could discard the reply before it is read.
            let _ = stream.shutdown(std::net::Shutdown::Write);
            let mut left: usize = 64 * 1024;
            while let Ok(n @ 1..) = stream.read(&mut chunk) {
                left = left.saturating_sub(n);
                if left == 0 {
                    break;
                }
            }
            return None;
        }
        let n = stream.read(&mut chunk).ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// Status line, content type and body for a request head. `/metrics` is in the
/// protobuf format when the `Accept` header asks for it (native histograms), else in
/// the text format.
fn respond(shared: &Shared, head: &str) -> (&'static str, &'static str, Vec<u8>) {
    use crate::ops::metrics::{collect, proto, text};
    let mut lines = head.lines();
    let mut words = lines.next().unwrap_or("").split(' ');
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let accept = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("accept"))
        .map_or("", |(_, v)| v.trim());
    const TEXT: &str = "text/plain; charset=utf-8";
    if method != "GET" && method != "HEAD" {
        return (
            "405 Method Not Allowed",
            TEXT,
            b"only GET and HEAD\n".to_vec(),
        );
    }
    match path {
        "/metrics" if proto::accepted(accept) => (
            "200 OK",
            proto::CONTENT_TYPE,
            proto::render(&collect(shared)),
        ),
        "/metrics" => (
            "200 OK",
            text::CONTENT_TYPE,
            text::render(&collect(shared)).into_bytes(),
        ),
        "/" => (
            "200 OK",
            TEXT,
            b"ferrocache: metrics are at /metrics\n".to_vec(),
        ),
        _ => (
            "404 Not Found",
            TEXT,
            b"not found; metrics are at /metrics\n".to_vec(),
        ),
    }
}
