#!/usr/bin/env python3
"""A complete agent loop against toolwire — Python 3, standard library only.

    python3 examples/python/agent_loop.py [--provider openai_chat|anthropic|gemini]
                                          [--url http://127.0.0.1:8080] [--require-ok]

What it does, once per model turn:

    1. GET  /v1/schemas?provider=X   -> the provider-native `tools` array (fetched once)
    2. call the model                -> a raw completion, exactly as the provider returns it
    3. POST /v1/execute              -> {finished, assistant, messages, results, ...}
    4. conversation.append(assistant); conversation.extend(messages)
    5. stop when `finished` is true, else go to 2

The "model" here is ScriptedModel: a stand-in that returns real-shaped completions so this file
runs with no API key and no network except toolwire. To use it as a template, replace
`ScriptedModel.complete(request)` with a real call that POSTs `request` (built by
`build_model_request`) to your provider and returns the parsed JSON body, untouched. Nothing else
in the loop changes: toolwire reads the raw completion and answers in the provider's own format.

Exit code 0 on success; non-zero with a message on stderr on any failure.
"""

import argparse
import json
import os
import sys
import urllib.error
import urllib.request

PROVIDERS = ("openai_chat", "anthropic", "gemini")
USER_PROMPT = "What's the weather in Paris right now? Also, how many miles is 5 km?"
# Hidden context for tool backends (toolwire passes it only to tools that ask for it, never to
# the model). Put your user/session/tenant ids here.
STATE = {"user_id": "u-42"}
MAX_TURNS = 8  # a real agent should always bound its loop too
HTTP_TIMEOUT_S = 30


class AgentError(Exception):
    """Any failure of the example: printed as `error: ...` and exit code 1."""


# --------------------------------------------------------------------------------------------
# toolwire client: two endpoints, plain JSON over HTTP.
# --------------------------------------------------------------------------------------------
class Toolwire:
    def __init__(self, base_url, token=None):
        self.base_url = base_url.rstrip("/")
        # Only needed when the server has [auth] tokens configured.
        self.token = token

    def _request(self, method, path, body=None):
        url = self.base_url + path
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as e:
            # Request errors use one shape: {"error": {"code", "message", "details"}}.
            # (A failed *tool* is never an HTTP error: it is a result inside a 200 answer.)
            raw = e.read().decode(errors="replace")
            try:
                err = json.loads(raw)["error"]
                detail = f"{err.get('code')}: {err.get('message')}"
                if err.get("details"):
                    detail += " " + json.dumps(err["details"])
            except (ValueError, KeyError, TypeError):
                detail = raw[:500]
            raise AgentError(f"{method} {url} -> HTTP {e.code}: {detail}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise AgentError(
                f"cannot reach toolwire at {self.base_url} ({reason}).\n"
                "       Start it with `make run` in the repository root, or pass --url / set TOOLWIRE_URL."
            ) from None

    def schemas(self, provider):
        """The provider-native `tools` array: put it in the model request as is."""
        return self._request("GET", f"/v1/schemas?provider={provider}")

    def execute(self, provider, completion, state):
        """Run every tool call of a raw completion; answer in the provider's own format."""
        return self._request(
            "POST", "/v1/execute", {"provider": provider, "completion": completion, "state": state}
        )

    def execute_stream(self, provider, stream_text, state):
        """The same for a streamed model call: send the raw SSE text as `completion_stream`
        (or the list of parsed events); toolwire assembles it first (docs/streaming.md)."""
        return self._request(
            "POST", "/v1/execute",
            {"provider": provider, "completion_stream": stream_text, "state": state},
        )


# --------------------------------------------------------------------------------------------
# Provider-specific glue: only the *request* you send to the model differs per provider.
# The conversation items themselves come from toolwire (`assistant`, `messages`) untouched.
# --------------------------------------------------------------------------------------------
def first_user_message(provider, text):
    if provider == "gemini":
        return {"role": "user", "parts": [{"text": text}]}
    return {"role": "user", "content": text}  # OpenAI Chat and Anthropic


