// The official openai npm SDK as a real client of llmux (driven by
// tests/test_sdk_openai_e2e.c, which starts llmux in front of
// tests/fake_provider and the local engine).  Every check prints a line;
// the exit status is the number of failed checks (0 = all passed).
//
// env: LLMUX_URL (http://127.0.0.1:PORT/v1), LLMUX_KEY (a valid llmux key)
import OpenAI from 'openai';

const baseURL = process.env.LLMUX_URL;
const apiKey = process.env.LLMUX_KEY;
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
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
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: {
    type: 'object',
    properties: { city: { type: 'string' } },
    required: ['city'],
    additionalProperties: false,
  },
  strict: true,
};

await step('chat non-stream', async () => {
  const { data, response, request_id } = await client.chat.completions
    .create({ model: 'gpt-4.1', messages: [{ role: 'user', content: 'Hello' }] })
    .withResponse();
  check(data.choices[0].message.content === 'Hello from fake provider', 'chat: content');
  check(data.usage.prompt_tokens === 9, 'chat: usage.prompt_tokens');
  check(response.headers.get('x-llmux-provider') === 'oa', 'chat: x-llmux-provider');
  check(typeof request_id === 'string' && request_id.length > 0, 'chat: request id');
});

await step('local refusal failed over', async () => {
  // a route with the local engine first: what it does not implement goes
  // to the next target (README "Failover"), streamed and not
  const body = {
    model: 'lfirst',
    messages: [{ role: 'user', content: 'Hello' }],
    web_search_options: {},
  };
  const { data, response } = await client.chat.completions.create(body).withResponse();
  check(data.choices[0].message.content === 'Hello from fake provider', 'refusal: the next target answers');
  check(response.headers.get('x-llmux-provider') === 'oa', 'refusal: x-llmux-provider oa');
  check(response.headers.get('x-llmux-attempts') === '2', 'refusal: two attempts');
  const s = await client.chat.completions.create({ ...body, stream: true }).withResponse();
  let text = '';
  for await (const chunk of s.data) text += chunk.choices[0]?.delta?.content ?? '';
  check(text === 'Hello from fake provider', 'refusal stream: the next target answers');
  check(s.response.headers.get('x-llmux-attempts') === '2', 'refusal stream: two attempts');
  // the local engine alone: its 400 names the parameter
  try {
    await client.chat.completions.create({ ...body, model: 'local@local' });
    check(false, 'refusal alone: no error');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.code === 'unsupported_parameter' &&
          e.param === 'web_search_options', 'refusal alone: BadRequestError naming the parameter');
  }
});

await step('chat stream', async () => {
  const stream = await client.chat.completions.create({
    model: 'gpt-4.1',
    messages: [{ role: 'user', content: 'Hello' }],
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta?.content) text += chunk.choices[0].delta.content;
    if (chunk.usage) usage = chunk.usage;
  }
  check(text === 'Hello from fake provider', 'chat stream: text');
  check(usage && usage.prompt_tokens === 9 && usage.completion_tokens === 4,
        'chat stream: usage chunk (include_usage)');
});

await step('typed errors', async () => {
  const bad = new OpenAI({ baseURL, apiKey: 'sk-llmux-' + 'x'.repeat(43), maxRetries: 0 });
  try {
    await bad.chat.completions.create({ model: 'gpt-4.1', messages: [{ role: 'user', content: 'x' }] });
    check(false, '401: no error');
  } catch (e) {
    check(e instanceof OpenAI.AuthenticationError, '401: AuthenticationError');
    check(e.status === 401, '401: status');
    check(typeof e.requestID === 'string' && e.requestID.length > 0, '401: requestID from x-request-id');
  }
  try {
    await client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] });
    check(false, '404: no error');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError, '404: NotFoundError');
    check(e.code === 'model_not_found' && e.param === 'model', '404: code and param');
    check(typeof e.requestID === 'string' && e.requestID.length > 0, '404: requestID');
  }
  try {
    await client.responses.create({ model: 'gpt-4.1', input: 'x', previous_response_id: 'resp_1' });
    check(false, 'previous_response_id: no error');
  } catch (e) {
    check(e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id',
          'previous_response_id: BadRequestError naming it');
  }
});

