// A complete agent loop against toolwire — TypeScript, plain `fetch`, no dependencies.
//
//   node --experimental-strip-types examples/typescript/agent_loop.ts   (Node >= 22.6)
//   (Node >= 18: compile with `tsc --target es2022 --module es2022` first; see examples/README.md)
//       [--provider openai_chat|anthropic|gemini] [--url http://127.0.0.1:8080] [--require-ok] [--stream]
//
// What it does, once per model turn:
//
//   1. GET  /v1/schemas?provider=X   -> the provider-native `tools` array (fetched once)
//   2. call the model                -> a raw completion, exactly as the provider returns it
//   3. POST /v1/execute              -> {finished, assistant, messages, results, ...}
//   4. conversation.push(assistant, ...messages)
//   5. stop when `finished` is true, else go to 2
//
// The "model" here is ScriptedModel: a stand-in that returns real-shaped completions so this file
// runs with no API key and no network except toolwire. To use it as a template, replace
// `ScriptedModel.complete(request)` with a real call that POSTs `request` (built by
// `buildModelRequest`) to your provider and returns the parsed JSON body, untouched. Nothing else
// in the loop changes: toolwire reads the raw completion and answers in the provider's own format.
//
// Exit code 0 on success; non-zero with a message on stderr on any failure.

type Json = any; // provider bodies are pass-through JSON: keep them untyped and untouched
type Provider = "openai_chat" | "anthropic" | "gemini";

/** One result per tool call, in call order (see docs/api.md#post-v1execute). */
interface ToolResult {
  id: string | null;
  name: string;
  arguments: Json;
  ok: boolean;
  output?: Json;
  error?: { kind: string; message: string; retryable: boolean; details?: Json[] };
  attempts: number;
  duration_ms: number;
}

/** The answer of POST /v1/execute. */
interface ExecuteResponse {
  provider: string;
  finished: boolean;
  stop_reason: string | null;
  assistant: Json; // append first (openai_responses: an ARRAY of output items: extend with it)
  messages: Json[]; // append after `assistant`, every element, in order
  results: ToolResult[];
  completion?: Json; // streamed input only: the assembled non-streamed body
  stream_warnings?: string[]; // streamed input only: what the assembly skipped or repaired
}

/** A tool output as the model sees it: ["ok", value] or ["error", message]. */
type Outcome = ["ok" | "error", Json];

const PROVIDERS: Provider[] = ["openai_chat", "anthropic", "gemini"];
const USER_PROMPT = "What's the weather in Paris right now? Also, how many miles is 5 km?";
// Hidden context for tool backends (toolwire passes it only to tools that ask for it, never to
// the model). Put your user/session/tenant ids here.
const STATE = { user_id: "u-42" };
const MAX_TURNS = 8; // a real agent should always bound its loop too
const HTTP_TIMEOUT_MS = 30_000;

/** Any failure of the example: printed as `error: ...` and exit code 1. */
class AgentError extends Error {}

// -------------------------------------------------------------------------------------------
// toolwire client: two endpoints, plain JSON over HTTP.
// -------------------------------------------------------------------------------------------
class Toolwire {
  baseUrl: string;
  token: string | undefined;

