//! A small WebDriver client for end-to-end tests of courier's pages: it starts
//! Debian's `chromedriver` with headless Chromium and speaks the W3C WebDriver
//! protocol (JSON over loopback HTTP) with the standard library alone, so the
//! tests add no dependencies and no TLS stack to the build.
//!
//! Use it from an integration test with
//! `#[path = "support/browser.rs"] mod browser;` and
//! `let b = browser::Browser::launch(1200, 900);`.
//!
//! `launch` panics (the test fails, it does not skip) when Chromium or
//! chromedriver is missing, saying to install `chromium chromium-driver`.
//! The binaries are looked up in `$CHROMIUM` / `$CHROMEDRIVER`, then
//! `/usr/bin`, then `PATH`.
//!
//! # Invariants
//! - Every wait has a deadline; nothing sleeps as a means of synchronisation
//!   (polls of a condition are spaced by a short pause, and end at the deadline).
//! - Each browser gets a fresh profile directory, removed on drop, and the
//!   chromedriver process this module started is killed on drop.

#![allow(dead_code)] // Each test uses a different part of the client.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// How long a single WebDriver command may take.
const COMMAND_TIMEOUT_MS: u64 = 120_000;
/// How long chromedriver has to start answering.
const DRIVER_START_TIMEOUT_MS: u64 = 30_000;
/// Pause between two polls of a condition.
const POLL_INTERVAL_MS: u64 = 50;

/// Chromium flags for a quiet, sandbox-free headless run in CI.
pub const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
];

/// WebDriver key codes.
pub mod keys {
    pub const ENTER: &str = "\u{E007}";
    pub const ARROW_LEFT: &str = "\u{E012}";
    pub const ARROW_RIGHT: &str = "\u{E014}";
    pub const HOME: &str = "\u{E011}";
    pub const END: &str = "\u{E010}";
    pub const ESCAPE: &str = "\u{E00C}";
    pub const TAB: &str = "\u{E004}";
}

/// A web element reference.
#[derive(Debug, Clone)]
pub struct Element(pub String);

impl Element {
    /// The element as a script argument.
    pub fn to_json(&self) -> Value {
        json!({ ELEMENT_KEY: self.0 })
    }
}

/// The W3C key of an element reference.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

pub struct Browser {
    driver: Child,
    driver_addr: SocketAddr,
    session: String,
    /// A fresh Chromium profile, removed on drop.
    profile: tempfile::TempDir,
}

