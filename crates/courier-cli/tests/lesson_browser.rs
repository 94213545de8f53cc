//! End-to-end tests of `courier lesson`: the real binary, its JSON API, and
//! the page in a real headless Chromium (through chromedriver).
//!
//! The browser test fails (it does not skip) when Chromium or chromedriver is
//! missing; install them with `apt-get install -y chromium chromium-driver`.
//! Screenshots go to `target/tmp/lesson-desktop.png` and
//! `target/tmp/lesson-phone.png`.

#[path = "support/browser.rs"]
mod browser;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use browser::{http_request, keys, Browser};
use serde_json::{json, Value};

/// How long the server has to print its address.
const SERVER_START_TIMEOUT_MS: u64 = 30_000;
/// How long a scene has to recompute (a debug build on a loaded machine).
const SCENE_READY_TIMEOUT_MS: u64 = 60_000;
const API_TIMEOUT: Duration = Duration::from_secs(60);

const SCENES: [&str; 6] = [
    "ack",
    "key-lifetime",
    "repeats",
    "crash-points",
    "ordering",
    "write-order",
];

/// A running `courier lesson`, killed on drop.
struct Lesson {
    child: Child,
    addr: SocketAddr,
}

impl Lesson {
    fn start() -> Lesson {
        let mut child = Command::new(env!("CARGO_BIN_EXE_courier"))
            .args(["lesson", "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start courier lesson");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = match rx.recv_timeout(Duration::from_millis(SERVER_START_TIMEOUT_MS)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                panic!("courier lesson printed nothing within {SERVER_START_TIMEOUT_MS} ms");
            }
        };
        let url = line
            .trim()
            .strip_prefix("courier lesson listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"));
        let addr: SocketAddr = url.parse().expect("an address in the first line");
        assert!(
            addr.ip().is_loopback(),
            "the lesson must listen on loopback by default"
        );
        Lesson { child, addr }
    }

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    fn post(&self, path: &str, body: &str) -> (u16, Value) {
        let (status, text) = http_request(self.addr, "POST", path, Some(body), API_TIMEOUT)
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        let v = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("POST {path} answered non-JSON ({e}): {text}"));
        (status, v)
    }

    fn get(&self, path: &str) -> (u16, String) {
        http_request(self.addr, "GET", path, None, API_TIMEOUT)
            .unwrap_or_else(|e| panic!("GET {path}: {e}"))
    }
}

impl Drop for Lesson {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn api_answers_runs_and_refuses_bad_input() {
    let lesson = Lesson::start();

    let (status, catalog) = lesson.get("/api/scenes");
    assert_eq!(status, 200);
    let catalog: Value = serde_json::from_str(&catalog).unwrap();
    let names: Vec<&str> = catalog
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["scene"].as_str().unwrap())
        .collect();
    assert_eq!(names, SCENES);

    // The same request twice gives the same run; the API's figures are the
    // library's.
    let body = r#"{"seed": 7, "params": {"crash_rate": 0.02}}"#;
    let (status, a) = lesson.post("/api/sim/ack", body);
    assert_eq!(status, 200, "{a}");
    let (_, b) = lesson.post("/api/sim/ack", body);
    assert_eq!(a, b);
    let lib = courier_sim_run("ack", json!({"crash_rate": 0.02}), 7);
    assert_eq!(a["outcome"], lib);

