// Router.call against a running decider and provider simulator, started by
// the Go test TestClients, which then reads the decider's reservations,
// statistics and activity. The environment names them (see the Python
// client's tests/test_system.py for the list).

import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { create } from "@bufbuild/protobuf";
import {
  Attempt, DeadlineExceeded, PermissionDenied, ProviderError, RateLimited, Router, Unauthenticated, usageFromOpenAI,
} from "../src/index.js";
import { ListModelsRequestSchema } from "../src/gen/switchboard/v1/router_pb.js";

const env = process.env;
const results: Record<string, string> = {};
let router: Router;
const tenant = () => Router.identity({ tenantId: env.SWITCHBOARD_TENANT! });
const alpha = { order: ["alpha"] };

/** Calls the endpoint with fetch (any HTTP client will do) and reads the answer. */
async function send(a: Attempt): Promise<string> {
  const resp = await fetch(a.url, { method: "POST", headers: a.headers, body: a.json, signal: a.signal });
  if (!resp.ok) throw new ProviderError(resp.status, (await resp.text()).slice(0, 200), Object.fromEntries(resp.headers));
  if (!a.stream) {
    const answer: any = await resp.json();
    a.usage = usageFromOpenAI(answer.usage);
    return answer.choices[0].message.content;
  }
  let text = "";
  let buf = "";
  const decoder = new TextDecoder();
  for await (const bytes of resp.body!) {
    buf += decoder.decode(bytes as Uint8Array, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
      const chunk = JSON.parse(line.slice(6));
      for (const c of chunk.choices ?? []) {
        if (c.delta?.content) {
          a.firstToken();
          text += c.delta.content;
        }
      }
      if (chunk.usage) a.usage = usageFromOpenAI(chunk.usage);
    }
  }
  return text;
}

const body = (stream = false) => ({
  model: env.SWITCHBOARD_MODEL!, stream, max_tokens: 16,
  messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Hello there" }],
});

before(() => {
  router = new Router({ target: env.SWITCHBOARD_DECIDER!, tokenFile: env.SWITCHBOARD_TOKEN_FILE! });
});

after(() => {
  writeFileSync(env.SWITCHBOARD_RESULTS!, JSON.stringify(results));
});

test("answer", async () => {
  const r = await router.call(body(), send, tenant(), { provider: alpha });
  assert.ok(r.value);
  assert.equal(r.provider, "alpha");
  assert.equal(r.attempts, 1);
  assert.ok(r.usage!.outputTokens > 0);
  assert.ok(r.costUsd > 0);
  results.answer = r.requestId;
});

test("stream", async () => {
  const r = await router.call(body(true), send, tenant(), { provider: alpha });
  assert.ok(r.value);
  assert.ok(r.usage!.outputTokens > 0);
  results.stream = r.requestId;
});

test("fallback", async () => {
  const r = await router.call(body(true), send, tenant(), { provider: { order: ["down", "alpha"] } });
  assert.equal(r.provider, "alpha", "the endpoint that refused connections was left for the next");
  assert.equal(r.attempts, 2);
  results.fallback = r.requestId;
});

test("caller crashes mid-stream", async () => {
  const crash = async (a: Attempt): Promise<string> => {
    const resp = await fetch(a.url, { method: "POST", headers: a.headers, body: a.json });
    for await (const bytes of resp.body!) {
      if (new TextDecoder().decode(bytes as Uint8Array).includes("data: {")) {
        a.firstToken();
        throw new Error("the caller's code failed mid-stream");
      }
    }
    throw new Error("no chunk arrived");
  };
  await assert.rejects(router.call(body(true), crash, tenant(), { provider: alpha }), /mid-stream/);
  results.crash = "crashed";
});

test("deadline", async () => {
  // A provider that never answers: the request's deadline aborts the attempt, and it is still reported.
  const hang = (a: Attempt) => new Promise<string>((_, reject) => {
    const never = setTimeout(() => reject(new Error("the deadline never aborted the attempt")), 30_000);
    a.signal!.addEventListener("abort", () => {
      clearTimeout(never);
      reject(a.signal!.reason);
    });
  });
  await assert.rejects(router.call(body(), hang, tenant(), { provider: alpha, timeoutMs: 1000 }), DeadlineExceeded);
});

test("refusal", async () => {
  const paced = Router.identity({ tenantId: env.SWITCHBOARD_PACED_TENANT! });
  const first = await router.call(body(), send, paced, { provider: alpha });
  results.paced = first.requestId;
  await assert.rejects(router.call(body(), send, paced, { provider: alpha }), (e: unknown) => {
    assert.ok(e instanceof RateLimited, String(e));
    assert.equal(e.refusalCode, "rate_limit");
    assert.ok(e.retryable);
    assert.ok((e.retryAfterMs ?? 0) > 0);
    return true;
  });
});

test("another tenant is refused", async () => {
  await assert.rejects(router.call(body(), send, Router.identity({ tenantId: "globex" })), PermissionDenied);
});

test("a missing identity is named", async () => {
  await assert.rejects(router.rpc.listModels(create(ListModelsRequestSchema, {})), (e: any) => {
    assert.match(String(e.message), /identity\.tenant_id/);
    return true;
  });
  // The typed form of the same refusal.
  await assert.rejects(router.decide(body(), create((await import("../src/gen/switchboard/v1/router_pb.js")).IdentitySchema, {})), Unauthenticated);
});

test("lower-level client", async () => {
  const models = await router.rpc.listModels({ identity: tenant() });
  assert.ok(models.models.some((m) => m.id === env.SWITCHBOARD_MODEL));
});
