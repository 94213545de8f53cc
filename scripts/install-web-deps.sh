#!/usr/bin/env bash
# Installs the npm tools the browser tests inject into courier's pages (today
# only axe-core, for the lesson's accessibility audit) at the exact versions
# pinned in web/test/package-lock.json, into web/test/node_modules (gitignored).
# Idempotent: does nothing when the installed versions already match the lock.
# Needs Node and npm (Node 20 on the CI machines).
set -euo pipefail

dir="$(cd "$(dirname "${BASH_SOURCE[0]}")/../web/test" && pwd)"
lock="$dir/package-lock.json"
stamp="$dir/node_modules/.courier-lock"

if ! command -v npm >/dev/null 2>&1; then
  echo "install-web-deps: npm is missing (install Node 20 with npm)" >&2
  exit 1
fi
if [ -f "$stamp" ] && cmp -s "$lock" "$stamp" && [ -f "$dir/node_modules/axe-core/axe.min.js" ]; then
  echo "web test dependencies ready: axe-core $(node -p "require('$dir/node_modules/axe-core/package.json').version")"
  exit 0
fi
echo "installing the web test dependencies (npm ci in $dir)"
# --ignore-scripts: nothing of ours needs an install script, and none runs.
(cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
cp "$lock" "$stamp"
echo "web test dependencies ready: axe-core $(node -p "require('$dir/node_modules/axe-core/package.json').version")"
