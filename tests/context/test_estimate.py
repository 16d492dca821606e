"""The context estimate: what counts, how much, and how close it stays to real tokenizers."""

from __future__ import annotations

import random

import httpx
import pytest
from tokenizers import Tokenizer

from fleetgate.config.schema import ContextConfig
from fleetgate.context.estimate import estimate_context_tokens
from fleetgate.context.families import FAMILIES
from fleetgate.context.need import estimate_need
from fleetgate.context.tally import FIELDS, tally_body
from fleetgate.fleet.families import infer_family
from fleetgate.testing.corpus import CLASSES, corpus, text_of
from fleetgate.testing.llama import find_llama
from tests.engines import LlamaFactory

SETTINGS = ContextConfig()
PNG = "A" * 9000  # a base64 payload: costs the image reserve, not its bytes
# classes whose cost the tally cannot tell from others of the same characters: a long word
# said again and again is one token each, base64 splits where no rule sees, an emoji sequence
# merges by the vocabulary's whim, and so do a `|` before a word (a token of its own in an
# unpadded table, one with the word in code: `(self`) and the punctuation runs of minified
# code (`){`, `=function(` whole: over-costed); held to the band less tightly (families.py)
LOOSE = frozenset({"repeated", "encoded", "emoji", "markdown", "minified"})


def counts(text: str) -> dict[str, int]:
    tally = tally_body({"prompt": text}, "completions")
    return {f: n for f, n in zip(FIELDS, tally.counts, strict=True) if n and f != "requests"}


def test_the_tally_counts_each_character_class() -> None:
    assert counts("Hello World, 2024!\n") == {
        "chars": 19,
        "upper": 2,
        "words": 2,
        "digits": 4,
        "punct": 2,
        "newlines": 1,
        "punct_runs": 2,  # `,` and `!` with its line break
        "space_digits": 1,
        "digit_runs": 1,  # `2024`: a run of digits, and three of them after its first
        "digit_triples": 1,
    }
    mixed = counts("Привет мир 你好 こんにちは 안녕 Ελλάδα שלום مرحبا नमस्ते สวัสดี 😀")
    assert mixed["cyrillic"] == 9 and mixed["han"] == 2 and mixed["kana"] == 5
    assert mixed["hangul"] == 2 and mixed["greek"] == 6 and mixed["hebrew"] == 4
    assert mixed["arabic"] == 5 and mixed["indic"] == 6 and mixed["thai"] == 6
    assert mixed["four_byte"] == 1
    assert mixed["words"] == 5  # the alphabetic scripts' words (not CJK, Indic, Thai)


def test_digits_cost_one_token_each_on_qwen2_but_not_on_llama3() -> None:
    body = {"prompt": "1234567890" * 50, "max_tokens": 1}
    qwen = estimate_context_tokens(body, "completions", SETTINGS, "qwen2")
    llama = estimate_context_tokens(body, "completions", SETTINGS, "llama3")
    assert 500 <= qwen.prompt_tokens <= 700  # Qwen2 splits digits one by one
    assert llama.prompt_tokens < 0.7 * qwen.prompt_tokens  # Llama 3 groups them by three


def test_output_reserve_synonyms_and_default() -> None:
    base = {"messages": [{"role": "user", "content": "hi"}]}
    for field in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        est = estimate_context_tokens({**base, field: 77}, "chat.completions", SETTINGS)
        assert est.output_reserve == 77, field
    ollama = {**base, "options": {"num_predict": 33}}
    assert estimate_context_tokens(ollama, "chat.completions", SETTINGS).output_reserve == 33
    unlimited = {**base, "options": {"num_predict": -1}}
    est = estimate_context_tokens(unlimited, "chat.completions", SETTINGS)
    assert est.output_reserve == SETTINGS.default_output_reserve
    custom = ContextConfig(default_output_reserve=5)
    assert estimate_context_tokens(base, "chat.completions", custom).output_reserve == 5
    emb = estimate_context_tokens({"input": "hello"}, "embeddings", SETTINGS)
    assert emb.output_reserve == 0


def test_media_costs_its_reserve_not_its_bytes_and_tools_cost_their_schema() -> None:
    settings = ContextConfig(image_tokens=700, audio_tokens=300)
    text = {"role": "user", "content": [{"type": "text", "text": "z" * 40}]}
    media = {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + PNG}},
            {"type": "input_audio", "input_audio": {"data": "B" * 9000}},
            {"type": "text", "text": "z" * 40},
        ],
    }
    plain = estimate_context_tokens({"messages": [text]}, "chat.completions", settings)
    est = estimate_context_tokens({"messages": [media]}, "chat.completions", settings)
    assert est.prompt_tokens == plain.prompt_tokens + 700 + 300
    assert est.media_parts == 2
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    body = {"messages": [text], "tools": tools}
    with_tools = estimate_context_tokens(body, "chat.completions", settings, "qwen2")
    without = estimate_context_tokens({"messages": [text]}, "chat.completions", settings, "qwen2")
    # the Qwen2.5 template's tools preamble is about a hundred tokens on its own
    assert with_tools.prompt_tokens - without.prompt_tokens > 100


