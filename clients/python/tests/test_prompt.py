"""The client's token estimate and prefixes against the edge's own, computed by
services/edge/cmd/promptfigures over clients/testdata/prompts.json (the Go test
TestClients writes them to $SWITCHBOARD_PROMPT_FIGURES)."""

import json
import os
import pathlib
import unittest

from switchboard_client import figures

CASES = pathlib.Path(__file__).resolve().parents[2] / "testdata" / "prompts.json"


class PromptFiguresTest(unittest.TestCase):
    def test_same_as_the_edge(self):
        path = os.environ.get("SWITCHBOARD_PROMPT_FIGURES")
        self.assertTrue(path, "SWITCHBOARD_PROMPT_FIGURES names the edge's figures (run by go test -run TestClients ./tests)")
        cases = json.loads(CASES.read_text(encoding="utf-8"))
        want = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
        self.assertEqual(len(cases), len(want))
        for i, (body, w) in enumerate(zip(cases, want)):
            f = figures(body)
            got = {"input_tokens": f.input_tokens, "max_output_tokens": f.max_output_tokens,
                   "prefixes": [{"hash": str(p.hash), "tokens": p.tokens} for p in f.prefixes]}
            self.assertEqual(w, got, f"case {i}")


if __name__ == "__main__":
    unittest.main()
