"""CPU cost of protocol translation, per non-stream request and per stream event.

Per request: the client body translated for the deployment, and the deployment's answer
(bytes) translated back into the client's protocol (bytes), as `translate.registry.Wire`
does it. Per stream event: one upstream chat chunk cut from the byte stream, translated
and framed for the client, as `translate.events.translate_stream` does it, for upstreams
whose text chunks share one frame (vLLM, llama.cpp: read by `translate.text_chunks`
without a full parse) and one whose frame changes every chunk (OpenAI padding: parsed).
Each figure is
shown beside a floor measured in the same run: parsing and re-serialising the same JSON
with orjson, the least any pass-through that looks inside a body pays.

Run: python3 benchmarks/bench_translate.py [--calls N] [--events N]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import timeit
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from fleetgate.translate import registry
from fleetgate.translate.events import translate_stream

REQUEST_BUDGET_US = 30.0
EVENT_BUDGET_US = 2.0
_FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "agents"


def chat_answer(words: int = 60, calls: int = 0) -> bytes:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": " ".join(f"word{i}" for i in range(words)),
    }
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": "Read", "arguments": '{"file_path": "/repo/setup.py"}'},
            }
            for i in range(calls)
        ]
    return orjson.dumps(
        {
            "id": "chatcmpl-abc123",
            "object": "chat.completion",
            "created": 1,
            "model": "upstream-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1200, "completion_tokens": 60, "total_tokens": 1260},
        }
    )


# upstream chat streams as engines write them: (label, shape)
SHAPES = (
    ("vLLM", "vllm"),  # the same frame around every text
    ("llama.cpp", "llamacpp"),  # choices first: the text in the middle of the line
    ("padded, OpenAI", "padded"),  # `obfuscation` padding: a new frame every chunk
)


def chat_chunks(n: int, shape: str = "vllm") -> bytes:
    head = {"id": "chatcmpl-abc123", "object": "chat.completion.chunk", "created": 1, "model": "u"}
    events = []
    for i in range(n):
        delta = {"role": "assistant", "content": ""} if i == 0 else {"content": f" word{i}"}
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
        chunk: dict[str, Any] = {**head, "choices": [choice]}
        if shape == "llamacpp":
            choice = {"finish_reason": None, "index": 0, "delta": delta}
            chunk = {"choices": [choice], **head, "system_fingerprint": "b1-0c1e570"}
        elif shape == "padded":
            chunk["obfuscation"] = "Qx7pZ0aB"[: 1 + i % 8]
        events.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
    return b"".join(events)


def cpu_us(fn: Callable[[], Any], number: int) -> float:
    runs = timeit.repeat(fn, number=number, repeat=5, timer=time.process_time)
    return min(runs) / number * 1e6


def request_case(
    name: str,
    client: str,
    translation: registry.Translation,
    body: dict[str, Any],
    answer: bytes,
    calls: int,
) -> tuple[str, float, float]:
    wire = registry.Wire(translation.endpoint, translation, False, client)

    def translated() -> None:
        orjson.dumps({**translation.request(body), "model": "u"})
        wire.answer(answer, "m", time.perf_counter_ns(), body)

    def floor() -> None:
        orjson.dumps({**orjson.loads(orjson.dumps(body)), "model": "u"})
        orjson.dumps(orjson.loads(answer))

    return name, cpu_us(translated, calls), cpu_us(floor, calls)


async def _drain(stream: AsyncIterator[bytes]) -> int:
    total = 0
    async for out in stream:
        total += len(out)
    return total


def stream_case(
    name: str,
    translation: registry.Translation,
    upstream: bytes,
    events: int,
    rounds: int,
    per_read: int,
) -> tuple[str, float, float]:
    # the upstream arrives in reads of `per_read` events (a paced engine: one per read)
    whole = [e + b"\n\n" for e in upstream.split(b"\n\n") if e]
    pieces = [b"".join(whole[i : i + per_read]) for i in range(0, len(whole), per_read)]

    async def source() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece

    loop = asyncio.new_event_loop()

    def translated() -> None:
        stream = translate_stream(
            source(),
            translation.stream("m", True, time.perf_counter_ns(), {}),
            translation.ndjson_in,
            translation.encode,
        )
        loop.run_until_complete(_drain(stream))

    def floor() -> None:
        async def copy() -> None:  # cut into whole events, parse and re-serialise each
            carry = b""
            async for piece in source():
                block = carry + piece
                cut = block.rfind(b"\n\n")
                if cut < 0:
                    carry = block
                    continue
                carry = block[cut + 2 :]
                out = [
                    b"data: " + orjson.dumps(orjson.loads(event[6:])) + b"\n\n"
                    for event in block[:cut].split(b"\n\n")
                ]
                b"".join(out)

        loop.run_until_complete(copy())

    per_event = cpu_us(translated, rounds) / events
    floor_per_event = cpu_us(floor, rounds) / events
    loop.close()
    return name, per_event, floor_per_event


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=5_000)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    claude = orjson.loads((_FIXTURES / "claude_code_messages.json").read_text())
    claude["stream"] = False
    codex = orjson.loads((_FIXTURES / "codex_responses.json").read_text())
    codex["stream"] = False
    chat = {"messages": [{"role": "user", "content": "hello " * 40}], "max_tokens": 100}
    ollama = {"messages": chat["messages"], "options": {"num_predict": 100}, "stream": False}
    answer = chat_answer()
    with_tools = chat_answer(20, calls=2)
    rows = [
        request_case(
            "messages → chat (Claude Code shape)",
            "messages",
            registry.MESSAGES_TO_CHAT,
            claude,
            with_tools,
            args.calls,
        ),
        request_case(
            "responses → chat (Codex shape)",
            "responses",
            registry.RESPONSES_TO_CHAT,
            codex,
            with_tools,
            args.calls,
        ),
        request_case(
            "ollama chat → chat",
            "ollama.chat",
            registry.OLLAMA_CHAT_TO_CHAT,
            ollama,
            answer,
            args.calls,
        ),
    ]
    anthropic_answer = orjson.dumps(
        registry.MESSAGES_TO_CHAT.answer(orjson.loads(answer), "claude-x", 0, claude)
    )
    rows.append(
        request_case(
            "chat → messages",
            "chat.completions",
            registry.CHAT_TO_MESSAGES,
            chat,
            anthropic_answer,
            args.calls,
        )
    )
    print(
        "| non-stream request | translation µs CPU | floor µs | ratio "
        f"| budget {REQUEST_BUDGET_US:.0f} µs |"
    )
    print("|---|---|---|---|---|")
    worst = 0.0
    for name, cost, floor in rows:
        worst = max(worst, cost)
        ok = "ok" if cost <= REQUEST_BUDGET_US else "MISSED"
        print(f"| {name} | {cost:.1f} | {floor:.1f} | {cost / floor:.1f}x | {ok} |")
    stages = [
        ("chat → messages events", registry.MESSAGES_TO_CHAT),
        ("chat → responses events", registry.RESPONSES_TO_CHAT),
        ("chat → ollama NDJSON", registry.OLLAMA_CHAT_TO_CHAT),
    ]
    worst_event = 0.0
    for per_read in (8, 1):
        print()
        print(
            f"| stream, {per_read} event(s) per read | upstream | µs CPU per event | floor µs "
            f"| ratio | budget {EVENT_BUDGET_US:.0f} µs |"
        )
        print("|---|---|---|---|---|---|")
        for shape_label, shape in SHAPES:
            upstream = chat_chunks(args.events, shape)
            for label, translation in stages:
                _, cost, floor = stream_case(
                    label, translation, upstream, args.events, args.rounds, per_read
                )
                worst_event = max(worst_event, cost)
                ok = "ok" if cost <= EVENT_BUDGET_US else "MISSED"
                print(
                    f"| {label} | {shape_label} | {cost:.2f} | {floor:.2f} "
                    f"| {cost / floor:.1f}x | {ok} |"
                )
    met = worst <= REQUEST_BUDGET_US and worst_event <= EVENT_BUDGET_US
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