  constructor(baseUrl: string, token?: string) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.token = token; // only needed when the server has [auth] tokens configured
  }

  async request(method: string, path: string, body?: Json): Promise<Json> {
    const url = this.baseUrl + path;
    const headers: Record<string, string> = { Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (this.token) headers["Authorization"] = `Bearer ${this.token}`;
    let resp: Response;
    try {
      resp = await fetch(url, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(HTTP_TIMEOUT_MS),
      });
    } catch (e: any) {
      const reason = e?.cause?.code ?? e?.cause?.message ?? e?.message ?? String(e);
      throw new AgentError(
        `cannot reach toolwire at ${this.baseUrl} (${reason}).\n` +
          "       Start it with `make run` in the repository root, or pass --url / set TOOLWIRE_URL.",
      );
    }
    const raw = await resp.text();
    if (!resp.ok) {
      // Request errors use one shape: {"error": {"code", "message", "details"}}.
      // (A failed *tool* is never an HTTP error: it is a result inside a 200 answer.)
      let detail = raw.slice(0, 500);
      try {
        const err = JSON.parse(raw).error;
        detail = `${err.code}: ${err.message}` + (err.details?.length ? " " + JSON.stringify(err.details) : "");
      } catch {
        // not our error shape: keep the raw text
      }
      throw new AgentError(`${method} ${url} -> HTTP ${resp.status}: ${detail}`);
    }
    return JSON.parse(raw);
  }

  /** The provider-native `tools` array: put it in the model request as is. */
  schemas(provider: Provider): Promise<Json[]> {
    return this.request("GET", `/v1/schemas?provider=${provider}`);
  }

  /** Run every tool call of a raw completion; answer in the provider's own format. */
  execute(provider: Provider, completion: Json, state: Json): Promise<ExecuteResponse> {
    return this.request("POST", "/v1/execute", { provider, completion, state });
  }

  /** The same for a streamed model call: send the raw SSE text as `completion_stream` (or the
   *  array of parsed events); toolwire assembles it first (docs/streaming.md). */
  executeStream(provider: Provider, streamText: string, state: Json): Promise<ExecuteResponse> {
    return this.request("POST", "/v1/execute", { provider, completion_stream: streamText, state });
  }
}

// -------------------------------------------------------------------------------------------
// Provider-specific glue: only the *request* you send to the model differs per provider.
// The conversation items themselves come from toolwire (`assistant`, `messages`) untouched.
// -------------------------------------------------------------------------------------------
function firstUserMessage(provider: Provider, text: string): Json {
  if (provider === "gemini") return { role: "user", parts: [{ text }] };
  return { role: "user", content: text }; // OpenAI Chat and Anthropic
}

/** The body you would POST to the provider. Model names are placeholders. */
function buildModelRequest(provider: Provider, conversation: Json[], tools: Json[]): Json {
  switch (provider) {
    case "openai_chat": // POST https://api.openai.com/v1/chat/completions
      return { model: "gpt-4o", messages: conversation, tools };
    case "anthropic": // POST https://api.anthropic.com/v1/messages
      return { model: "claude-sonnet-4-5", max_tokens: 1024, messages: conversation, tools };
    case "gemini": // POST .../v1beta/models/gemini-2.5-flash:generateContent
      return { contents: conversation, tools };
    default:
      throw new AgentError(`unsupported provider '${String(provider)}'`);
  }
}

function conversationOf(provider: Provider, request: Json): Json[] {
  return provider === "gemini" ? request.contents : request.messages;
}

/** Names declared in a provider-native `tools` array (to check what the model is offered). */
function toolNamesIn(provider: Provider, tools: Json[]): string[] {
  switch (provider) {
    case "openai_chat":
      return tools.map((t) => t.function.name);
    case "anthropic":
      return tools.map((t) => t.name);
    case "gemini":
      return tools.flatMap((group) => (group.functionDeclarations ?? []).map((d: Json) => d.name));
    default:
      throw new AgentError(`unsupported provider '${String(provider)}'`);
  }
}

// -------------------------------------------------------------------------------------------
// ScriptedModel: REPLACE THIS CLASS WITH YOUR REAL CLIENT CALL, e.g.
//     const r = await fetch(PROVIDER_URL, { method: "POST", headers, body: JSON.stringify(request) });
//     return await r.json();   // the raw body, unmodified
// -------------------------------------------------------------------------------------------
/**
 * Answers like a model would, in the provider's real response shape.
 *
 * Turn 1: asks for get_weather(Paris) and convert_units(5 km -> mi) in parallel.
 * Turn 2: reads the tool results from the END of the conversation it was sent — checking that
 * the agent appended toolwire's `assistant` and `messages` in the right place and shape — and
 * answers in text, quoting the temperature.
 */
class ScriptedModel {
  provider: Provider;
  turn = 0;

  constructor(provider: Provider) {
    this.provider = provider;
  }

