#!/usr/bin/env bash
# Installs what `courier relay` and the courier-relay tests need (etcd,
# nats-server, protoc with its .proto includes); the package list lives in
# scripts/install-deps.sh, which this runs for the relay alone.
exec "$(dirname "$0")/install-deps.sh" relay