def test_native_ollama_images_cost_the_image_reserve() -> None:
    settings = ContextConfig(image_tokens=500)
    chat = {"messages": [{"role": "user", "content": "what is it", "images": [PNG, PNG]}]}
    est = estimate_context_tokens(chat, "ollama.chat", settings)
    assert est.media_parts == 2
    generate = {"prompt": "describe", "images": [PNG]}
    assert estimate_context_tokens(generate, "ollama.generate", settings).media_parts == 1


def test_margin_is_configurable() -> None:
    body = {"messages": [{"role": "user", "content": "word " * 400}], "max_tokens": 1}
    plain = estimate_context_tokens(body, "chat.completions", SETTINGS)
    double = estimate_context_tokens(body, "chat.completions", ContextConfig(margin_percent=100))
    assert double.prompt_tokens == pytest.approx(2 * plain.prompt_tokens, abs=2)


def test_batches_count_their_longest_sequence_and_token_ids_count_one_each() -> None:
    batch = {"input": ["a " * 40, "b " * 400, "c"]}
    longest = {"input": "b " * 400}
    assert (
        estimate_context_tokens(batch, "embeddings", SETTINGS).prompt_tokens
        == estimate_context_tokens(longest, "embeddings", SETTINGS).prompt_tokens
    )
    ids = {"prompt": list(range(300)), "max_tokens": 1}
    est = estimate_context_tokens(ids, "completions", SETTINGS, "qwen2")
    assert 300 <= est.prompt_tokens <= 300 + 30  # the ids, and the template's fixed part


def test_family_inference_from_model_names() -> None:
    assert infer_family("Qwen/Qwen2.5-7B-Instruct") == "qwen2"
    assert infer_family("qwen3-coder") == "qwen2"
    assert infer_family("meta-llama/Llama-3.1-8B-Instruct") == "llama3"
    assert infer_family("llama3.2:3b") == "llama3"
    assert infer_family("openai/gpt-4o-mini") == "o200k"
    assert infer_family("o3-mini") == "o200k"
    assert infer_family("mistral-large") == "generic"


def test_generic_is_never_below_a_measured_family() -> None:
    generic = FAMILIES["generic"].weights
    for name in ("qwen2", "llama3"):
        assert all(g >= w for g, w in zip(generic, FAMILIES[name].weights, strict=True))


