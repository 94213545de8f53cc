//! End-to-end tests of `courier lesson`: the real binary, its JSON API, and
//! the page in a real headless Chromium (through chromedriver).
//!
//! The browser tests fail (they do not skip) when Chromium or chromedriver is
//! missing (install them with `apt-get install -y chromium chromium-driver`),
//! and the audit fails when axe-core is missing: `scripts/install-web-deps.sh`
//! installs the pinned version into `web/test/node_modules/` (or point
//! `$AXE_CORE_JS` at an `axe.min.js`).
//!
//! Screenshots go to `target/lesson-screenshots/` (`{part}-{1280,390}.png`,
//! one per scene and part of the page, the 390 px ones with touch emulation
//! on; `noscript-1280.png`, the page without JavaScript) and
//! `target/tmp/lesson-{desktop,phone}.png` (the whole page).

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
    for asset in [
        "/style.css",
        "/noscript.css",
        "/app.js",
        "/charts.js",
        "/content.js",
    ] {
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
    scene_ack_by_keyboard(&b, &lesson);
    scene_key_lifetime_to_its_end(&b, &lesson);
    scene_repeats_by_click(&b, &lesson);
    a_term_card_opens_and_closes(&b);
    the_quiz_by_keyboard(&b);
    screenshots_desktop_then_phone(&b);
}

/// What the API computes for the request a scene of the page made.
fn api(lesson: &Lesson, request: &Value, scene: &str) -> Value {
    let (status, v) = lesson.post(&format!("/api/sim/{scene}"), &request.to_string());
    assert_eq!(status, 200, "{v}");
    v
}

/// Scene 1: five steps up on the crash-rate slider, by keyboard.
fn scene_ack_by_keyboard(b: &Browser, lesson: &Lesson) {
    let before = scene_state(b, "ack")[1].as_str().unwrap().to_string();
    let (lost_before, _) = figure(b, "fig-ack-lost");
    let slider = b.find("#ctl-ack-crash_rate");
    b.send_keys(&slider, &keys::ARROW_RIGHT.repeat(5));
    let request = wait_recomputed(b, "ack", &before);
    let crash_rate = pointer(&request, "/params/crash_rate");
    assert!(
        (crash_rate - 0.015).abs() < 1e-9,
        "five steps of 0.1% from 1% should give 1.5%, got {crash_rate}"
    );
    let run = api(lesson, &request, "ack");
    let (lost, text) = figure(b, "fig-ack-lost");
    assert_eq!(
        lost,
        pointer(&run, "/outcome/strategies/0/lost_per_million")
    );
    assert_ne!(lost, lost_before, "the figure did not change");
    assert!(!text.is_empty() && text != "…");
    let (dup, _) = figure(b, "fig-ack-dup");
    assert_eq!(
        dup,
        pointer(&run, "/outcome/strategies/1/duplicated_per_million")
    );
    let reading = b.execute(
        "return document.querySelector('section[data-scene=\"ack\"] .reading').textContent;",
        vec![],
    );
    assert_eq!(reading, run["reading"]);
}

/// Scene 2: the key lifetime slider, pushed to its end (30 days).
fn scene_key_lifetime_to_its_end(b: &Browser, lesson: &Lesson) {
    let before = scene_state(b, "key-lifetime")[1]
        .as_str()
        .unwrap()
        .to_string();
    let (late_before, _) = figure(b, "fig-key-late");
    let slider = b.find("#ctl-key-lifetime-key_lifetime_s");
    b.send_keys(&slider, keys::END);
    let request = wait_recomputed(b, "key-lifetime", &before);
    assert_eq!(pointer(&request, "/params/key_lifetime_s"), 2_592_000.0);
    let run = api(lesson, &request, "key-lifetime");
    let (late, _) = figure(b, "fig-key-late");
    assert_eq!(late, pointer(&run, "/outcome/late_share"));
    assert!(
        late < late_before,
        "a longer lifetime must not raise the late share"
    );
}

/// Scene 3: switch the operation to `set` with a click.
fn scene_repeats_by_click(b: &Browser, lesson: &Lesson) {
    let before = scene_state(b, "repeats")[1].as_str().unwrap().to_string();
    b.click(&b.find("#ctl-repeats-operation button[data-value=\"set\"]"));
    let request = wait_recomputed(b, "repeats", &before);
    assert_eq!(request["params"]["operation"], "set");
    let run = api(lesson, &request, "repeats");
    assert_eq!(
        figure(b, "fig-rep-dups").0,
        pointer(&run, "/outcome/chosen/duplicate_effects")
    );
    assert_eq!(
        figure(b, "fig-rep-off").0,
        pointer(&run, "/outcome/chosen/final_off")
    );
}

fn a_term_card_opens_and_closes(b: &Browser) {
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
}

/// The "which guarantee?" quiz, answered with the keyboard: "1" then Enter.
fn the_quiz_by_keyboard(b: &Browser) {
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
}

