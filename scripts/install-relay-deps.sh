#!/usr/bin/env bash
# Installs what `courier relay` and the courier-relay tests need: etcd,
# nats-server (with JetStream) and protoc (to build the etcd-client crate).
# Idempotent: installs only the Debian packages whose binaries are missing.
set -euo pipefail

declare -A need=(
  [etcd]=etcd-server
  [etcdctl]=etcd-client
  [nats-server]=nats-server
  [protoc]=protobuf-compiler
)

missing=()
for bin in "${!need[@]}"; do
  if ! command -v "$bin" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$bin" ]; then
    missing+=("${need[$bin]}")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "relay dependencies present: etcd, etcdctl, nats-server, protoc"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  SUDO=sudo
else
  SUDO=
fi
echo "installing: ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
