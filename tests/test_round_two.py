"""Issue 29: wordings of every vLLM era, failure classes to act on, and launches that do not spell `vllm serve`.

Each case is a line as vLLM (or argparse, or a shell) writes it; the assertions are on behaviour: the fact read,
the class given, the launch found, the YAML refused in bounded time.
"""

from __future__ import annotations

import time

import pytest

from agent.errors import UserError
from agent.hostside.logparse import parse
from agent.judging.verdict import attest
from agent.planning.launch import extract

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "text,key,value",
    [
        ("INFO ... Using Marlin backend", "moe_backend", "marlin"),
        (
            "INFO 04-10 10:00:00 llm_engine.py:249] Initializing a V0 LLM engine (v0.8.3rc2) with config: "
            "model='Qwen/Qwen2-7B-AWQ', quantization=awq_marlin, enforce_eager=False",
            "quantization",
            "awq_marlin",
        ),
        (
            "INFO 04-10 10:00:00 llm_engine.py:249] Initializing a V0 LLM engine (v0.8.3rc2) with config: model='m'",
            "vllm_version",
            "0.8.3rc2",
        ),
        ("INFO 06-01 10:00:00 selector.py:1] Using Flash Attention backend.", "attention_backend", "flash_attn"),
        (
            "(vllm) user@box:~$ INFO 06-01 10:00:00 [selector.py:1] Using XFormers backend.",
            "attention_backend",
            "xformers",
        ),
        (
            "INFO 07-01 gptq_marlin.py:1] The model is convertible to gptq_marlin during runtime. Using gptq_marlin "
            "kernel.",
            "quantization",
            "gptq_marlin",
        ),
    ],
)
def test_lines_of_any_era_or_form_give_their_fact(text, key, value):
    facts = parse(text)
    assert facts[key] == value and facts["confidence"] in ("high", "low")


@pytest.mark.parametrize(
    "line,rate",
    [
        ("INFO 08-01 metrics.py:396] Speculative metrics: Draft acceptance rate: 0.651, System efficiency: 0.5", 0.651),
        (
            "INFO 05-01 [metrics.py:86] SpecDecoding metrics: Draft acceptance rate: 57.1%, Mean acceptance length: "
            "2.1, Accepted: 40 tokens, Drafted: 70 tokens",
            0.571,
        ),
        (
            "INFO 11-29 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 2.46, Accepted: 150 tokens, "
            "Drafted: 200 tokens, Per-position acceptance rate: 0.802, 0.655, Avg Draft acceptance rate: 72.9%",
            0.729,
        ),
        (
            "INFO 11-29 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 2.46, Accepted: 150 tokens, "
            "Drafted: 200 tokens",
            0.75,
        ),
    ],
)
def test_acceptance_lines_of_every_version(line, rate):
    assert parse(line)["spec_acceptance_rates"] == [rate]


def test_the_route_list_and_starting_line_prove_a_finished_start():
    for ready in (
        "INFO 05-01 10:00:00 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000",
        "INFO 05-01 10:00:00 launcher.py:28] Available routes are:",
        "Route: /v1/chat/completions, Methods: POST",
    ):
        facts = parse("INFO 05-01 10:00:00 [core.py:1] Initializing a V1 LLM engine (v0.9.0) with config: model='m'\n"
                      + ready)  # fmt: skip
        assert facts["startup_complete"] and facts["failure"] == {}


@pytest.mark.parametrize(
    "line,cls,backend",
    [
        (
            "AssertionError: FusedMoE flashinfer kernels are only supported for Llama4",
            "unsupported_backend",
            "flashinfer",
        ),
        (
            "ERROR 09-02 [core.py:1] FlashInfer TRTLLM MoE is disabled for this configuration",
            "unsupported_backend",
            "flashinfer_trtllm",
        ),
        (
            "ValueError: FlashInferExperts does not support the deployment configuration since kernel does not support "
            "current device.",
            "unsupported_backend",
            "flashinfer",
        ),
        ("vllm serve: error: unrecognized arguments: --moe-backend marlin", "invalid_args", ""),
        ("api_server.py: error: argument --quantization/-q: invalid choice: 'nvfp5'", "invalid_args", ""),
    ],
)
def test_failures_fine_enough_to_act_on(line, cls, backend):
    failure = parse(line)["failure"]
    assert failure["class"] == cls and failure.get("backend", "") == backend