/// Screenshots: desktop, then a phone-sized window, which must not scroll
/// sideways.
fn screenshots_desktop_then_phone(b: &Browser) {
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

// ---------- shared by the tests below ----------

/// Each figure on the page and how to read it from the scene's outcome: the
/// sum of the numbers at these JSON pointers.
const FIGURES: &[(&str, &str, &[&str])] = &[
    ("ack", "fig-ack-lost", &["/strategies/0/lost_per_million"]),
    (
        "ack",
        "fig-ack-dup",
        &["/strategies/1/duplicated_per_million"],
    ),
    (
        "ack",
        "fig-ack-dedup",
        &[
            "/strategies/2/lost_per_million",
            "/strategies/2/duplicated_per_million",
        ],
    ),
    ("key-lifetime", "fig-key-late", &["/late_share"]),
    ("key-lifetime", "fig-key-model", &["/expected_late_share"]),
    ("repeats", "fig-rep-dups", &["/chosen/duplicate_effects"]),
    ("repeats", "fig-rep-off", &["/chosen/final_off"]),
    ("crash-points", "fig-cp-dup", &["/chosen/duplicate"]),
    ("crash-points", "fig-cp-loss", &["/chosen/loss"]),
    ("ordering", "fig-ord-share", &["/out_of_order_share"]),
    ("ordering", "fig-ord-model", &["/expected_share"]),
    ("write-order", "fig-wo-lost", &["/designs/0/lost"]),
    ("write-order", "fig-wo-twice", &["/designs/1/charged_twice"]),
    (
        "write-order",
        "fig-wo-tx",
        &["/designs/2/lost", "/designs/2/charged_twice"],
    ),
];

/// Waits until every scene shows a result, and returns each scene's request.
fn wait_all_ready(b: &Browser) -> Vec<Value> {
    SCENES
        .iter()
        .map(|scene| {
            let request = b.wait_for(
                &format!("scene {scene} to be ready"),
                SCENE_READY_TIMEOUT_MS,
                |b| {
                    let s = scene_state(b, scene);
                    (s[0] == "ready").then(|| s[1].as_str().unwrap().to_string())
                },
            );
            serde_json::from_str(&request).unwrap()
        })
        .collect()
}

/// Checks every figure and reading of `scene` against `courier sim` run
/// with the very request the page sent.
fn figures_match_courier_sim(b: &Browser, scene: &str) {
    let request: Value = serde_json::from_str(scene_state(b, scene)[1].as_str().unwrap()).unwrap();
    let seed = request["seed"].as_u64().expect("a seed in the request");
    let full = courier_sim_full(scene, request["params"].clone(), seed);
    let outcome = &full["outcome"];
    for (_, id, paths) in FIGURES.iter().filter(|(s, _, _)| *s == scene) {
        let want: f64 = paths.iter().map(|p| pointer(outcome, p)).sum();
        let (got, text) = figure(b, id);
        assert_eq!(got, want, "{scene} {id} ({text}) for {request}");
    }
    let reading = b.execute(
        "return document.querySelector(`section[data-scene=\"${arguments[0]}\"] .reading`).textContent;",
        vec![json!(scene)],
    );
    assert_eq!(reading, full["reading"], "{scene} reading for {request}");
}

/// The whole run (`courier sim --json`) for a request.
fn courier_sim_full(scene: &str, params: Value, seed: u64) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_courier"));
    cmd.args(["sim", scene, "--json", "--seed", &seed.to_string()]);
    for (k, v) in params.as_object().unwrap() {
        let v = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        cmd.args(["--param", &format!("{k}={v}")]);
    }
    let out = cmd.output().expect("run courier sim");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("sim --json prints JSON")
}

fn quiz_state(b: &Browser, quiz: &str) -> Value {
    b.execute(
        "const q = document.getElementById(arguments[0]);\
         const x = document.getElementById('xp');\
         const count = q.querySelector('.quiz-count');\
         return { state: q.dataset.state, count: count ? count.textContent : '',\
                  xp: Number(x.dataset.value), max: Number(x.dataset.max),\
                  focusInside: q.contains(document.activeElement),\
                  focused: document.activeElement.className || document.activeElement.tagName };",
        vec![json!(quiz)],
    )
}

/// The right answers of a quiz, read from the page's own content.
fn answers(b: &Browser, quiz: &str) -> Vec<u64> {
    let key = if quiz == "quiz-guarantee" {
        "quiz"
    } else {
        "interview"
    };
    let v = b.execute(
        "return window.Lesson.content[arguments[0]].map(q => q.answer);",
        vec![json!(key)],
    );
    v.as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_u64().unwrap())
        .collect()
}

