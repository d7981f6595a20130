"""Redaction (agent/hostside/redact.py) and where it is wired in: structlog lines, UserError, the results tree as read,
the extra-vars file. Pure unit tests: no hosts."""

from __future__ import annotations

import io
import json
import os
import stat

import pytest
import structlog

from agent import logs
from agent.errors import UserError
from agent.hostside import redact
from agent.hostside.redact import MARKER
from agent.planning import matrix
from agent.results import tree
from agent.running import playbooks

pytestmark = pytest.mark.unit

HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
GHP = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
PAT = "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz"
SK = "sk-proj-" + "abcdefghijklmnopqrstuvwx"
AWS = "AKIA" + "IOSFODNN7EXAMPLE"
JWT = "eyJhbGciOiJIUzI1NiJ9" + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0" + ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV"


@pytest.fixture(autouse=True)
def _no_remembered_values():
    redact.forget_all()
    yield
    redact.forget_all()


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "GITHUB_TOKEN",
        "OPENAI_API_KEY",
        "VLLM_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "PGPASSWORD",
        "PGPASSWD",
        "ansible_password",
        "ansible_become_pass",
        "SSH_PASSPHRASE",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "PROXY_AUTH",
        "client_secret",
        "apiKey",
        "authToken",
        "--api-key",
        "--hf-token",
    ],
)
def test_secret_names(name):
    assert redact.is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "MAX_TOKENS",
        "bytes_per_token",
        "time_to_first_token",
        "eos_token_id",
        "token_text",
        "TOKENIZERS_PARALLELISM",
        "KEY_SIZE",
        "sort_keys",
        "cache_key",
        "HostKey",
        "pass_config",
        "PWD",
        "BYPASS",
        "AUTHOR",
        "ansible_ssh_private_key_file",
        "ANSIBLE_VAULT_PASSWORD_FILE",
        "HF_TOKEN_PATH",
        "VLLM_USE_DEEP_GEMM",
        "CUTE_DSL_ARCH",
    ],
)
def test_names_that_are_not_secret(name):
    assert not redact.is_secret_name(name)


@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        (f"token {HF}", HF, "token "),
        (f"x={GHP}", GHP, "x="),
        (f"pat {PAT}.", PAT, "pat "),
        (f"key {SK}", SK, "key "),
        (f"id {AWS} end", AWS, " end"),
        (f"jwt {JWT}", JWT, "jwt "),
        ("Authorization: Bearer abc.def-ghi", "abc.def-ghi", "Authorization: Bearer "),
        ("curl -H 'authorization: Basic dXNlcjpwYXNz'", "dXNlcjpwYXNz", "authorization: Basic "),
        ("pip install -i https://bob:hunter2@pypi.example/simple", "hunter2", "https://bob:"),
        ("HF_TOKEN=plain-value vllm serve", "plain-value", "HF_TOKEN="),
        ("HF_TOKEN='with space' vllm", "with space", "HF_TOKEN='"),
        ("docker run --env DB_PASSWORD=hunter22 img", "hunter22", "--env DB_PASSWORD="),
        ("vllm serve m --api-key s3cr3t-key --port 8000", "s3cr3t-key", "--port 8000"),
        ("vllm serve m --hf-token=abc12345", "abc12345", "--hf-token="),
        ("""non-default args: {'model': 'm', 'hf_token': 'abc12345'}""", "abc12345", "'model': 'm'"),
        ('{"password": "p a s s"}', "p a s s", '{"password": "'),
        ("password: hunter22", "hunter22", "password: "),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n-----END", "b3BlbnNzaC1rZXk", "-----END"),
    ],
)
def test_text_masks_the_secret_and_keeps_the_context(text, secret, kept):
    out = redact.redact_text(text)
    assert secret not in out and MARKER in out and kept in out
    assert redact.redact_text(out) == out  # idempotent: a masked text stays as it is


@pytest.mark.parametrize(
    "text",
    [
        "vllm serve m --max-num-seqs 16 --max-model-len 8192 c=8 max_tokens=256",
        "task-abcdefghijklmnopqrstuvwxyz0123 self_hf_abcdefghijklmnopqrstuvwxyz0123456",
        "INFO Token throughput: 120.5 tokens/s; bytes_per_token=1234567",
        "http://127.0.0.11:8000/v1/completions",
        "moe backend: MARLIN",
    ],
)
def test_text_without_secrets_is_unchanged(text):
    assert redact.redact_text(text) == text


