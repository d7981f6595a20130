"""Redaction: secrets never reach a file, a report, a log line or an error message. Standard library only.

Used on both sides: on the host (launch.txt) and on the controller (cell.toml, reports, exports, structlog lines,
error messages). Redaction is only ever applied to what is *shown or stored*; the server's environment is never
passed through it.

Three ways a value is recognised as secret:
- by the name it is given: an env variable, a dict key, a `--flag`, a `NAME=value` in free text. The rule is a
  grammar over the name's words (name_words: split at _ - . case changes and digits), tested production by
  production in tests/test_redact.py:
      core    := the words without trailing numbers               HF_TOKEN_2 -> HF TOKEN
      shown   := core ends in a LOCATION word (FILE PATH DIR)      HF_TOKEN_PATH: where a secret lives
      secret  := not shown, and one of
                 a word holding a SECRET part (SECRET PASSWORD PASSWD PASSPHRASE CREDENTIAL APIKEY), anywhere
               | a SECRET word (AUTH COOKIE CRED CREDS), anywhere, whole
               | core ends in WEBHOOK(S), or in URL URLS URI after WEBHOOK(S) or HOOK: a webhook's URL
               | core ends in TOKEN KEY PASS PAT, not after a word that makes it a model token or a lookup key
                 (bytes_per_token, eos_token, sort_key, host_key)
               | core ends in PW PWD after another word: MYSQL_PWD, REDIS_PW (PWD alone is the working directory)
               | core ends in TOKENS KEYS PATS after a word that makes them credentials (API ACCESS BEARER
                 REFRESH SESSION PERSONAL SERVICE DEPLOY): API_TOKENS; plain plurals count model tokens
                 (max_tokens, prompt_tokens) or name lookup keys (sort_keys)
  so HF_TOKEN, GITHUB_PAT, AWS_CREDS, API_TOKENS, HF_TOKEN_2, PGPASSWORD, MYSQL_PWD, SLACK_WEBHOOK_URL and apiKey
  are secrets;
  max_tokens, eos_token_id, KEY_SIZE, PWD and HF_TOKEN_PATH are not. Invisible characters are removed first;
- by its shape: Hugging Face, GitHub, OpenAI-style, NVIDIA (nvapi-), AWS and JWT tokens, bearer headers,
  user:password@ in URLs, a signed URL's signature and credentials (S3, GCS, CloudFront, Azure SAS), a webhook
  URL's token path (Slack, Discord, Teams, Zapier, /hooks/<token>), private key blocks;
- by being a value we were told is secret (remember()): a vaulted inventory value, or the value of a secret-named
  variable, is then replaced wherever it shows up, whatever its shape (values of 8 characters or more: a short
  value such as "1" would blank out every digit of a log).

Every pattern is linear: prefixes are literal or anchored by a look-behind, and no two repeats can share
characters, so a hostile megabyte line costs a megabyte of scanning.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

MARKER = "%REDACTED%"  # safe unquoted in a shell line, Markdown, HTML, rich markup and TOML
MIN_KNOWN_LEN = 8

# Characters that show nothing yet change what is seen or matched (a regex character class body): bidi embeddings,
# overrides, isolates and marks (Trojan Source), zero-width spaces and joiners, the BOM, the soft hyphen, the
# combining grapheme joiner, the Mongolian vowel separator, Hangul fillers, variation selectors and Unicode tag
# characters. Inside a secret or its name they would hide it from every pattern: removed before matching
# (redact_text, name_words), and never shown (agent/escape.py).
INVISIBLE = (
    "\u00ad\u034f\u061c\u115f\u1160\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff"
    "\uffa0\U000e0000-\U000e007f\U000e0100-\U000e01ef"
)
_INVISIBLE = re.compile(f"[{INVISIBLE}]")

# The grammar's word classes (the module docstring gives the grammar).
# Parts that make a name secret wherever they stand, even inside a word (DB_PASSWORD, PGPASSWORD, CLIENT_SECRET_ID)...
_SECRET_PARTS = ("SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "APIKEY")
# ...and words that do only as whole words (PROXY_AUTH, SESSION_COOKIE, AWS_CREDS; not AUTHOR, CREDIT).
_SECRET_WORDS = frozenset({"AUTH", "COOKIE", "CRED", "CREDS"})
# A webhook's URL is its credential (anyone holding it may post): secret as the last word, or before URL as the last:
# SLACK_WEBHOOK, spark_watch_webhook, TEAMS_WEBHOOK_URL, HOOK_URL (webhook_timeout is not).
_HOOK_WORDS = frozenset({"WEBHOOK", "WEBHOOKS"})
_HOOK_URL_WORDS = frozenset({"URL", "URLS", "URI"})
# Words that make a name secret only as its last word: HF_TOKEN, HUGGING_FACE_HUB_TOKEN, OPENAI_API_KEY, SSH_KEY,
# ansible_become_pass, GITHUB_PAT. Elsewhere they name something else: token_text, eos_token_id, KEY_SIZE, pass_config.
_LAST_WORDS = frozenset({"TOKEN", "KEY", "PASS", "PAT"})
# ...and the short spellings of a password, secret as the last word after another one: MYSQL_PWD, REDIS_PW, dbPwd.
_SHORT_LAST_WORDS = frozenset({"PW", "PWD"})
# ...and not even last after a word that says what kind of token or key it is, none of which log anyone in:
# a model token (bytes_per_token, time_to_first_token, eos_token) or a lookup key (sort_key, cache_key, host_key).
_NOT_SECRET_BEFORE_LAST = frozenset(
    {"PER", "FIRST", "LAST", "NEXT", "OUTPUT", "INPUT", "PROMPT", "GENERATION", "DRAFT", "NEW", "EACH", "EOS", "BOS"}
    | {"PAD", "UNK", "SEP", "CLS", "MASK", "SPECIAL", "START", "END", "STOP"}
    | {"SORT", "MATCH", "PAIRING", "CACHE", "PRIMARY", "PARTITION", "FOREIGN", "HOT", "DICT", "MAP", "ROW"}
    | {"LOOKUP", "GROUP", "HASH", "PUBLIC", "HOST"}
)
# Plurals of the last words: a count of model tokens or a set of lookup keys (max_tokens, sort_keys), unless a word
# before says they are credentials (API_TOKENS, ACCESS_KEYS).
_LAST_PLURALS = frozenset({"TOKENS", "KEYS", "PATS"})
_CREDENTIAL_BEFORE_PLURAL = frozenset(
    {"API", "ACCESS", "BEARER", "REFRESH", "SESSION", "PERSONAL", "SERVICE", "DEPLOY"}
)
# A name that ends in one of these holds where a secret lives, not the secret (ANSIBLE_VAULT_PASSWORD_FILE,
# HF_TOKEN_PATH): showing it helps, and hiding it would hide which file was used.
_LOCATION_WORDS = frozenset({"FILE", "PATH", "DIR"})

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def name_words(name: str) -> list[str]:
    """HF_TOKEN -> [HF, TOKEN]; apiKey -> [API, KEY]; --hf-token -> [HF, TOKEN]; HF_TO\u00adKEN -> [HF, TOKEN]."""
    return [w.upper() for w in _WORD.findall(_INVISIBLE.sub("", name))]


def is_secret_name(name: str) -> bool:
    """Whether a variable, key or flag of this name holds a secret (the grammar in the module docstring)."""
    words = name_words(name)
    while words and words[-1].isdigit():  # HF_TOKEN_2, API_KEY2: a numbered secret is a secret
        words.pop()
    if not words or words[-1] in _LOCATION_WORDS:
        return False
    if any(part in w for w in words for part in _SECRET_PARTS) or any(w in _SECRET_WORDS for w in words):
        return True
    before = words[-2] if len(words) > 1 else ""
    if words[-1] in _HOOK_WORDS or (words[-1] in _HOOK_URL_WORDS and before in {*_HOOK_WORDS, "HOOK"}):
        return True
    if words[-1] in _SHORT_LAST_WORDS:  # MYSQL_PWD, DB_PW; never PWD alone (the working directory)
        return bool(before)
    if words[-1] in _LAST_WORDS:
        return before not in _NOT_SECRET_BEFORE_LAST
    return words[-1] in _LAST_PLURALS and before in _CREDENTIAL_BEFORE_PLURAL


# --- values we were told are secret -----------------------------------------------------------------------

_known: set[str] = set()
_known_re: re.Pattern[str] | None = None
_known_lock = threading.Lock()


def remember(values: Iterable[Any]) -> None:
    """Values to redact wherever they appear from now on (this process)."""
    global _known_re
    fresh = {str(v) for v in values if isinstance(v, str | int) and len(str(v)) >= MIN_KNOWN_LEN}
    with _known_lock:
        if fresh - _known:
            _known.update(fresh)
            ordered = sorted(_known, key=len, reverse=True)  # the longest first, so no value leaves a tail behind
            _known_re = re.compile("|".join(re.escape(v) for v in ordered))


def remember_secrets(data: Any) -> None:
    """Remember the values of every secret-named key in a nested structure (inventory vars, an env)."""
    remember(_secret_leaves(data, secret=False))


def _secret_leaves(data: Any, secret: bool) -> Iterable[str]:
    if isinstance(data, Mapping):
        for key, value in data.items():
            yield from _secret_leaves(value, secret or is_secret_name(str(key)))
    elif isinstance(data, list | tuple):
        for value in data:
            yield from _secret_leaves(value, secret)
    elif secret and isinstance(data, str):
        yield data


def forget_all() -> None:
    """Tests only: start from no remembered values."""
    global _known_re
    with _known_lock:
        _known.clear()
        _known_re = None


# --- free text -----------------------------------------------------------------------------------------------

# One pass for every token shape; a token starts a word (not inside "task-..." or "self_hf_...").
_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_])(?:"
    r"hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|gh[pousr]_[A-Za-z0-9]{30,}"  # GitHub classic
    r"|github_pat_[A-Za-z0-9_]{30,}"  # GitHub fine-grained
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|xox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
    r"|sk-[A-Za-z0-9_-]{20,}"  # OpenAI, Anthropic and friends
    r"|pypi-[A-Za-z0-9_-]{40,}"  # PyPI
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"  # AWS access key id
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWT
    r"|nvapi-[A-Za-z0-9_-]{20,}"  # NVIDIA (build.nvidia.com, NGC)
    r"|hf_oauth_[A-Za-z0-9_-]{20,}"  # Hugging Face OAuth
    r")"
)
_NOT_MARKED = r"(?!%REDACTED%)"
# The secret part is group 2; group 1 (and 3) is kept so the text still says what was there.
_CONTEXT = [
    re.compile(r"(-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----)" + _NOT_MARKED + r"([A-Za-z0-9+/=\s]+)"),
    re.compile(
        r"(?i)(\b(?:authorization\s*[:=]\s*(?:(?:basic|bearer|token|digest)\s+)?|bearer\s+))"
        + r"(?!%REDACTED%|(?:basic|bearer|token|digest)\s)([A-Za-z0-9._~+/=-]{6,})"
    ),
    re.compile(r"(://[^/\s:@'\"]+:)" + _NOT_MARKED + r"([^/\s@'\"]+)(@)"),  # scheme://user:password@host
    # a webhook's path is its token: Slack, Discord, Microsoft Teams (Office 365 connectors), Zapier, and the
    # /hooks/<token> of Mattermost, Rocket.Chat and the like (the host stays: it says where it went)
    re.compile(
        r"(hooks\.slack\.com/(?:services|workflows|triggers)/|discord(?:app)?\.com/api/webhooks/"
        r"|\.webhook\.office\.com/webhookb2/|hooks\.zapier\.com/hooks/catch/|/hooks/(?=[A-Za-z0-9_-]{16}))"
        + _NOT_MARKED
        + r"([A-Za-z0-9@._/-]+)"
    ),
    # a signed URL's signature and credentials in its query: S3 and GCS (X-Amz-/X-Goog-), CloudFront, Azure SAS
    re.compile(
        r"(?i)([?&](?:x-(?:amz|goog)-(?:signature|credential|security-token)|signature|sig|key-pair-id|policy"
        r"|token|access_token|auth|apikey|api_key|key)=)" + _NOT_MARKED + r"([^&#\s'\"<>]+)"
    ),
]
# NAME=value, NAME: value, "NAME": "value", 'NAME': 'value'; then --flag value, --flag=value (a pass of its own, so
# `--env DB_PASSWORD=x` is seen as the assignment it carries). The name decides.
_VALUE = r"""(?P<value>'[^'\n]*'|"[^"\n]*"|[^\s'",;&}\]]+)"""
_NAMED = re.compile(
    r"""(?P<head>
          (?P<q>['"])(?P<qname>[A-Za-z_][\w.-]*)(?P=q)\s*[:=]\s*      # "NAME": / 'NAME':
        | (?<![\w.-])(?P<name>[A-Za-z_][\w.]*)(?:=|:[ \t]*)            # NAME=value / NAME: value
        )"""
    + _VALUE,
    re.VERBOSE,
)
_FLAG = re.compile(r"(?P<head>(?<![\w.-])(?P<flag>--[A-Za-z][\w-]*)(?:=|[ \t]+))" + _VALUE)