def test_a_warning_that_a_backend_is_disabled_explains_a_start_that_then_fails_without_a_cause():
    text = "\n".join(
        [
            "WARNING 09-02 10:00:00 [fused_moe.py:1] DeepGEMM is disabled for this configuration",
            "ERROR 09-02 10:00:01 [core.py:1] EngineCore failed to start.",
            "RuntimeError: Engine core initialization failed. See root cause above.",
        ]
    )
    failure = parse(text)["failure"]
    assert failure["class"] == "unsupported_backend" and failure["backend"] == "deep_gemm"
    ready = parse(text.split("\n")[0] + "\nINFO:     Application startup complete.")
    assert ready["failure"] == {}  # on its own, the warning is no failure


def test_a_log_that_ends_before_ready_is_never_valid():
    text = "INFO 11-29 10:00:00 [fp8.py:1] Using 'MARLIN' Fp8 MoE backend out of potential backends: ['MARLIN']"
    assert attest(text, {"moe_backend": "marlin"})["verdict"]["verdict"] == "failed"
    assert attest(text, {"moe_backend": "triton"})["verdict"]["verdict"] == "invalid"
    assert (
        attest(text + "\nINFO:     Application startup complete.", {"moe_backend": "marlin"})["verdict"]["verdict"]
        == "valid"
    )


def test_nested_compilation_config_in_non_default_args_stays_nested():
    facts = parse(
        "(APIServer pid=1) INFO 11-29 10:00:00 [utils.py:1] non-default args: {'model': 'm', 'compilation_config': "
        "{'level': 3, 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'pass_config': "
        "{'enable_fusion': True}}, 'moe_backend': 'marlin', 'max_model_len': 4096}"
    )
    args = facts["non_default_args"]
    assert args["compilation_config"]["pass_config"] == {"enable_fusion": True}
    assert args["moe_backend"] == "marlin" and "level" not in args and facts["repairs"] == []


@pytest.mark.parametrize(
    "text,model,kind",
    [
        ("docker run --gpus all nvcr.io/nvidia/vllm:25.11-py3 serve org/m --tensor-parallel-size 2", "org/m", "docker"),
        ("docker run my/img:1 serve org/m --gpu-memory-utilization 0.8", "org/m", "docker"),
        ("python -m vllm.entrypoints.openai.api_server --model org/m", "org/m", "shell"),
        ('bash -c "vllm serve org/m --max-model-len 4096"', "org/m", "shell"),
        ("docker exec -it c sh -c 'vllm serve org/m'", "org/m", "docker"),
        ("--- a/run.sh\n+++ b/run.sh\n@@ -1 +1 @@\n-vllm serve old/m\n+vllm serve org/m", "org/m", "shell"),
        ("+ vllm serve org/m \\\n+   --max-model-len 8192", "org/m", "shell"),
        (
            'services:\n  v:\n    image: ${IMG:-vllm/vllm-openai:v0.10.2}\n    command: ["--model", "org/m"]',
            "org/m",
            "compose",
        ),
    ],
)
def test_launches_that_do_not_spell_vllm_serve(text, model, kind):
    found = extract(text, "x")
    assert [(one.model, one.kind) for one in found] == [(model, kind)]


@pytest.mark.parametrize(
    "text",
    ["env VLLM_USE_DEEP_GEMM=0 vllm serve org/m", "sudo -E VLLM_USE_DEEP_GEMM=0 nohup vllm serve org/m &"],
)
def test_command_wrappers_pass_their_assignments(text):
    (found,) = extract(text, "x")
    assert found.model == "org/m" and found.env == {"VLLM_USE_DEEP_GEMM": "0"}


def test_exported_variables_reach_a_later_bash_c_launch():
    found = extract("export VLLM_USE_DEEP_GEMM=0\nbash -lc 'vllm serve org/m'", "x")
    assert found[0].env == {"VLLM_USE_DEEP_GEMM": "0"}


