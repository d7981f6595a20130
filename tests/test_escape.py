"""Host text is shown as text everywhere: report.html (parsed: only our tags), report.md (rendered by a CommonMark
parser: no links, no HTML), the rich terminal table and progress bar (no markup, no control codes), compare."""

from __future__ import annotations

import dataclasses
import io
import json
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from rich.console import Console

from agent.reporting import compare, escape, htmlpage, markdown
from agent.results import tree as results
from agent.running import collect
from agent.running.progress import Progress
from tests.hostile import (
    ATTRIBUTE,
    HOSTILE,
    MARKDOWN,
    RICH,
    SCRIPT,
    TERMINAL,
    good_files,
    make_cell,
    run_json,
    write_tar,
)

pytestmark = pytest.mark.unit

ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4", "p", "ul", "li", "table"}
ALLOWED_TAGS |= {"tr", "th", "td", "pre", "code", "b", "img", "div", "script"}


def shown(text: str) -> str:
    """What a reader should see of a host string: itself, on one line."""
    return escape.plain(text)


# ---------------------------------------------------------------- the helpers


@pytest.mark.parametrize("text", HOSTILE + ["```", "a\\|b", "`", "x\\", "1. item", "- item", "=== "])
def test_markdown_text_renders_as_itself(text):
    md = MarkdownIt("commonmark").enable("table")
    rendered = md.render(escape.md(text))
    tags = Tags()
    tags.feed(rendered)
    assert tags.names <= {"p"}, (text, rendered)
    assert tags.text.strip() == shown(text).strip()


@pytest.mark.parametrize("text", HOSTILE + ["``` x ```", "` lead", "trail `", " ", " both "])
def test_markdown_code_span_holds_the_text(text):
    rendered = MarkdownIt("commonmark").render(f"x {escape.md_code(text)} y")
    tags = Tags()
    tags.feed(rendered)
    assert tags.names == {"p", "code"}
    assert tags.code == [shown(text)]


def test_markdown_fence_cannot_be_closed_from_inside():
    body = "echo a\n```\n<script>x</script>\n````"
    rendered = MarkdownIt("commonmark").render("\n".join(escape.md_fence(body, "sh")) + "\nafter")
    tags = Tags()
    tags.feed(rendered)
    assert tags.names == {"pre", "code", "p"} and tags.code == [body + "\n"]


@pytest.mark.parametrize("text", HOSTILE)
def test_html_and_rich_helpers(text):
    tags = Tags()
    tags.feed(f'<p title="{escape.html(text)}">{escape.html(text)}</p>')
    assert tags.names == {"p"} and tags.text == shown(text) and tags.attrs == [("title", shown(text))]
    console = Console(record=True, width=400, file=io.StringIO(), color_system=None)
    console.print(escape.rich(text))
    assert console.export_text().rstrip("\n") == shown(text).rstrip()


# ---------------------------------------------------------------- a report over host-tainted cells


@pytest.fixture
def tainted(tmp_path: Path) -> Path:
    """Two cells written by collect from host archives full of hostile strings, on a host whose GPU name is one."""
    root = tmp_path / "results"
    facts = {"gpu_name": ATTRIBUTE + SCRIPT, "fingerprint": "0a1b2c3d"}
    failed = make_cell(cell_id="aaaaaaaaaaaa")
    failed.config = dataclasses.replace(failed.config, moe_backend="cutlass")
    serve = {"ready": False, "failure": {"class": "other", "evidence": HOSTILE, "root_cause": SCRIPT}}
    write_tar(
        collect.incoming_tar(root, failed.sweep, failed.host, failed.id), {"serve.json": json.dumps(serve).encode()}
    )
    assert collect.finalize_cell(root, failed, facts, time.time() - 2, time.time()).status == "failed"
    oom = make_cell(cell_id="cccccccccccc")  # evidence taken from server.log lines by the log parser
    oom.config = dataclasses.replace(oom.config, moe_backend="flashinfer_cutlass")
    log = f"ERROR 12-01 00:00:02 [core.py:1] torch.OutOfMemoryError: CUDA out of memory {SCRIPT} {RICH} {MARKDOWN}\n"
    files = {"server.log": log.encode(), "serve.json": b'{"ready": false}', "launch.txt": (ATTRIBUTE + SCRIPT).encode()}
    write_tar(collect.incoming_tar(root, oom.sweep, oom.host, oom.id), files)
    record = collect.finalize_cell(root, oom, facts, time.time() - 2, time.time())
    assert record.failure_class == "oom" and SCRIPT in record.failure_evidence[0]
    done = make_cell(cell_id="bbbbbbbbbbbb")
    files = dict(good_files(), **{"c001-r2.json": run_json(repeat=2, ok=False, error=MARKDOWN + RICH + TERMINAL)})
    files["launch.txt"] = (SCRIPT + ATTRIBUTE).encode()
    done.config = dataclasses.replace(done.config, repeats=2)
    write_tar(collect.incoming_tar(root, done.sweep, done.host, done.id), files)
    assert collect.finalize_cell(root, done, facts, time.time() - 2, time.time()).status == "done"
    return root


