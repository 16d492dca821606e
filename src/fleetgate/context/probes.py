"""The fixed probe set a tokenizer is fingerprinted with (`discovery/fingerprint.py`).

Short texts, a few per character class a tokenizer costs differently (prose, long words,
digits, whitespace runs, punctuation, code, JSON and tool schemas, encodings, each script
block, emoji), fixed mixes of their pieces (`MIXES`), and a few chats that tell the
template's cost apart: per message, per reply, per role step, the default system prompt,
the tools block and each tool, tool calls and their results. Each probe is a request body, so its
tally is taken the way a request's is (`tally.py`): the engine's count of it is one equation
of the fit (`fit.py`). The texts are fixed, so a fingerprint is the same on every replica.
"""

# ruff: noqa: RUF001  (the probes are meant to hold these scripts, as they are)
from __future__ import annotations

import hashlib
import random
import re
from typing import Any

import orjson

from fleetgate.context.tally import LAYOUT, Tally, tally_body

TEXTS: tuple[str, ...] = (
    # prose
    "The gateway sends each request to a deployment whose window holds it. Short requests "
    "stay on the base fleet, and the long host takes what does not fit there. When the "
    "estimate cannot decide, the engine counts the prompt exactly, and the answer's usage "
    "teaches the estimate how this tokenizer really counts.",
    "Operators rarely name their fine-tunes after the family they came from. A model called "
    "Orchard-7B-Support-v3 might be anything; what the engine says about its own vocabulary "
    "is the only reliable evidence. Nevertheless, internationalization and "
    "counterintuitively hyphenated, well-established compound words appear everywhere.",
    # long and rare words, capitals
    "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism "
    "floccinaucinihilipilification supercalifragilisticexpialidocious "
    "HTTPServerErrorResponseHandler XMLHttpRequestFactoryBuilder getUserAccountByIdentifier "
    "parseJSONPayloadIntoStructuredRecord",
    # digits
    "3141592653589793238462643383279502884197 2718281828459045 1618033988749894 "
    "Invoice 2024-11-05 total 1,234,567.89 EUR; ref 00417-88213-5; 12:45:09.123",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 100 250 999 1000 65536 4294967296",
    # whitespace runs and layout
    "name        value      unit\nalpha       12.5       kg\nbeta        7          m\n"
    "gamma       1000       ms\n\n\n    indented  by   spaces    \n\t\ttabbed\tcolumns\t\there\n",
    "| id | name      | status  |\n|----|-----------|---------|\n| 1  | build     | passed  |\n"
    "| 2  | deploy    | failed  |\n| 3  | rollback  | pending |\n",
    # a log file
    "2024-11-05T12:45:09.123Z INFO  [worker-3] request_id=7f3a9c2e status=200 dur_ms=48\n"
    "2024-11-05T12:45:09.871Z WARN  [worker-1] retrying upstream=10.0.4.17:8080 attempt=2\n"
    "2024-11-05T12:45:10.002Z ERROR [worker-3] GET /v1/orders/88213 -> 503 (upstream timeout)\n"
    "Nov  5 12:45:11 host-a kernel: [123456.789012] eth0: link up, 1000 Mbps, full duplex\n",
    # punctuation
    "Wait... what?! No way!!! (Really?) [yes] {maybe} <not> -- ok; fine: \"quoted\" 'single' "
    "`code` ~tilde~ ^caret^ *star* _under_ #hash @at $dollar %percent &amp | pipe \\ slash /",
    "========================================\n----------------------------------------\n"
    "****************************************\n",
    # code
    "def merge(a: list[int], b: list[int]) -> list[int]:\n    out = []\n    i = j = 0\n"
    "    while i < len(a) and j < len(b):\n        if a[i] <= b[j]:\n            out.append(a[i])\n"
    "            i += 1\n        else:\n            out.append(b[j])\n            j += 1\n"
    "    return out + a[i:] + b[j:]\n",
    "static int cmp(const void *a, const void *b) {\n\tconst int *x = a, *y = b;\n\tif (*x < *y)\n"
    "\t\treturn -1;\n\treturn *x > *y;\n}\n\nint main(void) {\n\tint v[] = {3, 1, 2};\n"
    "\tqsort(v, 3, sizeof v[0], cmp);\n\treturn 0;\n}\n",
    "function f(e,t){for(var n=0,r=e.length;n<r;n++)if(t(e[n],n))return e[n];return null}"
    "var a=document.querySelectorAll('.item');a.forEach(function(x){x.classList.toggle('on')});",
    # JSON and a tool schema
    '{"id": 4821, "name": "Ada Lovelace", "email": "ada@example.org", "tags": ["math", '
    '"poetry"], "active": true, "score": 97.25, "address": {"city": "London", "zip": "W1"}}',
    '[{"ts":1700000000,"level":"info","msg":"started","port":8080},{"ts":1700000001,'
    '"level":"warn","msg":"slow","ms":1250},{"ts":1700000002,"level":"error","code":503}]',
    '{"type": "function", "function": {"name": "get_weather", "description": "Get the '
    'current weather for a city", "parameters": {"type": "object", "properties": {"city": '
    '{"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": '
    '["celsius", "fahrenheit"]}}, "required": ["city"]}}}',
    # encodings
    "aGVsbG8gd29ybGQsIHRoaXMgaXMgYmFzZTY0IGVuY29kZWQgdGV4dCB0aGF0IGdvZXMgb24gYW5kIG9u "
    "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 "
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    # scripts
    "网关把每个请求发送到能够容纳它的部署。短请求留在基础集群上，长请求交给长上下文主机。"
    "当估计无法决定时，引擎会精确地计算提示的长度。",
    "ゲートウェイは各リクエストを、そのウィンドウに収まるデプロイメントへ送ります。"
    "短いリクエストは基本のサーバーに残り、長いものは長文用のホストへ回されます。",
    "게이트웨이는 각 요청을 그 창에 맞는 배포로 보냅니다. 짧은 요청은 기본 서버에 남고, "
    "긴 요청은 긴 문맥을 처리하는 호스트로 갑니다.",
    "Шлюз отправляет каждый запрос на развёртывание, окно которого его вмещает. Короткие "
    "запросы остаются на базовом кластере, длинные уходят на отдельный хост.",
    "Η πύλη στέλνει κάθε αίτημα σε μια εγκατάσταση της οποίας το παράθυρο το χωράει. "
    "Τα σύντομα αιτήματα μένουν στη βασική ομάδα.",
    "ترسل البوابة كل طلب إلى نشر تتسع نافذته له. تبقى الطلبات القصيرة على المجموعة "
    "الأساسية، وتذهب الطويلة إلى المضيف الطويل.",
    "השער שולח כל בקשה לפריסה שהחלון שלה מכיל אותה. בקשות קצרות נשארות באשכול הבסיסי.",
    "गेटवे हर अनुरोध को ऐसी तैनाती पर भेजता है जिसकी खिड़की उसे समा सके। छोटे अनुरोध मूल समूह पर रहते हैं।",
    "เกตเวย์ส่งคำขอแต่ละรายการไปยังการปรับใช้ที่หน้าต่างรองรับได้ คำขอสั้นจะอยู่ในกลุ่มหลัก",
    "Cổng gửi mỗi yêu cầu đến nơi triển khai có cửa sổ chứa được nó. Yêu cầu ngắn ở lại "
    "cụm cơ sở. Größere Anfragen gehen zum Langkontext-Host, où la fenêtre est plus grande.",
    "ბჭე თითოეულ მოთხოვნას აგზავნის იქ, სადაც ფანჯარა მას იტევს. ဂိတ်ဝေးသည် တောင်းဆိုမှုကို ပို့သည်။",
    # symbols, box drawing, emoji
    "→ ← ↑ ↓ ⇒ ∀ ∃ ∈ ∉ ≤ ≥ ≠ ≈ ∞ ∑ ∏ √ ∫ — – … “quotes” ‘single’ • € £ ¥ © ® ™ °\n"
    "┌──────┬──────┐\n│ left │ right│\n└──────┴──────┘\n",
    "Great job team 🎉🎉 the release is out 🚀 thanks 🙏 to everyone 👩‍💻👨‍💻 "
    "❤️ 😀 😂 🤖 🔥 ✅ ❌ ⚠️ 📦 🧪 🐍",
    # mixed
    "Note: the p95 latency (ms) rose from 12.5 to 48.0 after deploy #4821 — see "
    "https://example.org/runs/4821?view=full&tab=logs for the 3 failing checks: `test_io`, "
    "`test_net` and `test_db`. 中文说明见附件。",
)


