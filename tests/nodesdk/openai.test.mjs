// openai, at its default settings (two retries), against the edge's chat
// completions API.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import {
  apiKey,
  countingFetch,
  edgeURL,
  maxBodyBytes,
  model,
  openAIErrorFields,
  pacedKey,
  spareModel,
  testFailures,
  testRefusals,
  testShortRetryAfter,
} from './switchboard.mjs';

const fetch = countingFetch();
const baseURL = edgeURL + '/v1';
const client = new OpenAI({ baseURL, apiKey, fetch });

const ask = (text, extra = {}) => ({
  model,
  max_tokens: 6,
  messages: [{ role: 'user', content: text }],
  ...extra,
});

test('chat.completions.create: a completion, its id the request id, the provider named', async () => {
  const { data: c, response } = await client.chat.completions
    .create(ask('tell me about routing', { provider: { only: ['beta'] } }))
    .withResponse();
  assert.equal(c.id, response.headers.get('x-request-id'));
  assert.equal(c.object, 'chat.completion');
  assert.equal(c.provider, 'beta', 'the routing option reached the edge');
  assert.equal(response.headers.get('x-switchboard-provider'), 'beta');
  assert.equal(c.choices.length, 1);
  assert.equal(c.choices[0].message.role, 'assistant');
  // The simulator echoes the last user message, one word per token.
  assert.equal(c.choices[0].message.content, 'tell me about routing tell me ');
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.equal(c.usage.completion_tokens, 6);
  assert.ok(c.usage.prompt_tokens > 0);
});

test('chat.completions.create with stream: the chunks, usage last', async () => {
  const stream = await client.chat.completions.create(
    ask('one two three', { stream: true, stream_options: { include_usage: true } }),
  );
  let text = '';
  let finish;
  let usage;
  const ids = new Set();
  for await (const chunk of stream) {
    ids.add(chunk.id);
    assert.ok(chunk.provider, 'every chunk names the provider');
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      text += choice.delta.content ?? '';
      finish = choice.finish_reason ?? finish;
    }
  }
  assert.equal(ids.size, 1, 'one completion id');
  assert.equal(text, 'one two three one two three ');
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 6);
});

test('chat.completions.stream: the helper accumulates the completion', async () => {
  const stream = client.chat.completions.stream(ask('hello there', { max_tokens: 3 }));
  const c = await stream.finalChatCompletion();
  assert.equal(c.choices[0].message.content, 'hello there hello ');
  assert.equal(c.choices[0].finish_reason, 'length');
});

const tools = [
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'reads a file',
      parameters: { type: 'object', properties: { word: { type: 'string' } } },
    },
  },
];

test('tools: a tool call turn, streamed and not, then the tool result turn gets text', async () => {
  const first = { role: 'user', content: 'open [[provsim:tool=read_file]]' };
  const params = { model, max_tokens: 2, tools, tool_choice: 'auto', messages: [first] };

  const c = await client.chat.completions.create(params);
  assert.equal(c.choices[0].finish_reason, 'tool_calls');
  const msg = c.choices[0].message;
  assert.equal(msg.tool_calls.length, 1);
  const call = msg.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'read_file');
  assert.ok(call.id);
  assert.deepEqual(JSON.parse(call.function.arguments), { word: 'open' });

  // Streamed, the helper rebuilds the call from its argument pieces.
  const streamed = await client.chat.completions.stream(params).finalChatCompletion();
  assert.equal(streamed.choices[0].finish_reason, 'tool_calls');
  const scall = streamed.choices[0].message.tool_calls[0];
  assert.equal(scall.function.name, 'read_file');
  assert.deepEqual(JSON.parse(scall.function.arguments), { word: 'open' });

  const answer = await client.chat.completions.create({
    ...params,
    messages: [
      first,
      msg,
      { role: 'tool', tool_call_id: call.id, content: 'package main' },
      { role: 'user', content: 'now explain' },
    ],
  });
  assert.equal(answer.choices[0].finish_reason, 'length');
  assert.equal(answer.choices[0].message.content, 'now explain ');
  assert.equal(answer.choices[0].message.tool_calls ?? undefined, undefined);
});

