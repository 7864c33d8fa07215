// @anthropic-ai/sdk, at its default settings (two retries), against the
// edge's Messages API.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import {
  apiKey,
  countingFetch,
  edgeURL,
  maxBodyBytes,
  model,
  pacedKey,
  spareModel,
  testFailures,
  testRefusals,
  testShortRetryAfter,
} from './switchboard.mjs';

const fetch = countingFetch();
// The edge's root, as ANTHROPIC_BASE_URL is: the client adds /v1.
const client = new Anthropic({ baseURL: edgeURL, apiKey, fetch });

const ask = (text, extra = {}) => ({
  model,
  max_tokens: 6,
  messages: [{ role: 'user', content: text }],
  ...extra,
});

test('messages.create: a message, its id the edge request id', async () => {
  const { data: msg, response } = await client.messages
    .create(ask('tell me about routing', { system: 'You are terse.' }))
    .withResponse();
  const requestID = response.headers.get('request-id');
  assert.equal(msg.id, 'msg_' + requestID.replace(/^gen-/, ''));
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.model, model);
  assert.equal(msg.content.length, 1);
  assert.equal(msg.content[0].type, 'text');
  // The simulator echoes the last user message, one word per token.
  assert.equal(msg.content[0].text, 'tell me about routing tell me ');
  assert.equal(msg.stop_reason, 'max_tokens');
  assert.equal(msg.usage.output_tokens, 6);
  assert.ok(msg.usage.input_tokens > 0);
});

test('messages.stream: the event sequence and the message it accumulates', async () => {
  const stream = client.messages.stream(ask('one two three'));
  const types = [];
  let text = '';
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
  }
  const msg = await stream.finalMessage();
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(types.filter((t) => t === 'content_block_delta').length, 6, 'one delta per token');
  assert.equal(text, 'one two three one two three ');
  assert.equal(msg.content[0].text, text);
  assert.equal(msg.stop_reason, 'max_tokens');
  assert.equal(msg.usage.output_tokens, 6);
});

test('messages.create with stream: true: the raw events', async () => {
  const stream = await client.messages.create(ask('hello', { stream: true, max_tokens: 3 }));
  const types = [];
  for await (const ev of stream) types.push(ev.type);
  assert.deepEqual(
    types.filter((t) => t !== 'ping'),
    ['message_start', 'content_block_start', 'content_block_delta', 'content_block_delta', 'content_block_delta',
      'content_block_stop', 'message_delta', 'message_stop'],
  );
});

const tools = [
  {
    name: 'read_file',
    description: 'reads a file',
    input_schema: { type: 'object', properties: { word: { type: 'string' } } },
  },
];

test('tools: a tool_use turn, streamed and not, then the tool result turn gets text', async () => {
  const first = { role: 'user', content: 'open [[provsim:tool=read_file]]' };
  const params = { model, max_tokens: 2, tools, tool_choice: { type: 'auto' }, messages: [first] };

  const msg = await client.messages.create(params);
  assert.equal(msg.stop_reason, 'tool_use');
  assert.equal(msg.content.length, 2);
  assert.equal(msg.content[0].type, 'text');
  const call = msg.content[1];
  assert.equal(call.type, 'tool_use');
  assert.equal(call.name, 'read_file');
  assert.ok(call.id);
  assert.deepEqual(call.input, { word: 'open' });

  // Streamed, the SDK rebuilds the call's input from its input_json_delta events.
  const streamed = await client.messages.stream(params).finalMessage();
  assert.equal(streamed.stop_reason, 'tool_use');
  assert.equal(streamed.content.at(-1).type, 'tool_use');
  assert.equal(streamed.content.at(-1).name, 'read_file');
  assert.deepEqual(streamed.content.at(-1).input, { word: 'open' });

  const answer = await client.messages.create({
    ...params,
    messages: [
      first,
      { role: 'assistant', content: msg.content },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: call.id, content: 'package main' },
          { type: 'text', text: 'now explain' },
        ],
      },
    ],
  });
  assert.equal(answer.stop_reason, 'max_tokens');
  assert.equal(answer.content.length, 1);
  assert.equal(answer.content[0].type, 'text');
  assert.equal(answer.content[0].text, 'now explain ');
});