def build_model_request(provider, conversation, tools):
    """The body you would POST to the provider. Model names are placeholders."""
    if provider == "openai_chat":  # POST https://api.openai.com/v1/chat/completions
        return {"model": "gpt-4o", "messages": conversation, "tools": tools}
    if provider == "anthropic":  # POST https://api.anthropic.com/v1/messages
        return {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": conversation, "tools": tools}
    if provider == "gemini":  # POST .../v1beta/models/gemini-2.5-flash:generateContent
        return {"contents": conversation, "tools": tools}
    raise AgentError(f"unsupported provider {provider!r}")


def conversation_of(provider, request):
    return request["contents"] if provider == "gemini" else request["messages"]


def tool_names_in(provider, tools):
    """Names declared in a provider-native `tools` array (to check what the model is offered)."""
    if provider == "openai_chat":
        return [t["function"]["name"] for t in tools]
    if provider == "anthropic":
        return [t["name"] for t in tools]
    if provider == "gemini":
        return [d["name"] for group in tools for d in group.get("functionDeclarations", [])]
    raise AgentError(f"unsupported provider {provider!r}")


# --------------------------------------------------------------------------------------------
# ScriptedModel: REPLACE THIS CLASS WITH YOUR REAL CLIENT CALL, e.g.
#     resp = urllib.request.urlopen(Request(PROVIDER_URL, json.dumps(request).encode(), headers))
#     return json.load(resp)   # the raw body, unmodified
# --------------------------------------------------------------------------------------------
class ScriptedModel:
    """Answers like a model would, in the provider's real response shape.

    Turn 1: asks for get_weather(Paris) and convert_units(5 km -> mi) in parallel.
    Turn 2: reads the tool results from the END of the conversation it was sent — checking that
    the agent appended toolwire's `assistant` and `messages` in the right place and shape — and
    answers in text, quoting the temperature.
    """

    def __init__(self, provider):
        self.provider = provider
        self.turn = 0

    def complete(self, request):
        self.turn += 1
        provider = self.provider
        offered = tool_names_in(provider, request["tools"])
        for name in ("get_weather", "convert_units"):
            if name not in offered:
                raise AgentError(f"model: tool {name!r} is not in the request's tools: {offered}")
        conversation = conversation_of(provider, request)
        if self.turn == 1:
            return CALLS[provider]()
        weather, conversion = TOOL_RESULTS_READER[provider](conversation)
        return FINAL[provider](final_answer_text(weather, conversion))


def expect(cond, what, got):
    """Fail loudly when the conversation is not shaped as the provider requires."""
    if not cond:
        raise AgentError(f"conversation check failed: {what}\n       got: {json.dumps(got)[:800]}")


def compact(value):
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# Turn-1 completions: real response bodies, shaped exactly like the providers' APIs.
def openai_chat_calls():
    return {
        "id": "chatcmpl-ex0001",
        "object": "chat.completion",
        "created": 1727346166,
        "model": "gpt-4o-2024-08-06",
        "choices": [{
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    # `arguments` is a JSON *string* in OpenAI Chat.
                    {"id": "call_weather01", "type": "function",
                     "function": {"name": "get_weather", "arguments": compact({"city": "Paris"})}},
                    {"id": "call_units02", "type": "function",
                     "function": {"name": "convert_units",
                                  "arguments": compact({"value": 5, "from": "km", "to": "mi"})}},
                ],
                "refusal": None,
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }],
        "usage": {"prompt_tokens": 149, "completion_tokens": 60, "total_tokens": 209},
    }


def anthropic_calls():
    return {
        "id": "msg_ex0001",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": [
            # With extended thinking on, the signed thinking block must go back unchanged:
            # toolwire keeps it in `assistant`, and turn 2 checks that it survived.
            {"type": "thinking", "thinking": "Weather lookup plus a unit conversion.",
             "signature": "EqQBCkYIBhgCIkB-example-signature"},
            {"type": "text", "text": "I'll check the weather in Paris and convert the distance."},
            {"type": "tool_use", "id": "toolu_01Weather", "name": "get_weather", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_02Units", "name": "convert_units",
             "input": {"value": 5, "from": "km", "to": "mi"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 700, "output_tokens": 120},
    }


def gemini_calls():
    return {
        "candidates": [{
            "content": {
                "role": "model",
                "parts": [
                    # Gemini 3 signs the first call part; it must be sent back in place.
                    {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "fc-w01"},
                     "thoughtSignature": "CiIBVKhc7example-thought-signature"},
                    {"functionCall": {"name": "convert_units",
                                      "args": {"value": 5, "from": "km", "to": "mi"}, "id": "fc-u02"}},
                ],
            },
            "finishReason": "STOP",  # Gemini says STOP even with calls pending: trust `finished`
            "index": 0,
        }],
        "usageMetadata": {"promptTokenCount": 180, "candidatesTokenCount": 62, "totalTokenCount": 242},
        "modelVersion": "gemini-3-pro-preview",
        "responseId": "ex0001",
    }


CALLS = {"openai_chat": openai_chat_calls, "anthropic": anthropic_calls, "gemini": gemini_calls}


