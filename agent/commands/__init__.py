"""One module per `spark-agent` subcommand. Each defines `register(subparsers)` and `run(args) -> int`.

Commands are thin: parse, call one function of the library, print.

COMMANDS is what `spark-agent --help` lists without importing any of them (the CLI imports only the command that
runs: --help stays fast). Each line is the help its module registers (tests/test_cli_lazy.py keeps them equal).
"""

COMMANDS: dict[str, tuple[str, str]] = {  # command -> (module under agent.commands, one-line help)
    "demo": ("demo", "run the quick sweep on the simulated Spark on this machine, then print what to run"),
    "init": ("init", "write a starter inventory for a list of hosts, then record their SSH keys (trust)"),
    "sweep": ("sweep", "provision, serve, measure and collect every cell of a sweep spec"),
    "tune": ("tune", "measure a sweep spec adaptively: stop what is decided, skip what cannot matter"),
    "calibrate": (
        "calibrate",
        "measure every host's speed on the spec's reference cell, once per fleet and image (later sweeps use it for a "
        "week instead of a reference cell of their own)",
    ),
    "status": ("status", "per-host progress of a detached sweep: done, running now, failed, lost"),
    "collect": ("collect", "bring back every sealed cell of a detached sweep (safe while it runs)"),
    "check": ("check", "reach every host, print its facts and anything that would stop a sweep"),
    "env": ("env", "show the environment each cell would get, and the rule behind each variable"),
    "lint": ("lint", "check a vllm serve launch (command, script, compose, k8s, model card) before it runs"),
    "pin": ("pin", "resolve an image tag to name@sha256:<digest> on a host"),
    "attest": ("attest", "what a vLLM server really loaded, from its log"),
    "inspect": ("inspect", "what is in a checkpoint, from its safetensors headers"),
    "logs": ("logs", "print (or --follow) the server log of a host's running or named cell"),
    "trust": ("trust", "show new hosts' SSH key fingerprints and record them in known_hosts"),
    "clean-cache": ("clean_cache", "list or prune the per-image warm-start caches on the hosts"),
    "report": ("report", "write report.md/.html + plots from a results tree"),
    "compare": ("compare", "compare two results trees point by point"),
    "export": ("export", "export measurements as CSV or JSON Lines"),
    "history": ("history", "one configuration over time and across images"),
    "store": ("store", "ingest results trees into the results store"),
    "share": ("share", "write a signed bundle of a sweep that anyone can verify"),
    "verify": ("verify", "check a shared bundle: signature, hashes, and every number again"),
    "site": ("site", "render a static site of the results store"),
    "watch": ("watch", "measure every new digest of the tracked image tags; say what changed on one page"),
    "sim": ("sim", "run the simulated Spark: a vLLM-compatible server (sim serve MODEL ...)"),
}