for (const model of ['gpt-4.1', 'claude-sonnet-4.5', 'gemini-2.5-flash', 'local']) {
  await step(`responses.create ${model}`, async () => {
    const r = await client.responses.create({
      model,
      instructions: 'Tell a story.',
      input: 'Once upon a time',
      max_output_tokens: 16,
    });
    check(r.object === 'response' && r.id.startsWith('resp_'), `responses ${model}: object`);
    check(typeof r.output_text === 'string' && r.output_text.length > 0, `responses ${model}: output_text`);
    check(r.usage.input_tokens > 0 && r.usage.total_tokens ===
          r.usage.input_tokens + r.usage.output_tokens, `responses ${model}: usage`);
  });
}

// strict: true is an ask the native kinds cannot honour (they refuse it
// with a 400 naming it); strict: false is the default there.
const weatherLoose = { ...weather, strict: false };

for (const model of ['gpt-4.1', 'claude-sonnet-4.5', 'gemini-2.5-flash']) {
  const tool = model === 'gpt-4.1' ? weather : weatherLoose;
  await step(`responses tool ${model}`, async () => {
    const input = [{ role: 'user', content: 'fake:tool=get_weather' }];
    const r = await client.responses.create({ model, input, tools: [tool] });
    const call = r.output.find((i) => i.type === 'function_call');
    check(call && call.name === 'get_weather', `tool ${model}: function_call item`);
    check(call && JSON.parse(call.arguments).city === 'Paris', `tool ${model}: arguments`);
    if (!call) return;
    // the round trip: the call and its output go back as input items
    const r2 = await client.responses.create({
      model,
      tools: [tool],
      input: [...input, call, { type: 'function_call_output', call_id: call.call_id, output: 'sunny' }],
    });
    check(r2.output_text.length > 0, `tool ${model}: answer after function_call_output`);
  });

  await step(`responses.stream tool ${model}`, async () => {
    const stream = client.responses.stream({
      model,
      input: 'fake:tool=get_weather',
      tools: [tool],
    });
    let args = '';
    const types = new Set();
    stream.on('response.function_call_arguments.delta', (e) => { args += e.delta; });
    stream.on('event', (e) => types.add(e.type));
    const final = await stream.finalResponse();
    const call = final.output.find((i) => i.type === 'function_call');
    check(args === '{"city":"Paris"}', `stream ${model}: arguments deltas`);
    check(call && call.arguments === '{"city":"Paris"}' && call.call_id, `stream ${model}: final function_call`);
    for (const t of ['response.created', 'response.in_progress', 'response.output_item.added',
      'response.function_call_arguments.done', 'response.output_item.done', 'response.completed'])
      check(types.has(t), `stream ${model}: ${t}`);
  });
}

await step('responses reasoning', async () => {
  // the anthropic kind's thinking blocks come back as a reasoning item
  const r = await client.responses.create({ model: 'claude-sonnet-4.5', input: 'fake:thoughts=6' });
  const rs = r.output[0];
  check(rs.type === 'reasoning' && rs.content[0].type === 'reasoning_text' &&
        rs.content[0].text.length > 0, 'reasoning: item');
  check(r.output_text.length > 0, 'reasoning: output_text after it');
  const stream = client.responses.stream({ model: 'claude-sonnet-4.5', input: 'fake:thoughts=6' });
  let thought = '';
  stream.on('response.reasoning_text.delta', (e) => { thought += e.delta; });
  const final = await stream.finalResponse();
  check(final.output[0].type === 'reasoning' && final.output[0].content[0].text === thought &&
        thought === rs.content[0].text, 'reasoning stream: deltas = final item');
});

