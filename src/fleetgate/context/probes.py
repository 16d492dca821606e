"""The fixed probe set a tokenizer is fingerprinted with (`discovery/fingerprint.py`).

Short texts, a few per character class a tokenizer costs differently (prose, long words,
digits, whitespace runs, punctuation, code, JSON and tool schemas, encodings, each script
block, emoji, numbers at random: `_numbers`, punctuation after a space and without:
`_spaced`), fixed mixes of their pieces (`MIXES`), and a few chats that tell the
template's cost apart: per message, per reply, per role step, the default system prompt,
the tools block and each tool, the words of a schema apart from the tools' number (tools
of other sizes: `RICH_CHATS`), tool calls and their results. Each probe is a request
body, so its tally is taken the way a request's is (`tally.py`): the engine's count of it
is one equation of the fit (`fit.py`). The texts are fixed, so a fingerprint is the same
on every replica.
"""

# ruff: noqa: RUF001  (the probes are meant to hold these scripts, as they are)
from __future__ import annotations

import hashlib
import random
import re
from typing import Any

import orjson

from fleetgate.context.tally import LAYOUT, Tally, tally_body


def _numbers(seed: int = 41) -> tuple[str, ...]:
    """Random numbers, which a vocabulary costs by the digit groups it holds as tokens (a
    rule splits digits into groups of three on most byte-level vocabularies, some of which
    hold every group of three as a token and others only a part of them; SentencePiece
    splits every digit): numbers of one digit to twelve, apart (a space, a comma, a tab, a
    line break), and runs of 64 digits in lines. The hand-written digit probes are a few
    texts, from which the fit told the cost of a random group poorly: on the vocabularies
    that hold a part of the groups, numbers cost 0.89-0.92 of their estimate with the
    fingerprint alone. Fixed by a seed: the same texts on every replica."""
    rng = random.Random(seed)

    def number() -> str:
        return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 12)))

    apart = tuple(sep.join(number() for _ in range(40)) for sep in (" ", ", ", "\t", "\n"))
    runs = "\n".join("".join(rng.choice("0123456789") for _ in range(64)) for _ in range(4))
    return (*apart, runs)


_PROSE = (
    "The gateway sends each request to a deployment whose window holds it. Short requests "
    "stay on the base fleet, and the long host takes what does not fit there. When the "
    "estimate cannot decide, the engine counts the prompt exactly, and the answer's usage "
    "teaches the estimate how this tokenizer really counts."
)


def _spaced(seed: int = 43) -> tuple[str, ...]:
    """Words and punctuation at random, each mark after a space, and the same words and
    marks with none (`{{ name }}` and `{{name}}`, `a = b` and `a=b`): a template, a doc or
    code that sets its marks apart costs what its marks, spaces and words cost on some
    vocabularies and more on others, which prose and code with marks attached do not show.
    Without these and the spaced texts above, chat templates cost 6-13 % over their
    estimate on the fingerprint of the real Qwen2 vocabulary. The words are prose's, as
    long as prose's: ten short words alone told the fit that a word costs its short words'
    cost, and it took from long words' pieces (`long_runs`, 0.78 a piece on Qwen2 before,
    0.25 with short words, 0.54 with prose's), so a long word said again and again came to
    0.73 of its count. Fixed by a seed."""
    rng = random.Random(seed)
    words = re.findall(r"[a-z]+", _PROSE.lower())
    marks = ("{{", "}}", "{%", "%}", "|", "=", "==", "(", ")", "[", "]", ":", ";", ",", ".")
    marks += ("->", "-", "+", "*", "/", "<", ">", "&&", "#", "'", '"')
    pairs = [
        (rng.choice(words), rng.choice(marks) if rng.random() < 0.6 else "") for _ in range(120)
    ]
    apart = " ".join(f"{w} {m}" if m else w for w, m in pairs)
    joined = " ".join(w + m for w, m in pairs)
    return apart, joined


