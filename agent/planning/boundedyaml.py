"""YAML read in bounded time and memory: the one loader for every YAML file a user hands us (launch files for
`lint`, inventories with their group_vars and host_vars, before Ansible sees them).

A billion-laughs bomb is a small text whose aliases share nodes: composing it is cheap, walking it is not. While
composing, the loader refuses more than MAX_ALIASES aliases, nesting deeper than MAX_DEPTH, and a document whose size
counted through its aliases passes MAX_NODES. A refusal is a YamlBomb carrying the 0-based line.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_NODES = 100_000  # a small file may become a huge tree through aliases: its size counted through them, at most
MAX_ALIASES = 1_000  # a compose file reuses a block a few times (`<<: *defaults`); a bomb needs thousands
MAX_DEPTH = 64  # a manifest or an inventory is a few levels deep; deeper is an attack on the recursive composer


class YamlBomb(Exception):
    def __init__(self, why: str, line: int) -> None:
        super().__init__(why)
        self.why, self.line = why, line


class BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses, while composing, what makes a small text a huge tree (see the module doc)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                raise YamlBomb(f"more than {MAX_ALIASES} YAML aliases", self.peek_event().start_mark.line)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlBomb(f"YAML nested deeper than {MAX_DEPTH}", self.peek_event().start_mark.line)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self) -> Any:
        node = super().compose_document()
        if node is not None and expanded_size(node) > MAX_NODES:
            raise YamlBomb(f"YAML that expands past {MAX_NODES} nodes through its aliases", node.start_mark.line)
        return node


class AnyTagLoader(BoundedLoader):
    """Also accepts Ansible's tags (!vault, !unsafe...) as null: where only the shape counts."""


AnyTagLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def load_all(text: str, *, any_tag: bool = False) -> list[Any]:
    """The documents of a text; YamlBomb, or yaml.YAMLError for text that is no YAML."""
    return list(yaml.load_all(text, Loader=AnyTagLoader if any_tag else BoundedLoader))


def expanded_size(root: Any) -> int:
    """Nodes of a composed YAML document counted through its aliases (a shared node counts at each use), stopping
    early past MAX_NODES; a node that contains itself counts as too big. Linear in the distinct nodes."""
    sizes: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            sizes[key] = min(MAX_NODES + 1, 1 + sum(sizes.get(id(c), MAX_NODES + 1) for c in children))
            continue
        if key in sizes:
            continue
        sizes[key] = MAX_NODES + 1  # in progress: met again below itself, it is a cycle
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []
