// node/tool_choice.mjs BASE_URL MODEL — enforced tool choice (issue 31) through the official
// `openai` npm package, against the production daemon serving the random tiny model with the
// Qwen3.5 template (thinking off): whatever the model would write, tool_choice "required"
// yields at least one call, a named function only calls of that function, parallel_tool_calls
// false exactly one call, "none" no call, and the arguments of a forced call are valid under
// the tool's parameters schema. Prints FAIL lines and a summary; exits 1 on any failure.
import OpenAI from "openai";

const [baseURL, model] = process.argv.slice(2);
let passed = 0, failed = 0;
function check(cond, what, detail) {
  if (cond) { passed++; return; }
  failed++;
  console.log(`FAIL: ${what}${detail === undefined ? "" : " -- " + JSON.stringify(detail).slice(0, 600)}`);
}

const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 120000 });
const tools = [
  { type: "function", function: { name: "get_weather", parameters: {
    type: "object", properties: { city: { type: "string", maxLength: 12 },
      days: { type: "integer", minimum: 1, maximum: 7 } },
    required: ["city"], additionalProperties: false } } },
  { type: "function", function: { name: "now", strict: true, parameters: {
    type: "object", properties: {}, additionalProperties: false } } },
];
const user = { role: "user", content: "What is the weather in Paris?" };

function validArgs(call) {
  let a;
  try { a = JSON.parse(call.function.arguments); } catch (e) { return false; }
  if (call.function.name === "now") return Object.keys(a).length === 0;
  // lengths in code points, as JSON Schema counts them (not UTF-16 units)
  if (call.function.name !== "get_weather" || typeof a.city !== "string" ||
    [...a.city].length > 12) return false;
  for (const k of Object.keys(a)) if (k !== "city" && k !== "days") return false;
  return a.days === undefined || (Number.isInteger(a.days) && a.days >= 1 && a.days <= 7);
}

async function ask(extra, temperature) {
  return client.chat.completions.create({
    model, messages: [user], tools, max_tokens: 300, temperature, seed: 4,
    chat_template_kwargs: { enable_thinking: false }, ...extra });
}

for (const temperature of [0, 1]) {
  const t = `temp ${temperature}`;
  let r = await ask({ tool_choice: "required" }, temperature);
  let c = r.choices[0];
  check(c.finish_reason === "tool_calls" && c.message.tool_calls?.length >= 1,
    `required -> a call (${t})`, c);
  for (const call of c.message.tool_calls ?? []) check(validArgs(call), `required: arguments valid (${t})`, call);

  r = await ask({ tool_choice: { type: "function", function: { name: "get_weather" } } }, temperature);
  c = r.choices[0];
  check(c.finish_reason === "tool_calls" && c.message.tool_calls?.length >= 1 &&
    c.message.tool_calls.every((x) => x.function.name === "get_weather"), `named -> that function (${t})`, c);
  for (const call of c.message.tool_calls ?? []) check(validArgs(call), `named: arguments valid (${t})`, call);

  r = await ask({ tool_choice: "required", parallel_tool_calls: false }, temperature);
  c = r.choices[0];
  check(c.message.tool_calls?.length === 1 && validArgs(c.message.tool_calls[0]),
    `parallel_tool_calls false -> exactly one valid call (${t})`, c);

  r = await ask({ tool_choice: "none" }, temperature);
  c = r.choices[0];
  check(!c.message.tool_calls?.length && c.finish_reason !== "tool_calls", `none -> no call (${t})`, c);

  // streaming: the call arrives as tool_calls deltas
  const stream = await client.chat.completions.create({
    model, messages: [user], tools, max_tokens: 300, temperature, seed: 4, stream: true,
    tool_choice: { type: "function", function: { name: "now" } },
    chat_template_kwargs: { enable_thinking: false } });
  let name = "", args = "", finish = null;
  for await (const ch of stream) {
    for (const d of ch.choices ?? []) {
      for (const tc of d.delta?.tool_calls ?? []) {
        name += tc.function?.name ?? "";
        args += tc.function?.arguments ?? "";
      }
      finish = d.finish_reason ?? finish;
    }
  }
  check(finish === "tool_calls" && name.startsWith("now") && validArgs({ function: { name: "now", arguments: args } }),
    `streamed named call (${t})`, { name, args, finish });
}

try {
  await client.chat.completions.create({
    model, messages: [user], tools, tool_choice: "required", response_format: { type: "json_object" } });
  check(false, "required + response_format -> 400");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.param === "tool_choice", "required + response_format -> 400", String(e));
}

console.log(`tool_choice: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
