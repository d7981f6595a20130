"""The simulated Spark: a vLLM-compatible server (standard library only) that behaves like vLLM on a GB10.

`python3 -m agent.sim serve MODEL [vllm serve flags] [--sim-* flags]`. Every behavioural number lives in
calibration.toml; see README.md for the knobs and faults.
"""
