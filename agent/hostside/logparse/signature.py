"""Failure classes: the signatures that say why a start failed (`signature_of`), what killed an engine that was
serving (`death_cause_of`), and what a kernel's error says the chip must have (`requirement`).

Its own family because it is a table, not a reading: each class is matched on one message, with no memory of the
lines around it (failure.py has that), so each row is tested alone and a new wording is one more row.
"""

from __future__ import annotations

import re

from .line import Guarded, GuardedAny, Matcher, Then

SUPERVISOR_PREFIX = "spark-agent supervisor: "  # lines the host-side supervisor appends to a server's log
ENDED_BEFORE_READY = "ended_before_ready"  # no error, no readiness: a cut log or an excerpt proves no start
ROOT_CAUSE_MISSING = "root_cause_not_in_excerpt"  # only "Engine core initialization failed. See root cause above"

# --- failure classes -------------------------------------------------------------------------------
# Out of GPU memory, in every layer's words: PyTorch's allocator ("CUDA out of memory", OutOfMemoryError), CUDA's own
# error (during CUDA-graph capture: "RuntimeError: CUDA error: out of memory"), the driver API, cuBLAS, NCCL
# ("Cuda failure 'out of memory'"), ROCm/XPU builds; and the allocator's sentence alone, as a wrapped paste keeps it
# ("Tried to allocate 2.00 MiB. GPU 6 has a total capacity of 44.53 GiB of which 448.00 KiB is free").
OOM = GuardedAny(
    ("emory", "MEMORY", "ALLOC"),
    r"CUDA out of memory|OutOfMemoryError|NV_ERR_NO_MEMORY|CUDA error: out of memory|CUDA_ERROR_OUT_OF_MEMORY"
    r"|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED|Cuda failure '?out of memory|(?:HIP|XPU) out of memory",
)
OOM_ALLOCATOR = Guarded("Tried to allocate", r"Tried to allocate [\d.]{1,12} [KMGT]i?B")
OOM_CAPACITY = Guarded("total capacit", r"total capacity of? [\d.]{1,12} [KMGT]i?B")
# (class, signatures). Checked in this order on each line; the first that matches decides the line.
_FATAL_SIGNATURES: tuple[tuple[str, tuple[Matcher, ...]], ...] = (
    (
        "deep_gemm_assert",
        (
            re.compile(
                r"DeepGemmQuantScaleFMT oracle cache not initialized"
                r"|hyperconnection\.hpp:\d+\): Unsupported architecture"
            ),
            Then(r"layout\.hpp", "Unknown recipe"),
            Then("deep_gemm", "Assertion"),
            # DeepGEMM's JIT/runtime asserts, whatever kernel they came from: "Assertion error (<path>.hpp:N): cond"
            # (DG_HOST_ASSERT's form) or its kernel_runtime "exit_code == 0" (the JIT compile failed).
            Then(r"kernel_runtime\.hpp", r"Assert|exit_code == 0|!= nullptr"),
            Then("jit_kernels/", r"Assert|exit_code == 0|!= nullptr"),
            Then("ssertion error", r"\.(?:hpp|cuh):\d+"),
            # any error DeepGEMM's own sources raise ("CUDA driver error (.../deepgemm-src/.../runtime_utils.hpp:144)")
            Then(r"deepgemm-src|DeepGEMM/csrc", r"\.(?:hpp|cuh):\d+"),
        ),
    ),
    (
        "no_moe_backend",
        (Guarded("MoE backend supports the", r"No [\w ]{0,80}MoE backend supports the deployment configuration"),),
    ),
    ("unsupported_moe_backend", (re.compile(r"moe_backend='[^']*' is not supported for"),)),
    (
        "invalid_args",  # argparse refused the command line, or the config refused a value: nothing started
        (
            re.compile(
                r"^(?:usage: )?[\w./ -]{1,80}: error: (?:unrecognized arguments|argument |the following arguments"
                r"|invalid choice|ambiguous option|expected one argument)"
            ),
            re.compile(r"ValidationError: \d{1,4} validation errors? for \w{0,60}(?:Config|Args)\b"),
            Guarded("does not match the quantization method", r"Quantization method specified in the model config"),
            # pydantic's own line under a ValidationError ("  Value error, Unknown attention backend: 'X'. Valid
            # options are: ...", "[type=value_error, input_value=...]", "Input should be ..."), pasted without the
            # ValidationError above it, and a config's refusal that lists what it accepts
            Guarded("alue error, ", r"alue error, \S"),
            Guarded("[type=", r"\[type=\w{1,40}, input_value="),
            Guarded("nput should be ", r"nput should be (?:'|a |an |less |greater |one of |a valid )"),
            Guarded("alid options are", r"alid options are:? \S"),
            Guarded("alid choices are", r"alid choices are:? \S"),
        ),
    ),
    ("attention_backend_invalid", (re.compile(r"Selected backend \S+ is not valid for this configuration"),)),
    (
        "cluster_incomplete",  # multi-node: the Ray cluster lacks the nodes or GPUs TP x PP needs
        (re.compile(r"exceeds the total number of available GPUs|placement group of \d+ GPU bundle"),),
    ),
    # Kernels' own errors, each its family's class (the failure names the backend and, where the message says it,
    # what the chip must have: Failure.requires). FlashInfer's JIT found no target for this GPU's architecture
    # (vllm#31740, flashinfer#3633); Triton's kernel needs more shared memory than the GPU has (vllm#36802).
    (
        "flashinfer_jit_arch",
        (
            Guarded("No supported CUDA architectures found", "No supported CUDA architectures found"),
            Guarded("requires GPUs with", r"FlashInfer requires GPUs with sm_?\d{2,3}"),
        ),
    ),
    ("triton_shared_memory", (Guarded("out of resource", r"out of resource: shared memory"),)),
    # A backend that cannot run this deployment: the chip (compute capability: the hard requirement, said in any of
    # vLLM's and its kernels' words), the model ("FusedMoE flashinfer kernels are only supported for Llama4") or the
    # configuration ("X does not support the deployment configuration since ..."). The failure names the backend.
    (
        "unsupported_backend",  # each form tried only on text that holds its literal: near misses stay cheap
        (
            # "... since <reason>", or without one when the kernel gave none (oracle/nvfp4.py's _make_log_unsupported)
            Guarded("the deployment configuration", r"does not support the deployment configuration(?: since|\.|\s*$)"),
            Guarded("only supported ", r"(?:[Kk]ernels?|[Bb]ackend) (?:are|is) only supported (?:for|with|by) "),
            Guarded(
                "requires ", r"requires (?:SM ?1\d\d|sm_?1\d\da?|Blackwell datacenter|datacenter Blackwell|Hopper)"
            ),
            Guarded("upported ", r"supported (?:only )?on (?:[\w-]{1,20} ){0,4}\(?(?:SM ?\d{2,3}|sm_\d{2,3}a?)\b"),
            Guarded("current device", r"does not support current device(?! since)"),
            Guarded(" for CUDA device capability", r"compiled \w{1,80} for CUDA device capability"),
            Guarded(" on current platform", r"unavailable for \w{1,80} on current platform"),
        ),
    ),
    ("no_attention_backend", (re.compile(r"No valid attention backend found"),)),
    ("free_memory_check", (Then("Free memory on device", "is less than desired GPU memory utilization"),)),
    ("oom", (OOM, OOM_ALLOCATOR, OOM_CAPACITY)),
    ("ptxas_arch", (Then("ptxas", r"sm_12\d"), re.compile(r"sm_12\da?'? is not defined for option"))),
    (
        "flashinfer_version",
        (Then("cubin version ", " does not match"), Then(r"jit[-_]cache version ", " does not match")),
    ),
    (
        "cute_dsl_arch",
        (re.compile(r"expects arch to be one of|CUTE_DSL_ARCH matches"), Then("[Ee]rror", "CUTE_DSL_ARCH")),
    ),
)
# After readiness, the root cause of an engine that died mid-run: checked before the startup signatures. The OOM
# killer and signals leave no line of vLLM's own; the supervisor adds one when the server ends (SUPERVISOR_PREFIX).
_DEATH_CAUSES: tuple[tuple[str, Matcher], ...] = (
    # a multi-node cell: a rank's Ray actor (its node) went away
    ("worker_lost", re.compile(r"ActorDiedError|ActorUnavailableError|The actor died unexpectedly|its node has died")),
    ("oom", OOM),
    ("oom", OOM_ALLOCATOR),
    ("oom", OOM_CAPACITY),
    ("oom", re.compile(r"Out of memory: Killed process|OOMKilled|OOM killer")),
    ("cuda_error", re.compile(r"CUDA error|CUDA_ERROR_\w+|cudaError\w+|illegal memory access was encountered")),
    ("killed_by_signal", re.compile(r"killed by signal \d+|Fatal Python error: (?:Segmentation fault|Aborted)")),
)
# "X is disabled for this configuration": fatal when raised; a warning only explains a start that then fails with
# no cause of its own (the failure becomes this backend's).
DISABLED = re.compile(r"([\w.-]{1,80}(?: [\w.-]{1,80}){0,3}) (?:is|are) disabled for this configuration")
# What a kernel's error says the chip must have: "major versions [10]", "sm75 or higher", "Required capability: 90 or
# 100", "requires SM100", "supported on SM90", Triton's "Required: 81920, Hardware limit: 65536".
_REQUIRES = (
    (re.compile(r"for major versions \[([\d, ]{1,40})\]"), "compute capability {0}.x (FlashInfer's JIT targets)"),
    (re.compile(r"requires GPUs with (sm_?\d{2,3}a? or higher)"), "{0}"),
    (re.compile(r"Required capability: ([\d]{2,3}(?: or \d{2,3})*)"), "compute capability {0}"),
    (re.compile(r"requires (SM ?1\d\da?|sm_?1\d\da?|Blackwell datacenter|datacenter Blackwell|Hopper)"), "{0}"),
    (re.compile(r"supported (?:only )?on (?:[\w-]{1,20} ){0,4}\(?(SM ?\d{2,3}a?|sm_\d{2,3}a?)\b"), "{0}"),
    (
        re.compile(r"shared memory, Required: (\d{1,9}), Hardware limit: (\d{1,9})"),
        "{0} bytes of shared memory per block (this GPU has {1})",
    ),
)


