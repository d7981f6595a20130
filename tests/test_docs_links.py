"""The docs a newcomer reads hold together: every relative link resolves, the two front pages stay short, and no
tracked file names a path of a developer's machine."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
# Sizes in bytes (1 KB = 1000 bytes, the stricter reading).
LIMITS = {"README.md": 15_000, "ARCHITECTURE.md": 30_000}

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def doc_pages() -> list[Path]:
    pages = [REPO / "README.md", REPO / "ARCHITECTURE.md", REPO / "bench" / "README.md"]
    return pages + sorted((REPO / "docs").glob("*.md"))


def prose(text: str) -> str:
    """The text outside code blocks and code spans: a link written as an example in code is not a link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...: not ours to check
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(root)}: ({target})"
        if not dest.exists():
            broken.append(f"{where}: no such file")
        elif not dest.is_relative_to(root):
            broken.append(f"{where}: outside the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{where}: no heading with that anchor")
    return broken


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_sees_broken_links(tmp_path: Path) -> None:
    """The checker itself: a missing file, a missing anchor and a link in code are told apart."""
    (tmp_path / "other.md").write_text("# A title, with `code`\n## Twice\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-title-with-code) [dup](other.md#twice-1) [web](https://example.org/x)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) `[in code](missing-too.md)`\n"
        "```\n[in a block](missing-three.md)\n```\n"
    )
    assert broken_links(page, root=tmp_path) == [
        "page.md: (missing.md): no such file",
        "page.md: (other.md#nope): no heading with that anchor",
    ]


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_front_pages_stay_short(name: str) -> None:
    size = len((REPO / name).read_bytes())
    assert size <= LIMITS[name], f"{name} is {size} bytes, over {LIMITS[name]}: move detail into docs/ or bench/"


# A developer machine's paths. Allowed: the two cache folders the serving images' root user gets mounted (product
# constants in hostside/serving.py and hostside/warmcache.py), and the DGX OS default user on a Spark (the example
# inventory). The patterns are spelt so that this file does not match them.
DEV_PATH = re.compile(
    r"/wor[k]/[\w.-]|/roo[t]/(?!\.cache/(?:huggingface|spark-agent)\b)[\w.~-]|/hom[e]/(?!nvidia/)[\w.-]+/"
)
# Third-party text quoted verbatim as evidence, each with its source: public logs and launch scripts.
QUOTED = ("tests/data/logs/public-fragments/", "tests/data/startup/", "tests/data/launches/")


def test_no_tracked_file_names_a_developer_machine_path() -> None:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    offenders = []
    for raw in filter(None, files):
        name = raw.decode()
        path = REPO / name
        if name.startswith(QUOTED) or not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:  # binary
            continue
        for number, line in enumerate(data.decode(errors="replace").splitlines(), 1):
            offenders += [f"{name}:{number}: {m.group(0)}" for m in DEV_PATH.finditer(line)]
    assert offenders == [], "paths of a developer's machine:\n" + "\n".join(offenders)


CITED_DOC = re.compile(r"(?<![\w/.-])((?:docs/[\w.-]+|bench/README)\.md)")


def test_the_docs_the_code_cites_exist() -> None:
    """A comment or message that sends the reader to a page under docs/ (or bench/README.md) names a page that exists."""
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    missing = []
    for name in files:
        if name.startswith(QUOTED) or not name.endswith((".py", ".md", ".toml", ".yml", ".yaml", ".sh", ".cfg")):
            continue
        for cited in set(CITED_DOC.findall((REPO / name).read_text(errors="replace"))):
            if not (REPO / cited).is_file():
                missing.append(f"{name}: {cited}")
    assert missing == []