def test_the_qwen2_estimate_follows_the_real_tokenizer_on_every_text_class() -> None:
    """Against the real Qwen2 tokenizer, on text the fit never saw (another seed): the ratio
    estimate / true count stays within [0.85, 1.25] for at least 95 % of texts."""
    tokenizer = Tokenizer.from_file(str(find_llama().tokenizer))
    rng = random.Random(2024)
    kinds = [k for k in CLASSES if k not in ("tools", "multiturn") and k not in LOOSE]
    ratios: dict[str, list[float]] = {k: [] for k in kinds}
    for i in range(700):
        kind = kinds[i % len(kinds)]
        text = text_of(kind, rng, int(200 * 30 ** rng.random()))
        true = len(tokenizer.encode(text, add_special_tokens=False).ids)
        tally = tally_body({"prompt": text}, "completions")
        without_template = list(tally.counts)
        without_template[FIELDS.index("requests")] = 0
        estimate = FAMILIES["qwen2"].tokens(tuple(without_template))
        ratios[kind].append(estimate / true)
    every = [r for rs in ratios.values() for r in rs]
    inside = sum(0.85 <= r <= 1.25 for r in every) / len(every)
    assert inside >= 0.95, {k: (min(r), max(r)) for k, r in ratios.items()}
    for kind, rs in ratios.items():  # no class is off on its own
        rs.sort()
        assert 0.9 <= rs[len(rs) // 2] <= 1.15, (kind, rs[len(rs) // 2])


def test_the_corpus_holds_every_class() -> None:
    samples = list(corpus(5, 2 * len(CLASSES)))
    assert {s.kind for s in samples} == set(CLASSES)
    assert any(s.body.get("tools") for s in samples)
    assert all(8 <= s.body["max_tokens"] <= 256 for s in samples)


def test_the_qwen2_band_holds_every_text_class_on_the_real_template(llama: LlamaFactory) -> None:
    """Whole chat requests the fit never saw, counted as the engine would: the real Qwen2.5
    template (`/apply-template`) tokenized by the real Qwen2 tokenizer. `true / estimate`
    lies inside the family's band for most requests, and above it (the request placed on a
    window it does not fit, its answer cut) for at most one in 30 of any class: JSON, tab-
    indented code, punctuation runs and Thai were above it before their costs were fitted."""
    engine = llama(n_ctx=512)
    tokenizer = Tokenizer.from_file(str(find_llama().tokenizer))
    family = FAMILIES["qwen2"]
    low, high = family.spread
    ratios: dict[str, list[float]] = {}
    for sample in corpus(13, 30 * len(CLASSES)):
        payload = {"messages": sample.body["messages"]}
        if sample.body.get("tools"):
            payload["tools"] = sample.body["tools"]
        prompt = httpx.post(engine.root + "/apply-template", json=payload, timeout=30)
        true = len(tokenizer.encode(prompt.json()["prompt"], add_special_tokens=False).ids)
        estimate = family.tokens(tally_body(sample.body, "chat.completions").counts)
        ratios.setdefault(sample.kind, []).append(true / estimate)
    every = [r for rs in ratios.values() for r in rs]
    assert sum(low <= r <= high for r in every) / len(every) >= 0.92
    above = {k: sum(r > high for r in rs) / len(rs) for k, rs in ratios.items()}
    assert all(share <= 1 / 30 for k, share in above.items() if k not in LOOSE), above
    assert all(share <= 0.25 for share in above.values()), above
    inside = {k: sum(low <= r <= high for r in rs) / len(rs) for k, rs in ratios.items()}
    assert all(share >= 0.9 for k, share in inside.items() if k not in LOOSE), inside


# scripts of U+1000-1FFF, which share one UTF-8 lead byte: Vietnamese letters cost like
# accented Latin, the others a token and more a character
SHARED_LEAD_BYTE = {
    "vietnamese": "Người dân sử dụng chữ Quốc ngữ với nhiều dấu thanh điệu khác nhau. ",
    "georgian": "საქართველო არის ქვეყანა კავკასიაში, ევროპისა და აზიის გასაყარზე. ",
    "myanmar": "မြန်မာနိုင်ငံသည် အရှေ့တောင်အာရှတွင် တည်ရှိသော နိုင်ငံတစ်ခု ဖြစ်သည်။ ",
    "ethiopic": "ኢትዮጵያ በምሥራቅ አፍሪካ የምትገኝ አገር ናት። ዋና ከተማዋ አዲስ አበባ ናት። ",
    "polytonic greek": "Ἐν ἀρχῇ ἦν ὁ λόγος, καὶ ὁ λόγος ἦν πρὸς τὸν θεόν. ",
}


def test_scripts_that_share_a_lead_byte_are_not_under_estimated() -> None:
    """Myanmar, Georgian and Ethiopic cost 1.2-1.6 tokens a character on the real Qwen2
    tokenizer: at Vietnamese's price (the fit's only sample of their lead byte) they were
    estimated at a third to a half of their count, so an answer was placed where it got
    cut. Each is held under the band's top now, and Vietnamese not far below its bottom."""
    tokenizer = Tokenizer.from_file(str(find_llama().tokenizer))
    high = FAMILIES["qwen2"].spread[1]
    for name, sentence in SHARED_LEAD_BYTE.items():
        text = sentence * 8
        true = len(tokenizer.encode(text, add_special_tokens=False).ids)
        counts = list(tally_body({"prompt": text}, "completions").counts)
        counts[FIELDS.index("requests")] = 0
        ratio = true / FAMILIES["qwen2"].tokens(tuple(counts))
        assert 0.6 <= ratio <= high, (name, true, ratio)


def test_a_plain_turn_is_tallied_as_any_other_turn() -> None:
    """The walk takes a turn of a role and a string content without its general path; a
    key it does not read (`name`) sends every turn down that path, and the tally is the
    same, for the roles and contents of the corpus and for turns the short path leaves
    (tool results, content parts, an odd role)."""
    bodies = [sample.body for sample in corpus(3, 40, (60, 3000))]
    bodies.append(
        {
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Look it up."}]},
                {"role": "assistant", "content": "Looking."},
                {"role": "tool", "content": "found: 12 rows"},
                {"role": ["user"], "content": "an odd role"},
                {"role": "user", "content": None},
            ]
        }
    )
    for body in bodies:
        named = {**body, "messages": [{**m, "name": "x"} for m in body["messages"]]}
        assert tally_body(body, "chat.completions") == tally_body(named, "chat.completions")


def test_the_fewest_tokens_of_a_long_text_count_its_words_whole() -> None:
    """A long text's words are estimated from a sample of it; the rule that a word is a
    token at least refuses without a count, so it counts them all (the collapsed walk's),
    never the sample's scaled-up figure, which can overshoot the truth."""
    rng = random.Random(3)
    vocabulary = ["a", "to", "window", "tokenizer", "x", "deployments", "of", "q"]
    for n in (900, 2500, 6000):
        text = " ".join(rng.choice(vocabulary) + rng.choice(["", "", ",", "."]) for _ in range(n))
        body = {"messages": [{"role": "user", "content": text}], "max_tokens": 16}
        estimate = estimate_need(body, "chat.completions", SETTINGS, [], None)[0]
        assert estimate.tally is not None
        assert estimate.tally.whole_words == (len(text) <= 4096)
        assert estimate.least() == n + 16