// Refusals of the request itself: the SDK does not retry them, and no
// provider is called.
const refusals = [
  {
    name: 'an unknown API key: AuthenticationError',
    call: () => new Anthropic({ baseURL: edgeURL, apiKey: 'sk-not-a-key', fetch }).messages.create(ask('hi')),
    class: Anthropic.AuthenticationError,
    status: 401,
    type: 'authentication_error',
  },
  {
    name: 'a request the Messages API refuses: BadRequestError',
    call: () => client.messages.create(ask('hi', { temperature: 7 })),
    class: Anthropic.BadRequestError,
    status: 400,
    type: 'invalid_request_error',
    message: /temperature/,
  },
  {
    name: 'an unknown model: NotFoundError',
    call: () => client.messages.create(ask('hi', { model: 'vendor/no-such-model' })),
    class: Anthropic.NotFoundError,
    status: 404,
    type: 'not_found_error',
    message: /vendor\/no-such-model/,
  },
  {
    name: 'a workload class the tenant may not use: PermissionDeniedError',
    call: () => client.messages.create(ask('hi'), { headers: { 'X-Switchboard-Workload': 'partner' } }),
    class: Anthropic.PermissionDeniedError,
    status: 403,
    type: 'permission_error',
    message: /partner/,
  },
  {
    name: 'a body above the edge limit: ContentTooLargeError',
    call: () => client.messages.create(ask('x'.repeat(maxBodyBytes + 1024))),
    class: Anthropic.ContentTooLargeError,
    status: 413,
    type: 'request_too_large',
  },
];

testRefusals(fetch, refusals, (err, r) => {
  assert.equal(err.type, r.type);
  assert.equal(err.error?.type, 'error', 'the body is Anthropic error JSON');
  assert.equal(err.error?.error?.type, r.type);
  if (r.message) assert.match(err.apiMessage, r.message);
});

// Failures on every endpoint: Switchboard has already tried each endpoint
// (and retried within its budget), so the SDK must not multiply that.
const failures = [
  {
    name: 'every provider rate-limits: RateLimitError with retry-after',
    fault: 'rate_limit',
    class: Anthropic.RateLimitError,
    status: 429,
    type: 'rate_limit_error',
    check: (err) => assert.ok(Number(err.headers.get('retry-after')) > 0, 'retry-after in seconds'),
  },
  {
    name: 'every provider is overloaded: OverloadedError 529',
    fault: 'overloaded',
    class: Anthropic.OverloadedError,
    status: 529,
    type: 'overloaded_error',
  },
  {
    name: 'the same 500 from two providers: InternalServerError',
    fault: 'unavailable',
    class: Anthropic.InternalServerError,
    status: 500,
    type: 'api_error',
  },
  {
    name: 'no first token on any attempt: GatewayTimeoutError 504',
    fault: 'hang',
    class: Anthropic.GatewayTimeoutError,
    status: 504,
    type: 'timeout_error',
  },
];

testFailures(
  fetch,
  failures,
  (text, model) => client.messages.create(ask(text, { model })),
  (err, f) => {
    assert.equal(err.type, f.type);
    assert.equal(err.error?.error?.type, f.type);
    f.check?.(err);
  },
);

const paced = new Anthropic({ baseURL: edgeURL, apiKey: pacedKey, fetch });
testShortRetryAfter(fetch, async (text) => (await paced.messages.create(ask(text))).content[0].text);

test('a stream cut after its first tokens: the SDK reports the error event', async () => {
  const stream = client.messages.stream(ask('[[provsim:fault=drop]] one two three four', { model: spareModel() }));
  const types = [];
  await assert.rejects(
    async () => {
      for await (const ev of stream) types.push(ev.type);
    },
    (err) => {
      assert.ok(err instanceof Anthropic.APIError, `want an APIError, got ${err}`);
      assert.match(String(err.message), /api_error|interrupted/);
      return true;
    },
  );
  assert.ok(types.includes('content_block_delta'), 'the stream had begun');
  assert.ok(!types.includes('message_stop'));
});
