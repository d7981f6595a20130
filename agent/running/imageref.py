"""A tag resolved to the digest every host will run: a host's answer is data, never the decision (issue 48).

`pin` and `watch` ask one host to pull the tag (the spark_image module, state=resolved). Its answer is checked here
on the controller, as exactly `name@sha256:<64 hex>` of the tag's own repository, then confirmed by a second source
before any host pulls it: the registry asked from the controller (the sha256 of the manifest it sends for the tag),
or, where the controller cannot ask it (no route, a login only a credential helper holds), another host of the
fleet. A disagreement, or no second source at all, is one line and exit 2 naming both answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agent.errors import UserError
from agent.escape import plain
from agent.hostside import docker, registry
from agent.running import playbooks as fleet
from agent.running import tasks

MAX_ANSWER = 512  # a pinned reference is under 300 characters; a longer answer is not one
MAX_SHOWN = 120


def shown(value: object) -> str:
    """A host's answer as a message may quote it: one line, bounded, its control characters visible as escapes."""
    text = value if isinstance(value, str) else f"<{type(value).__name__}>"
    return plain(repr(text[:MAX_SHOWN]) + ("..." if len(text) > MAX_SHOWN else ""))


def checked(tag: str, answer: object, source: str) -> str:
    """`answer` if it is exactly the pinned form of `tag`'s own repository; UserError otherwise (exit 2)."""
    if not isinstance(answer, str) or len(answer) > MAX_ANSWER or not docker.is_pinned(answer):
        raise UserError(
            f"{source} answered {shown(answer)} for {tag}: not name@sha256:<64 hex>; nothing pulled (check that "
            "host's docker)"
        )
    if not docker.same_repository(answer, tag):
        raise UserError(
            f"{source} answered {shown(answer)} for {tag}: another repository than the tag's; nothing pulled "
            "(that host is not to be trusted with the fleet's image)"
        )
    return answer


def answer_of(tag: str, host: str, inventory: str) -> object:
    """What `host` says `tag` resolves to (it pulls the tag), unchecked; UserError when it says nothing usable."""
    if not Path(inventory).is_file():
        raise UserError(f"inventory {inventory} not found; pass one with -i")
    result = fleet.run_playbook(tasks.RESOLVE.playbook, inventory, extravars={"spark_pin_tag": tag}, limit=host)
    if host in result.unreachable:
        raise UserError(f"{host}: unreachable ({plain(result.unreachable[host])[:200]}); check {inventory}")
    if host in result.failures:
        why = plain(result.failures[host].removeprefix(tasks.RESOLVE.name + ": "))[:300]
        raise UserError(f"{host}: cannot resolve {tag}: {why}")
    answer = result.results.get(host, {}).get(tasks.RESOLVE.name, {})
    if not isinstance(answer, dict) or "pinned" not in answer:
        reason = plain(next(iter(result.failures.values()), "no result"))[:200]
        raise UserError(f"host {host} did not resolve {tag} ({reason}); is {host} in {inventory}?")
    return answer["pinned"]


def on_registry(tag: str) -> tuple[str, str]:
    """(digest, "") as the tag's registry says it, asked from the controller; ("", why) when it cannot be asked."""
    name, _, label = tag.rpartition(":")
    if not name or "/" in label:  # no tag given: docker's default
        name, label = tag, "latest"
    try:
        return registry.tag_digest(name, label), ""
    except registry.RegistryError as exc:
        return "", plain(str(exc))[:200]


def resolve(tag: str, host: str, others: Sequence[str], inventory: str) -> str:
    """The pinned reference `host` answers for `tag`, checked and confirmed by a second source (the registry from
    the controller, else the first of `others` that answers); UserError (exit 2) naming both answers otherwise."""
    pinned = checked(tag, answer_of(tag, host, inventory), host)
    digest, why = on_registry(tag)
    source = "the registry (asked from the controller)"
    if not digest:
        if not others:
            raise UserError(
                f"{tag}: {host} answers {pinned}, and nothing can confirm it: the controller cannot ask the registry "
                f"({why}) and the fleet has no other host; give a second host (--limit) or let the controller reach "
                "the registry (docker login here)"
            )
        source = others[0]
        digest = checked(tag, answer_of(tag, source, inventory), source).partition("@")[2]
    if digest != pinned.partition("@")[2]:
        raise UserError(
            f"{tag}: {host} answers {pinned.partition('@')[2]}, {source} answers {digest}; nothing pulled. Run "
            "again once the tag has settled; if it stays, one of them is not to be trusted"
        )
    return pinned
