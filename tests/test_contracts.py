"""The typed contracts: each producer gives exactly its type, and each form round-trips (to form, from form, equal).

Host-side contracts (agent/hostside/contracts.py) travel as JSON and land in TOML: their values must survive both.
Controller records (agent/results/records.py) are written and read by the results tree.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import random
import tarfile
import time
import tomllib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union, get_args, get_origin, get_type_hints, is_typeddict

import pytest
import tomli_w

from agent.hostside import contracts, facts, loadgen, logparse, memplan, safetensors, supervise
from agent.hostside.loadgen import _Request
from agent.planning import envrules, matrix, memory
from agent.planning.matrix import Cell, CellConfig
from agent.planning.settings import LoadSettings, ServerSettings, flat_dict, from_flat, setting, toml_schema
from agent.results import tree
from agent.results.records import CellRecord, Launch, MeasurementRecord
from agent.running import collect
from agent.running.identity import controller_identity

from .test_cell_id_golden import GOLDEN_CONFIG, GOLDEN_ENV, GOLDEN_ID
from .test_inspect_build import build_qwen
from .test_report_fixtures import write_cell

pytestmark = pytest.mark.unit

LOGS = Path(__file__).resolve().parent / "data" / "logs"
ALL_LOGS = sorted(LOGS.rglob("*.log"))


# ---------------------------------------------------------------- checking a value against its TypedDict


def problems(value: Any, kind: Any, where: str = "") -> list[str]:
    """Where `value` is not of type `kind` (TypedDicts: no unknown keys, every required key; int is a float)."""
    if kind is Any or kind is object:
        return []
    if is_typeddict(kind):
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not a {kind.__name__}"]
        hints = get_type_hints(kind)
        out = [f"{where}.{k}: unknown key" for k in value if k not in hints]
        out += [f"{where}.{k}: missing" for k in kind.__required_keys__ if k not in value]
        for k, v in value.items():
            if k in hints:
                out += problems(v, hints[k], f"{where}.{k}")
        return out
    origin = get_origin(kind)
    if origin in (Union, types.UnionType):
        options = [problems(value, option, where) for option in get_args(kind)]
        return [] if any(not p for p in options) else options[0]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {type(value).__name__}, not a list"]
        return [p for i, item in enumerate(value) for p in problems(item, get_args(kind)[0], f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{where}: {type(value).__name__}, not a dict"]
        key_type, value_type = get_args(kind)
        return [p for k, v in value.items() for p in problems(k, key_type, where) + problems(v, value_type, where)]
    if kind is type(None):
        return [] if value is None else [f"{where}: {value!r} is not None"]
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    return [] if ok else [f"{where}: {value!r} is not {getattr(kind, '__name__', kind)}"]


def all_keys(kind: Any) -> set[str]:
    return set(get_type_hints(kind))


def round_trips(value: Any) -> None:
    """As JSON (Ansible, the host's files) and as TOML (the results tree), the value comes back equal."""
    assert json.loads(json.dumps(value)) == value
    assert tomllib.loads(tomli_w.dumps({"t": value}))["t"] == value


def test_the_checker_finds_what_is_wrong():
    """The checker the tests below rely on can fail."""
    good = controller_identity("s", "c")
    assert problems(good, contracts.Holder) == []
    assert problems(dict(good, controller_pid="1"), contracts.Holder) == [".controller_pid: '1' is not int"]
    assert problems(dict(good, extra=1), contracts.Holder) == [".extra: unknown key"]
    assert problems({k: v for k, v in good.items() if k != "user"}, contracts.Holder) == [".user: missing"]
    assert problems({"class": "oom", "evidence": ["x", 3]}, contracts.Failure) == [".evidence[1]: 3 is not str"]


# ---------------------------------------------------------------- host-side producers


def test_facts_gather_fills_exactly_the_facts_contract():
    gathered = facts.gather(simulate_gpu="gb10", cache_dir=str(Path.home()))
    assert problems(gathered, contracts.Facts) == []
    assert set(gathered) == all_keys(contracts.Facts)  # gather() fills every key
    round_trips(gathered)


def test_facts_classified_on_the_controller_keep_the_contract():
    partial = contracts.Facts(gpu_name="NVIDIA GB10", compute_capability="12.1")
    classified = envrules.with_arch(partial)
    assert problems(classified, contracts.Facts) == [] and classified["arch"] == "gb10"
    assert "arch" not in partial  # a copy: the host's facts are left alone


@pytest.mark.parametrize("log", ALL_LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_attestation_of_every_captured_log_is_the_contract(log: Path):
    attestation = logparse.parse(log.read_text(errors="replace"))
    assert problems(attestation, contracts.Attestation) == []
    assert set(attestation) == all_keys(contracts.Attestation)
    round_trips(attestation)
    failure = logparse.classify_failure(attestation)
    assert problems(failure, contracts.Failure) == []
    assert failure == attestation["failure"]


def test_failures_the_logs_show_have_all_their_keys():
    failing = [logparse.classify_failure(p.read_text(errors="replace")) for p in ALL_LOGS]
    failing = [f for f in failing if f]
    assert failing, "the captured logs include failed starts"
    for failure in failing:
        assert set(failure) == all_keys(contracts.Failure)


def _window(concurrency: int = 2) -> contracts.Window:
    ok = _Request(0.0, 10)
    ok.times, ok.tokens, ok.end = [0.5, 1.0, 1.5], [1, 2, 1], 1.6
    broken = _Request(0.2, 10)
    broken.end, broken.error = 0.9, "HTTP 500: boom"
    # a window as _level makes it: the counts, then the load shape's keys (no server is contacted)
    load = loadgen._Load(
        "http://127.0.0.1:9", "m", concurrency, 10, 5, "uniform", random.Random(0), 1.0, time.monotonic
    )
    return loadgen._summary(load, [ok, broken], 0.0, 2.0, "kept")


def test_a_window_and_a_measurement_are_their_contracts():
    window = _window()
    steady = {"warmup", "jit_lines", "jit_evidence"}  # only read against a server log (hostside/steady.py)
    assert (
        problems(window, contracts.Window) == []
        and set(window) == all_keys(contracts.Window) - {"engine_died"} - steady
    )
    round_trips(window)
    measurement = loadgen._with_counters(window, 3, {"vllm:generation_tokens_total": 1.0}, OSError("refused"))
    assert problems(measurement, contracts.Measurement) == []
    sampled = {"telemetry", "warmup_telemetry", "server"}  # only with a telemetry sampler (test_telemetry.py)
    assert (
        set(measurement)
        == all_keys(contracts.Measurement) - {"engine_died", "before_crash", "pressure"} - sampled - steady
    )
    assert measurement["repeat"] == 3 and measurement["errors"][-1] == "metrics scrape failed: refused"
    round_trips(measurement)


def test_serve_status_is_the_contract(tmp_path: Path):
    """supervise.wait_ready, the producer of serve.json, on a log whose first line is fatal: no server needed."""
    log = tmp_path / "server.log"
    log.write_text((LOGS / "synthetic" / "v0.24-fp8-deep-gemm-assert.log").read_text())
    (supervise.state_dir(str(tmp_path)) / "server.json").write_text(json.dumps({"log": str(log)}))
    status = supervise.wait_ready(str(tmp_path), "http://127.0.0.1:9", timeout_s=5.0)
    assert not status["ready"] and status["failure"]["class"] == "deep_gemm_assert"
    assert problems(status, contracts.ServeStatus) == []
    round_trips(status)


def test_holder_is_written_and_read_back_as_the_contract(tmp_path: Path):
    holder = controller_identity("quick", "3f9a1c0e7b2d")
    assert problems(holder, contracts.Holder) == [] and set(holder) == all_keys(contracts.Holder)
    fd = supervise.acquire_lock(str(tmp_path), holder)
    try:
        assert json.loads((supervise.state_dir(str(tmp_path)) / "holder.json").read_text()) == holder
    finally:
        os.close(fd)


def test_checkpoint_summary_is_the_contract(tmp_path: Path):
    summary = safetensors.inspect_checkpoint(build_qwen(str(tmp_path / "nv"), "nv"))
    assert problems(summary, contracts.CheckpointSummary) == []
    assert set(summary) == all_keys(contracts.CheckpointSummary)
    assert json.loads(json.dumps(summary)) == summary


# ---------------------------------------------------------------- settings and the cell config


def test_the_spec_schema_comes_from_the_settings():
    """Defaults a spec gets when it leaves [server] / [load] out (they are in every cell id: pinned)."""
    assert {k: (v[0], v[2]) for k, v in toml_schema(ServerSettings).items()} == {
        "speculative": ((str, dict), ""),
        "gpu_memory_utilization": ((float, int), 0.85),
        "max_model_len": ((int,), 8192),
        "max_num_seqs": ((int,), 16),
        "extra_args": ((list,), []),
        # multi-node (issue 19): keep_default=False, so cells at these defaults keep their ids
        "nodes": ((int,), 1),
        "tensor_parallel_size": ((int,), 1),
        "pipeline_parallel_size": ((int,), 1),
        "distributed_executor_backend": ((str,), ""),
        "transport": ((str,), ""),
        "drop_page_cache": ((bool,), False),
        # added with the [matrix] axes: keep_default=False, so cells at these defaults keep their ids
        "kv_cache_dtype": ((str,), ""),
        "enable_prefix_caching": ((bool,), True),
    }
    pinned = {"prompt_len": 1024, "output_len": 256, "profile": "uniform", "seed": 0}
    assert {k: v[2] for k, v in toml_schema(LoadSettings).items() if k in pinned} == pinned
    # every [load] key added since is left out of the id at its default (open loop, datasets, goodput)
    later = [f for f in dataclasses.fields(LoadSettings) if f.name not in pinned]
    assert later and all(f.metadata["keep_default"] is False for f in later)


def test_cell_config_round_trips_and_builds_the_serve_flags():
    config = CellConfig.from_dict(GOLDEN_CONFIG)
    assert CellConfig.from_dict(config.to_dict()) == config
    assert CellConfig.from_dict(tomllib.loads(tomli_w.dumps(config.to_dict()))) == config
    assert matrix.cell_id(config, GOLDEN_ENV) == GOLDEN_ID
    assert config.serve_args() == [
        "--gpu-memory-utilization",
        "0.85",
        "--max-model-len",
        "262144",
        "--max-num-seqs",
        "16",
        "--moe-backend",
        "marlin",
        "--speculative-config",
        '{"method":"mtp","moe_backend":"triton","num_speculative_tokens":2}',
        "--enable-prefix-caching",
    ]


def test_cell_config_reads_older_tables_and_refuses_unknown_keys():
    older = {k: v for k, v in GOLDEN_CONFIG.items() if k not in ("extra_args", "seed")}  # recorded before they existed
    config = CellConfig.from_dict(older)
    assert config.server.extra_args == [] and config.load.seed == 0
    with pytest.raises(ValueError, match="unknown key"):
        CellConfig.from_dict(dict(GOLDEN_CONFIG, max_num_seq=8))
    with pytest.raises(ValueError, match="missing key image"):
        CellConfig.from_dict({k: v for k, v in GOLDEN_CONFIG.items() if k != "image"})


@dataclass(frozen=True)
class _Grown:
    """Settings that gained a flag after cells were recorded."""

    max_num_seqs: int = setting(16, toml=(int,), flag="--max-num-seqs", always=True)
    kv_cache_dtype: str = setting("", toml=(str,), flag="--kv-cache-dtype", keep_default=False)


def test_a_setting_added_later_leaves_older_tables_and_ids_alone():
    assert flat_dict(_Grown()) == {"max_num_seqs": 16}  # the table (and so the id) of a cell that does not use it
    assert flat_dict(_Grown(kv_cache_dtype="fp8")) == {"max_num_seqs": 16, "kv_cache_dtype": "fp8"}
    assert from_flat(_Grown, {"max_num_seqs": 16}) == _Grown()


# ---------------------------------------------------------------- the records of the results tree


def _record() -> CellRecord:
    log = (LOGS / "synthetic" / "v0.24-nvfp4-marlin-mtp.log").read_text()
    return CellRecord(
        cell_id=GOLDEN_ID,
        sweep="golden",
        host="spark-1",
        status="done",
        verdict="invalid",
        verdict_reasons=["dead variable: VLLM_X"],
        verdict_evidence=["a log line"],
        config=CellConfig.from_dict(GOLDEN_CONFIG),
        started_at="2026-11-29T19:10:00Z",
        finished_at="2026-11-29T19:14:00Z",
        elapsed_s=240.0,
        env=dict(GOLDEN_ENV),
        env_provenance=[
            envrules.EnvProvenance(name="CUTE_DSL_ARCH", value="sm_121a", action="set", rule="r", reason="why")
        ],
        launch=Launch(argv=["vllm", "serve", "m"], command="CUTE_DSL_ARCH=sm_121a vllm serve m"),
        facts=facts.gather(simulate_gpu="gb10", cache_dir=str(Path.home())),
        attestation=logparse.parse(log),
        measure_s=12.5,
    )


def test_cell_record_round_trips_through_cell_toml(tmp_path: Path):
    record = _record()
    tree.atomic_write_toml(tmp_path / "cell.toml", record.to_toml())
    table = tree.read_toml(tmp_path / "cell.toml")
    assert CellRecord.from_toml(table) == record
    # every field is written, in the documented order ([died] only for a cell whose server died, [[nodes]] only
    # for a multi-node cell, [correctness] only for a cell the probe was on for)
    skipped = ("died", "nodes", "correctness", "memory")
    assert list(record.to_toml()) == [k for k in CellRecord._ORDER if k not in skipped]
    record.nodes = [contracts.RayNodeReport(host="b", role="worker", page_cache="dropped", image="")]
    tree.atomic_write_toml(tmp_path / "cell.toml", record.to_toml())
    assert CellRecord.from_toml(tree.read_toml(tmp_path / "cell.toml")) == record
    # [memory]: the plan made before the start beside what the log said (planning/memory.record)
    model = memplan.simulated(22.0, 20480)
    device = contracts.DeviceMemory(kind="unified", total_gib=119.7, free_gib=115.2, source="test")
    plan = memplan.plan(model, device, gpu_memory_utilization=0.85, max_model_len=8192, max_num_seqs=16)
    record.memory = memory.record(plan, record.attestation)
    tree.atomic_write_toml(tmp_path / "cell.toml", record.to_toml())
    assert CellRecord.from_toml(tree.read_toml(tmp_path / "cell.toml")) == record
    assert set(CellRecord._ORDER) == {f for f in CellRecord.__dataclass_fields__}


def test_cell_record_refuses_what_is_not_one():
    table = _record().to_toml()
    with pytest.raises(ValueError, match="unknown key"):
        CellRecord.from_toml(dict(table, surprise=1))
    with pytest.raises(ValueError, match="no \\[config\\]"):
        CellRecord.from_toml({k: v for k, v in table.items() if k != "config"})
    with pytest.raises(ValueError, match="cell_id"):
        CellRecord.from_toml({k: v for k, v in table.items() if k != "cell_id"})


def test_measurement_record_round_trips_through_its_file(tmp_path: Path):
    window = loadgen._with_counters(_window(4), 2, {}, {})
    record = MeasurementRecord(GOLDEN_ID, window)
    assert record.name == "c004-r2.toml"
    tree.atomic_write_toml(tmp_path / record.name, record.to_toml())
    assert MeasurementRecord.from_toml(tree.read_toml(tmp_path / record.name)) == record
    with pytest.raises(ValueError, match="missing output_throughput"):
        MeasurementRecord.from_toml({k: v for k, v in record.to_toml().items() if k != "output_throughput"})


def test_fixture_trees_are_read_as_records(tmp_path: Path):
    """The trees the report tests build (docs/results-tree.md's example, without the keys added since) read back."""
    write_cell(tmp_path, backend="marlin", values={1: [50.0, 51.0], 4: [150.0, "HTTP 500"]})
    write_cell(tmp_path, backend="auto", values={1: [40.0]}, checkpoint_info={"bytes_per_token": 123})
    cells = list(tree.iter_cell_dirs(tmp_path))
    assert len(cells) == 2
    for folder in cells:
        table = tree.read_toml(folder / tree.CELL_FILE)
        written = CellRecord.from_toml(table).to_toml()
        for key, value in table.items():
            if key == "config":
                assert {k: written["config"][k] for k in value} == value
            else:
                assert written[key] == value, key
        for path in folder.glob("c[0-9][0-9][0-9]-r*.toml"):
            run = tree.read_toml(path)
            assert MeasurementRecord.from_toml(run).to_toml() == run


def test_collect_writes_records_that_read_back(tmp_path: Path):
    """finalize_cell on a hand-made archive (what cell.yml brings back): the records it writes are the contracts."""
    config = CellConfig.from_dict(GOLDEN_CONFIG)
    cell = Cell(id=matrix.cell_id(config, GOLDEN_ENV), sweep="golden", host="spark-1", config=config,
                env=dict(GOLDEN_ENV), provenance=[], argv=["vllm", "serve", config.model])  # fmt: skip
    log = (LOGS / "synthetic" / "v0.24-nvfp4-marlin-mtp.log").read_text()
    status = contracts.ServeStatus(ready=True, failure={}, facts=logparse.parse(log), startup_s=1.5)
    window = loadgen._with_counters(_window(1), 1, {}, {})
    files = {
        "server.log": log.encode(),
        "serve.json": json.dumps(status).encode(),
        "c001-r1.json": json.dumps(window, sort_keys=True).encode(),
    }
    tar_path = collect.incoming_tar(tmp_path, cell.sweep, cell.host, cell.id)
    tar_path.parent.mkdir(parents=True)
    with tarfile.open(tar_path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), int(time.time())
            tar.addfile(info, io.BytesIO(data))
    host_facts = facts.gather(simulate_gpu="gb10", cache_dir=str(Path.home()))
    record = collect.finalize_cell(tmp_path, cell, host_facts, 0.0, 60.0, measure_s=30.0)
    assert record is not None and record.status == "done" and record.runs_collected == 1
    folder = tree.cell_dir(tmp_path, cell.sweep, cell.host, cell.id)
    assert CellRecord.from_toml(tree.read_toml(folder / tree.CELL_FILE)) == record
    assert problems(record.attestation, contracts.Attestation) == []
    measured = MeasurementRecord.from_toml(tree.read_toml(folder / "c001-r1.toml"))
    assert measured == MeasurementRecord(
        cell.id, {**window, "engine_died": False, "before_crash": False, "pressure": []}
    )


def test_hostside_contracts_stay_stdlib_and_type_only():
    """contracts.py runs on the hosts: nothing but the standard library's typing."""
    source = Path(contracts.__file__).read_text()
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert imports == ["from __future__ import annotations", "from typing import Any, TypedDict"]
    assert typing.get_type_hints(contracts.Measurement)["metrics_delta"] == dict[str, float]


def test_the_host_data_checks_cover_exactly_the_contracts():
    """running/hostdata.py checks what a host returns, key by key: its tables must name the contract's keys, and
    what a real producer gives passes through unchanged."""
    from agent.running import hostdata

    assert set(hostdata.FACTS) == all_keys(contracts.Facts)
    assert set(hostdata.HOLDER) == all_keys(contracts.Holder)
    assert set(hostdata.RUN) == all_keys(contracts.Measurement) - {"before_crash", "pressure"}  # collect adds them
    assert set(hostdata.FAILURE) == all_keys(contracts.Failure) - {"draft_model"}  # not kept in cell.toml
    gathered = facts.gather(simulate_gpu="gb10", cache_dir=str(Path.home()))
    assert hostdata.facts(json.loads(json.dumps(gathered)), "h") == gathered
    holder = controller_identity("quick", GOLDEN_ID)
    assert hostdata.holder(holder) == holder
    measurement = loadgen._with_counters(_window(), 1, {}, {})
    assert hostdata.run_result(json.loads(json.dumps(measurement)), "c002-r1.json") == measurement
    summary = {"bytes_per_token": 5, "total_gib": 1.5, "mtp": {"present": True, "quantized": False}}
    info = hostdata.checkpoint_summary(summary, "ckpt")
    assert problems(info, matrix.CheckpointInfo) == [] and set(info) == all_keys(matrix.CheckpointInfo)
