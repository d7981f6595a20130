"""A Qwen3-MoE-shaped FP8 block-quantized checkpoint for `vllm serve --load-format dummy` (no weights travel).

    python3 make_checkpoint.py config OUT      # here, stdlib only: config.json, tokenizer_config.json, generation_config.json
    python3 make_checkpoint.py tokenizer OUT   # on the GPU machine (needs `tokenizers`, vLLM unpacked at SITE)

The shape is the first look's (the first look's model builder, rewritten here): 12 layers, 128 experts, top-8,
hidden 2048, FP8 e4m3 with [128, 128] weight blocks. The tokenizer is a byte-level BPE (vocab 8192) trained on the
first 400 .py files of the installed vLLM in sorted order, so the same lock gives the same tokenizer.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB = 8192

CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 12,
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
    "vocab_size": VOCAB,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "bos_token_id": 0,
    "eos_token_id": 0,
    "attention_bias": False,
    "use_sliding_window": False,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.001,
    "quantization_config": {
        "quant_method": "fp8",
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "weight_block_size": [128, 128],
    },
}


def write_config(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(CONFIG, indent=1) + "\n")
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 32768,
        "eos_token": SPECIAL[0],
        "bos_token": None,
        "pad_token": SPECIAL[0],
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg) + "\n")
    (out / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 0}) + "\n")


def write_tokenizer(out: Path, site: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    files = sorted(str(p) for p in (site / "vllm").rglob("*.py"))[:400]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train(files, trainer)
    tok.save(str(out / "tokenizer.json"))


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("config", "tokenizer"):
        print("usage: make_checkpoint.py config|tokenizer OUT", file=sys.stderr)
        return 2
    out = Path(argv[1])
    if argv[0] == "config":
        write_config(out)
    else:
        write_tokenizer(out, Path(os.environ.get("SITE", "/tmp/site")))
    print("ok", sorted(p.name for p in out.iterdir()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
