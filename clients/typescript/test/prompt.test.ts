// The client's token estimate and prefixes against the edge's own, computed by
// services/edge/cmd/promptfigures over clients/testdata/prompts.json (the Go
// test TestClients writes them to $SWITCHBOARD_PROMPT_FIGURES).

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { figures } from "../src/prompt.js";

test("the same figures as the edge", () => {
  const path = process.env.SWITCHBOARD_PROMPT_FIGURES;
  assert.ok(path, "SWITCHBOARD_PROMPT_FIGURES names the edge's figures (run by go test -run TestClients ./tests)");
  const cases = JSON.parse(readFileSync(new URL("../../../testdata/prompts.json", import.meta.url), "utf8"));
  const want = JSON.parse(readFileSync(path, "utf8"));
  assert.equal(cases.length, want.length);
  cases.forEach((body: Record<string, unknown>, i: number) => {
    const f = figures(body);
    const got = {
      input_tokens: f.inputTokens, max_output_tokens: f.maxOutputTokens,
      prefixes: f.prefixes.map((p) => ({ hash: p.hash.toString(), tokens: p.tokens })),
    };
    assert.deepEqual(got, want[i], `case ${i}`);
  });
});