def _mixes(n: int, seed: int = 39) -> tuple[str, ...]:
    """`n` texts mixed from pieces of `TEXTS` (lines, sentences), some said again and
    again: each class of text next to the others in many proportions, so the fit can tell
    their costs apart (a few texts per class leave the weights collinear). Fixed: the same
    texts on every replica."""
    pieces = [p for t in TEXTS for p in re.split(r"(?<=[.!?。\n])\s*", t) if len(p) > 8]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        chosen = [rng.choice(pieces) for _ in range(rng.randint(1, 5))]
        if rng.random() < 0.25:  # one piece said again and again
            chosen = chosen[:1] * rng.randint(3, 12)
        out.append(rng.choice((" ", "\n", "\n\n", ", ", "\t")).join(chosen))
    return tuple(out)


# what an engine that tokenizes a list of texts in one call counts besides `TEXTS`
MIXES = _mixes(160)

_SYSTEM = "You are a careful assistant. Answer briefly and cite the source."
_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Find an order by its number",
        "parameters": {
            "type": "object",
            "properties": {"number": {"type": "string", "description": "The order number"}},
            "required": ["number"],
        },
    },
}
_TOOL2 = {
    "type": "function",
    "function": {
        "name": "cancel_order",
        "description": "Cancel an order that has not shipped",
        "parameters": {
            "type": "object",
            "properties": {
                "number": {"type": "string"},
                "reason": {"type": "string", "enum": ["changed_mind", "late", "other"]},
            },
            "required": ["number"],
        },
    },
}