  async complete(request: Json): Promise<Json> {
    this.turn += 1;
    const provider = this.provider;
    const offered = toolNamesIn(provider, request.tools);
    for (const name of ["get_weather", "convert_units"]) {
      if (!offered.includes(name)) {
        throw new AgentError(`model: tool '${name}' is not in the request's tools: ${offered.join(", ")}`);
      }
    }
    const conversation = conversationOf(provider, request);
    if (this.turn === 1) return CALLS[provider]();
    const [weather, conversion] = TOOL_RESULTS_READER[provider](conversation);
    return FINAL[provider](finalAnswerText(weather, conversion));
  }
}

/** Fail loudly when the conversation is not shaped as the provider requires. */
function expect(cond: boolean, what: string, got: Json): void {
  if (!cond) {
    throw new AgentError(`conversation check failed: ${what}\n       got: ${JSON.stringify(got).slice(0, 800)}`);
  }
}

// Turn-1 completions: real response bodies, shaped exactly like the providers' APIs.
function openaiChatCalls(): Json {
  return {
    id: "chatcmpl-ex0001",
    object: "chat.completion",
    created: 1727346166,
    model: "gpt-4o-2024-08-06",
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: null,
          tool_calls: [
            { id: "call_weather01", type: "function",
              function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) } },
            { id: "call_units02", type: "function",
              function: { name: "convert_units", arguments: JSON.stringify({ value: 5, from: "km", to: "mi" }) } },
          ],
          refusal: null,
        },
        logprobs: null,
        finish_reason: "tool_calls",
      },
    ],
    usage: { prompt_tokens: 149, completion_tokens: 60, total_tokens: 209 },
  };
}

function anthropicCalls(): Json {
  return {
    id: "msg_ex0001",
    type: "message",
    role: "assistant",
    model: "claude-sonnet-4-5-20250929",
    content: [
      // With extended thinking on, the signed thinking block must go back unchanged:
      // toolwire keeps it in `assistant`, and turn 2 checks that it survived.
      { type: "thinking", thinking: "Weather lookup plus a unit conversion.",
        signature: "EqQBCkYIBhgCIkB-example-signature" },
      { type: "text", text: "I'll check the weather in Paris and convert the distance." },
      { type: "tool_use", id: "toolu_01Weather", name: "get_weather", input: { city: "Paris" } },
      { type: "tool_use", id: "toolu_02Units", name: "convert_units", input: { value: 5, from: "km", to: "mi" } },
    ],
    stop_reason: "tool_use",
    stop_sequence: null,
    usage: { input_tokens: 700, output_tokens: 120 },
  };
}

function geminiCalls(): Json {
  return {
    candidates: [
      {
        content: {
          role: "model",
          parts: [
            // Gemini 3 signs the first call part; it must be sent back in place.
            { functionCall: { name: "get_weather", args: { city: "Paris" }, id: "fc-w01" },
              thoughtSignature: "CiIBVKhc7example-thought-signature" },
            { functionCall: { name: "convert_units", args: { value: 5, from: "km", to: "mi" }, id: "fc-u02" } },
          ],
        },
        finishReason: "STOP", // Gemini says STOP even with calls pending: trust `finished`
        index: 0,
      },
    ],
    usageMetadata: { promptTokenCount: 180, candidatesTokenCount: 62, totalTokenCount: 242 },
    modelVersion: "gemini-3-pro-preview",
    responseId: "ex0001",
  };
}

const CALLS: Record<Provider, () => Json> = {
  openai_chat: openaiChatCalls,
  anthropic: anthropicCalls,
  gemini: geminiCalls,
};

// Turn-2 readers: check the tail of the conversation, return [weather, conversion] tool outputs.
// Each output is ["ok", value] or ["error", message] — a failed tool is a result the model reads.
function parseToolText(text: string): Outcome {
  if (text.startsWith("Error")) return ["error", text]; // toolwire renders "Error (kind): message"
  try {
    return ["ok", JSON.parse(text)];
  } catch {
    return ["ok", text];
  }
}

