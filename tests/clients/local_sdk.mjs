// The official openai npm SDK against llmux serving its own local engine
// (driven by tests/test_sdk_local_e2e.c: stories260K as "local", a
// random-weight model as "rand", and the same with hermes, llama3 and mistral tool
// formats as "herm", "l3" and "mis", a qwen3 reasoning model as "q3t", a
// gpt-oss model with harmony's template as "oss"), as
// an app that fails over to the local
// engine would call it: tool calls with tool_choice required and named,
// response_format json_schema, streams in parallel, n > 1 (streamed too,
// with tools), the prefix
// cache's cached_tokens, logprobs with top_logprobs (streamed too, and
// with tools), legacy completions with echo and logprobs (max_tokens 0
// too: scoring a prompt), and the
// parameters the engine does not implement refused as BadRequestError
// naming them.  Every check prints a line; the
// exit status is the number of failed checks (0 = all passed).
//
// env: LLMUX_URL (http://127.0.0.1:PORT/v1)
import OpenAI from 'openai';

// llmux runs without keys here (require_keys false): the SDK insists on an
// apiKey, so its Authorization header is removed (a malformed key is a 401).
const client = new OpenAI({ baseURL: process.env.LLMUX_URL, apiKey: 'none',
                            defaultHeaders: { Authorization: null },
                            maxRetries: 0, timeout: 120000 });
let failed = 0;

function check(cond, what) {
  console.log(`${cond ? 'ok  ' : 'FAIL'} ${what}`);
  if (!cond) failed++;
}

async function step(name, fn) {
  try {
    await fn();
  } catch (e) {
    check(false, `${name}: threw ${e && e.constructor && e.constructor.name}: ${e && e.message}`);
  }
}

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', enum: ['Paris', 'Oslo', 'Lima'] },
                    days: { type: 'integer' } },
      required: ['city', 'days'],
      additionalProperties: false,
    },
  },
};

// herm, l3 and mis: random models whose templates have the hermes
// (Qwen2.5), llama3 (3.1+) and mistral (7B v0.3) tool formats: the wrapper
// the grammar forces is longer
// gran and g33: Granite 4's and 3.3's templates (<tool_call> and
// <|tool_call|>[...] calls), ds: a deepseek2 model (latent attention),
// d31: the same with DeepSeek V3.1's template and call format, glm: with
// GLM-4.7-Flash's (XML calls; it reasons first unless reasoning_effort
// none, and a random model's reasoning would not end)
const noThink = (model) => (['glm', 'mag'].includes(model) ? { reasoning_effort: 'none' } : {});
// q3c: Qwen3-Coder's template (XML calls inside <tool_call>), m32:
// Mistral Small 3.2's (calls with ids), mag: Ministral 3 Reasoning's
// (magistral: [THINK] reasoning, which it does first unless none),
// kimi: Kimi K2's (calls functions.NAME:N inside their section)
for (const model of ['local', 'rand', 'herm', 'l3', 'mis', 'oss', 'gran', 'g33', 'ds', 'd31', 'glm', 'q3c', 'm32', 'mag', 'kimi']) {
  // glm's, q3c's, m32's and kimi's calls are longer (tags, ids)
  const mt = ['glm', 'q3c', 'm32', 'kimi'].includes(model) ? 800 : ['herm', 'l3', 'mis', 'oss', 'gran', 'g33', 'd31'].includes(model) ? 300 : 100;
  await step(`${model}: tool_choice required`, async () => {
    const r = await client.chat.completions.create({
      model, max_tokens: mt, seed: 7, ...noThink(model),
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
      tools: [weather], tool_choice: 'required',
    });
    const c = r.choices[0];
    check(c.finish_reason === 'tool_calls', `${model}: required: finish_reason tool_calls (${c.finish_reason})`);
    const tc = c.message.tool_calls && c.message.tool_calls[0];
    check(tc && tc.type === 'function' && tc.function.name === 'get_weather', `${model}: required: a get_weather call`);
    if (tc && c.finish_reason === 'tool_calls') {
      const a = JSON.parse(tc.function.arguments);
      check(['Paris', 'Oslo', 'Lima'].includes(a.city) && Number.isInteger(a.days) &&
            Object.keys(a).length === 2, `${model}: required: arguments match the schema`);
    }
  });

  await step(`${model}: tool_choice named, streamed`, async () => {
    const stream = await client.chat.completions.create({
      model, max_tokens: mt, seed: 8, stream: true, ...noThink(model),
      messages: [{ role: 'user', content: 'Weather?' }],
      tools: [weather], tool_choice: { type: 'function', function: { name: 'get_weather' } },
    });
    let name = '', args = '', finish = null;
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta;
      for (const t of d?.tool_calls ?? []) {
        if (t.function?.name) name += t.function.name;
        if (t.function?.arguments) args += t.function.arguments;
      }
      if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
    }
    check(name === 'get_weather', `${model}: named stream: tool name from deltas`);
    check(finish === 'tool_calls', `${model}: named stream: finish_reason tool_calls (${finish})`);
    if (finish === 'tool_calls') {
      const a = JSON.parse(args);
      check(typeof a.city === 'string' && Number.isInteger(a.days), `${model}: named stream: arguments parse`);
    }
  });

  await step(`${model}: json_schema`, async () => {
    const r = await client.chat.completions.create({
      model, max_tokens: 200, seed: 9, ...noThink(model),
      messages: [{ role: 'user', content: 'A pet as JSON' }],
      response_format: { type: 'json_schema', json_schema: { name: 'pet', strict: true, schema: {
        type: 'object',
        properties: { kind: { type: 'string', enum: ['cat', 'dog'] },
                      name: { type: 'string', maxLength: 12 }, ok: { type: 'boolean' } },
        required: ['kind', 'name', 'ok'], additionalProperties: false } } },
    });
    const c = r.choices[0];
    check(c.finish_reason === 'stop' || c.finish_reason === 'length', `${model}: json_schema: finish_reason`);
    if (c.finish_reason === 'stop') {
      const o = JSON.parse(c.message.content);
      // maxLength counts characters (code points), not UTF-16 units:
      // a random model's name may hold characters past U+FFFF
      check(['cat', 'dog'].includes(o.kind) && typeof o.name === 'string' &&
            [...o.name].length <= 12 && typeof o.ok === 'boolean', `${model}: json_schema: valid object`);
    }
  });
}

