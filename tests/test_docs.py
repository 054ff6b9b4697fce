"""The docs cannot rot: README size and links, generated reference pages, every documented command line.

- README.md stays a front door (at most 12 KB) and its relative links point at files that exist.
- The generated reference pages (`docs/gen_ref.py`) equal what the code gives now.
- Every `oar-rl ...`, `python -m oar_rl.<module> ...`, `python -m experiments.<name> ...` and
  `accelerate launch ... -m oar_rl.<module> ...` line in a shell or console code block of README.md,
  docs/**/*.md and experiments/**/README.md parses with the command's real parser (nothing runs). `make`
  lines are not parsed.

The docs site itself is built by `make test` (`mkdocs build --strict`: broken links and anchors fail).
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_LIMIT = 12 * 1024

_spec = importlib.util.spec_from_file_location("gen_ref", ROOT / "docs" / "gen_ref.py")
gen_ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_ref)

SHELL_LANGS = {"bash", "sh", "shell", "console", "shell-session"}


def doc_files() -> list[Path]:
    return [
        README,
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "experiments").rglob("README.md")),
    ]


def code_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block, indented ones (inside lists) included."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.groups()
        body, i = [], i + 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            line = lines[i]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            i += 1
        out.append((lang.lower(), "\n".join(body)))
        i += 1
    return out


def logical_lines(lang: str, body: str) -> list[str]:
    """The shell lines of a block, `\\` continuations joined; in console blocks only `$ ` lines."""
    out: list[str] = []
    pending: str | None = None
    for raw in body.splitlines():
        if pending is None:
            if lang in {"console", "shell-session"}:
                if not raw.startswith("$ "):
                    continue
                raw = raw[2:]
            pending = ""
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        out.append(pending + raw)
        pending = None
    if pending:
        out.append(pending)
    return out


def commands(line: str, env: dict[str, str]) -> list[list[str]]:
    """The simple commands of one shell line (split at `&&`, `||`, `;`, `|`), `$VAR`s of `env` expanded.

    A leading `VAR=value` word is recorded in `env` (the blocks set a recipe once and reuse it).
    """
    words = shlex.split(line, comments=True)
    out, cmd = [], []
    for w in [*words, ";"]:
        if w in {"&&", "||", ";", "|"}:
            while cmd and re.fullmatch(r"[A-Za-z_]\w*=\S*", cmd[0]):
                name, value = cmd.pop(0).split("=", 1)
                env[name] = value
            if cmd:
                out.append(cmd)
            cmd = []
            continue
        cmd.append(re.sub(r"\$\{?([A-Za-z_]\w*)\}?", lambda m: env.get(m.group(1), m.group(0)), w))
    return out


def _is_ours(cmd: list[str]) -> bool:
    if Path(cmd[0]).name == "oar-rl":
        return True
    return "-m" in cmd[:-1] and cmd[cmd.index("-m") + 1].split(".")[0] in ("oar_rl", "experiments")


def documented_commands() -> list[tuple[str, list[str]]]:
    """(where, argv) of every oar-rl command line in README.md and docs/**/*.md."""
    found = []
    for path in doc_files():
        for lang, body in code_blocks(path.read_text()):
            if lang not in SHELL_LANGS:
                continue
            env: dict[str, str] = {}
            for line in logical_lines(lang, body):
                for cmd in commands(line, env):
                    if _is_ours(cmd):
                        found.append((f"{path.relative_to(ROOT)}: {' '.join(cmd)[:100]}", cmd))
    return found


def parse_documented(cmd: list[str]) -> None:
    """Parse one documented command line with its real parser, after loading its --credit-module files
    as the commands do (unloaded after); AssertionError says what is wrong."""
    from oar_rl import credits
    from oar_rl.credit_modules import LOADED, load_credit_modules, specs_in_argv

    before = set(LOADED)
    try:
        load_credit_modules(specs_in_argv(cmd))
        _parse_documented(cmd)
    finally:
        for key in set(LOADED) - before:
            for name in LOADED.pop(key).rules:
                credits.unregister_credit(name)


def _parse_documented(cmd: list[str]) -> None:
    from oar_rl.cli import COMMANDS

    if Path(cmd[0]).name == "oar-rl":
        rest = cmd[1:]
        if not rest or rest[0] in {"-h", "--help", "-V", "--version"}:
            return
        assert rest[0] in COMMANDS, f"unknown command {rest[0]!r}; valid: {', '.join(COMMANDS)}"
        module, argv = COMMANDS[rest[0]][0], rest[1:]
    else:
        i = cmd.index("-m")
        module, argv = cmd[i + 1], cmd[i + 2 :]
        if module == "oar_rl.cli":  # `python -m oar_rl.cli <command> ...` is `oar-rl <command> ...`
            assert argv and argv[0] in COMMANDS, f"unknown command {argv[:1]}; valid: {', '.join(COMMANDS)}"
            module, argv = COMMANDS[argv[0]][0], argv[1:]
        elif hasattr(importlib.import_module(module), "__path__"):  # a package: `python -m` runs __main__
            module += ".__main__"  # (an experiment's __main__ defines or imports main)
    parser = gen_ref.module_parser(module)
    argv = list(argv)
    if "--config" in argv:  # TRL's parser: the recipe's keys become defaults (as parse_args_and_config)
        import yaml

        i = argv.index("--config")
        recipe = ROOT / argv[i + 1]
        del argv[i : i + 2]
        assert recipe.is_file(), f"--config {recipe.relative_to(ROOT)}: no such file"
        config = yaml.safe_load(recipe.read_text())
        config.pop("env", None)
        unknown_keys = parser.set_defaults_with_config(**config)
        assert not unknown_keys, f"{recipe.name}: keys no flag takes: {unknown_keys[::2]}"
    try:
        _, unknown = parser.parse_known_args(argv)
    except SystemExit as exc:
        assert exc.code == 0, f"the parser rejects it (exit {exc.code}); see the captured stderr"
        return
    assert not unknown, f"unrecognised arguments: {unknown}"


COMMANDS_FOUND = documented_commands()


def test_the_docs_document_commands():
    where = {w.split(":")[0] for w, _ in COMMANDS_FOUND}
    assert len(COMMANDS_FOUND) >= 20 and "README.md" in where, (len(COMMANDS_FOUND), where)


@pytest.mark.parametrize("cmd", [c for _, c in COMMANDS_FOUND], ids=[w for w, _ in COMMANDS_FOUND])
def test_documented_command_parses(cmd, monkeypatch):
    monkeypatch.chdir(ROOT)
    parse_documented(cmd)


def test_a_wrong_flag_in_the_docs_fails():
    with pytest.raises(AssertionError):
        parse_documented(["oar-rl", "eval", "--model", "default", "--no-such-flag", "1"])
    with pytest.raises(AssertionError):
        parse_documented(["oar-rl", "train", "--config", "configs/tiny-cpu.yaml", "--credit", "oar-x"])
    parse_documented(["oar-rl", "train", "--config", "configs/tiny-cpu.yaml", "--credit", "oar-p"])


def test_line_splitting():
    body = (
        "R=configs/a.yaml   # recipe\n"
        "accelerate launch -m oar_rl.train --config $R \\\n"
        "    --x 1 && oar-rl eval --n 2\n"
    )
    lines = logical_lines("bash", body)
    env: dict[str, str] = {}
    cmds = [c for line in lines for c in commands(line, env)]
    assert cmds == [
        ["accelerate", "launch", "-m", "oar_rl.train", "--config", "configs/a.yaml", "--x", "1"],
        ["oar-rl", "eval", "--n", "2"],
    ]
    console = "$ oar-rl demo \\\n  --out x\noutput line\n"
    assert logical_lines("console", console) == ["oar-rl demo    --out x"]


def test_readme_is_a_front_door():
    size = len(README.read_bytes())
    assert size <= README_LIMIT, (
        f"README.md is {size} bytes; keep it <= {README_LIMIT} (long-form goes in docs/)"
    )


def test_readme_relative_links_exist():
    text = README.read_text()
    missing = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (ROOT / target.split("#")[0]).exists():
            missing.append(target)
    assert missing == []


def test_generated_reference_pages_are_current():
    stale = gen_ref.stale()
    assert stale == [], f"out of date: {stale}; run `python docs/gen_ref.py` and commit the pages"


def test_the_cli_reference_covers_every_command():
    from oar_rl.cli import COMMANDS

    page = (ROOT / "docs" / "reference" / "cli.md").read_text()
    for name in COMMANDS:
        assert f"## oar-rl {name}\n" in page


# ----------------------------------------------------------------------------------------------------
# The pages speak of the project, its runs and its machines: no working notes
# ----------------------------------------------------------------------------------------------------
NOTE_PAGES = [README, *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "results").rglob("README.md"))]
WORKING_NOTES = {
    "a time of day": r"\b(?:[01]?\d|2[0-3]):[0-5]\d\b(?!:)|\b(?:morning|afternoon|evening|tonight)\b",
    "other people's jobs": r"\bengineers?\b|\bcolleagues?\b|\bother (?:people|helpers)\b",
    "who ran what": r"\bthe lead\b|\blead's\b|\bsessions?\b|\bmy (?:run|job|machine)s?\b",
    "an unlinked issue number": r"\b(?:issues?|PR|pull request) #?\d+",
}
PENDING_NOTES: dict[str, tuple[str, ...]] = {}
"""Pages exempt while rewritten in a change of their own: () the whole page, else the phrases named."""


def prose(text: str) -> str:
    """`text` without its fenced code blocks (a console transcript's `00:12<00:00` is not a note), its
    HTML comments, and the text of links to an absolute URL (a linked issue is allowed)."""
    out, fence = [], None
    for line in text.splitlines():
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        out.append(line)
    body = re.sub(r"<!--.*?-->", " ", "\n".join(out), flags=re.S)
    return re.sub(r"\[[^\]]*\]\(https?://[^)]*\)", "[link]", body)


def working_notes(text: str, tolerated: tuple[str, ...] = ()) -> list[str]:
    found = []
    for kind, pattern in WORKING_NOTES.items():
        for m in re.finditer(pattern, prose(text), flags=re.I):
            if any(m.group(0).lower() == t.lower() for t in tolerated):
                continue
            found.append(f"{kind}: {m.group(0)!r}")
    return found


@pytest.mark.parametrize("page", NOTE_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_hold_no_working_notes(page):
    """No time of day, no other people's jobs, no "the lead" or a session, no issue number without a link
    (the tracker is not public: say what changed instead)."""
    rel = str(page.relative_to(ROOT))
    tolerated = PENDING_NOTES.get(rel)
    if tolerated == ():
        pytest.skip(f"{rel} is rewritten in a change of its own")
    found = working_notes(page.read_text(encoding="utf-8"), tolerated or ())
    assert found == [], f"{rel}: {found}"


def test_working_notes_are_found():
    notes = working_notes(
        "The 11:03 run, made in the morning while three other engineers' jobs ran, is the lead's; issue 35 "
        "fixed it, [issue 36](https://example.org/36) did not.\n```\n100%|██| 1/1 [00:12<00:00]\n```"
    )
    kinds = [n.split(":")[0] for n in notes]
    assert kinds == ["a time of day", "a time of day", "other people's jobs", "who ran what",
                     "an unlinked issue number"], notes  # fmt: skip
    assert working_notes("Eq. 7–8, results/x.md:5:, 2026-11-28, 1:1 pairs, 3.16× (2228 s)") == []


STATUS_BOX = re.compile(r'^(!!!|\?\?\?\+?) \w+ "(.*)"', re.M)


def status_boxes(text: str) -> tuple[list[str], list[str]]:
    """(the current status boxes, the superseded ones) of a page: admonitions titled "Status (date)…";
    a superseded one is collapsed (`???`) and titled "Superseded on <date> …"."""
    current, superseded = [], []
    for kind, title in STATUS_BOX.findall(text):
        if title.startswith("Status"):
            current.append(title)
        elif title.startswith("Superseded"):
            assert kind == "???" and re.match(r"Superseded on \d{4}-\d{2}-\d{2}\b", title), title
            superseded.append(title)
    return current, superseded


DOC_PAGES = sorted((ROOT / "docs").rglob("*.md"))


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_one_status_per_page(page):
    """A page states one status; one it replaced is collapsed and marked superseded, with its date."""
    current, _ = status_boxes(page.read_text(encoding="utf-8"))
    assert len(current) <= 1, f"{page.relative_to(ROOT)} has {len(current)} status boxes: {current}"


# ----------------------------------------------------------------------------------------------------
# Code lines fit the content column at 1280 px (tests/test_pages.py measures the pages it covers)
# ----------------------------------------------------------------------------------------------------
CODE_COLUMNS = 80
"""Monospace characters a code block of the site shows at 1280 px (80.4 measured in Chromium with the
site's font stack); a longer line is broken by hand, at a flag or before a comment."""
CODE_PENDING: tuple[str, ...] = ()
"""Pages rewritten in changes of their own (see PENDING_NOTES)."""


def long_code_lines(text: str) -> list[str]:
    """The lines of `text`'s code blocks longer than `CODE_COLUMNS`; in a console block only the commands
    (`$ ` lines and their continuations), not the program's output."""
    found = []
    for lang, body in code_blocks(text):
        command = False
        for line in body.splitlines():
            if lang in {"console", "shell-session"}:
                command = line.startswith("$ ") or command
                if command and len(line) > CODE_COLUMNS:
                    found.append(line)
                command = command and line.rstrip().endswith("\\")
            elif len(line) > CODE_COLUMNS:
                found.append(line)
    return found


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_lines_fit_the_column(page):
    rel = str(page.relative_to(ROOT))
    if rel in CODE_PENDING or rel.startswith("docs/reference/"):
        pytest.skip(f"{rel}: rewritten in a change of its own, or generated")
    long = long_code_lines(page.read_text(encoding="utf-8"))
    assert long == [], f"{rel}: code lines over {CODE_COLUMNS} characters, break them by hand: {long}"


def test_long_code_lines_are_found():
    text = "```console\n$ oar-rl a \\\n    " + "x" * 90 + "\n" + "out " * 30 + "\n```\n```python\n" + "y" * 81
    assert long_code_lines(text) == ["    " + "x" * 90, "y" * 81]


# ----------------------------------------------------------------------------------------------------
# The glossary: a term is linked to its definition where a page first uses it
# ----------------------------------------------------------------------------------------------------
GLOSSARY = ROOT / "docs" / "glossary.md"
TERMS = {  # anchor in docs/glossary.md -> how the pages write the term
    "chosen-rates": r"\bchosen rates?\b",
    "d1d3": r"\bD[123]\b",
    "ess-ratio": r"\bESS ratio\b",
    "grpo-compute": r"\bgrpo-compute\b",
    "off-greedy": r"\boff-greedy\b",
    "pivot": r"\bpivots?\b",
    "scored-set": r"\bscored sets?\b",
    "seam": r"\bseam\b",
    "top-10-mass": r"\btop-10% (?:advantage )?mass\b",
    "update-sweep": r"\bupdate sweep\b",
    "v2-study": r"\bv2 study\b",
    "warm-start": r"\bwarm[- ]start\b",
}
GLOSSARY_EXEMPT = {
    "docs/glossary.md": "the definitions themselves",
    "docs/results/leaderboard.md": "generated (experiments/leaderboard); its terms sit in HTML tables",
}


def _blanked(text: str) -> str:
    """`text` with what cannot hold a glossary link replaced by spaces (offsets kept): fenced code, HTML
    comments, headings, admonition titles, link targets, and inline code other than a bare term."""
    out, fence = [], None
    for line in text.splitlines(keepends=True):
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence is None and m:
            fence = m.group(1)
        elif fence is not None and line.strip().startswith(fence):
            fence = None
            line = " " * (len(line) - 1) + "\n"
        if fence is not None or re.match(r"^\s*(#|!!!|\?\?\?|--8<--)", line):
            line = re.sub(r"[^\n]", " ", line)
        out.append(line)
    body = "".join(out)
    body = re.sub(r"<!--.*?-->", _spaces, body, flags=re.S)
    body = re.sub(r"\]\([^)]*\)", lambda m: "]" + " " * (len(m.group(0)) - 1), body)
    return re.sub(
        r"`([^`\n]*)`", lambda m: m.group(0) if re.fullmatch(r"[\w-]+", m.group(1)) else _spaces(m), body
    )


def _spaces(m: re.Match) -> str:
    return " " * len(m.group(0))


LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\([^)\s]*\)")
"""A Markdown link, its text allowed to hold one level of brackets."""


def unlinked_first_uses(text: str, glossary_link: str) -> list[str]:
    """The terms whose first use in `text` is not a link to their glossary entry (a use inside another
    link's text is passed over: it cannot hold a second link)."""
    body = _blanked(text)
    links = [(m.start(), m.end(), m.group(0)) for m in LINK.finditer(text)]
    missing = []
    for anchor, pattern in TERMS.items():
        for m in re.finditer(pattern, body, flags=re.I):
            around = next((link for s, e, link in links if s <= m.start() < e), None)
            if around is None:
                missing.append(f"{anchor}: {text[max(0, m.start() - 30) : m.end() + 10]!r}")
                break
            if f"]({glossary_link}#{anchor})" in around:
                break
    return missing


@pytest.mark.parametrize("page", DOC_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_glossary_terms_are_linked_where_first_used(page):
    rel = str(page.relative_to(ROOT))
    if rel in GLOSSARY_EXEMPT or rel.startswith("docs/reference/"):
        pytest.skip(GLOSSARY_EXEMPT.get(rel, "generated from the code"))
    link = Path(*[".."] * (len(page.relative_to(ROOT / "docs").parts) - 1), "glossary.md").as_posix()
    missing = unlinked_first_uses(page.read_text(encoding="utf-8"), link)
    assert missing == [], f"{rel}: first uses not linked to {link}: {missing}"


def test_the_glossary_defines_every_term():
    anchors = {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^## (.+)$",
               GLOSSARY.read_text(encoding="utf-8"), flags=re.M)}  # fmt: skip
    assert set(TERMS) <= anchors, set(TERMS) - anchors


def test_unlinked_first_uses_are_found():
    text = "# The warm start\n\nFrom a [warm start](glossary.md#warm-start); a warm start again.\n\nThe seam."
    assert [m.split(":")[0] for m in unlinked_first_uses(text, "glossary.md")] == ["seam"]
    assert unlinked_first_uses("[the v2 study](results/study.md), the v2 study", "glossary.md")[0].startswith(
        "v2-study"
    )  # a use inside another link is passed over; the next one must be linked
