"""`vllm bench serve`, the field's reference client, kept alive between runs so tests can interleave it.

Driver (runs with the vLLM venv's python):

    python bench_serve.py RESULT_DIR <vllm bench serve flags...>

It builds `vllm bench serve`'s own argument parser and calls the same main() the CLI dispatches to, so each run is
exactly the CLI's run, minus the import of vLLM (10-25 s on 2 shared cores). It then reads one request per stdin
line, "CONCURRENCY NUM_PROMPTS RUN", adds --max-concurrency, --num-prompts, --seed and --save-result, and answers
with one JSON line on stdout: {"concurrency", "run", "file"} (the result JSON the CLI would write). vLLM's own
printing goes to stderr.

Client (test side, any python): BenchServe(python, result_dir, flags).run(concurrency, num_prompts, run) -> dict.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import sys
from pathlib import Path

READY = "ready"


class BenchServe:
    """One long-lived driver process; stop() ends it by its PID."""

    def __init__(self, python, result_dir, flags, env=None, timeout_s=300.0):
        self.result_dir = Path(result_dir)
        self.timeout_s = timeout_s
        self.result_dir.mkdir(parents=True, exist_ok=True)
        with open(self.result_dir / "bench.log", "w") as log:
            self.proc = subprocess.Popen(
                [str(python), __file__, str(result_dir), *flags],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
            )
        try:
            self._expect_line()  # "ready": vLLM is imported
        except BaseException:
            self.stop()
            raise

    def run(self, concurrency: int, num_prompts: int, run: int) -> dict:
        """One `vllm bench serve` run; returns its result JSON."""
        self.proc.stdin.write(f"{concurrency} {num_prompts} {run}\n")
        self.proc.stdin.flush()
        answer = json.loads(self._expect_line())
        return json.loads(Path(answer["file"]).read_text())

    def log_tail(self, chars: int = 3000) -> str:
        return (self.result_dir / "bench.log").read_text(errors="replace")[-chars:]

    def _expect_line(self) -> str:
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(self.timeout_s):
                raise RuntimeError(f"vllm bench serve: no answer in {self.timeout_s:.0f} s\n{self.log_tail()}")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"vllm bench serve exited ({self.proc.wait()}):\n{self.log_tail()}")
        return line.strip()

    def stop(self) -> None:
        """Close stdin (the driver's cue to exit); kill it by PID if it does not."""
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


def serve_requests(result_dir: str, flags: list[str]) -> int:
    # The answers go out on a private copy of stdout, and fd 1 itself goes to the log: vLLM sets up its logging on
    # import with a handler bound to the stdout of that moment, which redirect_stdout never reaches (on the H200 run
    # vLLM 0.24's INFO lines reached the answer pipe and the client read them as JSON).
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    os.makedirs(result_dir, exist_ok=True)
    print(READY, file=answer, flush=True)
    for line in sys.stdin:
        concurrency, num_prompts, run = (int(word) for word in line.split())
        name = f"bench-c{concurrency:03d}-r{run}.json"
        args = parser.parse_args(
            flags
            + [
                "--max-concurrency",
                str(concurrency),
                "--num-prompts",
                str(num_prompts),
                "--seed",
                str(run),
                "--save-result",
                "--result-dir",
                result_dir,
                "--result-filename",
                name,
            ]
        )
        with contextlib.redirect_stdout(sys.stderr):
            bench_main(args)
        print(
            json.dumps({"concurrency": concurrency, "run": run, "file": os.path.join(result_dir, name)}),
            file=answer,
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(serve_requests(sys.argv[1], sys.argv[2:]))
