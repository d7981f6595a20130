"""The shapes of the data the host side produces and the controller reads back: one definition each.

Standard library only, and only types: nothing here runs. Each TypedDict is the JSON a host-side producer
returns or writes (and so what Ansible carries back and what collect reads), and is the type of the matching
table in the results tree (docs/results-tree.md). A producer that gains a key gains it here first.

`Failure` uses the functional form because its first key is `class`, a Python keyword.
"""

from __future__ import annotations

from typing import Any, TypedDict

# --- host facts: hostside.facts.gather() -> the [facts] table of cell.toml -------------------------------------


class NetInterface(TypedDict):
    """One network interface of a host (hostside/netfacts.py): what a multi-node cell's link is chosen from."""

    name: str  # enp1s0f0np0
    state: str  # up | down | unknown (operstate)
    addresses: list[str]  # IPv4 "a.b.c.d/prefix"
    speed_mbps: int  # -1 when the kernel does not say
    rdma: list[str]  # RDMA devices on it (/sys/class/infiniband/<dev>/device/net/<name>): rocep1s0f0, mlx5_0
    simulated: bool  # a simulated ConnectX on a simulated host: its "link" is the host's loopback address


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
    interfaces: list[NetInterface]  # network interfaces (not part of the fingerprint: addresses differ per host)
    build: BuildOrigin  # the vLLM build the host runs, when facts were asked about an image ({} otherwise)


class BuildOrigin(TypedDict, total=False):
    """Which vLLM build: the same vLLM version selects different kernels depending on the CUDA targets it was built
    for (vllm#50925), and the published targets may lack a chip's (SM121: vllm#38484)."""

    source: str  # image | "" (unknown)
    ref: str  # the image as asked for, and its digest when the host has one (name@sha256:...)
    vllm_version: str  # as the image says it (its env or labels); "" when it does not
    cuda_targets: list[str]  # TORCH_CUDA_ARCH_LIST of the build ("12.0", "12.1a", "12.0+PTX"), when the image says it
    sm121: str  # yes | no | unknown: whether the targets hold SM121 kernels (not PTX alone)


# --- a failure: logparse (Follower.fatal, classify), supervise.wait_ready, serve.json ------------------------------

_FailureKeys = TypedDict(
    "_FailureKeys",
    {
        "class": str,  # deep_gemm_assert | no_moe_backend | unsupported_backend | invalid_args | oom | ended_before_ready | ...
        "evidence": list[str],  # the log lines that show it
        "root_cause": str,  # one line a person can act on
    },
    total=False,
)


class Failure(_FailureKeys, total=False):
    """{} means no failure. A failure found in a log has all four keys; one found by the supervisor (a health
    timeout, a server that exited without a word) has no draft_model."""

    draft_model: bool  # it happened while the speculative draft model loaded
    backend: str  # unsupported_backend: the backend that cannot run this chip, model or configuration; a kernel's own
    # failure class (flashinfer_jit_arch, triton_shared_memory, deep_gemm_assert, cutlass_disabled): its family
    requires: str  # what the chip must have, where the message says it ("compute capability 90 or 100"); else ""


# --- attestation: hostside.logparse.parse() / Follower.facts() -> the [attestation] table --------------------------


class SpeculativeFacts(TypedDict):
    method: str  # "" = no speculative decoding in the log
    num_speculative_tokens: int  # -1 = not logged
    draft_moe_backend: str
    draft_moe_backend_raw: str
    draft_attention_backend: str
    requested_moe_backend: str  # from --speculative-config's moe_backend, normalised


class NcclLink(TypedDict):
    """One rank's NCCL network choice, as its init lines say."""

    node: str  # Ray's ip= prefix (a rank on another node), else the host name NCCL logs ("head" if none)
    transport: str  # IB | Socket (as NCCL names its network; RoCE devices are "IB")
    device: str  # mlx5_0:1/RoCE, rocep1s0f0:1/RoCE, eth0:10.0.0.1 ... ("" when not logged)
    line: str  # the evidence line