def test_remembered_values_are_masked_whatever_their_shape():
    redact.remember(["plain-but-secret", "short"])  # "short" is under the minimum: never masked in free text
    assert redact.redact_text("echo plain-but-secret; short") == f"echo {MARKER}; short"
    redact.remember_secrets({"spark_serve_env": {"HF_TOKEN": "another-one-123", "PYTHONPATH": "/opt/agent-code"}})
    assert redact.redact_text("x another-one-123 /opt/agent-code") == f"x {MARKER} /opt/agent-code"


def test_env_argv_and_nested_records():
    env = {"HF_TOKEN": "x", "CUTE_DSL_ARCH": "sm_121a", "NOTE": f"uses {HF}"}
    assert redact.redact_env(env) == {"HF_TOKEN": MARKER, "CUTE_DSL_ARCH": "sm_121a", "NOTE": f"uses {MARKER}"}
    argv = ["vllm", "serve", "m", "--api-key", "k1", "--hf-token=k2", "--port", "8000"]
    assert redact.redact_argv(argv) == [
        "vllm",
        "serve",
        "m",
        "--api-key",
        MARKER,
        f"--hf-token={MARKER}",
        "--port",
        "8000",
    ]
    record = {
        "env": env,
        "env_provenance": [{"name": "HF_TOKEN", "value": "x", "rule": "spec"}, {"name": "A", "value": "1"}],
        "launch": {"argv": argv, "command": f"HF_TOKEN={HF} vllm serve m"},
        "checkpoint_info": {"bytes_per_token": 1234},
        "config": {"concurrency": [1, 2], "max_model_len": 8192},
        "auth": {"nested": ["a", "b"]},
    }
    out = redact.redact(record)
    assert out["env_provenance"] == [{"name": "HF_TOKEN", "value": MARKER, "rule": "spec"}, {"name": "A", "value": "1"}]
    assert out["launch"]["argv"][4] == MARKER and HF not in out["launch"]["command"]
    assert out["checkpoint_info"] == {"bytes_per_token": 1234} and out["config"] == record["config"]  # types kept
    assert out["auth"] == {"nested": [MARKER, MARKER]}
    assert record["env"]["HF_TOKEN"] == "x"  # the input is never changed: what the server gets stays intact


def test_structlog_lines_carry_no_secret(capsys):
    logs.configure("json")
    redact.remember(["remembered-secret-1"])
    structlog.get_logger("t").info(
        "event", env={"HF_TOKEN": "x1x1x1"}, failures={"h": f"Authorization: Bearer {HF}"}, msg="remembered-secret-1"
    )
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["env"] == {"HF_TOKEN": MARKER} and HF not in json.dumps(line) and line["msg"] == MARKER
    logs.configure("console")


def test_user_error_never_shows_a_secret():
    assert HF not in UserError(f"host a: bad value HF_TOKEN={HF}").message
    assert HF not in str(UserError(f"host a: {HF}"))


def test_results_tree_is_masked_as_read(tmp_path):
    """A tree written by an older version (secrets in clear) reads back masked: every report and export is clean."""
    from tests.test_report_fixtures import write_cell

    write_cell(tmp_path, backend="marlin", values={1: [10.0]}, env={"HF_TOKEN": HF}, failure_evidence=[f"401 {HF}"])
    cells = tree.load_cells(tmp_path)
    assert len(cells) == 1 and HF not in json.dumps(cells[0], default=str) and cells[0]["env"]["HF_TOKEN"] == MARKER


def test_cell_id_ignores_secret_values_and_keeps_others():
    from tests.test_cell_id_golden import GOLDEN_CONFIG

    config = matrix.CellConfig.from_dict(GOLDEN_CONFIG)
    assert matrix.cell_id(config, {"HF_TOKEN": "a", "X": "1"}) == matrix.cell_id(config, {"HF_TOKEN": "b", "X": "1"})
    assert matrix.cell_id(config, {"X": "1"}) != matrix.cell_id(config, {"X": "2"})


