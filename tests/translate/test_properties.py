"""Property tests: translating a request and its answer there and back loses nothing the
target protocol supports, streams add up to the whole answer, and every protocol's
routing needs equal those of its chat translation."""

from __future__ import annotations

import time
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetgate.ingress.needs import anthropic_needs, derive_needs, ollama_needs, responses_needs
from fleetgate.translate import anthropic_chat as ac
from fleetgate.translate import ollama_chat as oc
from fleetgate.translate import responses_chat as rc
from fleetgate.translate.events import DONE_PAYLOAD, Event
from fleetgate.translate.thinking import can_think

text = st.text(min_size=1, max_size=12)
name = st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-100, 100) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(name, inner, max_size=3),
    max_leaves=6,
)
arguments = st.dictionaries(name, json_value, max_size=3)
tool_id = st.from_regex(r"toolu_[a-z0-9]{4,8}", fullmatch=True)
schema = st.fixed_dictionaries(
    {"type": st.just("object"), "properties": st.dictionaries(name, st.just({"type": "string"}))}
)
anthropic_tool = st.fixed_dictionaries(
    {"name": name, "input_schema": schema}, optional={"description": text}
)
image = st.fixed_dictionaries(
    {
        "type": st.just("image"),
        "source": st.fixed_dictionaries(
            {
                "type": st.just("base64"),
                "media_type": st.sampled_from(["image/png", "image/jpeg"]),
                "data": st.from_regex(r"[A-Za-z0-9+/]{4,12}", fullmatch=True),
            }
        ),
    }
)
text_block = st.builds(lambda t: {"type": "text", "text": t}, text)


