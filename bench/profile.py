#!/usr/bin/env python3
"""Noise-immune cost of one `/v1/execute` request (`make bench-profile`; docs/bench.md).

Wall-clock figures move with whatever else the machine does; these do not (much):

- `callgrind`: toolwire runs under `valgrind --tool=callgrind`; after a warm-up the counters
  are zeroed, exactly N sequential requests are sent (one client, keep-alive), and the counters
  are dumped. Reports instructions (Ir) per request, heap allocations (calls of malloc,
  calloc, realloc and mimalloc's entry points) per request, and the top functions
  (top-self.txt: own cost per function; annotate-inclusive.txt).
- `strace`: `strace -c -f` attached to toolwire (not under valgrind) for N requests: system
  calls per request, by name.

Both use the same backend, tools and completion as `bench/run.py`. Only 127.0.0.1; every
process is stopped at the end.

Usage: bench/profile.py [callgrind|strace|both] [--requests N] [--calls K] [--out DIR]
  --calls K  calls per completion (bench_echo, the instant tool; default 1)
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402  (the driver's helpers: backend, tools, completion, checks)

ALLOC_FNS = re.compile(r"^(malloc|calloc|realloc|mi_malloc\w*|mi_zalloc\w*|mi_calloc\w*|mi_realloc\w*)$")


def start(work: Path, wrapper: list[str]) -> tuple[subprocess.Popen, int, str]:
    backend = subprocess.Popen([bench.BACKEND], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    bench.PROCS.append(("backend", backend))
    line = backend.stdout.readline() if backend.stdout else ""
    if not line.startswith("listening "):
        raise bench.Fail(f"the backend did not start: {line!r}")
    tools = work / "tools.d"
    tools.mkdir(exist_ok=True)
    (tools / "bench.toml").write_text(bench.tools_toml(line.split()[1]))
    port = bench.free_port()
    config = work / "toolwire.toml"
    config.write_text(f'listen = "127.0.0.1:{port}"\ntools_dir = "{tools}"\n')
    if "BENCH_LOG" in bench.os.environ:  # toolwire's log filter, as for bench/run.py
        with config.open("a") as f:
            f.write(f"log = {json.dumps(bench.os.environ['BENCH_LOG'])}\n")
    # Busy polling off: these figures count the work of a request, and a spin's polling (which
    # bench/run.py's CPU figures do include) is waiting, not work (docs/operations.md#busy-polling).
    with config.open("a") as f:
        f.write('[busy_poll]\nwindow = "0s"\n')
    log = (work / "toolwire.log").open("wb")
    tw = subprocess.Popen([*wrapper, bench.TOOLWIRE, "serve", "--config", str(config)], stdout=log, stderr=log)
    bench.PROCS.append(("toolwire", tw))
    deadline = time.monotonic() + 180
    while True:
        try:
            bench.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
            break
        except OSError:
            if tw.poll() is not None or time.monotonic() > deadline:
                text = (work / "toolwire.log").read_text(errors="replace")[-2000:]
                raise bench.Fail(f"toolwire did not become ready:\n{text}") from None
            time.sleep(0.2)
    return tw, port, str(work / "toolwire.log")


def send(port: int, body: bytes, n: int, calls: int) -> None:
    """n sequential requests on one keep-alive connection; every answer checked."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    for _ in range(n):
        conn.request("POST", "/v1/execute", body=body, headers={"content-type": "application/json"})
        r = conn.getresponse()
        raw = r.read()
        if r.status != 200:
            raise bench.Fail(f"status {r.status}: {raw[:300]!r}")
        bench.check_answer(raw, calls)
    conn.close()


def callgrind_costs(path: Path) -> tuple[int, int]:
    """(total Ir, calls of the allocator's entry points) of one callgrind dump."""
    names: dict[str, str] = {}
    total = allocs = 0
    pending_alloc = False
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            total = max(total, int(line.split()[1]))
        elif line.startswith("cfn="):
            m = re.match(r"cfn=\((\d+)\)(?: (.*))?", line)
            if m:
                if m.group(2):
                    names[m.group(1)] = m.group(2)
                name = names.get(m.group(1), "")
            else:
                name = line[4:]
            pending_alloc = bool(ALLOC_FNS.match(name.split("'")[0]))
        elif line.startswith("fn=") or line.startswith("fl=") or line.startswith("fi=") or line.startswith("fe="):
            m = re.match(r"fn=\((\d+)\) (.*)", line)
            if m:
                names[m.group(1)] = m.group(2)
        elif line.startswith("calls=") and pending_alloc:
            allocs += int(line.split("=")[1].split()[0])
            pending_alloc = False
    return total, allocs


