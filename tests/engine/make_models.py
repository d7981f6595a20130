"""Make tiny random-weight models for the CPU build of vLLM, with nothing downloaded.

Run with the vLLM venv's python (it needs torch, transformers, tokenizers):

    python tests/engine/make_models.py OUT_DIR        # prints one JSON line: {"tiny-llama": "OUT_DIR/tiny-llama", ...}

Idempotent: a model folder whose stamp file matches the recipe is left alone.
- tiny-llama:     Llama, hidden 128, 2 layers, 4 heads (2 KV heads), head_dim 32 (a CPU attention head size).
- tiny-qwen3-moe: Qwen3-MoE with the same trunk, 4 experts, top-2.
Both decode greedily by default (generation_config.json), so a random model loops and ngram drafts get accepted.
Both share a byte-level BPE tokenizer (vocab 512) trained here on text from Python's own standard library.
"""

import hashlib
import inspect
import json
import sys
from pathlib import Path

VOCAB_SIZE = 512
EOS = "<|endoftext|>"
STAMP = ".spark-agent-model"
# A chat template so /v1/chat/completions works too; the model is random, only the plumbing matters.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)
# Greedy by default (vLLM takes sampling defaults from generation_config.json): a random model then falls into
# loops, so the ngram speculator finds matches and the spec_decode counters move, as with a real model.
GENERATION_CONFIG = {"bos_token_id": 0, "eos_token_id": 0, "do_sample": False, "temperature": 0.0}

TRUNK = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
    bos_token_id=0,
    eos_token_id=0,
)

MODELS = {
    "tiny-llama": ("llama", {}),
    "tiny-qwen3-moe": (
        "qwen3_moe",
        dict(
            num_experts=4, num_experts_per_tok=2, moe_intermediate_size=64, decoder_sparse_step=1, norm_topk_prob=True
        ),
    ),
}


def recipe_hash(name):
    kind, extra = MODELS[name]
    text = json.dumps([kind, TRUNK, extra, VOCAB_SIZE, CHAT_TEMPLATE, GENERATION_CONFIG], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def training_text():
    """Deterministic local text: the source of a few pure-Python standard-library modules."""
    import argparse
    import json as json_mod
    import string
    import textwrap

    return [inspect.getsource(m) for m in (argparse, json_mod, textwrap, string)]


def make_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS, pad_token=EOS)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def make_config(name):
    from transformers import AutoConfig

    kind, extra = MODELS[name]
    return AutoConfig.for_model(kind, **TRUNK, **extra)


def make_model(name, out_dir, tokenizer):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(make_config(name)).to(torch.bfloat16)
    model.config.dtype = "bfloat16"
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2) + "\n")
    (out_dir / STAMP).write_text(recipe_hash(name) + "\n")


def is_made(out_dir, name):
    stamp = out_dir / STAMP
    return stamp.is_file() and stamp.read_text().strip() == recipe_hash(name)


def make_all(root):
    """Make every model under root (skipping finished ones); returns {name: folder}."""
    root = Path(root)
    tokenizer = None
    made = {}
    for name in MODELS:
        out_dir = root / name
        if not is_made(out_dir, name):
            out_dir.mkdir(parents=True, exist_ok=True)
            tokenizer = tokenizer or make_tokenizer()
            make_model(name, out_dir, tokenizer)
        made[name] = str(out_dir)
    return made


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_models.py OUT_DIR")
    print(json.dumps(make_all(sys.argv[1])))
