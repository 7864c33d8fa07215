// The edge's prompt rules: the token estimate and the prompt's prefix hashes,
// so that Decide is told what the edge would tell it of the same chat request
// (the rules are in the Python client's prompt.py and docs/routing.md; both
// clients are checked against the edge's own figures).

import { createHash } from "node:crypto";

export const MAX_PREFIXES = 32;
const MESSAGE_OVERHEAD = 4;
const PROMPT_OVERHEAD = 3;

/** One prompt prefix: its chain hash and the tokens up to it. */
export interface Prefix {
  hash: bigint;
  tokens: number;
}

/** What Decide is told of a chat request. */
export interface PromptFigures {
  inputTokens: number;
  maxOutputTokens: number;
  prefixes: Prefix[];
}

/** Tokens of a text: its UTF-8 bytes over 4, rounded up. */
export function textTokens(s: string): number {
  return Math.ceil(Buffer.byteLength(s, "utf8") / 4);
}

/** The compact JSON of a value as the caller sends it (JSON.stringify). */
export function compact(v: unknown): string {
  return JSON.stringify(v);
}

/** A content part as the edge writes it: keys sorted, <, > and & escaped (Go's json.Marshal). */
export function canonical(v: unknown): string {
  const sorted = (x: unknown): unknown => {
    if (Array.isArray(x)) return x.map(sorted);
    if (x !== null && typeof x === "object") {
      const o = x as Record<string, unknown>;
      const out: Record<string, unknown> = {};
      for (const k of Object.keys(o).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)))) out[k] = sorted(o[k]);
      return out;
    }
    return x;
  };
  return JSON.stringify(sorted(v))
    .replace(/</g, "\\u003c").replace(/>/g, "\\u003e").replace(/&/g, "\\u0026")
    .replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029");
}

type Message = Record<string, unknown>;

function content(m: Message): [string, string] {
  const c = m.content;
  if (c === undefined || c === null) return ["", ""];
  if (typeof c === "string") return [c, ""];
  if (Array.isArray(c)) {
    let text = "";
    let extra = "";
    for (const part of c) {
      if (part === null || typeof part !== "object" || typeof part.type !== "string") {
        throw new TypeError("a content part must be an object with a string type");
      }
      if (part.type !== "text") {
        extra += canonical(part);
        continue;
      }
      if (typeof part.text !== "string") throw new TypeError("a text part needs a string text");
      text += part.text;
    }
    return [text, extra];
  }
  throw new TypeError("content must be a string or an array of parts");
}

function u64(b: Buffer): bigint {
  return b.readBigUInt64BE(0);
}

/** The token estimate and prefixes of an OpenAI chat completions body. */
export function figures(body: Record<string, unknown>): PromptFigures {
  const msgs = body.messages;
  if (!Array.isArray(msgs) || msgs.length === 0) throw new TypeError("messages must be a non-empty array");
  const tools = body.tools;
  const withTools = tools !== undefined && tools !== null;
  const seed = withTools ? compact(tools) : "";
  let prev = createHash("sha256").update(seed, "utf8").digest().subarray(0, 8);
  let cum = PROMPT_OVERHEAD + textTokens(seed);
  const seedPrefix: Prefix = { hash: u64(prev), tokens: cum };
  const hashes: Prefix[] = [];
  let counted = PROMPT_OVERHEAD;
  let system = 0;
  let leading = true;
  msgs.forEach((raw: unknown, i: number) => {
    const m = raw as Message;
    if (m === null || typeof m !== "object" || typeof m.role !== "string") {
      throw new TypeError(`messages[${i}] must be an object with a string role`);
    }
    const role = m.role;
    const name = typeof m.name === "string" ? m.name : "";
    const [text, extra] = content(m);
    if (leading && (role === "system" || role === "developer")) system = i + 1;
    else leading = false;
    const fields = [role, name, text, extra,
      "tool_calls" in m ? compact(m.tool_calls) : "",
      "function_call" in m ? compact(m.function_call) : "",
      typeof m.tool_call_id === "string" ? m.tool_call_id : ""];
    const h = createHash("sha256").update(prev);
    for (const f of fields) {
      const b = Buffer.from(f, "utf8");
      const n = Buffer.alloc(8);
      n.writeBigUInt64BE(BigInt(b.length));
      h.update(n).update(b);
    }
    prev = h.digest().subarray(0, 8);
    const t = MESSAGE_OVERHEAD + textTokens(role) + textTokens(name) + textTokens(text);
    cum += t;
    counted += t;
    hashes.push({ hash: u64(prev), tokens: cum });
  });
  const heads: Prefix[] = withTools ? [seedPrefix] : [];
  let first = Math.max(0, hashes.length - (MAX_PREFIXES - heads.length));
  if (system > 0 && system - 1 < first) {
    heads.push(hashes[system - 1]);
    first = Math.max(0, hashes.length - (MAX_PREFIXES - heads.length));
  }
  let tokens = counted;
  for (const f of ["tools", "response_format"]) {
    if (body[f] !== undefined && body[f] !== null) tokens += textTokens(compact(body[f]));
  }
  const out = body.max_completion_tokens ?? body.max_tokens ?? 0;
  return { inputTokens: tokens, maxOutputTokens: Number(out), prefixes: [...heads, ...hashes.slice(first)] };
}
