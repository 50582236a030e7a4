#!/usr/bin/env python3
"""Out-of-process benchmark of toolwire (`make bench`; docs/bench.md explains every cell).

Three separate processes on 127.0.0.1 only, as a user runs them:

- the backend (`bench/backend`, a small Rust HTTP service: `POST /echo` answers
  `{"ok":true,"value":42}` at once, `POST /slow` the same after 50 ms);
- toolwire (release build, `toolwire serve`, embedded defaults except `listen` and `tools_dir`)
  with two HTTP tools on that backend, both `replay = false` so every request runs its calls;
- `oha`, a closed-loop load generator (each client sends its next request when the answer to
  the previous one is in).

Every cell runs the direct call (oha -> backend) and the call through toolwire
(oha -> toolwire -> backend) alternately, BENCH_RUNS times each for BENCH_SECS seconds, so that
noise from the machine hits both; the table shows the medians.

Settings (environment):
  BENCH_SECS=10      seconds per run            BENCH_RUNS=3     runs per cell and side
  BENCH_CLIENTS=32   clients of the loaded cells BENCH_WARMUP=1   warm-up seconds per target
  BENCH_OUT=path     the machine-readable result (JSON; default
                     $CARGO_TARGET_DIR/bench/out-of-process.json)
  TOOLWIRE_BIN, BACKEND_BIN, OHA_BIN   the programs (the Makefile passes them)
  BENCH_LOG          toolwire's log filter (default: the shipped default, `info`)
  BENCH_BUSY_POLL    toolwire's busy_poll.window (default: the shipped default; "0s": off)
Quick check: BENCH_SECS=2 BENCH_RUNS=1 make bench-oop

Exit status: 0 when every run completed without errors (whether or not the goals are met),
1 when a check failed (a wrong answer, a failed call, a non-200 status), 2 on a setup error.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

SECS = float(os.environ.get("BENCH_SECS", "10"))
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "32"))
WARMUP = float(os.environ.get("BENCH_WARMUP", "1"))
FANOUT = 8  # calls per completion in the `8 x 50 ms` cell
SLOW_MS = 50
TARGET = Path(os.environ.get("CARGO_TARGET_DIR", "target"))
OUT = Path(os.environ.get("BENCH_OUT", str(TARGET / "bench" / "out-of-process.json")))
TOOLWIRE = os.environ.get("TOOLWIRE_BIN", str(TARGET / "release" / "toolwire"))
BACKEND = os.environ.get("BACKEND_BIN", str(TARGET / "bench-backend" / "release" / "bench-backend"))
OHA = os.environ.get("OHA_BIN", "oha")
CLK_TCK = os.sysconf("SC_CLK_TCK")

# The goals of issue 15, in the table's terms.
GOALS = {
    "throughput_ratio": 0.33,  # toolwire / direct at BENCH_CLIENTS clients, at least
    "p50_delta_ms": 0.15,  # toolwire p50 - direct p50 with 1 client, at most
    "cpu_ms_per_completion": 0.10,  # toolwire utime+stime / completions, at most
    "fanout_ratio": 0.95,  # 8 x 50 ms completions/s vs the direct equivalent, at least
    "peak_rss_mib": 24.0,  # VmHWM of toolwire after every load, at most
}

ANSWER = {"ok": True, "value": 42}
ARGUMENTS = json.dumps({"q": "hello"})


def completion(tool: str, n: int, arguments: str = ARGUMENTS, id_prefix: str = "call_bench") -> dict:
    """A realistic OpenAI Chat completion with `n` calls of `tool`, as a /v1/execute body; call
    ids `{id_prefix}_0` … (bench/mcp_cell.py makes them new per request)."""
    calls = [
        {"id": f"{id_prefix}_{i}", "type": "function", "function": {"name": tool, "arguments": arguments}}
        for i in range(n)
    ]
    return {
        "provider": "openai_chat",
        "completion": {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "gpt-4o-2024-08-06",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None, "tool_calls": calls, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 120, "completion_tokens": 18 * n, "total_tokens": 120 + 18 * n},
        },
    }


def tools_toml(backend: str) -> str:
    tool = """[[tools]]
name = "{name}"
description = "{desc}"
parameters = {{ q = {{ type = "string", description = "Any text." }} }}
# A read-only tool, so it may opt out of replay: every request runs the call (the benchmark
# repeats the same call ids).
idempotent = true
replay = false
[tools.http]
method = "POST"
url = "http://{backend}/{path}"
"""
    return tool.format(name="bench_echo", desc="Answers at once.", backend=backend, path="echo") + "\n" + tool.format(
        name="bench_slow", desc="Answers after 50 ms.", backend=backend, path="slow"
    )


class Fail(Exception):
    """A check failed: the figures would not mean what they say."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: bytes, timeout: float = 10) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, headers={"content-type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 (127.0.0.1 only)
        return r.status, r.read()


