"""Write fleetgate's tiny llama.cpp test model and a tokenizer.json of the same vocabulary.

usage: make_model.py LLAMA_CPP_SOURCE OUT.gguf OUT.tokenizer.json

The vocabulary (Qwen2's byte-level BPE: 151,936 tokens and their merges) is read from
llama.cpp's own tokenizer test file `models/ggml-vocab-qwen2.gguf`; the chat template is
llama.cpp's copy of Qwen2.5-7B-Instruct's. The weights are random from a fixed seed, so
the file is the same on every machine. Runs in a venv that has llama.cpp's gguf-py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import gguf
import numpy as np

# Qwen2's pre-tokenizer split (its tokenizer.json), which llama.cpp applies as "qwen2"
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

EMBED, LAYERS, HEADS, KV_HEADS, FFN = 64, 2, 4, 2, 128
TRAINED_CONTEXT = 32768  # what the model advertises, like Qwen2.5


def write_tiny_weights(writer: gguf.GGUFWriter, n_vocab: int, seed: int) -> None:
    """The tiny model's random weights (embeddings tied with the output), then the file:
    the tokenizer and template are what the tests read, the weights only have to run."""
    rng = np.random.default_rng(seed)

    def weights(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    head = EMBED // HEADS
    writer.add_tensor("token_embd.weight", weights(n_vocab, EMBED))
    writer.add_tensor("output_norm.weight", ones(EMBED))
    for layer in range(LAYERS):
        blk = f"blk.{layer}."
        writer.add_tensor(blk + "attn_norm.weight", ones(EMBED))
        writer.add_tensor(blk + "attn_q.weight", weights(HEADS * head, EMBED))
        writer.add_tensor(blk + "attn_k.weight", weights(KV_HEADS * head, EMBED))
        writer.add_tensor(blk + "attn_v.weight", weights(KV_HEADS * head, EMBED))
        writer.add_tensor(blk + "attn_output.weight", weights(EMBED, HEADS * head))
        writer.add_tensor(blk + "ffn_norm.weight", ones(EMBED))
        writer.add_tensor(blk + "ffn_gate.weight", weights(FFN, EMBED))
        writer.add_tensor(blk + "ffn_up.weight", weights(FFN, EMBED))
        writer.add_tensor(blk + "ffn_down.weight", weights(EMBED, FFN))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(source: Path, model_out: Path, tokenizer_out: Path) -> None:
    reader = gguf.GGUFReader(str(source / "models" / "ggml-vocab-qwen2.gguf"))

    def value(name: str) -> Any:
        return reader.fields[name].contents()

    tokens: list[str] = value("tokenizer.ggml.tokens")
    types: list[int] = value("tokenizer.ggml.token_type")
    merges: list[str] = value("tokenizer.ggml.merges")
    ids = {token: i for i, token in enumerate(tokens)}
    im_end, end_of_text = ids["<|im_end|>"], ids["<|endoftext|>"]
    template = (source / "models" / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text()

    writer = gguf.GGUFWriter(str(model_out), "llama")
    writer.add_name("fleetgate-tiny-qwen2tok")
    writer.add_description("random weights, real Qwen2 tokenizer: engine behaviour only")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(TRAINED_CONTEXT)
    writer.add_embedding_length(EMBED)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(EMBED // HEADS)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model(value("tokenizer.ggml.model"))
    writer.add_tokenizer_pre(value("tokenizer.ggml.pre"))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(end_of_text)
    writer.add_eos_token_id(im_end)
    writer.add_pad_token_id(end_of_text)
    writer.add_add_bos_token(False)
    writer.add_chat_template(template)

    write_tiny_weights(writer, len(tokens), seed=20261201)

    # the same vocabulary for the `tokenizers` library (token type 3: control tokens)
    special = [
        {
            "id": i,
            "content": token,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, (token, kind) in enumerate(zip(tokens, types, strict=True))
        if kind == 3
    ]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": special,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {
                    "type": "Split",
                    "pattern": {"Regex": QWEN2_SPLIT},
                    "behavior": "Isolated",
                    "invert": False,
                },
                {
                    "type": "ByteLevel",
                    "add_prefix_space": False,
                    "trim_offsets": False,
                    "use_regex": False,
                },
            ],
        },
        "post_processor": None,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": False,
            "use_regex": False,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": ids,
            "merges": merges,
        },
    }
    tokenizer_out.write_text(json.dumps(tokenizer, ensure_ascii=False))
    print(f"wrote {model_out} ({model_out.stat().st_size / 1e6:.1f} MB) and {tokenizer_out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