def redact_text(text: str) -> str:
    """Free text with every secret it holds replaced by MARKER."""
    if not text:
        return text
    text = _INVISIBLE.sub("", text)  # a secret split by an invisible character is still the secret shown
    pattern = _known_re
    if pattern is not None:
        text = pattern.sub(MARKER, text)
    text = _SHAPES.sub(MARKER, text)
    for context in _CONTEXT:
        text = context.sub(_keep_context, text)
    return _FLAG.sub(_named, _NAMED.sub(_named, text))


def _keep_context(match: re.Match[str]) -> str:
    return match[1] + MARKER + (match[3] if match.lastindex and match.lastindex >= 3 else "")


def _named(match: re.Match[str]) -> str:
    groups = match.groupdict()
    name = groups.get("qname") or groups.get("flag") or groups.get("name") or ""
    value = match["value"]
    if not is_secret_name(name) or value.strip("'\"") in ("", MARKER):
        return match[0]
    quote = value[0] if value[0] in "'\"" and value[-1] == value[0] and len(value) > 1 else ""
    return match["head"] + quote + MARKER + quote


# --- structured data -----------------------------------------------------------------------------------------


def redact_env(env: Mapping[str, Any]) -> dict[str, str]:
    """An environment to show: secret-named variables masked, every other value scanned as text."""
    return {str(k): MARKER if is_secret_name(str(k)) else redact_text(str(v)) for k, v in env.items()}