function readOpenaiChat(conv: Json[]): [Outcome, Outcome] {
  // Expected tail: assistant{tool_calls:[a, b]}, tool{a}, tool{b}
  expect(conv.length >= 4, "conversation has user, assistant and two tool messages", conv);
  const assistant = conv[conv.length - 3];
  const tools = conv.slice(-2);
  expect(assistant?.role === "assistant" && (assistant.tool_calls ?? []).length === 2,
    "third-to-last message is the assistant turn with 2 tool_calls", assistant);
  const ids = assistant.tool_calls.map((c: Json) => c.id);
  expect(tools.every((m) => m?.role === "tool"), "last two messages have role 'tool'", tools);
  expect(JSON.stringify(tools.map((m) => m.tool_call_id)) === JSON.stringify(ids),
    "tool messages answer the tool_calls in order (tool_call_id)", tools);
  expect(tools.every((m) => typeof m.content === "string"), "tool message content is a string", tools);
  return [parseToolText(tools[0].content), parseToolText(tools[1].content)];
}

function readAnthropic(conv: Json[]): [Outcome, Outcome] {
  // Expected tail: assistant{content:[thinking, text, tool_use a, tool_use b]},
  //                user{content:[tool_result a, tool_result b]}   (ONE user message)
  expect(conv.length >= 3, "conversation has user, assistant and tool-result messages", conv);
  const assistant = conv[conv.length - 2];
  const user = conv[conv.length - 1];
  expect(assistant?.role === "assistant", "second-to-last message is the assistant turn", assistant);
  const blocks: Json[] = assistant.content ?? [];
  expect(blocks.some((b) => b.type === "thinking" && b.signature),
    "the signed thinking block was kept in the assistant turn", assistant);
  const ids = blocks.filter((b) => b.type === "tool_use").map((b) => b.id);
  expect(ids.length === 2, "assistant turn has 2 tool_use blocks", assistant);
  const results = user?.role === "user" ? user.content : null;
  expect(Array.isArray(results) && results.every((b: Json) => b.type === "tool_result"),
    "last message is ONE user message made of tool_result blocks", user);
  expect(JSON.stringify(results.map((b: Json) => b.tool_use_id)) === JSON.stringify(ids),
    "tool_result blocks answer the tool_use blocks in order (tool_use_id)", user);
  const one = (b: Json): Outcome => {
    const text = typeof b.content === "string" ? b.content : b.content.map((p: Json) => p.text ?? "").join("");
    return b.is_error ? ["error", text] : parseToolText(text);
  };
  return [one(results[0]), one(results[1])];
}

function readGemini(conv: Json[]): [Outcome, Outcome] {
  // Expected tail: model{parts:[functionCall a (+thoughtSignature), functionCall b]},
  //                user{parts:[functionResponse a, functionResponse b]}   (ONE user content)
  expect(conv.length >= 3, "contents have user, model and function-response turns", conv);
  const model = conv[conv.length - 2];
  const user = conv[conv.length - 1];
  expect(model?.role === "model", "second-to-last content is the model turn", model);
  const calls: Json[] = (model.parts ?? []).filter((p: Json) => "functionCall" in p);
  expect(calls.length === 2, "model turn has 2 functionCall parts", model);
  expect(Boolean(calls[0].thoughtSignature), "thoughtSignature kept on the first call part", model);
  expect(user?.role === "user" && (user.parts ?? []).every((p: Json) => "functionResponse" in p),
    "last content is ONE user turn made of functionResponse parts", user);
  const responses: Json[] = user.parts.map((p: Json) => p.functionResponse);
  expect(JSON.stringify(responses.map((r) => [r.name, r.id ?? null])) ===
      JSON.stringify(calls.map((c) => [c.functionCall.name, c.functionCall.id ?? null])),
    "functionResponse parts answer the calls in order (name, id)", user);
  const one = (r: Json): Outcome => {
    const resp = r.response ?? {};
    return "error" in resp ? ["error", resp.error] : ["ok", resp.output];
  };
  return [one(responses[0]), one(responses[1])];
}

const TOOL_RESULTS_READER: Record<Provider, (conv: Json[]) => [Outcome, Outcome]> = {
  openai_chat: readOpenaiChat,
  anthropic: readAnthropic,
  gemini: readGemini,
};

