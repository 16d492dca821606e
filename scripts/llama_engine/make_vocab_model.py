"""Write a tiny llama.cpp model with another real vocabulary and chat template.

usage: make_vocab_model.py LLAMA_CPP_SOURCE VOCAB TEMPLATE NAME OUT.gguf

VOCAB names one of llama.cpp's tokenizer test files (`models/ggml-vocab-<VOCAB>.gguf`):
every `tokenizer.ggml.*` field is copied from it as it is (BPE or SentencePiece, its
pre-tokenizer, its special tokens). TEMPLATE names a file of `models/templates/`. NAME is
the model's name, which should suggest no tokenizer family. The weights are random from a
fixed seed (as `make_model.py`'s), so the engine's counts, templates and context errors are
real and its answers noise. Runs in a venv that has llama.cpp's gguf-py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gguf
from make_model import EMBED, FFN, HEADS, KV_HEADS, LAYERS, write_tiny_weights  # beside it

TRAINED_CONTEXT = 32768


def main(source: Path, vocab: str, template: str, name: str, out: Path) -> None:
    reader = gguf.GGUFReader(str(source / "models" / f"ggml-vocab-{vocab}.gguf"))
    chat = (source / "models" / "templates" / template).read_text()
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name(name)
    writer.add_description(f"random weights, real {vocab} tokenizer: engine behaviour only")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(TRAINED_CONTEXT)
    writer.add_embedding_length(EMBED)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(EMBED // HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    n_vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer.") or key == "tokenizer.chat_template":
            continue
        value = field.contents()
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, value)
            if key == "tokenizer.ggml.tokens":
                n_vocab = len(value)
        elif kind == gguf.GGUFValueType.STRING:
            writer.add_string(key, value)
        elif kind == gguf.GGUFValueType.BOOL:
            writer.add_bool(key, value)
        elif kind == gguf.GGUFValueType.UINT32:
            writer.add_uint32(key, value)
        elif kind == gguf.GGUFValueType.INT32:
            writer.add_int32(key, value)
        elif kind == gguf.GGUFValueType.FLOAT32:
            writer.add_float32(key, value)
        else:
            writer.add_key_value(key, value, kind)
    writer.add_vocab_size(n_vocab)
    writer.add_chat_template(chat)

    write_tiny_weights(writer, n_vocab, seed=20261205)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB, {n_vocab} tokens)")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], Path(sys.argv[5]))
