"""Hand-made cell archives and hostile host strings, for the collect and escaping tests (real tar files)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

from agent.planning.matrix import Cell

CELL_ID = "0123456789ab"
OTHER_CELL_ID = "ba9876543210"

# Strings a hostile host puts wherever it can: script, HTML attributes, Markdown, rich markup, Jinja, terminal codes.
SCRIPT = "<script>alert(1)</script>"
ATTRIBUTE = "\"><img src=x onerror=alert(2)>'"
MARKDOWN = "| pipe | `tick` # [link](javascript:alert(3)) **bold** <b>tag</b>"
RICH = "[bold red]fake[/] [link=https://evil.example]click[/link]"
JINJA = "{{ lookup('pipe','id') }}"
TERMINAL = "\x1b[2J\x1b[31mred\x07\nsecond line"
HOSTILE = [SCRIPT, ATTRIBUTE, MARKDOWN, RICH, JINJA, TERMINAL]


def make_cell(sweep: str = "hostile", host: str = "spark-a", cell_id: str = CELL_ID) -> Cell:
    config = {
        "image": "nvcr.io/nvidia/vllm@sha256:" + "ab" * 32,
        "runtime": "process",
        "checkpoint": "ckpt",
        "model": "uns-fast",
        "quant": "nvfp4",
        "moe_backend": "marlin",
        "linear_backend": "",
        "attention_backend": "",
        "speculative": "",
        "gpu_memory_utilization": 0.85,
        "max_model_len": 8192,
        "max_num_seqs": 8,
        "extra_args": [],
        "prompt_len": 64,
        "output_len": 32,
        "profile": "uniform",
        "seed": 0,
        "concurrency": [1],
        "duration_s": 1.0,
        "warmup": 1,
        "repeats": 1,
    }
    return Cell(
        id=cell_id,
        sweep=sweep,
        host=host,
        config=config,
        env={"CUTE_DSL_ARCH": "sm_121a"},
        provenance=[],
        argv=["vllm", "serve", "uns-fast", "--moe-backend", "marlin"],
    )


def run_json(concurrency: int = 1, repeat: int = 1, **override: object) -> bytes:
    run = {
        "concurrency": concurrency,
        "repeat": repeat,
        "ok": True,
        "error": "",
        "errors": [],
        "started_at": "2026-12-01T00:00:00Z",
        "duration": 1.0,
        "completed": 3,
        "failed": 0,
        "total_input_tokens": 192,
        "total_output_tokens": 96,
        "output_throughput": 96.0,
        "request_throughput": 3.0,
        "max_concurrent_requests": 1,
        "median_ttft_ms": 12.0,
        "median_tpot_ms": 3.0,
        "spec_decode_acceptance_rate": -1.0,
        "metrics_delta": {"generation_tokens": 96.0},
    }
    run.update(override)
    return json.dumps(run).encode()


SERVER_LOG = (
    b"INFO 12-01 00:00:00 [__init__.py:1] vLLM version 0.24.0\n"
    b"INFO 12-01 00:00:01 [marlin.py:1] Using MARLIN backend for NVFP4 MoE\n"
)


def good_files() -> dict[str, bytes]:
    """What an honest host sends for a one-window cell."""
    return {
        "server.log": SERVER_LOG,
        "launch.txt": b"CUTE_DSL_ARCH=sm_121a vllm serve uns-fast --moe-backend marlin\n",
        "serve.json": json.dumps({"ready": True, "failure": {}, "facts": {}, "startup_s": 1.5}).encode(),
        "c001-r1.json": run_json(),
    }


def write_tar(path: Path, files: dict[str, bytes], fmt: int = tarfile.PAX_FORMAT) -> Path:
    """A tar of regular files, the way hostside/serving.py seal writes one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1_700_000_000.5  # a float mtime: Python writes a pax header, as seal() does
            tar.addfile(info, io.BytesIO(data))
    return path


def add_members(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], fmt: int = tarfile.PAX_FORMAT) -> Path:
    """A tar of arbitrary members (links, devices, pax headers...), each written as tarfile writes it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=fmt) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def raw_header(
    name: bytes, size: int, kind: bytes = b"0", prefix: bytes = b"", size_field: bytes | None = None
) -> bytes:
    """One ustar header block built by hand (for what tarfile refuses to write), with a valid checksum."""
    header = bytearray(512)
    header[0 : len(name[:100])] = name[:100]
    header[100:108] = b"0000644\0"
    header[108:116] = b"0000000\0"
    header[116:124] = b"0000000\0"
    header[124:136] = size_field if size_field is not None else f"{size:011o}\0".encode()
    header[136:148] = b"00000000000\0"
    header[156:157] = kind
    header[257:263] = b"ustar\0"
    header[263:265] = b"00"
    header[345 : 345 + len(prefix)] = prefix
    header[148:156] = b" " * 8
    header[148:156] = f"{sum(header):06o}\0 ".encode()
    return bytes(header)


def raw_tar(path: Path, blocks: list[bytes], end: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(b + bytes(-len(b) % 512) for b in blocks)
    path.write_bytes(data + (bytes(1024) if end else b""))
    return path


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every path below root (links not followed): (mode, size, mtime_ns or link target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (
                st.st_mode,
                st.st_size,
                os.readlink(p) if p.is_symlink() else str(st.st_mtime_ns),
            )
    return out
