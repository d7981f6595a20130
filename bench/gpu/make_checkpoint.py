"""Checkpoints with the real shapes of Qwen3-30B-A3B, for `vllm serve --load-format dummy` (no weights travel).

    python3 make_checkpoint.py config OUT_ROOT      # here, stdlib only: one folder per variant, configs only
    python3 make_checkpoint.py tokenizer OUT_ROOT   # on the GPU machine (needs `tokenizers`; vLLM unpacked at SITE)

Variants (folder names under OUT_ROOT):
- `qwen3-30b-a3b-fp8`: FP8 e4m3, [128, 128] weight blocks, dynamic activations (the layout of Qwen/Qwen3-30B-A3B-FP8);
- `qwen3-30b-a3b-nvfp4`: ModelOpt NVFP4, group 16, router gates and lm_head left in BF16 (the layout of the NVFP4
  quantizations of this family: nvidia's and unsloth's cards);
- `moe-fp8`: the first look's 12-layer, 8k-vocabulary model, kept to reproduce docs/runs/h200-fp8-moe.

The architecture is the published config.json of Qwen/Qwen3-30B-A3B (Hugging Face): 48 layers, hidden 2048, 32 query
and 4 KV heads of 128, 128 experts of 768 with top-8, vocabulary 151,936, BOS/EOS 151643/151645. That is what makes a
decode step on an H200 bound by the GPU's memory bandwidth like the Spark's (about 3.3 B parameters read per token),
rather than by the host CPU as the 12-layer model was. Qwen3.6-35B-A3B adds linear-attention layers that vLLM 0.24
runs with kernels of their own; its MoE block has the same shape, which is what the backends differ in.

The tokenizer is a byte-level BPE trained on the first 400 .py files of the installed vLLM in sorted order (the same
lock gives the same tokenizer), padded to the full vocabulary with printable tokens no merge produces: a dummy-weight
model samples every id, and each must decode to text. The three special tokens sit at Qwen's ids.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

VOCAB = 151936
SPECIAL = {151643: "<|endoftext|>", 151644: "<|im_start|>", 151645: "<|im_end|>"}
BPE_TRAINED = 8192

QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "max_window_layers": 48,
    "vocab_size": VOCAB,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "rope_scaling": None,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "use_sliding_window": False,
    "sliding_window": None,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.001,
}

FP8_BLOCK = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]}
NVFP4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "ignore": ["lm_head", "*mlp.gate"]}
SMALL = {"num_hidden_layers": 12, "vocab_size": 8192, "max_position_embeddings": 32768}

VARIANTS: dict[str, tuple[dict, dict]] = {  # name -> (overrides of the architecture, quantization_config)
    "qwen3-30b-a3b-fp8": ({}, FP8_BLOCK),
    "qwen3-30b-a3b-nvfp4": ({}, NVFP4),
    "moe-fp8": (SMALL, FP8_BLOCK),
}


def variant_config(name: str) -> dict:
    overrides, quant = VARIANTS[name]
    cfg = {**copy.deepcopy(QWEN3_30B_A3B), **overrides}
    if cfg["vocab_size"] < VOCAB:  # the small model's own tokenizer ids
        cfg.update(bos_token_id=0, eos_token_id=0)
    cfg["quantization_config"] = copy.deepcopy(quant)
    return cfg


def special_tokens(cfg: dict) -> dict[int, str]:
    """Qwen's ids; the small model has the first look's three specials at 0, 1, 2."""
    return SPECIAL if cfg["vocab_size"] == VOCAB else dict(enumerate(SPECIAL.values()))


def write_config(root: Path) -> None:
    for name in VARIANTS:
        out = root / name
        out.mkdir(parents=True, exist_ok=True)
        cfg = variant_config(name)
        (out / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
        special = special_tokens(cfg)
        eos = special[cfg["eos_token_id"]]
        tok_cfg = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": cfg["max_position_embeddings"],
            "eos_token": eos,
            "bos_token": None,
            "pad_token": special[cfg["bos_token_id"]],
        }
        (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg) + "\n")
        gen = {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"]}
        (out / "generation_config.json").write_text(json.dumps(gen) + "\n")


def filler_tokens(taken: set[str], count: int) -> list[str]:
    """`count` printable byte-level tokens ("Ġ" + letters: a space and a made-up word) that are not in `taken`."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    out: list[str] = []
    n = 0
    while len(out) < count:
        word, k = "", n
        while True:
            word = letters[k % 26] + word
            k //= 26
            if k == 0:
                break
        n += 1
        token = "\u0120zq" + word  # "Ġ" is the byte-level alphabet's space
        if token not in taken:
            out.append(token)
    return out


def write_tokenizer(root: Path, site: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    files = sorted(str(p) for p in (site / "vllm").rglob("*.py"))[:400]
    for name in VARIANTS:
        out = root / name
        cfg = json.loads((out / "config.json").read_text())
        special = special_tokens(cfg)
        tok = Tokenizer(models.BPE(unk_token=None))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        small = cfg["vocab_size"] == BPE_TRAINED  # the first look's tokenizer, as it was
        trainer = trainers.BpeTrainer(
            vocab_size=BPE_TRAINED,
            special_tokens=list(special.values()) if small else [],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
        tok.train(files, trainer)
        if small:
            tok.save(str(out / "tokenizer.json"))
            continue
        data = json.loads(tok.to_str())
        # tokenizers numbers added tokens from the model's vocabulary size on, so that vocabulary is dense
        # (0..first special - 1) and every id after the specials is an added (non-special) filler token
        vocab = dict(data["model"]["vocab"])
        dense_end = min(special)
        after = list(range(max(special) + 1, cfg["vocab_size"]))
        fillers = filler_tokens(set(vocab), dense_end - len(vocab) + len(after))
        vocab.update(zip(fillers, range(len(vocab), dense_end), strict=False))
        added = {**special, **dict(zip(after, fillers[len(fillers) - len(after) :], strict=True))}
        data["model"]["vocab"] = vocab
        data["added_tokens"] = [
            {
                "id": i,
                "content": s,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": i in special,
            }
            for i, s in sorted(added.items())
        ]
        Tokenizer.from_str(json.dumps(data)).save(str(out / "tokenizer.json"))
        check = Tokenizer.from_file(str(out / "tokenizer.json"))
        assert check.get_vocab_size(with_added_tokens=True) == cfg["vocab_size"], name
        for i in (cfg["vocab_size"] - 1, dense_end - 1, *special):
            assert check.id_to_token(i) == special.get(i, check.id_to_token(i)), (name, i)
            assert check.decode([i], skip_special_tokens=False), (name, i)
        assert check.token_to_id(special[cfg["eos_token_id"]]) == cfg["eos_token_id"], name


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("config", "tokenizer"):
        print("usage: make_checkpoint.py config|tokenizer OUT_ROOT", file=sys.stderr)
        return 2
    root = Path(argv[1])
    if argv[0] == "config":
        write_config(root)
    else:
        write_tokenizer(root, Path(os.environ.get("SITE", "/tmp/site")))
    print("ok", sorted(p.name for p in root.iterdir()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