fn find_binary(env: &str, names: &[&str]) -> Option<PathBuf> {
    if let Ok(p) = std::env::var(env) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Some(p);
        }
    }
    for name in names {
        let p = Path::new("/usr/bin").join(name);
        if p.is_file() {
            return Some(p);
        }
    }
    let path = std::env::var_os("PATH")?;
    for dir in std::env::split_paths(&path) {
        for name in names {
            let p = dir.join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a window of the given
    /// size. Panics with an installation hint when either is missing.
    pub fn launch(width: u32, height: u32) -> Browser {
        Browser::launch_with(width, height, &[])
    }

    /// As [`Browser::launch`], with extra Chromium flags (for example
    /// `--blink-settings=scriptEnabled=false` for a browser without JavaScript).
    pub fn launch_with(width: u32, height: u32, extra_flags: &[&str]) -> Browser {
        match Browser::try_launch(width, height, extra_flags) {
            Ok(b) => b,
            Err(e) => panic!("{e}"),
        }
    }

    pub fn try_launch(width: u32, height: u32, extra_flags: &[&str]) -> Result<Browser, String> {
        let install = "install them with `apt-get install -y chromium chromium-driver` \
                       (or point $CHROMIUM and $CHROMEDRIVER at them)";
        let chromium = find_binary("CHROMIUM", &["chromium", "chromium-browser"])
            .ok_or_else(|| format!("Chromium was not found: {install}"))?;
        let chromedriver = find_binary("CHROMEDRIVER", &["chromedriver"])
            .ok_or_else(|| format!("chromedriver was not found: {install}"))?;
        let mut last_error = String::new();
        // The free port can be taken between the probe and chromedriver's
        // bind; try a few ports.
        for _ in 0..3 {
            let port = free_port();
            let mut driver = Command::new(&chromedriver)
                .arg(format!("--port={port}"))
                .arg("--allowed-ips=127.0.0.1")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}; {install}", chromedriver.display()))?;
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            match wait_driver_ready(&mut driver, addr) {
                Ok(()) => {
                    let profile = tempfile::Builder::new()
                        .prefix("courier-browser-")
                        .tempdir()
                        .map_err(|e| format!("cannot create a profile directory: {e}"))?;
                    let mut b = Browser {
                        driver,
                        driver_addr: addr,
                        session: String::new(),
                        profile,
                    };
                    b.new_session(&chromium, width, height, extra_flags)?;
                    return Ok(b);
                }
                Err(e) => {
                    let _ = driver.kill();
                    let _ = driver.wait();
                    last_error = e;
                }
            }
        }
        Err(format!("chromedriver did not start: {last_error}"))
    }

    fn new_session(
        &mut self,
        chromium: &Path,
        width: u32,
        height: u32,
        extra_flags: &[&str],
    ) -> Result<(), String> {
        let mut args: Vec<String> = CHROMIUM_FLAGS
            .iter()
            .chain(extra_flags)
            .map(|s| s.to_string())
            .collect();
        args.push(format!("--user-data-dir={}", self.profile.path().display()));
        args.push(format!("--window-size={width},{height}"));
        let caps = json!({
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": chromium.to_string_lossy(),
                        "args": args,
                    }
                }
            }
        });
        let v = self.raw("POST", "/session", Some(&caps))?;
        self.session = v["sessionId"]
            .as_str()
            .ok_or_else(|| format!("no session id in {v}"))?
            .to_string();
        Ok(())
    }

    fn raw(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let body_text = body.map(|b| b.to_string());
        let (status, text) = http_request(
            self.driver_addr,
            method,
            path,
            body_text.as_deref(),
            Duration::from_millis(COMMAND_TIMEOUT_MS),
        )?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| format!("chromedriver answered {status} with non-JSON ({e}): {text}"))?;
        let value = v.get("value").cloned().unwrap_or(Value::Null);
        if status != 200 {
            return Err(format!(
                "WebDriver {method} {path} failed ({status}): {} {}",
                value["error"], value["message"]
            ));
        }
        Ok(value)
    }

    /// Runs a session command and panics with its error.
    pub fn cmd(&self, method: &str, path: &str, body: Value) -> Value {
        let full = format!("/session/{}{path}", self.session);
        let body = if method == "GET" || method == "DELETE" {
            None
        } else {
            Some(&body)
        };
        self.raw(method, &full, body)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", json!({ "url": url }));
    }

    /// Runs a script (its body uses `arguments[i]` and `return`).
    pub fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            json!({ "script": script, "args": args }),
        )
    }

    /// Runs an asynchronous script: its body calls `arguments[arguments.length - 1]`
    /// with the result (the W3C execute/async command).
    pub fn execute_async(&self, script: &str, args: Vec<Value>) -> Value {
        self.cmd(
            "POST",
            "/execute/async",
            json!({ "script": script, "args": args }),
        )
    }

    /// Sets how long an asynchronous script may run.
    pub fn set_script_timeout(&self, ms: u64) {
        self.cmd("POST", "/timeouts", json!({ "script": ms }));
    }

    pub fn find(&self, css: &str) -> Element {
        let v = self.cmd(
            "POST",
            "/element",
            json!({ "using": "css selector", "value": css }),
        );
        Element(element_id(&v))
    }

    /// Scrolls the element to the middle of the window (clear of sticky
    /// headers), then clicks it.
    pub fn click(&self, el: &Element) {
        self.execute(
            "arguments[0].scrollIntoView({block: 'center', inline: 'nearest'});",
            vec![el.to_json()],
        );
        self.cmd("POST", &format!("/element/{}/click", el.0), json!({}));
    }

    pub fn send_keys(&self, el: &Element, text: &str) {
        self.cmd(
            "POST",
            &format!("/element/{}/value", el.0),
            json!({ "text": text }),
        );
    }

    /// Presses keys on whatever has the focus (the W3C actions API), the way
    /// a user presses keys on the page itself.
    pub fn press(&self, keys: &[&str]) {
        let mut actions = Vec::new();
        for k in keys {
            actions.push(json!({ "type": "keyDown", "value": k }));
            actions.push(json!({ "type": "keyUp", "value": k }));
        }
        self.cmd(
            "POST",
            "/actions",
            json!({ "actions": [{ "type": "key", "id": "keyboard", "actions": actions }] }),
        );
        self.cmd("DELETE", "/actions", json!({}));
    }

    pub fn set_window_size(&self, width: u32, height: u32) {
        self.cmd(
            "POST",
            "/window/rect",
            json!({ "width": width, "height": height }),
        );
    }

    /// A PNG of the whole page, beyond the viewport (through the DevTools
    /// protocol, which chromedriver forwards).
    pub fn screenshot_full_page(&self) -> Vec<u8> {
        // From the top, so sticky headers are drawn where they belong.
        let size = self.execute(
            "window.scrollTo(0, 0);\
             return [document.documentElement.scrollWidth, document.documentElement.scrollHeight];",
            vec![],
        );
        let (w, h) = (
            size[0].as_f64().unwrap_or(1200.0),
            size[1].as_f64().unwrap_or(900.0),
        );
        let v = self.cmd(
            "POST",
            "/goog/cdp/execute",
            json!({
                "cmd": "Page.captureScreenshot",
                "params": {
                    "format": "png",
                    "captureBeyondViewport": true,
                    "clip": { "x": 0, "y": 0, "width": w, "height": h, "scale": 1 }
                }
            }),
        );
        let data = v["data"].as_str().expect("screenshot data");
        base64_decode(data).expect("screenshot is base64")
    }

    /// A PNG of the page area of the first element matching `css` (page
    /// coordinates, beyond the viewport), or `None` when nothing matches.
    pub fn screenshot_element(&self, css: &str) -> Option<Vec<u8>> {
        let r = self.execute(
            "window.scrollTo(0, 0);\
             const e = document.querySelector(arguments[0]);\
             if (!e) return null;\
             const r = e.getBoundingClientRect();\
             return [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height];",
            vec![json!(css)],
        );
        let r = r.as_array()?;
        let n = |i: usize| r[i].as_f64().unwrap_or(0.0);
        let v = self.cmd(
            "POST",
            "/goog/cdp/execute",
            json!({
                "cmd": "Page.captureScreenshot",
                "params": {
                    "format": "png",
                    "captureBeyondViewport": true,
                    "clip": { "x": n(0), "y": n(1), "width": n(2).max(1.0), "height": n(3).max(1.0), "scale": 1 }
                }
            }),
        );
        let data = v["data"].as_str().expect("screenshot data");
        Some(base64_decode(data).expect("screenshot is base64"))
    }

    /// Polls `probe` until it returns `Some`, or panics after `timeout_ms`
    /// naming `what` and the last value seen.
    pub fn wait_for<T>(
        &self,
        what: &str,
        timeout_ms: u64,
        mut probe: impl FnMut(&Browser) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            if let Some(v) = probe(self) {
                return v;
            }
            if Instant::now() >= deadline {
                panic!("timed out after {timeout_ms} ms waiting for {what}");
            }
            std::thread::sleep(Duration::from_millis(POLL_INTERVAL_MS));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.raw("DELETE", &format!("/session/{}", self.session), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn element_id(v: &Value) -> String {
    v[ELEMENT_KEY]
        .as_str()
        .unwrap_or_else(|| panic!("not an element: {v}"))
        .to_string()
}

fn wait_driver_ready(driver: &mut Child, addr: SocketAddr) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_millis(DRIVER_START_TIMEOUT_MS);
    loop {
        if let Ok(Some(status)) = driver.try_wait() {
            return Err(format!("chromedriver exited early: {status}"));
        }
        if let Ok((200, text)) = http_request(addr, "GET", "/status", None, Duration::from_secs(5))
        {
            let ready = serde_json::from_str::<Value>(&text)
                .map(|v| v["value"]["ready"] == json!(true))
                .unwrap_or(false);
            if ready {
                return Ok(());
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "no answer on {addr} within {DRIVER_START_TIMEOUT_MS} ms"
            ));
        }
        std::thread::sleep(Duration::from_millis(POLL_INTERVAL_MS));
    }
}

