//! The OpenAPI document is usable by a generator: `openapi-python-client`
//! (PyPI, pinned and installed by scripts/install-py-deps.sh) generates a
//! Python client from the live server's `/openapi.json`, offline and with
//! `--fail-on-warning`, and that client enqueues and reads an action with a
//! bearer token, as a Python user of courier would.
//!
//! Nothing here reaches the network: the document is read from a file, and
//! the generator and the script run with proxies pointing at a closed
//! loopback port for every host but the test server's.

mod live;

use courier_client::{Client, Enqueued};
use live::TOKEN;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;
// Not std's: the script talks to the server this test's runtime serves, so
// the test must await it, not block the runtime on it.
use tokio::process::Command;

/// The virtual environment of scripts/install-py-deps.sh, or
/// `COURIER_PY_VENV`.
fn venv() -> PathBuf {
    let dir = match std::env::var_os("COURIER_PY_VENV") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.courier/tools/py-venv"),
    };
    let generator = dir.join("bin/openapi-python-client");
    assert!(
        generator.exists(),
        "{} is missing: run scripts/install-py-deps.sh (scripts/install-deps.sh runs it)",
        generator.display()
    );
    dir
}

/// `cmd` with the venv first on PATH and every proxy variable pointing at
/// a loopback port that refuses, but for the test server on 127.0.0.1.
fn offline(mut cmd: Command, venv: &Path, dead_proxy: &str) -> Command {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![venv.join("bin")];
    dirs.extend(std::env::split_paths(&path));
    cmd.env("PATH", std::env::join_paths(dirs).unwrap());
    for var in ["HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"] {
        cmd.env(var, dead_proxy).env(var.to_lowercase(), dead_proxy);
    }
    for var in ["NO_PROXY", "no_proxy"] {
        cmd.env(var, "127.0.0.1");
    }
    cmd.env("PIP_NO_INDEX", "1");
    cmd
}

