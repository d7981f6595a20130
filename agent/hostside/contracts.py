"""The shapes of the data the host side produces and the controller reads back: one definition each.

Standard library only, and only types: nothing here runs. Each TypedDict is the JSON a host-side producer
returns or writes (and so what Ansible carries back and what collect reads), and is the type of the matching
table in the results tree (ARCHITECTURE.md). A producer that gains a key gains it here first.

`Failure` uses the functional form because its first key is `class`, a Python keyword.
"""

from __future__ import annotations

from typing import Any, TypedDict

# --- host facts: hostside.facts.gather() -> the [facts] table of cell.toml -------------------------------------


class Facts(TypedDict, total=False):
    """gather() fills every key (no value is None); facts classified on the controller from a partial dict (a
    test, an older host) may hold fewer, so readers use .get() for anything but gpu_name."""

    gpu_name: str
    compute_capability: str  # "12.1"
    driver: str
    cuda: str  # from the nvidia-smi banner
    gpu_count: int
    gpu_mem_gib: float  # 0.0 on GB10 (unified memory: see mem_total_gib)
    simulated: bool
    mem_total_gib: float
    mem_available_gib: float
    disk_free_gib: float  # of the file system holding cache_dir
    cache_dir: str
    python: str
    docker: bool  # a docker daemon answers
    docker_runtimes: list[str]
    nvidia_runtime: bool
    hostname: str
    kernel: str
    machine: str
    arch: str  # from rules/gpus.toml; "" when unknown
    sm: str  # "sm_121a"; "" when unknown
    notes: list[str]  # what could not be read or classified, one warning each
    fingerprint: str  # 8 hex over the stable facts


# --- a failure: logparse (Follower.fatal, classify), supervise.wait_ready, serve.json ------------------------------

_FailureKeys = TypedDict(
    "_FailureKeys",
    {
        "class": str,  # deep_gemm_assert | no_moe_backend | oom | health_timeout | engine_init_failed | other | ...
        "evidence": list[str],  # the log lines that show it
        "root_cause": str,  # one line a person can act on
    },
    total=False,
)


class Failure(_FailureKeys, total=False):
    """{} means no failure. A failure found in a log has all four keys; one found by the supervisor (a health
    timeout, a server that exited without a word) has no draft_model."""

    draft_model: bool  # it happened while the speculative draft model loaded


# --- attestation: hostside.logparse.parse() / Follower.facts() -> the [attestation] table --------------------------


class SpeculativeFacts(TypedDict):
    method: str  # "" = no speculative decoding in the log
    num_speculative_tokens: int  # -1 = not logged
    draft_moe_backend: str
    draft_moe_backend_raw: str
    draft_attention_backend: str
    requested_moe_backend: str  # from --speculative-config's moe_backend, normalised


class Attestation(TypedDict):
    """What a vLLM log says really loaded. "" / -1 / [] / {} where the log does not say. Backends are normalised
    (logparse.normalise_backend), `*_raw` as logged."""

    vllm_version: str
    served_model: str
    non_default_args: dict[str, Any]  # vLLM's "non-default args" repr, made JSON/TOML-safe
    moe_backend: str
    moe_backend_raw: str
    moe_quant: str
    attention_backend: str
    linear_kernels: list[str]
    linear_backend: str  # the one backend of linear_kernels, "mixed", or ""
    linear_fallbacks: list[str]
    marlin_fp4_weight_only: bool
    unknown_env: list[str]  # variables vLLM ignored ("dead")
    autotuner_cliff_count: int
    jit_warning_count: int
    speculative: SpeculativeFacts
    spec_acceptance_rates: list[float]  # fractions 0..1, one per logged interval
    model_load_gib: float
    model_load_s: float
    kv_cache_tokens: int
    engine_ready: bool
    runtime_failure: Failure  # after readiness: {class, root_cause, evidence} of an engine that died mid-run
    startup_complete: bool
    other_model_lines: list[str]  # vision tower / encoder / all-reduce choices: never the answer
    failure: Failure
    evidence: dict[str, str]  # axis (moe, attention, linear, version, unknown_env:VAR, ...) -> first line
    vllm_log_lines: int
    # Pasted fragments: "high" when every fact came from lines in vLLM's own form, "low" when some rest on
    # lines matched by their message body alone (prefix stripped) or repaired (lost first characters, wrapped or
    # '...'-cut lists); "" when no vLLM line was recognised. `repairs` says what was assumed.
    confidence: str
    repairs: list[str]