// Refusals of the request itself: the SDK does not retry them, and no
// provider is called.
const refusals = [
  {
    name: 'an unknown API key: AuthenticationError',
    call: () => new OpenAI({ baseURL, apiKey: 'sk-not-a-key', fetch }).chat.completions.create(ask('hi')),
    class: OpenAI.AuthenticationError,
    status: 401,
  },
  {
    name: 'a value out of range: BadRequestError with param and code',
    call: () => client.chat.completions.create(ask('hi', { temperature: 7 })),
    class: OpenAI.BadRequestError,
    status: 400,
    type: 'invalid_request_error',
    param: 'temperature',
    code: 'decimal_above_max_value',
  },
  {
    name: 'a role chat completions do not know: BadRequestError naming the message',
    call: () => client.chat.completions.create({ model, messages: [{ role: 'wizard', content: 'hi' }] }),
    class: OpenAI.BadRequestError,
    status: 400,
    type: 'invalid_request_error',
    param: 'messages[0].role',
    code: 'invalid_value',
  },
  {
    name: 'an unknown model: NotFoundError',
    call: () => client.chat.completions.create(ask('hi', { model: 'vendor/no-such-model' })),
    class: OpenAI.NotFoundError,
    status: 404,
    code: 'model_not_found',
  },
  {
    name: 'constraints no endpoint meets: NotFoundError',
    call: () => client.chat.completions.create(ask('hi', { provider: { max_price: { prompt: 0.01 } } })),
    class: OpenAI.NotFoundError,
    status: 404,
    code: 'no_endpoints_found',
  },
  {
    name: 'a workload class the tenant may not use: PermissionDeniedError',
    call: () => client.chat.completions.create(ask('hi'), { headers: { 'X-Switchboard-Workload': 'partner' } }),
    class: OpenAI.PermissionDeniedError,
    status: 403,
  },
  {
    name: 'a body above the edge limit: APIError 413',
    call: () => client.chat.completions.create(ask('x'.repeat(maxBodyBytes + 1024))),
    class: OpenAI.APIError,
    status: 413,
  },
];

testRefusals(fetch, refusals, openAIErrorFields);

// Failures on every endpoint: Switchboard has already tried each endpoint
// (and retried within its budget), so the SDK must not multiply that. (A
// 504 is the same InternalServerError to this SDK; anthropic.test.mjs
// covers it, as its own class.)
const failures = [
  {
    name: 'every provider rate-limits: RateLimitError with Retry-After',
    fault: 'rate_limit',
    class: OpenAI.RateLimitError,
    status: 429,
    code: 'rate_limit_exceeded',
    check: (err) => assert.ok(Number(err.headers.get('retry-after')) > 0, 'Retry-After in seconds'),
  },
  {
    name: 'every provider is overloaded: InternalServerError 503',
    fault: 'overloaded',
    class: OpenAI.InternalServerError,
    status: 503,
    code: 'provider_overloaded',
  },
  {
    name: 'the same 500 from two providers: InternalServerError 500',
    fault: 'unavailable',
    class: OpenAI.InternalServerError,
    status: 500,
    code: 'request_failed_on_providers',
  },
];

testFailures(
  fetch,
  failures,
  (text, model) => client.chat.completions.create(ask(text, { model })),
  openAIErrorFields,
);

const paced = new OpenAI({ baseURL, apiKey: pacedKey, fetch });
testShortRetryAfter(fetch, async (text) => (await paced.chat.completions.create(ask(text))).choices[0].message.content);

test('a stream cut after its first tokens: the SDK reports the error event', async () => {
  const stream = await client.chat.completions.create(
    ask('[[provsim:fault=drop]] one two three four', { model: spareModel(), stream: true }),
  );
  let text = '';
  await assert.rejects(
    async () => {
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    },
    (err) => {
      assert.ok(err instanceof OpenAI.APIError, `want an APIError, got ${err}`);
      assert.equal(err.error?.code, 'stream_interrupted');
      return true;
    },
  );
  assert.ok(text.length > 0, 'the stream had begun');
});
