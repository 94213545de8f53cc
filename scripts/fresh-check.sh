#!/usr/bin/env bash
# The fresh-machine check: the README's two commands, exactly as written, in
# a clean Debian root that holds only what a new machine of the kind CI uses
# has, with a clean clone of main in root's mode-700 home directory.
#
#   1. A Debian 12 root by debootstrap (minbase), then the Debian packages a
#      new machine has: gcc g++ make git pkg-config libssl-dev libpq-dev
#      postgresql-15 postgresql-client-15 python3 python3-pip python3-venv
#      ca-certificates. The base root is cached as a tarball (built again
#      with --rebuild); every run unpacks a new copy of it.
#   2. What such a machine has beside packages: this machine's CA bundle and
#      npm/pip settings (the registries are reached through that CA), the
#      Rust toolchain (bind-mounted read-only: no toolchain can be downloaded
#      here), the cargo registry cache (copied, so nothing in the root can
#      touch this machine's), cargo-nextest, Node 20 with npm (copied), and
#      PostgreSQL's binaries on PATH, as on this machine.
#   3. /proc, /sys and /dev (with /dev/shm) mounted, in a mount namespace of
#      its own, so the mounts go away with this script however it ends.
#   4. Before any project script runs: protoc, libprotobuf-dev, etcd,
#      nats-server and chromium must be absent from the root; the check fails
#      if any is present.
#   5. `git clone` of main (committed work only) into /root/courier, then the
#      README's two commands there, each with its result and wall time, and
#      the cold build time cargo reported for each.
#
# Usage: scripts/fresh-check.sh [--rebuild] [--base-only] [--deps-only] [--keep] [--branch B]
#   --rebuild    build the base root again instead of using the cached tarball
#   --base-only  only build (or find) the base root, then stop
#   --deps-only  in the clone, run only scripts/install-deps.sh (minutes, not
#                the half hour of both commands): a quick check of new packages
#   --keep     keep the root afterwards (it is always kept when a step fails)
# Environment: FRESH_DIR (default /var/tmp/courier-fresh), FRESH_MIRROR.
# Needs root, debootstrap (installed here if missing) and about 6 GB of disk.
set -euo pipefail
repo="${FRESH_REPO:-$(cd "$(dirname "$0")/.." && pwd)}"

rebuild=0 keep=0 branch=main base_only=0 deps_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rebuild) rebuild=1 ;;
    --base-only) base_only=1 ;;
    --deps-only) deps_only=1 ;;
    --keep) keep=1 ;;
    --branch) branch="$2"; shift ;;
    *) echo "usage: $0 [--rebuild] [--base-only] [--deps-only] [--keep] [--branch B]" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" -eq 0 ] || { echo "fresh-check: must run as root (debootstrap, chroot, mounts)" >&2; exit 2; }

# Inside the private mount namespace from here on, running a copy of this
# script (bash reads a script as it runs: an edit of the checkout's copy
# must not change a run in progress).
if [ -z "${FRESH_IN_NS:-}" ]; then
  copy="$(mktemp /tmp/courier-fresh-check-XXXXXX.sh)"
  cp "$0" "$copy"
  FRESH_IN_NS=1 FRESH_REPO="$repo" exec unshare --mount --propagation private bash "$copy" \
    $([ $rebuild = 1 ] && echo --rebuild) $([ $keep = 1 ] && echo --keep) \
    $([ $base_only = 1 ] && echo --base-only) $([ $deps_only = 1 ] && echo --deps-only) --branch "$branch"
fi

dir="${FRESH_DIR:-/var/tmp/courier-fresh}"
mirror="${FRESH_MIRROR:-http://deb.debian.org/debian}"
base="$dir/base-bookworm.tar"
root="$dir/root"
mkdir -p "$dir"
machine_pkgs=(gcc g++ make git pkg-config libssl-dev libpq-dev postgresql-15 postgresql-client-15
  python3 python3-pip python3-venv ca-certificates)
t_all=$(date +%s)
say() { printf '\n== fresh-check: %s\n' "$*"; }

if ! command -v debootstrap >/dev/null 2>&1; then
  say "installing debootstrap (on this machine, for the check itself)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

in_root() { chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
  PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt SSL_CERT_DIR=/etc/ssl/certs \
  CURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt GIT_SSL_CAINFO=/etc/ssl/certs/ca-certificates.crt \
  NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
  REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt RUSTUP_AUTO_INSTALL=0 \
  "$@"; }