@st.composite
def anthropic_request(draw: st.DrawFn) -> dict[str, Any]:
    """A Messages conversation: user turns (text, images, tool results) and assistant turns
    (text, several tool uses), alternating, every tool use answered in the next turn."""
    messages: list[dict[str, Any]] = []
    pending: list[str] = []
    for i in range(draw(st.integers(1, 4)) * 2 - 1):
        if i % 2 == 0:
            blocks = [
                {"type": "tool_result", "tool_use_id": t, "content": draw(text)} for t in pending
            ]
            blocks += draw(
                st.lists(st.one_of(text_block, image), min_size=0 if pending else 1, max_size=3)
            )
            messages.append({"role": "user", "content": blocks})
            pending = []
        else:
            blocks = draw(st.lists(text_block, max_size=1))
            for _ in range(draw(st.integers(0, 3))):
                pending.append(draw(tool_id))
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": pending[-1],
                        "name": draw(name),
                        "input": draw(arguments),
                    }
                )
            if not blocks:
                blocks = [{"type": "text", "text": draw(text)}]
            messages.append({"role": "assistant", "content": blocks})
    body: dict[str, Any] = {"messages": messages, "max_tokens": draw(st.integers(1, 4096))}
    if draw(st.booleans()):
        body["system"] = draw(text)
    optional = {
        "temperature": st.floats(0, 1),
        "top_p": st.floats(0.01, 1),
        "top_k": st.integers(1, 50),
        # Anthropic takes no stop sequence that is only whitespace (a 400)
        "stop_sequences": st.lists(text.filter(str.strip), min_size=1, max_size=2),
        "metadata": st.builds(lambda u: {"user_id": u}, text),
        "tools": st.lists(anthropic_tool, min_size=1, max_size=3),
        "output_config": st.fixed_dictionaries(
            {},
            optional={
                "format": st.builds(lambda s: {"type": "json_schema", "schema": s}, schema),
                "effort": st.sampled_from(["low", "medium", "high", "xhigh", "max"]),
            },
        ),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            body[key] = draw(strategy)
    if "tools" in body and draw(st.booleans()):
        body["tool_choice"] = draw(
            st.sampled_from(
                [
                    {"type": "any"},
                    {"type": "none"},
                    {"type": "tool", "name": body["tools"][0]["name"]},
                ]
            )
        )
    return body


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _normal_turns(messages: list[dict[str, Any]]) -> list[tuple[str, list[Any]]]:
    """Turns with content as blocks, texts of one turn joined (chat has one text per turn)."""
    out = []
    for m in messages:
        blocks = _blocks(m["content"])
        texts = "".join(b["text"] for b in blocks if b["type"] == "text")
        rest = [b for b in blocks if b["type"] != "text"]
        if m["role"] == "user":
            # tool results come first in a turn, as chat's tool messages precede the user's
            results = [b for b in rest if b["type"] == "tool_result"]
            others = [b for b in rest if b["type"] != "tool_result"]
            out.append((m["role"], [*results, texts, *others]))
        else:
            out.append((m["role"], [texts, *rest]))
    return out


@settings(max_examples=150, deadline=None)
@given(anthropic_request())
def test_anthropic_request_there_and_back(body: dict[str, Any]) -> None:
    back = ac.chat_to_messages(ac.messages_to_chat(body))
    assert back.get("system") == body.get("system")
    assert _normal_turns(back["messages"]) == _normal_turns(body["messages"])
    keys = ["max_tokens", "temperature", "top_p", "top_k", "stop_sequences", "metadata"]
    config = body.get("output_config", {})
    # back as chat's reasoning effort: a thinking budget, unless Anthropic refuses thinking
    # with the request (a forced tool choice, tool results answering a turn without signed
    # thinking); then max_tokens above the budget, and the sampling Anthropic takes with it
    if "effort" in config and can_think(back):
        assert back["thinking"]["type"] == "enabled"
        assert back["max_tokens"] >= max(body["max_tokens"], back["thinking"]["budget_tokens"])
        assert back.get("temperature") == (1 if body.get("temperature") == 1 else None)
        assert "top_k" not in back
        assert back.get("top_p") == (max(body["top_p"], 0.95) if "top_p" in body else None)
        for key in ("max_tokens", "temperature", "top_k", "top_p"):
            keys.remove(key)
    else:
        assert "thinking" not in back
    for key in keys:
        assert back.get(key) == body.get(key), key
    assert back.get("output_config", {}).get("format") == config.get("format")
    if "tools" in body:
        assert back["tools"] == body["tools"]
        assert back.get("tool_choice", {"type": "auto"}) == body.get(
            "tool_choice", {"type": "auto"}
        )


@settings(max_examples=150, deadline=None)
@given(anthropic_request())
def test_anthropic_needs_are_those_of_its_chat_translation(body: dict[str, Any]) -> None:
    assert anthropic_needs(body) == derive_needs(ac.messages_to_chat(body))


# ---- answers ----------------------------------------------------------------------------


@st.composite
def chat_answer(draw: st.DrawFn) -> dict[str, Any]:
    calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": draw(name), "arguments": orjson.dumps(draw(arguments)).decode()},
        }
        for i in range(draw(st.integers(0, 3)))
    ]
    content = draw(st.none() | text) if calls else draw(text)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    if draw(st.booleans()):
        message["reasoning_content"] = draw(text)
    finish = "tool_calls" if calls else draw(st.sampled_from(["stop", "length"]))
    prompt, completion = draw(st.integers(0, 10_000)), draw(st.integers(0, 1000))
    return {
        "id": "chatcmpl-x1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def _calls(message: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        (c["function"]["name"], orjson.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or ()
    ]


@settings(max_examples=150, deadline=None)
@given(chat_answer())
def test_chat_answer_there_and_back(answer: dict[str, Any]) -> None:
    back = ac.messages_to_chat_answer(ac.chat_to_messages_answer(answer, "m"), "m")
    want, got = answer["choices"][0], back["choices"][0]
    assert (got["message"]["content"] or None) == (want["message"]["content"] or None)
    assert got["message"].get("reasoning_content") == want["message"].get("reasoning_content")
    assert _calls(got["message"]) == _calls(want["message"])
    assert got["finish_reason"] == want["finish_reason"]
    assert back["usage"] == answer["usage"]


