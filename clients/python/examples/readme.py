"""The README's Python example, run by make test (TestClients) against a decider and provsim."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

# --- readme ---
import json
import urllib.error
import urllib.request

from switchboard_client import Router, ProviderError, RateLimited, Usage


def send(attempt):  # your own HTTP client; here urllib, not streamed
    req = urllib.request.Request(attempt.url, data=attempt.json, headers=attempt.headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            answer = json.load(resp)
    except urllib.error.HTTPError as e:
        raise ProviderError(e.code, headers=dict(e.headers)) from e  # 429/5xx: the next endpoint is tried
    attempt.usage = Usage.from_openai(answer.get("usage"))
    return answer["choices"][0]["message"]["content"]


with Router(os.environ["SWITCHBOARD_DECIDER"], token_file=os.environ["SWITCHBOARD_TOKEN_FILE"]) as router:
    body = {"model": os.environ["SWITCHBOARD_MODEL"], "messages": [{"role": "user", "content": "Hello there"}]}
    try:
        result = router.call(body, send, Router.identity(tenant_id=os.environ["SWITCHBOARD_TENANT"]))
        print(result.value, result.provider, result.cost_usd)
    except RateLimited as e:
        print("refused:", e.refusal_code, "retry after", e.retry_after, "s")
# --- readme ---