class ClusterFacts(TypedDict):
    """What a multi-node log says about the cluster (hostside/logparse/cluster.py); -1 / [] where it does not say."""

    world_size: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    ray_nodes: int  # distinct nodes that logged (the head plus every worker ip= in Ray's prefixes)
    links: list[NcclLink]


class Attestation(TypedDict):
    """What a vLLM log says really loaded. "" / -1 / [] / {} where the log does not say. Backends are normalised
    (logparse.normalise_backend), `*_raw` as logged."""

    vllm_version: str
    served_model: str
    non_default_args: dict[str, Any]  # vLLM's "non-default args" repr, made JSON/TOML-safe
    moe_backend: str
    moe_backend_raw: str
    moe_quant: str
    quantization: str  # the checkpoint's method as vLLM ran it (--quantization, the engine config): awq_marlin, fp8
    attention_backend: str
    linear_kernels: list[str]
    linear_backend: str  # the one backend of linear_kernels, "mixed", or ""
    linear_fallbacks: list[str]
    marlin_fp4_weight_only: bool
    unknown_env: list[str]  # variables vLLM ignored ("dead")
    autotuner_cliff_count: int
    jit_warning_count: int
    load_format: str  # --load-format as the server took it ("dummy": random weights, quality never judged)
    speculative: SpeculativeFacts
    spec_acceptance_rates: list[float]  # fractions 0..1, one per logged interval
    model_load_gib: float
    model_load_s: float
    kv_cache_tokens: int
    kv_cache_gib: float  # "Available KV cache memory: X GiB"; -1.0 when not logged
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
    cluster: ClusterFacts  # multi-node: world size, TP/PP, Ray nodes, NCCL transport per rank


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


class _Shaped(TypedDict, total=False):
    """Window keys added with open-loop load, datasets and goodput (issue 15): every new window has them, windows
    measured before them do not. Names as `vllm bench serve` JSON where it has the same figure."""

    mean_e2el_ms: float
    request_goodput: float  # completed requests meeting every SLO per second (bench --goodput)
    p50_ttft_ms: float
    p90_ttft_ms: float
    p95_ttft_ms: float
    p50_tpot_ms: float
    p90_tpot_ms: float
    p95_tpot_ms: float
    p50_itl_ms: float
    p90_itl_ms: float
    p95_itl_ms: float
    p50_e2el_ms: float
    p90_e2el_ms: float
    p95_e2el_ms: float
    request_rate: float  # offered requests/s; 0.0 = closed loop
    burstiness: float  # gamma shape of the arrival gaps (1.0 = Poisson)
    context_depth: int  # prompt tokens of every request on the context-depth axis; 0 = off
    late_starts: int  # open loop: requests started more than loadgen.LATE_S after their time
    missed_starts: int  # open loop: scheduled inside the window but never started
    p50_start_lag_ms: float
    p99_start_lag_ms: float
    max_start_lag_ms: float
    mean_input_len: float  # prompt tokens as sent (exact when /tokenize counted them)
    min_input_len: int
    max_input_len: int
    dataset: str  # random | sharegpt | prefix
    exact_lengths: bool  # prompt lengths counted by the server's /tokenize
    prefix_cache: str  # before the window: reset | kept | unavailable | failed


class WarmupRecord(TypedDict):
    """loadgen: a point's warmup run until steady (hostside/steady.py), on the point's first measured window."""

    windows: int  # warmup windows run
    seconds: float  # from the first warmup window's start to the last one's end (the load driver's clock)
    steady: bool  # False: stopped at `maximum` (or by failed requests) without settling
    reason: str  # why it stopped
    output_throughputs: list[float]  # tok/s of each warmup window
    jit_lines: int  # JIT/autotune lines the server logged during the warmup windows
    jit_evidence: str  # the first of them ("" = none)
    tolerance: float  # the spec's warmup_tolerance
    maximum: int  # the spec's warmup_max