function finalAnswerText(weather: Outcome, conversion: Outcome): string {
  let text: string;
  const [wk, w] = weather;
  if (wk === "ok" && w && typeof w === "object" && "temp_c" in w) {
    text = `It is ${w.temp_c} °C in Paris right now (${w.conditions ?? "unknown conditions"}).`;
  } else {
    text = `I couldn't get the weather for Paris: ${typeof w === "string" ? w : JSON.stringify(w)}`;
  }
  const [ck, c] = conversion;
  if (ck === "ok" && c && typeof c === "object" && "value" in c) {
    text += ` 5 km is ${c.value} ${c.unit ?? "mi"}.`;
  } else {
    text += ` The unit conversion failed: ${typeof c === "string" ? c : JSON.stringify(c)}`;
  }
  return text;
}

// Turn-2 completions: a plain text answer, no tool calls -> toolwire says finished=true.
function openaiChatFinal(text: string): Json {
  return {
    id: "chatcmpl-ex0002", object: "chat.completion", created: 1727346170, model: "gpt-4o-2024-08-06",
    choices: [{ index: 0, message: { role: "assistant", content: text, refusal: null },
                logprobs: null, finish_reason: "stop" }],
    usage: { prompt_tokens: 260, completion_tokens: 30, total_tokens: 290 },
  };
}

function anthropicFinal(text: string): Json {
  return {
    id: "msg_ex0002", type: "message", role: "assistant", model: "claude-sonnet-4-5-20250929",
    content: [{ type: "text", text }],
    stop_reason: "end_turn", stop_sequence: null,
    usage: { input_tokens: 900, output_tokens: 30 },
  };
}

function geminiFinal(text: string): Json {
  return {
    candidates: [{ content: { role: "model", parts: [{ text }] }, finishReason: "STOP", index: 0 }],
    usageMetadata: { promptTokenCount: 300, candidatesTokenCount: 30, totalTokenCount: 330 },
    modelVersion: "gemini-3-pro-preview",
    responseId: "ex0002",
  };
}

const FINAL: Record<Provider, (text: string) => Json> = {
  openai_chat: openaiChatFinal,
  anthropic: anthropicFinal,
  gemini: geminiFinal,
};

// -------------------------------------------------------------------------------------------
// Printing the conversation.
// -------------------------------------------------------------------------------------------
function short(value: Json, limit = 160): string {
  const s = typeof value === "string" ? value : JSON.stringify(value);
  return s.length <= limit ? s : s.slice(0, limit - 1) + "…";
}

/** One readable line per part of a conversation item (any of the three providers). */
function show(message: Json): void {
  const role: string = message.role ?? "?";
  let parts: Json[];
  if ("parts" in message) {
    parts = message.parts; // Gemini
  } else if (Array.isArray(message.content)) {
    parts = message.content; // Anthropic blocks
  } else {
    parts = []; // OpenAI Chat
    if (message.content !== null && message.content !== undefined) {
      parts.push(role !== "tool" ? { text: message.content }
        : { tool_output: message.content, id: message.tool_call_id });
    }
    for (const c of message.tool_calls ?? []) {
      parts.push({ type: "tool_use", id: c.id, name: c.function.name, input: c.function.arguments });
    }
  }
  for (const p of parts) {
    let line: string;
    if ("functionCall" in p) {
      const fc = p.functionCall;
      line = `call   ${fc.name}(${short(fc.args ?? {})}) id=${fc.id}`;
    } else if ("functionResponse" in p) {
      const fr = p.functionResponse;
      line = `result ${fr.name} id=${fr.id}: ${short(fr.response)}`;
    } else if (p.type === "tool_use") {
      line = `call   ${p.name}(${short(p.input)}) id=${p.id}`;
    } else if (p.type === "tool_result") {
      line = `result id=${p.tool_use_id}${p.is_error ? " [is_error]" : ""}: ${short(p.content)}`;
    } else if ("tool_output" in p) {
      line = `result id=${p.id}: ${short(p.tool_output)}`;
    } else if (p.type === "thinking") {
      line = `(thinking, signed) ${short(p.thinking ?? "", 80)}`;
    } else if ("text" in p) {
      line = `text   ${p.text}`;
    } else {
      line = short(p);
    }
    console.log(`  [${role.padEnd(9)}] ${line}`);
  }
}

// -------------------------------------------------------------------------------------------
// --stream: what the provider's streaming API sends for a completion (the scripted model
// "streams" its body; a real agent has this text from its HTTP client). Strings are cut in two
// so that toolwire really has fragments to assemble.
// -------------------------------------------------------------------------------------------
const STREAMABLE: Provider[] = ["openai_chat", "anthropic"];

