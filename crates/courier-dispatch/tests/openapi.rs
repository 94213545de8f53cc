//! The OpenAPI document against a live server (real PostgreSQL, real HTTP):
//! every answer of the API's routes is documented (status and body) and
//! matches its schema; every documented response is provoked, except the few
//! that need a broken database (`NOT_PROVOKED`); the schemas of an action, a
//! store's and a provider's settings list exactly the fields the store's
//! views serialize, and the settings' bounds are `courier_core::rate`'s.
use courier_core::Limits;
use courier_dispatch::openapi::{document_json, router, NOT_PROVOKED};
use courier_dispatch::server::{router as api_router, serve, HttpLimits, ServerConfig};
use courier_provider::signature;
use courier_testkit::{fixtures, fresh_db};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

const SECRET: &[u8] = b"doc-secret";
const TOKEN: &str = "doc-token";

/// A tiny JSON Schema check for what utoipa emits: `$ref`, `type`
/// (one or several), `oneOf`/`allOf`, `enum`, `properties`, `required`,
/// `additionalProperties: false`, `items`, string lengths. Returns the
/// first mismatch, with its JSON path.
fn check(doc: &Value, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let name = r
            .strip_prefix("#/components/schemas/")
            .ok_or_else(|| format!("{at}: unsupported $ref {r}"))?;
        let target = &doc["components"]["schemas"][name];
        if target.is_null() {
            return Err(format!("{at}: $ref to a missing schema {name}"));
        }
        return check(doc, target, v, at);
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for s in all {
            check(doc, s, v, at)?;
        }
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
        let n = one.iter().filter(|s| check(doc, s, v, at).is_ok()).count();
        if n != 1 {
            return Err(format!("{at}: {v} matches {n} of the oneOf schemas, not 1"));
        }
    }
    check_type(schema, v, at)?;
    check_scalar(schema, v, at)?;
    if let Some(obj) = v.as_object() {
        check_object(doc, schema, obj, at)?;
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, x) in arr.iter().enumerate() {
            check(doc, items, x, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

/// `type`: one name or a list of them.
fn check_type(schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    let Some(t) = schema.get("type") else {
        return Ok(());
    };
    let types: Vec<&str> = match t {
        Value::String(s) => vec![s.as_str()],
        Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
        _ => return Err(format!("{at}: odd type {t}")),
    };
    let ok = types.iter().any(|t| match *t {
        "null" => v.is_null(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        _ => false,
    });
    if ok {
        Ok(())
    } else {
        Err(format!("{at}: {v} is not of type {t}"))
    }
}

/// `enum` and the string lengths.
fn check_scalar(schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            return Err(format!("{at}: {v} is not one of {schema}"));
        }
    }
    if let Some(s) = v.as_str() {
        let n = s.chars().count() as u64;
        let bound = |k: &str| schema.get(k).and_then(Value::as_u64);
        if bound("minLength").is_some_and(|m| n < m) || bound("maxLength").is_some_and(|m| n > m) {
            return Err(format!("{at}: length {n} is out of {schema}"));
        }
    }
    Ok(())
}

/// `required`, `properties` and `additionalProperties: false`.
fn check_object(
    doc: &Value,
    schema: &Value,
    obj: &serde_json::Map<String, Value>,
    at: &str,
) -> Result<(), String> {
    let props = schema.get("properties").and_then(Value::as_object);
    let required = schema.get("required").and_then(Value::as_array);
    for r in required.into_iter().flatten() {
        let r = r.as_str().unwrap_or_default();
        if !obj.contains_key(r) {
            return Err(format!("{at}: required field {r} is missing"));
        }
    }
    for (k, fv) in obj {
        match props.and_then(|p| p.get(k)) {
            Some(ps) => check(doc, ps, fv, &format!("{at}.{k}"))?,
            None if schema.get("additionalProperties") == Some(&json!(false)) => {
                return Err(format!("{at}: field {k} is not documented"))
            }
            None => {}
        }
    }
    Ok(())
}

struct Live {
    base: String,
    addr: std::net::SocketAddr,
    stop: CancellationToken,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn live(store: courier_store::PgStore) -> Live {
    let app = api_router(
        store,
        ServerConfig {
            limits: Limits::default(),
            webhook_secret: SECRET.to_vec(),
            webhook_secrets_previous: Vec::new(),
            api_token: Some(TOKEN.to_string()),
            request_timeout: Duration::from_millis(500),
            provider_webhooks: Default::default(),
        },
    )
    .merge(router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move { serve(listener, app, &HttpLimits::default(), s).await });
    Live {
        base: format!("http://{addr}"),
        addr,
        stop,
    }
}

/// The operation's documented response for `status`, checked against `body`.
fn conforms(
    doc: &Value,
    method: &str,
    path: &str,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> Result<(), String> {
    let op = &doc["paths"][path][method];
    if op.is_null() {
        return Err(format!("{method} {path} is not documented"));
    }
    let resp = &op["responses"][status.to_string()];
    if resp.is_null() {
        return Err(format!(
            "{method} {path} answered {status}, which is not documented: {}",
            String::from_utf8_lossy(body)
        ));
    }
    let schema = &resp["content"]["application/json"]["schema"];
    if schema.is_null() {
        return Err(format!(
            "{method} {path} {status}: no JSON schema documented"
        ));
    }
    if !content_type.starts_with("application/json") {
        return Err(format!(
            "{method} {path} {status}: content type {content_type}, documented application/json"
        ));
    }
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        format!(
            "{method} {path} {status}: not JSON ({e}): {}",
            String::from_utf8_lossy(body)
        )
    })?;
    check(doc, schema, &v, "$").map_err(|e| format!("{method} {path} {status}: {e} in {v}"))
}

#[test]
fn the_document_describes_the_routes() {
    let doc: Value = serde_json::from_str(&document_json()).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths: BTreeSet<&str> = doc["paths"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        paths,
        BTreeSet::from([
            "/v1/actions",
            "/v1/actions:batch",
            "/v1/actions/{id}",
            "/v1/actions/{id}/cancel",
            "/v1/actions/{id}/redrive",
            "/v1/actions/{id}/resolve",
            "/v1/stores",
            "/v1/stores/{store}",
            "/v1/providers/{name}",
            "/v1/webhooks/provider"
        ])
    );
    let action = &doc["components"]["schemas"]["Action"];
    assert_eq!(action["additionalProperties"], json!(false), "{action}");
    let mut props: Vec<&String> = action["properties"].as_object().unwrap().keys().collect();
    let mut required: Vec<&str> = action["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    props.sort();
    required.sort();
    assert_eq!(
        props.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        required,
        "every field of an action is always present"
    );
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    // The schemas accept what the code accepts, and say so.
    let req = &doc["components"]["schemas"]["EnqueueRequest"];
    assert_eq!(req["additionalProperties"], json!(false));
    assert_eq!(req["properties"]["body"]["maxLength"], 1600);
}

/// How a webhook case signs its body.
#[derive(Clone, Copy)]
enum Sig {
    None,
    Good,
    Bad,
}

/// One request of the conformance walk.
struct Case {
    method: &'static str,
    /// The path as documented (`/v1/actions/{id}`).
    doc_path: &'static str,
    /// The path as sent (`/v1/actions/1`).
    url_path: String,
    body: Option<Vec<u8>>,
    auth: bool,
    /// A token other than the admin's (a store token).
    token: Option<String>,
    sig: Sig,
    want: u16,
}

impl Case {
    fn new(method: &'static str, doc_path: &'static str, url_path: &str, want: u16) -> Self {
        Case {
            method,
            doc_path,
            url_path: url_path.to_string(),
            body: None,
            auth: true,
            token: None,
            sig: Sig::None,
            want,
        }
    }

    fn body(mut self, b: impl Into<Vec<u8>>) -> Self {
        self.body = Some(b.into());
        self
    }

    fn json(self, v: &Value) -> Self {
        self.body(v.to_string())
    }

    fn no_token(mut self) -> Self {
        self.auth = false;
        self
    }

    fn with_token(mut self, token: &str) -> Self {
        self.token = Some(token.to_string());
        self
    }

    fn signed(mut self, sig: Sig) -> Self {
        self.sig = sig;
        self
    }
}

/// The walk: the live server, its document, and the answers seen so far as
/// (method, documented path, status).
struct Walk<'a> {
    srv: &'a Live,
    doc: Value,
    http: reqwest::Client,
    seen: BTreeSet<(String, String, u16)>,
}

impl Walk<'_> {
    /// Sends the case; its answer must have the wanted status and conform.
    async fn run(&mut self, c: Case) {
        let url = format!("{}{}", self.srv.base, c.url_path);
        let mut req = match c.method {
            "get" => self.http.get(&url),
            "put" => self.http.put(&url),
            _ => self.http.post(&url),
        };
        if let Some(t) = &c.token {
            req = req.bearer_auth(t);
        } else if c.auth {
            req = req.bearer_auth(TOKEN);
        }
        if let Some(b) = &c.body {
            match c.sig {
                Sig::Good => req = req.header("x-signature", signature::sign(SECRET, b)),
                Sig::Bad => req = req.header("x-signature", signature::sign(b"x", b)),
                Sig::None => {}
            }
            req = req
                .header("content-type", "application/json")
                .body(b.clone());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let ct = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let bytes = resp.bytes().await.unwrap().to_vec();
        let what = format!("{} {}", c.method, c.url_path);
        assert_eq!(
            status,
            c.want,
            "{what}: {}",
            String::from_utf8_lossy(&bytes)
        );
        self.record(c.method, c.doc_path, status, &ct, &bytes);
    }

    fn record(&mut self, method: &str, doc_path: &str, status: u16, ct: &str, body: &[u8]) {
        conforms(&self.doc, method, doc_path, status, ct, body).unwrap();
        self.seen.insert((method.into(), doc_path.into(), status));
    }

    /// 408: a body that never finishes, on a route that takes one.
    async fn slow_body(&mut self, path: &'static str) {
        self.slow_body_at("post", path, path).await;
    }

    /// 408 as [`Walk::slow_body`], with `method` on `path`, an instance of
    /// `template`.
    async fn slow_body_at(&mut self, method: &'static str, template: &'static str, path: &str) {
        let line = format!("{} {path}", method.to_uppercase());
        let mut s = tokio::net::TcpStream::connect(self.srv.addr).await.unwrap();
        let head = format!(
            "{line} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
        );
        s.write_all(head.as_bytes()).await.unwrap();
        let (status, ct, body) = read_answer(&mut s, Duration::from_secs(10)).await;
        assert_eq!(status, 408, "{line}: {}", String::from_utf8_lossy(&body));
        self.record(method, template, status, &ct, &body);
    }
}

/// Enqueue: created, replayed, every refusal; then reads of an action.
fn action_cases() -> Vec<Case> {
    let good = json!({"store": "s1", "to": "+15551234567", "body": "hi", "key": "k1"});
    let changed = json!({"store": "s1", "to": "+15551234567", "body": "other", "key": "k1"});
    let (post, actions) = ("post", "/v1/actions");
    let (get, one) = ("get", "/v1/actions/{id}");
    vec![
        Case::new(post, actions, actions, 201).json(&good),
        Case::new(post, actions, actions, 201).json(&json!({
            "store": "s1", "to": "+15551234567", "body": "later", "key": "k-later",
            "not_before": (chrono::Utc::now() + chrono::Duration::days(30)).to_rfc3339()
        })),
        Case::new(post, actions, actions, 400).json(&json!({
            "store": "s1", "to": "+15551234567", "body": "late", "expires_at": "2001-01-01T00:00:00Z"
        })),
        Case::new(post, actions, actions, 200).json(&good),
        Case::new(post, actions, actions, 401)
            .json(&good)
            .no_token(),
        Case::new(post, actions, actions, 400).body(&b"{"[..]),
        Case::new(post, actions, actions, 422).json(&changed),
        Case::new(post, actions, actions, 413).body(vec![b'x'; 70_000]),
        Case::new(get, one, "/v1/actions/1", 200),
        Case::new(get, one, "/v1/actions/1", 401).no_token(),
        Case::new(get, one, "/v1/actions/abc", 400),
        Case::new(get, one, "/v1/actions/%FF", 400),
        Case::new(get, one, "/v1/actions/424242", 404),
    ]
}

/// Batches: enqueued, and every refusal (each changes nothing).
fn batch_cases() -> Vec<Case> {
    let item = |key: &str, body: &str| json!({"store": "s2", "to": "+15551234567", "body": body, "key": key});
    let batch = |items: Vec<Value>| json!({ "actions": items });
    let path = "/v1/actions:batch";
    let case = |want: u16| Case::new("post", path, path, want);
    let too_many: Vec<Value> = (0..1_001)
        .map(|i| json!({"store": "s2", "to": "+15551234567", "body": format!("m{i}")}))
        .collect();
    vec![
        case(200).json(&batch(vec![
            item("b1", "x"),
            item("b2", "y"),
            item("b1", "x"),
        ])),
        case(200).json(&batch(vec![item("b1", "x")])),
        case(401).json(&batch(vec![item("b3", "x")])).no_token(),
        case(400).body(&b"{"[..]),
        case(400).json(&batch(vec![
            item("b4", "x"),
            json!({"store": "s2", "to": "hello", "body": "x"}),
        ])),
        case(400).json(&json!({ "actions": too_many })),
        case(422).json(&batch(vec![item("b5", "x"), item("b1", "changed")])),
        case(413).body(vec![b' '; 9 * 1024 * 1024]),
    ]
}

/// The settings' routes: set, read, list, every refusal; `tenant` is a
/// store token (refused: settings need an admin token).
fn settings_cases(tenant: &str) -> Vec<Case> {
    let (store, one) = ("/v1/stores/{store}", "/v1/stores/s1");
    let (provider, gate) = ("/v1/providers/{name}", "/v1/providers/contract");
    let list = "/v1/stores";
    let set = json!({"rate_per_s": 5, "burst": 10, "in_flight_max": 2});
    vec![
        Case::new("get", store, "/v1/stores/never-seen", 404),
        Case::new("put", store, one, 200).json(&set),
        Case::new("put", store, "/v1/stores/plain", 200).json(&json!({})),
        Case::new("get", store, one, 200),
        Case::new("get", list, list, 200),
        Case::new("put", store, one, 400).json(&json!({"rate_per_s": -1})),
        Case::new("put", store, one, 400).json(&json!({"rate": 5})),
        Case::new("put", store, one, 400).body(&b"[5]"[..]),
        Case::new("put", store, "/v1/stores/a%20b", 400).json(&set),
        Case::new("get", store, "/v1/stores/a%20b", 400),
        Case::new("put", store, one, 401).json(&set).no_token(),
        Case::new("get", store, one, 401).no_token(),
        Case::new("get", list, list, 401).no_token(),
        Case::new("put", store, one, 403)
            .json(&set)
            .with_token(tenant),
        Case::new("get", store, one, 403).with_token(tenant),
        Case::new("get", list, list, 403).with_token(tenant),
        Case::new("put", store, one, 413).body(vec![b' '; 70_000]),
        Case::new("get", provider, gate, 404),
        Case::new("put", provider, gate, 200).json(&json!({"rate_per_s": 50})),
        Case::new("get", provider, gate, 200),
        Case::new("put", provider, gate, 400).json(&json!({"burst": 3})),
        Case::new("get", provider, "/v1/providers/a%20b", 400),
        Case::new("put", provider, gate, 401)
            .json(&json!({}))
            .no_token(),
        Case::new("get", provider, gate, 401).no_token(),
        Case::new("put", provider, gate, 403)
            .json(&json!({}))
            .with_token(tenant),
        Case::new("get", provider, gate, 403).with_token(tenant),
        Case::new("put", provider, gate, 413).body(vec![b' '; 70_000]),
    ]
}

const HOOK: &str = "/v1/webhooks/provider";

/// Webhooks about the dispatched action `key`: merged, repeated, refused.
fn webhook_cases(key: &str) -> Vec<Case> {
    let event = |id: &str, status: &str, key: &str| {
        json!({"event_id": id, "message_id": "m1", "key": key, "status": status,
               "occurred_at": "2026-01-01T00:00:00Z"})
    };
    let hook = |want: u16, sig: Sig| Case::new("post", HOOK, HOOK, want).no_token().signed(sig);
    vec![
        hook(200, Sig::Good).json(&event("e1", "sent", key)),
        hook(200, Sig::Good).json(&event("e1", "sent", key)),
        hook(401, Sig::Bad).json(&event("e2", "sent", key)),
        hook(401, Sig::None).json(&event("e2", "sent", key)),
        hook(404, Sig::Good).json(&event("e3", "sent", "courier-unknown")),
        hook(400, Sig::Good).json(&json!({"event_id": "e4"})),
        hook(400, Sig::Good).json(&event("", "sent", key)),
        hook(413, Sig::Good).body(vec![b' '; 70_000]),
    ]
}

/// A store token for `store`, once the server at `base` has loaded it.
async fn store_token(store: &courier_store::PgStore, base: &str, name: &str) -> String {
    let (secret, sha) = courier_dispatch::auth::secret_new();
    let id = store
        .token_create("openapi", false, &[name.to_string()], &sha)
        .await
        .unwrap();
    let token = courier_dispatch::auth::token_text(id, &secret);
    let http = reqwest::Client::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let r = http
            .get(format!("{base}/v1/actions/0"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        if r.status().as_u16() == 404 {
            return token;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the token was never loaded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every (method, path, status) the document lists.
fn documented(doc: &Value) -> BTreeSet<(String, String, u16)> {
    let paths = doc["paths"].as_object().unwrap();
    let mut out = BTreeSet::new();
    for (p, ops) in paths {
        for (m, op) in ops.as_object().unwrap() {
            for s in op["responses"].as_object().unwrap().keys() {
                out.insert((m.clone(), p.clone(), s.parse::<u16>().unwrap()));
            }
        }
    }
    out
}

#[tokio::test]
async fn every_answer_is_documented_and_matches_its_schema() {
    let db = fresh_db().await;
    let srv = live(db.store.clone()).await;
    let doc: Value = reqwest::get(format!("{}/openapi.json", srv.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let mut walk = Walk {
        srv: &srv,
        doc,
        http: reqwest::Client::new(),
        seen: BTreeSet::new(),
    };
    for c in action_cases() {
        walk.run(c).await;
    }
    for c in batch_cases() {
        walk.run(c).await;
    }
    // A store token on another store: 403 for an enqueue, single or batched.
    let tenant = store_token(&db.store, &srv.base, "s-other").await;
    let item = json!({"store": "s1", "to": "+15551234567", "body": "hi"});
    for (path, body) in [
        ("/v1/actions", item.clone()),
        ("/v1/actions:batch", json!({ "actions": [item] })),
    ] {
        walk.run(
            Case::new("post", path, path, 403)
                .json(&body)
                .with_token(&tenant),
        )
        .await;
    }
    // Cancels: action 1 is pending until the first one.
    let (cancel, cancel_path) = ("post", "/v1/actions/{id}/cancel");
    for c in [
        Case::new(cancel, cancel_path, "/v1/actions/1/cancel", 401).no_token(),
        Case::new(cancel, cancel_path, "/v1/actions/1/cancel", 404).with_token(&tenant),
        Case::new(cancel, cancel_path, "/v1/actions/1/cancel", 200),
        Case::new(cancel, cancel_path, "/v1/actions/1/cancel", 409),
        Case::new(cancel, cancel_path, "/v1/actions/abc/cancel", 400),
        Case::new(cancel, cancel_path, "/v1/actions/424242/cancel", 404),
    ] {
        walk.run(c).await;
    }
    // Re-drives: of an action the provider refused with a 400, twice, and
    // of the cancelled action 1.
    let refused = fixtures::claimed_to_send(&db.store, "s3", 1)
        .await
        .remove(0);
    db.store
        .action_fail(
            &refused.lease,
            400,
            "provider answered 400: invalid_recipient",
        )
        .await
        .unwrap()
        .unwrap();
    let refused_path = format!("/v1/actions/{}/redrive", refused.lease.action_id);
    let (redrive, redrive_path) = ("post", "/v1/actions/{id}/redrive");
    for c in [
        Case::new(redrive, redrive_path, &refused_path, 401).no_token(),
        Case::new(redrive, redrive_path, &refused_path, 403).with_token(&tenant),
        Case::new(redrive, redrive_path, &refused_path, 201),
        Case::new(redrive, redrive_path, &refused_path, 200),
        Case::new(redrive, redrive_path, "/v1/actions/1/redrive", 409),
        Case::new(redrive, redrive_path, "/v1/actions/x/redrive", 400),
        Case::new(redrive, redrive_path, "/v1/actions/424242/redrive", 404),
    ] {
        walk.run(c).await;
    }
    // Resolutions: of an action held unknown, twice.
    let held = fixtures::claimed_to_send(&db.store, "s4", 1)
        .await
        .remove(0);
    db.store
        .action_hold(&held.lease, "no_lookup")
        .await
        .unwrap()
        .unwrap();
    let held_path = format!("/v1/actions/{}/resolve", held.lease.action_id);
    let (resolve, resolve_path) = ("post", "/v1/actions/{id}/resolve");
    let not_sent = json!({"outcome": "not_sent"});
    for c in [
        Case::new(resolve, resolve_path, &held_path, 401).no_token(),
        Case::new(resolve, resolve_path, &held_path, 403)
            .json(&not_sent)
            .with_token(&tenant),
        Case::new(resolve, resolve_path, &held_path, 400).json(&json!({"outcome": "perhaps"})),
        Case::new(resolve, resolve_path, &held_path, 200).json(&not_sent),
        Case::new(resolve, resolve_path, &held_path, 409).json(&not_sent),
        Case::new(resolve, resolve_path, "/v1/actions/x/resolve", 400).json(&not_sent),
        Case::new(resolve, resolve_path, "/v1/actions/424242/resolve", 404).json(&not_sent),
    ] {
        walk.run(c).await;
    }
    walk.slow_body_at("post", resolve_path, &held_path).await;
    let tenant_s1 = store_token(&db.store, &srv.base, "s1").await;
    for c in settings_cases(&tenant_s1) {
        walk.run(c).await;
    }
    walk.slow_body_at("put", "/v1/stores/{store}", "/v1/stores/s1")
        .await;
    walk.slow_body_at("put", "/v1/providers/{name}", "/v1/providers/contract")
        .await;
    let key = fixtures::settled(&db.store).await.key;
    for c in webhook_cases(&key) {
        walk.run(c).await;
    }
    walk.slow_body("/v1/actions").await;
    walk.slow_body("/v1/actions:batch").await;
    walk.slow_body(HOOK).await;

    let not_provoked: BTreeSet<(String, String, u16)> = NOT_PROVOKED
        .iter()
        .map(|(m, p, s)| (m.to_string(), p.to_string(), *s))
        .collect();
    let documented = documented(&walk.doc);
    let missing: Vec<_> = documented
        .difference(&walk.seen)
        .filter(|k| !not_provoked.contains(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "documented but never provoked: {missing:?}"
    );
    let undocumented: Vec<_> = walk.seen.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "answered but not documented: {undocumented:?}"
    );
}

/// Reads one HTTP/1.1 answer with a Content-Length body.
async fn read_answer(s: &mut tokio::net::TcpStream, within: Duration) -> (u16, String, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_string();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if raw.len() >= end + 4 + len {
                let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
                let ct = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-type")
                            .then(|| v.trim().to_string())
                    })
                    .unwrap_or_default();
                return (status, ct, raw[end + 4..end + 4 + len].to_vec());
            }
        }
        let n = tokio::time::timeout_at(deadline, s.read(&mut buf))
            .await
            .expect("an answer within the deadline")
            .unwrap();
        assert!(n > 0, "connection closed before a whole answer");
        raw.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test]
async fn the_action_schema_matches_the_store_view() {
    let db = fresh_db().await;
    let srv = live(db.store.clone()).await;
    let doc: Value = serde_json::from_str(&document_json()).unwrap();
    let http = reqwest::Client::new();
    // Without a key: the optional fields are null, and present.
    let v: Value = http
        .post(format!("{}/v1/actions", srv.base))
        .bearer_auth(TOKEN)
        .json(&json!({"store": "s1", "to": "+15551234567", "body": "hi"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let view = db
        .store
        .action_get(v["id"].as_i64().unwrap())
        .await
        .unwrap()
        .unwrap();
    let from_store = serde_json::to_value(&view).unwrap();
    assert_eq!(v, from_store);
    let schema = json!({"$ref": "#/components/schemas/Action"});
    check(&doc, &schema, &from_store, "$").unwrap();
    // The mirror type reads every field the store writes, and no other.
    let _: courier_dispatch::server::ActionDoc =
        serde_json::from_value(from_store.clone()).unwrap();
    let mut extra = from_store.clone();
    extra["surprise"] = json!(1);
    assert!(
        check(&doc, &schema, &extra, "$").is_err(),
        "the checker must catch extra fields"
    );
    let mut missing = from_store;
    missing.as_object_mut().unwrap().remove("key");
    assert!(
        check(&doc, &schema, &missing, "$").is_err(),
        "the checker must catch missing fields"
    );
}

/// The settings' schemas list exactly the fields the store's views
/// serialize (a configured store, a paused provider), and state
/// `courier_core::rate`'s bounds.
#[tokio::test]
async fn the_settings_schemas_match_the_store_views_and_the_bounds() {
    use courier_core::rate::{
        ProviderSettings, StoreSettings, BURST_MAX, IN_FLIGHT_MAX, RATE_PER_S_MAX, RATE_PER_S_MIN,
    };
    let db = fresh_db().await;
    let doc: Value = serde_json::from_str(&document_json()).unwrap();
    let set = StoreSettings {
        rate_per_s: Some(5.0),
        burst: None,
        in_flight_max: Some(2),
    };
    let flow = db.store.store_configure("s1", &set, "test").await.unwrap();
    let unset = db.store.store_flow("s1").await.unwrap().unwrap();
    db.store.provider_pause("p1", 5_000).await.unwrap();
    let paused = db.store.provider_flow("p1").await.unwrap().unwrap();
    let ceiling = ProviderSettings {
        rate_per_s: Some(2.0),
        burst: Some(4),
    };
    let gate = db
        .store
        .provider_configure("p2", &ceiling, "test")
        .await
        .unwrap();
    for (name, v) in [
        ("StoreFlow", serde_json::to_value(&flow).unwrap()),
        ("StoreFlow", serde_json::to_value(&unset).unwrap()),
        ("ProviderFlow", serde_json::to_value(&paused).unwrap()),
        ("ProviderFlow", serde_json::to_value(&gate).unwrap()),
    ] {
        let schema = json!({ "$ref": format!("#/components/schemas/{name}") });
        check(&doc, &schema, &v, "$").unwrap();
        let mut missing = v.clone();
        missing.as_object_mut().unwrap().remove("tokens");
        assert!(check(&doc, &schema, &missing, "$").is_err(), "{name}");
    }
    // The mirror types read every field the store writes, and no other.
    let _: courier_dispatch::server::StoreFlowDoc =
        serde_json::from_value(serde_json::to_value(&flow).unwrap()).unwrap();
    let _: courier_dispatch::server::ProviderFlowDoc =
        serde_json::from_value(serde_json::to_value(&paused).unwrap()).unwrap();
    let schemas = &doc["components"]["schemas"];
    for name in ["StoreSettings", "ProviderSettings"] {
        let props = &schemas[name]["properties"];
        assert_eq!(
            schemas[name]["additionalProperties"],
            json!(false),
            "{name}"
        );
        let bound = |k: &str| props["rate_per_s"][k].as_f64();
        assert_eq!(bound("minimum"), Some(RATE_PER_S_MIN), "{name}");
        assert_eq!(bound("maximum"), Some(RATE_PER_S_MAX), "{name}");
        assert_eq!(props["burst"]["minimum"], json!(1), "{name}");
        assert_eq!(props["burst"]["maximum"], json!(BURST_MAX), "{name}");
    }
    let cap = &schemas["StoreSettings"]["properties"]["in_flight_max"];
    assert_eq!(
        (cap["minimum"].clone(), cap["maximum"].clone()),
        (json!(1), json!(IN_FLIGHT_MAX))
    );
    // The request schemas name the settings types' fields, and only them.
    let fields = |v: Value| {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    for (name, ours) in [
        ("StoreSettings", serde_json::to_value(set).unwrap()),
        ("ProviderSettings", serde_json::to_value(ceiling).unwrap()),
    ] {
        assert_eq!(
            fields(ours),
            fields(schemas[name]["properties"].clone()),
            "{name}"
        );
    }
}