# Unmounts everything under the root, deepest first ($root itself is no
# mount point, so `umount -R "$root"` would refuse). A killed process holds
# its mounts busy until it is gone: try for 5 s, then detach what is left
# (lazily: nothing reaches it through the root any more, so the rm cannot
# go through it).
mounts_under() { grep " $root[/ ]" /proc/self/mounts | cut -d' ' -f2 | sort -r; }
unmount_root() {
  for _ in $(seq 10); do
    for m in $(mounts_under); do umount "$m" 2>/dev/null || true; done
    [ -z "$(mounts_under)" ] && return 0
    sleep 0.5
  done
  echo "fresh-check: still mounted after 5 s: $(mounts_under | paste -sd' ')"
  for m in $(mounts_under); do umount -l "$m" 2>/dev/null || true; done
}

# Removes the root, but never while anything is mounted inside it (rm -rf
# would go through a mount into what it shows).
remove_root() {
  if grep -q " $root[/ ]" /proc/self/mounts; then
    echo "fresh-check: something is still mounted under $root; not removing it" >&2
    return 1
  fi
  rm -rf --one-file-system "$root"
}

cleanup() {
  rc=$?
  case "$0" in /tmp/courier-fresh-check-*) rm -f "$0" ;; esac
  # Processes left in the root (a server a failed step started) end with it.
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && kill -9 "${p#/proc/}" 2>/dev/null || true
  done
  unmount_root
  if [ "$rc" -eq 0 ] && [ "$keep" = 0 ] && remove_root; then
    :
  else
    echo "fresh-check: root kept at $root (rm -rf it when done)"
  fi
  exit "$rc"
}

if [ "$rebuild" = 1 ] || [ ! -s "$base" ]; then
  say "building the base root (debootstrap minbase bookworm, then the new machine's packages)"
  t=$(date +%s)
  rm -rf "$dir/base"
  debootstrap --variant=minbase bookworm "$dir/base" "$mirror" >"$dir/debootstrap.log" 2>&1 ||
    { tail -20 "$dir/debootstrap.log"; exit 1; }
  cp /etc/resolv.conf "$dir/base/etc/resolv.conf"
  cp /etc/ssl/certs/ca-certificates.crt "$dir/base/etc/ssl-machine-ca.crt"
  rm -f "$dir/base/etc/apt/sources.list"
  cp /etc/apt/sources.list.d/debian.sources "$dir/base/etc/apt/sources.list.d/"
  [ -f /etc/apt/apt.conf.d/99artifact-registry ] && cp /etc/apt/apt.conf.d/99artifact-registry "$dir/base/etc/apt/apt.conf.d/"
  # No service starts while packages install (postgresql's own cluster).
  printf '#!/bin/sh\nexit 101\n' >"$dir/base/usr/sbin/policy-rc.d"; chmod 755 "$dir/base/usr/sbin/policy-rc.d"
  mount -t proc proc "$dir/base/proc"
  chroot "$dir/base" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends ${machine_pkgs[*]}" \
    >"$dir/packages.log" 2>&1 || { umount "$dir/base/proc"; tail -20 "$dir/packages.log"; exit 1; }
  umount "$dir/base/proc"
  rm -f "$dir/base/usr/sbin/policy-rc.d"
  # The Debian package made a cluster of its own; a new machine's is not running.
  rm -rf "$dir/base/var/lib/apt/lists/"*
  tar -C "$dir/base" -cf "$base" .
  rm -rf "$dir/base"
  echo "base root built in $(( $(date +%s) - t )) s"
fi

[ "$base_only" = 0 ] || { echo "base root: $base"; exit 0; }

say "a new root from $base"
unmount_root
remove_root || exit 1
mkdir -p "$root"
tar -C "$root" -xf "$base"
trap cleanup EXIT

# What a new machine has beside Debian packages.
cat "$root/etc/ssl-machine-ca.crt" >"$root/etc/ssl/certs/ca-certificates.crt"
for f in /etc/npmrc /usr/etc/npmrc /etc/pip.conf; do
  [ -f "$f" ] && mkdir -p "$root$(dirname "$f")" && cp "$f" "$root$f"
