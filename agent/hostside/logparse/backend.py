"""Backend selection: the MoE, attention and GEMM (linear) kernels the server chose, in every version's wording, and
the candidates automatic selection passed over on the way.

Its own family because its names are the product's vocabulary: `normalise_backend` and `linear_backend_of` give the
value of the CLI flag that selects a kernel, which judging (lint, verdict) and planning compare a launch with.
"""

from __future__ import annotations

import re

from .attestation import MAX_EVIDENCE, Recorder

# --- names ---------------------------------------------------------------------------------------

_ALIASES = {
    "deepgemm": "deep_gemm",
    "vllm_cutlass": "cutlass",
    "flashinfer_tensorrt_llm": "flashinfer_trtllm",
    "flashinfer_fp8_moe_trtllm": "flashinfer_trtllm",
    "rocm_aiter": "aiter",
    "cutlassblockscaledgroupedgemm": "cutlass",  # 0.9-0.13's FP8 block-scaled grouped GEMM: --moe-backend cutlass
    "cutlass_blockscaled_groupedgemm": "cutlass",
    "flash_attention": "flash_attn",
    "flashattention": "flash_attn",
    "cutass": "cutlass",  # 0.14's oracle/nvfp4.py names VLLM_CUTLASS "vLLM CUTASS"
}


def normalise_backend(name: str) -> str:
    """One spelling per backend: `MARLIN`, `'MARLIN'`, `AttentionBackendEnum.FLASHINFER`, `FlashInfer CUTLASS`,
    `BATCHED_TRITON` -> `marlin`, `flashinfer`, `flashinfer_cutlass`, `triton` (the value of the CLI flag that
    selects it). "" and "auto" mean no claim and give ""."""
    s = name.strip().strip("'\"").strip()
    if "." in s:  # an enum repr: AttentionBackendEnum.FLASHINFER, NvFp4LinearBackend.CUTLASS
        s = s.rsplit(".", 1)[1]
    s = re.sub(r"[\s\-]+", "_", s).lower()
    s = re.sub(r"_(?:mxfp4|mxfp8|bf16)(?=_|$)", "", s)  # "FlashInfer MXFP4 MXFP8 TRTLLM": the quant is no name
    if s in ("", "auto", "none"):
        return ""
    s = _ALIASES.get(s, s)
    if s.startswith("vllm_"):  # 0.14 "vLLM MARLIN", "vLLM CUTLASS": vLLM's own kernel, the same flag value
        s = s[len("vllm_") :]
    if s.startswith("batched_"):  # same flag; vLLM picks the batched variant for DP/EP layouts
        s = s[len("batched_") :]
    if s.endswith("_batched"):
        s = s[: -len("_batched")]
    return _ALIASES.get(s, s)


_KERNEL_SUFFIX = re.compile(r"(?:ScaledMM)?(?:Linear)?Kernel$")
_QUANT_WORDS = re.compile(r"NvFp4|NVFP4|MxFp8|MXFP8|MxFp4|MXFP4|Fp8|FP8|Fp4|FP4|W4A16|W8A8|W4A8")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def linear_backend_of(kernel: str) -> str:
    """The --linear-backend value a GEMM kernel belongs to: `CutlassNvFp4LinearKernel` -> `cutlass`,
    `FlashInferB12xNvFp4LinearKernel` -> `flashinfer_b12x`, `NvFp4LinearBackend.MARLIN` -> `marlin`."""
    if "." in kernel or "_" in kernel or kernel.isupper():
        return normalise_backend(kernel)
    s = _QUANT_WORDS.sub("", _KERNEL_SUFFIX.sub("", kernel)).replace("FlashInfer", "Flashinfer")
    return normalise_backend(_CAMEL.sub("_", s))


def quant_of(word: str) -> str:
    w = word.lower()
    for q in ("nvfp4", "mxfp8", "mxfp4", "fp8", "unquantized"):
        if q in w:
            return q
    return w


# --- what the kernel lines say --------------------------------------------------------------------

