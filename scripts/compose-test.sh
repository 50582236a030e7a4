#!/usr/bin/env bash
# End-to-end test of the container setup (`make compose-test`; not part of CI).
#
# Builds toolwire on the host, packages it with `docker build --target runtime-prebuilt` (the same
# runtime layout as the multi-stage image, without pulling rust:*), runs docker/compose.yaml
# (toolwire + the example app) under the project name `toolwire-ct`, and sends real
# `POST /v1/execute` requests for OpenAI Chat, Anthropic and Gemini completions through the
# published port. Always tears down (`down -v`) and stops a dockerd it started itself.
#
# Works on machines without registry access (see docs/deploy.md): when `docker info` fails it
# starts dockerd (installing Debian's docker.io and docker-compose first when run as root), and
# when debian:bookworm-slim is missing it builds it with debootstrap and `docker import`, caching
# the rootfs tarball in .cache/compose-test/.
#
# Every step has a timeout; the whole run stays under COMPOSE_TEST_BUDGET seconds (840).
#
# COMPOSE_TEST_VARIANT=scale (`make compose-scale-test`) runs docker/compose.scale.yaml instead:
# two toolwire replicas sharing a Redis store (built from docker/redis on the same Debian base),
# and shows a call run on replica A replayed by replica B, an Idempotency-Key honoured across
# them, and stored results surviving a restart of the Redis container (docs/scale.md).
#
# COMPOSE_TEST_PROFILE=debug packages a debug build (stripped) instead of a release build, for
# machines where a release build does not fit the budget.
#
# Environment: TOOLWIRE_PORT (host port, default 8080, a free one when 8080 is taken and the
# variable is unset; the scale variant picks two free ports), COMPOSE_TEST_BUDGET, COMPOSE_TEST_KEEP_ENGINE=1 (leave a started dockerd
# running), DOCKER_BUILDKIT (default 0: Debian's engine 20.10 has no buildx).
set -Eeuo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
VARIANT=${COMPOSE_TEST_VARIANT:-single}
case $VARIANT in
  single) PROJECT=toolwire-ct; COMPOSE_FILE=docker/compose.yaml ;;
  scale) PROJECT=toolwire-cst; COMPOSE_FILE=docker/compose.scale.yaml ;;
  *) echo "COMPOSE_TEST_VARIANT must be single or scale" >&2; exit 2 ;;
esac
export REDIS_IMAGE=toolwire-redis:compose-test
export REDIS_PASSWORD=${REDIS_PASSWORD:-compose-test-redis-password}
CACHE_DIR=$ROOT/.cache/compose-test
ROOTFS_TAR=$CACHE_DIR/debian-bookworm-minbase.tar
BASE_IMAGE=debian:bookworm-slim
export TOOLWIRE_IMAGE=toolwire:compose-test
export EXAMPLE_APP_IMAGE=toolwire-example-app:compose-test
export EXAMPLE_APP_TOKEN=${EXAMPLE_APP_TOKEN:-compose-test-token}
export TOOLWIRE_TOKEN=${TOOLWIRE_TOKEN:-compose-test-toolwire-token}
export DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0}
export COMPOSE_DOCKER_CLI_BUILD=${COMPOSE_DOCKER_CLI_BUILD:-0}

BUDGET=${COMPOSE_TEST_BUDGET:-840}
TEARDOWN_RESERVE=60   # seconds kept back for teardown
START=$SECONDS
WORK=$(mktemp -d "${TMPDIR:-/tmp}/toolwire-ct.XXXXXX")
STARTED_DOCKERD_PID=""
COMPOSE=()
UP=0
STATUS=FAIL
declare -a SUMMARY=()

log() { printf '[compose-test %4ds] %s\n' "$((SECONDS - START))" "$*"; }
die() { log "ERROR: $*"; exit 1; }