fn succeeded(what: &str, out: Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The generator's settings: the package's name, and nothing else changed.
const CONFIG: &str = "project_name_override: courier-api\npackage_name_override: courier_api\n";

/// What a Python user writes with the generated package: enqueue (created,
/// then a repeat), read back, a refusal, a batch, a missing token and a
/// missing action, printed as one JSON line for the test to check.
const SCRIPT: &str = r#"
import json, sys
from datetime import timezone
from courier_api import AuthenticatedClient, Client
from courier_api.api.actions import enqueue, enqueue_batch, get_action
from courier_api.models import Action, EnqueueBatchRequest, EnqueueRequest, Error

def shown(a):
    """The action as the API sent it: the generated client parses
    enqueued_at into an aware datetime; write it back in the API's form."""
    assert isinstance(a, Action), a
    assert a.enqueued_at.tzinfo is not None, a.enqueued_at
    d = a.to_dict()
    at = a.enqueued_at.astimezone(timezone.utc).isoformat(timespec="milliseconds")
    d["enqueued_at"] = at.replace("+00:00", "Z")
    return d

url, token = sys.argv[1], sys.argv[2]
client = AuthenticatedClient(base_url=url, token=token)
order = EnqueueRequest(store="py-store", to="+15551234567", body="Shipped, from Python.", key="py-1")

first = enqueue.sync_detailed(client=client, body=order)
repeat = enqueue.sync_detailed(client=client, body=order)
read = get_action.sync_detailed(client=client, id=first.parsed.id)
bad = enqueue.sync_detailed(
    client=client,
    body=EnqueueRequest(store="py-store", to="hello", body="hi", key="py-2"),
)
assert isinstance(bad.parsed, Error), bad
batch = enqueue_batch.sync_detailed(
    client=client,
    body=EnqueueBatchRequest(actions=[
        order,
        EnqueueRequest(store="py-store", to="+15557654321", body="A second one.", key="py-3"),
    ]),
)
anonymous = get_action.sync_detailed(client=Client(base_url=url), id=first.parsed.id)
missing = get_action.sync_detailed(client=client, id=first.parsed.id + 1000)

print(json.dumps({
    "created": [first.status_code, shown(first.parsed)],
    "repeat": [repeat.status_code, shown(repeat.parsed), repeat.headers.get("idempotent-replayed")],
    "read": [read.status_code, shown(read.parsed)],
    "refused": [bad.status_code, bad.parsed.error, bad.parsed.field],
    "batch": [batch.status_code, [[a.id, a.created] for a in batch.parsed.actions]],
    "anonymous": [anonymous.status_code, anonymous.parsed.error],
    "missing": [missing.status_code, missing.parsed.error],
}))
"#;

#[tokio::test]
async fn a_python_client_generated_from_the_document_enqueues_and_reads() {
    let venv = venv();
    let live = live::start().await;
    let dir = tempfile::tempdir().unwrap();
    // A port that refuses, held for the test: the proxy of everything else.
    let (_dead, dead_proxy) = live::closed_port();

    let doc = reqwest::get(format!("{}/openapi.json", live.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    std::fs::write(dir.path().join("openapi.json"), &doc).unwrap();
    std::fs::write(dir.path().join("config.yaml"), CONFIG).unwrap();
    let mut generate = Command::new(venv.join("bin/openapi-python-client"));
    generate.current_dir(dir.path()).args([
        "generate",
        "--path",
        "openapi.json",
        "--config",
        "config.yaml",
        "--meta",
        "none",
        "--fail-on-warning",
    ]);
    let generated = offline(generate, &venv, &dead_proxy)
        .output()
        .await
        .unwrap();
    succeeded("openapi-python-client generate", generated);
    assert!(dir
        .path()
        .join("courier_api/api/actions/enqueue.py")
        .exists());

    // As a tenant calls it: a store token for the store it enqueues into.
    let store_token = live.store_token(&["py-store"]).await;
    let mut run = Command::new(venv.join("bin/python"));
    run.current_dir(dir.path())
        .env("PYTHONPATH", dir.path())
        .args(["-c", SCRIPT, &live.url, &store_token]);
    let out = succeeded(
        "the script using the generated client",
        offline(run, &venv, &dead_proxy).output().await.unwrap(),
    );
    let seen: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));

    // What the Python client read is what the Rust client reads.
    let action = &seen["created"][1];
    assert_eq!(seen["created"][0], 201, "{seen}");
    let id = action["id"].as_i64().unwrap();
    let ours = Client::new(&live.url, Some(TOKEN.to_string()))
        .unwrap()
        .get(id)
        .await
        .unwrap()
        .expect("the action the Python client enqueued");
    assert_eq!(action, &serde_json::to_value(&ours).unwrap(), "{seen}");
    assert_eq!(ours.key.as_deref(), Some("py-1"));

    assert_eq!(seen["repeat"][0], 200, "{seen}");
    assert_eq!(&seen["repeat"][1], action);
    assert_eq!(seen["repeat"][2], "true");
    assert_eq!(seen["read"], serde_json::json!([200, action]));
    assert_eq!(
        seen["refused"],
        serde_json::json!([400, "bad_phone", "to"]),
        "{seen}"
    );
    let batch = &seen["batch"];
    assert_eq!(batch[0], 200, "{seen}");
    assert_eq!(
        batch[1][0],
        serde_json::json!([id, false]),
        "a repeat: {seen}"
    );
    assert_eq!(batch[1][1][1], true, "{seen}");
    assert_eq!(seen["anonymous"], serde_json::json!([401, "unauthorized"]));
    assert_eq!(seen["missing"], serde_json::json!([404, "not_found"]));

    // And the same request again from Rust is a repeat of that action.
    let again = Client::new(&live.url, Some(store_token.clone()))
        .unwrap()
        .enqueue(&courier_client::EnqueueRequest::new(
            "py-store",
            "+15551234567",
            "Shipped, from Python.",
            "py-1",
        ))
        .await
        .unwrap();
    assert_eq!(again, Enqueued::Repeat(ours));
}