await step('parallel streams', async () => {
  const one = async (i) => {
    const stream = await client.chat.completions.create({
      model: 'local', max_tokens: 24, seed: i, stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: 'user', content: `Once upon a time ${i}` }],
    });
    let n = 0, usage = null;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta?.content) n++;
      if (chunk.usage) usage = chunk.usage;
    }
    return { n, usage };
  };
  const rs = await Promise.all([0, 1, 2, 3].map(one));
  check(rs.every((r) => r.n > 0 && r.usage && r.usage.completion_tokens > 0),
        'four concurrent streams all produce text and usage');
});

await step('greedy: same alone and beside others', async () => {
  const ask = () => client.chat.completions.create({
    model: 'local', max_tokens: 32, temperature: 0,
    messages: [{ role: 'user', content: 'Lily went to the park' }] });
  const alone = (await ask()).choices[0].message.content;
  const busy = await Promise.all([ask(), ask(), ask()]);
  check(busy.every((r) => r.choices[0].message.content === alone), 'greedy output identical batched');
});

await step('n = 3', async () => {
  const r = await client.chat.completions.create({
    model: 'local', max_tokens: 16, n: 3, seed: 3,
    messages: [{ role: 'user', content: 'Tell me a story' }] });
  check(r.choices.length === 3 && r.choices.map((c) => c.index).join() === '0,1,2', 'n=3: three choices');
});