# Seconds a step may take: its own limit, cut to what is left of the budget.
limit() {
  local want=$1 left=$((BUDGET - TEARDOWN_RESERVE - (SECONDS - START)))
  ((left > 0)) || die "time budget of ${BUDGET}s used up"
  ((want < left)) && echo "$want" || echo "$left"
}

# bounded SECONDS CMD...: run CMD under `timeout`. It runs in the background and is waited for,
# so that Ctrl-C (which does not reach timeout's own process group) runs the trap at once; the
# trap passes the signal on to `timeout`, which passes it to the command.
STEP_PID=""
bounded() {
  local secs=$1; shift
  timeout --kill-after=10 "$secs" "$@" &
  STEP_PID=$!
  local rc=0
  wait "$STEP_PID" || rc=$?
  STEP_PID=""
  return "$rc"
}

# run SECONDS DESCRIPTION CMD...: one bounded step that must succeed.
run() {
  local secs; secs=$(limit "$1"); local what=$2; shift 2
  log "$what (timeout ${secs}s)"
  bounded "$secs" "$@" || die "$what failed or timed out"
}

compose() {
  local secs; secs=$(limit "${CT_TIMEOUT:-120}")
  bounded "$secs" "${COMPOSE[@]}" -p "$PROJECT" -f "$COMPOSE_FILE" "$@"
}

teardown() {
  local rc=$?
  trap - EXIT
  trap '' INT TERM   # teardown always runs to its end (each part is bounded)
  set +e
  [[ -n $STEP_PID ]] && kill -TERM "$STEP_PID" 2>/dev/null && wait "$STEP_PID" 2>/dev/null
  if ((UP)); then
    if [[ $STATUS != PASS ]]; then
      log "logs of the failed run:"
      timeout 20 "${COMPOSE[@]}" -p "$PROJECT" -f "$COMPOSE_FILE" ps
      timeout 20 "${COMPOSE[@]}" -p "$PROJECT" -f "$COMPOSE_FILE" logs --no-color --tail=60
    fi
    log "tearing down (down -v)"
    timeout --kill-after=10 50 "${COMPOSE[@]}" -p "$PROJECT" -f "$COMPOSE_FILE" down -v --remove-orphans -t 5 \
      || log "WARNING: down -v failed"
  fi
  if [[ -n $STARTED_DOCKERD_PID && ${COMPOSE_TEST_KEEP_ENGINE:-0} != 1 ]]; then
    log "stopping the dockerd this run started (pid $STARTED_DOCKERD_PID)"
    kill -TERM "$STARTED_DOCKERD_PID" 2>/dev/null
    for _ in $(seq 30); do kill -0 "$STARTED_DOCKERD_PID" 2>/dev/null || break; sleep 1; done
    kill -0 "$STARTED_DOCKERD_PID" 2>/dev/null && log "WARNING: dockerd $STARTED_DOCKERD_PID still running"
  fi
  rm -rf "$WORK"
  echo
  echo "==================== compose-test summary ===================="
  local line
  for line in "${SUMMARY[@]}"; do echo "  $line"; done
  echo "  result: $STATUS ($((SECONDS - START))s)"
  echo "=============================================================="
  [[ $STATUS == PASS ]] && exit 0
  ((rc != 0)) && exit "$rc"
  exit 1
}
trap teardown EXIT
trap 'log "interrupted"; exit 130' INT TERM

# --- 1. engine and compose --------------------------------------------------------------------
apt_install() {
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    log "installing Debian packages: $*"
    timeout "$(limit 300)" apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive timeout "$(limit 400)" apt-get install -y -qq "$@" >/dev/null \
      || die "apt-get install $* failed"
  else
    die "missing: $* (install Debian's packages $*, or Docker Engine with the compose plugin)"
  fi
}

