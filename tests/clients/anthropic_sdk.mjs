// The official @anthropic-ai/sdk against llmux's /v1/messages (driven by
// tests/test_sdk_messages_e2e.c, which starts llmux and the fake provider
// and checks the ledger afterwards).  Environment:
//   LLMUX_BASE   http://127.0.0.1:PORT      LLMUX_KEY  an llmux key
//   MODELS       comma-separated models to run every check on
//   TAG          request id prefix (x-request-id: TAG-MODEL-CHECK)
// Prints one "ok NAME" line per passed check; exits 1 at the first
// failure with the reason.
import Anthropic from '@anthropic-ai/sdk';

const base = process.env.LLMUX_BASE;
const key = process.env.LLMUX_KEY;
const tag = process.env.TAG || 'sdk';
const models = (process.env.MODELS || '').split(',').filter(Boolean);

const client = new Anthropic({ apiKey: key, baseURL: base, maxRetries: 0, timeout: 60000 });

function check(cond, what) {
  if (!cond) {
    throw new Error(`check failed: ${what}`);
  }
}

const rid = (model, name) => ({ headers: { 'x-request-id': `${tag}-${model.replace(/[^A-Za-z0-9.-]/g, '_')}-${name}` } });

const weather = {
  name: 'get_weather',
  description: 'The weather of a city',
  input_schema: {
    type: 'object',
    // bounded, so a local model's constrained call ends well inside
    // max_tokens whichever kernels (plain C under the sanitizers) it runs
    properties: { city: { type: 'string', maxLength: 24 } },
    required: ['city'],
    additionalProperties: false,
  },
};

async function create(model) {
  const msg = await client.messages.create(
    { model, max_tokens: 16, messages: [{ role: 'user', content: 'Once upon a time' }] },
    rid(model, 'create'),
  );
  check(msg.type === 'message' && msg.role === 'assistant', 'a message');
  check(msg.content.length >= 1 && msg.content[0].type === 'text' && msg.content[0].text.length > 0, 'text content');
  check(['end_turn', 'max_tokens'].includes(msg.stop_reason), `stop_reason ${msg.stop_reason}`);
  check(msg.usage.input_tokens > 0 && msg.usage.output_tokens > 0, 'usage');
  console.log(`ok create ${model} ${JSON.stringify(msg.usage)}`);
}

async function stream(model) {
  let text = '';
  const events = [];
  const s = client.messages.stream(
    { model, max_tokens: 16, messages: [{ role: 'user', content: 'Once upon a time' }] },
    rid(model, 'stream'),
  );
  s.on('text', (t) => { text += t; });
  s.on('streamEvent', (e) => { events.push(e.type); });
  const final = await s.finalMessage();
  check(text.length > 0, 'streamed text');
  check(final.content[0].type === 'text' && final.content[0].text === text, 'final message = streamed text');
  check(events[0] === 'message_start' && events[events.length - 1] === 'message_stop', `events ${events.join(' ')}`);
  check(events.includes('content_block_delta') && events.includes('message_delta'), 'deltas');
  check(final.usage.input_tokens > 0 && final.usage.output_tokens > 0, `usage ${JSON.stringify(final.usage)}`);
  console.log(`ok stream ${model} ${events.length} events`);
}

async function tools(model, directive) {
  const first = [{ role: 'user', content: `${directive}What is the weather in Paris?` }];
  const msg = await client.messages.create(
    { model, max_tokens: 200, tools: [weather], tool_choice: { type: 'any' }, messages: first },
    rid(model, 'tool1'),
  );
  const use = msg.content.find((b) => b.type === 'tool_use');
  check(use && use.name === 'get_weather' && typeof use.input === 'object', `tool_use block in ${JSON.stringify(msg.content)}`);
  check(msg.stop_reason === 'tool_use', `stop_reason ${msg.stop_reason}`);
  const second = await client.messages.create(
    {
      model,
      max_tokens: 16,
      tools: [weather],
      messages: [
        ...first,
        { role: 'assistant', content: msg.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'Sunny, 21 C' }] },
      ],
    },
    rid(model, 'tool2'),
  );
  check(second.content.length >= 1, 'an answer to the tool result');
  console.log(`ok tools ${model} ${use.id} -> ${second.stop_reason}`);
}

async function countTokens(model) {
  const r = await client.messages.countTokens({ model, messages: [{ role: 'user', content: 'Hello, world' }] });
  // the estimate (12 bytes / 4 + 4), or the local engine's exact count:
  // the C driver checks the numbers it prints
  check(Number.isInteger(r.input_tokens) && r.input_tokens > 0, `input_tokens ${r.input_tokens}`);
  console.log(`ok count_tokens ${model} ${r.input_tokens}`);
}

async function badKey(model) {
  const bad = new Anthropic({ apiKey: 'sk-llmux-not-a-real-key-000000000000000000000000', baseURL: base, maxRetries: 0 });
  try {
    await bad.messages.create({ model, max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
  } catch (e) {
    check(e instanceof Anthropic.AuthenticationError, `AuthenticationError, got ${e.constructor.name}`);
    check(e.status === 401, `status ${e.status}`);
    check(e.error && e.error.type === 'error' && e.error.error.type === 'authentication_error', `body ${JSON.stringify(e.error)}`);
    console.log('ok bad_key');
    return;
  }
  throw new Error('a bad key was accepted');
}

async function notFound() {
  try {
    await client.messages.create({ model: 'no-such-model', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
  } catch (e) {
    check(e instanceof Anthropic.NotFoundError, `NotFoundError, got ${e.constructor.name}`);
    check(e.error.error.type === 'not_found_error', 'not_found_error');
    console.log('ok not_found');
    return;
  }
  throw new Error('an unknown model was served');
}

try {
  for (const m of models) {
    const [model, directive] = m.split('|');
    await create(model);
    await stream(model);
    await tools(model, directive || '');
    await countTokens(model);
  }
  await badKey(models[0].split('|')[0]);
  await notFound();
  console.log('all ok');
} catch (e) {
  console.log(`FAILED: ${e.stack || e}`);
  process.exit(1);
}