def test_report_html_holds_only_our_tags(tainted):
    written = markdown.write_report(tainted)
    page = next(p for p in written if p.name == "report.html").read_text()
    tags = Tags()
    tags.feed(page)
    assert tags.names <= ALLOWED_TAGS, tags.names - ALLOWED_TAGS
    assert all(name in ("alt", "src", "charset", "class", "lang", "name", "content") for name, _ in tags.attrs)
    # the one script is ours (sortable tables), verbatim: nothing from a host is inside it
    assert page.count("<script") == 1 and f"<script>{htmlpage.SORT_SCRIPT}</script>" in page
    assert all(value.startswith("data:image/png;base64,") for name, value in tags.attrs if name == "src")
    for text in (SCRIPT, shown(MARKDOWN), shown(RICH), ATTRIBUTE):
        assert text in tags.text, text  # shown as itself, as text
    assert SCRIPT in tags.code and shown(MARKDOWN) in tags.code  # evidence lines: code spans, verbatim
    assert any(SCRIPT in c and RICH in c for c in tags.code)  # the log line the parser took as evidence


def test_report_md_renders_without_links_or_html(tainted):
    markdown.write_report(tainted)
    text = (tainted / "report.md").read_text()
    rendered = MarkdownIt("commonmark").enable("table").render(text)
    tags = Tags()
    tags.feed(rendered)
    assert "a" not in tags.names and "script" not in tags.names and "img" in tags.names  # the plots only
    assert all(value in markdown.PLOTS for name, value in tags.attrs if name == "src")
    assert "\x1b" not in text and "\x07" not in text
    assert SCRIPT in tags.text and shown(MARKDOWN) in tags.text


def test_the_medians_table_keeps_its_columns(tainted):
    """A pipe in a host string does not add a column: every row has as many cells as the header."""
    markdown.write_report(tainted)
    page = (tainted / "report.html").read_text()
    start = page.index("<table>")
    table = page[start : page.index("</table>", start)]
    rows = table.split("<tr")[1:]
    assert {r.count("<td") + r.count("<th") for r in rows} == {len(markdown.MEDIAN_COLUMNS)}


def test_terminal_table_shows_markup_as_text(tainted):
    cells = results.load_cells(tainted)
    for cell in cells:
        cell["facts"]["gpu_name"] = RICH
        cell["config"]["checkpoint"] = RICH
    console = Console(record=True, width=300, file=io.StringIO(), color_system=None)
    console.print(markdown.terminal_table(cells))
    out = console.export_text()
    assert "[bold red]fake[/]" in out and "\x1b" not in out


def test_progress_bar_shows_markup_as_text():
    console = Console(record=True, width=300, file=io.StringIO(), color_system=None, force_terminal=True)
    progress = Progress(console=console)
    cell = make_cell()
    cell.config = dataclasses.replace(cell.config, checkpoint=RICH)
    progress.start({"spark-a": [cell]})
    progress.cell_started("spark-a", cell)
    progress.host_failed("spark-a", RICH + TERMINAL)
    progress.stop()
    out = console.export_text()
    assert "[bold red]fake[/]" in out and "\x1b[2J" not in out