mkdir -p "$CACHE_DIR"
if ! timeout 20 docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null || apt_install docker.io docker-compose
  log "no running engine: starting dockerd --iptables=false --bridge=none"
  setsid dockerd --iptables=false --bridge=none >"$CACHE_DIR/dockerd.log" 2>&1 </dev/null &
  STARTED_DOCKERD_PID=$!
  for _ in $(seq 60); do
    timeout 5 docker info >/dev/null 2>&1 && break
    kill -0 "$STARTED_DOCKERD_PID" 2>/dev/null || { tail -20 "$CACHE_DIR/dockerd.log"; die "dockerd exited"; }
    sleep 1
  done
  timeout 5 docker info >/dev/null 2>&1 || { tail -20 "$CACHE_DIR/dockerd.log"; die "dockerd did not come up in 60s"; }
  SUMMARY+=("engine: started dockerd (pid $STARTED_DOCKERD_PID), log $CACHE_DIR/dockerd.log")
else
  SUMMARY+=("engine: already running")
fi

if timeout 10 docker compose version >/dev/null 2>&1; then
  COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null; then
  COMPOSE=(docker-compose)
else
  apt_install docker-compose
  COMPOSE=(docker-compose)
fi
log "compose: ${COMPOSE[*]} ($(timeout 10 "${COMPOSE[@]}" version --short 2>/dev/null || echo '?'))"
SUMMARY+=("compose: ${COMPOSE[*]}")

# --- 2. base image ----------------------------------------------------------------------------
if timeout 20 docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
  SUMMARY+=("base image: $BASE_IMAGE present")
else
  if [[ ! -s $ROOTFS_TAR ]]; then
    command -v debootstrap >/dev/null || apt_install debootstrap
    rootfs=$WORK/rootfs
    run 400 "debootstrap bookworm minbase into $rootfs" \
      debootstrap --variant=minbase --include=ca-certificates bookworm "$rootfs" http://deb.debian.org/debian
    run 120 "packing the rootfs into $ROOTFS_TAR" tar -C "$rootfs" -cf "$ROOTFS_TAR.tmp" .
    mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
    rm -rf "$rootfs"
  fi
  run 120 "docker import $ROOTFS_TAR as $BASE_IMAGE" docker import "$ROOTFS_TAR" "$BASE_IMAGE"
  SUMMARY+=("base image: $BASE_IMAGE imported from a debootstrap rootfs (no registry)")
fi

# --- 3. binary and images ---------------------------------------------------------------------
PROFILE=${COMPOSE_TEST_PROFILE:-release}
case $PROFILE in
  release) run 600 "cargo build --release --locked --bin toolwire" cargo build --release --locked --bin toolwire ;;
  debug) run 600 "cargo build --locked --bin toolwire (debug profile)" cargo build --locked --bin toolwire ;;
  *) die "COMPOSE_TEST_PROFILE must be release or debug" ;;
