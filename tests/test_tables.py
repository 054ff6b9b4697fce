"""Issue 47 item 2: every Markdown table the site shows renders as a table.

A `|` inside a cell (e.g. `|A|` in a generated header) ends the cell: the row gets a column too many, and
a header row that no longer matches its separator makes Python-Markdown print the whole table as a
paragraph of pipes. `mkdocs build --strict` says nothing about it, so two checks here:

- every page of docs/ (its `--8<--` includes expanded, i.e. the committed results/*.md tables too) is
  rendered with the Markdown extensions of mkdocs.yml, and no paragraph may be a table left as text;
- every table block of the pages and of the generated results/**/*.md files has the same number of
  cells (unescaped `|`) in every row as in its header.
"""

from __future__ import annotations

import re
from pathlib import Path

import markdown
import pytest

from oar_rl.io import markdown_cell

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
GENERATED = sorted((ROOT / "results").rglob("*.md"))
PIPE = re.compile(r"(?<!\\)\|")
CODE = re.compile(r"`[^`\n]*`")


def _extensions() -> tuple[list, dict]:
    """The `markdown_extensions` of mkdocs.yml as Python-Markdown takes them (read by MkDocs' own loader:
    the file uses its `!ENV` tag)."""
    from mkdocs.utils.yaml import yaml_load

    names, configs = [], {}
    for item in yaml_load((ROOT / "mkdocs.yml").read_text())["markdown_extensions"]:
        name, conf = next(iter(item.items())) if isinstance(item, dict) else (item, None)
        names.append(name)
        if conf:
            configs[name] = {**conf, "base_path": [str(ROOT)]} if name == "pymdownx.snippets" else conf
    return names, configs


def render(page: Path) -> str:
    names, configs = _extensions()
    return markdown.Markdown(extensions=names, extension_configs=configs).convert(page.read_text())


def table_blocks(text: str) -> list[list[str]]:
    """The pipe-table blocks of `text` (outside fenced code): runs of lines starting with `|` whose second
    line is a separator row."""
    blocks, run, fenced = [], [], False
    for line in [*text.splitlines(), ""]:
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if not fenced and line.lstrip().startswith("|"):
            run.append(line.strip())
            continue
        if len(run) >= 2 and re.fullmatch(r"\|?(\s*:?-+:?\s*\|)+\s*:?-*:?\s*", run[1]):
            blocks.append(run)
        run = []
    return blocks


def cells(row: str) -> int:
    """Cells of a table row: its unescaped `|` outside inline code, less the outer ones."""
    return len(PIPE.findall(CODE.sub("", row))) - 1


def test_markdown_cell_escapes_what_would_end_a_cell():
    assert markdown_cell("top-10% |A| mass") == r"top-10% \|A\| mass"
    assert markdown_cell("a\nb") == "a b"
    table = f"| arm | {markdown_cell('|A| share')} |\n|---|---:|\n| x | 1 |"
    html = markdown.markdown(table, extensions=["tables"])
    assert "<table>" in html and "|A| share</th>" in html


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_table_of_a_page_renders_as_text(page):
    html = render(page)
    for para in re.findall(r"<p>(.*?)</p>", html, flags=re.S):
        lines = [x.strip() for x in para.splitlines() if x.strip()]
        assert not (len(lines) >= 2 and all(x.startswith("|") for x in lines[:2])), (
            f"{page.relative_to(ROOT)}: a Markdown table rendered as a paragraph: {para[:300]}"
        )
    assert html.count("<table") >= len(table_blocks(page.read_text()))


@pytest.mark.parametrize("path", [*PAGES, *GENERATED], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_row_of_a_table_has_its_headers_cells(path):
    for block in table_blocks(path.read_text()):
        want = cells(block[0])
        bad = [row for row in block[1:] if cells(row) != want]
        assert not bad, f"{path.relative_to(ROOT)}: {block[0]!r}: {want} cells; these rows not: {bad[:3]}"


def test_the_screen_reports_diagnostics_table_renders_as_a_table():
    from oar_rl.study.screen_report import DIAGNOSTIC_LABELS, diagnostics_markdown

    row = {"arm": "oar-g", "grad_norm_ratio": 1.0, **{k: 0.5 for k, _ in DIAGNOSTIC_LABELS}}
    html = markdown.markdown(diagnostics_markdown([row]), extensions=["tables"])
    assert "<table>" in html and len(re.findall(r"<th[ >]", html)) == len(DIAGNOSTIC_LABELS) + 2