/// Answers a whole quiz with digit keys and Enter, checking after each step
/// that the focus stayed in the quiz and XP stayed within its maximum.
fn answer_all_by_keyboard(b: &Browser, quiz: &str) {
    let right = answers(b, quiz);
    for (i, a) in right.iter().enumerate() {
        let s = quiz_state(b, quiz);
        assert_eq!(s["state"], "asking", "{s}");
        assert_eq!(s["count"], format!("Question {} of {}", i + 1, right.len()));
        assert_eq!(s["focusInside"], true, "focus left the quiz: {s}");
        b.press(&[&(a + 1).to_string()]);
        let s = quiz_state(b, quiz);
        assert_eq!(s["state"], "right", "{s}");
        assert_eq!(
            s["focusInside"], true,
            "focus left the quiz after an answer: {s}"
        );
        assert!(
            s["xp"].as_f64() <= s["max"].as_f64(),
            "XP past its maximum: {s}"
        );
        b.press(&[keys::ENTER]);
    }
    let s = quiz_state(b, quiz);
    assert_eq!(s["state"], "done", "{s}");
    assert_eq!(
        s["focusInside"], true,
        "focus left the quiz at its end: {s}"
    );
}

#[test]
fn keys_act_only_on_the_quiz_in_view_and_xp_never_passes_its_maximum() {
    let lesson = Lesson::start();
    let b = Browser::launch(1280, 900);
    b.goto(&lesson.url());
    wait_all_ready(&b);
    let fresh = quiz_state(&b, "quiz-guarantee");
    assert_eq!(fresh["xp"], 0);
    assert_eq!(fresh["max"], 220, "5 + 6 questions of 20 XP: {fresh}");

    digits_do_nothing_out_of_view(&b);
    a_digit_answers_the_quiz_in_view(&b);
    xp_stays_within_its_maximum(&b);
    radio_group_moves_with_arrows(&b);
    sliders_announce_values(&b);
}

#[test]
fn the_address_reproduces_a_state_and_bad_values_get_a_note() {
    let lesson = Lesson::start();
    let b = Browser::launch(1280, 900);
    let query = "?seed=7&ack.crash_rate=0.02&repeats.operation=versioned&ordering.in_flight=11\
                 &ordering.sequence_numbers=false&key-lifetime.key_lifetime_s=86400";
    b.goto(&format!("{}{query}", lesson.url()));
    let requests = wait_all_ready(&b);
    for r in &requests {
        assert_eq!(r["seed"], 7, "{r}");
    }
    let param = |scene: &str, name: &str| {
        requests[SCENES.iter().position(|s| *s == scene).unwrap()]["params"][name].clone()
    };
    assert_eq!(param("ack", "crash_rate"), 0.02);
    assert_eq!(param("repeats", "operation"), "versioned");
    assert_eq!(param("ordering", "in_flight"), 11);
    assert_eq!(param("key-lifetime", "key_lifetime_s"), 86400);
    let note = b.execute(
        "return document.getElementById('url-note').textContent;",
        vec![],
    );
    assert_eq!(note, "", "a good address got a note");
    for scene in SCENES {
        figures_match_courier_sim(&b, scene);
    }
    ordering_says_why_and_sweeps_the_range(&b);
    a_link_reproduces_every_scene(&b);
    bad_values_get_a_note(&b, &lesson);
}

/// The path of axe-core's browser build; panics (the test fails) when it is
/// missing.
fn axe_source() -> String {
    let path = std::env::var_os("AXE_CORE_JS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../web/test/node_modules/axe-core/axe.min.js")
        });
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "axe-core is missing at {} ({e}): run scripts/install-web-deps.sh \
             (it installs the version pinned in web/test/package-lock.json), or set $AXE_CORE_JS",
            path.display()
        )
    })
}

/// Runs axe-core on the page; returns the serious and critical violations
/// (and checks that the audit really ran its rules).
fn axe_serious(b: &Browser, axe: &str) -> Vec<Value> {
    b.execute(axe, vec![]);
    b.set_script_timeout(120_000);
    let v = b.execute_async(
        "const done = arguments[arguments.length - 1];\
         axe.run(document, { resultTypes: ['violations'] })\
           .then(r => done({ passes: r.passes.length, serious: r.violations\
             .filter(v => v.impact === 'serious' || v.impact === 'critical')\
             .map(v => ({ id: v.id, impact: v.impact, help: v.help,\
                          nodes: v.nodes.slice(0, 5).map(n => [n.target.join(' '), n.failureSummary]) })) }))\
           .catch(e => done({ error: String(e) }));",
        vec![],
    );
    assert!(v["error"].is_null(), "axe-core failed: {v}");
    assert!(
        v["passes"].as_u64().is_some_and(|n| n >= 20),
        "axe-core ran too few rules: {v}"
    );
    v["serious"]
        .as_array()
        .cloned()
        .expect("axe-core's violations")
}

/// Elements wider than the window, or reaching past its edges (a scroll
/// container's own content is exempt: the container is checked instead).
const OVERFLOW_JS: &str = "const W = document.documentElement.clientWidth; const out = [];\
  if (document.documentElement.scrollWidth > W + 1) out.push('the page scrolls sideways: ' + document.documentElement.scrollWidth + ' > ' + W);\
  for (const e of document.querySelectorAll('body *')) {\
    const r = e.getBoundingClientRect(); if (r.width === 0 && r.height === 0) continue;\
    let p = e.parentElement, scrolled = false;\
    while (p) { const o = getComputedStyle(p).overflowX; if (o === 'auto' || o === 'scroll') { scrolled = true; break; } p = p.parentElement; }\
    if (scrolled) continue;\
    if (r.left < -1 || r.right > W + 1) out.push(e.tagName.toLowerCase() + '.' + (e.getAttribute('class') || '') + ' ' + Math.round(r.left) + '..' + Math.round(r.right));\
  }\
  return out.slice(0, 20);";