def _chunks(answer: dict[str, Any], pieces: int) -> list[Event]:
    """The chat stream of an answer: text and arguments in `pieces` parts, then usage."""
    choice = answer["choices"][0]
    message = choice["message"]
    head = {"id": answer["id"], "object": "chat.completion.chunk", "created": 1, "model": "m"}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> Event:
        return (None, {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    def split(s: str) -> list[str]:
        step = max(1, len(s) // pieces)
        return [s[i : i + step] for i in range(0, len(s), step)] or [""]

    out = [chunk({"role": "assistant", "content": ""})]
    for part in split(message.get("reasoning_content") or ""):
        if part:
            out.append(chunk({"reasoning_content": part}))
    for part in split(message.get("content") or ""):
        if part:
            out.append(chunk({"content": part}))
    for i, call in enumerate(message.get("tool_calls") or ()):
        fn = call["function"]
        out.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": fn["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        for part in split(fn["arguments"]):
            out.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}))
    out.append(chunk({}, choice["finish_reason"]))
    out.append((None, {**head, "choices": [], "usage": answer["usage"]}))
    return out


def _run(stage: Any, events: list[Event]) -> list[Event]:
    out = [e for event in events for e in stage.feed(event)]
    return out + stage.finish()


def _accumulate_anthropic(events: list[Event]) -> dict[str, Any]:
    """What the Anthropic SDK builds from a stream (a minimal reading of its events)."""
    message: dict[str, Any] = {}
    partial: dict[int, str] = {}
    for kind, data in events:
        assert kind == data["type"]
        if kind == "message_start":
            message = {**data["message"], "content": []}
        elif kind == "content_block_start":
            assert data["index"] == len(message["content"])
            message["content"].append(dict(data["content_block"]))
        elif kind == "content_block_delta":
            block, delta = message["content"][data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            else:
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
        elif kind == "message_delta":
            message.update(data["delta"])
            message["usage"] = {**message["usage"], **data["usage"]}
    for index, raw in partial.items():
        message["content"][index]["input"] = orjson.loads(raw)
    return message


@settings(max_examples=150, deadline=None)
@given(chat_answer(), st.integers(1, 5))
def test_chat_stream_to_anthropic_adds_up_to_the_answer(
    answer: dict[str, Any], pieces: int
) -> None:
    events = _run(ac.ChatToMessagesStream("m"), _chunks(answer, pieces))
    assert events[0][0] == "message_start" and events[-1][0] == "message_stop"
    got = _accumulate_anthropic(events)
    want = ac.chat_to_messages_answer(answer, "m")
    assert got["content"] == want["content"]
    assert (got["stop_reason"], got["usage"]) == (want["stop_reason"], want["usage"])


def _accumulate_chat(events: list[Event]) -> dict[str, Any]:
    message: dict[str, Any] = {"content": "", "tool_calls": {}}
    finish = usage = None
    for _, data in events:
        if data is DONE_PAYLOAD:
            continue
        usage = data.get("usage") or usage
        for choice in data["choices"]:
            delta = choice["delta"]
            message["content"] += delta.get("content") or ""
            for call in delta.get("tool_calls") or ():
                held = message["tool_calls"].setdefault(
                    call["index"], {"name": "", "arguments": ""}
                )
                held["name"] += call.get("function", {}).get("name", "")
                held["arguments"] += call.get("function", {}).get("arguments", "")
            finish = choice["finish_reason"] or finish
    return {"message": message, "finish": finish, "usage": usage}


@settings(max_examples=100, deadline=None)
@given(chat_answer(), st.integers(1, 5))
def test_anthropic_stream_to_chat_adds_up(answer: dict[str, Any], pieces: int) -> None:
    """Chat -> Anthropic events -> chat chunks: the OpenAI client on an anthropic provider."""
    anthropic_events = _run(ac.ChatToMessagesStream("m"), _chunks(answer, pieces))
    events = _run(ac.MessagesToChatStream("m"), anthropic_events)
    assert events[-1][1] is DONE_PAYLOAD
    got = _accumulate_chat(events)
    want = answer["choices"][0]
    assert (got["message"]["content"] or None) == (want["message"]["content"] or None)
    calls = [
        (c["name"], orjson.loads(c["arguments"])) for c in got["message"]["tool_calls"].values()
    ]
    assert calls == _calls(want["message"])
    assert got["finish"] == want["finish_reason"] and got["usage"] == answer["usage"]


def _accumulate_responses(events: list[Event]) -> dict[str, Any]:
    items: dict[int, dict[str, Any]] = {}
    done: dict[int, dict[str, Any]] = {}
    seq = [data["sequence_number"] for _, data in events]
    assert seq == list(range(len(events)))
    for kind, data in events:
        if kind == "response.output_item.added":
            assert data["output_index"] not in items
            items[data["output_index"]] = {**data["item"], "text": "", "args": ""}
        elif kind == "response.output_text.delta":
            items[data["output_index"]]["text"] += data["delta"]
        elif kind == "response.function_call_arguments.delta":
            items[data["output_index"]]["args"] += data["delta"]
        elif kind == "response.output_item.done":
            done[data["output_index"]] = data["item"]
    final = events[-1][1]["response"]
    assert set(done) == set(items)  # every item finished before the response completed
    assert [i["id"] for i in final["output"]] == [done[k]["id"] for k in sorted(done)]
    return final


@settings(max_examples=150, deadline=None)
@given(chat_answer(), st.integers(1, 5))
def test_chat_stream_to_responses_adds_up(answer: dict[str, Any], pieces: int) -> None:
    events = _run(rc.ChatToResponsesStream("m"), _chunks(answer, pieces))
    final = _accumulate_responses(events)
    want = rc.chat_to_responses_answer(answer, "m")
    strip = lambda items: [{k: v for k, v in i.items() if k != "id"} for i in items]  # noqa: E731
    assert strip(final["output"]) == strip(want["output"])
    assert (final["status"], final["usage"]) == (want["status"], want["usage"])


@settings(max_examples=100, deadline=None)
@given(chat_answer(), st.integers(1, 5))
def test_chat_stream_to_ollama_adds_up(answer: dict[str, Any], pieces: int) -> None:
    started = time.perf_counter_ns()
    stream = oc.ChatToOllamaChatStream("m", started)
    lines = [data for _, data in _run(stream, _chunks(answer, pieces))]
    assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]
    want = oc.chat_to_ollama_chat_answer(answer, "m", started)
    for done in (lines[-1], want):  # what clients divide by: positive, the total holding all
        spans = [done[k] for k in ("prompt_eval_duration", "eval_duration", "total_duration")]
        assert all(type(ns) is int and ns > 0 for ns in spans)
        assert done["total_duration"] >= sum(spans[:2]) + done["load_duration"]
    text = "".join(line["message"]["content"] for line in lines)
    assert text == want["message"]["content"]
    calls = [c for line in lines for c in line["message"].get("tool_calls", ())]
    assert calls == want["message"].get("tool_calls", [])
    for key in ("prompt_eval_count", "eval_count", "done_reason"):
        assert lines[-1][key] == want[key]


