#!/usr/bin/env python3
"""Feeds raw SSE text through an official SDK's stream accumulator and prints the final body.

Used by tests/it/stream_in.rs (`sdk_accumulators_agree`) to compare toolwire's assembly with the
SDKs' own: stdin is a JSON list of {"provider": "openai_chat" | "openai_responses" | "anthropic",
"sse": TEXT}; stdout is the list of the SDK's final objects as JSON (OpenAI `ChatCompletionStreamState` via
`chat.completions.stream(...).get_final_completion()`, the Responses stream's
`get_final_response()`, Anthropic `MessageStream.get_final_message()`). The HTTP layer is an
httpx.MockTransport answering the text: no network.
"""
import json
import sys

try:  # the SDKs moved to `httpx2`; older ones use `httpx`
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx


def transport(sse: str) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sse.encode("utf-8"))

    return httpx.MockTransport(handler)


def main() -> None:
    json.dump([accumulate(r["provider"], r["sse"]) for r in json.load(sys.stdin)], sys.stdout, ensure_ascii=False)


def accumulate(provider: str, sse: str) -> dict:
    http = httpx.Client(transport=transport(sse))
    if provider == "anthropic":
        import anthropic

        client = anthropic.Anthropic(api_key="test", base_url="http://127.0.0.1:9", http_client=http, max_retries=0)
        with client.messages.stream(model="m", max_tokens=16, messages=[{"role": "user", "content": "x"}]) as s:
            final = s.get_final_message()
        out = final.model_dump(mode="json", exclude_unset=True)
    else:
        import openai

        client = openai.OpenAI(api_key="test", base_url="http://127.0.0.1:9", http_client=http, max_retries=0)
        if provider == "openai_chat":
            with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "x"}]) as s:
                final = s.get_final_completion()
        else:
            with client.responses.stream(model="m", input="x") as s:
                final = s.get_final_response()
        out = final.model_dump(mode="json", exclude_unset=True)
    return out


if __name__ == "__main__":
    main()
