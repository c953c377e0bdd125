// A minimal HTTP/1.1 client for the tests (std sockets only): one request per connection,
// chunked bodies decoded, and a read deadline for streamed answers such as /v3/watch.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

pub struct HttpResponse {
    pub status: u16,
    /// Header names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `url` is http://host:port; sends `method path` with `body`, reads until the server closes
/// or `wait` passes (then returns what arrived: a stream's first lines).
pub fn request(url: &str, method: &str, path: &str, body: &str, wait: Duration) -> HttpResponse {
    request_until(url, method, path, body, wait, |_| false)
}

/// As `request`, but stops reading as soon as `done` holds for the body decoded so far: a
/// test waits for what a stream must deliver without asserting how long it takes.
pub fn request_until(
    url: &str,
    method: &str,
    path: &str,
    body: &str,
    wait: Duration,
    done: impl Fn(&str) -> bool,
) -> HttpResponse {
    let host = url.trim_start_matches("http://");
    let mut s = TcpStream::connect(host).unwrap_or_else(|e| panic!("connect {host}: {e}"));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("send request");
    let deadline = Instant::now() + wait;
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        s.set_read_timeout(Some(left)).expect("set read timeout");
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                raw.extend_from_slice(&buf[..n]);
                if raw.windows(4).any(|w| w == b"\r\n\r\n") && done(&parse(&raw).body) {
                    break;
                }
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                break;
            }
            Err(e) => panic!("read response: {e}"),
        }
    }
    parse(&raw)
}

pub fn get(url: &str, path: &str) -> HttpResponse {
    request(url, "GET", path, "", Duration::from_secs(10))
}

pub fn post(url: &str, path: &str, body: &str) -> HttpResponse {
    request(url, "POST", path, body, Duration::from_secs(10))
}

fn parse(raw: &[u8]) -> HttpResponse {
    let text = String::from_utf8_lossy(raw);
    let (head, rest) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP header in {text:?}"));
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    HttpResponse {
        status,
        headers,
        body,
    }
}

/// Decodes as many complete chunks as arrived.
fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            out.push_str(&rest[..n.min(rest.len())]);
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}