# Turn-2 readers: check the tail of the conversation, return (weather, conversion) tool outputs.
# Each output is ("ok", value) or ("error", message) — a failed tool is a result the model reads.
def parse_tool_text(text):
    if text.startswith("Error"):  # toolwire renders failures as "Error (kind): message"
        return ("error", text)
    try:
        return ("ok", json.loads(text))
    except ValueError:
        return ("ok", text)


def read_openai_chat(conv):
    # Expected tail: assistant{tool_calls:[a, b]}, tool{a}, tool{b}
    expect(len(conv) >= 4, "conversation has user, assistant and two tool messages", conv)
    assistant, tools = conv[-3], conv[-2:]
    expect(assistant.get("role") == "assistant" and len(assistant.get("tool_calls") or []) == 2,
           "third-to-last message is the assistant turn with 2 tool_calls", assistant)
    ids = [c["id"] for c in assistant["tool_calls"]]
    expect(all(m.get("role") == "tool" for m in tools), "last two messages have role 'tool'", tools)
    expect([m.get("tool_call_id") for m in tools] == ids,
           "tool messages answer the tool_calls in order (tool_call_id)", tools)
    expect(all(isinstance(m.get("content"), str) for m in tools), "tool message content is a string", tools)
    return parse_tool_text(tools[0]["content"]), parse_tool_text(tools[1]["content"])


def read_anthropic(conv):
    # Expected tail: assistant{content:[thinking, text, tool_use a, tool_use b]},
    #                user{content:[tool_result a, tool_result b]}   (ONE user message)
    expect(len(conv) >= 3, "conversation has user, assistant and tool-result messages", conv)
    assistant, user = conv[-2], conv[-1]
    expect(assistant.get("role") == "assistant", "second-to-last message is the assistant turn", assistant)
    blocks = assistant.get("content") or []
    expect(any(b.get("type") == "thinking" and b.get("signature") for b in blocks),
           "the signed thinking block was kept in the assistant turn", assistant)
    ids = [b["id"] for b in blocks if b.get("type") == "tool_use"]
    expect(len(ids) == 2, "assistant turn has 2 tool_use blocks", assistant)
    results = user.get("content") if user.get("role") == "user" else None
    expect(isinstance(results, list) and all(b.get("type") == "tool_result" for b in results),
           "last message is ONE user message made of tool_result blocks", user)
    expect([b.get("tool_use_id") for b in results] == ids,
           "tool_result blocks answer the tool_use blocks in order (tool_use_id)", user)

    def one(b):
        text = b["content"] if isinstance(b["content"], str) else "".join(
            p.get("text", "") for p in b["content"])
        return ("error", text) if b.get("is_error") else parse_tool_text(text)

    return one(results[0]), one(results[1])


def read_gemini(conv):
    # Expected tail: model{parts:[functionCall a (+thoughtSignature), functionCall b]},
    #                user{parts:[functionResponse a, functionResponse b]}   (ONE user content)
    expect(len(conv) >= 3, "contents have user, model and function-response turns", conv)
    model, user = conv[-2], conv[-1]
    expect(model.get("role") == "model", "second-to-last content is the model turn", model)
    calls = [p for p in model.get("parts", []) if "functionCall" in p]
    expect(len(calls) == 2, "model turn has 2 functionCall parts", model)
    expect(bool(calls[0].get("thoughtSignature")), "thoughtSignature kept on the first call part", model)
    expect(user.get("role") == "user" and all("functionResponse" in p for p in user.get("parts", [])),
           "last content is ONE user turn made of functionResponse parts", user)
    responses = [p["functionResponse"] for p in user["parts"]]
    expect([(r.get("name"), r.get("id")) for r in responses]
           == [(c["functionCall"]["name"], c["functionCall"].get("id")) for c in calls],
           "functionResponse parts answer the calls in order (name, id)", user)

    def one(r):
        resp = r.get("response") or {}
        return ("error", resp["error"]) if "error" in resp else ("ok", resp.get("output"))

    return one(responses[0]), one(responses[1])


TOOL_RESULTS_READER = {"openai_chat": read_openai_chat, "anthropic": read_anthropic, "gemini": read_gemini}


def final_answer_text(weather, conversion):
    kind, w = weather
    if kind == "ok" and isinstance(w, dict) and "temp_c" in w:
        text = f"It is {w['temp_c']} °C in Paris right now ({w.get('conditions', 'unknown conditions')})."
    else:
        text = f"I couldn't get the weather for Paris: {w}"
    kind, c = conversion
    if kind == "ok" and isinstance(c, dict) and "value" in c:
        text += f" 5 km is {c['value']} {c.get('unit', 'mi')}."
    else:
        text += f" The unit conversion failed: {c}"
    return text


