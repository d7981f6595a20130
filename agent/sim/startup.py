"""The startup log vLLM writes for a Plan, with the time it takes; on failure a traceback and False."""

from __future__ import annotations

import sys
import time

from . import calibration, warmstart
from .options import Options
from .plan import Failure, Plan
from .vlog import API, ENGINE, VllmLog

SITE = "/usr/local/lib/python3.12/dist-packages/"
LOGO = [
    "       █     █     █▄   ▄█",
    " ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}",
    "  █▄█▀ █     █     █     █  model   {model}",
    "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀",
    "",
]
# Share of the startup time spent before each stage is reached.
STAGE_TIME = {
    "model": 0.05,
    "memory_check": 0.1,
    "flashinfer_import": 0.15,
    "moe_select": 0.2,
    "weights": 0.45,
    "draft": 0.5,
    "compile": 0.6,
    "profile": 0.7,
    "kv": 0.8,
}


class _Fields(dict):
    def __missing__(self, key):
        return "{" + key + "}"


class Startup:
    def __init__(self, log: VllmLog, opts: Options, plan: Plan, env: dict):
        self.log, self.opts, self.plan, self.env = log, opts, plan, env
        self.phases = warmstart.phases(env, opts.model, plan.checkpoint, plan.quant, opts.max_model_len)
        base = opts.sim["startup_s"]
        if opts.sim.get("startup") == "calibrated":  # the phases' simulated seconds, at the chosen time scale
            base = self.phases.total_s / max(float(opts.sim.get("time_scale") or 1.0), 1e-6)
        self.total_s = base + opts.sim["slow_start"]
        self.t0 = time.monotonic()

    def _wait_until(self, share: float) -> None:
        delay = self.t0 + share * self.total_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def _reached(self, stage: str) -> bool:
        """Sleep until `stage`; True when the plan's failure strikes here (the caller stops)."""
        self._wait_until(STAGE_TIME[stage])
        failure = self.plan.failure
        return failure is not None and failure.stage == stage

    def run(self) -> bool:
        self._identity()
        steps = [
            ("model", self._model_config),
            ("memory_check", self._engine_config),
            ("flashinfer_import", self._attention),
            ("moe_select", self._kernels),
            ("weights", self._weights),
            ("draft", self._draft),
            ("compile", self._compile),
            ("profile", lambda: None),
            ("kv", self._kv),
        ]
        for stage, emit in steps:
            if self._reached(stage):
                self._traceback()
                return False
            emit()
        self._wait_until(0.95)
        p = self.phases
        self.log.info(
            ENGINE,
            "gpu_model_runner.py:4587",
            f"Graph capturing finished in {p.graph_capture_s:.0f} secs, took 0.52 GiB",
        )
        self._wait_until(1.0)
        self.log.info(
            ENGINE,
            "core.py:290",
            f"init engine (profile, create kv cache, warmup model) took {p.engine_init_s:.2f} seconds",
        )
        return True

    def _compile(self) -> None:
        """torch.compile in vLLM's words: from the cache when this model's graphs are there, else compiled + stored."""
        p = self.phases
        if p.cache_dir:
            self.log.info(ENGINE, "backends.py:548", f"Using cache directory: {p.cache_dir} for vLLM's torch.compile")
        self.log.info(ENGINE, "backends.py:559", f"Dynamo bytecode transform time: {p.dynamo_s:.2f} s")
        if p.warm:
            self.log.info(
                ENGINE,
                "backends.py:292",
                f"Directly load the compiled graph(s) for compile range (1, {p.range_end}) from the cache, "
                f"took {p.compile_s:.3f} s",
            )
        else:
            self.log.info(
                ENGINE,
                "backends.py:320",
                f"Compiling a graph for compile range (1, {p.range_end}) takes {p.compile_s:.2f} s",
            )
            warmstart.store(p)
        self.log.info(ENGINE, "monitor.py:34", f"torch.compile takes {p.compile_total_s:.2f} s in total")

    # -- the lines, in vLLM's order -------------------------------------------------------------
    def _identity(self) -> None:
        cal = calibration.load()["versions"]
        version, opts = self.plan.version, self.opts
        if not calibration.at_least(version, cal["logo_since"]):
            self.log.info(API, "api_server.py:1839", f"vLLM API server version {version}")
        elif self.env.get("VLLM_DISABLE_LOG_LOGO") == "1":
            self.log.info(API, "utils.py:299", f"vLLM server version {version}, serving model {opts.model}")
        else:
            for row in LOGO:
                self.log.info(API, "utils.py:233", row.format(version=version, model=opts.model))
        self.log.info(API, "api_utils.py:286", f"non-default args: {self.opts.given!r}")
        if calibration.at_least(version, cal["env_warning_since"]):
            for name in self.plan.unknown_env:
                self.log.warning(API, "envs.py:1706", f"Unknown vLLM environment variable detected: {name}")

    def _model_config(self) -> None:
        self.log.info(API, "model.py:631", "Resolved architecture: Qwen3_5MoeForConditionalGeneration")
        self.log.info(API, "model.py:1745", f"Using max model len {self.opts.max_model_len}")

    def _engine_config(self) -> None:
        opts, plan = self.opts, self.plan
        cal = calibration.load()
        spec = "None"
        if opts.speculative_config:
            spec = f"SpeculativeConfig(method='{plan.spec_method}', model='{opts.model}', num_spec_tokens={plan.spec_tokens})"
        kernel = ""
        if calibration.at_least(plan.version, cal["moe_backends"]["flag_since"]):
            kernel = (
                f", kernel_config=KernelConfig(moe_backend='{opts.moe_backend or 'auto'}', "
                f"linear_backend='{opts.linear_backend or 'auto'}')"
            )
        quant = cal["quants"][plan.quant]["vllm_quantization"]
        self.log.info(
            ENGINE,
            "core.py:96",
            (
                f"Initializing a V1 LLM engine (v{plan.version}) with config: model='{opts.model}', speculative_config={spec}, "
                f"tokenizer='{opts.model}', skip_tokenizer_init=False, tokenizer_mode=auto, trust_remote_code=False, "
                f"dtype=torch.bfloat16, max_seq_len={opts.max_model_len}, load_format={opts.load_format}, "
                f"tensor_parallel_size={opts.given.get('tensor_parallel_size', 1)}, "
                + (
                    f"pipeline_parallel_size={opts.given['pipeline_parallel_size']}, "
                    if "pipeline_parallel_size" in opts.given
                    else ""
                )
                + f"quantization={quant}, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, seed=0, "
                f"served_model_name={opts.served_model_name}, enable_prefix_caching=True{kernel}"
            ),
        )

    def _attention(self) -> None:
        plan = self.plan
        self.log.info(ENGINE, "gpu_model_runner.py:3520", f"Starting to load model {self.opts.model}...")
        self._linear_lines()  # real 0.24.0: the linear kernel is chosen before attention (tests/data/logs/vllm-0.24-h200)
        if plan.attention_explicit:
            self.log.info(ENGINE, "cuda.py:353", f"Using AttentionBackendEnum.{plan.attention} backend.")
        else:
            valid = self._hw().get("attention_valid") or calibration.load()["attention"]["valid"]
            end = "" if not calibration.at_least(plan.version, "0.13") else "."
            self.log.info(
                ENGINE,
                self._hw().get("attention_site", "cuda.py:367"),
                f"Using {plan.attention} attention backend out of potential backends: {valid}{end}",
            )

    def _kernels(self) -> None:
        if self.plan.quant == "nvfp4" and self.plan.moe_loaded == "marlin":
            self.log.warning(
                ENGINE,
                "marlin_utils_fp4.py:204",
                (
                    "Your GPU does not have native support for FP4 computation but FP4 quantization is being used. "
                    "Weight-only FP4 compression will be used leveraging the Marlin kernel. This may degrade performance "
                    "for compute-heavy workloads."
                ),
            )
        self.log.info(ENGINE, self._moe_where(), self.moe_line())

    def _linear_lines(self) -> None:
        plan, cal = self.plan, calibration.load()["linear_backends"]
        requested = plan.linear_backend
        if plan.quant == "nvfp4":
            kernels = cal["nvfp4_kernels"]
            if requested and requested not in kernels:
                self.log.warning(
                    ENGINE,
                    "linear.py:88",
                    f"--linear-backend={requested} has no kernel for this linear layer type; using automatic selection for that layer type.",
                )
            kernel = kernels.get(requested or "auto", kernels["auto"])
            if not calibration.at_least(plan.version, calibration.load()["versions"]["nvfp4_gemm_class_since"]):
                kernel = cal["nvfp4_enum"]
            self.log.info(ENGINE, "nvfp4_utils.py:71", f"Using {kernel} for NVFP4 GEMM")
        else:
            kernels = cal["fp8_kernels"]
            if requested and requested not in kernels:
                self.log.warning(
                    ENGINE,
                    "linear.py:96",
                    f"--linear-backend={requested} was requested, but no FP8 kernel exists for block-quantized layers; falling back to normal kernel selection for this layer.",
                )
            hw = self._hw()
            kernel = kernels.get(requested) if requested else hw.get("fp8_linear_kernel", kernels["auto"])
            self.log.info(
                ENGINE,
                hw.get("linear_site", "kernels.py:143"),
                f"Selected {kernel or kernels['auto']} for {cal['fp8_method']}",
            )

    def _hw(self) -> dict:
        return calibration.load()["hardware"][self.plan.hardware]

    def _moe_where(self) -> str:
        if self.plan.quant == "nvfp4":
            return "nvfp4.py:312"
        site = self._hw().get("moe_site", {})  # measured sites (h200): auto is said from the oracle's
        return site.get("explicit" if self.opts.moe_backend else "auto", "fp8.py:298")

    def moe_line(self) -> str:
        """The MoE attestation line in this version's wording (facts: 0.15+, 0.14, 0.12-0.13)."""
        plan, cal = self.plan, calibration.load()
        enum = cal["moe_backends"]["names"][plan.moe_loaded]
        legacy = cal["moe_backends"]["legacy_lines"]
        if calibration.at_least(plan.version, cal["versions"]["moe_line_since"]):
            if plan.quant == "nvfp4":
                return f"Using '{enum}' NvFp4 MoE backend out of potential backends: {plan.moe_candidates}"
            end = "." if calibration.at_least(plan.version, cal["versions"]["moe_line_period_since"]) else ""
            return f"Using {enum} Fp8 MoE backend out of potential backends: {plan.moe_candidates}{end}"
        if calibration.at_least(plan.version, "0.14"):
            if plan.quant == "nvfp4":
                return f"Using {enum} backend for NvFp4 MoE"
            return f"Using {legacy['fp8_0_14'].get(enum, enum)} backend for FP8 MoE"
        table = legacy["nvfp4_0_12"] if plan.quant == "nvfp4" else legacy["fp8_0_12"]
        return table.get(enum, f"Using {enum} backend for {plan.quant.upper()} MoE")

    def _weights(self) -> None:
        mem = self.plan.memory
        gib = mem["weights_gib"] if mem else calibration.load()["checkpoints"][self.plan.checkpoint]["weights_gib"]
        weights_s = self.phases.weights_s
        self.log.info(ENGINE, "default_loader.py:267", f"Loading weights took {weights_s:.2f} seconds")
        self.log.info(
            ENGINE,
            "gpu_model_runner.py:3602",
            f"Model loading took {gib:.2f} GiB memory and {weights_s + 0.5:.6f} seconds",
        )
        if self.plan.spec_tokens:  # the drafter loads next (and is where an MTP misconfiguration fails)
            self.log.info(ENGINE, "eagle.py:1071", "Loading drafter model...")

    def _draft(self) -> None:
        """The drafter loaded. An unquantized (BF16) draft head selects its own MoE backend, and vLLM says which
        (as in tests/data/logs/synthetic/v0.24-nvfp4-marlin-mtp.log); the attestation checks it."""
        if self.plan.draft_moe:
            self.log.info(
                ENGINE,
                "unquantized.py:97",
                f"Using {self.plan.draft_moe.upper()} Unquantized MoE backend out of potential backends: "
                "['TRITON', 'MARLIN']",
            )

    def _kv(self) -> None:
        plan = self.plan
        if plan.memory:  # vLLM's gpu_worker line, from the same plan (hostside/memplan) as the controller's
            self.log.info(ENGINE, "gpu_worker.py:508", f"Available KV cache memory: {plan.memory['kv_gib']:.2f} GiB")
        self.log.info(ENGINE, "kv_cache_utils.py:1087", f"GPU KV cache size: {plan.kv_tokens:,} tokens")
        self.log.info(
            ENGINE,
            "kv_cache_utils.py:1091",
            f"Maximum concurrency for {self.opts.max_model_len:,} tokens per request: {plan.kv_tokens / self.opts.max_model_len:.2f}x",
        )

    # -- failure ------------------------------------------------------------------------------
    def _fields(self, failure: Failure) -> dict:
        hw = calibration.load()["hardware"][self.plan.hardware]
        quant = self.plan.quant or "fp8"
        fields = _Fields(
            capability=hw["capability"],
            sm="sm_" + hw["capability"].replace(".", ""),
            quant=quant,
            moe_label=calibration.load()["quants"][quant]["moe_label"],
            model=self.opts.model,
        )
        fields.update(failure.fields)
        return fields

    def _traceback(self) -> None:
        failure = self.plan.failure
        assert failure is not None  # run() calls this only where the plan's failure strikes
        spec = calibration.load()["failures"][failure.key]
        fields = self._fields(failure)
        lines = [p.format_map(fields) for p in spec.get("pre", [])]
        if failure.stage != "model":
            self.log.error(ENGINE, "core.py:1012", "EngineCore failed to start.")
            lines += [
                "Traceback (most recent call last):",
                f'  File "{SITE}vllm/v1/engine/core.py", line 1003, in run_engine_core',
                "    engine_core = EngineCoreProc(*args, engine_index=dp_rank, **kwargs)",
            ]
        else:
            lines += [
                "Traceback (most recent call last):",
                '  File "/usr/local/bin/vllm", line 10, in <module>',
                "    sys.exit(main())",
            ]
        for frame in spec["frames"]:
            path, line, func, code = frame.format_map(fields).split("|", 3)
            lines += [f'  File "{SITE}{path}", line {line}, in {func}', f"    {code}"]
        lines.append(f"{spec['exc']}: {spec['message'].format_map(fields)}")
        if failure.stage != "model":
            lines += [
                "Traceback (most recent call last):",
                '  File "/usr/local/bin/vllm", line 10, in <module>',
                "    sys.exit(main())",
                f'  File "{SITE}vllm/v1/engine/utils.py", line 1131, in wait_for_engine_startup',
                "    raise RuntimeError(",
                "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}",
            ]
        sys.stdout.flush()
        for text in lines:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()
