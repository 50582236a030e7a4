#!/usr/bin/env bash
# System programs the integration tests run for real, installed when missing so that
# `make test` is the one command a newcomer needs: `redis-server` (the shared-store tests,
# tests/it/store_redis.rs) from Debian's packages. Needs root (or sudo) and apt-get; otherwise
# it says what to install and fails, rather than letting the tests fail later.
set -euo pipefail
command -v redis-server >/dev/null && exit 0
if command -v apt-get >/dev/null; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "test-deps: installing redis-server (Debian package) for the shared-store tests"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
  command -v redis-server >/dev/null && exit 0
fi
echo "test-deps: redis-server is missing; install it (e.g. apt-get install redis-server) and re-run make test" >&2
exit 1
