"""Prefix keys: a conversation's next turn repeats the key of the previous prompt."""

from __future__ import annotations

import orjson

from fleetgate.ingress.anthropic import parse_messages
from fleetgate.ingress.openai import parse_openai
from fleetgate.ingress.prefix import KEYED_BLOCKS, MAX_BLOCKS, prefix_keys
from fleetgate.ingress.responses import parse_responses

SYSTEM = {"role": "system", "content": "You answer in French. " * 40}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def chat_keys(messages: list[dict], **body) -> tuple[int, ...]:
    raw = orjson.dumps({"model": "m", "messages": messages, **body})
    return prefix_keys(parse_openai("chat.completions", raw))


def test_the_next_turn_holds_the_previous_prompts_key() -> None:
    turn1 = [SYSTEM, {"role": "user", "content": "Bonjour"}]
    turn2 = [
        *turn1,
        {"role": "assistant", "content": "Salut"},
        {"role": "user", "content": "Ça va?"},
    ]
    k1, k2 = chat_keys(turn1), chat_keys(turn2)
    assert len(k1) == 2 and len(k2) == 4
    assert k2[: len(k1)] == k1  # the whole first prompt is a prefix of the second
    other = chat_keys([SYSTEM, {"role": "user", "content": "Hello"}])
    assert other[0] == k1[0] and other[1] != k1[1]  # same system prompt, another turn


def test_tools_and_roles_are_part_of_the_prefix() -> None:
    messages = [{"role": "user", "content": "x"}]
    assert chat_keys(messages) != chat_keys(messages, tools=TOOLS)
    assert chat_keys(messages)[-1] != chat_keys([{"role": "assistant", "content": "x"}])[-1]
    # sampling knobs are not part of the prompt
    assert chat_keys(messages) == chat_keys(messages, temperature=0.3, max_tokens=5)


def test_a_moved_cache_control_marker_keeps_the_keys() -> None:
    part = {"type": "text", "text": "long context " * 50}
    marked = [{"role": "user", "content": [{**part, "cache_control": {"type": "ephemeral"}}]}]
    plain = [{"role": "user", "content": [part]}]
    assert chat_keys(marked) == chat_keys(plain)


def test_a_long_text_is_sampled_but_its_ends_and_length_count() -> None:
    base = "a" * 50_000
    k = chat_keys([{"role": "user", "content": base}])
    assert chat_keys([{"role": "user", "content": "b" + base[1:]}]) != k  # head
    assert chat_keys([{"role": "user", "content": base[:-1] + "b"}]) != k  # tail
    assert chat_keys([{"role": "user", "content": base + "a"}]) != k  # length


def test_a_long_conversation_keys_its_last_blocks_the_same_way() -> None:
    """Only the last KEYED_BLOCKS block ends get keys, and the earlier blocks are hashed in
    one go: the key of a block end must not depend on which way it was reached."""
    messages = [{"role": "user", "content": f"turn {i}"} for i in range(40)]
    longer = [*messages, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "?"}]
    assert len(chat_keys(messages)) == KEYED_BLOCKS
    assert chat_keys(messages)[-1] == chat_keys(longer)[-3]
    assert chat_keys(messages[:5])[-1] == chat_keys(messages[:12])[4]


def test_blocks_are_capped() -> None:
    messages = [{"role": "user", "content": str(i)} for i in range(MAX_BLOCKS + 50)]
    assert chat_keys(messages) == chat_keys(messages[:MAX_BLOCKS])


def test_anthropic_and_responses_shapes() -> None:
    def messages_keys(body: dict) -> tuple[int, ...]:
        return prefix_keys(parse_messages("messages", orjson.dumps({"model": "m", **body})))

    turn = [{"role": "user", "content": "hi"}]
    k1 = messages_keys({"system": "Be brief.", "messages": turn, "max_tokens": 5})
    k2 = messages_keys(
        {
            "system": "Be brief.",
            "messages": [*turn, {"role": "assistant", "content": "yo"}, *turn],
            "max_tokens": 5,
        }
    )
    assert k2[: len(k1)] == k1
    assert messages_keys({"system": "Other.", "messages": turn})[0] != k1[0]

    def responses_keys(body: dict) -> tuple[int, ...]:
        return prefix_keys(parse_responses("responses", orjson.dumps({"model": "m", **body})))

    r1 = responses_keys({"instructions": "Be brief.", "input": turn})
    r2 = responses_keys({"instructions": "Be brief.", "input": [*turn, *turn]})
    assert r2[: len(r1)] == r1


def test_a_growing_plain_prompt_keeps_its_whole_chunks() -> None:
    def completion_keys(prompt: str) -> tuple[int, ...]:
        raw = orjson.dumps({"model": "m", "prompt": prompt})
        return prefix_keys(parse_openai("completions", raw))

    text = "".join(f"line {i}\n" for i in range(1000))
    short, longer = completion_keys(text[:3000]), completion_keys(text[:5000])
    assert len(short) == 2 and longer[:2] == short
    assert completion_keys("tiny") != completion_keys("tinier")
    assert prefix_keys(parse_openai("embeddings", b'{"model": "m", "input": "x"}')) == ()
