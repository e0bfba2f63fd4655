// node/responses.mjs BASE_URL API_KEY — OpenAI's Responses API (POST /v1/responses) through the
// official `openai` npm package (v6) against the test-hook build of the daemon (each request
// fixes the assistant text with "debug_forced_output"; see test_responses_messages.sh):
// responses.create, responses.stream with its typed events, retrieve / delete, a two-turn
// conversation through previous_response_id, a function-call round trip with
// function_call_output, text.format json_schema and a named tool_choice, and the SDK's error
// classes. Exits 1 on any failure.
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
let passed = 0, failed = 0;
function check(cond, what, detail) {
  if (cond) { passed++; return; }
  failed++;
  console.log(`FAIL: ${what}${detail === undefined ? "" : " -- " + JSON.stringify(detail).slice(0, 600)}`);
}

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const tools = [{
  type: "function", name: "get_weather", description: "Current weather of a city.",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
}];
const CALL = "Need the weather.\n</think>\n\n<tool_call>\n" +
  '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>';

async function create() {
  const r = await client.responses.create({
    model: "m", input: "What is 2 + 2?", instructions: "Be brief.", metadata: { k: "v" },
    max_output_tokens: 32, debug_forced_output: "Easy.\n</think>\n\n2 + 2 = 4",
  });
  check(r.object === "response" && /^resp_/.test(r.id) && r.status === "completed", "response object", r);
  check(r.output_text === "2 + 2 = 4", "output_text", r.output);
  check(r.output[0].type === "reasoning" && r.output[0].content[0].text === "Easy.", "reasoning item", r.output);
  check(r.output[1].type === "message" && r.output[1].content[0].type === "output_text", "message item", r.output);
  check(r.usage.input_tokens > 0 && r.usage.output_tokens > 0 &&
    r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens &&
    r.usage.output_tokens_details.reasoning_tokens > 0 &&
    r.usage.input_tokens_details.cached_tokens >= 0, "usage", r.usage);
  check(r.instructions === "Be brief." && r.metadata.k === "v" && r.store === true, "echoed fields", r);
  const got = await client.responses.retrieve(r.id);
  check(got.id === r.id && got.output_text === "2 + 2 = 4", "retrieve", got);
  return r;
}

async function stream() {
  const s = client.responses.stream({
    model: "m", input: [{ role: "user", content: [{ type: "input_text", text: "Say hi" }] }],
    debug_forced_output: "\n</think>\n\nHi there!",
  });
  const types = [];
  let text = "", seq = -1, seqOk = true;
  for await (const ev of s) {
    types.push(ev.type);
    if (ev.sequence_number !== seq + 1) seqOk = false;
    seq = ev.sequence_number;
    if (ev.type === "response.output_text.delta") text += ev.delta;
  }
  const final = await s.finalResponse();
  check(seqOk, "sequence_number counts 0, 1, 2, ...", types);
  check(types[0] === "response.created" && types[1] === "response.in_progress" &&
    types.at(-1) === "response.completed", "event order", types);
  for (const t of ["response.output_item.added", "response.content_part.added",
    "response.output_text.delta", "response.output_text.done", "response.content_part.done",
    "response.output_item.done"])
    check(types.includes(t), `stream has ${t}`, types);
  check(text === "Hi there!" && final.output_text === "Hi there!", "streamed text", { text, final });
}

async function twoTurns(first) {
  const r = await client.responses.create({
    model: "m", input: "And 3 + 3?", previous_response_id: first.id,
    debug_forced_output: "\n</think>\n\n3 + 3 = 6",
  });
  check(r.previous_response_id === first.id && r.output_text === "3 + 3 = 6", "second turn", r);
  // the stored conversation reaches the prompt: two turns cost more input than one
  check(r.usage.input_tokens > first.usage.input_tokens, "previous turns are in the prompt",
    [first.usage, r.usage]);
}