# --- serve status: supervise.wait_ready() -> serve.json in a cell's run folder ------------------------------------


class ServeStatus(TypedDict):
    ready: bool  # /health answered before the log showed a fatal line or the server died
    failure: Failure  # {} when ready
    facts: Attestation  # the log as far as the wait read it
    startup_s: float


# --- the host lock's holder: supervise.controller_identity() -> state/holder.json --------------------------------


class Holder(TypedDict):
    user: str
    controller_host: str
    controller_pid: int
    since: str  # ISO time, UTC
    sweep: str
    cell_id: str


# --- one measurement window: loadgen -> cNNN-rK.json on the host ----------------------------------------------------


class _Death(TypedDict, total=False):
    engine_died: bool  # only in a window the server died in (it was cut short; ok is False)


class Window(_Death):
    """loadgen.summarize(): one window's numbers; keys as in `vllm bench serve` JSON where the meaning is the same."""

    concurrency: int
    ok: bool  # False: the window failed (`error` says why) and is left out of medians
    error: str
    started_at: str
    duration: float  # the measurement window, seconds
    completed: int  # requests finished inside the window
    failed: int  # requests that errored inside the window
    errors: list[str]  # distinct error messages (first few)
    total_input_tokens: int
    total_output_tokens: int  # tokens received inside the window
    output_throughput: float
    request_throughput: float
    max_concurrent_requests: int
    mean_ttft_ms: float
    median_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    p99_tpot_ms: float
    mean_itl_ms: float
    median_itl_ms: float
    p99_itl_ms: float
    median_e2el_ms: float
    p99_e2el_ms: float


class _Crash(TypedDict, total=False):
    before_crash: bool  # collect adds it: measured before the server died later in the cell


class Measurement(Window, _Crash):
    """loadgen.run_levels(): a window against a cell's server, as the host writes it (cNNN-rK.json)."""

    repeat: int  # 1..repeats
    metrics_delta: dict[str, float]  # metrics.WINDOW_COUNTERS keys: /metrics counters, after minus before
    spec_decode_acceptance_rate: float  # -1.0 when no speculative decoding


# --- checkpoint summary: safetensors.inspect_checkpoint() --------------------------------------------------------


class MtpSummary(TypedDict):
    present: bool
    quantized: bool
    tensors: int
    bytes: int
    formats: dict[str, int]  # format -> modules
    dtypes: dict[str, int]  # dtype -> tensors


class CheckpointSummary(TypedDict):
    """What the safetensors headers of a checkpoint say (no weights read). See inspect_checkpoint()."""

    path: str
    name: str
    shards: int
    tensors: int
    quant_configs: list[dict[str, Any]]
    total_bytes: int
    total_gib: float
    dtypes: dict[str, dict[str, int]]  # dtype -> {tensors, bytes}
    roles: dict[str, dict[str, Any]]  # role -> {tensors, bytes, formats, activation}
    kinds: dict[str, dict[str, int]]  # fp4_weights | fp4_scales | ... -> {tensors, bytes}
    packed_fp4_tensors: int
    high_precision_weights: int
    activation_scales: str  # static | dynamic | mixed | none
    expert_format: str
    high_precision_expert_layers: list[dict[str, Any]]  # [{first, last, format, text}]
    mtp: MtpSummary
    moe: dict[str, int | float | None]  # num_experts, num_experts_per_tok (None when the config does not say)
    bytes_per_token: int | None  # None when the expert count or top-k is unknown
    bytes_per_token_parts: dict[str, int]
    warnings: list[str]


class StartupBreakdown(TypedDict):
    """[startup] of cell.toml: where a server's start went, from its log (hostside/startuplog.py). Seconds; -1 when
    the log does not say. `compile_cache`: warm (the compiled graphs were loaded from the cache), cold (a graph was
    compiled), "" (no torch.compile line: eager mode, or a log that does not say)."""

    weights_s: float  # "Loading weights took X seconds" (or "Model loading took ... and X seconds")
    compile_s: float  # "torch.compile takes|took X s in total" (the last one: it is cumulative)
    compile_cache: str  # warm | cold | ""
    cache_load_s: float  # "Directly load the compiled graph(s) ... from the cache, took X s" (summed)
    graph_capture_s: float  # "Graph capturing finished in X secs"
    engine_init_s: float  # "init engine (profile, create kv cache, warmup model) took X seconds"
    kv_cache_s: float  # engine init minus compile and capture: profiling, KV cache, warmup (>= 0)
    ready_s: float  # first log line to "Application startup complete." (from the log's timestamps)
