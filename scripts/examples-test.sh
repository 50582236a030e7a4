#!/usr/bin/env bash
# End-to-end test of the agent-loop examples (examples/python, examples/typescript).
#
# Starts the example app (the backend of the `get_weather` HTTP tool) and a toolwire server with
# the shipped tools.d/, both on 127.0.0.1, then runs every example for every provider with
# --require-ok (each tool call must succeed and the final answer must quote the real
# temperature), checks that the Python and JavaScript programs print the same conversation, and
# that an unreachable server gives a clear error. Everything is torn down on exit; every wait is
# bounded.
#
#   scripts/examples-test.sh          (normally via `make examples-test`, which builds first)
#
# Environment:
#   TOOLWIRE_BIN           toolwire binary (default: ${CARGO_TARGET_DIR:-target}/debug/toolwire)
#   EXAMPLES_APP_PORT      port of the example app (default 18081)
#   EXAMPLES_WAIT_SECS     how long to wait for each service to be ready (default 20)
#   EXAMPLES_RUN_SECS      time limit of one example run (default 60)
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${TOOLWIRE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/toolwire}
APP_PORT=${EXAMPLES_APP_PORT:-18081}
WAIT_SECS=${EXAMPLES_WAIT_SECS:-20}
RUN_SECS=${EXAMPLES_RUN_SECS:-60}
PROVIDERS=(openai_chat anthropic gemini)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/toolwire-examples.XXXXXX")
APP_PID=
TW_PID=

log() { printf '==> %s\n' "$*"; }
fail() {
    printf 'examples-test: FAIL: %s\n' "$*" >&2
    for f in "$WORK"/toolwire.log "$WORK"/app.log; do
        [[ -s $f ]] && { printf -- '--- last lines of %s\n' "$(basename "$f")" >&2; tail -n 20 "$f" >&2; }
    done
    exit 1
}

# Stop one process we started: TERM, up to 5 s, then KILL; always reaped.
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
    stop "$APP_PID"
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free TCP port on 127.0.0.1 (the kernel picks; the tiny race is acceptable for a test).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port_in_use() {
    python3 -c 'import socket, sys; s = socket.socket(); sys.exit(0 if s.connect_ex(("127.0.0.1", int(sys.argv[1]))) == 0 else 1)' "$1"
}

# Poll URL until it answers 200, at most WAIT_SECS; fail early if PID died.
wait_ready() {
    local url=$1 pid=$2 name=$3 deadline=$((SECONDS + WAIT_SECS))
    while ((SECONDS < deadline)); do
        kill -0 "$pid" 2>/dev/null || fail "$name exited before it was ready"
        if python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$url" 2>/dev/null; then
            return 0
        fi
        sleep 0.2
    done
    fail "$name not ready at $url within ${WAIT_SECS}s"
}

# ---- preconditions -------------------------------------------------------------------------
[[ -x $BIN ]] || fail "no toolwire binary at $BIN (run \`make build\`, or set TOOLWIRE_BIN)"
command -v python3 >/dev/null || fail "python3 not found"
command -v node >/dev/null || fail "node not found (Node >= 18 runs examples/typescript/agent_loop.ts)"
NODE_VERSION=$(node --version)
node_major_minor=$(node -p 'process.versions.node.split(".").slice(0, 2).map(Number).join(" ")')
read -r NODE_MAJOR NODE_MINOR <<<"$node_major_minor"
((NODE_MAJOR >= 18)) || fail "node $NODE_VERSION is too old: the examples need Node >= 18 (global fetch)"
port_in_use "$APP_PORT" && fail "port $APP_PORT is taken (set EXAMPLES_APP_PORT)"
TW_PORT=$(free_port)
URL=http://127.0.0.1:$TW_PORT

# ---- the TypeScript example, runnable on this Node ----------------------------------------
# Node >= 22.6 strips the types itself; older Nodes run the output of TypeScript's own
# compiler (from the npm registry, cached in .cache/typescript). One source either way.
if ((NODE_MAJOR > 22 || (NODE_MAJOR == 22 && NODE_MINOR >= 6))); then
    TS_RUN=(node --experimental-strip-types --no-warnings examples/typescript/agent_loop.ts)
else
    command -v npm >/dev/null || fail "npm not found: Node $NODE_VERSION needs TypeScript's compiler to run the .ts example"
    if [[ ! -x $ROOT/.cache/typescript/node_modules/.bin/tsc ]]; then
        log "installing typescript into .cache/typescript (Node $NODE_VERSION cannot strip types)"
        npm install --silent --no-audit --no-fund --prefix "$ROOT/.cache/typescript" typescript@5 >/dev/null ||
            fail "could not install typescript from the npm registry"
    fi
    "$ROOT/.cache/typescript/node_modules/.bin/tsc" --target es2022 --module es2022 --moduleResolution bundler \
        --skipLibCheck --noCheck --outDir "$WORK/ts" examples/typescript/agent_loop.ts ||
        fail "tsc could not compile examples/typescript/agent_loop.ts"
    mv "$WORK/ts/agent_loop.js" "$WORK/ts/agent_loop.mjs"
    TS_RUN=(node "$WORK/ts/agent_loop.mjs")
fi

# ---- services ------------------------------------------------------------------------------
log "example app on 127.0.0.1:$APP_PORT"
HOST=127.0.0.1 PORT=$APP_PORT python3 docker/example-app/app.py >"$WORK/app.log" 2>&1 &
APP_PID=$!
wait_ready "http://127.0.0.1:$APP_PORT/healthz" "$APP_PID" "example app"

log "toolwire on $URL (tools.d/, EXAMPLE_APP_URL=http://127.0.0.1:$APP_PORT)"
# Run from the repository root: the exec tool's command path in tools.d/ is relative to it.
EXAMPLE_APP_URL=http://127.0.0.1:$APP_PORT TOOLWIRE_RELOAD__WATCH=false \
    "$BIN" serve --config config/toolwire.toml --tools-dir tools.d --listen "127.0.0.1:$TW_PORT" \
    >"$WORK/toolwire.log" 2>&1 &
TW_PID=$!
wait_ready "$URL/readyz" "$TW_PID" "toolwire"

# ---- the examples --------------------------------------------------------------------------
# Durations differ between runs; everything else in the printed conversation must be equal.
normalize() { sed -E 's/ [0-9]+ms$//' "$1"; }

run_example() { # name, provider, command...
    local name=$1 provider=$2
    shift 2
    local out=$WORK/$name-$provider.out
    log "$name --provider $provider"
    if ! timeout "$RUN_SECS" "$@" --provider "$provider" --url "$URL" --require-ok >"$out" 2>&1; then
        sed 's/^/    /' "$out" >&2
        fail "$name --provider $provider failed"
    fi
    grep -q "^OK: $provider:" "$out" || fail "$name --provider $provider printed no OK line"
    sed 's/^/    /' "$out"
}

for p in "${PROVIDERS[@]}"; do
    run_example python "$p" python3 examples/python/agent_loop.py
    run_example node-ts "$p" "${TS_RUN[@]}"
    # One program in two languages: the same conversation, line for line.
    diff -u <(normalize "$WORK/python-$p.out") <(normalize "$WORK/node-ts-$p.out") >&2 ||
        fail "python and TypeScript print different conversations for $p"
done

# ---- --stream: the model call is streamed and its raw SSE text sent as `completion_stream`;
# toolwire assembles it, so the conversation is the same as without streaming.
for p in openai_chat anthropic; do
    run_example python-stream "$p" python3 examples/python/agent_loop.py --stream
    run_example node-ts-stream "$p" "${TS_RUN[@]}" --stream
    diff -u <(normalize "$WORK/python-stream-$p.out") <(normalize "$WORK/node-ts-stream-$p.out") >&2 ||
        fail "python and TypeScript print different conversations for $p --stream"
    diff -u <(normalize "$WORK/python-$p.out") <(normalize "$WORK/python-stream-$p.out") >&2 ||
        fail "the streamed and the non-streamed loop differ for $p"
done

# ---- an unreachable server is a clear, non-zero failure -------------------------------------
DEAD_URL=http://127.0.0.1:$(free_port)
for cmd in "python3 examples/python/agent_loop.py" "${TS_RUN[*]}"; do
    log "$cmd --url $DEAD_URL (nothing listening: must fail and say to run make run)"
    # shellcheck disable=SC2086 # $cmd is a fixed word list
    if timeout "$RUN_SECS" $cmd --url "$DEAD_URL" >"$WORK/dead.out" 2>&1; then
        fail "$cmd succeeded against $DEAD_URL"
    fi
    grep -q 'make run' "$WORK/dead.out" || { cat "$WORK/dead.out" >&2; fail "$cmd did not say to run \`make run\`"; }
    sed 's/^/    /' "$WORK/dead.out"
done

log "examples-test: OK (python, TypeScript on node $NODE_VERSION x ${PROVIDERS[*]})"