/// Labels that reach past their chart's edges (clipped).
const CLIPPED_JS: &str = "const out = [];\
  for (const svg of document.querySelectorAll('.chart svg')) {\
    const vb = svg.viewBox.baseVal;\
    for (const t of svg.querySelectorAll('text')) { const b = t.getBBox();\
      if (b.x < -0.5 || b.y < -0.5 || b.x + b.width > vb.width + 0.5 || b.y + b.height > vb.height + 0.5)\
        out.push(svg.closest('section').dataset.scene + ': ' + t.textContent + ' ' + [b.x, b.width, vb.width].map(Math.round).join('/')); } }\
  return out;";

/// Interactive elements smaller than 24x24 px (inline links in running text
/// are exempt, as WCAG 2.5.8 allows).
const TAP_TARGETS_JS: &str = "const out = []; let n = 0;\
  for (const e of document.querySelectorAll('a[href], button, input, select, textarea, summary, [role=radio], [tabindex]:not([tabindex=\"-1\"])')) {\
    if (e.closest('dialog:not([open])') || !e.getClientRects().length) continue;\
    if (e.tagName === 'A' && getComputedStyle(e).display === 'inline') continue;\
    const r = e.getBoundingClientRect(); if (r.width === 0) continue; n++;\
    if (r.width < 24 || r.height < 24) out.push(e.tagName.toLowerCase() + '#' + e.id + '.' + e.className + ' ' + Math.round(r.width) + 'x' + Math.round(r.height));\
  }\
  return [n, out];";

/// The lowest contrast of each chart's marks (bars, lines, dots, axes and
/// markers) against the panel behind them, and against the bar track for
/// bars drawn on one.
const MARK_CONTRAST_JS: &str = "\
  const rgb = (c) => { const m = c.match(/[0-9.]+/g).map(Number); return [m[0], m[1], m[2], m.length > 3 ? m[3] : 1]; };\
  const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }; return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };\
  const ratio = (a, b) => { const x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); };\
  const over = (c, a, bg) => [0, 1, 2].map(i => c[i] * a + bg[i] * (1 - a));\
  const out = []; let n = 0;\
  for (const svg of document.querySelectorAll('.chart svg')) {\
    const panel = rgb(getComputedStyle(svg.closest('.panel')).backgroundColor);\
    const track = svg.querySelector('.bar-track');\
    const backs = [panel]; if (track) backs.push(rgb(getComputedStyle(track).fill));\
    for (const m of svg.querySelectorAll('.mark, .axis, .marker')) {\
      const s = getComputedStyle(m);\
      const stroked = m.tagName === 'path' || m.tagName === 'line';\
      const c = rgb(stroked ? s.stroke : s.fill);\
      const a = Number(s.opacity) * Number(stroked ? s.strokeOpacity : s.fillOpacity) * c[3];\
      if (m.tagName === 'rect' && Number(m.getAttribute('width')) === 0) continue;\
      const mine = m.classList.contains('mark-on-track') ? backs : [panel];\
      for (const bg of mine) { n++; const r = ratio(over(c, a, bg), bg);\
        if (r < 3) out.push(svg.closest('section').dataset.scene + ' ' + m.tagName + '.' + m.getAttribute('class') + ' ' + r.toFixed(2)); }\
    } }\
  return [n, out];";

/// What each screenshot shows: a file name and the element.
const SHOTS: &[(&str, &str)] = &[
    ("hero", "section.hero"),
    ("ack", "section[data-scene=\"ack\"]"),
    ("key-lifetime", "section[data-scene=\"key-lifetime\"]"),
    ("repeats", "section[data-scene=\"repeats\"]"),
    ("crash-points", "section[data-scene=\"crash-points\"]"),
    ("ordering", "section[data-scene=\"ordering\"]"),
    ("quiz-guarantee", "section[aria-labelledby=\"h-quiz\"]"),
    ("write-order", "section[data-scene=\"write-order\"]"),
    ("who", "section[aria-labelledby=\"h-who\"]"),
    ("interview", "section[aria-labelledby=\"h-interview\"]"),
    ("next", "section[aria-labelledby=\"h-next\"]"),
];

fn screenshot_dir() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/tmp has a parent")
        .join("lesson-screenshots");
    std::fs::create_dir_all(&dir).expect("create target/lesson-screenshots");
    dir
}