esac
target_dir=$(timeout 60 cargo metadata --format-version 1 --no-deps --locked \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
if [[ $PROFILE == debug ]]; then
  # The Dockerfile packages target/release/toolwire; a debug build (a machine too busy for a
  # release build) goes there stripped of its debug info, and the summary says so.
  mkdir -p "$ROOT/target/release"
  objcopy --strip-debug "$target_dir/debug/toolwire" "$ROOT/target/release/toolwire"
  SUMMARY+=("binary: debug profile (COMPOSE_TEST_PROFILE=debug), debug info stripped")
elif [[ $(realpath "$target_dir/release/toolwire") != $(realpath -m "$ROOT/target/release/toolwire") ]]; then
  # CARGO_TARGET_DIR points elsewhere: the Dockerfile takes the binary from the context.
  install -D -m 0755 "$target_dir/release/toolwire" "$ROOT/target/release/toolwire"
fi
revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
run 300 "docker build --target runtime-prebuilt -t $TOOLWIRE_IMAGE" \
  docker build --network host --target runtime-prebuilt --build-arg "REVISION=$revision" -t "$TOOLWIRE_IMAGE" .
run 300 "docker build -t $EXAMPLE_APP_IMAGE docker/example-app" \
  docker build --network host -t "$EXAMPLE_APP_IMAGE" docker/example-app
SUMMARY+=("images: $TOOLWIRE_IMAGE (runtime-prebuilt, $revision), $EXAMPLE_APP_IMAGE")
if [[ $VARIANT == scale ]]; then
  run 300 "docker build -t $REDIS_IMAGE docker/redis" \
    docker build --network host -t "$REDIS_IMAGE" docker/redis
  SUMMARY+=("images: $REDIS_IMAGE (Debian's redis-server on $BASE_IMAGE)")
fi

# --- 4. compose up ----------------------------------------------------------------------------
port_free() { python3 -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
if [[ $VARIANT == scale ]]; then
  export TOOLWIRE_PORT_A=${TOOLWIRE_PORT_A:-$(free_port)} TOOLWIRE_PORT_B=${TOOLWIRE_PORT_B:-$(free_port)}
  TOOLWIRE_SERVICES=(toolwire-a toolwire-b)
  TOOLWIRE_PORT=$TOOLWIRE_PORT_A
else
  TOOLWIRE_SERVICES=(toolwire)
  if [[ -z ${TOOLWIRE_PORT:-} ]]; then
    TOOLWIRE_PORT=8080
    if ! port_free 8080; then
      TOOLWIRE_PORT=$(free_port)
      log "port 8080 is taken on this host; publishing toolwire on $TOOLWIRE_PORT instead"
    fi
  fi
fi
export TOOLWIRE_PORT
BASE_URL=http://127.0.0.1:$TOOLWIRE_PORT

# A leftover of an earlier, killed run would hold the port and the names.
CT_TIMEOUT=60 compose down -v --remove-orphans -t 1 >/dev/null 2>&1 || true
UP=1
log "compose up (project $PROJECT, $COMPOSE_FILE, toolwire on $BASE_URL)"
CT_TIMEOUT=180 compose up -d --no-build </dev/null || die "compose up failed"

# wait_healthy SERVICE: until its container is healthy (bounded); sets HEALTHY_CID.
HEALTHY_CID=""
wait_healthy() {
  local service=$1 cid health="" deadline
  log "waiting for $service to be healthy"
  cid=$(CT_TIMEOUT=30 compose ps -q "$service")
  [[ -n $cid ]] || die "no $service container"
  deadline=$((SECONDS + $(limit 120)))
  while ((SECONDS < deadline)); do
    health=$(timeout 10 docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$cid" 2>/dev/null || true)
    [[ $health == healthy ]] && break
    sleep 2
  done
  [[ $health == healthy ]] || die "$service not healthy (status: ${health:-none})"
  HEALTHY_CID=$cid
}
for service in "${TOOLWIRE_SERVICES[@]}"; do
  wait_healthy "$service"
  cid=$HEALTHY_CID
  user=$(timeout 10 docker inspect -f '{{.Config.User}}' "$cid")
  workdir=$(timeout 10 docker inspect -f '{{.Config.WorkingDir}}' "$cid")
  SUMMARY+=("$service container: healthy (docker HEALTHCHECK = toolwire health), user $user, workdir $workdir")
done

if [[ $VARIANT == scale ]]; then
  # --- 5 (scale). cross-replica replay on the real engine -------------------------------------
  log "cross-replica checks: A=$TOOLWIRE_PORT_A B=$TOOLWIRE_PORT_B"
  cat >"$WORK/scale_checks.py" <<'PY'
"""Two replicas on one Redis: a call run on A is replayed by B, an Idempotency-Key is shared,
and what was stored survives a restart of the Redis container (argv[4] restarts it). One line
per check: PASS|FAIL <name>: <detail>."""
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

a, b, token, restart_cmd = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
auth = {"authorization": "Bearer " + token}
failures = 0
run_id = str(int(time.time() * 1000))


def get(base, path):
    req = urllib.request.Request(base + path, headers=auth)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, json.load(r)


def execute(base, completion, key=None):
    body = json.dumps({"provider": "openai_chat", "completion": completion}).encode()
    headers = {"content-type": "application/json", **auth}
    if key:
        headers["idempotency-key"] = key
    req = urllib.request.Request(base + "/v1/execute", data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def completion(call_id, city):
    return {
        "id": "chatcmpl-cst", "object": "chat.completion", "created": 1727346166, "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}]}}],
    }


def check(name, fn):
    global failures
    try:
        print(f"PASS {name}: {fn()}")
    except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the run
        failures += 1
        print(f"FAIL {name}: {type(e).__name__}: {e}")
    sys.stdout.flush()


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def store_of(base):
    status, body = get(base, "/readyz")
    expect(status == 200, f"/readyz {status}")
    return body["store"]


def wait_connected(base, limit=60):
    until = time.time() + limit
    while True:
        try:
            s = store_of(base)
            if s["connected"]:
                return s
        except Exception:  # noqa: BLE001 - not up yet
            s = None
        if time.time() > until:
            raise AssertionError(f"store not connected within {limit}s: {s}")
        time.sleep(0.5)


def readyz():
    sa, sb = wait_connected(a), wait_connected(b)
    expect(sa["kind"] == "redis" and sb["kind"] == "redis", f"kinds {sa} {sb}")
    return f"both replicas: store {sa}"


stored = {}


def replay_across():
    c = completion(f"call_cst_{run_id}", "Oslo")
    s1, r1 = execute(a, c)
    s2, r2 = execute(b, c)
    expect((s1, s2) == (200, 200), f"status {s1} {s2}")
    expect(r1["results"][0]["ok"], f"A failed: {r1['results'][0]}")
    expect("replayed" not in r1["results"][0], "A's first run says replayed")
    expect(r2["results"][0].get("replayed") is True, f"B did not replay: {r2['results'][0]}")
    expect(r2["results"][0]["output"] == r1["results"][0]["output"], "outputs differ")
    stored["completion"], stored["output"] = c, r1["results"][0]["output"]
    return f"A ran get_weather, B answered replayed=true with the same output {r1['results'][0]['output']}"


def idempotency_key_across():
    key = f"cst-{run_id}"
    c = completion(f"call_key_{run_id}", "Lima")
    s1, r1 = execute(b, c, key)
    s2, r2 = execute(a, c, key)
    expect((s1, s2) == (200, 200), f"status {s1} {s2}")
    expect(r2["results"][0].get("replayed") is True, f"A did not replay B's answer: {r2}")
    other = completion(f"call_key_{run_id}", "Quito")
    s3, r3 = execute(a, other, key)
    expect(s3 == 422 and r3["error"]["code"] == "idempotency_key_reused", f"{s3} {r3}")
    return "B answered, A replayed the same key, another body with it is 422 idempotency_key_reused"


def survives_redis_restart():
    subprocess.run(restart_cmd, shell=True, check=True, timeout=60)
    wait_connected(a)
    wait_connected(b)
    s, r = execute(b, stored["completion"])
    expect(s == 200 and r["results"][0].get("replayed") is True, f"lost after restart: {r['results'][0]}")
    expect(r["results"][0]["output"] == stored["output"], "output changed")
    return "redis container restarted (AOF): the result stored before is still replayed, no toolwire restart"


check("readyz: store redis, connected, on both replicas", readyz)
check("call run on A replayed by B", replay_across)
check("Idempotency-Key shared by A and B", idempotency_key_across)
check("Redis restarted mid-run keeps stored results; replicas reconnect", survives_redis_restart)
sys.exit(1 if failures else 0)
PY
  restart_cmd="timeout 60 ${COMPOSE[*]} -p $PROJECT -f $COMPOSE_FILE restart -t 5 redis"
  checks_rc=0
  bounded "$(limit 240)" python3 "$WORK/scale_checks.py" "http://127.0.0.1:$TOOLWIRE_PORT_A" \
    "http://127.0.0.1:$TOOLWIRE_PORT_B" "$TOOLWIRE_TOKEN" "$restart_cmd" >"$WORK/checks.out" || checks_rc=$?
  cat "$WORK/checks.out"
  while IFS= read -r line; do SUMMARY+=("$line"); done < <(cut -c1-220 "$WORK/checks.out")
  ((checks_rc == 0)) || die "cross-replica checks failed (exit $checks_rc)"
  STATUS=PASS
  exit 0
fi

# --- 5. real requests through the published port ----------------------------------------------
log "POST $BASE_URL/v1/execute (OpenAI Chat, Anthropic, Gemini)"
cat >"$WORK/checks.py" <<'PY'
"""Send completions shaped like tests/fixtures/providers/ that call the shipped tools, check
the tool messages toolwire returns. One line per check: PASS|FAIL <name>: <detail>."""
import json
import sys
import urllib.request

base = sys.argv[1]
auth = {"authorization": "Bearer " + sys.argv[2]}
failures = 0


def get(path):
    req = urllib.request.Request(base + path, headers=auth)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, json.load(r)


def execute(provider, completion):
    body = json.dumps({"provider": provider, "completion": completion}).encode()
    req = urllib.request.Request(base + "/v1/execute", data=body, method="POST",
                                 headers={"content-type": "application/json", **auth})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, json.load(r)


def check(name, fn):
    global failures
    try:
        detail = fn()
        print(f"PASS {name}: {detail}")
    except Exception as e:  # noqa: BLE001 - every failure is reported, none stops the run
        failures += 1
        print(f"FAIL {name}: {type(e).__name__}: {e}")


def expect(cond, msg):
    if not cond:
        raise AssertionError(msg)


def weather_ok(result, city):
    expect(result["ok"], f"call failed: {json.dumps(result.get('error'))[:300]}")
    out = result["output"]
    expect(out.get("city") == city and "conditions" in out, f"unexpected output {out}")
    return out


def readyz():
    status, body = get("/readyz")
    expect(status == 200, f"status {status}")
    _, tools = get("/v1/tools")
    names = sorted(t["name"] for t in (tools["tools"] if isinstance(tools, dict) else tools))
    expect({"get_weather", "convert_units"} <= set(names), f"tools loaded: {names}")
    return f"ready, tools {names}"


def openai_chat():
    # Shape of openai_chat/real_parallel_two_tools.json: two calls, arguments as JSON strings.
    completion = {
        "id": "chatcmpl-ct", "object": "chat.completion", "created": 1727346166,
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "logprobs": None, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "refusal": None,
            "tool_calls": [
                {"id": "call_weather_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Edinburgh\"}"}},
                {"id": "call_units_2", "type": "function",
                 "function": {"name": "convert_units",
                              "arguments": "{\"value\": 5, \"from\": \"km\", \"to\": \"mi\"}"}},
            ]}}],
        "usage": {"prompt_tokens": 149, "completion_tokens": 60, "total_tokens": 209},
    }
    status, r = execute("openai_chat", completion)
    expect(status == 200, f"status {status}")
    expect(r["finished"] is False, "finished should be false")
    msgs = r["messages"]
    expect([m.get("role") for m in msgs] == ["tool", "tool"], f"roles {[m.get('role') for m in msgs]}")
    expect([m.get("tool_call_id") for m in msgs] == ["call_weather_1", "call_units_2"],
           f"tool_call_ids {[m.get('tool_call_id') for m in msgs]}")
    out = weather_ok(r["results"][0], "Edinburgh")
    expect(json.loads(msgs[0]["content"]) == out, "tool message content != weather output")
    units = r["results"][1]
    expect(units["ok"], f"convert_units failed: {json.dumps(units.get('error'))[:300]}")
    expect("3.107" in json.dumps(units["output"]), f"5 km != 3.107 mi: {units['output']}")
    return f"2 tool messages (tool_call_id call_weather_1, call_units_2), weather {out}, units {units['output']}"


