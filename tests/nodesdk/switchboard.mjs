// What the node --test scripts of this folder share: where the Switchboard
// under test is (from the environment tests/nodesdk_test.go sets), a fetch
// that counts the HTTP calls an SDK makes, and the providers' own counters.
import assert from 'node:assert/strict';
import { test } from 'node:test';

function required(name) {
  const v = process.env[name];
  assert.ok(v, `${name} is not set: these scripts are run by tests/nodesdk_test.go (go test -run TestNodeSDKs ./tests)`);
  return v;
}

/** The edge's root URL (an Anthropic client's base URL; OpenAI's is this + /v1). */
export const edgeURL = required('SWITCHBOARD_URL');
/** An API key of a tenant without limits. */
export const apiKey = required('SWITCHBOARD_API_KEY');
/** An API key of a tenant limited to one request a second. */
export const pacedKey = required('SWITCHBOARD_PACED_API_KEY');
/** A catalog model served by every simulated provider. */
export const model = required('SWITCHBOARD_MODEL');
/** The edge's --max-attempts: the most provider calls one client request may cost. */
export const maxAttempts = Number(required('SWITCHBOARD_MAX_ATTEMPTS'));
/** The edge's --max-body-bytes. */
export const maxBodyBytes = Number(required('SWITCHBOARD_MAX_BODY_BYTES'));

const spares = required('SWITCHBOARD_SPARE_MODELS').split(',');
const statsURLs = required('SWITCHBOARD_PROVSIM_STATS').split(',');

/**
 * spareModel returns a model no other case of this script uses: the pauses a
 * case's failures leave on its endpoints stay with it.
 */
export function spareModel() {
  const m = spares.shift();
  assert.ok(m, 'no spare model left: raise nodeSpareModels in tests/nodesdk_test.go');
  return m;
}

/**
 * countingFetch is a fetch for an SDK's `fetch` option that counts the HTTP
 * requests the SDK sends, its own retries included.
 */
export function countingFetch() {
  const f = (url, init) => {
    f.calls++;
    return fetch(url, init);
  };
  f.calls = 0;
  return f;
}

/** providerCalls is the number of chat calls every simulated provider has received so far. */
export async function providerCalls() {
  let n = 0;
  for (const url of statsURLs) {
    const resp = await fetch(url);
    assert.equal(resp.status, 200, `GET ${url}`);
    n += (await resp.json()).requests;
  }
  return n;
}

/**
 * measured runs call (an SDK call) and returns what it returned or threw,
 * the HTTP calls the SDK made and the provider calls they cost.
 */
export async function measured(fetch, call) {
  const before = await providerCalls();
  const sent = fetch.calls;
  let result;
  let error;
  try {
    result = await call();
  } catch (e) {
    error = e;
  }
  return { result, error, httpCalls: fetch.calls - sent, providerCalls: (await providerCalls()) - before };
}

/**
 * assertWithinAttempts asserts that a request that failed on every endpoint
 * was not retried by the SDK on top of Switchboard's own attempts.
 */
function assertWithinAttempts(m, what) {
  assert.ok(m.providerCalls >= 1, `${what}: the request reached a provider`);
  assert.ok(
    m.providerCalls <= maxAttempts,
    `${what}: ${m.providerCalls} provider calls in ${m.httpCalls} HTTP calls of the SDK; ` +
      `Switchboard's own attempts allow ${maxAttempts}: the SDK retried what Switchboard had already retried`,
  );
}

/**
 * testRefusals adds a test per refusal of the request itself ({name, call,
 * class, status}): the SDK throws r.class with r.status, checked further by
 * check(err, r), after one HTTP call and no provider call.
 */
export function testRefusals(fetch, refusals, check) {
  for (const r of refusals) {
    test(`refused, not retried: ${r.name}`, async () => {
      const m = await measured(fetch, r.call);
      assert.ok(m.error instanceof r.class, `want ${r.class.name}, got ${m.error}`);
      assert.equal(m.error.status, r.status);
      check(m.error, r);
      assert.ok(m.error.requestID, 'the request id is set on errors too');
      assert.equal(m.httpCalls, 1, 'the SDK does not retry it');
      assert.equal(m.providerCalls, 0);
    });
  }
}

/**
 * testFailures adds a test per failure on every endpoint ({name, fault,
 * class, status}): call(text, model) sends text, with the fault's
 * directive, for a spare model; the SDK throws f.class with f.status,
 * checked further by check(err, f), after one HTTP call answered
 * x-should-retry: false and at most Switchboard's attempts in provider calls.
 */
export function testFailures(fetch, failures, call, check) {
  for (const f of failures) {
    test(`failed on every endpoint, not retried by the SDK: ${f.name}`, async () => {
      const m = await measured(fetch, () => call(`[[provsim:fault=${f.fault}]] hi`, spareModel()));
      assert.ok(m.error instanceof f.class, `want ${f.class.name}, got ${m.error}`);
      assert.equal(m.error.status, f.status);
      check(m.error, f);
      assertWithinAttempts(m, f.name);
      assert.equal(m.error.headers.get('x-should-retry'), 'false', 'the answer says no retry can help');
      assert.equal(m.httpCalls, 1, 'the SDK did not retry it');
    });
  }
}

/**
 * testShortRetryAfter adds the test of a short Retry-After: call(text) asks
 * as the paced tenant and returns the answer's text. Its second request
 * within a second is refused with Retry-After: 1, which the SDK waits out
 * and then is served.
 */
export function testShortRetryAfter(fetch, call) {
  test('a short Retry-After of the caller own limit: retried by the SDK, and served', async () => {
    // The first request takes the second's only slot (the SDK may have
    // waited for it, if a slot was still taken).
    const first = await measured(fetch, () => call('hi'));
    assert.ifError(first.error);
    assert.equal(first.providerCalls, 1);
    const second = await measured(fetch, () => call('again'));
    assert.ifError(second.error);
    assert.equal(second.result, 'again again again again again again ');
    assert.equal(second.httpCalls, 2, 'refused once with a short Retry-After, then served');
    assert.equal(second.providerCalls, 1, 'the refusal cost no provider call');
  });
}

/**
 * openAIErrorFields checks an openai SDK error against a case's type, param
 * and code (each when the case names it), and the case's own check.
 */
export function openAIErrorFields(err, want) {
  assert.ok(err.error?.message, 'the body is OpenAI error JSON');
  if (want.type) assert.equal(err.type, want.type);
  if (want.param) assert.equal(err.param, want.param);
  if (want.code) assert.equal(err.code, want.code);
  want.check?.(err);
}