await step('n = 3 streamed', async () => {
  // greedy: three identical choices, each the n = 1 answer, each with its
  // own index and finish_reason; the usage chunk sums their tokens
  const ask = (extra) => client.chat.completions.create({
    model: 'local', max_tokens: 20, temperature: 0, stream: true,
    stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'Tell me a story' }], ...extra });
  const collect = async (stream) => {
    const text = {}, finish = {}, finishes = {};
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        text[c.index] = (text[c.index] ?? '') + (c.delta?.content ?? '');
        if (c.finish_reason) {
          finish[c.index] = c.finish_reason;
          finishes[c.index] = (finishes[c.index] ?? 0) + 1;
        }
      }
    }
    return { text, finish, finishes, usage };
  };
  const one = await collect(await ask({}));
  const three = await collect(await ask({ n: 3 }));
  check(Object.keys(three.text).sort().join() === '0,1,2', 'n=3 stream: indexes 0, 1, 2');
  check([0, 1, 2].every((k) => three.finishes[k] === 1 && three.finish[k] === one.finish[0]),
        'n=3 stream: one finish_reason per choice');
  check([0, 1, 2].every((k) => three.text[k] === one.text[0] && one.text[0].length > 0),
        'n=3 stream: greedy choices equal the n=1 answer');
  check(three.usage && three.usage.completion_tokens === 3 * one.usage.completion_tokens,
        `n=3 stream: usage sums the choices (${three.usage?.completion_tokens})`);
  const seeded = await collect(await ask({ n: 3, temperature: 1, seed: 5, ignore_eos: true }));
  check(new Set(Object.values(seeded.text)).size === 3, 'n=3 stream: seeded choices differ');
  check(seeded.usage && seeded.usage.completion_tokens === 60, 'n=3 stream, ignore_eos: 3 x max_tokens');
});

await step('n = 2 with tools, streamed', async () => {
  const stream = await client.chat.completions.create({
    model: 'local', max_tokens: 100, seed: 6, n: 2, stream: true,
    messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
    tools: [{ type: 'function', function: { ...weather.function, parameters: {
      ...weather.function.parameters,
      properties: { ...weather.function.parameters.properties,
                    days: { type: 'integer', enum: [1, 2, 3] } } } } }],
    tool_choice: 'required',
  });
  const args = {}, names = {}, ids = {}, finish = {};
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      for (const t of c.delta?.tool_calls ?? []) {
        if (t.id) ids[c.index] = t.id;
        if (t.function?.name) names[c.index] = t.function.name;
        args[c.index] = (args[c.index] ?? '') + (t.function?.arguments ?? '');
      }
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  check(finish[0] === 'tool_calls' && finish[1] === 'tool_calls', 'n=2 tools stream: both finish tool_calls');
  check(names[0] === 'get_weather' && names[1] === 'get_weather' && ids[0] !== ids[1],
        'n=2 tools stream: a call per choice, distinct ids');
  for (const k of [0, 1]) {
    let a = null;
    try { a = JSON.parse(args[k]); } catch { a = null; }
    check(a && ['Paris', 'Oslo', 'Lima'].includes(a.city) && Number.isInteger(a.days),
          `n=2 tools stream: choice ${k} arguments match the schema`);
  }
});

await step('prefix cache', async () => {
  const system = 'You are a storyteller. '.repeat(12);
  const ask = (q) => client.chat.completions.create({
    model: 'local', max_tokens: 8, temperature: 0,
    messages: [{ role: 'system', content: system }, { role: 'user', content: q }] });
  await ask('A dog');
  const r = await ask('A cat');
  const cached = r.usage.prompt_tokens_details?.cached_tokens ?? 0;
  check(cached >= 30 && cached < r.usage.prompt_tokens, `prefix cache: cached_tokens ${cached} of ${r.usage.prompt_tokens}`);
});