class _Steady(TypedDict, total=False):
    warmup: WarmupRecord  # the point's warmup until steady, on its first measured window
    # the JIT/autotune lines the server logged during this window (with a server log to read; absent without):
    # more than 0 and the window is flagged, never ranked (judging/stats.py)
    jit_lines: int
    jit_evidence: str  # the first such line


class Window(_Death, _Shaped, _Steady):
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


class WindowTelemetry(TypedDict):
    """telemetry.summarize(): what the GPU and host did during one window. -1.0 where nothing was read."""

    available: bool  # False: no GPU telemetry (`note` says why); the window is still measured
    note: str
    samples: int
    interval_s: float
    duration_s: float
    energy_j: float  # time-weighted mean power x window length
    joules_per_output_token: float
    tokens_per_watt: float  # output tokens per joule = (tokens/s) per W
    power_mean_w: float
    power_p50_w: float
    power_max_w: float
    temp_mean_c: float
    temp_p50_c: float
    temp_max_c: float
    sm_clock_min_mhz: float
    sm_clock_max_mhz: float
    mem_clock_min_mhz: float
    mem_clock_max_mhz: float
    util_mean_pct: float
    host_mem_used_max_gib: float  # /proc/meminfo: on GB10 the GPU's memory too
    load1_max: float  # /proc/loadavg
    throttle_s: float  # time with a power or thermal clocks-event reason active
    throttle_share_pct: float
    throttle_reasons: list[str]  # telemetry.REASON_BITS names
    throttle_threshold_pct: float  # the spec's threshold this window was judged by
    throttled: bool  # throttle_share_pct > throttle_threshold_pct
    unsupported: list[str]  # nvidia-smi fields that read N/A / Not Supported (GB10: memory.*)
    timeline: dict[str, list[float]]  # t_s, power_w, temp_c, throttled (0/1): at most TIMELINE_POINTS each
    cooldown_s: float  # waited before this level (spec cooldown_s / cool_to_c); 0.0 for the others
    cooldown_note: str  # how the wait ended ("" when there was none)


class ServerView(TypedDict):
    """telemetry.server_view(): the server's own counters over a window (vLLM's metric names)."""

    scraped: bool  # both /metrics scrapes answered
    deltas: dict[str, float]  # metrics.SERVER_COUNTERS the server exports: after - before
    gauges: dict[str, dict[str, float]]  # vllm:kv_cache_usage_perc, num_requests_running/_waiting -> mean, max
    gauge_samples: int
    accepted_per_position: list[float]  # accepted / drafts per speculative position; [] without
    server_generation_tokens: float  # -1.0 when not scraped
    client_output_tokens: int
    token_bound: float  # the cut-request bound of the cross-check
    tokens_disagree: bool  # |server - client| > token_bound


class _Pressure(TypedDict, total=False):
    pressure: list[str]  # collect adds it (planning/memory.window_flags): saturated | preempted | kv_above_90


class _Telemetry(TypedDict, total=False):
    telemetry: WindowTelemetry  # with a sampler (spark_bench); older results lack it
    warmup_telemetry: WindowTelemetry  # the level's warmup, on its first measured window
    server: ServerView


class Measurement(Window, _Crash, _Telemetry, _Pressure):
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


# --- memory plan: hostside.memplan (model_memory on the host, plan on the controller and in the simulator) ----------


class ModelMemory(TypedDict):
    """What a model needs in memory, from its safetensors headers (or config.json alone when it has none, as for
    `--load-format dummy`) and its config.json: memplan.model_memory()."""

    source: str  # headers | config | simulator (the simulator's calibration)
    weight_bytes: int  # every weight, the MTP module included
    weight_parts: dict[str, int]  # fp4_weights | fp4_scales | fp8_weights | fp8_scales | high_precision -> bytes
    expert_bytes: int  # of weight_bytes: the routed experts
    mtp_bytes: int  # of weight_bytes: the MTP module, loaded only with speculative decoding
    layers: int
    attention_layers: int  # layers with a KV cache: full attention and sliding windows
    sliding_layers: int  # of attention_layers: with a sliding window
    sliding_window: int  # tokens; 0 = none
    linear_layers: int  # linear attention / Mamba: a state per sequence, no KV per token
    kv_heads: int
    head_dim: int
    kv_dtype: str  # what `--kv-cache-dtype auto` stores: the checkpoint's KV quantization, else its dtype
    kv_bytes_per_token: int  # at kv_dtype, over all attention_layers (one GPU, no parallelism)
    state_bytes_per_seq: int  # linear layers' state per sequence (an estimate from config.json; 0 without)
    max_position: int  # max_position_embeddings; 0 when config.json does not say
    notes: list[str]  # what could not be read or is only estimated