done
chmod 700 "$root/root"
[ -f /root/.npmrc ] && cp /root/.npmrc "$root/root/.npmrc"
[ -f /root/.gitconfig ] && cp /root/.gitconfig "$root/root/.gitconfig"
cp "$(command -v cargo-nextest)" "$root/usr/local/bin/"
for b in initdb pg_ctl postgres; do ln -sf "/usr/lib/postgresql/15/bin/$b" "$root/usr/local/bin/$b"; done
# Node 20 as this machine has it: the nodejs package's node, and npm as it
# is now (a new machine upgrades npm when it starts, over the package's).
mkdir -p "$root/usr/lib"
cp -a /usr/bin/node "$root/usr/bin/"
cp -a /usr/lib/node_modules "$root/usr/lib/"
for b in npm npx corepack; do [ -L "/usr/bin/$b" ] && cp -a "/usr/bin/$b" "$root/usr/bin/"; done
# The toolchain is bind-mounted read-only. The registry cache is copied, not
# mounted: cargo writes to it, and nothing done in the root may reach this
# machine's own copy.
mkdir -p "$root/root/.rustup" "$root/root/.cargo/bin"
mount --bind /root/.rustup "$root/root/.rustup"; mount -o remount,bind,ro "$root/root/.rustup"
mount --bind /root/.cargo/bin "$root/root/.cargo/bin"; mount -o remount,bind,ro "$root/root/.cargo/bin"
[ -d /root/.cargo/registry ] && cp -a /root/.cargo/registry "$root/root/.cargo/"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"

say "the root holds none of what the project's scripts must install"
absent_ok=1
for tool in protoc etcd etcdctl nats-server chromium chromedriver; do
  if in_root sh -c "command -v $tool || test -x /usr/sbin/$tool" >/dev/null 2>&1; then
    echo "PRESENT (must be absent): $tool"; absent_ok=0
  else
    echo "absent: $tool"
  fi
done
for pkg in protobuf-compiler libprotobuf-dev etcd-server nats-server chromium; do
  if in_root dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
    echo "PRESENT (must be absent): package $pkg"; absent_ok=0
  else
    echo "absent: package $pkg"
  fi
done
if [ -e "$root/usr/include/google/protobuf/descriptor.proto" ]; then
  echo "PRESENT (must be absent): /usr/include/google/protobuf/descriptor.proto"; absent_ok=0
fi
[ "$absent_ok" = 1 ] || { echo "fresh-check: the root is not fresh" >&2; exit 1; }
in_root sh -c 'node --version && npm --version' >/dev/null || { echo "fresh-check: Node 20 with npm did not copy" >&2; exit 1; }
echo "has: $(in_root rustc --version), $(in_root cargo nextest --version | head -1), node $(in_root node --version), npm $(in_root npm --version), $(in_root python3 --version), $(in_root initdb --version)"
echo "root's home: mode $(stat -c %a "$root/root")"

say "git clone of $branch into /root/courier"
git clone -q --no-local --branch "$branch" "$repo" "$root/root/courier"
echo "at $(git -C "$root/root/courier" log -1 --format='%h %s')"

run_step() {
  local name="$1" cmd="$2" log="$dir/$3"
  say "$name: $cmd"
  local t0 rc
  t0=$(date +%s)
  set +e
  in_root bash -c "cd /root/courier && $cmd" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  local secs=$(( $(date +%s) - t0 ))
  local built
  built=$(grep -E '^ *Finished ' "$log" | sed -E 's/^ *Finished //; s/ target\(s\)//' | paste -sd ';' -)
  results+=("$(printf '%-34s %s · wall %dm%02ds · cold build: %s' "$cmd" \
    "$([ "$rc" = 0 ] && echo PASSED || echo "FAILED (exit $rc)")" $((secs / 60)) $((secs % 60)) "${built:-?}")")
  return "$rc"
}

results=()
status=0
if [ "$deps_only" = 1 ]; then
  run_step "the project's install script" "./scripts/install-deps.sh" deps.log || status=1
  say "results ($(( ($(date +%s) - t_all) / 60 )) min in all; logs in $dir)"
  printf '%s\n' "${results[@]}"
  exit "$status"
fi
run_step "the README's first command" "cargo run --release -p courier-cli -- demo" demo.log || status=1
run_step "the README's second command" "./scripts/test.sh" test.log || status=1

say "results ($(( ($(date +%s) - t_all) / 60 )) min in all; logs in $dir)"
printf '%s\n' "${results[@]}"
exit "$status"