# Turn-2 completions: a plain text answer, no tool calls -> toolwire says finished=true.
def openai_chat_final(text):
    return {
        "id": "chatcmpl-ex0002", "object": "chat.completion", "created": 1727346170,
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 260, "completion_tokens": 30, "total_tokens": 290},
    }


def anthropic_final(text):
    return {
        "id": "msg_ex0002", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 900, "output_tokens": 30},
    }


def gemini_final(text):
    return {
        "candidates": [{"content": {"role": "model", "parts": [{"text": text}]},
                        "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 300, "candidatesTokenCount": 30, "totalTokenCount": 330},
        "modelVersion": "gemini-3-pro-preview",
        "responseId": "ex0002",
    }


FINAL = {"openai_chat": openai_chat_final, "anthropic": anthropic_final, "gemini": gemini_final}


# --------------------------------------------------------------------------------------------
# Printing the conversation.
# --------------------------------------------------------------------------------------------
def short(value, limit=160):
    s = value if isinstance(value, str) else compact(value)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def show(message):
    """One readable line per part of a conversation item (any of the three providers)."""
    role = message.get("role", "?")
    if "parts" in message:  # Gemini
        parts = message["parts"]
    elif isinstance(message.get("content"), list):  # Anthropic blocks
        parts = message["content"]
    else:  # OpenAI Chat
        parts = []
        if message.get("content") is not None:
            parts.append({"text": message["content"]} if role != "tool"
                         else {"tool_output": message["content"], "id": message.get("tool_call_id")})
        for c in message.get("tool_calls") or []:
            parts.append({"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                          "input": c["function"]["arguments"]})
    for p in parts:
        if "functionCall" in p:
            fc = p["functionCall"]
            line = f"call   {fc['name']}({short(fc.get('args', {}))}) id={fc.get('id')}"
        elif "functionResponse" in p:
            fr = p["functionResponse"]
            line = f"result {fr['name']} id={fr.get('id')}: {short(fr.get('response'))}"
        elif p.get("type") == "tool_use":
            line = f"call   {p['name']}({short(p['input'])}) id={p['id']}"
        elif p.get("type") == "tool_result":
            err = " [is_error]" if p.get("is_error") else ""
            line = f"result id={p['tool_use_id']}{err}: {short(p['content'])}"
        elif "tool_output" in p:
            line = f"result id={p['id']}: {short(p['tool_output'])}"
        elif p.get("type") == "thinking":
            line = f"(thinking, signed) {short(p.get('thinking', ''), 80)}"
        elif "text" in p:
            line = f"text   {p['text']}"
        else:
            line = short(p)
        print(f"  [{role:9}] {line}")


# --------------------------------------------------------------------------------------------
# --stream: what the provider's streaming API sends for a completion (the scripted model "streams"
# its body; a real agent has this text from its HTTP client). Strings are cut in two so that
# toolwire really has fragments to assemble.
# --------------------------------------------------------------------------------------------
STREAMABLE = ("openai_chat", "anthropic")


def halves(text):
    mid = len(text) // 2
    return [text[:mid], text[mid:]]


def to_sse(provider, completion):
    if provider == "openai_chat":
        choice = completion["choices"][0]
        msg = choice["message"]
        head = {k: v for k, v in completion.items() if k not in ("choices", "object")}
        head["object"] = "chat.completion.chunk"
        extra = {k: v for k, v in choice.items() if k not in ("index", "message", "finish_reason")}

        def chunk(delta, finish=None):
            return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, **extra}]}

        first = {k: v for k, v in msg.items() if k not in ("content", "tool_calls")}
        first["content"] = None if msg.get("content") is None else ""
        events = [chunk(first)]
        for piece in halves(msg.get("content") or ""):
            if piece:
                events.append(chunk({"content": piece}))
        for i, call in enumerate(msg.get("tool_calls") or []):
            a, b = halves(call["function"]["arguments"])
            events.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                                 "function": {"name": call["function"]["name"], "arguments": a}}]}))
            events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": b}}]}))
        events.append(chunk({}, choice["finish_reason"]))
        return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    # anthropic
    events = [{"type": "message_start", "message": {**completion, "content": [], "stop_reason": None}}]
    for i, block in enumerate(completion["content"]):
        if block["type"] == "text":
            start, deltas = {"type": "text", "text": ""}, [
                {"type": "text_delta", "text": t} for t in halves(block["text"])]
        elif block["type"] == "tool_use":
            start = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": t}
                      for t in ["", *halves(json.dumps(block["input"]))]]
        else:
            start, deltas = block, []
        events.append({"type": "content_block_start", "index": i, "content_block": start})
        events += [{"type": "content_block_delta", "index": i, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": i})
    events.append({"type": "message_delta", "delta": {"stop_reason": completion["stop_reason"]},
                   "usage": {"output_tokens": completion["usage"]["output_tokens"]}})
    events.append({"type": "message_stop"})
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


# --------------------------------------------------------------------------------------------
# The agent loop.
# --------------------------------------------------------------------------------------------
def run(provider, url, require_ok, stream=False):
    toolwire = Toolwire(url, token=os.environ.get("TOOLWIRE_TOKEN"))
    model = ScriptedModel(provider)  # <- replace with your real model client

    tools = toolwire.schemas(provider)
    print(f"toolwire {url}  provider={provider}")
    print(f"tools offered to the model: {', '.join(tool_names_in(provider, tools))}")
    conversation = [first_user_message(provider, USER_PROMPT)]
    print("\n--- user")
    show(conversation[0])

    executed = []  # every tool result toolwire returned, for the final check
    for turn in range(1, MAX_TURNS + 1):
        request = build_model_request(provider, conversation, tools)
        completion = model.complete(request)  # the raw provider body, unmodified

        if stream:
            # A streamed model call: send what the stream delivered; toolwire assembles it.
            resp = toolwire.execute_stream(provider, to_sse(provider, completion), STATE)
            if resp["completion"] != completion:
                raise AgentError("the assembled completion differs from the streamed one")
        else:
            resp = toolwire.execute(provider, completion, STATE)
        # The two lines every agent needs: the model turn first, then the tool results.
        # (openai_responses: `assistant` is a list of output items -> input_items.extend(...)).
        conversation.append(resp["assistant"])
        conversation.extend(resp["messages"])

        print(f"\n--- turn {turn}: model (stop_reason={json.dumps(resp['stop_reason'])}, "
              f"finished={json.dumps(resp['finished'])})")
        show(resp["assistant"])
        if resp["results"]:
            print(f"--- turn {turn}: toolwire ran {len(resp['results'])} call(s)")
            for r in resp["results"]:
                status = "ok   " if r["ok"] else f"ERROR {r['error']['kind']}"
                print(f"    {status} {r['name']} attempts={r['attempts']} {r['duration_ms']}ms")
            print(f"--- turn {turn}: tool results appended to the conversation")
            for m in resp["messages"]:
                show(m)
        executed.extend(resp["results"])

        if resp["finished"]:
            break
    else:
        raise AgentError(f"no final answer after {MAX_TURNS} turns")

    # Sanity checks of the whole run (this is an example, so it proves what it claims).
    if not executed:
        raise AgentError("the model made no tool calls")
    failed = [r for r in executed if not r["ok"]]
    if failed and require_ok:
        raise AgentError("tool calls failed (--require-ok): " + "; ".join(
            f"{r['name']}: {r['error']['kind']}: {r['error']['message']}" for r in failed))
    weather = next(r for r in executed if r["name"] == "get_weather")
    answer = json.dumps(conversation[-1], ensure_ascii=False)
    if weather["ok"]:
        temp = weather["output"]["temp_c"]
        if f"It is {temp} °C" not in answer:
            raise AgentError(f"the final answer does not quote the temperature {temp} °C: {answer}")

    print(f"\nOK: {provider}: {len(conversation)} conversation items, "
          f"{len(executed)} tool call(s), {len(failed)} failed")


def main():
    parser = argparse.ArgumentParser(description="toolwire agent-loop example (scripted model)")
    parser.add_argument("--provider", choices=PROVIDERS, default="openai_chat")
    parser.add_argument("--url", default=os.environ.get("TOOLWIRE_URL", "http://127.0.0.1:8080"),
                        help="toolwire base URL (default: $TOOLWIRE_URL or http://127.0.0.1:8080)")
    parser.add_argument("--require-ok", action="store_true",
                        help="fail when any tool call returned an error result")
    parser.add_argument("--stream", action="store_true",
                        help="stream the model call: send its raw SSE text as `completion_stream` "
                             "(openai_chat, anthropic)")
    args = parser.parse_args()
    if args.stream and args.provider not in STREAMABLE:
        parser.error(f"--stream: the scripted model streams {', '.join(STREAMABLE)}")
    try:
        run(args.provider, args.url, args.require_ok, args.stream)
    except AgentError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
