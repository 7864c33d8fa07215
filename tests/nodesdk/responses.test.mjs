// openai, at its default settings (two retries), against the edge's
// Responses API.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';
import {
  apiKey,
  countingFetch,
  edgeURL,
  model,
  openAIErrorFields,
  spareModel,
  testFailures,
  testRefusals,
} from './switchboard.mjs';

const fetch = countingFetch();
const baseURL = edgeURL + '/v1';
const client = new OpenAI({ baseURL, apiKey, fetch });

const ask = (input, extra = {}) => ({ model, input, store: false, ...extra });

test('responses.create: a response, its id the request id', async () => {
  const { data: r, response } = await client.responses
    .create(ask('tell me about routing', { instructions: 'You are terse.', max_output_tokens: 16 }))
    .withResponse();
  assert.equal(r.id, 'resp_' + response.headers.get('x-request-id').replace(/^gen-/, ''));
  assert.equal(r.object, 'response');
  assert.equal(r.model, model);
  assert.equal(r.status, 'incomplete', 'the simulator writes max_output_tokens tokens');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.output.length, 1);
  assert.equal(r.output[0].type, 'message');
  assert.equal(r.output[0].content[0].type, 'output_text');
  // The SDK's output_text: the simulator echoes the input, one word per token.
  assert.equal(r.output_text, 'tell me about routing '.repeat(4));
  assert.equal(r.usage.output_tokens, 16);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + 16);
  assert.ok(r.provider, 'the edge names the provider');
});

test('responses.create with stream: the event sequence, numbered from 0', async () => {
  const stream = await client.responses.create(ask('one two three', { max_output_tokens: 16, stream: true }));
  const types = [];
  let text = '';
  let last;
  for await (const ev of stream) {
    assert.equal(ev.sequence_number, types.length);
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    last = ev;
  }
  assert.deepEqual(
    types.filter((t, i) => t !== types[i - 1]),
    ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
      'response.output_text.delta', 'response.output_text.done', 'response.content_part.done',
      'response.output_item.done', 'response.incomplete'],
  );
  assert.equal(text, 'one two three '.repeat(5) + 'one ');
  assert.equal(last.response.status, 'incomplete');
  assert.equal(last.response.output_text ?? last.response.output[0].content[0].text, text);
  assert.equal(last.response.usage.output_tokens, 16);
});

test('responses.stream: the helper checks and accumulates the events into the response', async () => {
  // Without max_output_tokens the simulator ends the answer itself.
  const r = await client.responses.stream(ask([{ role: 'user', content: 'hello there' }])).finalResponse();
  assert.equal(r.status, 'completed');
  assert.equal(r.output_text, 'hello there hello there hello there hello there ');
});

const tools = [
  {
    type: 'function',
    name: 'read_file',
    description: 'reads a file',
    parameters: { type: 'object', properties: { word: { type: 'string' } } },
    strict: false,
  },
];

test('tools: a function call, streamed and not, then the function output turn gets text', async () => {
  const first = { role: 'user', content: 'open [[provsim:tool=read_file]]' };
  const params = ask([first], { tools, tool_choice: 'auto', max_output_tokens: 16 });

  const r = await client.responses.create(params);
  assert.equal(r.status, 'completed');
  assert.deepEqual(r.output.map((o) => o.type), ['message', 'function_call']);
  const call = r.output[1];
  assert.equal(call.name, 'read_file');
  assert.match(call.id, /^fc_/);
  assert.ok(call.call_id);
  assert.equal(call.status, 'completed');
  assert.deepEqual(JSON.parse(call.arguments), { word: 'open' });

  // Streamed, the helper rebuilds the call from its argument deltas.
  const streamed = await client.responses.stream(params).finalResponse();
  const scall = streamed.output.find((o) => o.type === 'function_call');
  assert.equal(scall.name, 'read_file');
  assert.deepEqual(JSON.parse(scall.arguments), { word: 'open' });

  // The output goes back as input with the function's result, as a client
  // that keeps the conversation itself sends it.
  const answer = await client.responses.create(
    ask([first, ...r.output, { type: 'function_call_output', call_id: call.call_id, output: 'package main' },
      { role: 'user', content: 'now explain' }], { tools }),
  );
  assert.equal(answer.status, 'completed');
  assert.deepEqual(answer.output.map((o) => o.type), ['message']);
  assert.match(answer.output_text, /^now explain /);
});

// Refusals of the request itself: the SDK does not retry them, and no
// provider is called.
testRefusals(
  fetch,
  [
    {
      name: 'an unknown API key: AuthenticationError',
      call: () => new OpenAI({ baseURL, apiKey: 'sk-not-a-key', fetch }).responses.create(ask('hi')),
      class: OpenAI.AuthenticationError,
      status: 401,
    },
    {
      name: 'a previous_response_id, as the gateway keeps no responses: BadRequestError',
      call: () => client.responses.create(ask('hi', { previous_response_id: 'resp_abc' })),
      class: OpenAI.BadRequestError,
      status: 400,
      type: 'invalid_request_error',
      param: 'previous_response_id',
    },
    {
      name: 'max_output_tokens below 16: BadRequestError with param and code',
      call: () => client.responses.create(ask('hi', { max_output_tokens: 6 })),
      class: OpenAI.BadRequestError,
      status: 400,
      type: 'invalid_request_error',
      param: 'max_output_tokens',
      code: 'integer_below_min_value',
    },
    {
      name: 'a chat completions parameter: BadRequestError with param and code',
      call: () => client.responses.create(ask('hi', { max_tokens: 20 })),
      class: OpenAI.BadRequestError,
      status: 400,
      type: 'invalid_request_error',
      param: 'max_tokens',
      code: 'unknown_parameter',
    },
    {
      name: 'an unknown model: NotFoundError',
      call: () => client.responses.create(ask('hi', { model: 'vendor/no-such-model' })),
      class: OpenAI.NotFoundError,
      status: 404,
      code: 'model_not_found',
    },
  ],
  openAIErrorFields,
);

// Failures on every endpoint: Switchboard has already tried each endpoint
// (and retried within its budget), so the SDK must not multiply that.
testFailures(
  fetch,
  [
    {
      name: 'every provider rate-limits: RateLimitError',
      fault: 'rate_limit',
      class: OpenAI.RateLimitError,
      status: 429,
      code: 'rate_limit_exceeded',
    },
    {
      name: 'every provider is overloaded: InternalServerError 503',
      fault: 'overloaded',
      class: OpenAI.InternalServerError,
      status: 503,
      code: 'provider_overloaded',
    },
  ],
  (text, model) => client.responses.create(ask(text, { model })),
  openAIErrorFields,
);

test('a stream cut after its first tokens ends with response.failed', async () => {
  const stream = await client.responses.create(
    ask('[[provsim:fault=drop]] one two three four', { model: spareModel(), stream: true }),
  );
  const types = [];
  let last;
  for await (const ev of stream) {
    types.push(ev.type);
    last = ev;
  }
  assert.ok(types.includes('response.output_text.delta'), 'the stream had begun');
  assert.equal(last.type, 'response.failed');
  assert.equal(last.response.status, 'failed');
  assert.equal(last.response.error.code, 'server_error');
});
