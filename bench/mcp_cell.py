"""The MCP cell of `make bench` (docs/bench.md): what toolwire adds to a call of an MCP tool.

    TOOLWIRE_BIN=target/release/toolwire .cache/sdk-venv/bin/python bench/mcp_cell.py

One MCP server (tests/fixtures/mcp/fixture_server.py over stdio, its `echo` tool; the official
Python SDK) is called two ways, one call at a time, interleaved in rounds so that noise hits both:

- direct: the official Python client (`mcp.Client`) holding a session with its own copy of the
  server, calling `echo` — what an agent would do without toolwire;
- through toolwire: a keep-alive HTTP client posting an OpenAI Chat completion with one
  `fx__echo` call to `POST /v1/execute` of a release toolwire that has the same server declared
  as `[[mcp]]` (stdio, spawned and kept by toolwire).

Each round measures BENCH_MCP_CALLS sequential calls per side (after a warm-up); the cell
reports the medians of the per-call latencies, toolwire's overhead (ms) and the ratio
toolwire/direct. Only 127.0.0.1; every process is stopped at the end.
"""

import asyncio
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as bench  # noqa: E402  (the out-of-process driver's helpers: free port, completion)

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "tests/fixtures/mcp/fixture_server.py"
CALLS = int(os.environ.get("BENCH_MCP_CALLS", "300"))
ROUNDS = int(os.environ.get("BENCH_RUNS", "3"))
WARMUP = 30


def completion(i: int) -> bytes:
    """The /v1/execute body of request `i`: one `fx__echo` call with a new call id."""
    body = bench.completion("fx__echo", 1, arguments='{"text": "hello"}', id_prefix=f"call_mcp_{i}")
    return json.dumps(body).encode()


async def direct_round(client: Client, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = await client.call_tool("echo", {"text": "hello"})
        out.append(time.perf_counter() - t)
        if r.is_error or r.content[0].text != "hello":
            raise SystemExit(f"bench-mcp: unexpected direct answer {r}")
    return out


def toolwire_round(conn: http.client.HTTPConnection, n: int, start: int) -> list[float]:
    out = []
    for i in range(start, start + n):
        body = completion(i)  # a new call id each time: replay never answers for the tool
        t = time.perf_counter()
        conn.request("POST", "/v1/execute", body=body, headers={"content-type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        out.append(time.perf_counter() - t)
        if resp.status != 200:
            raise SystemExit(f"bench-mcp: toolwire answered {resp.status}: {raw[:300]!r}")
        result = json.loads(raw)["results"][0]
        if result.get("output") != "hello":
            raise SystemExit(f"bench-mcp: unexpected result {result}")
    return out


def wait_ready(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"bench-mcp: toolwire exited with {proc.returncode}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/readyz")
            r = c.getresponse()
            body = json.loads(r.read())
            if r.status == 200 and any(s.get("state") == "connected" for s in body.get("mcp", [])):
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise SystemExit("bench-mcp: toolwire did not become ready with its MCP server")


async def main() -> int:
    binary = os.environ.get("TOOLWIRE_BIN", str(ROOT / "target/release/toolwire"))
    python = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        tools = Path(tmp) / "tools.d"
        tools.mkdir()
        (tools / "mcp.toml").write_text(
            f'[[mcp]]\nname = "fx"\ncommand = [{json.dumps(python)}, {json.dumps(str(SERVER))}, "stdio"]\n'
            'include = ["echo"]\nidempotent = true\n'
        )
        config = Path(tmp) / "toolwire.toml"
        config.write_text('log = "warn"\n')
        port = bench.free_port()
        proc = subprocess.Popen(
            [binary, "serve", "--config", str(config), "--tools-dir", str(tools), "--listen", f"127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_ready(port, proc)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            params = StdioServerParameters(command=python, args=[str(SERVER), "stdio"])
            async with Client(params, read_timeout_seconds=30.0, cache=None) as client:
                await direct_round(client, WARMUP)
                toolwire_round(conn, WARMUP, 0)
                direct, through = [], []
                for r in range(ROUNDS):
                    direct += await direct_round(client, CALLS)
                    through += toolwire_round(conn, CALLS, WARMUP + r * CALLS)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    d = statistics.median(direct) * 1000
    t = statistics.median(through) * 1000
    result = {
        "calls_per_side": len(direct),
        "direct_p50_ms": round(d, 3),
        "toolwire_p50_ms": round(t, 3),
        "overhead_ms": round(t - d, 3),
        "ratio": round(t / d, 3),
    }
    print("MCP tool, one call at a time (p50 per call):")
    print(f"  direct (Python mcp client, stdio)          {d:8.3f} ms")
    print(f"  through toolwire (/v1/execute -> [[mcp]])  {t:8.3f} ms")
    print(f"  overhead {t - d:+.3f} ms, ratio toolwire/direct {t / d:.2f}x ({len(direct)} calls per side)")
    out = os.environ.get("BENCH_MCP_OUT")
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