def get(url: str, timeout: float = 10) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 (127.0.0.1 only)
        return r.read()


def cpu_ticks(pid: int) -> int:
    """utime + stime of the whole process (every thread, live or ended), in clock ticks."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise Fail(f"no {key} in /proc/{pid}/status")


def oha(url: str, body: bytes, clients: int, secs: float, body_dir: Path) -> dict:
    """One closed-loop oha run; returns completions/s (200s only), p50/p99 in ms, counts."""
    body_file = body_dir / "body.json"
    body_file.write_bytes(body)
    cmd = [
        OHA, "--no-tui", "--output-format", "json", "-z", f"{secs}s", "-c", str(clients),
        "-m", "POST", "-T", "application/json", "-D", str(body_file), "-t", "30s", url,
    ]  # fmt: skip
    try:
        out = subprocess.run(cmd, capture_output=True, check=True, timeout=secs + 60)
    except subprocess.CalledProcessError as e:
        raise Fail(f"oha failed: {e.stderr.decode(errors='replace')[-2000:]}") from e
    r = json.loads(out.stdout)
    statuses = {k: v for k, v in r.get("statusCodeDistribution", {}).items()}
    ok = statuses.get("200", 0)
    bad = {k: v for k, v in statuses.items() if k != "200"}
    # Requests still running when the time is up are aborted by oha and reported as
    # "aborted due to deadline" (at most one per client): not an error of the target.
    errors = {k: v for k, v in r.get("errorDistribution", {}).items() if "deadline" not in k}
    if bad or errors or ok == 0:
        raise Fail(f"{url}: statuses {statuses}, errors {errors}")
    total = r["summary"]["total"]
    pct = r.get("latencyPercentilesSuccessful") or r["latencyPercentiles"]
    return {
        "completions": ok,
        "secs": total,
        "per_sec": ok / total,
        "p50_ms": pct["p50"] * 1000,
        "p99_ms": pct["p99"] * 1000,
    }


def check_answer(raw: bytes, calls: int) -> None:
    v = json.loads(raw)
    results = v.get("results", [])
    if len(results) != calls or len(v.get("messages", [])) != calls:
        raise Fail(f"expected {calls} results and messages: {raw[:500]!r}")
    for r in results:
        if r.get("ok") is not True or r.get("output") != ANSWER or r.get("replayed"):
            raise Fail(f"a call did not run as expected: {r}")


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def git_commit() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg()[0]
    return f"{model}, {os.cpu_count()} CPUs, Linux {platform.release()}, load average {load:.1f} at start"


def stop(proc: subprocess.Popen | None, name: str) -> None:
    """SIGTERM, then SIGKILL after 10 s; always reaped."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        print(f"bench: {name} did not stop on SIGTERM; killing it", file=sys.stderr)
        proc.kill()
        proc.wait()


def main() -> int:
    for path in (TOOLWIRE, BACKEND):
        if not os.access(path, os.X_OK):
            print(f"bench: {path} is missing (run `make bench-oop`, which builds it)", file=sys.stderr)
            return 2
    # SIGTERM/SIGHUP end the run like Ctrl-C: the `finally` below tears every process down.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    work = tempfile.TemporaryDirectory(prefix="toolwire-bench-")
    try:
        return measure(Path(work.name))
    except Fail as e:
        print(f"bench: FAILED: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench: interrupted", file=sys.stderr)
        return 130
    finally:
        work.cleanup()


# Every process started, torn down in reverse order whatever happens.
PROCS: list[tuple[str, subprocess.Popen]] = []


def measure(work: Path) -> int:
    try:
        return _measure(work)
    finally:
        for name, proc in reversed(PROCS):
            stop(proc, name)
        PROCS.clear()


