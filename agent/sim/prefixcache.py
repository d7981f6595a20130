"""The simulated prefix cache: vLLM's automatic prefix caching, by full blocks of prompt tokens.

A prompt's tokens are cut into blocks of `prefix_block_tokens`; each block is known by the hash of everything up to
its end (so a block only hits after the same whole prefix), as vLLM hashes its KV blocks. A request's cached tokens
are the leading full blocks already present; prefill then costs only the rest. The cache holds at most the KV
cache's tokens, least recently used out first. Like vLLM, a reset fails while running requests hold blocks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    def __init__(self, capacity_tokens: int, block_tokens: int, enabled: bool = True) -> None:
        self.block = max(1, block_tokens)
        self.capacity_blocks = max(1, capacity_tokens // self.block)
        self.enabled = enabled
        self.blocks: OrderedDict[int, None] = OrderedDict()
        self.queries = 0  # tokens looked up (vllm:prefix_cache_queries)
        self.hits = 0  # of which found (vllm:prefix_cache_hits)

    def admit(self, tokens: Sequence[str]) -> int:
        """Look a prompt up and keep its full blocks; -> the tokens that were already cached."""
        if not self.enabled:
            return 0
        self.queries += len(tokens)
        running = 0
        cached = 0
        missed = False
        for end in range(self.block, len(tokens) + 1, self.block):
            running = hash((running, tuple(tokens[end - self.block : end])))
            if not missed and running in self.blocks:
                self.blocks.move_to_end(running)
                cached = end
                continue
            missed = True
            self.blocks[running] = None
            if len(self.blocks) > self.capacity_blocks:
                self.blocks.popitem(last=False)
        # vLLM recomputes at least the last token, so a prompt never counts as wholly cached
        cached = min(cached, max(0, len(tokens) - 1))
        self.hits += cached
        return cached

    def reset(self, busy: bool) -> bool:
        """Empty the cache; False (nothing emptied) while requests are running, as vLLM answers then."""
        if busy:
            return False
        self.blocks.clear()
        return True