def anthropic():
    # Shape of anthropic/sdk_single_tool_use.json.
    completion = {
        "model": "claude-haiku-4-5-20251001", "id": "msg_ct", "type": "message", "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me check the weather."},
            {"type": "tool_use", "id": "toolu_ct_1", "name": "get_weather",
             "input": {"city": "San Francisco", "units": "imperial"}, "caller": {"type": "direct"}},
        ],
        "stop_reason": "tool_use", "stop_sequence": None,
        "usage": {"input_tokens": 656, "output_tokens": 74},
    }
    status, r = execute("anthropic", completion)
    expect(status == 200, f"status {status}")
    expect(r["assistant"]["role"] == "assistant", "assistant role")
    msgs = r["messages"]
    expect(len(msgs) == 1 and msgs[0]["role"] == "user", f"want one user message, got {msgs}")
    blocks = msgs[0]["content"]
    expect(len(blocks) == 1 and blocks[0]["type"] == "tool_result", f"blocks {blocks}")
    expect(blocks[0]["tool_use_id"] == "toolu_ct_1", f"tool_use_id {blocks[0].get('tool_use_id')}")
    expect(not blocks[0].get("is_error", False), f"is_error set: {blocks[0]}")
    out = weather_ok(r["results"][0], "San Francisco")
    expect("temp_f" in out, f"imperial units not passed through: {out}")
    return f"tool_result for toolu_ct_1, output {out}"