// logprobs: greedy, so each token is its own top alternative; the
// tokens spell the content; the stream lists the same tokens.
await step('logprobs', async () => {
  const req = { model: 'local', max_tokens: 10, temperature: 0, logprobs: true, top_logprobs: 3,
                messages: [{ role: 'user', content: 'Once upon a time' }] };
  const r = await client.chat.completions.create(req);
  const c = r.choices[0];
  const lp = c.logprobs && c.logprobs.content;
  check(Array.isArray(lp) && lp.length === r.usage.completion_tokens,
        `logprobs: one entry a token (${lp && lp.length} of ${r.usage.completion_tokens})`);
  if (!Array.isArray(lp)) return;
  check(Buffer.from(lp.flatMap((e) => e.bytes)).toString('utf8') === c.message.content,
        'logprobs: the tokens\' bytes spell the content');
  check(lp.every((e) => e.logprob <= 0 && e.top_logprobs.length === 3), 'logprobs: log-probabilities <= 0, 3 alternatives each');
  check(lp.every((e) => e.top_logprobs[0].token === e.token && e.top_logprobs[0].logprob === e.logprob),
        'logprobs: greedy picks the top alternative');
  check(lp.every((e) => e.top_logprobs.every((t, i, a) => i === 0 || a[i - 1].logprob >= t.logprob)),
        'logprobs: alternatives most likely first');
  check(lp.every((e) => e.top_logprobs.reduce((s, t) => s + Math.exp(t.logprob), 0) <= 1 + 1e-5),
        'logprobs: alternatives\' probabilities sum to at most 1');
  const utf8 = new TextDecoder('utf-8', { fatal: true });
  check(lp.every((e) => { let t; try { t = utf8.decode(Uint8Array.from(e.bytes)); } catch { return true; } return t === e.token; }),
        'logprobs: a token is its bytes');
  const st = await client.chat.completions.create({ ...req, stream: true });
  const got = [];
  for await (const ch of st)
    for (const e of ch.choices[0]?.logprobs?.content ?? []) got.push([e.token, e.logprob]);
  check(JSON.stringify(got) === JSON.stringify(lp.map((e) => [e.token, e.logprob])),
        `logprobs: the stream lists the same tokens (${got.length})`);
});

// The Responses API's logprobs (include + top_logprobs), translated to the
// chat ones: the same tokens as the chat answer above, streamed per delta.
await step('responses logprobs', async () => {
  const req = { model: 'local', max_output_tokens: 10, temperature: 0, input: 'Once upon a time',
                include: ['message.output_text.logprobs'], top_logprobs: 2 };
  const r = await client.responses.create(req);
  const part = r.output[0]?.content?.[0];
  const lp = part?.logprobs ?? [];
  check(lp.length > 0 && Buffer.from(lp.flatMap((e) => e.bytes)).toString('utf8') === part.text,
        `responses logprobs: the tokens spell output_text (${lp.length})`);
  check(lp.every((e) => e.logprob <= 0 && e.top_logprobs.length === 2), 'responses logprobs: 2 alternatives each');
  const st = await client.responses.create({ ...req, stream: true });
  const got = [];
  let done = null;
  for await (const ev of st) {
    if (ev.type === 'response.output_text.delta') got.push(...(ev.logprobs ?? []).map((e) => e.token));
    if (ev.type === 'response.output_text.done') done = ev.logprobs;
  }
  check(JSON.stringify(got) === JSON.stringify(lp.map((e) => e.token)),
        `responses logprobs: the deltas list the same tokens (${got.length})`);
  check(Array.isArray(done) && done.length === lp.length, 'responses logprobs: the done event has them all');
});

// parallel_tool_calls on the hermes and mistral models: several calls in
// one answer, as the SDK reads them (message.tool_calls; streamed, deltas
// told apart by index), the same streamed and not; parallel_tool_calls
// false: one.
for (const pm of ['herm', 'mis', 'gran', 'g33', 'd31', 'glm', 'q3c', 'm32', 'mag', 'kimi']) await step(`${pm}: several tool calls in one answer`, async () => {
  let several = 0;
  for (let seed = 1; seed <= 8; seed++) {
    const req = { model: pm, max_tokens: 900, seed, ...noThink(pm),
                  messages: [{ role: 'user', content: 'Weather in Paris and Oslo?' }],
                  tools: [weather], tool_choice: 'required' };
    const r = await client.chat.completions.create(req);
    const c = r.choices[0];
    if (c.finish_reason !== 'tool_calls') continue;
    const calls = c.message.tool_calls;
    check(calls.length >= 1 && calls.length <= 8, `${pm} parallel seed ${seed}: 1 to 8 calls (${calls.length})`);
    check(new Set(calls.map((t) => t.id)).size === calls.length, `${pm} parallel seed ${seed}: distinct ids`);
    for (const t of calls) {
      const a = JSON.parse(t.function.arguments);
      check(t.function.name === 'get_weather' && ['Paris', 'Oslo', 'Lima'].includes(a.city) &&
            Number.isInteger(a.days), `${pm} parallel seed ${seed}: each call matches the schema`);
    }
    if (calls.length > 1) several++;
    const stream = await client.chat.completions.create({ ...req, stream: true });
    const got = [];
    for await (const chunk of stream) {
      for (const t of chunk.choices[0]?.delta?.tool_calls ?? []) {
        got[t.index] ??= { name: '', args: '' };
        if (t.function?.name) got[t.index].name += t.function.name;
        got[t.index].args += t.function?.arguments ?? '';
      }
    }
    check(JSON.stringify(got) === JSON.stringify(calls.map((t) => ({ name: t.function.name, args: t.function.arguments }))),
          `${pm} parallel seed ${seed}: the streamed calls equal the answer's`);
    const one = await client.chat.completions.create({ ...req, parallel_tool_calls: false });
    check(one.choices[0].finish_reason !== 'tool_calls' || one.choices[0].message.tool_calls.length === 1,
          `${pm} seed ${seed}: parallel_tool_calls false gives one call`);
  }
  check(several >= 1, `${pm}: some answer has several calls (${several} of 8)`);
});