/// Resizes the window and waits until the charts are redrawn for it.
fn resize_to(b: &Browser, width: u32) {
    b.set_window_size(width, 900);
    b.wait_for(&format!("the layout to reach {width} px"), 10_000, |b| {
        let inner = b.execute("return window.innerWidth;", vec![]).as_f64()?;
        ((inner - f64::from(width)).abs() <= 16.0).then_some(())
    });
    b.wait_for(&format!("charts to be redrawn at {width} px"), 10_000, |b| {
        let v = b.execute(
            "const W = document.documentElement.clientWidth;\
             return [...document.querySelectorAll('.chart svg')].every(s => s.width.baseVal.value <= W\
               && Math.abs(s.width.baseVal.value - Math.max(200, Math.floor(s.parentElement.clientWidth))) < 1);",
            vec![],
        );
        (v == json!(true)).then_some(())
    });
}

#[test]
fn audit_layout_tap_targets_and_contrast_at_desktop_and_phone_widths() {
    let axe = axe_source();
    let lesson = Lesson::start();
    let b = Browser::launch(1280, 900);
    b.goto(&lesson.url());
    wait_all_ready(&b);
    let detail = open_a_crash_point(&b);
    let dir = screenshot_dir();
    let mut saved = Vec::new();
    for width in [1280u32, 390, 320] {
        resize_to(&b, width);
        if width == 390 {
            hints_suit_touch_screens(&b);
        }
        let kept = b.execute(
            "return document.querySelector('section[data-scene=\"crash-points\"] .tl-detail').textContent;",
            vec![],
        );
        assert_eq!(
            kept, detail,
            "the crash point's details were lost at {width} px"
        );
        let overflow = b.execute(OVERFLOW_JS, vec![]);
        assert_eq!(overflow, json!([]), "wider than the window at {width} px");
        let clipped = b.execute(CLIPPED_JS, vec![]);
        assert_eq!(clipped, json!([]), "chart labels clipped at {width} px");
        let taps = b.execute(TAP_TARGETS_JS, vec![]);
        assert!(
            taps[0].as_u64().unwrap() > 40,
            "too few targets found: {taps}"
        );
        assert_eq!(
            taps[1],
            json!([]),
            "tap targets under 24x24 px at {width} px"
        );
        let marks = b.execute(MARK_CONTRAST_JS, vec![]);
        assert!(
            marks[0].as_u64().unwrap() > 50,
            "too few chart marks found: {marks}"
        );
        assert_eq!(marks[1], json!([]), "chart marks under 3:1 at {width} px");
        if width == 320 {
            continue;
        }
        let serious = axe_serious(&b, &axe);
        assert!(
            serious.is_empty(),
            "axe-core found serious or critical violations at {width} px: {}",
            serde_json::to_string_pretty(&serious).unwrap()
        );
        for (name, css) in SHOTS {
            let png = b
                .screenshot_element(css)
                .unwrap_or_else(|| panic!("nothing to screenshot at {css}"));
            assert!(
                browser::png_size(&png).is_some_and(|(w, h)| w >= width.min(400) - 40 && h > 100)
            );
            let path = dir.join(format!("{name}-{width}.png"));
            std::fs::write(&path, &png).unwrap();
            saved.push(path);
        }
    }
    labels_stay_inside_at_the_extremes(&b, &lesson);
    own_links_answer(&b, &lesson);
    let errors = b.execute("return window.__lessonErrors;", vec![]);
    assert_eq!(errors, json!([]), "the page raised script errors");
    eprintln!("screenshots ({}): {}", saved.len(), dir.display());
}

#[test]
fn without_javascript_each_scene_shows_its_figures_at_the_defaults() {
    let lesson = Lesson::start();
    let (status, page) = lesson.get("/");
    assert_eq!(status, 200);
    let unescape = |s: &str| {
        s.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
    };
    for scene in SCENES {
        let open = format!("<noscript><div class=\"noscript-scene\" data-scene=\"{scene}\">");
        let start = page
            .find(&open)
            .unwrap_or_else(|| panic!("no <noscript> figures for {scene}"));
        let block = &page[start..start + page[start..].find("</noscript>").unwrap()];
        let between = |a: &str, b: &str| {
            let i = block.find(a).unwrap_or_else(|| panic!("{scene}: no {a}")) + a.len();
            unescape(&block[i..i + block[i..].find(b).unwrap()])
        };
        let table = between("<pre>", "</pre>");
        let reading = between("<p class=\"noscript-reading\">", "</p>");
        let out = Command::new(env!("CARGO_BIN_EXE_courier"))
            .args(["sim", scene, "--seed", "1"])
            .output()
            .expect("run courier sim");
        assert!(out.status.success());
        let printed = String::from_utf8(out.stdout).unwrap();
        assert!(table.lines().count() > 2, "{scene}: {table}");
        assert!(
            printed.contains(&table),
            "{scene}: the page's table is not courier sim's:\n{table}\n---\n{printed}"
        );
        assert!(
            printed.contains(&reading),
            "{scene}: the page's reading is not courier sim's: {reading}"
        );
    }
    assert!(
        !page.contains("<!-- noscript"),
        "a marker was left unreplaced"
    );
    in_a_browser_without_scripts_every_table_shows(&lesson);
}

