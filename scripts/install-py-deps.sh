#!/usr/bin/env bash
# Installs the Python packages the tests use as a user of courier would,
# pinned, in a virtual environment inside the checkout (Debian 12's pip is
# externally managed, so not system-wide):
#
#   .courier/tools/py-venv/bin/python      (.courier is gitignored)
#
#   psycopg[binary] 3.3.9   the outbox from Python: courier.enqueue inside
#                           the application's own transaction
#                           (crates/courier-store/tests/enqueue.rs, README)
#   openapi-python-client   a Python client generated from the server's
#     0.29.1                /openapi.json, offline, then used against a live
#                           server (crates/courier-client/tests/python_client.rs)
#   python-dateutil         what the generated client imports beside httpx
#     2.9.0.post0           and attrs (which the generator brings)
#
# The tests call that interpreter by its path (or by $COURIER_PYTHON).
# Idempotent: quick when the pinned versions are already there.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.courier/tools/py-venv
py="$venv/bin/python"
pins=("psycopg[binary]==3.3.9" "openapi-python-client==0.29.1" "python-dateutil==2.9.0.post0")
# Exits non-zero unless every pin is installed at its version (and the
# generator's command is there).
check='
import sys
from importlib.metadata import version
import psycopg, httpx, attrs, dateutil
want = {"psycopg": "3.3.9", "openapi-python-client": "0.29.1",
        "python-dateutil": "2.9.0.post0"}
have = {name: version(name) for name in want}
sys.exit(0 if have == want else f"pinned {want}, installed {have}")
'
ready() {
  "$py" -c "$check" && [ -x "$venv/bin/openapi-python-client" ]
}

if [ -x "$py" ] && ready 2>/dev/null; then
  echo "python packages ready: $py (psycopg 3.3.9, openapi-python-client 0.29.1)"
  exit 0
fi
echo "installing ${pins[*]} into $venv"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
if python3 -m venv "$venv" 2>/dev/null; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${pins[@]}"
else
  # Debian's python3 without python3-venv has no ensurepip: a venv without
  # pip, filled by the system pip pointed at it (pip >= 22.3).
  rm -rf "$venv"
  python3 -m venv --without-pip "$venv"
  python3 -m pip --python "$py" install --quiet --disable-pip-version-check "${pins[@]}"
fi
ready || { echo "the pinned python packages did not install" >&2; exit 1; }
echo "python packages ready: $py (psycopg 3.3.9, openapi-python-client 0.29.1)"