# ---- Responses and Ollama requests ---------------------------------------------------------


@st.composite
def responses_request(draw: st.DrawFn) -> dict[str, Any]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": draw(text)}]}
    ]
    for i in range(draw(st.integers(0, 2))):
        call = f"call_{i}"
        items.append(
            {
                "type": "function_call",
                "call_id": call,
                "name": draw(name),
                "arguments": orjson.dumps(draw(arguments)).decode(),
            }
        )
        items.append({"type": "function_call_output", "call_id": call, "output": draw(text)})
    if draw(st.booleans()):
        items.append(
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}],
            }
        )
    body: dict[str, Any] = {"input": items}
    optional = {
        "instructions": text,
        "max_output_tokens": st.integers(1, 1000),
        "temperature": st.floats(0, 1),
        "top_p": st.floats(0.01, 1),
        "parallel_tool_calls": st.booleans(),
        "tools": st.lists(
            st.fixed_dictionaries(
                {"type": st.just("function"), "name": name, "parameters": schema}
            ),
            min_size=1,
            max_size=2,
        ),
        "reasoning": st.builds(lambda e: {"effort": e}, st.sampled_from(["low", "high"])),
        "text": st.sampled_from(
            [
                {"format": {"type": "json_object"}},
                {"format": {"type": "json_schema", "name": "x", "schema": {}, "strict": True}},
                {"format": {"type": "text"}},
            ]
        ),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            body[key] = draw(strategy)
    if "tools" in body and draw(st.booleans()):
        body["tool_choice"] = draw(st.sampled_from(["auto", "none", "required"]))
    return body


@settings(max_examples=150, deadline=None)
@given(responses_request())
def test_responses_request_keeps_every_item(body: dict[str, Any]) -> None:
    chat = rc.responses_to_chat(body)
    assert responses_needs(body) == derive_needs(chat)
    calls = [c for m in chat["messages"] for c in m.get("tool_calls", ())]
    sent = [i for i in body["input"] if i["type"] == "function_call"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        (i["call_id"], i["name"], i["arguments"]) for i in sent
    ]
    outputs = [(m["tool_call_id"], m["content"]) for m in chat["messages"] if m["role"] == "tool"]
    assert outputs == [
        (i["call_id"], i["output"]) for i in body["input"] if i["type"] == "function_call_output"
    ]
    assert chat.get("max_tokens") == body.get("max_output_tokens")
    system = [m["content"] for m in chat["messages"] if m["role"] == "system"]
    assert system == ([body["instructions"]] if body.get("instructions") else [])


@st.composite
def ollama_request(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    endpoint = draw(st.sampled_from(["ollama.chat", "ollama.generate"]))
    options = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "temperature": st.floats(0, 1),
                "top_k": st.integers(1, 40),
                "top_p": st.floats(0.01, 1),
                "seed": st.integers(0, 99),
                "stop": st.lists(text, max_size=2),
                "num_predict": st.integers(-1, 100),
                "repeat_penalty": st.floats(1, 2),
                "num_ctx": st.integers(1, 8192),
            },
        )
    )
    body: dict[str, Any] = {"options": options}
    if draw(st.booleans()):
        body["think"] = draw(st.sampled_from([True, False, "low", "medium", "high", "max"]))
    if draw(st.booleans()):
        body["format"] = draw(st.sampled_from(["json", {"type": "object"}]))
    images = draw(st.lists(st.just("iVBORw0KGgo="), max_size=1))
    if endpoint == "ollama.chat":
        message: dict[str, Any] = {"role": "user", "content": draw(text)}
        if images:
            message["images"] = images
        body["messages"] = [message]
        if draw(st.booleans()):
            body["tools"] = [
                {"type": "function", "function": {"name": draw(name), "parameters": {}}}
            ]
    else:
        body["prompt"] = draw(text)
        if images:
            body["images"] = images
        if draw(st.booleans()):
            body[draw(st.sampled_from(["raw", "suffix"]))] = draw(st.just(True) | text)
    return endpoint, body


@settings(max_examples=150, deadline=None)
@given(ollama_request())
def test_ollama_needs_are_those_of_its_translation(case: tuple[str, dict[str, Any]]) -> None:
    endpoint, body = case
    if endpoint == "ollama.chat":
        translated = oc.ollama_chat_to_chat(body)
    elif body.get("raw") or body.get("suffix"):
        translated = oc.generate_to_completions(body)
    else:
        translated = oc.generate_to_chat(body)
    assert ollama_needs(endpoint, body) == derive_needs(translated)
    predict = body["options"].get("num_predict")
    assert translated.get("max_tokens") == (predict if predict and predict > 0 else None)