await step('responses.stream text', async () => {
  const stream = client.responses.stream({ model: 'gpt-4.1', input: 'Hello' });
  let text = '';
  stream.on('response.output_text.delta', (e) => { text += e.delta; });
  const final = await stream.finalResponse();
  check(text === 'Hello from fake provider', 'stream text: deltas');
  check(final.output_text === text, 'stream text: final output_text');
  check(final.usage && final.usage.input_tokens === 9, 'stream text: usage');
});

await step('embeddings', async () => {
  const e = await client.embeddings.create({ model: 'text-embedding-3-small', input: ['one two', 'three'] });
  check(e.data.length === 2 && e.data[0].embedding.length === 8, 'embeddings: two vectors of 8');
  const f = await client.embeddings.create({
    model: 'text-embedding-3-small', input: ['one two', 'three'], encoding_format: 'float',
  });
  // the SDK asks for base64 by default and decodes it: the same numbers
  check(JSON.stringify(f.data[0].embedding) === JSON.stringify(e.data[0].embedding),
        'embeddings: base64 decodes to the float vector');
  check(e.usage.prompt_tokens === 4, 'embeddings: usage (the fake: bytes / 4 + 1 each)');
});

await step('completions', async () => {
  const c = await client.completions.create({ model: 'instruct', prompt: 'Once upon', max_tokens: 8 });
  check(c.choices[0].text === 'Once upon a time', 'completions: text');
  const s = await client.completions.create({ model: 'instruct', prompt: 'Once upon', stream: true });
  let t = '';
  for await (const chunk of s) t += chunk.choices[0]?.text ?? '';
  check(t === 'Once upon a time', 'completions stream: text');
});

await step('local completions and embeddings', async () => {
  const c = await client.completions.create({ model: 'local', prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  check(c.object === 'text_completion' && c.choices[0].text.length > 0, 'local completions: text');
  check(c.usage.completion_tokens >= 1 && c.usage.completion_tokens <= 8, 'local completions: usage');
  const s = await client.completions.create({
    model: 'local', prompt: 'Once upon a time', max_tokens: 8, temperature: 0, stream: true,
  });
  let t = '';
  for await (const chunk of s) t += chunk.choices[0]?.text ?? '';
  check(t === c.choices[0].text, 'local completions stream: the same greedy text');
  const e = await client.embeddings.create({ model: 'local', input: ['Once upon a time', 'A dog'] });
  const f = await client.embeddings.create({ model: 'local', input: ['Once upon a time', 'A dog'], encoding_format: 'float' });
  const v = e.data[0].embedding;
  const norm = Math.sqrt(v.reduce((a, x) => a + x * x, 0));
  check(e.data.length === 2 && v.length > 8 && Math.abs(norm - 1) < 1e-4, 'local embeddings: two unit vectors');
  check(JSON.stringify(f.data[0].embedding) === JSON.stringify(v), 'local embeddings: base64 decodes to the float vector');
  check(JSON.stringify(e.data[1].embedding) !== JSON.stringify(v), 'local embeddings: inputs differ');
  check(e.usage.prompt_tokens > 2, 'local embeddings: usage');
});

await step('models', async () => {
  const m = await client.models.retrieve('gpt-4.1');
  check(m.id === 'gpt-4.1' && m.object === 'model', 'models.retrieve');
  const t = await client.models.retrieve('gpt-4.1@oa');
  check(t.id === 'gpt-4.1@oa', 'models.retrieve MODEL@PROVIDER');
  const ids = [];
  for await (const x of client.models.list()) ids.push(x.id);
  check(ids.includes('gpt-4.1') && ids.includes('local') && ids.includes('fo'), 'models.list');
  try {
    await client.models.retrieve('no-such-model');
    check(false, 'models.retrieve unknown: no error');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError && e.requestID, 'models.retrieve unknown: NotFoundError');
  }
});

console.log(failed ? `${failed} checks failed` : 'all checks passed');
process.exit(failed);