// Granite 4 and 3.3, DeepSeek V3.1: a call, its result sent back as the
// SDK writes the turns, then another answer (the result turns are the
// templates')
for (const gm of ['gran', 'g33', 'd31', 'glm', 'q3c', 'm32', 'mag', 'kimi']) await step(`${gm}: a call and its result sent back`, async () => {
  const msgs = [{ role: 'user', content: 'Weather in Oslo?' }];
  const r = await client.chat.completions.create({ model: gm, max_tokens: ['m32', 'mag', 'kimi'].includes(gm) ? 800 : 300, seed: 5,
    messages: msgs, tools: [weather], tool_choice: 'required', ...noThink(gm) });
  const c = r.choices[0];
  check(c.finish_reason === 'tool_calls', `${gm}: the first answer is a call (${c.finish_reason})`);
  if (c.finish_reason !== 'tool_calls') return;
  msgs.push(c.message);
  for (const t of c.message.tool_calls)
    msgs.push({ role: 'tool', tool_call_id: t.id, content: '{"temp": 3}' });
  const r2 = await client.chat.completions.create({ model: gm, max_tokens: 12, seed: 5,
    messages: msgs, tools: [weather], tool_choice: 'none', ...noThink(gm) });
  check(r2.choices[0].message.tool_calls === undefined && typeof r2.choices[0].message.content === 'string',
        `${gm}: the answer after the result is text`);
  // against the question alone (tool_choice none shows no tools either)
  const r0 = await client.chat.completions.create({ model: gm, max_tokens: 1,
    messages: msgs.slice(0, 1), tools: [weather], tool_choice: 'none', ...noThink(gm) });
  check(r2.usage.prompt_tokens > r0.usage.prompt_tokens + 10,
        `${gm}: the call and its result are in the prompt (${r2.usage.prompt_tokens} vs ${r0.usage.prompt_tokens})`);
});

// magistral's reasoning as the SDK reads it: message.reasoning_content
// (the text in [THINK]...[/THINK], control tokens favoured here by
// logit_bias) apart from content, the stream's reasoning_content deltas
// the same
await step('mag: reasoning_content in [THINK]', async () => {
  let split = 0;
  for (let seed = 0; seed < 8; seed++) {
    const req = { model: 'mag', max_tokens: 30, seed, temperature: 1, logit_bias: { 498: 8, 499: 4 },
                  messages: [{ role: 'user', content: 'Q' }] };
    const m = (await client.chat.completions.create(req)).choices[0].message;
    let rs = '', cs = '';
    for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
      const d = chunk.choices[0]?.delta;
      rs += d?.reasoning_content ?? '';
      cs += d?.content ?? '';
    }
    check(rs === (m.reasoning_content ?? '') && cs === (m.content ?? ''),
          `mag seed ${seed}: the stream's reasoning and content equal the answer's`);
    if (typeof m.reasoning_content === 'string') {
      split++;
      check(!m.reasoning_content.includes('[/THINK]'), `mag seed ${seed}: the reasoning ends at the first [/THINK]`);
    }
  }
  check(split >= 2, `mag: answers that reasoned (${split} of 8)`);
});

