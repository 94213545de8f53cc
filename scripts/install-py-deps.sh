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
#
# The tests call that interpreter by its path (or by $COURIER_PYTHON).
# Idempotent: quick when the pinned versions are already there.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.courier/tools/py-venv
py="$venv/bin/python"
pins=("psycopg[binary]==3.3.9")

if [ -x "$py" ] && "$py" -c 'import psycopg, sys; sys.exit(psycopg.__version__ != "3.3.9")' 2>/dev/null; then
  echo "python packages ready: $py (psycopg 3.3.9)"
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
"$py" -c 'import psycopg; assert psycopg.__version__ == "3.3.9", psycopg.__version__'
echo "python packages ready: $py (psycopg 3.3.9)"