function halves(text: string): string[] {
  const chars = Array.from(text); // by code point, as Python slices
  const mid = Math.floor(chars.length / 2);
  return [chars.slice(0, mid).join(""), chars.slice(mid).join("")];
}

function toSse(provider: Provider, completion: Json): string {
  if (provider === "openai_chat") {
    const { choices, object: _object, ...rest } = completion;
    const choice = choices[0];
    const msg = choice.message;
    const head = { ...rest, object: "chat.completion.chunk" };
    const { index: _i, message: _m, finish_reason: _f, ...extra } = choice;
    const chunk = (delta: Json, finish: Json = null): Json =>
      ({ ...head, choices: [{ index: 0, delta, finish_reason: finish, ...extra }] });
    const { content: _c, tool_calls: _t, ...first } = msg;
    first.content = msg.content == null ? null : "";
    const events: Json[] = [chunk(first)];
    for (const piece of halves(msg.content ?? "")) if (piece) events.push(chunk({ content: piece }));
    (msg.tool_calls ?? []).forEach((call: Json, i: number) => {
      const [a, b] = halves(call.function.arguments);
      events.push(chunk({ tool_calls: [{ index: i, id: call.id, type: "function", function: { name: call.function.name, arguments: a } }] }));
      events.push(chunk({ tool_calls: [{ index: i, function: { arguments: b } }] }));
    });
    events.push(chunk({}, choice.finish_reason));
    return events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join("") + "data: [DONE]\n\n";
  }
  // anthropic
  const events: Json[] = [{ type: "message_start", message: { ...completion, content: [], stop_reason: null } }];
  completion.content.forEach((block: Json, i: number) => {
    let start: Json = block;
    let deltas: Json[] = [];
    if (block.type === "text") {
      start = { type: "text", text: "" };
      deltas = halves(block.text).map((t) => ({ type: "text_delta", text: t }));
    } else if (block.type === "tool_use") {
      start = { ...block, input: {} };
      deltas = ["", ...halves(JSON.stringify(block.input))].map((t) => ({ type: "input_json_delta", partial_json: t }));
    }
    events.push({ type: "content_block_start", index: i, content_block: start });
    for (const d of deltas) events.push({ type: "content_block_delta", index: i, delta: d });
    events.push({ type: "content_block_stop", index: i });
  });
  events.push({ type: "message_delta", delta: { stop_reason: completion.stop_reason }, usage: { output_tokens: completion.usage.output_tokens } });
  events.push({ type: "message_stop" });
  return events.map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join("");
}

/** JSON equality regardless of key order. */
function sameJson(a: Json, b: Json): boolean {
  const canon = (v: Json): Json =>
    Array.isArray(v) ? v.map(canon)
      : v && typeof v === "object" ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, canon(v[k])]))
      : v;
  return JSON.stringify(canon(a)) === JSON.stringify(canon(b));
}