    for (path, body, want) in [
        ("/api/sim/ack", r#"{"params": {"crash_rate": 2}}"#, 400),
        (
            "/api/sim/ack",
            r#"{"params": {"messages": 1000000000}}"#,
            400,
        ),
        ("/api/sim/ack", r#"{"params": {"nope": 1}}"#, 400),
        ("/api/sim/ack", r#"{"seed": -1}"#, 400),
        ("/api/sim/ack", "not json", 400),
        (
            "/api/sim/repeats",
            r#"{"params": {"operation": "multiply"}}"#,
            400,
        ),
        ("/api/sim/nope", "{}", 404),
    ] {
        let (status, v) = lesson.post(path, body);
        assert_eq!(status, want, "{path} {body}: {v}");
        assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    }
    let big = format!(r#"{{"params": {{}}, "pad": "{}"}}"#, "x".repeat(20_000));
    let (status, v) = lesson.post("/api/sim/ack", &big);
    assert_eq!(status, 413, "{v}");

    let (status, page) = lesson.get("/");
    assert_eq!(status, 200);
    for asset in ["/style.css", "/app.js", "/charts.js", "/content.js"] {
        assert!(page.contains(asset), "the page does not load {asset}");
        assert_eq!(lesson.get(asset).0, 200, "{asset}");
    }
}

/// The library's outcome for the same request, via the binary's `sim --json`.
fn courier_sim_run(scene: &str, params: Value, seed: u64) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_courier"));
    cmd.args(["sim", scene, "--json", "--seed", &seed.to_string()]);
    for (k, v) in params.as_object().unwrap() {
        cmd.args(["--param", &format!("{k}={v}")]);
    }
    let out = cmd.output().expect("run courier sim");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("sim --json prints JSON");
    v["outcome"].clone()
}

fn scene_state(b: &Browser, scene: &str) -> Value {
    b.execute(
        "const s = document.querySelector(`section[data-scene=\"${arguments[0]}\"]`);\
         return s ? [s.dataset.state || '', s.dataset.request || ''] : null;",
        vec![json!(scene)],
    )
}

/// Waits until the scene shows a result for a request other than `previous`,
/// and returns that request.
fn wait_recomputed(b: &Browser, scene: &str, previous: &str) -> Value {
    let request = b.wait_for(
        &format!("scene {scene} to recompute"),
        SCENE_READY_TIMEOUT_MS,
        |b| {
            let s = scene_state(b, scene);
            (s[0] == "ready" && s[1].as_str() != Some(previous))
                .then(|| s[1].as_str().unwrap().to_string())
        },
    );
    serde_json::from_str(&request).expect("data-request is JSON")
}

fn figure(b: &Browser, id: &str) -> (f64, String) {
    let v = b.execute(
        "const f = document.getElementById(arguments[0]);\
         return [f.dataset.value, f.querySelector('.fig-value').textContent];",
        vec![json!(id)],
    );
    let value: f64 = v[0]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("figure {id} has no value: {v}"));
    (value, v[1].as_str().unwrap().to_string())
}

fn pointer(v: &Value, path: &str) -> f64 {
    v.pointer(path)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("no number at {path}"))
}

#[test]
fn page_recomputes_scenes_and_answers_the_quiz_by_keyboard() {
    let lesson = Lesson::start();
    let b = Browser::launch(1200, 900);
    b.goto(&lesson.url());
    for scene in SCENES {
        wait_recomputed(&b, scene, "");
    }
    let api = |request: &Value, scene: &str| -> Value {
        let (status, v) = lesson.post(&format!("/api/sim/{scene}"), &request.to_string());
        assert_eq!(status, 200, "{v}");
        v
    };

    // Scene 1: five steps up on the crash-rate slider, by keyboard.
    let before = scene_state(&b, "ack")[1].as_str().unwrap().to_string();
    let (lost_before, _) = figure(&b, "fig-ack-lost");
    let slider = b.find("#ctl-ack-crash_rate");
    b.send_keys(&slider, &keys::ARROW_RIGHT.repeat(5));
    let request = wait_recomputed(&b, "ack", &before);
    let crash_rate = pointer(&request, "/params/crash_rate");
    assert!(
        (crash_rate - 0.015).abs() < 1e-9,
        "five steps of 0.1% from 1% should give 1.5%, got {crash_rate}"
    );
    let run = api(&request, "ack");
    let (lost, text) = figure(&b, "fig-ack-lost");
    assert_eq!(
        lost,
        pointer(&run, "/outcome/strategies/0/lost_per_million")
    );
    assert_ne!(lost, lost_before, "the figure did not change");
    assert!(!text.is_empty() && text != "…");
    let (dup, _) = figure(&b, "fig-ack-dup");
    assert_eq!(
        dup,
        pointer(&run, "/outcome/strategies/1/duplicated_per_million")
    );
    let reading = b.execute(
        "return document.querySelector('section[data-scene=\"ack\"] .reading').textContent;",
        vec![],
    );
    assert_eq!(reading, run["reading"]);

    // Scene 2: the key lifetime slider, pushed to its end (30 days).
    let before = scene_state(&b, "key-lifetime")[1]
        .as_str()
        .unwrap()
        .to_string();
    let (late_before, _) = figure(&b, "fig-key-late");
    let slider = b.find("#ctl-key-lifetime-key_lifetime_s");
    b.send_keys(&slider, keys::END);
    let request = wait_recomputed(&b, "key-lifetime", &before);
    assert_eq!(pointer(&request, "/params/key_lifetime_s"), 2_592_000.0);
    let run = api(&request, "key-lifetime");
    let (late, _) = figure(&b, "fig-key-late");
    assert_eq!(late, pointer(&run, "/outcome/late_share"));
    assert!(
        late < late_before,
        "a longer lifetime must not raise the late share"
    );

    // Scene 3: switch the operation to `set` with a click.
    let before = scene_state(&b, "repeats")[1].as_str().unwrap().to_string();
    b.click(&b.find("#ctl-repeats-operation button[data-value=\"set\"]"));
    let request = wait_recomputed(&b, "repeats", &before);
    assert_eq!(request["params"]["operation"], "set");
    let run = api(&request, "repeats");
    assert_eq!(
        figure(&b, "fig-rep-dups").0,
        pointer(&run, "/outcome/chosen/duplicate_effects")
    );
    assert_eq!(
        figure(&b, "fig-rep-off").0,
        pointer(&run, "/outcome/chosen/final_off")
    );

    // A term card opens and closes.
    b.click(&b.find("#terms button[data-term=\"idempotency-key\"]"));
    let card = b.execute(
        "const d = document.getElementById('term-dialog'); return [d.open, d.querySelector('h3').textContent];",
        vec![],
    );
    assert_eq!(card, json!([true, "Idempotency key"]));
    b.click(&b.find("#term-close"));
    b.wait_for("the term card to close", 5_000, |b| {
        (b.execute(
            "return document.getElementById('term-dialog').open;",
            vec![],
        ) == json!(false))
        .then_some(())
    });

    // The "which guarantee?" quiz, answered with the keyboard: "1" then Enter.
    b.execute(
        "document.getElementById('quiz-guarantee').scrollIntoView({block: 'center'});",
        vec![],
    );
    b.click(&b.find("#quiz-guarantee .question"));
    let first_question = b.execute(
        "return document.querySelector('#quiz-guarantee .question').textContent;",
        vec![],
    );
    b.press(&["1"]);
    let after = b.wait_for("the quiz to take the answer", 5_000, |b| {
        let v = b.execute(
            "const q = document.getElementById('quiz-guarantee');\
             return [q.dataset.state, document.getElementById('xp').dataset.value,\
                     q.querySelector('.feedback').textContent];",
            vec![],
        );
        (v[0] != "asking").then_some(v)
    });
    // Option 1 (at-most-once) is the right answer to the first question.
    assert_eq!(after[0], "right", "{after}");
    assert_eq!(after[1], "20");
    assert!(
        after[2].as_str().unwrap().len() > 40,
        "no explanation shown: {after}"
    );
    b.press(&[keys::ENTER]);
    let next = b.wait_for("the next question", 5_000, |b| {
        let v = b.execute(
            "const q = document.getElementById('quiz-guarantee');\
             return [q.dataset.state, q.querySelector('.quiz-count').textContent,\
                     q.querySelector('.question').textContent];",
            vec![],
        );
        (v[0] == "asking").then_some(v)
    });
    assert_eq!(next[1], "Question 2 of 5");
    assert_ne!(next[2], first_question);

    // Screenshots: desktop, then a phone-sized window, which must not scroll
    // sideways.
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let desktop = b.screenshot_full_page();
    assert!(browser::png_size(&desktop).is_some_and(|(w, h)| w >= 1000 && h > 3000));
    std::fs::write(dir.join("lesson-desktop.png"), &desktop).unwrap();

    b.set_window_size(390, 844);
    b.wait_for("the layout to reach phone width", 10_000, |b| {
        (b.execute("return window.innerWidth;", vec![]).as_f64()? <= 400.0).then_some(())
    });
    // Charts are redrawn for the new width (the page debounces resize
    // events), not merely scaled down.
    b.wait_for("charts to be redrawn at phone width", 10_000, |b| {
        let widest = b.execute(
            "return Math.max(...[...document.querySelectorAll('.chart svg')].map(s => s.width.baseVal.value));",
            vec![],
        );
        (widest.as_f64()? <= 390.0).then_some(())
    });
    let overflow = b.execute(
        "return document.documentElement.scrollWidth - window.innerWidth;",
        vec![],
    );
    assert!(
        overflow.as_f64().unwrap() <= 1.0,
        "the page scrolls sideways at phone width by {overflow} px"
    );
    let errors = b.execute("return window.__lessonErrors;", vec![]);
    assert_eq!(errors, json!([]), "the page raised script errors");
    let phone = b.screenshot_full_page();
    std::fs::write(dir.join("lesson-phone.png"), &phone).unwrap();
    eprintln!(
        "screenshots: {} and {}",
        dir.join("lesson-desktop.png").display(),
        dir.join("lesson-phone.png").display()
    );
}
