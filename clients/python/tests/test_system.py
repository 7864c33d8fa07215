"""Router.call against a running decider and provider simulator (started by the Go
test TestClients, which then reads the decider's reservations, statistics and
activity). The environment names them:

SWITCHBOARD_DECIDER        the decider's host:port
SWITCHBOARD_TOKEN_FILE     this service's bearer token
SWITCHBOARD_TENANT         a tenant it serves
SWITCHBOARD_PACED_TENANT   a tenant allowed one request a minute
SWITCHBOARD_MODEL          a model; its endpoint on provider "down" refuses connections
SWITCHBOARD_RESULTS        where to write the request ids of each case, as JSON
"""

import json
import os
import unittest
import urllib.error
import urllib.request

from switchboard.v1 import router_pb2
from switchboard_client import (PermissionDenied, ProviderError, RateLimited, Router, Unauthenticated, Usage)

ENV = os.environ
RESULTS: dict = {}


def send(attempt):
    """Calls the endpoint with urllib (any HTTP client will do) and reads the answer."""
    req = urllib.request.Request(attempt.url, data=attempt.json, headers=attempt.headers, method="POST")
    try:
        resp = urllib.request.urlopen(req, timeout=10)
    except urllib.error.HTTPError as e:
        raise ProviderError(e.code, e.read().decode("utf-8", "replace")[:200], dict(e.headers)) from e
    except urllib.error.URLError as e:
        raise ConnectionError(str(e.reason)) from e
    with resp:
        if not attempt.stream:
            answer = json.load(resp)
            attempt.usage = Usage.from_openai(answer.get("usage"))
            return answer["choices"][0]["message"]["content"]
        text = []
        for line in resp:
            line = line.decode("utf-8").strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: "):])
            for c in chunk.get("choices") or []:
                if c.get("delta", {}).get("content"):
                    attempt.first_token()
                    text.append(c["delta"]["content"])
            if chunk.get("usage"):
                attempt.usage = Usage.from_openai(chunk["usage"])
        return "".join(text)


def body(stream=False):
    return {"model": ENV["SWITCHBOARD_MODEL"], "stream": stream, "max_tokens": 16,
            "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hello there"}]}


class SystemTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.router = Router(ENV["SWITCHBOARD_DECIDER"], token_file=ENV["SWITCHBOARD_TOKEN_FILE"])
        cls.tenant = Router.identity(tenant_id=ENV["SWITCHBOARD_TENANT"])
        cls.alpha = router_pb2.ProviderPreferences(order=["alpha"])

    @classmethod
    def tearDownClass(cls):
        cls.router.close()
        with open(ENV["SWITCHBOARD_RESULTS"], "w", encoding="utf-8") as f:
            json.dump(RESULTS, f)

    def test_answer(self):
        r = self.router.call(body(), send, self.tenant, provider=self.alpha)
        self.assertTrue(r.value)
        self.assertEqual("alpha", r.provider)
        self.assertEqual(1, r.attempts)
        self.assertGreater(r.usage.output_tokens, 0)
        self.assertGreater(r.cost_usd, 0)
        RESULTS["answer"] = r.request_id

    def test_stream(self):
        r = self.router.call(body(stream=True), send, self.tenant, provider=self.alpha)
        self.assertTrue(r.value)
        self.assertGreater(r.usage.output_tokens, 0)
        RESULTS["stream"] = r.request_id

    def test_fallback(self):
        prefs = router_pb2.ProviderPreferences(order=["down", "alpha"])
        r = self.router.call(body(stream=True), send, self.tenant, provider=prefs)
        self.assertEqual("alpha", r.provider, "the endpoint that refused connections was left for the next")
        self.assertEqual(2, r.attempts)
        RESULTS["fallback"] = r.request_id

    def test_caller_crashes_mid_stream(self):
        seen = {}

        def crash(attempt):
            seen["request"] = attempt
            req = urllib.request.Request(attempt.url, data=attempt.json, headers=attempt.headers, method="POST")
            with urllib.request.urlopen(req, timeout=10) as resp:
                for line in resp:
                    if line.startswith(b"data: {"):
                        attempt.first_token()
                        raise RuntimeError("the caller's code failed mid-stream")
            self.fail("no chunk arrived")

        with self.assertRaisesRegex(RuntimeError, "mid-stream"):
            self.router.call(body(stream=True), crash, self.tenant, provider=self.alpha)
        RESULTS["crash"] = "crashed"

    def test_refusal(self):
        paced = Router.identity(tenant_id=ENV["SWITCHBOARD_PACED_TENANT"])
        first = self.router.call(body(), send, paced, provider=self.alpha)
        RESULTS["paced"] = first.request_id
        with self.assertRaises(RateLimited) as refused:
            self.router.call(body(), send, paced, provider=self.alpha)
        self.assertEqual("rate_limit", refused.exception.refusal_code)
        self.assertTrue(refused.exception.retryable)
        self.assertGreater(refused.exception.retry_after, 0)

    def test_other_tenant_refused(self):
        with self.assertRaises(PermissionDenied):
            self.router.call(body(), send, Router.identity(tenant_id="globex"))

    def test_missing_identity_named(self):
        req = router_pb2.ListModelsRequest()
        with self.assertRaises(Unauthenticated) as e:
            self.router._rpc(self.router.stub.ListModels, req)
        self.assertIn("identity.tenant_id", str(e.exception))

    def test_lower_level_stub(self):
        models = self.router.stub.ListModels(router_pb2.ListModelsRequest(identity=self.tenant),
                                             metadata=self.router.metadata(), timeout=5)
        self.assertIn(ENV["SWITCHBOARD_MODEL"], [m.id for m in models.models])


if __name__ == "__main__":
    unittest.main()