class DeviceMemory(TypedDict):
    """The memory vLLM's gpu_memory_utilization is a fraction of, on one host (planning/memory.device_memory)."""

    kind: str  # unified (GB10: shared with the OS) | discrete | unknown
    total_gib: float  # what vLLM takes the fraction of (unified: MemTotal)
    free_gib: float  # free now (unified: MemAvailable); -1.0 when not known
    source: str  # where the figures come from ("/proc/meminfo", "nvidia-smi", "the simulator's calibration")


class MemoryPlan(TypedDict):
    """A cell's memory before its start (memplan.plan): [memory.plan] of cell.toml. GiB; -1.0 = not known."""

    fits: str  # yes | queues (a full batch of max_model_len does not fit at once: vLLM queues) | no | unknown
    problem: str  # why not, in one line ("" when it fits)
    advice: list[str]  # what to change: max_model_len, max_num_seqs, kv_cache_dtype, gpu_memory_utilization
    device: str  # DeviceMemory.kind
    total_gib: float
    free_gib: float
    gpu_memory_utilization: float
    budget_gib: float  # utilization x total: everything vLLM may take
    weights_gib: float  # what "Model loading took X GiB" should say
    weights_source: str  # ModelMemory.source
    weight_parts_gib: dict[str, float]  # by kind, with "routed_experts" (of those) where the model has them
    reserve_gib: float  # activations, CUDA graphs, the CUDA context (memplan.RESERVE_GIB)
    kv_gib: float  # budget - weights - reserve: what "Available KV cache memory" should say
    kv_dtype: str
    kv_bytes_per_token: int  # per GPU, at kv_dtype
    kv_tokens: int  # what "KV cache size: N tokens" should say
    max_model_len: int
    max_num_seqs: int
    request_gib: float  # KV (and state) of one request of max_model_len
    batch_gib: float  # of max_num_seqs such requests at once
    fit_seqs: int  # requests of max_model_len that fit at once
    fit_model_len: int  # the longest max_model_len one request can have
    notes: list[str]


class MemoryLogged(TypedDict):
    """What the server log said (the attestation's figures): [memory.logged]; -1 where it did not say."""

    weights_gib: float  # "Model loading took X GiB"
    kv_gib: float  # "Available KV cache memory: X GiB"
    kv_tokens: int  # "KV cache size: N tokens"


class MemoryRecord(TypedDict):
    """[memory] of cell.toml: the plan beside what vLLM logged, and the miss in percent (-1.0: nothing to compare)."""

    plan: MemoryPlan
    logged: MemoryLogged
    weights_miss_pct: float  # |plan - logged| / logged x 100
    kv_tokens_miss_pct: float


class StartupBreakdown(TypedDict):
    """[startup] of cell.toml: where a server's start went, from its log (hostside/startuplog.py). Seconds; -1 when
    the log does not say. `compile_cache`: warm (the compiled graphs were loaded from the cache), cold (a graph was
    compiled), "" (no torch.compile line: eager mode, or a log that does not say)."""

    weights_s: float  # "Loading weights took X seconds" (or "Model loading took ... and X seconds")
    compile_s: float  # "torch.compile takes|took X s in total" (the last one: it is cumulative)
    compile_cache: str  # warm | cold | ""
    cache_load_s: float  # "Directly load the compiled graph(s) ... from the cache, took X s" (summed)
    graph_capture_s: float  # "Graph capturing finished in X secs"
    engine_init_s: float  # "init engine (profile, create kv cache, warmup model) took X seconds" (0.24: "X s (...)")
    kernel_warmup_s: float  # "DeepGEMM warmup: 100%|...| N/N [MM:SS<...": JIT kernels built at start (0.24, Hopper)
    kv_cache_s: float  # engine init minus compile, capture and kernel warmup: profiling, KV cache (>= 0)
    ready_s: float  # first log line to "Application startup complete." (from the log's timestamps)