TEXTS: tuple[str, ...] = (
    # prose
    _PROSE,
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
    # numbers of every length, apart and run together: a tokenizer that groups digits by
    # three costs them by their runs, one that does not by their digits
    "48213, 7, 99031, 120, 5, 88213455, 3, 61, 730041, 2, 1234567890123\n"
    "id=20240105;seq=000417;ts=1700000000123\t42\t007\t9\t31415926\n"
    "5551234 555 1234 98.6 0.001 1e-9 3/4 2,500,000",
    "7\n61\n730\n4821\n99031\n120458\n8821345\n17000000\n314159265\n2718281828\n"
    "0x7f3a9c2e 0o755 0b1011 #4821 v2.14.0 10.0.4.17:8080 2024-11-05 +1-555-0100",
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
    # longer shapes users paste: logs of another layout, JSON lines, a table without
    # padding, emoji between words, Thai, SQL, a config file, prose with figures
    '127.0.0.1 - - [05/Nov/2024:12:45:09 +0000] "GET /api/v2/items?page=3 HTTP/1.1" 200 5123\n'
    '10.0.4.17 - - [05/Nov/2024:12:45:10 +0000] "POST /login HTTP/1.1" 302 0 "-" "curl/8.4"\n'
    "[2024-11-05 12:45:11,402] ERROR in app: Exception on /checkout [POST]\n"
    'Traceback (most recent call last):\n  File "/srv/app/views.py", line 88, in checkout\n',
    '{"user_id": 88213, "event": "click", "ts": 1730810709, "ok": true}\n'
    '{"user_id": 88214, "event": "view", "ts": 1730810712, "ok": false}\n'
    '{"user_id": 90001, "event": "purchase", "ts": 1730810733, "amount": 129.99}\n',
    "|Region|Owner|Q1|Q2|Status|\n|---|---|---|---|---|\n|North|Alice|1,204|12.5|done|\n"
    "|South|Bob|n/a|7|pending|\n|East|Carol|88|-|failed|\n",
    "Shipped today 🚚 thanks everyone 🙌 next week we start the migration 🛠️ and then "
    "the cleanup 🧹🧹 questions? ask in the channel 💬 or ping me 👋",
    "ระบบจะส่งคำขอไปยังเซิร์ฟเวอร์ที่มีหน้าต่างบริบทใหญ่พอ หากไม่แน่ใจจะนับโทเค็นอย่างแม่นยำก่อน "
    "แล้วจึงตัดสินใจว่าจะส่งไปที่ใด",
    "SELECT o.id, o.total, c.email FROM orders o JOIN customers c ON c.id = o.customer_id\n"
    "WHERE o.created_at >= '2024-11-01' AND o.status IN ('paid', 'shipped')\n"
    "ORDER BY o.total DESC LIMIT 50;\n",
    '[server]\nhost = "0.0.0.0"\nport = 8080\nworkers = 4\n\n[routing.context]\n'
    'guard = "reject"\nmargin_percent = 0\n# comments start with a hash\n',
    "The quarterly report shows revenue of $4.2 million, up 12% from last year; costs fell "
    "3.5% to $1.9 million. In Q3 2024, 1,250 new customers joined, and 87 left.",
    # random bytes in base64 and an API key: mixed case and digits at random, a token
    # every two or three characters, which CamelCase identifiers (cheap) do not tell
    "UvImZaYMEtKJGF2VDuiBNgkWb2sRPReNbA/TkB/yOaGglfIPk5VlDPk4C47bIkprJIoekk6P0K4uGpSSozBf"
    "GIy2EJAPnjR/rohtxlB3lex0XEw/yy6yxz4Uk0yGfuBXunJJm/oSHoNrKsFXJu59awr2qxPDjpLK4NFQV7FZ\n"
    "Authorization: Bearer SLdi46tYBfB2WiucHX4PN8RJIb0_ZWTq338UKnJmjEfiI9Fu3YxHtGr8W67iYfU7",
    "c92P2+zHd3OC2pYwL82DeaGdyy8Yck0kF4nP47GiCpj7ZfZzp72dpiifA9SHEA8JMOE9mQfHdlNw\n"
    "l9cyhDujS38BqRV1p0do/43+7tcVtUFQwjqDSQcRkMQbZhvYSmIR9QTYrwA2Ne3pDXhg+rVlaxKQ\n"
    "oTLHrEVWFk9VA/ZowuweIj+0GQIPd8x8La6PMHKCMPy7xCFrpGIdZWv9NgBF3fj5zZdN/+IFNS8=\n"
    "token=ZP7amqSTGQr9JTZxQgLFnFTUS2ISExc1laI-A5leX590IPWWe9WTIt1iLqAnT-g60Zw_uTAovaHwjTKv",
    # mixed
    "Note: the p95 latency (ms) rose from 12.5 to 48.0 after deploy #4821 — see "
    "https://example.org/runs/4821?view=full&tab=logs for the 3 failing checks: `test_io`, "
    "`test_net` and `test_db`. 中文说明见附件。",
    # punctuation after a space and the same without: a token starts at a space before
    # punctuation, where punctuation after a letter may join the word's token
    "{% for message in messages %}{{ message['role'] }} : {{ message['content'] }}{% endfor %}"
    "\n{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}",
    "{%for message in messages%}{{message['role']}}:{{message['content']}}{%endfor%}"
    "\n{%if add_generation_prompt%}{{'<|assistant|>'}}{%endif%}",
    "for (int i = 0; i < n; ++i) { if (a [i] != b [i]) return -1 ; } x = ( y + z ) * w / 2 ;"
    "\nfor(int i=0;i<n;++i){if(a[i]!=b[i])return -1;} x=(y+z)*w/2;",
    'Wait , what ? No ! ( really ) ; fine : ok . " quoted " - dash * star | pipe & amp\n'
    'Wait, what? No! (really); fine: ok. "quoted" -dash *star |pipe &amp',
    "| alpha | beta | gamma |\n| --- | --- | --- |\n| one | two | three |\n| 4 | 5 | 6 |\n"
    "# Title\n\n- item one\n- item two\n* star item\n> a quote\n## Sub **bold** and `code` -> "
    "next => then <= less\n$ ls -la | grep -v foo > out.txt && wc -l < out.txt # count",
    # numbers at random, of every length (`_numbers`)
    *_numbers(),
    *_spaced(),
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


_DOC = (
    "Search the internal knowledge base for documents that match the query, ranked by "
    "relevance; returns titles, links and a short excerpt of each match."
)
_RICH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_documents",
        "description": _DOC,
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to look for, in any order"},
                "limit": {"type": "integer", "description": "How many matches to return at most"},
                "since": {
                    "type": "string",
                    "description": "Only documents changed after this date",
                },
                "lang": {"type": "string", "enum": ["en", "de", "fr", "ja", "zh"]},
                "exact": {"type": "boolean", "description": "Match the query as one phrase"},
            },
            "required": ["query"],
        },
    },
}
_RESULT2 = (
    '[{"title": "Rollback guide", "url": "https://wiki.example.org/ops/rollback", "excerpt": '
    '"Revert the deployment, then drain the old pods."}, {"title": "On-call handbook", "url": '
    '"https://wiki.example.org/ops/oncall", "excerpt": "Page the secondary after 15 minutes."}]'
)
_CALL3 = {
    "id": "call_3",
    "type": "function",
    "function": {"name": "search_documents", "arguments": '{"query": "rollback", "limit": 2}'},
}

# chats whose tools and tool turns differ in size: what a schema's words, its punctuation
# and a tool result cost in the template, apart from the tools' number
RICH_CHATS: tuple[dict[str, Any], ...] = (
    {"messages": [{"role": "user", "content": "How do I roll back?"}], "tools": [_RICH_TOOL]},
    {
        "messages": [{"role": "user", "content": "How do I roll back?"}],
        "tools": [_RICH_TOOL, _TOOL, _renamed(_RICH_TOOL, "search_tickets"), _TOOL2],
    },
    {
        "messages": [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": "How do I roll back?"},
            {"role": "assistant", "content": "", "tool_calls": [_CALL3]},
            {"role": "tool", "tool_call_id": "call_3", "content": _RESULT2},
            {"role": "assistant", "content": _ASSISTANT},
            {"role": "user", "content": _USER},
            {"role": "assistant", "content": "", "tool_calls": [_CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": _RESULT * 3},
        ],
        "tools": [_RICH_TOOL, _TOOL],
    },
)
CHATS = (*CHATS, *RICH_CHATS)


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