# 0.12-0.13 fp8.py: "Using FlashInfer FP8 MoE TRTLLM backend for SM100", "... CUTLASS backend for SM90/SM100"
_FLASHINFER_FP8 = re.compile(r"Using (FlashInfer) (FP8) MoE (TRTLLM|CUTLASS) backend")
# 0.10-0.18 gpt-oss (mxfp4.py) says only "Using Marlin backend" / "Using Triton backend" (no period: with one,
# "Using Triton backend." is XPU's attention); "[get_mxfp4_backend_with_lora] Using Marlin backend" too.
_MXFP4_BARE = re.compile(r"Using (Marlin|Triton) backend\s*$")
# 0.10-0.13 ModelOpt FP8 (modelopt.py) and 0.10-0.11 FP8 with VLLM_USE_FLASHINFER_MOE_FP8 (fp8.py) name no method
# or quant: "Using FlashInfer CUTLASS kernels", "Using FlashInfer TensorRT-LLM kernels" (both are FP8 MoE paths)
_FLASHINFER_FP8_BARE = re.compile(r"Using (FlashInfer (?:CUTLASS|TensorRT-LLM|CUTEDSL)) kernels\.?\s*$")
# (literal, form): a form is only tried on a message that holds its literal. A line of thousands of "Using "
# would otherwise cost every form a bounded scan at every "Using ".
_MOE_FORMS = (
    ("MoE backend", re.compile(r"Using '?([\w-]+)'? (\w+) MoE backend")),  # 0.15+: 'MARLIN' NvFp4 / TRITON Fp8
    # 0.12-0.14: "Using Marlin backend for FP8 MoE", "Using vLLM MARLIN backend for NvFp4 MoE"; 0.20+ gpt-oss with
    # LoRA: "Using Triton backend for mxfp4 lora"
    (" backend for ", re.compile(r"Using ([\w -]{1,80}?) backend for (\w+) (?:MoE|lora\b)")),
    ("FP8 MoE ", _FLASHINFER_FP8),
    # 0.10-0.13 NVFP4 (modelopt.py, compressed_tensors_moe.py): "Using Cutlass for ModelOptNvFp4FusedMoE.",
    # "Using FlashInfer CUTLASS kernels for ModelOptNvFp4FusedMoE.", "Using Marlin for
    # CompressedTensorsW4A4Nvfp4MoEMethod.", and nvfp4_moe_support.py's "Using FlashInfer kernels for %s."
    (
        "MoE",
        re.compile(
            r"Using (Marlin|Cutlass|FlashInfer(?: (?!kernels\b)[\w-]+)?)(?: kernels)? for "
            r"(?:ModelOpt(\w+?)FusedMoE|CompressedTensors\w*?(Nvfp4|Fp8|Mxfp4|WNA16)\w*MoEMethod)"
        ),
    ),
    # nvfp4_moe_support.py without a class name (0.10-0.14): "Using FlashInfer kernels for NVFP4 path."
    (" path", re.compile(r"Using (FlashInfer) kernels for (NVFP4) path")),
    ("kernels", _FLASHINFER_FP8_BARE),
    # 0.9-0.11 FP8 (fp8.py): "Using DeepGemm kernels for Fp8MoEMethod.", "Using CutlassBlockScaledGroupedGemm ..."
    ("kernels for ", re.compile(r"Using (\w{1,80}) kernels for (Fp8|Fp4|NvFp4|Mxfp4)\w*MoEMethod")),
    # 0.20+ MXFP4 (compressed_tensors_moe_w4a4_mxfp4.py): "Using MarlinExperts for MXFP4 MoE"
    ("Experts", re.compile(r"Using (\w{1,80}?)Experts(?:\w{1,40})? for (MXFP4|NVFP4|FP8) MoE")),
    # 0.10-0.13 gpt-oss (mxfp4.py): "Using FlashInfer MXFP4 BF16 backend for SM90", "... for Blackwell-class GPU"
    ("MXFP4 ", re.compile(r"Using (FlashInfer (MXFP4)(?: [A-Z0-9]{2,8}){0,3}) backend")),
    (" backend", _MXFP4_BARE),
)
_ATTN_FORMS = (
    # auto (+ "out of potential backends"), and 0.2x short form
    (" attention backend", re.compile(r"Using ([\w.]+) attention backend")),
    # V0 / 0.2x short forms: "Using Flash Attention backend.", "Using XFormers backend.", "Using FLASHINFER backend"
    (
        " backend",
        re.compile(
            r"Using ((?:AttentionBackendEnum|_Backend)\.\w+|'?[A-Z][\w-]{0,40}'?(?: [A-Z][\w-]{0,40}){0,2})"
            r" backend\.?\s*$"
        ),
    ),
    (" backend on V1 engine", re.compile(r"Using ([\w ]{1,80}?) backend on V1 engine")),  # old V1
)
_LINEAR_FORMS = (
    # "Using CutlassNvFp4LinearKernel for NVFP4 GEMM" (0.15+); 0.12-0.14 name the backend: "Using flashinfer-cutlass
    # for NVFP4 GEMM"; 0.11 compressed-tensors "Using flashinfer-trtllm for FP4"; 0.16+ MXFP8/MXFP4 GEMMs likewise.
    (" GEMM", re.compile(r"Using ([\w.-]{1,200}?)(?: backend)? for (NVFP4|MXFP8|MXFP4) GEMM")),
    (" for FP4", re.compile(r"Using (flashinfer-[\w-]{1,40}|cutlass|marlin) for (FP4)\s*$")),
    ("Kernel for ", re.compile(r"Selected (\w{1,200}Kernel) for (\w+)")),
    ("LinearKernel for ", re.compile(r"Using (\w{1,200}LinearKernel) for (\w+)")),
)
# The GEMM's quantization method, as the linear lines name it ("Using MarlinLinearKernel for GPTQMarlinLinearMethod",
# "Selected MacheteLinearKernel for CompressedTensorsWNA16"): vLLM's own --quantization value for it.
_METHOD_QUANT = (
    ("AWQMarlin", "awq_marlin"),
    ("GPTQMarlin", "gptq_marlin"),
    ("GPTQBitBLAS", "gptq_bitblas"),
    ("AutoGPTQ", "gptq"),
    ("CompressedTensors", "compressed-tensors"),
    ("ModelOptNvFp4", "modelopt_fp4"),
    ("ModelOpt", "modelopt"),
    ("Mxfp4", "mxfp4"),
    ("Quark", "quark"),
)
_LINEAR_FALLBACK = re.compile(
    r"--linear-backend=\S{1,200} (?:has no kernel|was requested, but no)|NVFP4 linear falling back to the slow"
)
_MARLIN_FP4 = "Your GPU does not have native support for FP4 computation"
_OTHER_MODEL = re.compile(r"vit attention|[Vv]ision|[Ee]ncoder|\bViT\b|mm_encoder|MMEncoder")
_ALL_REDUCE = re.compile(r"all[-_ ]?reduce|allreduce|AllReduce|custom_ar", re.I)
# The candidate a selection line is about: "NvFp4 MoE backend 'FLASHINFER_TRTLLM' does not support ..."
CANDIDATE = re.compile(r"backend '?([\w-]{1,80})'? does not support")
# Backend names as messages spell them (class names, flag values, words): the failure's `backend`.
BACKEND_WORDS = re.compile(
    r"(?i)(?<![a-z0-9])(flashinfer[_ -]?(?:cutlass|trtllm|trt-llm|tensorrt[_-]llm|cutedsl|cute[_-]dsl|b12x|mla)?"
    r"|vllm_cutlass|cutlass(?:_mla)?|marlin|deep_?gemm|triton(?:_attn|_mla)?|flash_?attn|flash[_ ]attention"
    r"|flash_?mla|aiter|b12x|machete|xformers|torch_sdpa|flex_attention|trtllm)"
)
# Names that are MoE (or GEMM) kernels, never attention: a bare "Using Marlin backend" is the MoE's.
_MOE_ONLY = {"marlin", "deep_gemm", "cutlass", "flashinfer_cutlass", "flashinfer_trtllm", "flashinfer_cutedsl", "b12x"}