def self_costs(path: Path) -> list[tuple[int, str]]:
    """Self cost (Ir) per function of one callgrind dump, highest first. (callgrind_annotate
    mis-attributes the self cost of a dump taken while threads are running to `clone`.)"""
    names: dict[str, str] = {}
    costs: dict[str, int] = {}
    current = ""
    after_calls = False
    for line in path.read_text(errors="replace").splitlines():
        if not line:
            continue
        head = line[0]
        if head.isdigit() or head in "+-*":
            if after_calls:
                after_calls = False  # the inclusive cost of a call: not this function's own
                continue
            parts = line.split()
            if len(parts) >= 2:
                costs[current] = costs.get(current, 0) + int(parts[1])
            continue
        if line.startswith("fn="):
            m = re.match(r"fn=\((\d+)\)(?: (.*))?", line)
            if m:
                if m.group(2):
                    names[m.group(1)] = m.group(2)
                current = names.get(m.group(1), m.group(1))
            else:
                current = line[3:]
        elif line.startswith("cfn="):
            m = re.match(r"cfn=\((\d+)\) (.*)", line)
            if m:
                names[m.group(1)] = m.group(2)
        elif line.startswith("calls="):
            after_calls = True
    return sorted(((c, n) for n, c in costs.items()), reverse=True)


def profile_callgrind(out: Path, n: int, calls: int, body: bytes) -> dict:
    if shutil.which("valgrind") is None:
        raise bench.Fail("valgrind is not installed")
    with tempfile.TemporaryDirectory(prefix="toolwire-profile-") as w:
        work = Path(w)
        dump = out / "callgrind.out"
        wrapper = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={dump}",
            "--dump-instr=no", "--trace-children=no",
        ]  # fmt: skip
        tw, port, _log = start(work, wrapper)
        send(port, body, 100, calls)  # warm-up: pools, lazy statics, first-use paths
        # Zero the counters, run exactly the measured requests, dump.
        subprocess.run(["callgrind_control", "-z", str(tw.pid)], check=True, capture_output=True)
        send(port, body, n, calls)
        subprocess.run(["callgrind_control", "-d", "measured", str(tw.pid)], check=True, capture_output=True)
        for name, proc in reversed(bench.PROCS):
            bench.stop(proc, name)
        bench.PROCS.clear()
    dumps = sorted(out.glob("callgrind.out*"), key=lambda p: p.stat().st_mtime)
    measured = [d for d in dumps if "measured" in d.read_text(errors="replace")[:2000]] or dumps
    total, allocs = callgrind_costs(measured[0])
    top = self_costs(measured[0])
    (out / "top-self.txt").write_text(
        "".join(f"{c / n:12.0f} Ir/request {100 * c / max(total, 1):5.1f}%  {name}\n" for c, name in top[:150])
    )
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(measured[0])], capture_output=True, text=True)
    (out / "annotate-inclusive.txt").write_text(ann.stdout)
    return {
        "requests": n,
        "calls_per_request": calls,
        "instructions_per_request": total / n,
        "allocations_per_request": allocs / n,
        "dump": str(measured[0]),
    }


def profile_strace(out: Path, n: int, calls: int, body: bytes) -> dict:
    if shutil.which("strace") is None:
        raise bench.Fail("strace is not installed")
    with tempfile.TemporaryDirectory(prefix="toolwire-profile-") as w:
        work = Path(w)
        tw, port, _log = start(work, [])
        send(port, body, 100, calls)
        summary = out / "strace-summary.txt"
        st = subprocess.Popen(["strace", "-c", "-f", "-o", str(summary), "-p", str(tw.pid)], stderr=subprocess.DEVNULL)
        bench.PROCS.append(("strace", st))
        time.sleep(1)  # attached to every thread
        send(port, body, n, calls)
        st.send_signal(signal.SIGINT)
        st.wait(timeout=30)
        for name, proc in reversed(bench.PROCS):
            bench.stop(proc, name)
        bench.PROCS.clear()
    total = 0
    by_name: dict[str, float] = {}
    for line in summary.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != "total":
            count = int(parts[3])
            by_name[parts[-1]] = count / n
            total += count
    return {"requests": n, "calls_per_request": calls, "syscalls_per_request": total / n, "by_name": by_name}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", nargs="?", default="both", choices=["callgrind", "strace", "both"])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=1)
    ap.add_argument("--out", default=str(bench.TARGET / "bench" / "profile"))
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("callgrind.out*"):
        old.unlink()
    body = json.dumps(bench.completion("bench_echo", a.calls)).encode()
    result: dict = {"commit": bench.git_commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    try:
        if a.mode in ("callgrind", "both"):
            result["callgrind"] = profile_callgrind(out, a.requests, a.calls, body)
        if a.mode in ("strace", "both"):
            result["strace"] = profile_strace(out, a.requests, a.calls, body)
    except bench.Fail as e:
        print(f"profile: FAILED: {e}", file=sys.stderr)
        return 1
    finally:
        for name, proc in reversed(bench.PROCS):
            bench.stop(proc, name)
    (out / "profile.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"profile: details in {out}/ (top-self.txt, annotate-inclusive.txt, strace-summary.txt)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
