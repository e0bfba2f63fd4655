// node/openai_client.mjs BASE_URL API_KEY MODEL — drive deltad with the official `openai` npm package
// (v6): chat non-streaming, streaming with usage, completions, the models list, and a wrong key
// surfacing as AuthenticationError. Prints one FAIL line per failed check and a summary line;
// exits 1 on any failure. Run by test_openai_client.sh.
import OpenAI from "openai";

const [baseURL, apiKey, model] = process.argv.slice(2);
let passed = 0, failed = 0;
function check(cond, what, detail) {
  if (cond) { passed++; return; }
  failed++;
  console.log(`FAIL: ${what}${detail === undefined ? "" : " -- " + JSON.stringify(detail).slice(0, 400)}`);
}

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const messages = [{ role: "user", content: "Say something." }];

async function chat() {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 8, seed: 1 });
  const c = r.choices[0];
  check(r.object === "chat.completion" && r.id.includes("cmpl"), "chat envelope", r);
  check(c.message.role === "assistant" && typeof c.message.content === "string", "chat message", c);
  check(["stop", "length"].includes(c.finish_reason), "finish_reason", c.finish_reason);
  check(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, "usage", r.usage);
  return c.message.content;
}

async function chatStream(expected) {
  const s = await client.chat.completions.create({
    model, messages, max_tokens: 8, seed: 1, stream: true, stream_options: { include_usage: true },
  });
  let text = "", usage = null, finish = null, n = 0;
  for await (const chunk of s) {
    n++;
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    text += c.delta.content ?? "";
    if (c.finish_reason) finish = c.finish_reason;
  }
  check(n >= 3, "stream chunks", n);
  check(finish !== null, "stream finish_reason", finish);
  check(usage && usage.total_tokens === usage.prompt_tokens + usage.completion_tokens, "stream usage", usage);
  check(text === expected, "stream text equals the non-streaming text (same seed)", [text, expected]);
}

async function completions() {
  const r = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 5 });
  check(r.object === "text_completion" && typeof r.choices[0].text === "string", "completions", r);
}

async function models() {
  const list = [];
  for await (const m of client.models.list()) list.push(m);
  check(list.length === 1 && list[0].id === model && list[0].object === "model", "models list", list);
  const one = await client.models.retrieve(model);
  check(one.id === model, "models retrieve", one);
}

async function wrongKey() {
  const bad = new OpenAI({ baseURL, apiKey: "wrong-key", maxRetries: 0 });
  try {
    await bad.chat.completions.create({ model, messages, max_tokens: 2 });
    check(false, "a wrong key must fail");
  } catch (e) {
    check(e instanceof OpenAI.AuthenticationError, "wrong key -> AuthenticationError", String(e));
    check(e.status === 401 && e.code === "invalid_api_key" && e.type === "authentication_error",
      "401 invalid_api_key authentication_error", { status: e.status, code: e.code, type: e.type });
  }
}

async function badRequest() {
  try {
    await client.chat.completions.create({ model, messages, max_tokens: 2, temperature: -1 });
    check(false, "temperature -1 must fail");
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.param === "temperature", "400 -> BadRequestError with param", String(e));
  }
}

try {
  const text = await chat();
  await chatStream(text);
  await completions();
  await models();
  await wrongKey();
  await badRequest();
} catch (e) {
  check(false, "unexpected exception", String(e && e.stack || e));
}
console.log(`openai_client: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