/// In a browser without JavaScript every scene shows its table, and what
/// only the scripts fill in is hidden rather than left empty.
fn in_a_browser_without_scripts_every_table_shows(lesson: &Lesson) {
    let b = Browser::launch_with(1280, 900, &["--blink-settings=scriptEnabled=false"]);
    b.goto(&lesson.url());
    let shown = b.execute(
        "return [...document.querySelectorAll('section[data-scene] .noscript-scene')]\
           .map(d => [d.dataset.scene, d.querySelector('pre').getBoundingClientRect().height]);",
        vec![],
    );
    let shown = shown.as_array().unwrap();
    assert_eq!(shown.len(), SCENES.len(), "{shown:?}");
    for row in shown {
        assert!(row[1].as_f64().unwrap() > 40.0, "{row} is not shown");
    }
    // What only the scripts fill in is hidden rather than left empty.
    let empty_shown = b.execute(
        "return ['.seed-row', '#terms', '#quiz-guarantee', '#who-cards', '#next-list']\
           .filter(s => document.querySelector(s).getClientRects().length > 0);",
        vec![],
    );
    assert_eq!(
        empty_shown,
        json!([]),
        "script-only parts shown without JavaScript"
    );
    let png = b
        .screenshot_element("main")
        .expect("the page has a main element");
    std::fs::write(screenshot_dir().join("noscript-1280.png"), png).unwrap();
}

/// With the quizzes out of view or another control focused, digits answer nothing.
fn digits_do_nothing_out_of_view(b: &Browser) {
    b.execute(
        "window.scrollTo(0, 0); document.activeElement.blur();",
        vec![],
    );
    b.press(&["2", keys::ENTER, "1"]);
    for quiz in ["quiz-guarantee", "quiz-interview"] {
        let s = quiz_state(b, quiz);
        assert_eq!(s["state"], "asking", "{quiz} answered from the top: {s}");
    }
    // Nor with a term chip focused (the chip keeps Enter: the card opens).
    b.execute("document.querySelector('#terms .term').focus();", vec![]);
    b.press(&["1"]);
    assert_eq!(quiz_state(b, "quiz-guarantee")["state"], "asking");
}

/// A digit answers the quiz in view; after it, Enter still belongs to the focused control.
fn a_digit_answers_the_quiz_in_view(b: &Browser) {
    b.execute(
        "document.getElementById('quiz-guarantee').scrollIntoView({block: 'center'});\
         document.activeElement.blur();",
        vec![],
    );
    let first = answers(b, "quiz-guarantee")[0];
    b.press(&[&(first + 1).to_string()]);
    let s = quiz_state(b, "quiz-guarantee");
    assert_eq!(s["state"], "right", "{s}");
    assert_eq!(s["xp"], 20);
    assert_eq!(
        s["focusInside"], true,
        "focus dropped after the answer: {s}"
    );

    // After an answer, Enter on another control presses that control.
    b.execute("document.querySelector('#terms .term').focus();", vec![]);
    b.press(&[keys::ENTER]);
    let open = b.execute(
        "return document.getElementById('term-dialog').open;",
        vec![],
    );
    assert_eq!(
        open,
        json!(true),
        "Enter on a term chip did not open its card"
    );
    assert_eq!(
        quiz_state(b, "quiz-guarantee")["count"],
        "Question 1 of 5",
        "Enter on a term chip moved the quiz on"
    );
    b.press(&[keys::ESCAPE]);
    b.wait_for("the term card to close", 5_000, |b| {
        (b.execute(
            "return document.getElementById('term-dialog').open;",
            vec![],
        ) == json!(false))
        .then_some(())
    });
}

/// Both quizzes answered by keyboard, twice: XP counts each question once.
fn xp_stays_within_its_maximum(b: &Browser) {
    b.execute(
        "document.querySelector('#quiz-guarantee .next').focus();",
        vec![],
    );
    b.press(&[keys::ENTER]);
    let s = quiz_state(b, "quiz-guarantee");
    assert_eq!(s["count"], "Question 2 of 5", "{s}");
    assert_eq!(s["focusInside"], true, "focus dropped after Next: {s}");
    let right = answers(b, "quiz-guarantee");
    for a in &right[1..] {
        b.press(&[&(a + 1).to_string(), keys::ENTER]);
        let s = quiz_state(b, "quiz-guarantee");
        assert_eq!(s["focusInside"], true, "{s}");
    }
    let s = quiz_state(b, "quiz-guarantee");
    assert_eq!(s["state"], "done", "{s}");
    assert_eq!(s["xp"], 100);

    // "Try again" (Enter on the focused button) and a second perfect round
    // earn nothing more.
    b.press(&[keys::ENTER]);
    answer_all_by_keyboard(b, "quiz-guarantee");
    assert_eq!(quiz_state(b, "quiz-guarantee")["xp"], 100);

    b.execute(
        "document.getElementById('quiz-interview').scrollIntoView({block: 'center'});\
         document.querySelector('#quiz-interview .question').focus();",
        vec![],
    );
    answer_all_by_keyboard(b, "quiz-interview");
    b.press(&[keys::ENTER]);
    answer_all_by_keyboard(b, "quiz-interview");
    let s = quiz_state(b, "quiz-interview");
    assert_eq!(
        (s["xp"].clone(), s["max"].clone()),
        (json!(220), json!(220)),
        "{s}"
    );
    let header = b.execute("return document.getElementById('xp').textContent;", vec![]);
    assert_eq!(header, "220 / 220 XP");
}