// -------------------------------------------------------------------------------------------
// The agent loop.
// -------------------------------------------------------------------------------------------
async function run(provider: Provider, url: string, requireOk: boolean, stream = false): Promise<void> {
  const toolwire = new Toolwire(url, process.env.TOOLWIRE_TOKEN);
  const model = new ScriptedModel(provider); // <- replace with your real model client

  const tools = await toolwire.schemas(provider);
  console.log(`toolwire ${url}  provider=${provider}`);
  console.log(`tools offered to the model: ${toolNamesIn(provider, tools).join(", ")}`);
  const conversation: Json[] = [firstUserMessage(provider, USER_PROMPT)];
  console.log("\n--- user");
  show(conversation[0]);

  const executed: ToolResult[] = []; // every tool result toolwire returned, for the final check
  let finished = false;
  for (let turn = 1; turn <= MAX_TURNS && !finished; turn++) {
    const request = buildModelRequest(provider, conversation, tools);
    const completion = await model.complete(request); // the raw provider body, unmodified

    let resp: ExecuteResponse;
    if (stream) {
      // A streamed model call: send what the stream delivered; toolwire assembles it.
      resp = await toolwire.executeStream(provider, toSse(provider, completion), STATE);
      if (!sameJson(resp.completion, completion)) {
        throw new AgentError("the assembled completion differs from the streamed one");
      }
    } else {
      resp = await toolwire.execute(provider, completion, STATE);
    }
    // The two lines every agent needs: the model turn first, then the tool results.
    // (openai_responses: `assistant` is an array of output items -> inputItems.push(...assistant)).
    conversation.push(resp.assistant);
    conversation.push(...resp.messages);

    console.log(`\n--- turn ${turn}: model (stop_reason=${JSON.stringify(resp.stop_reason)}, finished=${resp.finished})`);
    show(resp.assistant);
    if (resp.results.length > 0) {
      console.log(`--- turn ${turn}: toolwire ran ${resp.results.length} call(s)`);
      for (const r of resp.results) {
        const status = r.ok ? "ok   " : `ERROR ${r.error?.kind}`;
        console.log(`    ${status} ${r.name} attempts=${r.attempts} ${r.duration_ms}ms`);
      }
      console.log(`--- turn ${turn}: tool results appended to the conversation`);
      resp.messages.forEach(show);
    }
    executed.push(...resp.results);
    finished = resp.finished;
  }
  if (!finished) throw new AgentError(`no final answer after ${MAX_TURNS} turns`);

  // Sanity checks of the whole run (this is an example, so it proves what it claims).
  if (executed.length === 0) throw new AgentError("the model made no tool calls");
  const failed = executed.filter((r) => !r.ok);
  if (failed.length > 0 && requireOk) {
    throw new AgentError("tool calls failed (--require-ok): " +
      failed.map((r) => `${r.name}: ${r.error?.kind}: ${r.error?.message}`).join("; "));
  }
  const weather = executed.find((r) => r.name === "get_weather");
  const answer = JSON.stringify(conversation[conversation.length - 1]);
  if (weather?.ok) {
    const temp = weather.output.temp_c;
    if (!answer.includes(`It is ${temp} °C`)) {
      throw new AgentError(`the final answer does not quote the temperature ${temp} °C: ${answer}`);
    }
  }

  console.log(`\nOK: ${provider}: ${conversation.length} conversation items, ` +
    `${executed.length} tool call(s), ${failed.length} failed`);
}

function parseArgs(argv: string[]): { provider: Provider; url: string; requireOk: boolean; stream: boolean } {
  const usage = "usage: agent_loop [--provider openai_chat|anthropic|gemini] [--url URL] [--require-ok] [--stream]";
  const opts = {
    provider: "openai_chat" as Provider,
    url: process.env.TOOLWIRE_URL || "http://127.0.0.1:8080",
    requireOk: false,
    stream: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split(/=(.*)/s, 2);
    const value = (): string => {
      const v = inline ?? argv[++i];
      if (v === undefined) throw new AgentError(`${flag} needs a value\n${usage}`);
      return v;
    };
    if (flag === "--provider") {
      const p = value();
      if (!PROVIDERS.includes(p as Provider)) {
        throw new AgentError(`--provider must be one of ${PROVIDERS.join(", ")}, got '${p}'`);
      }
      opts.provider = p as Provider;
    } else if (flag === "--url") {
      opts.url = value();
    } else if (flag === "--require-ok") {
      opts.requireOk = true;
    } else if (flag === "--stream") {
      opts.stream = true;
    } else if (flag === "-h" || flag === "--help") {
      console.log(usage);
      process.exit(0);
    } else {
      throw new AgentError(`unknown argument '${argv[i]}'\n${usage}`);
    }
  }
  if (opts.stream && !STREAMABLE.includes(opts.provider)) {
    throw new AgentError(`--stream: the scripted model streams ${STREAMABLE.join(", ")}`);
  }
  return opts;
}

async function main(): Promise<number> {
  try {
    const { provider, url, requireOk, stream } = parseArgs(process.argv.slice(2));
    await run(provider, url, requireOk, stream);
    return 0;
  } catch (e) {
    if (e instanceof AgentError) {
      console.error(`error: ${e.message}`);
      return 1;
    }
    throw e; // a bug in the example: let Node print the stack
  }
}

main().then((code) => {
  process.exitCode = code;
});
