"""What the load driver sends: prompts from a dataset, at the lengths asked for, with the lengths actually sent.

Datasets (the [load] `dataset` setting):
  random    random common words (so the prefix cache cannot shortcut prefill); lengths fixed, or drawn uniformly
            within +-range_ratio of the nominal ones (`vllm bench serve --random-range-ratio`)
  sharegpt  a ShareGPT-format JSON file on the host: a list of {"conversations": [{"from", "value"}, ...]};
            the first turn is the prompt, the second's length the output length unless output_len is fixed
  prefix    groups of `prefix_group_size` prompts share a prefix of `prefix_len` tokens, then random words

Exact lengths: with a token counter (the server's own `/tokenize`, see loadgen.Tokenizer) a random prompt is
grown or cut word by word until the server counts exactly the asked number of tokens (special tokens included,
as the server counts usage.prompt_tokens), so the host needs no tokenizer library. Without one a word is taken
as a token (true of most tokenizers for common English words, not exact).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .errors import HostError

DATASETS = ("random", "sharegpt", "prefix")
MAX_DATASET_BYTES = 1 << 30  # a ShareGPT file larger than this is refused (the public one is ~650 MB)
MAX_ENTRIES = 1_000_000
EXACT_TRIES = 24  # counting rounds before settling for the nearest length below (a word may be several tokens)

# Common English words: nearly every tokenizer maps " word" to one token, so n words ~ n tokens.
_WORDS_TEXT = (
    "the of and to in is you that it he was for on are as with his they at be this have from or one had "
    "by word but not what all were we when your can said there use an each which she do how their if will "
    "up other about out many then them these so some her would make like him into time has look two more "
    "write go see number no way could people my than first water been call who oil its now find long down "
    "day did get come made may part over new sound take only little work know place year live me back "
    "give most very"
)
WORDS = _WORDS_TEXT.split()

Counter = Callable[[str], Awaitable[int]]  # text -> tokens as the server counts them


class DatasetError(HostError):
    """A dataset file that is missing, unreadable or not ShareGPT-shaped; the message names the file."""


@dataclass(frozen=True)
class Dataset:
    """How prompts are made (the [load] settings that reach the host)."""

    name: str = "random"
    prompt_len: int = 1024
    output_len: int = 256
    range_ratio: float = 0.0  # random: lengths uniform within +-range_ratio of the nominal ones
    path: str = ""  # sharegpt: the JSON file on the host
    prefix_len: int = 0  # prefix: shared prefix, tokens
    prefix_group_size: int = 1  # prefix: prompts per shared prefix
    fixed_output: bool = False  # sharegpt: output_len for every request instead of the second turn's length


@dataclass
class Prompt:
    text: str
    prompt_len: int  # tokens as counted (exact with a counter, else words)
    output_len: int
    exact: bool = False  # the server counted prompt_len


def make_text(n_words: int, rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=max(1, n_words)))


def around(nominal: int, ratio: float, rng: random.Random) -> int:
    """A length uniform in [nominal*(1-ratio), nominal*(1+ratio)], at least 1."""
    if ratio <= 0:
        return nominal
    return max(1, rng.randint(int(nominal * (1 - ratio)), int(nominal * (1 + ratio))))


def load_sharegpt(path: str) -> list[tuple[str, str]]:
    """(prompt, completion) of every entry with two turns or more; DatasetError saying what is wrong."""
    if not os.path.isfile(path):
        raise DatasetError(f"dataset file {path}: not found (give a ShareGPT-format JSON file on the host)")
    if os.path.getsize(path) > MAX_DATASET_BYTES:
        raise DatasetError(f"dataset file {path}: larger than {MAX_DATASET_BYTES >> 20} MiB")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DatasetError(f"dataset file {path}: not JSON ({str(exc)[:120]})") from None
    if not isinstance(data, list):
        raise DatasetError(f'dataset file {path}: ShareGPT format is a JSON list of {{"conversations": [...]}}')
    pairs: list[tuple[str, str]] = []
    for i, entry in enumerate(data[:MAX_ENTRIES]):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list):
            raise DatasetError(f'dataset file {path}: entry {i} has no "conversations" list (ShareGPT format)')
        if len(turns) < 2:
            continue  # bench skips these too
        values = [t.get("value") if isinstance(t, dict) else None for t in turns[:2]]
        if not all(isinstance(v, str) for v in values):
            raise DatasetError(f'dataset file {path}: entry {i}: each turn needs a string "value"')
        pairs.append((str(values[0]), str(values[1])))
    if not pairs:
        raise DatasetError(f"dataset file {path}: no entry with two turns or more")
    return pairs


async def exact_text(n_tokens: int, rng: random.Random, count: Counter | None, head: str = "") -> tuple[str, int]:
    """head + random words counting n_tokens in all (or the nearest count below, when no whole number of words
    and short fillers reach it exactly); -> (text, tokens as counted). A word may be several tokens: the number of
    words is searched (proportional guesses inside a shrinking bracket), then single letters fill the last gap."""
    if count is None:
        words = max(1, n_tokens - len(head.split()))
        return head + make_text(words, rng), len(head.split()) + words
    pool = rng.choices(WORDS, k=max(1, n_tokens) + 16)

    def text_of(k: int) -> str:
        while k > len(pool):
            pool.extend(rng.choices(WORDS, k=len(pool)))
        return head + " ".join(pool[:k])

    words = max(1, n_tokens - (await count(head) if head else 0))
    below: tuple[int, str] = (0, head)  # the longest text found under n_tokens, and its count
    lo, hi = 0, -1  # words known to count < n_tokens / > n_tokens (-1: none yet)
    for _ in range(EXACT_TRIES):
        text = text_of(words)
        got = await count(text)
        if got == n_tokens:
            return text, got
        if got < n_tokens:
            lo, below = max(lo, words), max(below, (got, text))
        else:
            hi = words if hi < 0 else min(hi, words)
        guess = max(lo + 1, round(words * n_tokens / max(1, got)))
        if hi >= 0:
            guess = min(guess, hi - 1)
        if guess <= lo or guess == words:
            break  # no whole number of words counts exactly n_tokens
        words = guess
    got, text = below
    for _ in range(EXACT_TRIES):  # close the gap with one-letter words (one token each in most vocabularies)
        if got >= n_tokens:
            break
        longer = text + " a" * (n_tokens - got)
        more = await count(longer)
        if more > n_tokens:
            longer, more = text + " a", await count(text + " a")
            if more > n_tokens:
                break
        text, got = longer, more
    return text, got


class Source:
    """Prompts of one level, drawn from a seeded generator: next() gives the next request's prompt."""

    def __init__(self, dataset: Dataset, rng: random.Random, count: Counter | None = None) -> None:
        self.dataset, self.rng, self.count = dataset, rng, count
        self.pairs = load_sharegpt(dataset.path) if dataset.name == "sharegpt" else []
        self.sent = 0
        self.prefix = ""

    async def next(self) -> Prompt:
        d = self.dataset
        self.sent += 1
        if d.name == "random":
            want, out = around(d.prompt_len, d.range_ratio, self.rng), around(d.output_len, d.range_ratio, self.rng)
            text, n = await exact_text(want, self.rng, self.count)
            return Prompt(text, n, out, self.count is not None)
        if d.name == "prefix":
            if (self.sent - 1) % max(1, d.prefix_group_size) == 0:  # a new group: a new shared prefix
                self.prefix, _ = await exact_text(d.prefix_len, self.rng, self.count)
                self.prefix += " "
            text, n = await exact_text(d.prompt_len, self.rng, self.count, head=self.prefix)
            return Prompt(text, n, d.output_len, self.count is not None)
        if d.name == "sharegpt":
            prompt, completion = self.pairs[self.rng.randrange(len(self.pairs))]
            n = await self.count(prompt) if self.count else len(prompt.split())
            out = d.output_len if d.fixed_output else max(1, len(completion.split()))
            if self.count and not d.fixed_output:
                out = max(1, await self.count(completion))
            return Prompt(prompt, max(1, n), out, self.count is not None)
        raise ValueError(f"dataset must be one of {', '.join(DATASETS)}, got {d.name!r}")