def _bomb(levels: int) -> str:
    lines = ["services:", '  a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    for i in range(1, levels):
        lines.append(f"  a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\n  v:\n    image: vllm/vllm-openai:v0.11.0\n    command: *a{levels - 1}\n"


@pytest.mark.parametrize("text", [_bomb(9), "command: " + "[" * 5000 + "]" * 5000], ids=["aliases", "depth"])
def test_hostile_yaml_is_refused_in_bounded_time(text):
    t0 = time.perf_counter()
    with pytest.raises(UserError, match="refused"):
        extract(text, "bomb.yml")
    assert time.perf_counter() - t0 < 5


def test_ngc_image_tags_name_their_vllm_release_and_unknown_tags_stay_unknown():
    from agent.judging.lint import image_version, ngc_vllm

    table = ngc_vllm()
    assert table and all(image_version(f"nvcr.io/nvidia/vllm:{tag}-py3") == v for tag, v in table.items())
    assert image_version("nvcr.io/nvidia/vllm:99.99-py3") == ""


def test_the_checkpoint_quant_comes_from_its_config_json(tmp_path):
    import json as _json

    from agent.judging.lint import quant_of

    (tmp_path / "config.json").write_text(
        _json.dumps({"quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}})
    )
    (launch,) = extract(f"vllm serve {tmp_path}", "x")
    assert quant_of(launch, None) == "nvfp4"
    (hub,) = extract("vllm serve openai/gpt-oss-120b", "x")
    assert quant_of(hub, None) == "mxfp4"


def test_a_quiet_uvicorn_still_gives_the_ready_time():
    from agent.hostside import startuplog

    text = "\n".join(
        [
            "INFO 05-01 10:00:00 [api_server.py:1] vLLM API server version 0.9.0",
            "INFO 05-01 10:00:40 [core.py:1] init engine (profile, create kv cache, warmup model) took 30.00 seconds",
            "INFO 05-01 10:00:41 [api_server.py:1] Starting vLLM API server 0 on http://0.0.0.0:8000",
            "INFO 05-01 10:00:42 [launcher.py:1] Route: /v1/chat/completions, Methods: POST",
        ]
    )
    assert startuplog.parse_text(text)["ready_s"] == 42.0
    assert parse(text)["startup_complete"]


def test_a_disabled_warning_never_hides_a_cause_the_log_names():
    text = "\n".join(
        [
            "WARNING 09-02 10:00:00 [fused_moe.py:1] DeepGEMM is disabled for this configuration",
            "ERROR 09-02 10:00:01 [core.py:1] EngineCore failed to start.",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        ]
    )
    assert parse(text)["failure"]["class"] == "oom"
    bare = text.replace("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "AssertionError")
    assert parse(bare)["failure"]["class"] == "unsupported_backend"


@pytest.mark.parametrize(
    "line,quant",
    [
        (
            "WARNING 04-25 12:26:07 config.py:169] gptq quantization is not fully optimized yet. The speed can be slower "
            "than non-quantized models.",
            "gptq",
        ),
        ("INFO 05-01 config.py:1] The model is serialized in Marlin format. Using Marlin kernel.", "marlin"),
    ],
)
def test_old_quantization_wordings(line, quant):
    assert parse(line)["quantization"] == quant


def test_a_v0_namespace_names_the_draft_model():
    facts = parse(
        "INFO 10-16 api_server.py:1] args: Namespace(model='m', speculative_model='[ngram]', "
        "num_speculative_tokens=5, quantization=None)"
    )
    assert facts["speculative"]["method"] == "ngram" and facts["speculative"]["num_speculative_tokens"] == 5


def test_an_info_note_that_something_is_disabled_explains_nothing():
    text = "INFO 09-02 10:00:00 [compilation.py:1] Cudagraph capture is disabled for this configuration"
    assert parse(text)["failure"]["class"] == "ended_before_ready"
    warning = text.replace("INFO", "WARNING")
    assert parse(warning)["failure"]["class"] == "ended_before_ready"  # a log that just ends shows no failure
    died = warning + "\nRuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
    assert parse(died)["failure"]["class"] == "unsupported_backend"
