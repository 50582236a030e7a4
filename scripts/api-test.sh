#!/usr/bin/env bash
# Fuzz the running server against openapi.yaml with schemathesis (not part of CI).
#
# Installs schemathesis (and openapi-spec-validator, which checks openapi.yaml against the
# OpenAPI 3.1 meta-schema first) into a venv under .cache/ (gitignored; reused), starts
# `toolwire serve` on a free 127.0.0.1 port with tests/fixtures/openapi_tools (printf-only
# tools: nothing leaves the machine), runs every schemathesis check with a bounded number of
# examples per operation and a time limit, and stops the server on exit.
#
#   scripts/api-test.sh          (normally via `make api-test`, which builds first)
#
# Environment:
#   TOOLWIRE_BIN        toolwire binary (default: ${CARGO_TARGET_DIR:-target}/debug/toolwire)
#   API_TEST_EXAMPLES   max examples per operation (default 50)
#   API_TEST_MAX_TIME   time limit of the whole run, seconds (default 300)
#   API_TEST_SEED       schemathesis seed (default: random; printed in its summary)
#   API_TEST_WAIT_SECS  how long to wait for the server to be ready (default 20)
#   API_TEST_VENV       venv directory (default .cache/schemathesis-venv)
#   SCHEMATHESIS_SPEC   pip requirement (default "schemathesis>=4.32,<5": the flags below)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${TOOLWIRE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/toolwire}
EXAMPLES=${API_TEST_EXAMPLES:-50}
MAX_TIME=${API_TEST_MAX_TIME:-300}
WAIT_SECS=${API_TEST_WAIT_SECS:-20}
VENV=${API_TEST_VENV:-$ROOT/.cache/schemathesis-venv}
SPEC=${SCHEMATHESIS_SPEC:-schemathesis>=4.32,<5}
TOOLS_DIR=tests/fixtures/openapi_tools

WORK=$(mktemp -d "${TMPDIR:-/tmp}/toolwire-api-test.XXXXXX")
TW_PID=

log() { printf '==> %s\n' "$*"; }
fail() {
    printf 'api-test: FAIL: %s\n' "$*" >&2
    [[ -s $WORK/toolwire.log ]] && { printf -- '--- last lines of toolwire.log\n' >&2; tail -n 20 "$WORK/toolwire.log" >&2; }
    exit 1
}
# Stop the server we started: TERM, up to 5 s, then KILL; always reaped.
stop() {
    local pid=$1
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    local rc=$?
    stop "$TW_PID"
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ---- schemathesis ---------------------------------------------------------------------------
[[ -x $BIN ]] || fail "no toolwire binary at $BIN (run \`make build\`, or set TOOLWIRE_BIN)"
command -v python3 >/dev/null || fail "python3 not found"
if ! "$VENV/bin/python" -c 'import schemathesis' 2>/dev/null; then
    log "installing $SPEC into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
fi
"$VENV/bin/pip" install --quiet "$SPEC" openapi-spec-validator
log "$("$VENV/bin/st" --version)"
log "openapi-spec-validator openapi.yaml"
"$VENV/bin/openapi-spec-validator" openapi.yaml || fail "openapi.yaml is not a valid OpenAPI document"

# ---- server ---------------------------------------------------------------------------------
PORT=$(free_port)
URL=http://127.0.0.1:$PORT
log "toolwire on $URL ($TOOLS_DIR)"
TOOLWIRE_RELOAD__WATCH=false "$BIN" serve --tools-dir "$TOOLS_DIR" --listen "127.0.0.1:$PORT" \
    >"$WORK/toolwire.log" 2>&1 &
TW_PID=$!
deadline=$((SECONDS + WAIT_SECS))
until python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$URL/readyz" 2>/dev/null; do
    kill -0 "$TW_PID" 2>/dev/null || fail "toolwire exited before it was ready"
    ((SECONDS < deadline)) || fail "toolwire not ready at $URL within ${WAIT_SECS}s"
    sleep 0.2
done

# ---- run ------------------------------------------------------------------------------------
# scripts/schemathesis.toml: per-operation expectations the schema cannot express (see there).
seed=()
[[ -n ${API_TEST_SEED:-} ]] && seed=(--seed "$API_TEST_SEED")
log "st run openapi.yaml --checks all --max-examples $EXAMPLES --max-time $MAX_TIME"
"$VENV/bin/st" --config-file scripts/schemathesis.toml run openapi.yaml \
    --url "$URL" \
    --checks all \
    --max-examples "$EXAMPLES" \
    --max-time "$MAX_TIME" \
    --request-timeout 30 \
    --no-color \
    "${seed[@]}" || fail "schemathesis found problems (see above)"
kill -0 "$TW_PID" 2>/dev/null || fail "toolwire died during the run"
log "api-test passed"