def test_extravars_file_is_ours_alone(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    playbooks.write_extravars(private, {"cell": {"env": {"HF_TOKEN": HF}}})
    path = private / "env" / "extravars"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert json.loads(path.read_text())["cell"]["env"]["HF_TOKEN"] == HF  # the playbook still gets the real value


def test_runner_environment_forces_host_key_checking(monkeypatch):
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")  # a user's shell cannot turn it off for us
    assert playbooks.ansible_env()["ANSIBLE_HOST_KEY_CHECKING"] == "True"


@pytest.mark.parametrize(
    ("ssh_output", "expect"),
    [
        (
            "Failed to connect to the host via ssh: No ED25519 host key is known for [127.0.0.11]:2222 and you have "
            "requested strict checking.\r\nHost key verification failed.",
            ["spark-a", "not in known_hosts", "ssh-keyscan -p 2222 127.0.0.11", "spark-agent trust"],
        ),
        (
            "@@@@\r\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\r\nOffending ED25519 key in "
            "/k/known_hosts:3\r\nHost key for 10.0.0.5 has changed and you have requested strict checking.\r\n"
            "Host key verification failed.",
            ["spark-a", "CHANGED", "/k/known_hosts line 3", "ssh-keygen -R '10.0.0.5'"],
        ),
    ],
)
def test_host_key_messages(ssh_output, expect):
    message = playbooks.host_key_message("spark-a", ssh_output)
    assert message and "\n" not in message and all(part in message for part in expect)


def test_other_unreachable_messages_are_not_host_key_problems():
    assert playbooks.host_key_message("a", "ssh: connect to host 10.0.0.5 port 22: Connection refused") is None


def test_console_renderer_masks_too():
    stream = io.StringIO()
    structlog.configure(
        processors=[logs.redact_event, structlog.dev.ConsoleRenderer(colors=False)],
        logger_factory=lambda *args: structlog.PrintLogger(stream),
    )
    structlog.get_logger().warning("x", token=HF)
    logs.configure("console")
    assert HF not in stream.getvalue()


@pytest.mark.parametrize("as_json", [True, False])
def test_env_command_shows_no_secret(tmp_path, capsys, as_json):
    """`spark-agent env` on this machine's facts (no host touched): the table and the JSON mask the spec's secrets."""
    from agent.cli import main

    spec = tmp_path / "spec.toml"
    spec.write_text(
        '[sweep]\nname = "s"\n[image]\nref = "nvcr.io/nvidia/vllm@sha256:' + "ab" * 32 + '"\nvllm_version = "0.24.0"\n'
        '[[checkpoints]]\nname = "c"\nmodel = "m"\nquant = "nvfp4"\n[matrix]\nmoe_backend = ["marlin"]\n'
        f'concurrency = [1]\n[env]\nHF_TOKEN = "plain-spec-token-1"\nNOTE = "{HF}"\n'
    )
    args = ["env", str(spec), "--host", "here", "--simulate-gpu", "gb10"] + (["--json"] if as_json else [])
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "plain-spec-token-1" not in out and HF not in out and MARKER in out


# --- the name grammar, production by production (redact.py's docstring) ----------------------------------------
def _spellings(words: list[str]) -> list[str]:
    """One name in the ways it is written: SNAKE_CASE, snake_case, kebab-case, --flag, camelCase, dotted."""
    camel = words[0].lower() + "".join(w.capitalize() for w in words[1:])
    return [
        "_".join(words).upper(),
        "_".join(words).lower(),
        "-".join(words).lower(),
        "--" + "-".join(words).lower(),
        camel,
        ".".join(words).lower(),
    ]


_PREFIXES = [[], ["HF"], ["GITHUB"], ["MY", "SERVICE", "X"], ["VLLM"], ["AWS"]]
_NUMBERS = [[], ["2"], ["10"]]


def _names(heads: list[list[str]], prefixes=_PREFIXES, numbers=_NUMBERS) -> list[str]:
    out = []
    for head in heads:
        for prefix in prefixes:
            for number in numbers:
                words = prefix + head + number
                out += _spellings(words) if words else []
    return out


_SECRET_PRODUCTIONS = {  # production -> heads (the words the name ends in), each under every prefix and number
    "a last word": [["TOKEN"], ["KEY"], ["PASS"], ["PAT"], ["API", "KEY"], ["AUTH", "TOKEN"]],
    "a secret word": [["CREDS"], ["CRED"], ["AUTH"], ["COOKIE"]],
    "a secret part": [["SECRET"], ["PASSWORD"], ["CREDENTIALS"], ["CLIENT", "SECRET", "ID"]],
    "a credential plural": [
        [q, plural] for q in ("API", "ACCESS", "SESSION", "PERSONAL") for plural in ("TOKENS", "KEYS")
    ],
    "a webhook": [["WEBHOOK"], ["WEBHOOKS"], ["WEBHOOK", "URL"], ["HOOK", "URL"], ["SLACK", "WEBHOOK", "URI"]],
}
_SHOWN_PRODUCTIONS = {
    "a model token or lookup key": [[q, "TOKEN"] for q in ("PER", "FIRST", "EOS", "PROMPT")]
    + [[q, "KEY"] for q in ("SORT", "CACHE", "HOST")],
    "a count of tokens": [[q, "TOKENS"] for q in ("MAX", "PROMPT", "NUM", "SPEC", "CLIENT", "TOTAL", "OUTPUT")]
    + [["SORT", "KEYS"], ["MAX", "NUM", "BATCHED", "TOKENS"]],
    "a location": [["TOKEN", "PATH"], ["PASSWORD", "FILE"], ["CREDS", "DIR"], ["WEBHOOK", "FILE"]],
    "no secret word": [["KEY", "SIZE"], ["PATH"], ["AUTHOR"], ["CREDIT", "LIMIT"], ["BYPASS"], ["TOKENS"]]
    + [["WEBHOOK", "TIMEOUT"], ["BASE", "URL"], ["HOOKS"]],
}


@pytest.mark.attack("redaction: secrets named *_CREDS, *_TOKEN_2, *_PAT, API_TOKENS reach logs and records")
@pytest.mark.parametrize("production", sorted(_SECRET_PRODUCTIONS))
def test_the_grammar_makes_every_secret_production_secret(production):
    names = _names(_SECRET_PRODUCTIONS[production])
    assert {"AWS_CREDS", "HF_TOKEN_2", "GITHUB_PAT", "API_TOKENS"} & set(names) or production in (
        "a secret part",
        "a webhook",
    )
    missed = [n for n in names if not redact.is_secret_name(n)]
    assert not missed, missed[:10]
    for name in names:
        if name.startswith("--") or "-" not in name:  # NAME=value in text; kebab-case names appear as --flags
            assert redact.redact_text(f"{name}=s3cr3t-value-1 next") == f"{name}={redact.MARKER} next"


@pytest.mark.parametrize("production", sorted(_SHOWN_PRODUCTIONS))
def test_the_grammar_leaves_names_that_hold_no_secret(production):
    names = _names(_SHOWN_PRODUCTIONS[production])
    shown = [n for n in names if redact.is_secret_name(n)]
    assert not shown, shown[:10]


# Webhook URLs whose path is the token (issue 48): the providers' documented shapes, tokens made up here.
WEBHOOKS = [
    ("https://hooks.slack.com/services/", "T0123ABCD/B0456EFGH/abcdefghijklmnopqrstuvwx"),
    ("https://hooks.slack.com/workflows/", "T0123ABCD/A0456/789/abcdefghijklmnop"),
    ("https://discord.com/api/webhooks/", "123456789012345678/AbCdEf-GhIjKlMnOp_qrstuv"),
    ("https://discordapp.com/api/webhooks/", "123456789012345678/AbCdEf-GhIjKlMnOp_qrstuv"),
    ("https://contoso.webhook.office.com/webhookb2/", "1111-2222@3333-4444/IncomingWebhook/abcd1234/5678"),
    ("https://hooks.zapier.com/hooks/catch/", "123456/abcdef/"),
    ("https://chat.example.org/hooks/", "xq3n8kzrpb8f7m1dmgd4oyie1e"),
]


@pytest.mark.attack("redaction: a Slack/Discord/Teams/Zapier/Mattermost webhook URL in a log or a message")
@pytest.mark.parametrize(("root", "token"), WEBHOOKS)
def test_a_webhook_urls_token_path_is_masked_and_its_host_kept(root, token):
    shown = redact.redact_text(f"webhook said 404 for {root}{token} (retrying)")
    assert token not in shown and token.strip("/").split("/")[-1] not in shown.replace(redact.MARKER, "")
    assert f"{root}{redact.MARKER} (retrying)" in shown


def test_hooks_that_are_no_webhook_stay():
    for text in ("the /hooks/ folder", "git hooks/pre-commit", ".git/hooks/post-merge is a script"):
        assert redact.redact_text(text) == text
