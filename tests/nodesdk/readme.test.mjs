// The Node examples of the README's "Official SDKs" section, run as they
// are written but for the edge's address, key and model.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { apiKey, edgeURL, model } from './switchboard.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const readme = await readFile(new URL('../../README.md', import.meta.url), 'utf8');
const start = readme.indexOf('\n### Official SDKs\n');
assert.ok(start >= 0, 'README.md has an "Official SDKs" section');
const section = readme.slice(start + 1, readme.indexOf('\n### ', start + 1));
const examples = [...section.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);

// What each example prints: the simulator echoes the prompt, one word a
// token, 8 tokens by default and max_tokens when it is set.
const cases = [
  {
    sdk: 'openai',
    want: [
      /^(Hello there ){4} (alpha|beta|gamma)$/m,
      /^(Hello there ){4}$/m,
      /^(Hello there ){4} completed$/m,
      /^404 model_not_found gen-\w+$/m,
    ],
  },
  {
    sdk: '@anthropic-ai/sdk',
    want: [/^(Hello there ){32} {\n  input_tokens: \d+/m, /^(Hello there ){32}\nmax_tokens$/m, /^404 not_found_error gen-\w+$/m],
  },
];

test('the README has one Node example per SDK', () => {
  assert.deepEqual(
    examples.map((code) => code.match(/^import \w+ from '([^']+)';/)?.[1]),
    cases.map((c) => c.sdk),
  );
});

for (const c of cases) {
  test(`the README example of ${c.sdk} runs against the edge`, async () => {
    const code = examples
      .find((e) => e.includes(`from '${c.sdk}'`))
      .replaceAll('http://127.0.0.1:8080', edgeURL)
      .replaceAll('sk-sb-demo-…', apiKey)
      .replaceAll('deepseek/deepseek-v4.1-flash', model);
    // Run from this folder, so that the SDKs resolve to its node_modules.
    const { stdout } = await promisify(execFile)(process.execPath, ['--input-type=module', '-e', code], {
      cwd: here,
      timeout: 60_000,
    });
    for (const want of c.want) assert.match(stdout, want);
  });
}