// logprobs with tools: a tool call's tokens are not content, so a call
// answer lists none (content []), streamed too; a text answer
// (tool_choice none) lists its tokens.
await step('logprobs with tools', async () => {
  const req = { model: 'local', max_tokens: 100, seed: 7, logprobs: true, top_logprobs: 1,
                messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
                tools: [weather], tool_choice: 'required' };
  const r = await client.chat.completions.create(req);
  const c = r.choices[0];
  check(c.finish_reason === 'tool_calls' && c.message.tool_calls?.[0]?.function?.name === 'get_weather',
        `logprobs with tools: a get_weather call (${c.finish_reason})`);
  let args = null;
  try { args = JSON.parse(c.message.tool_calls[0].function.arguments); } catch { /* checked below */ }
  check(args && ['Paris', 'Oslo', 'Lima'].includes(args.city) && Number.isInteger(args.days),
        'logprobs with tools: the arguments match the schema');
  check(Array.isArray(c.logprobs?.content) && c.logprobs.content.length === 0 && c.logprobs.refusal === null,
        'logprobs with tools: a call lists no content tokens');
  const st = await client.chat.completions.create({ ...req, stream: true });
  let lists = 0, entries = 0, deltas = 0;
  for await (const ch of st) {
    const x = ch.choices[0];
    if (x?.delta?.tool_calls) deltas++;
    if (x?.logprobs) { lists++; entries += x.logprobs.content.length; }
  }
  check(deltas > 0 && lists === deltas && entries === 0,
        `logprobs with tools: streamed deltas list none (${deltas} deltas, ${lists} lists, ${entries} entries)`);
  const t = await client.chat.completions.create({ ...req, tool_choice: 'none', temperature: 0, max_tokens: 8 });
  const tl = t.choices[0].logprobs?.content ?? [];
  check(tl.length === t.usage.completion_tokens && tl.map((e) => e.token).join('') === t.choices[0].message.content,
        `logprobs with tools: tool_choice none lists the text's tokens (${tl.length})`);
});

// Legacy completions with echo: the prompt's text and tokens first (the
// first token's figures null), then the completion's; streamed, the first
// chunk is the prompt.
await step('completions echo', async () => {
  const req = { model: 'local', prompt: 'Once upon a time', max_tokens: 6, temperature: 0,
                echo: true, logprobs: 2 };
  const r = await client.completions.create(req);
  const c = r.choices[0];
  const lp = c.logprobs;
  check(c.text.startsWith('Once upon a time') && c.text.length > 'Once upon a time'.length,
        `completions echo: the text starts with the prompt (${JSON.stringify(c.text)})`);
  check(lp && lp.tokens.length === r.usage.prompt_tokens + r.usage.completion_tokens,
        `completions echo: a token per prompt and completion token (${lp && lp.tokens.length})`);
  check(lp && lp.token_logprobs[0] === null && lp.top_logprobs[0] === null,
        'completions echo: the first token has no figures');
  check(lp && lp.token_logprobs.slice(1).every((v) => typeof v === 'number' && v <= 0),
        'completions echo: every later token has its log-probability');
  check(lp && lp.tokens.join('') === c.text, 'completions echo: the tokens spell the text');
  check(lp && lp.text_offset.every((o, i) => o === lp.tokens.slice(0, i).join('').length),
        'completions echo: text_offset counts the text before each token');
  const st = await client.completions.create({ ...req, stream: true });
  const parts = [];
  const toks = [];
  for await (const ch of st) {
    const x = ch.choices[0];
    if (!x) continue;
    parts.push(x.text);
    toks.push(...(x.logprobs?.tokens ?? []));
  }
  check(parts[0] === 'Once upon a time', `completions echo: the first chunk is the prompt (${JSON.stringify(parts[0])})`);
  check(parts.join('') === c.text && JSON.stringify(toks) === JSON.stringify(lp.tokens),
        'completions echo: the stream gives the same text and tokens');
  const u = r.usage;
  const plain = await client.completions.create({ ...req, echo: false });
  check(plain.usage.prompt_tokens === u.prompt_tokens && plain.usage.completion_tokens === u.completion_tokens &&
        'Once upon a time' + plain.choices[0].text === c.text,
        'completions echo: the usage and the completion as without echo');
});