/// One HTTP/1.1 request over loopback; returns the status and the body.
/// Handles `Content-Length`, chunked and read-to-close bodies, which covers
/// chromedriver and courier's servers.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let mut stream =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let body = body.unwrap_or("");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("write to {addr}: {e}"))?;
    read_answer(&mut stream, addr)
}

/// Reads an HTTP/1.1 answer: the status and the body.
fn read_answer(stream: &mut TcpStream, addr: SocketAddr) -> Result<(u16, String), String> {
    // Servers may keep the connection open despite `Connection: close`, so
    // the body ends where its framing says, not at end of stream.
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let mut read_more = |raw: &mut Vec<u8>| -> Result<bool, String> {
        let n = stream
            .read(&mut buf)
            .map_err(|e| format!("read from {addr}: {e}"))?;
        raw.extend_from_slice(&buf[..n]);
        Ok(n > 0)
    };
    let split = loop {
        if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        if !read_more(&mut raw)? {
            return Err(format!("no header end in the answer from {addr}"));
        }
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line: {head}"))?;
    let header = |name: &str| {
        head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_ascii_lowercase())
        })
    };
    let body_start = split + 4;
    let payload = if let Some(len) = header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|e| format!("bad content-length: {e}"))?;
        while raw.len() < body_start + len {
            if !read_more(&mut raw)? {
                return Err(format!("the answer from {addr} ended early"));
            }
        }
        raw[body_start..body_start + len].to_vec()
    } else if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        loop {
            if let Some(body) = dechunk(&raw[body_start..])? {
                break body;
            }
            if !read_more(&mut raw)? {
                return Err(format!("the chunked answer from {addr} ended early"));
            }
        }
    } else {
        while read_more(&mut raw)? {}
        raw[body_start..].to_vec()
    };
    Ok((status, String::from_utf8_lossy(&payload).to_string()))
}