def test_compare_markdown_escapes_labels(tainted):
    cells = results.load_cells(tainted)
    for cell in cells:
        cell["config"]["checkpoint"] = MARKDOWN
    text = compare.render_markdown(compare.compare(cells, cells), SCRIPT, "b")
    tags = Tags()
    tags.feed(MarkdownIt("commonmark").enable("table").render(text))
    assert not tags.names & {"a", "script", "img"}
    assert SCRIPT in tags.text


def test_html_page_understands_escapes_and_code_spans():
    out = htmlpage.markdown_to_html("| a \\| b | ``x ` y`` |\n|---|---|\n| **bold** | \\*\\*not\\*\\* |", {})
    assert out.count("<td>") == 2 and "<th>a | b</th>" in out and "<code>x ` y</code>" in out
    assert "<td><b>bold</b></td>" in out and "<td>**not**</td>" in out


# ---------------------------------------------------------------- parsing what we produced


class Tags(HTMLParser):
    """Tag names, attributes, text and code spans of an HTML page (entities decoded)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.names: set[str] = set()
        self.attrs: list[tuple[str, str]] = []
        self.text = ""
        self.code: list[str] = []
        self._in_code = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.names.add(tag)
        self.attrs += [(k, v or "") for k, v in attrs]
        if tag == "code":
            self._in_code = True
            self.code.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "code":
            self._in_code = False

    def handle_data(self, data: str) -> None:
        self.text += data
        if self._in_code:
            self.code[-1] += data


@pytest.mark.parametrize(
    ("value", "cell"),
    [
        ('=HYPERLINK("http://evil")', '\'=HYPERLINK("http://evil")'),
        ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
        ("@SUM(1)", "'@SUM(1)"),
        ("-2+3", "'-2+3"),
        ("\tx", "'\tx"),
        ("-1.5", "-1.5"),
        ("marlin", "marlin"),
        (3.0, 3.0),
    ],
)
def test_csv_cells_never_start_a_formula(value, cell):
    assert escape.csv_cell(value) == cell


def test_export_csv_escapes_host_text(tainted):
    from agent.reporting import export

    cells = results.load_cells(tainted)
    for cell in cells:
        cell["facts"]["gpu_name"] = '=HYPERLINK("http://evil")'
    text = export.to_csv(export.rows(cells))
    assert "'=HYPERLINK" in text and ",=HYPERLINK" not in text and ',"=HYPERLINK' not in text


def test_check_table_shows_host_facts_as_text():
    from rich.table import Table

    from agent.commands import check

    facts = {"gpu_name": RICH, "driver": TERMINAL, "notes": [SCRIPT]}
    table = Table()
    for _ in range(8):
        table.add_column()
    table.add_row(*check.row("spark-a", facts, check.blockers({"spark_runtime": "process"}, facts, {})))
    console = Console(record=True, width=400, file=io.StringIO(), color_system=None)
    console.print(table)
    out = console.export_text()
    assert "[bold red]fake[/]" in out and SCRIPT in out and "\x1b" not in out


def test_console_log_lines_carry_no_control_codes(capsys):
    import structlog

    from agent import logs

    logs.configure("console")
    structlog.get_logger("t").error("host_stopped", host="spark-a", error=TERMINAL, holder={"user": TERMINAL})
    err = capsys.readouterr().err
    assert "red" in err and "second line" in err and "\x1b" not in err and "\x07" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.attack("escape: bidi and zero-width characters from a host pass into reports and tables")
def test_invisible_characters_never_reach_a_reader():
    for char in "\u202e\u202a\u2066\u2069\u200e\u200f\u061c\u200b\u200d\u2060\ufeff":
        text = f"a{char}b"
        shown = [escape.plain(text), escape.html(text), escape.md(text), "".join(escape.md_fence(text))]
        assert all(char not in s for s in shown), (hex(ord(char)), shown)