# --- a detached sweep's runner: hostside.runner -> <workdir>/sweeps/<sweep>/progress.json ------------------------


class CellDone(TypedDict):
    outcome: str  # "sealed" (a result waits in runs/<id>.tar) | "host_error" (the host could not take the cell)
    error: str  # why, for host_error; "" otherwise
    started: float  # epoch s, on the host's clock
    finished: float
    measure_s: float  # the load driver's time


class LiveWindow(TypedDict):
    """The running cell's latest measured window, as read_progress finds it ({} before the first)."""

    concurrency: int
    tok_s: float  # output_throughput
    ttft_ms: float  # median
    tpot_ms: float  # median
    at: float  # epoch s (the host's clock) the window was written


class RunnerProgress(TypedDict, total=False):
    sweep: str
    state: str  # running | finished | stopped
    pid: int
    started: str  # ISO UTC
    updated: str
    current: str  # the cell running now ("" between cells)
    current_since: str
    stopped: str  # state=stopped: the cell it was on when told to stop ("" between cells), left unsealed
    done: dict[str, CellDone]  # cell id -> how it ended
    alive: bool  # read_progress: the runner process still holds the host
    sealed: list[str]  # read_progress: done cells whose tar is there to collect
    handout: str  # the plan's hand-out token the `done` entries belong to
    note: str  # why the runner stopped on its own (its work dir vanished: what it stopped); "" otherwise
    window: LiveWindow | dict[str, Any]  # read_progress: the running cell's latest window ({} none), the live view


# --- a multi-node cell's Ray node: raynode.start writes it as its log's first line, logparse.cluster reads it back


class RayNodeReport(TypedDict):
    """[[nodes]] of a multi-node cell.toml: what each node did before its Ray node started."""

    host: str  # inventory name (the controller's, not the host's word)
    role: str  # head | worker
    page_cache: str  # kept | dropped | simulated host: not dropped | not dropped (why)
    image: str  # docker runtime: the image digest the node's Ray container runs, verified; "" = process runtime


# --- the correctness probe: hostside.probe.run -> probe.json in the run folder; the [correctness] table -----------


class ProbeOutput(TypedDict):
    id: str  # the prompt's id in its set (hostside/probe.py prompts)
    text: str  # the greedy output as the server returned it (bounded)
    finish_reason: str
    error: str  # "" when the request succeeded
    seconds: float


class LongOutput(TypedDict):
    """One long greedy generation (hostside/longdecode.py), as streamed: nothing judged."""

    id: str  # long-n: the opening's id
    path: str  # c1: alone | batch: among copies up to the cell's highest concurrency
    text: str  # bounded (longdecode.MAX_CHARS)
    token_ids: list[int]  # the server's token ids (return_token_ids); [] when it sent none
    chunk_tokens: list[int]  # per streamed chunk: tokens generated by its end (the server's running count)
    chunk_chars: list[int]  # per streamed chunk: characters of text by its end
    error: str
    seconds: float


class LongOptions(TypedDict):
    """What the long-decode check asks of a cell's server (the spec's [correctness] long_*; 0 tokens = off)."""

    tokens: int
    prompts: int
    batch: int  # requests in flight for the batch path: the cell's highest concurrency (< 2: no batch path)
    budget_s: float
    tasks_batch: int  # the task-accuracy set at this concurrency (the cell's highest; < 2: not asked)