# DeepGEMM's DG_HOST_ASSERT prints its condition: "arch_major == 9", "arch_major == 10 or (arch_major == 12 and ...)",
# "device_runtime->get_arch_major() == 9": every major it names is one the kernel accepts.
_ARCH_MAJOR = re.compile(r"\b(?:get_)?arch_major(?:\(\))? == (\d{1,2})\b")


def requirement(cause: str) -> str:
    """What the chip must have, as a failure's message says it ("" when it says nothing of the kind)."""
    majors = dict.fromkeys(_ARCH_MAJOR.findall(cause[:2000]))
    if majors:
        return f"compute capability {' or '.join(f'{m}.x' for m in majors)} (DeepGEMM)"
    for rx, form in _REQUIRES:
        m = rx.search(cause)
        if m:
            return form.format(*(g.strip() for g in m.groups()))
    return ""


def disabled_class(msg: str) -> str:
    """ "X is disabled for this configuration": CUTLASS's own refusal, or another backend's."""
    m = DISABLED.search(msg)
    return "cutlass_disabled" if m and "cutlass" in m.group(1).lower() else "unsupported_backend"


def death_cause_of(msg: str) -> str:
    for cls, rx in _DEATH_CAUSES:
        if msg and rx.search(msg):
            return cls
    return signature_of(msg)


def signature_of(msg: str) -> str:
    if not msg:
        return ""
    for cls, matchers in _FATAL_SIGNATURES:
        for rx in matchers:
            if rx.search(msg):
                return cls
    return ""
