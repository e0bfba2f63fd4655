// node/messages.mjs BASE_URL API_KEY — Anthropic's Messages API (POST /v1/messages) through the
// official `@anthropic-ai/sdk` npm package against the test-hook build of the daemon (each
// request fixes the assistant text with "debug_forced_output"; see test_responses_messages.sh):
// messages.create, messages.stream, a tool-use round trip with tool_result, thinking blocks,
// stop sequences, countTokens, and the SDK's error classes (the x-api-key header). Exits 1 on any
// failure.
import Anthropic from "@anthropic-ai/sdk";

const [baseURL, apiKey] = process.argv.slice(2);
let passed = 0, failed = 0;
function check(cond, what, detail) {
  if (cond) { passed++; return; }
  failed++;
  console.log(`FAIL: ${what}${detail === undefined ? "" : " -- " + JSON.stringify(detail).slice(0, 600)}`);
}

const client = new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const tools = [{
  name: "get_weather", description: "Current weather of a city.",
  input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
}];
const user = { role: "user", content: "What is the weather in Paris?" };
const CALL = "Need the weather.\n</think>\n\nLet me look.\n<tool_call>\n" +
  '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';

async function create() {
  const m = await client.messages.create({
    model: "m", max_tokens: 64, system: "Be brief.", messages: [{ role: "user", content: "2 + 2?" }],
    thinking: { type: "enabled", budget_tokens: 1024 },
    debug_forced_output: "Easy.\n</think>\n\n2 + 2 = 4",
  });
  check(m.type === "message" && m.role === "assistant" && /^msg_/.test(m.id), "message object", m);
  check(m.content.length === 2 && m.content[0].type === "thinking" && m.content[0].thinking === "Easy." &&
    m.content[1].type === "text" && m.content[1].text === "2 + 2 = 4", "thinking and text blocks", m.content);
  check(m.stop_reason === "end_turn" && m.stop_sequence === null, "end_turn", m);
  check(m.usage.input_tokens > 0 && m.usage.output_tokens > 0 &&
    m.usage.cache_read_input_tokens >= 0, "usage", m.usage);
}

async function stream() {
  const s = client.messages.stream({
    model: "m", max_tokens: 64, messages: [user], debug_forced_output: "Hmm.\n</think>\n\nSunny.",
  });
  const types = [];
  let text = "", thinking = "";
  for await (const ev of s) {
    types.push(ev.type);
    if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") text += ev.delta.text;
    if (ev.type === "content_block_delta" && ev.delta.type === "thinking_delta") thinking += ev.delta.thinking;
  }
  const final = await s.finalMessage();
  check(types[0] === "message_start" && types.at(-1) === "message_stop" &&
    types.at(-2) === "message_delta", "event order", types);
  for (const t of ["content_block_start", "content_block_delta", "content_block_stop"])
    check(types.includes(t), `stream has ${t}`, types);
  check(text === "Sunny." && thinking === "Hmm.", "streamed deltas", { text, thinking });
  check(final.content.at(-1).text === "Sunny." && final.stop_reason === "end_turn" &&
    final.usage.output_tokens > 0, "finalMessage", final);
}

async function toolUse() {
  const m = await client.messages.create({ model: "m", max_tokens: 64, messages: [user], tools,
    debug_forced_output: CALL });
  const tu = m.content.find((b) => b.type === "tool_use");
  check(m.stop_reason === "tool_use" && tu && tu.name === "get_weather" && tu.input.city === "Paris",
    "tool_use block", m);
  const messages = [user, { role: "assistant", content: m.content },
    { role: "user", content: [{ type: "tool_result", tool_use_id: tu.id, content: "21 C, sunny" }] }];
  const r = await client.messages.create({ model: "m", max_tokens: 64, messages, tools,
    debug_forced_output: "\n</think>\n\nIt is 21 C." });
  check(r.stop_reason === "end_turn" && r.content.at(-1).text === "It is 21 C.", "answer after tool_result", r);
  const s = client.messages.stream({ model: "m", max_tokens: 64, messages: [user], tools,
    debug_forced_output: CALL });
  let json = "";
  for await (const ev of s)
    if (ev.type === "content_block_delta" && ev.delta.type === "input_json_delta") json += ev.delta.partial_json;
  const final = await s.finalMessage();
  check(JSON.parse(json).city === "Paris" && final.stop_reason === "tool_use" &&
    final.content.find((b) => b.type === "tool_use")?.input.city === "Paris", "streamed tool_use", { json, final });
}

// tool_choice any / tool in the SDK's spelling (the constraint itself is tested against the model
// in fronts_http.py)
async function toolChoice() {
  for (const tool_choice of [{ type: "any" }, { type: "tool", name: "get_weather", disable_parallel_tool_use: true }]) {
    const m = await client.messages.create({ model: "m", max_tokens: 64, messages: [user], tools, tool_choice,
      debug_forced_output: CALL });
    const uses = m.content.filter((b) => b.type === "tool_use");
    check(m.stop_reason === "tool_use" && uses.length === 1 && uses[0].input.city === "Paris",
      `tool_choice ${tool_choice.type} -> tool_use`, m);
  }
}

async function countTokens() {
  const a = await client.messages.countTokens({ model: "m", messages: [user] });
  const b = await client.messages.countTokens({ model: "m", messages: [user], system: "A long system prompt." });
  check(a.input_tokens > 0 && b.input_tokens > a.input_tokens, "countTokens", [a, b]);
}

async function errors() {
  const cases = [
    [{ model: "m", messages: [user] }, Anthropic.BadRequestError, "max_tokens"],
    [{ model: "m", max_tokens: 8, messages: [{ role: "user", content: [{ type: "image" }] }] },
      Anthropic.BadRequestError, "messages.0"],
    [{ model: "m", max_tokens: 8, messages: [user], tool_choice: { type: "any" } },
      Anthropic.BadRequestError, "tool_choice"],
    [{ model: "m", max_tokens: 8, messages: [user], tools, tool_choice: { type: "tool", name: "nope" } },
      Anthropic.BadRequestError, "tool_choice"],
    [{ model: "m", max_tokens: "8", messages: [user] }, Anthropic.BadRequestError, "max_tokens"],
  ];
  for (const [body, cls, word] of cases) {
    try {
      await client.messages.create(body);
      check(false, `must fail: ${JSON.stringify(body)}`);
    } catch (e) {
      check(e instanceof cls && e.error?.type === "error" && e.error?.error?.type === "invalid_request_error" &&
        e.message.includes(word), `${JSON.stringify(body).slice(0, 80)} -> ${cls.name}`, String(e));
    }
  }
  const bad = new Anthropic({ baseURL, apiKey: "wrong", maxRetries: 0 });
  try {
    await bad.messages.create({ model: "m", max_tokens: 8, messages: [user] });
    check(false, "a wrong key must fail");
  } catch (e) {
    check(e instanceof Anthropic.AuthenticationError && e.error?.error?.type === "authentication_error",
      "wrong x-api-key -> AuthenticationError", String(e));
  }
}

try {
  await create();
  await stream();
  await toolUse();
  await toolChoice();
  await countTokens();
  await errors();
} catch (e) {
  check(false, "unexpected exception", String(e && e.stack || e));
}
console.log(`messages: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