def redact_argv(argv: Iterable[Any]) -> list[str]:
    """A command line to show: the value after a secret flag (--api-key X, --hf-token=X) and token shapes masked."""
    out: list[str] = []
    mask_next = False
    for arg in (str(a) for a in argv):
        if mask_next:
            out.append(MARKER)
            mask_next = False
            continue
        if arg.startswith("--") and is_secret_name(arg.partition("=")[0]):
            if "=" in arg:
                arg = arg.partition("=")[0] + "=" + MARKER
            else:
                mask_next = True
            out.append(arg)
            continue
        out.append(redact_text(arg))
    return out


def redact(data: Any) -> Any:
    """A nested structure (a cell record, a log event, JSON from a host) with its secrets masked.

    A secret-named key masks everything under it; a {"name": SECRET_NAME, "value": ...} row (env provenance)
    masks its value; every other string is scanned as text. Numbers and booleans stay as they are.
    """
    return _redact(data, secret=False)


def _redact(data: Any, secret: bool) -> Any:
    if isinstance(data, Mapping):
        row_secret = secret or any(
            is_secret_name(str(data.get(k, ""))) for k in ("name", "key") if isinstance(data.get(k), str)
        )
        return {
            k: _redact(v, secret or is_secret_name(str(k)) or (row_secret and k == "value")) for k, v in data.items()
        }
    if isinstance(data, list | tuple):
        if not secret and data and all(isinstance(v, str) for v in data):
            return redact_argv(data)  # a command line, or lines of text: a secret flag masks what follows it
        return [_redact(v, secret) for v in data]
    if isinstance(data, str):
        return MARKER if secret and data else redact_text(data)
    return data  # numbers stay numbers: a typed field must still read back