class BackendLines(Recorder):
    """The kernel lines of the main model, and of the draft model while it loads (`_in_draft`)."""

    def __init__(self) -> None:
        super().__init__()
        self._disabled = ""  # a "... is disabled for this configuration" warning (see signature.DISABLED)
        self._rejected: list[tuple[str, str]] = []  # (part, message): candidates automatic selection passed over

    def _using(self, msg: str, line: str) -> bool:
        """A "Using X ..." / "Selected X ..." line that names a kernel; False when it names none."""
        if _ALL_REDUCE.search(msg) or _OTHER_MODEL.search(msg):
            self._add("other_model_lines", line)
            return True
        for literal, rx in _MOE_FORMS:
            m = rx.search(msg) if literal in msg else None
            if m:
                self._moe(m, line)
                return True
        for literal, rx in _LINEAR_FORMS:
            m = rx.search(msg) if literal in msg else None
            if m:
                self._linear(m, line)
                return True
        for literal, rx in _ATTN_FORMS:
            m = rx.search(msg) if literal in msg else None
            if m:
                self._attention(m.group(1), line)
                return True
        return False

    def _moe(self, m: re.Match[str], line: str) -> None:
        quants = [g for g in m.groups()[1:] if g]
        if m.re is _FLASHINFER_FP8:  # "FlashInfer ... TRTLLM": the name in two parts
            raw, quant = f"{m.group(1)} {m.group(3)}", m.group(2)
        else:
            bare = {_MXFP4_BARE: "mxfp4", _FLASHINFER_FP8_BARE: "fp8"}.get(m.re, "")
            raw, quant = m.group(1), quants[0] if quants else bare
        if quant.lower() == "mxfp4":  # the MXFP4 lines are gpt-oss's: the checkpoint's method
            self._quantization("mxfp4")
        spec = self._f["speculative"]
        if self._in_draft:
            if not spec["draft_moe_backend_raw"]:
                spec["draft_moe_backend_raw"] = raw
                spec["draft_moe_backend"] = normalise_backend(raw)
                self._evidence("draft_moe", line)
            return
        if self._f["moe_backend_raw"]:  # the first line of the main model wins
            return
        self._f["moe_backend_raw"] = raw
        self._f["moe_backend"] = normalise_backend(raw)
        self._f["moe_quant"] = quant_of(quant)
        self._evidence("moe", line)

    def _attention(self, name: str, line: str) -> None:
        if normalise_backend(name) in _MOE_ONLY:  # "Using Marlin backend": a MoE kernel named without its quant
            if not self._f["moe_backend_raw"] and not self._in_draft:
                self._f["moe_backend_raw"] = name.strip("'\"")
                self._f["moe_backend"] = normalise_backend(name)
                self._evidence("moe", line)
            return
        if self._in_draft:
            spec = self._f["speculative"]
            if not spec["draft_attention_backend"]:
                spec["draft_attention_backend"] = normalise_backend(name)
            return
        if not self._f["attention_backend"]:
            self._f["attention_backend"] = normalise_backend(name)
            self._evidence("attention", line)

    def _linear(self, m: re.Match[str], line: str) -> None:
        kernel = m.group(1)
        if self._in_draft:
            return
        method = m.group(2) if m.lastindex and m.lastindex > 1 else ""
        quant = next((q for word, q in _METHOD_QUANT if word in method), "") if method else ""
        self._quantization(quant or (method.lower() if method in ("MXFP4", "MXFP8") else ""))
        if self._add("linear_kernels", kernel):
            self._evidence("linear", line)

    def _quantization(self, method: str) -> None:
        """The checkpoint's method from a line that names it: the engine config and the args, read earlier, win."""
        if method and not self._f["quantization"]:
            self._f["quantization"] = method

    def _fallback_note(self, msg: str, line: str) -> bool:
        """A GEMM that fell back from the requested linear backend, or Marlin running FP4 weights without FP4 math."""
        if _LINEAR_FALLBACK.search(msg):
            self._add("linear_fallbacks", msg)
            self._evidence("linear_fallback", line)
            return True
        if _MARLIN_FP4 in msg:
            self._f["marlin_fp4_weight_only"] = True
            self._evidence("marlin_fp4", line)
            return True
        return False

    # -- candidates that automatic selection passed over --
    def _passed_over(self, msg: str, line: str) -> bool:
        """A DEBUG/INFO line saying a candidate backend cannot run ("NvFp4 MoE backend 'FLASHINFER_TRTLLM' does not
        support the deployment configuration since ...") while vLLM goes on to select another: no failure, unless
        that backend was asked for. Kept: it becomes the cause if the start then fails with nothing selected."""
        m = CANDIDATE.search(msg) or BACKEND_WORDS.search(msg)
        name = normalise_backend(m.group(1)) if m else ""
        part = "attention" if "ttention" in msg else ("moe" if "MoE" in msg or "Experts" in msg else "linear")
        args = self._f["non_default_args"]
        asked = normalise_backend(str(args.get(f"{part}_backend", "") or "")) if isinstance(args, dict) else ""
        if name and name == asked:
            return False
        if len(self._rejected) < MAX_EVIDENCE:
            self._rejected.append((part, msg))
        self._evidence(f"passed_over:{name or part}", line)
        return True

    def _fallback_cause(self) -> str:
        """The cause of a start that failed without one of its own: a candidate passed over for a part where nothing
        was selected after it, else a backend's "disabled for this configuration" warning."""
        f = self._f
        selected = {"moe": f["moe_backend"], "attention": f["attention_backend"], "linear": bool(f["linear_kernels"])}
        for part, msg in self._rejected:
            if not selected[part]:
                return msg
        return self._disabled
