//! The OpenAPI document against a live server (real PostgreSQL, real HTTP):
//! every answer of the three API routes is documented (status and body) and
//! matches its schema; every documented response is provoked, except the few
//! that need a broken database (`NOT_PROVOKED`); the schema of an action
//! lists exactly the fields the store's `ActionView` serializes.
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
    if let Some(t) = schema.get("type") {
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
        if !ok {
            return Err(format!("{at}: {v} is not of type {t}"));
        }
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            return Err(format!("{at}: {v} is not one of {schema}"));
        }
    }
    if let Some(s) = v.as_str() {
        let n = s.chars().count() as u64;
        if schema
            .get("minLength")
            .and_then(Value::as_u64)
            .is_some_and(|m| n < m)
            || schema
                .get("maxLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| n > m)
        {
            return Err(format!("{at}: length {n} is out of {schema}"));
        }
    }
    if let Some(obj) = v.as_object() {
        let props = schema.get("properties").and_then(Value::as_object);
        for r in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
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
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, x) in arr.iter().enumerate() {
            check(doc, items, x, &format!("{at}[{i}]"))?;
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
            api_token: Some(TOKEN.to_string()),
            request_timeout: Duration::from_millis(500),
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
fn the_document_describes_the_three_routes() {
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
        BTreeSet::from(["/v1/actions", "/v1/actions/{id}", "/v1/webhooks/provider"])
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
    let http = reqwest::Client::new();
    let mut seen: BTreeSet<(String, String, u16)> = BTreeSet::new();
    let good = json!({"store": "s1", "to": "+15551234567", "body": "hi", "key": "k1"});

    // Each case: method, documented path, URL path, body, auth, signature.
    enum Sig {
        None,
        Good,
        Bad,
    }
    let send =
        |method: &'static str, url_path: String, body: Option<Vec<u8>>, auth: bool, sig: Sig| {
            let http = http.clone();
            let base = srv.base.clone();
            async move {
                let url = format!("{base}{url_path}");
                let mut req = match method {
                    "get" => http.get(&url),
                    _ => http.post(&url),
                };
                if auth {
                    req = req.bearer_auth(TOKEN);
                }
                if let Some(b) = &body {
                    match sig {
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
                (status, ct, resp.bytes().await.unwrap().to_vec())
            }
        };
    let j = |v: &Value| Some(v.to_string().into_bytes());

    // Enqueue: created, replayed, every refusal.
    // method, documented path, URL path, body, with the token, wanted status.
    type Case = (
        &'static str,
        &'static str,
        String,
        Option<Vec<u8>>,
        bool,
        u16,
    );
    let mut cases: Vec<Case> = vec![
        (
            "post",
            "/v1/actions",
            "/v1/actions".into(),
            j(&good),
            true,
            201,
        ),
        (
            "post",
            "/v1/actions",
            "/v1/actions".into(),
            j(&good),
            true,
            200,
        ),
        (
            "post",
            "/v1/actions",
            "/v1/actions".into(),
            j(&good),
            false,
            401,
        ),
        (
            "post",
            "/v1/actions",
            "/v1/actions".into(),
            Some(b"{".to_vec()),
            true,
            400,
        ),
        (
            "post",
            "/v1/actions",
            "/v1/actions".into(),
            j(&json!({"store": "s1", "to": "+15551234567", "body": "other", "key": "k1"})),
            true,
            422,
        ),
        (
            "post",
            "/v1/actions",
            "/v1/actions".into(),
            Some(vec![b'x'; 70_000]),
            true,
            413,
        ),
        (
            "get",
            "/v1/actions/{id}",
            "/v1/actions/1".into(),
            None,
            true,
            200,
        ),
        (
            "get",
            "/v1/actions/{id}",
            "/v1/actions/1".into(),
            None,
            false,
            401,
        ),
        (
            "get",
            "/v1/actions/{id}",
            "/v1/actions/abc".into(),
            None,
            true,
            400,
        ),
        (
            "get",
            "/v1/actions/{id}",
            "/v1/actions/%FF".into(),
            None,
            true,
            400,
        ),
        (
            "get",
            "/v1/actions/{id}",
            "/v1/actions/424242".into(),
            None,
            true,
            404,
        ),
    ];
    for (method, doc_path, url_path, body, auth, want) in cases.drain(..) {
        let (status, ct, bytes) = send(method, url_path.clone(), body, auth, Sig::None).await;
        assert_eq!(
            status,
            want,
            "{method} {url_path}: {}",
            String::from_utf8_lossy(&bytes)
        );
        conforms(&doc, method, doc_path, status, &ct, &bytes).unwrap();
        seen.insert((method.into(), doc_path.into(), status));
    }

    // A dispatched action for the webhooks.
    let key = fixtures::settled(&db.store).await.key;
    let event = |id: &str, status: &str, key: &str| {
        json!({"event_id": id, "message_id": "m1", "key": key, "status": status,
               "occurred_at": "2026-01-01T00:00:00Z"})
    };
    let hook = "/v1/webhooks/provider";
    let hooks: Vec<(Value, Sig, u16)> = vec![
        (event("e1", "sent", &key), Sig::Good, 200),
        (event("e1", "sent", &key), Sig::Good, 200),
        (event("e2", "sent", &key), Sig::Bad, 401),
        (event("e2", "sent", &key), Sig::None, 401),
        (event("e3", "sent", "courier-unknown"), Sig::Good, 404),
        (json!({"event_id": "e4"}), Sig::Good, 400),
        (event("", "sent", &key), Sig::Good, 400),
    ];
    for (body, sig, want) in hooks {
        let (status, ct, bytes) = send("post", hook.into(), j(&body), false, sig).await;
        assert_eq!(status, want, "{body}: {}", String::from_utf8_lossy(&bytes));
        conforms(&doc, "post", hook, status, &ct, &bytes).unwrap();
        seen.insert(("post".into(), hook.into(), status));
    }
    let big = vec![b' '; 70_000];
    let (status, ct, bytes) = send("post", hook.into(), Some(big), false, Sig::Good).await;
    assert_eq!(status, 413);
    conforms(&doc, "post", hook, status, &ct, &bytes).unwrap();
    seen.insert(("post".into(), hook.into(), status));

    // 408: a body that never finishes, on each route that takes one.
    for (path, line) in [
        ("/v1/actions", "POST /v1/actions"),
        (hook, "POST /v1/webhooks/provider"),
    ] {
        let mut s = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
        let head = format!(
            "{line} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
        );
        s.write_all(head.as_bytes()).await.unwrap();
        let (status, ct, body) = read_answer(&mut s, Duration::from_secs(10)).await;
        assert_eq!(status, 408, "{line}: {}", String::from_utf8_lossy(&body));
        conforms(&doc, "post", path, status, &ct, &body).unwrap();
        seen.insert(("post".into(), path.into(), status));
    }
    let not_provoked: BTreeSet<(String, String, u16)> = NOT_PROVOKED
        .iter()
        .map(|(m, p, s)| (m.to_string(), p.to_string(), *s))
        .collect();

    let documented: BTreeSet<(String, String, u16)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(p, ops)| {
            ops.as_object().unwrap().iter().flat_map(move |(m, op)| {
                op["responses"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .map(move |s| (m.clone(), p.clone(), s.parse::<u16>().unwrap()))
            })
        })
        .collect();
    let missing: Vec<_> = documented
        .difference(&seen)
        .filter(|k| !not_provoked.contains(*k))
        .collect();
    assert!(
        missing.is_empty(),
        "documented but never provoked: {missing:?}"
    );
    let undocumented: Vec<_> = seen.difference(&documented).collect();
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
