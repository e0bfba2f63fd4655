// node/chat_tools.mjs BASE_URL MODEL — tool calls and reasoning through the official `openai` npm
// package (v6), against the test-hook build of the daemon (tests/deltad-testhooks with
// DELTAD_TEST_FORCED_OUTPUT=1: the tiny test models are random, so each request names the exact
// assistant text with the test-only "debug_forced_output" field) and the Qwen3.5 template (its
// generation prompt opens <think>). Checks: a tool-call round trip (call -> tool result ->
// answer) non-streaming and streaming, the streaming delta rules of
// docs/openai-api.md section 3, the XML call form (values read by their schemas), tool_choice
// none, an unknown named tool and a template raise_exception as 400s. Prints FAIL lines and a summary; exits 1 on any failure.
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
let passed = 0, failed = 0;
function check(cond, what, detail) {
  if (cond) { passed++; return; }
  failed++;
  console.log(`FAIL: ${what}${detail === undefined ? "" : " -- " + JSON.stringify(detail).slice(0, 600)}`);
}

const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 60000 });
const tools = [{
  type: "function",
  function: {
    name: "get_weather", description: "Current weather of a city.",
    parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } },
      required: ["city"] },
  },
}];
const user = { role: "user", content: "What is the weather in Paris?" };
const CALL_JSON = "Need the weather first.\n</think>\n\n<tool_call>\n" +
  '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';
const CALL_XML = "Two days.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n" +
  "Paris\n</parameter>\n<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>";

function create(body) {
  return client.chat.completions.create({ model, max_tokens: 64, ...body });
}

// Non-streaming call: finish_reason tool_calls, content null, reasoning split out.
async function callWhole() {
  const r = await create({ messages: [user], tools, debug_forced_output: CALL_JSON });
  const c = r.choices[0], m = c.message;
  check(c.finish_reason === "tool_calls", "finish_reason tool_calls", c);
  check(m.content === null, "content null with only tool calls", m);
  check(m.reasoning_content === "Need the weather first.", "reasoning_content", m);
  check(m.tool_calls?.length === 1, "one tool call", m);
  const t = m.tool_calls[0];
  check(t.type === "function" && /^call_[A-Za-z0-9]{24}$/.test(t.id), "call id and type", t);
  check(t.function.name === "get_weather" && JSON.parse(t.function.arguments).city === "Paris",
    "call name and arguments", t);
  check(r.usage.completion_tokens_details?.reasoning_tokens > 0, "reasoning_tokens", r.usage);
  return m;
}

// Streaming: rebuild the message from the deltas, asserting llama.cpp's client rules.
async function stream(body) {
  const s = await create({ ...body, stream: true, stream_options: { include_usage: true } });
  const calls = [];
  let content = "", reasoning = "", finish = null, usage = null;
  for await (const chunk of s) {
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    const d = c.delta;
    if (c.finish_reason) finish = c.finish_reason;
    if ("content" in d && d.content !== null) {
      check(d.content !== "", "content deltas are never empty", d);
      content += d.content;
    }
    if ("reasoning_content" in d) {
      check(d.reasoning_content !== "", "reasoning deltas are never empty", d);
      reasoning += d.reasoning_content;
    }
    for (const t of d.tool_calls ?? []) {
      check(!("id" in t.function), "function never holds an id", t);
      if (t.index === calls.length) {
        check(t.id?.startsWith("call_") && t.type === "function" && t.function.name &&
          t.function.arguments === "", "a new call carries id, type, name, arguments ''", t);
        calls.push({ id: t.id, name: t.function.name, arguments: "" });
      } else {
        check(t.index === calls.length - 1 && !t.id && !t.type && !t.function.name,
          "later call deltas carry index and arguments only", t);
        calls[t.index].arguments += t.function.arguments ?? "";
      }
    }
  }
  return { content, reasoning, calls, finish, usage };
}

async function callStream() {
  const r = await stream({ messages: [user], tools, debug_forced_output: CALL_JSON });
  check(r.finish === "tool_calls", "stream finish_reason tool_calls", r);
  check(r.reasoning === "Need the weather first." && r.content === "", "stream reasoning", r);
  check(r.calls.length === 1 && JSON.parse(r.calls[0].arguments).city === "Paris", "stream call", r);
  check(r.usage?.completion_tokens_details?.reasoning_tokens > 0, "stream reasoning_tokens", r.usage);
}