def gemini():
    # Shape of gemini/constructed_parallel_calls_ids_signature_on_first.json (REST camelCase).
    completion = {
        "candidates": [{"index": 0, "finishReason": "STOP", "content": {"role": "model", "parts": [
            {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "gm_ct_1"},
             "thoughtSignature": "c2lnbmF0dXJl"},
            {"functionCall": {"name": "convert_units", "args": {"value": 70, "from": "F", "to": "C"},
                              "id": "gm_ct_2"}},
        ]}}],
        "modelVersion": "gemini-3-pro-preview",
    }
    status, r = execute("gemini", completion)
    expect(status == 200, f"status {status}")
    expect(r["assistant"]["parts"][0].get("thoughtSignature") == "c2lnbmF0dXJl", "thoughtSignature lost")
    msgs = r["messages"]
    expect(len(msgs) == 1 and msgs[0]["role"] == "user", f"want one user Content, got {msgs}")
    frs = [p["functionResponse"] for p in msgs[0]["parts"]]
    expect([f["name"] for f in frs] == ["get_weather", "convert_units"], f"names {[f['name'] for f in frs]}")
    expect([f.get("id") for f in frs] == ["gm_ct_1", "gm_ct_2"], f"ids {[f.get('id') for f in frs]}")
    out = weather_ok(r["results"][0], "Paris")
    expect(frs[0]["response"].get("output") == out, f"response.output {frs[0]['response']}")
    expect("21.1" in json.dumps(frs[1]["response"].get("output")), f"70 F != 21.1 C: {frs[1]['response']}")
    return f"functionResponse x2 (ids gm_ct_1, gm_ct_2), response.output {out}"


check("readyz + tools", readyz)
check("openai_chat get_weather + convert_units", openai_chat)
check("anthropic get_weather", anthropic)
check("gemini get_weather + convert_units", gemini)
sys.exit(1 if failures else 0)
PY
checks_rc=0
bounded "$(limit 60)" python3 "$WORK/checks.py" "$BASE_URL" "$TOOLWIRE_TOKEN" >"$WORK/checks.out" || checks_rc=$?
cat "$WORK/checks.out"
while IFS= read -r line; do SUMMARY+=("$line"); done < <(cut -c1-220 "$WORK/checks.out")
((checks_rc == 0)) || die "request checks failed (exit $checks_rc)"
STATUS=PASS