async function functionCall() {
  const r = await client.responses.create({
    model: "m", input: "Weather in Paris?", tools, debug_forced_output: CALL,
  });
  const call = r.output.find((o) => o.type === "function_call");
  check(call && call.name === "get_weather" && JSON.parse(call.arguments).city === "Paris" &&
    /^call_/.test(call.call_id), "function_call item", r.output);
  const input = [{ role: "user", content: "Weather in Paris?" }, call,
    { type: "function_call_output", call_id: call.call_id, output: "21 C, sunny" }];
  const r2 = await client.responses.create({
    model: "m", input, tools, store: false, debug_forced_output: "\n</think>\n\nIt is 21 C.",
  });
  check(r2.output_text === "It is 21 C." && r2.store === false, "answer after function_call_output", r2);
  // streamed arguments
  const s = client.responses.stream({ model: "m", input: "Weather?", tools, debug_forced_output: CALL });
  let args = "", done = null;
  for await (const ev of s) {
    if (ev.type === "response.function_call_arguments.delta") args += ev.delta;
    if (ev.type === "response.function_call_arguments.done") done = ev.arguments;
  }
  check(args === done && JSON.parse(args).city === "Paris", "streamed function_call arguments", { args, done });
}

// text.format json_schema and a forced tool choice are accepted in the SDK's own spelling and
// come back in its shapes (the constraint itself is tested against the model in fronts_http.py)
async function structured() {
  const format = { type: "json_schema", name: "sum", strict: true, schema: {
    type: "object", properties: { answer: { type: "integer" } }, required: ["answer"],
    additionalProperties: false } };
  const r = await client.responses.create({
    model: "m", input: "23 + 45?", text: { format }, debug_forced_output: '\n</think>\n\n{"answer": 68}',
  });
  check(JSON.parse(r.output_text).answer === 68 && r.text.format.name === "sum", "text.format json_schema", r);
  const f = await client.responses.create({
    model: "m", input: "Weather in Paris?", tools, tool_choice: { type: "function", name: "get_weather" },
    parallel_tool_calls: false, debug_forced_output: CALL,
  });
  const calls = f.output.filter((o) => o.type === "function_call");
  check(calls.length === 1 && calls[0].name === "get_weather" && f.tool_choice.name === "get_weather",
    "named tool_choice -> one function_call", f.output);
}

async function errors() {
  const cases = [
    [{ model: "m" }, OpenAI.BadRequestError, "input"],
    [{ model: "m", input: [{ type: "computer_call" }] }, OpenAI.BadRequestError, "input[0].type"],
    [{ model: "m", input: "x", tools: [{ type: "web_search" }] }, OpenAI.BadRequestError, "tools[0]"],
    [{ model: "m", input: "x", text: { format: { type: "json_schema", name: "s", schema: { type: "hiccup" } } } },
      OpenAI.BadRequestError, "text.format.schema"],
    [{ model: "m", input: "x", tool_choice: "required" }, OpenAI.BadRequestError, "tool_choice"],
    [{ model: "m", input: "x", previous_response_id: "resp_unknown" }, OpenAI.NotFoundError, "previous_response_id"],
  ];
  for (const [body, cls, param] of cases) {
    try {
      await client.responses.create(body);
      check(false, `must fail: ${JSON.stringify(body)}`);
    } catch (e) {
      check(e instanceof cls && e.param === param && (e.code === null || typeof e.code === "string"),
        `${JSON.stringify(body)} -> ${cls.name} ${param}`, { status: e.status, param: e.param, msg: e.message });
    }
  }
  try {
    await client.responses.retrieve("resp_unknown");
    check(false, "retrieve of an unknown id must fail");
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, "retrieve unknown -> 404", String(e));
  }
}

async function del(first) {
  await client.responses.delete(first.id);
  try {
    await client.responses.retrieve(first.id);
    check(false, "a deleted response must be gone");
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, "deleted -> 404", String(e));
  }
}

try {
  const first = await create();
  await stream();
  await twoTurns(first);
  await functionCall();
  await structured();
  await errors();
  await del(first);
} catch (e) {
  check(false, "unexpected exception", String(e && e.stack || e));
}
console.log(`responses: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