// The round trip: the assistant message as the SDK returned it (content null, arguments a JSON
// string) and the tool result go back; the template must render both.
async function roundTrip(assistant) {
  const messages = [user, assistant,
    { role: "tool", tool_call_id: assistant.tool_calls[0].id, content: "21 C, sunny" }];
  const r = await create({ messages, tools, debug_forced_output: "Checked.\n</think>\n\nIt is 21 C and sunny." });
  const c = r.choices[0];
  check(c.finish_reason === "stop" && c.message.content === "It is 21 C and sunny.", "final answer", c);
  check(c.message.reasoning_content === "Checked." && !c.message.tool_calls, "final message parts", c);
  const s = await stream({ messages, tools, debug_forced_output: "\n</think>\n\nDone." });
  check(s.content === "Done." && s.finish === "stop" && s.calls.length === 0, "final answer streamed", s);
}

async function xmlForm() {
  const r = await stream({ messages: [user], tools, debug_forced_output: CALL_XML });
  check(r.calls.length === 1 && r.calls[0].arguments === '{"city": "Paris", "days": 2}',
    "XML form arguments", r.calls);
}

// XML values are read by their schema: strings-only parameters keep the text (10001 stays a
// string, newlines and '<' included), others are JSON when they parse as JSON of an allowed type.
const typedTools = [{
  type: "function",
  function: {
    name: "book", parameters: {
      type: "object", properties: {
        zip: { type: "string" }, nights: { type: "integer" }, price: { type: "number" },
        late: { type: "boolean" }, guests: { type: "array", items: { type: "string" } },
        room: { enum: ["101", "102"] }, note: { type: ["string", "null"] }, code: { type: "string" },
      },
    },
  },
}];
const CALL_TYPED = "\n</think>\n\n<tool_call>\n<function=book>\n<parameter=zip>\n10001\n</parameter>\n" +
  "<parameter=nights>\n3\n</parameter>\n<parameter=price>\n99.5\n</parameter>\n" +
  "<parameter=late>\ntrue\n</parameter>\n<parameter=guests>\n[\"Ann\", \"Bo\"]\n</parameter>\n" +
  "<parameter=room>\n102\n</parameter>\n<parameter=note>\nnull\n</parameter>\n" +
  "<parameter=code>\nif (a < b) {\n  x();\n}\n</parameter>\n</function>\n</tool_call>";
const WANT_TYPED = { zip: "10001", nights: 3, price: 99.5, late: true, guests: ["Ann", "Bo"],
  room: "102", note: null, code: "if (a < b) {\n  x();\n}" };

async function xmlTyped() {
  const body = { messages: [user], tools: typedTools, debug_forced_output: CALL_TYPED };
  const w = (await create(body)).choices[0].message;
  check(w.tool_calls?.length === 1 &&
    JSON.stringify(JSON.parse(w.tool_calls[0].function.arguments)) === JSON.stringify(WANT_TYPED),
  "XML values by schema", w);
  const r = await stream(body);
  check(r.calls.length === 1 &&
    JSON.stringify(JSON.parse(r.calls[0].arguments)) === JSON.stringify(WANT_TYPED),
  "XML values by schema, streamed", r.calls);
}

async function toolChoiceNone() {
  const r = await create({ messages: [user], tools, tool_choice: "none", debug_forced_output: CALL_JSON });
  const c = r.choices[0];
  check(c.finish_reason === "stop" && !c.message.tool_calls && c.message.content.includes("<tool_call>"),
    "tool_choice none leaves the text as content", c);
}

async function badRequests() {
  try {
    await create({ messages: [user], tools, tool_choice: { type: "function", function: { name: "nope" } } });
    check(false, "an unknown named tool must fail");
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.param === "tool_choice", "unknown tool -> 400", String(e));
  }
  try {
    await create({ messages: [user, { role: "system", content: "late" }] });
    check(false, "a template raise_exception must fail");
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.message.includes("System message must be at the beginning."),
      "raise_exception -> 400 with the template's message", String(e));
  }
}

try {
  const assistant = await callWhole();
  await callStream();
  await roundTrip(assistant);
  await xmlForm();
  await xmlTyped();
  await toolChoiceNone();
  await badRequests();
} catch (e) {
  check(false, "unexpected exception", String(e && e.stack || e));
}
console.log(`chat_tools: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