def _renamed(tool: dict[str, Any], name: str) -> dict[str, Any]:
    return {**tool, "function": {**tool["function"], "name": name}}


_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "lookup_order", "arguments": '{"number": "88213"}'},
}
_CALL2 = {
    "id": "call_2",
    "type": "function",
    "function": {"name": "cancel_order", "arguments": '{"number": "88213", "reason": "late"}'},
}
_RESULT = '{"number": "88213", "status": "shipped", "carrier": "DHL", "eta": "2024-11-08"}'
_USER = "Where is my order 88213? It was due on Monday."
_ASSISTANT = "Let me check. Could you confirm the email address on the order?"

# chats: what the template adds per message, per role step, default system, tools
CHATS: tuple[dict[str, Any], ...] = (
    {"messages": [{"role": "user", "content": _USER}]},
    {"messages": [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": _USER}]},
    {
        "messages": [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": _USER},
            {"role": "assistant", "content": _ASSISTANT},
            {"role": "user", "content": "Yes, it is ada@example.org."},
        ]
    },
    {
        "messages": [
            {"role": "user", "content": _USER},
            {"role": "assistant", "content": _ASSISTANT},
            {"role": "user", "content": "Yes."},
            {"role": "assistant", "content": "Thanks."},
            {"role": "user", "content": "Well?"},
        ]
    },
    {"messages": [{"role": "user", "content": _USER}], "tools": [_TOOL]},
    {
        "messages": [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": _USER}],
        "tools": [_TOOL, _TOOL2],
    },
    # replies and tool turns: a template may wrap each role in its own scaffolding
    {
        "messages": [
            {"role": "user", "content": _USER},
            {"role": "assistant", "content": _ASSISTANT},
            {"role": "user", "content": "Yes."},
            {"role": "assistant", "content": _ASSISTANT * 3},
            {"role": "user", "content": "Well?"},
        ]
    },
    {
        "messages": [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": _USER},
            {"role": "assistant", "content": "", "tool_calls": [_CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": _RESULT},
            {"role": "user", "content": "And the other one, 88214?"},
        ],
        "tools": [_TOOL],
    },
    {
        "messages": [
            {"role": "user", "content": _USER},
            {"role": "assistant", "content": "", "tool_calls": [_CALL, _CALL2]},
            {"role": "tool", "tool_call_id": "call_1", "content": _RESULT},
            {"role": "tool", "tool_call_id": "call_2", "content": '{"cancelled": true}'},
        ],
        "tools": [_TOOL, _TOOL2],
    },
    {  # many tools: what each costs, apart from the block they are in
        "messages": [{"role": "user", "content": _USER}],
        "tools": [_TOOL, _TOOL2, *(_renamed(_TOOL, f"lookup_{n}") for n in ("user", "invoice"))],
    },
    {
        "messages": [
            {"role": "system", "content": _SYSTEM * 6},
            {"role": "user", "content": _USER},
        ],
        "tools": [_TOOL2],
    },
)


# how the probes are counted (`discovery/fingerprint.py`): a chat with the special tokens
# the engine adds to a prompt it serves, a text without
COUNTING = "chats with the engine's special tokens, texts without"
# the probe set, the tally's fields and the counting: a fingerprint counted on another is
# counted again
VERSION = hashlib.sha256(
    orjson.dumps([LAYOUT, TEXTS, MIXES, CHATS, COUNTING], option=orjson.OPT_SORT_KEYS)
).hexdigest()[:16]


def text_tally(text: str) -> Tally:
    """A probe text's tally, as a completion prompt is tallied (no template)."""
    counts = list(tally_body({"prompt": text}, "completions").counts)
    counts[-1] = 0  # `requests`: no template around a bare text
    return Tally(tuple(counts))


def chat_tally(chat: dict[str, Any]) -> Tally:
    return tally_body(chat, "chat.completions")