// Scoring a prompt as evaluation harnesses do (echo, max_tokens 0,
// logprobs): the prompt's text and figures alone, the same as those of the
// prompt part of a longer answer, finish_reason length, no completion
// tokens; without echo a BadRequestError naming max_tokens.
await step('completions score', async () => {
  const req = { model: 'local', prompt: 'Once upon a time', max_tokens: 0, echo: true, logprobs: 1 };
  const r = await client.completions.create(req);
  const c = r.choices[0];
  const lp = c.logprobs;
  check(c.text === 'Once upon a time', `completions score: the text is the prompt (${JSON.stringify(c.text)})`);
  check(c.finish_reason === 'length' && r.usage.completion_tokens === 0,
        `completions score: finish ${c.finish_reason}, ${r.usage.completion_tokens} completion tokens`);
  check(lp && lp.tokens.length === r.usage.prompt_tokens && lp.token_logprobs[0] === null &&
        lp.token_logprobs.slice(1).every((v) => typeof v === 'number' && v <= 0),
        `completions score: the prompt's tokens and figures (${lp && lp.tokens.length})`);
  const longer = await client.completions.create({ ...req, max_tokens: 4, temperature: 0 });
  const n = r.usage.prompt_tokens;
  check(JSON.stringify(longer.choices[0].logprobs.token_logprobs.slice(0, n)) === JSON.stringify(lp.token_logprobs),
        'completions score: the figures of the prompt part of a longer answer');
  try {
    await client.completions.create({ ...req, echo: false });
    check(false, 'completions score: max_tokens 0 without echo got a 200');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.param === 'max_tokens',
          `completions score: without echo a BadRequestError naming max_tokens (${e && e.param})`);
  }
});

// q3t: a qwen3 reasoning model (Thinking-2507's template: the answer starts
// in its reasoning); a bias on "</think>" (id 499) ends the reasoning soon
await step('reasoning: reasoning_content, content and reasoning_tokens', async () => {
  const req = { model: 'q3t', max_tokens: 40, seed: 2, temperature: 1,
                logit_bias: { 499: 4 }, messages: [{ role: 'user', content: 'Q' }] };
  const r = await client.chat.completions.create(req);
  const m = r.choices[0].message;
  check(typeof m.reasoning_content === 'string' || m.reasoning_content === undefined,
        'reasoning: reasoning_content is a string when present');
  const rt = r.usage.completion_tokens_details && r.usage.completion_tokens_details.reasoning_tokens;
  check(Number.isInteger(rt) && rt > 0 && rt <= r.usage.completion_tokens,
        `reasoning: reasoning_tokens ${rt} of ${r.usage.completion_tokens}`);
  // split at the first </think> (this biased model writes more of them,
  // which are content)
  check(!(m.reasoning_content || '').includes('</think>'),
        'reasoning: no </think> in the reasoning');
  let rs = '', cs = '', usage = null;
  const stream = await client.chat.completions.create({ ...req, stream: true,
    stream_options: { include_usage: true } });
  for await (const ch of stream) {
    const d = ch.choices[0] && ch.choices[0].delta;
    if (d && d.reasoning_content) rs += d.reasoning_content;
    if (d && d.content) cs += d.content;
    if (ch.usage) usage = ch.usage;
  }
  check(rs === (m.reasoning_content || '') && cs === (m.content || ''),
        'reasoning stream: the deltas equal the answer\'s parts');
  check(usage && usage.completion_tokens_details.reasoning_tokens === rt,
        'reasoning stream: the same reasoning_tokens');
});

await step('reasoning: reasoning_effort none with json_object', async () => {
  const r = await client.chat.completions.create({
    model: 'q3t', max_tokens: 40, seed: 1, reasoning_effort: 'none',
    response_format: { type: 'json_object' }, messages: [{ role: 'user', content: 'Q' }] });
  const m = r.choices[0].message;
  check(m.reasoning_content === undefined && (m.content || '').startsWith('{'),
        'reasoning_effort none: no reasoning, JSON from the first token');
});