/// Decodes a chunked body; `None` while it is still incomplete.
fn dechunk(mut data: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let mut out = Vec::new();
    loop {
        let Some(line_end) = data.windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("bad chunk size {size_text:?}: {e}"))?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Ok(Some(out));
        }
        if data.len() < size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// Standard base64 (with padding) to bytes.
pub fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    fn val(c: u8) -> Option<u32> {
        match c {
            b'A'..=b'Z' => Some(u32::from(c - b'A')),
            b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
            b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let clean: Vec<u8> = text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= val(c).ok_or_else(|| format!("bad base64 byte {c}"))? << (18 - 6 * i);
        }
        let bytes = [(acc >> 16) as u8, (acc >> 8) as u8, acc as u8];
        let n = match chunk.len() {
            4 => 3,
            3 => 2,
            2 => 1,
            _ => return Err("bad base64 length".to_string()),
        };
        out.extend_from_slice(&bytes[..n]);
    }
    Ok(out)
}

/// Reads a PNG's width and height from its header.
pub fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    if png.len() < 24 || &png[..8] != b"\x89PNG\r\n\x1a\n" {
        return None;
    }
    let w = u32::from_be_bytes(png[16..20].try_into().ok()?);
    let h = u32::from_be_bytes(png[20..24].try_into().ok()?);
    Some((w, h))
}
