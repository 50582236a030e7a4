#!/usr/bin/env python3
"""Regenerates the hand-picked seed files of fuzz/corpus/ from the repo's fixtures.

Seeds are named `seed-*`; files the fuzzer found are named by content hash (libFuzzer's
default) and are never touched here. Run from the repository root: python3 fuzz/seeds.py
"""
import json
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def put(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / f"seed-{name}").write_bytes(data)


# parse_completion and parse_request_body: every provider fixture body.
for body in sorted((ROOT / "tests/fixtures/providers").glob("*/*.json")):
    if body.name.endswith(".expected.json"):
        continue
    provider = body.parent.name
    raw = body.read_bytes()
    put("parse_completion", f"{provider}-{body.name}", raw)
    completion = json.loads(raw)
    put("parse_request_body", f"{provider}-{body.name}",
        json.dumps({"provider": provider, "completion": completion}, indent=1))
    put("parse_request_body", f"detect-{provider}-{body.name}",
        json.dumps({"completion": completion, "state": {"user_id": "u1"}, "options": {}}))

for name, text in {
    "empty": "",
    "blank": " \n\t ",
    "truncated": '{"provider": "openai", "completion": {"choices": [',
    "not-object": "[1, 2, 3]",
    "unknown-field": '{"completion": {}, "extra": 1}',
    "bad-state": '{"completion": {"choices": []}, "state": [1]}',
    "unknown-provider": '{"provider": "nope", "completion": {"choices": []}}',
    "mismatch": '{"provider": "anthropic", "completion": {"choices": []}}',
    "deep": "[" * 200 + "]" * 200,
    "invalid-utf8": b'{"completion": "\xff\xfe"}',
    "dup-ids": json.dumps({"completion": {"choices": [{"message": {"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "a", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
        "finish_reason": "tool_calls"}]}}),
}.items():
    put("parse_request_body", name, text)

# load_tools_config: the shipped and test tool files (their format comes from the target,
# which reads every input as TOML, YAML and JSON).
for d in ["tools.d", "tests/fixtures/good_tools", "tests/fixtures/bad_tools"]:
    for f in sorted((ROOT / d).iterdir()):
        if f.is_file():
            put("load_tools_config", f"{d.replace('/', '_')}-{f.name}", f.read_bytes())

# validate_args: argument strings as a model sends them (see targets/validate_args.rs).
for name, text in {
    "pattern-ok": '{"code": "ABC-1234", "slug": "a-b", "tags": ["x", "y"], "extra": {"x-a": 1}}',
    "pattern-bad": '{"code": "abc", "slug": "A B", "tags": ["x", "x"], "extra": {"y": "z"}, "more": 1}',
    "nested-ok": '{"order": {"id": 1, "lines": [{"sku": "s", "qty": 1.5, "meta": {"a": null}}],'
                 ' "ship_to": {"zip": "12345", "country": "US"}}, "note": null}',
    "nested-bad": '{"order": {"id": 0, "lines": [{"qty": -1}], "ship_to": {"zip": "1"}, "x": 1}}',
    "enums": '{"unit": "km", "mode": {"k": "v"}, "version": 2, "pct": 101, "flag": "yes", "status": null}',
    "refs": '{"tree": {"value": 1, "children": [{"value": 2, "children": [{"value": "x"}]}]},'
            ' "owner": {"name": "a", "boss": {"name": 1}}}',
    "refs-null-optional": '{"tree": {"value": 1}, "owner": null}',
    "combinators": '{"target": "a@b.c", "shape": {"r": 1, "w": 2, "h": 3}, "both": "nope", "kind": "circle"}',
    "null-optionals": '{"slug": null, "note": null, "unit": null, "target": null, "status": null}',
    "deep": '{"a": ' + "[" * 70 + "]" * 70 + "}",
    "blank": "   ",
    "truncated": '{"code": "AB',
    "array": "[1, 2]",
    "string": '"x"',
}.items():
    put("validate_args", name, text)

# parse_retry_after: header values.
for name, text in {
    "seconds": "120",
    "zero": "0",
    "max": "604800",
    "over-max": "604801",
    "huge": "99999999999999999999999",
    "padded": "  30 ",
    "imf-fixdate": "Wed, 21 Oct 2015 07:28:00 GMT",
    "rfc850": "Sunday, 06-Nov-94 08:49:37 GMT",
    "asctime": "Sun Nov  6 08:49:37 1994",
    "future": "Fri, 01 Jan 2100 00:00:00 GMT",
    "negative": "-5",
    "decimal": "1.5",
    "garbage": "soon, please",
    "empty": "",
}.items():
    put("parse_retry_after", name, text)