/// Segmented buttons are one tab stop and move with the arrow keys.
fn radio_group_moves_with_arrows(b: &Browser) {
    let before = scene_state(b, "repeats")[1].as_str().unwrap().to_string();
    let group = b.execute(
        "const g = document.getElementById('ctl-repeats-operation');\
         const checked = g.querySelector('[aria-checked=\"true\"]');\
         checked.focus();\
         return [...g.children].map(x => [x.dataset.value, x.tabIndex, x.getAttribute('aria-checked')]);",
        vec![],
    );
    let stops = group
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r[1] == 0)
        .count();
    assert_eq!(stops, 1, "one tab stop per radio group: {group}");
    let checked = group
        .as_array()
        .unwrap()
        .iter()
        .position(|r| r[2] == "true")
        .unwrap();
    b.press(&[keys::ARROW_RIGHT]);
    let want = group[(checked + 1) % group.as_array().unwrap().len()][0].clone();
    let now = b.execute(
        "const a = document.activeElement; return [a.dataset.value, a.getAttribute('aria-checked')];",
        vec![],
    );
    assert_eq!(
        now,
        json!([want, "true"]),
        "ArrowRight did not move the choice"
    );
    let request = wait_recomputed(b, "repeats", &before);
    assert_eq!(request["params"]["operation"], want);
    figures_match_courier_sim(b, "repeats");
}

/// Sliders announce values, not positions.
fn sliders_announce_values(b: &Browser) {
    let texts = b.execute(
        "return [...document.querySelectorAll('input[type=range]')].map(i =>\
           [i.id, i.getAttribute('aria-valuetext'), document.getElementById(i.id + '-value').textContent, i.value]);",
        vec![],
    );
    for t in texts.as_array().unwrap() {
        assert_eq!(t[1], t[2], "aria-valuetext is not the shown value: {t}");
    }
    let by_id = |id: &str| {
        texts
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t[0] == id)
            .unwrap_or_else(|| panic!("no slider {id}"))[1]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(by_id("ctl-key-lifetime-key_lifetime_s"), "5 min");
    assert!(by_id("ctl-ack-crash_rate").ends_with('%'));
    let errors = b.execute("return window.__lessonErrors;", vec![]);
    assert_eq!(errors, json!([]), "the page raised script errors");
}

/// Past the round trip the reading says why more in flight stopped mattering, and
/// the sweep covers the slider's whole range.
fn ordering_says_why_and_sweeps_the_range(b: &Browser) {
    let reading = b.execute(
        "return document.querySelector('section[data-scene=\"ordering\"] .reading').textContent;",
        vec![],
    );
    assert!(
        reading.as_str().unwrap().contains("changes nothing"),
        "{reading}"
    );
    // The sweep covers the slider's whole range.
    let columns = b.execute(
        "return [document.querySelectorAll('section[data-scene=\"ordering\"] svg rect.mark').length,\
                 Number(document.getElementById('ctl-ordering-in_flight').max)];",
        vec![],
    );
    assert_eq!(
        columns[0], columns[1],
        "sweep columns vs the slider's maximum"
    );
}

/// Moving a control updates the address; opening it again reproduces every scene.
fn a_link_reproduces_every_scene(b: &Browser) {
    let before = scene_state(b, "ordering")[1].as_str().unwrap().to_string();
    b.send_keys(&b.find("#ctl-ordering-in_flight"), keys::ARROW_LEFT);
    wait_recomputed(b, "ordering", &before);
    let href = b.execute("return location.href;", vec![]);
    let href = href.as_str().unwrap().to_string();
    assert!(href.contains("ordering.in_flight=10"), "{href}");
    let shown: Vec<Value> = SCENES
        .iter()
        .map(|s| scene_state(b, s)[1].clone())
        .collect();
    let figures_shown: Vec<(f64, String)> =
        FIGURES.iter().map(|(_, id, _)| figure(b, id)).collect();
    b.goto("about:blank");
    b.goto(&href);
    wait_all_ready(b);
    let again: Vec<Value> = SCENES
        .iter()
        .map(|s| scene_state(b, s)[1].clone())
        .collect();
    assert_eq!(again, shown, "the link did not reproduce the requests");
    let figures_again: Vec<(f64, String)> =
        FIGURES.iter().map(|(_, id, _)| figure(b, id)).collect();
    assert_eq!(
        figures_again, figures_shown,
        "the link did not reproduce the figures"
    );
}