await step('reasoning: the Responses API gives a reasoning item', async () => {
  const r = await client.responses.create({ model: 'q3t', input: 'Q', max_output_tokens: 16 });
  check(r.output.length > 0 && r.output[0].type === 'reasoning' &&
        r.output[0].content[0].type === 'reasoning_text',
        `responses: a reasoning item first (${r.output.map((o) => o.type).join(',')})`);
  check(r.usage.output_tokens_details.reasoning_tokens > 0, 'responses: reasoning_tokens');
  // reasoning.effort none closes the reasoning in the prompt, as
  // reasoning_effort does: no reasoning item, no reasoning tokens
  const n = await client.responses.create({ model: 'q3t', input: 'Q', max_output_tokens: 16,
                                           reasoning: { effort: 'none', summary: 'auto' } });
  check(n.output.every((o) => o.type !== 'reasoning') &&
        n.usage.output_tokens_details.reasoning_tokens === 0 &&
        n.reasoning.effort === 'none' && n.reasoning.summary === 'auto',
        `responses: reasoning.effort none (${n.output.map((o) => o.type).join(',')}, echoed ${JSON.stringify(n.reasoning)})`);
  try {
    await client.responses.create({ model: 'q3t', input: 'Q', max_output_tokens: 4,
                                    reasoning: { effort: 'low', summary: 'detailed' } });
    check(false, 'responses: reasoning.summary detailed got a 200');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.param === 'reasoning.summary',
          `responses: reasoning.summary detailed refused by name (${e.param})`);
  }
});

// oss: gpt-oss's harmony format; the reasoning level is named in the
// system message, a call and its result go back as harmony's messages
await step('harmony: reasoning_effort, a call and its result', async () => {
  for (const effort of ['low', 'high', 'none']) {
    const r = await client.chat.completions.create({
      model: 'oss', max_tokens: 8, seed: 3, reasoning_effort: effort,
      messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }] });
    check(r.choices.length === 1 && r.usage.prompt_tokens > 50,
          `harmony: reasoning_effort ${effort} answered (${r.usage.prompt_tokens} prompt tokens)`);
  }
  const r = await client.chat.completions.create({
    model: 'oss', max_tokens: 300, seed: 4, tools: [weather], tool_choice: 'auto',
    messages: [
      { role: 'user', content: 'Weather in Oslo?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"Oslo","days":1}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: 'cold' }] });
  const c = r.choices[0];
  check(['stop', 'tool_calls', 'length'].includes(c.finish_reason),
        `harmony: the answer after a result (${c.finish_reason})`);
  check(!(c.message.content || '').startsWith('final'), 'harmony: no channel marker in the content');
  try {
    await client.chat.completions.create({ model: 'oss', max_tokens: 4,
      messages: [{ role: 'user', content: 'Hi' }, { role: 'tool', tool_call_id: 'x', content: '1' }] });
    check(false, 'harmony: a result without a call got a 200');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.param === 'messages[1]',
          `harmony: a result without a call refused (${e.param})`);
  }
  try {
    await client.chat.completions.create({ model: 'oss', max_tokens: 4, reasoning_effort: 'huge',
      messages: [{ role: 'user', content: 'Hi' }] });
    check(false, 'harmony: reasoning_effort huge got a 200');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.param === 'reasoning_effort',
          `harmony: reasoning_effort huge refused (${e.param})`);
  }
});

for (const [param, extra] of [['top_logprobs', { top_logprobs: 2 }],
                              ['logit_bias', { logit_bias: { 'x': 1 } }],
                              ['n', { n: 9 }]]) {
  await step(`refused: ${param}`, async () => {
    try {
      await client.chat.completions.create({
        model: 'local', max_tokens: 4, messages: [{ role: 'user', content: 'Hi' }], ...extra });
      check(false, `refused: ${param}: got a 200`);
    } catch (e) {
      check(e instanceof OpenAI.BadRequestError, `refused: ${param}: BadRequestError (${e && e.constructor.name})`);
      check(e.param === param || (e.message || '').includes(param), `refused: ${param}: names the parameter (${e.param})`);
      check(typeof e.requestID === 'string' && e.requestID.length > 0, `refused: ${param}: request id`);
    }
  });
}

console.log(failed ? `${failed} checks failed` : 'all checks passed');
process.exit(failed);
