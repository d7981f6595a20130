"""The `engine` test tier: the real CPU build of vLLM (see README.md)."""