class ProbeRun(TypedDict):
    """probe.json: what the server said to each probe prompt, nothing judged (the controller scores it)."""

    set_version: int
    outputs: list[ProbeOutput]
    seconds: float
    batch_outputs: list[ProbeOutput]  # the task-accuracy set (probe.tasks) at the cell's highest concurrency
    batch_concurrency: int  # 0: not asked
    long: list[LongOutput]  # the long-decode check; [] when off
    long_seconds: float


class ProbeResult(TypedDict, total=False):
    """One [[correctness.outputs]] row of cell.toml: the output, judged on the controller."""

    id: str
    kind: str  # arithmetic | reverse | count | retrieve | text
    text: str
    error: str
    exact: bool  # only for a prompt with one answer
    degenerate: str  # "" | empty | non-printable | repetition loop
    agreement: float  # judging only (not stored): share of the reference's words reproduced before divergence
    first_divergence: int  # judging only: word index of the first difference, -1 = identical


class LongResult(TypedDict):
    """One [[correctness.long]] row of cell.toml: a long output judged on the controller (judging/longdecode.py)."""

    id: str
    path: str  # c1 | batch
    units: str  # tokens: the server's token ids are compared | words: it sent none, words are
    tokens: int  # generated
    seq: str  # the compared sequence, packed (longdecode.pack)
    at: str  # words only: each word's token position, packed
    degenerate: str  # "" | loop | noise | collapse
    degenerate_at: int  # token position where it turned (-1 = it did not)
    excerpt: str  # the text around that position
    error: str
    seconds: float


class LongPath(TypedDict):
    """Judging only: one comparison of long outputs along a path (judging/correctness.py)."""

    path: str  # reference (this configuration vs the reference cell) | batch (c=1 vs the highest level) |
    # speculative (spec on vs its spec-off twin) | graphs (CUDA graphs vs its --enforce-eager twin)
    against: str  # the cell id compared with
    prompt: str
    first_divergence: int  # token position, -1 = identical
    agreement: float  # share of the longer output shared before it
    follows: str  # identical | plausible alternative | loop | garbage
    degenerate_at: int  # where this path's output degenerated (-1 = it did not)


class Correctness(TypedDict, total=False):
    """[correctness] of cell.toml: the probe's outputs scored on their own, and the thresholds the spec set.
    Agreement with the group's reference cell is computed when the tree is read (judging/correctness.py)."""

    set_version: int
    probed: bool  # false: the server was not asked (it died, the cell was stopped, the probe is off)
    seconds: float  # the probe's time on the host
    prompts: int
    answered: int  # prompts with one answer
    exact: int  # of those, answered exactly
    score: float  # exact / answered
    degenerate: int
    errors: int
    outputs: list[ProbeResult]
    thresholds: dict[str, float]  # min_score, max_score_drop, min_agreement, max_degenerate
    reference: dict[str, str]  # the spec's reference cell (config values), {} = chosen by consensus
    batch_concurrency: int  # the task-accuracy set's concurrency (the cell's highest); absent: not asked
    batch_answered: int
    batch_exact: int
    batch_score: float  # exact share of the task-accuracy set at that concurrency
    long: list[LongResult]  # the long-decode check ([] = it did not run)
    long_seconds: float  # its time on the host
    # judging only (added when the tree is read, never stored):
    agreement: float  # mean agreement with the reference's outputs; 1.0 for the reference itself
    first_divergence: int  # earliest word index where any output leaves the reference's; -1 = none
    reference_cell: str  # the cell id compared with ("" = none in its group)
    reference_host: str  # its host (replicas of a configuration share the cell id)
    wrong: list[str]  # why the cell is WRONG OUTPUT ([] = it is not)
    not_judged: str  # why its outputs are not judged ("dummy weights"; "" = they are): ranked on speed only
    consensus: str  # how the reference was chosen (named, consensus across N hosts, one host, none)
    suspicious: str  # "" | why this cell's outputs are not trusted (a perfect score that agrees with nobody)
    advisory: list[str]  # disagreements with a reference no other host vouches for: said, never WRONG OUTPUT
    long_paths: list[LongPath]  # the long outputs along each path
    broke_first: str  # the path whose long output degenerated earliest ("" = none did)
