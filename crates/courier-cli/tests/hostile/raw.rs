//! Raw HTTP/1.1 over TCP, for requests no well-behaved client sends: bytes
//! that are not UTF-8, heads sent a byte at a time, lying lengths.
//!
//! Use it with `#[path = "hostile/raw.rs"] mod raw;`.

#![allow(dead_code)] // Each test uses a different part.

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What came back.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
    /// The JSON error code, if the body is a courier error.
    pub fn error_code(&self) -> Option<String> {
        self.json()["error"].as_str().map(str::to_string)
    }
}

/// How a connection ended when no whole answer came.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    /// The server closed it (EOF or reset).
    Closed,
    /// The deadline passed first.
    TimedOut,
}

/// Reads one answer (Content-Length or chunked body) within `within`.
pub async fn read_answer(s: &mut TcpStream, within: Duration) -> Result<Answer, Ended> {
    let deadline = tokio::time::Instant::now() + within;
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_string();
            let status: u16 = head
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let header = |name: &str| {
                head.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case(name)
                        .then(|| v.trim().to_string())
                })
            };
            let rest = &raw[end + 4..];
            if let Some(len) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
                if rest.len() >= len {
                    return Ok(Answer {
                        status,
                        head,
                        body: rest[..len].to_vec(),
                    });
                }
            } else if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
                if let Some(body) = dechunk(rest) {
                    return Ok(Answer { status, head, body });
                }
            } else if status == 0 || (100..200).contains(&status) || status == 204 {
                return Ok(Answer {
                    status,
                    head,
                    body: Vec::new(),
                });
            }
        }
        let n = match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return Err(Ended::TimedOut),
            Ok(Err(_)) => 0,
            Ok(Ok(n)) => n,
        };
        if n == 0 {
            // Closed: an answer without a length ends here.
            if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&raw[..end]).to_string();
                let status = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0);
                return Ok(Answer {
                    status,
                    head,
                    body: raw[end + 4..].to_vec(),
                });
            }
            return Err(Ended::Closed);
        }
        raw.extend_from_slice(&buf[..n]);
    }
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n")?;
        let size =
            usize::from_str_radix(std::str::from_utf8(&rest[..eol]).ok()?.trim(), 16).ok()?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        if rest.len() < size + 2 {
            return None;
        }
        out.extend_from_slice(&rest[..size]);
        rest = &rest[size + 2..];
    }
}

/// Sends `bytes` on a new connection and reads one answer.
pub async fn send(addr: SocketAddr, bytes: &[u8], within: Duration) -> Result<Answer, Ended> {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    if s.write_all(bytes).await.is_err() {
        return Err(Ended::Closed);
    }
    read_answer(&mut s, within).await
}

/// A request with a body and a Content-Length that matches it.
pub fn request(method: &str, path: &[u8], headers: &[(&str, &[u8])], body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path);
    out.extend_from_slice(b" HTTP/1.1\r\nHost: courier\r\nConnection: close\r\n");
    for (k, v) in headers {
        out.extend_from_slice(k.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(v);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    out
}

/// Trickles `bytes` one at a time, `every` apart, for at most `for_at_most`,
/// and says when the server ended the connection (or answered), measured
/// from the first byte.
pub async fn trickle(
    addr: SocketAddr,
    bytes: &[u8],
    every: Duration,
    for_at_most: Duration,
) -> (Duration, Result<Answer, Ended>) {
    let started = Instant::now();
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let (mut rd, mut wr) = s.split();
    let mut buf = vec![0u8; 16 * 1024];
    let mut got = Vec::new();
    for b in bytes.iter().cycle() {
        if started.elapsed() >= for_at_most {
            return (started.elapsed(), Err(Ended::TimedOut));
        }
        if wr.write_all(&[*b]).await.is_err() {
            return (started.elapsed(), Err(Ended::Closed));
        }
        // Anything from the server (an answer or the end) stops the trickle.
        match tokio::time::timeout(every, rd.read(&mut buf)).await {
            Err(_) => {}
            Ok(Ok(0)) | Ok(Err(_)) => {
                return (started.elapsed(), parse_or_closed(&got));
            }
            Ok(Ok(n)) => {
                got.extend_from_slice(&buf[..n]);
                let mut rest = Vec::new();
                // Read the rest of the answer for a moment.
                let _ = tokio::time::timeout(Duration::from_millis(500), rd.read_to_end(&mut rest))
                    .await;
                got.extend_from_slice(&rest);
                return (started.elapsed(), parse_or_closed(&got));
            }
        }
    }
    unreachable!("cycle never ends")
}

fn parse_or_closed(raw: &[u8]) -> Result<Answer, Ended> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or(Ended::Closed)?;
    let head = String::from_utf8_lossy(&raw[..end]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok(Answer {
        status,
        head,
        body: raw[end + 4..].to_vec(),
    })
}
