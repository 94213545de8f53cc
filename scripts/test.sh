#!/usr/bin/env bash
# The test command (the README's second command, and what CI runs): first
# what a new machine lacks (scripts/install-deps.sh, quick when all is
# there), then formatting, lints, then every test against real servers that
# the tests start themselves (PostgreSQL, the fake provider, etcd, NATS
# JetStream, headless Chromium), then short smoke runs of the demo-scale tools.
# Everything is built with the relay feature (`courier relay`) and the
# negative controls (`courier chaos --unsafe-resend`, run by
# crates/courier-cli/tests/chaos.rs), which the demo's build leaves out.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== scripts/install-deps.sh"
./scripts/install-deps.sh
features=(--features courier-cli/relay,courier-cli/negative-controls)

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked "${features[@]}" -- -D warnings
# And the binary as the README's first command builds it, without the relay.
cargo clippy -p courier-cli --locked -- -D warnings

# The test PostgreSQL cluster is shared by the whole run and stopped at the end.
# (under /tmp: PostgreSQL runs as 'postgres', which may not reach the checkout).
export COURIER_TEST_PG_DIR="/tmp/courier-test-pg-$(printf '%s' "$PWD" | sha256sum | cut -c1-16)"
stop_test_pg() {
  if [ -x target/debug/courier ]; then
    target/debug/courier db stop --pg-dir "$COURIER_TEST_PG_DIR" >/dev/null 2>&1 || true
  fi
}
trap stop_test_pg EXIT

echo "== cargo nextest run"
cargo nextest run --workspace --locked --no-fail-fast "${features[@]}"

echo "== hostile inputs (schemathesis and our own cases, smoke)"
scripts/hostile.sh --smoke