/// Bad values in the address: a visible note, and the scene's default.
fn bad_values_get_a_note(b: &Browser, lesson: &Lesson) {
    b.goto(&format!(
        "{}?seed=abc&ack.crash_rate=2&repeats.operation=multiply&ordering.in_flight=1.5&nope.x=1",
        lesson.url()
    ));
    let requests = wait_all_ready(b);
    let catalog: Value = serde_json::from_str(&lesson.get("/api/scenes").1).unwrap();
    let default = |scene: &str, name: &str| {
        catalog
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["scene"] == scene)
            .unwrap()["params"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["default"]
            .clone()
    };
    let at = |scene: &str| &requests[SCENES.iter().position(|s| *s == scene).unwrap()];
    assert_eq!(at("ack")["seed"], 1);
    assert_eq!(
        at("ack")["params"]["crash_rate"],
        default("ack", "crash_rate")
    );
    assert_eq!(
        at("repeats")["params"]["operation"],
        default("repeats", "operation")
    );
    assert_eq!(
        at("ordering")["params"]["in_flight"],
        default("ordering", "in_flight")
    );
    let note = b.execute(
        "const n = document.getElementById('url-note'); const r = n.getBoundingClientRect();\
         return [n.textContent, r.height];",
        vec![],
    );
    let text = note[0].as_str().unwrap();
    for part in [
        "seed=abc",
        "ack.crash_rate=2",
        "repeats.operation=multiply",
        "ordering.in_flight=1.5",
        "nope.x",
    ] {
        assert!(
            text.contains(part),
            "the note does not mention {part}: {text}"
        );
    }
    assert!(
        note[1].as_f64().unwrap() > 10.0,
        "the note is not visible: {note}"
    );
    for scene in SCENES {
        figures_match_courier_sim(b, scene);
    }
}

/// Labels at the ends of the ranges (a full bar, a marker at either end of
/// its axis) stay inside their charts too.
fn labels_stay_inside_at_the_extremes(b: &Browser, lesson: &Lesson) {
    for query in [
        "?ack.crash_rate=0.2&ack.gap_share=1&key-lifetime.key_lifetime_s=2592000&ordering.in_flight=16",
        "?ack.crash_rate=0.5&ack.gap_share=0.5&key-lifetime.key_lifetime_s=1&repeats.duplicate_rate=0.2",
    ] {
        b.goto(&format!("{}{query}", lesson.url()));
        wait_all_ready(b);
        let note = b.execute("return document.getElementById('url-note').textContent;", vec![]);
        assert_eq!(note, "", "{query}");
        for width in [320u32, 390, 1280] {
            resize_to(b, width);
            let clipped = b.execute(CLIPPED_JS, vec![]);
            assert_eq!(clipped, json!([]), "chart labels clipped at {width} px with {query}");
            let overflow = b.execute(OVERFLOW_JS, vec![]);
            assert_eq!(overflow, json!([]), "wider than the window at {width} px with {query}");
        }
    }
}

/// Every link to this server's own pages answers.
fn own_links_answer(b: &Browser, lesson: &Lesson) {
    let links = b.execute(
        "return [...document.querySelectorAll('a[href^=\"/\"]')].map(a => a.getAttribute('href'));",
        vec![],
    );
    let links = links.as_array().unwrap();
    assert!(links.len() >= 4, "where-to-go-next links: {links:?}");
    for href in links {
        let (status, body) = lesson.get(href.as_str().unwrap());
        assert_eq!(status, 200, "{href}");
        assert!(body.len() > 500, "{href} is nearly empty");
    }
}

/// Opens one crash point's details, as a touch user would (a click, no
/// hover), and returns them.
fn open_a_crash_point(b: &Browser) -> Value {
    b.click(&b.find(
        "section[data-scene=\"crash-points\"] .tl-crash.tl-duplicate, \
         section[data-scene=\"crash-points\"] .tl-crash.tl-loss",
    ));
    let detail = b.execute(
        "return document.querySelector('section[data-scene=\"crash-points\"] .tl-detail').textContent;",
        vec![],
    );
    assert!(
        detail.as_str().unwrap().starts_with("Crash after"),
        "{detail}"
    );
    detail
}

/// From the phone width on, the window is a touch screen: the quizzes
/// stop telling the reader to press keys.
fn hints_suit_touch_screens(b: &Browser) {
    let shown = || {
        b.execute(
            "return [...document.querySelectorAll('#quiz-guarantee .hint > span')]\
               .map(s => [s.className, s.getClientRects().length > 0]);",
            vec![],
        )
    };
    assert_eq!(shown(), json!([["hint-keys", true], ["hint-touch", false]]));
    b.cmd(
        "POST",
        "/goog/cdp/execute",
        json!({ "cmd": "Emulation.setTouchEmulationEnabled",
                "params": { "enabled": true, "maxTouchPoints": 5 } }),
    );
    let touch = b.execute("return matchMedia('(pointer: coarse)').matches;", vec![]);
    assert_eq!(touch, json!(true), "touch emulation did not take");
    assert_eq!(shown(), json!([["hint-keys", false], ["hint-touch", true]]));
}