def _measure(work: Path) -> int:
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    machine_text = machine()
    # The backend: prints its port once it accepts connections; stops when its stdin closes.
    backend = subprocess.Popen([BACKEND], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    PROCS.append(("backend", backend))
    line = backend.stdout.readline() if backend.stdout else ""
    if not line.startswith("listening "):
        raise Fail(f"the backend did not start: {line!r}")
    backend_addr = line.split()[1]

    tools = work / "tools.d"
    tools.mkdir()
    (tools / "bench.toml").write_text(tools_toml(backend_addr))
    port = free_port()
    config = work / "toolwire.toml"
    config.write_text(f'listen = "127.0.0.1:{port}"\ntools_dir = "{tools}"\n')
    if "BENCH_LOG" in os.environ:
        with config.open("a") as f:
            f.write(f"log = {json.dumps(os.environ['BENCH_LOG'])}\n")
    if "BENCH_BUSY_POLL" in os.environ:  # e.g. "0s": busy polling off (docs/operations.md#busy-polling)
        with config.open("a") as f:
            f.write(f"[busy_poll]\nwindow = {json.dumps(os.environ['BENCH_BUSY_POLL'])}\n")
    env = {k: v for k, v in os.environ.items() if k not in ("RUST_LOG",) and not k.startswith("TOOLWIRE_")}
    log_path = work / "toolwire.log"
    with log_path.open("wb") as log:
        tw = subprocess.Popen([TOOLWIRE, "serve", "--config", str(config)], stdout=log, stderr=log, env=env)
    PROCS.append(("toolwire", tw))
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            get(f"{base}/readyz", timeout=1)
            break
        except OSError:
            if tw.poll() is not None or time.monotonic() > deadline:
                raise Fail(f"toolwire did not become ready:\n{log_path.read_text()[-2000:]}") from None
            time.sleep(0.1)

    one = json.dumps(completion("bench_echo", 1)).encode()
    fan = json.dumps(completion("bench_slow", FANOUT)).encode()
    direct_body = ARGUMENTS.encode()
    # Check every target once (twice for toolwire: the repeat must run again, not replay).
    for body, calls in ((one, 1), (one, 1), (fan, FANOUT), (fan, FANOUT)):
        status, raw = post(f"{base}/v1/execute", body)
        if status != 200:
            raise Fail(f"/v1/execute answered {status}")
        check_answer(raw, calls)
    for path in ("echo", "slow"):
        status, raw = post(f"http://{backend_addr}/{path}", direct_body)
        if status != 200 or json.loads(raw) != ANSWER:
            raise Fail(f"backend /{path}: {status} {raw!r}")

    direct = {
        "echo": f"http://{backend_addr}/echo",
        "slow": f"http://{backend_addr}/slow",
    }
    execute = f"{base}/v1/execute"
    # (cell, direct url, direct body, direct clients, toolwire body, toolwire clients)
    cells = [
        ("throughput", direct["echo"], direct_body, CLIENTS, one, CLIENTS),
        ("latency", direct["echo"], direct_body, 1, one, 1),
        ("fanout", direct["slow"], direct_body, CLIENTS * FANOUT, fan, CLIENTS),
    ]
    if WARMUP > 0:
        for _, durl, dbody, dclients, tbody, tclients in cells:
            oha(durl, dbody, dclients, WARMUP, work)
            oha(execute, tbody, tclients, WARMUP, work)
    log_lines_before = sum(1 for _ in log_path.open("rb"))
    completions_total = 0
    runs: dict[str, dict[str, list[dict]]] = {c[0]: {"direct": [], "toolwire": []} for c in cells}
    for i in range(RUNS):
        for name, durl, dbody, dclients, tbody, tclients in cells:
            d = oha(durl, dbody, dclients, SECS, work)
            runs[name]["direct"].append(d)
            before = cpu_ticks(tw.pid)
            t = oha(execute, tbody, tclients, SECS, work)
            t["cpu_ms_per_completion"] = (cpu_ticks(tw.pid) - before) * 1000 / CLK_TCK / t["completions"]
            # The peak so far, after each run: shows which load sets it.
            t["peak_rss_mib"] = status_kib(tw.pid, "VmHWM") / 1024
            runs[name]["toolwire"].append(t)
            completions_total += t["completions"]
            print(
                f"bench: run {i + 1}/{RUNS} {name:<10} direct {d['per_sec']:9.1f}/s p50 {d['p50_ms']:.3f} ms | "
                f"toolwire {t['per_sec']:9.1f}/s p50 {t['p50_ms']:.3f} ms, "
                f"{t['cpu_ms_per_completion']:.3f} ms CPU/completion, peak RSS {t['peak_rss_mib']:.1f} MiB",
                file=sys.stderr,
            )
    peak_rss_mib = status_kib(tw.pid, "VmHWM") / 1024
    # What the resident memory is at the end: heap and stacks (anon) vs mapped binary (file).
    rss_end = {k: status_kib(tw.pid, k) / 1024 for k in ("VmRSS", "RssAnon", "RssFile")}
    log_lines = sum(1 for _ in log_path.open("rb")) - log_lines_before

    # Every call the runs made must have succeeded (a failed call still answers 200).
    metrics = get(f"{base}/metrics").decode()
    failed = [
        line
        for line in metrics.splitlines()
        if line.startswith("toolwire_tool_calls_total{") and 'outcome="ok"' not in line
    ]
    if failed:
        raise Fail(f"some tool calls failed during the runs: {failed}")

    def med(cell: str, side: str, key: str) -> float:
        return median([r[key] for r in runs[cell][side]])

    tp_d, tp_t = med("throughput", "direct", "per_sec"), med("throughput", "toolwire", "per_sec")
    lat_d, lat_t = med("latency", "direct", "p50_ms"), med("latency", "toolwire", "p50_ms")
    cpu = med("throughput", "toolwire", "cpu_ms_per_completion")
    cpu1 = med("latency", "toolwire", "cpu_ms_per_completion")
    # The direct equivalent of a completion of 8 parallel 50 ms calls: 8 direct calls in
    # flight per client (CLIENTS x 8 connections), so the equivalent rate is the direct rate / 8.
    fan_d = med("fanout", "direct", "per_sec") / FANOUT
    fan_t = med("fanout", "toolwire", "per_sec")
    result = {
        "date": started,
        "machine": machine_text,
        "commit": git_commit(),
        "settings": {"secs": SECS, "runs": RUNS, "clients": CLIENTS, "warmup_secs": WARMUP},
        "cells": {
            "throughput": {"direct_per_sec": tp_d, "toolwire_per_sec": tp_t, "ratio": tp_t / tp_d},
            "latency_1_client": {
                "direct_p50_ms": lat_d,
                "toolwire_p50_ms": lat_t,
                "delta_ms": lat_t - lat_d,
                "direct_p99_ms": med("latency", "direct", "p99_ms"),
                "toolwire_p99_ms": med("latency", "toolwire", "p99_ms"),
            },
            "cpu_per_completion": {"ms_at_clients": cpu, "ms_at_1_client": cpu1},
            "fanout_8x50ms": {"direct_equiv_per_sec": fan_d, "toolwire_per_sec": fan_t, "ratio": fan_t / fan_d},
            "peak_rss_mib": peak_rss_mib,
            "rss_at_end_mib": rss_end,
            "log_lines_per_completion": log_lines / max(completions_total, 1),
        },
        "goals": GOALS,
        "runs": runs,
    }
    met = {
        "throughput_ratio": tp_t / tp_d >= GOALS["throughput_ratio"],
        "p50_delta_ms": lat_t - lat_d <= GOALS["p50_delta_ms"],
        "cpu_ms_per_completion": cpu <= GOALS["cpu_ms_per_completion"],
        "fanout_ratio": fan_t / fan_d >= GOALS["fanout_ratio"],
        "peak_rss_mib": peak_rss_mib <= GOALS["peak_rss_mib"],
    }
    result["met"] = met
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")

    def mark(key: str) -> str:
        return "met" if met[key] else "NOT met"

    print()
    print(f"toolwire out-of-process benchmark — {started}, commit {result['commit']}")
    print(f"{machine_text}; medians of {RUNS} run(s) of {SECS:g} s per side, interleaved")
    print()
    print("| | direct backend call | toolwire | goal | |")
    print("|---|---:|---:|---|---|")
    print(
        f"| throughput, {CLIENTS} concurrent | {tp_d:,.0f}/s | {tp_t:,.0f}/s ({tp_t / tp_d:.3f}× direct) "
        f"| ≥ {GOALS['throughput_ratio']}× direct | {mark('throughput_ratio')} |"
    )
    print(
        f"| p50 latency, 1 client | {lat_d:.3f} ms | {lat_t:.3f} ms (+{lat_t - lat_d:.3f} ms) "
        f"| ≤ direct + {GOALS['p50_delta_ms']} ms | {mark('p50_delta_ms')} |"
    )
    print(
        f"| toolwire CPU per completion ({CLIENTS} clients; 1 client: {cpu1:.3f} ms) | — | {cpu:.3f} ms "
        f"| ≤ {GOALS['cpu_ms_per_completion']} ms | {mark('cpu_ms_per_completion')} |"
    )
    print(
        f"| {FANOUT} parallel {SLOW_MS} ms calls per completion, {CLIENTS} concurrent | {fan_d:,.0f} equiv./s "
        f"| {fan_t:,.0f}/s ({fan_t / fan_d:.3f}×) | ≥ {GOALS['fanout_ratio']}× | {mark('fanout_ratio')} |"
    )
    print(f"| peak RSS (VmHWM) | — | {peak_rss_mib:.1f} MiB | ≤ {GOALS['peak_rss_mib']:g} MiB | {mark('peak_rss_mib')} |")
    print()
    print(
        f"toolwire RSS at the end: {rss_end['VmRSS']:.1f} MiB "
        f"({rss_end['RssAnon']:.1f} MiB heap and stacks, {rss_end['RssFile']:.1f} MiB of mapped files)"
    )
    print(f"toolwire log lines per completion: {result['cells']['log_lines_per_completion']:.2f}")
    print(f"result: {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
