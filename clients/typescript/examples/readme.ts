// The README's TypeScript example, run by make test (TestClients) against a
// decider and provsim.

// --- readme ---
import { Attempt, ProviderError, RateLimited, Router, usageFromOpenAI } from "../src/index.js";

async function send(a: Attempt): Promise<string> { // your own HTTP client; here fetch, not streamed
  const resp = await fetch(a.url, { method: "POST", headers: a.headers, body: a.json, signal: a.signal });
  if (!resp.ok) throw new ProviderError(resp.status, await resp.text()); // 429/5xx: the next endpoint is tried
  const answer: any = await resp.json();
  a.usage = usageFromOpenAI(answer.usage);
  return answer.choices[0].message.content;
}

const router = new Router({ target: process.env.SWITCHBOARD_DECIDER!, tokenFile: process.env.SWITCHBOARD_TOKEN_FILE });
const body = { model: process.env.SWITCHBOARD_MODEL!, messages: [{ role: "user", content: "Hello there" }] };
try {
  const result = await router.call(body, send, Router.identity({ tenantId: process.env.SWITCHBOARD_TENANT }));
  console.log(result.value, result.provider, result.costUsd);
} catch (e) {
  if (!(e instanceof RateLimited)) throw e;
  console.log("refused:", e.refusalCode, "retry after", e.retryAfterMs, "ms");
}
// --- readme ---
