"""The edge's prompt rules: the token estimate and the prompt's prefix hashes.

A caller that decides for itself sends Decide the same figures the edge
would for the same chat request, so the decider sizes, prices and finds the
prompt's cache the same way whichever way the request came:

- text costs ceil(utf-8 bytes / 4) tokens; a message 4 plus its role, name
  and text; a prompt 3 plus its messages, plus the compact JSON of tools and
  response_format;
- the prefixes are a chain of SHA-256 hashes (first 8 bytes, big-endian),
  seeded with the compact JSON of tools, one per message boundary, each with
  the tokens up to it: the tool block alone (with tools), the end of the
  leading system/developer messages, then the longest boundaries, 32 in all.

The JSON of tools, tool_calls and function_call is hashed as the caller
sends it, compact (json.dumps with separators=(",", ":") and
ensure_ascii=False, the form `Router.call` sends).
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from typing import Any, Mapping

BYTES_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4
PROMPT_OVERHEAD = 3
MAX_PREFIXES = 32


def text_tokens(s: str) -> int:
    """Tokens of a text: its UTF-8 bytes over 4, rounded up."""
    return (len(s.encode("utf-8")) + BYTES_PER_TOKEN - 1) // BYTES_PER_TOKEN


def compact(value: Any) -> str:
    """The compact JSON of a value as the caller sends it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _go_number(v: Any) -> Any:
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e21:
        return int(v)
    return v


def _go_value(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _go_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_go_value(x) for x in v]
    return _go_number(v)


def canonical(value: Any) -> str:
    """A content part as the edge writes it: keys sorted, <, > and &
    escaped, integral numbers without a fraction (Go's json.Marshal)."""
    s = json.dumps(_go_value(value), separators=(",", ":"), ensure_ascii=False, sort_keys=True)
    for a, b in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        s = s.replace(a, b)
    return s


@dataclass(frozen=True)
class Prefix:
    """One prompt prefix: its chain hash and its tokens."""

    hash: int
    tokens: int


@dataclass(frozen=True)
class PromptFigures:
    """What Decide is told of a chat request."""

    input_tokens: int
    max_output_tokens: int
    prefixes: list[Prefix]


def _content(m: Mapping[str, Any]) -> tuple[str, str]:
    c = m.get("content")
    if c is None:
        return "", ""
    if isinstance(c, str):
        return c, ""
    if isinstance(c, list):
        text, extra = [], []
        for part in c:
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise ValueError("a content part must be an object with a string type")
            if part["type"] != "text":
                extra.append(canonical(part))
                continue
            if not isinstance(part.get("text"), str):
                raise ValueError("a text part needs a string text")
            text.append(part["text"])
        return "".join(text), "".join(extra)
    raise ValueError("content must be a string or an array of parts")


def figures(body: Mapping[str, Any]) -> PromptFigures:
    """The token estimate and prefixes of an OpenAI chat completions body."""
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ValueError("messages must be a non-empty array")
    tools = body.get("tools")
    seed = compact(tools) if tools is not None else ""
    prev = hashlib.sha256(seed.encode("utf-8")).digest()[:8]
    cum = PROMPT_OVERHEAD + text_tokens(seed)
    seed_prefix = Prefix(struct.unpack(">Q", prev)[0], cum)
    hashes: list[Prefix] = []
    counted = PROMPT_OVERHEAD
    system, leading = 0, True
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}] must be an object with a string role")
        role = m["role"]
        name = m.get("name") or ""
        text, extra = _content(m)
        if leading and role in ("system", "developer"):
            system = i + 1
        else:
            leading = False
        fields = [role, name, text, extra,
                  compact(m["tool_calls"]) if "tool_calls" in m else "",
                  compact(m["function_call"]) if "function_call" in m else "",
                  m.get("tool_call_id") if isinstance(m.get("tool_call_id"), str) else ""]
        h = hashlib.sha256(prev)
        for f in fields:
            b = f.encode("utf-8")
            h.update(struct.pack(">Q", len(b)))
            h.update(b)
        prev = h.digest()[:8]
        n = MESSAGE_OVERHEAD + text_tokens(role) + text_tokens(name) + text_tokens(text)
        cum += n
        counted += n
        hashes.append(Prefix(struct.unpack(">Q", prev)[0], cum))
    heads: list[Prefix] = []
    if tools is not None:
        heads.append(seed_prefix)
    first = max(0, len(hashes) - (MAX_PREFIXES - len(heads)))
    if system > 0 and system - 1 < first:
        heads.append(hashes[system - 1])
        first = max(0, len(hashes) - (MAX_PREFIXES - len(heads)))
    tokens = counted
    for field in ("tools", "response_format"):
        if body.get(field) is not None:
            tokens += text_tokens(compact(body[field]))
    out_tokens = body.get("max_completion_tokens")
    if out_tokens is None:
        out_tokens = body.get("max_tokens") or 0
    return PromptFigures(tokens, int(out_tokens), heads + hashes[first:])


__all__ = ["Prefix", "PromptFigures", "figures", "text_tokens", "compact", "canonical"]
