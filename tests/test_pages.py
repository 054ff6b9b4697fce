"""The HTML pages as a person sees them: `heatmaps.html` and the study's `report.html`.

The browser checks load each page in headless Chromium at 1280 px (where it is installed: Debian package
`chromium`; skipped cleanly where it is not) with a small script appended that measures the layout and
writes the numbers into the DOM, read back through `--dump-dom`: the page must not scroll sideways, the
last token of a 1,000-token trace must be inside the window, every method's row must keep its tokens in
the same columns, and a table wider than the page must scroll inside its own box.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess

import pytest
import torch

from oar_rl.analysis.attribute import Trajectory, heatmap_page
from oar_rl.analysis.heatmap import heatmap_html, wrap_tokens
from oar_rl.study.report import aggregate, render
from oar_rl.tiny import build_char_tokenizer

WIDTH = 1280
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install chromium)"
)

MEASURE = """<script>(function () {
  const W = window.innerWidth, out = {inner: W, scroll: document.documentElement.scrollWidth};
  const chunks = [...document.querySelectorAll('table.oar-chunk')];
  out.chunks = chunks.length; out.misaligned = 0;
  for (const c of chunks) {
    const rows = [...c.querySelectorAll('span.oar-trace')].map(
      r => [...r.children].map(s => Math.round(s.getBoundingClientRect().left)).join());
    out.misaligned += rows.filter(r => r !== rows[0]).length;
  }
  const traces = document.querySelectorAll('div.oar-heatmap');
  if (traces.length) {
    const lines = traces[traces.length - 1].querySelectorAll('table.oar-chunk');
    const rows = lines[lines.length - 1].querySelectorAll('span.oar-trace');
    const box = lines[lines.length - 1].parentElement.getBoundingClientRect();
    out.last_right = Math.max(...[...rows].map(r => r.lastElementChild.getBoundingClientRect().right));
    out.box_right = Math.min(box.right, W);
  }
  out.scrolling_boxes = [...document.querySelectorAll('.table-wrap, .oar-wrap')]
    .filter(w => w.scrollWidth > w.clientWidth).length;
  const pre = document.createElement('pre'); pre.id = 'oar-measure'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();</script>"""


def chromium_measure(
    uri: str, tmp_path, *, width: int = WIDTH, offline: bool = False, budget_ms: int | None = None,
    timeout: int = 120,
) -> dict:  # fmt: skip
    """Load `uri` in headless Chromium at `width` px (`offline`: the network off, every request sent to a
    closed local port; `budget_ms`: virtual time to let timers run) and return the JSON an appended script
    wrote into `<pre id="oar-measure">`."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},900"]  # fmt: skip
    if offline:
        cmd += ["--disable-sync", "--disable-background-networking", "--disable-component-update",
                "--proxy-server=127.0.0.1:9"]  # fmt: skip
    if budget_ms is not None:
        cmd.append(f"--virtual-time-budget={budget_ms}")
    done = subprocess.run([*cmd, "--dump-dom", uri], capture_output=True, text=True, timeout=timeout)
    found = re.search(r'<pre id="oar-measure">(.*?)</pre>', done.stdout)
    assert found, f"chromium exited {done.returncode} without the measurement: {done.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def measure(page: str, tmp_path) -> dict:
    """Load `page` in headless Chromium at `WIDTH` px and return what `MEASURE` found."""
    path = tmp_path / "page.html"
    path.write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    return chromium_measure(path.as_uri(), tmp_path, timeout=60)


# ----------------------------------------------------------------------------------------------------
# heatmaps.html
# ----------------------------------------------------------------------------------------------------
def _trace(tok, completion: str, answer: str, seed: int):
    """A char-level trace (one token per character), random scores for four methods and an oracle row,
    the reasoning mask (before `<answer>`) and the answer-span mask."""
    ids = torch.tensor(tok(completion, add_special_tokens=False)["input_ids"])
    n = ids.numel()
    start = completion.index("<answer>")
    scored = torch.zeros(1, n, dtype=torch.bool)
    scored[0, :start] = True
    span = torch.zeros(1, n, dtype=torch.bool)
    a = start + len("<answer>")
    span[0, a : a + len(answer)] = True
    g = torch.Generator().manual_seed(seed)
    rows = {m: torch.rand(1, n, generator=g) for m in ("oar-p", "oar-g", "entropy", "random")}
    rows["oracle"] = (torch.rand(1, n, generator=g) > 0.9).float()
    traj = Trajectory("Leo has 4 apples and buys 7 more. How many?", completion, answer, ids[:3], ids)
    return traj, rows, scored, span


def _page(n_steps: int) -> tuple[str, int]:
    tok = build_char_tokenizer()
    short = "4+7=11. So 11.<answer>11</answer>"  # the testbed's size: about 40 tokens
    long = "".join(f"Step {k}: {k}+{k + 1}={2 * k + 1}. " for k in range(n_steps)) + "<answer>42</answer>"
    (t1, r1, s1, a1), (t2, r2, s2, a2) = _trace(tok, short, "11", 0), _trace(tok, long, "42", 1)
    n = max(t1.completion_ids.numel(), t2.completion_ids.numel())

    def pad(x, m):
        return torch.nn.functional.pad(x.float(), (0, n - m)).to(x.dtype)

    m1, m2 = t1.completion_ids.numel(), t2.completion_ids.numel()
    rows = {k: torch.cat([pad(r1[k], m1), pad(r2[k], m2)]) for k in r1}
    scored, answer = torch.cat([pad(s1, m1), pad(s2, m2)]), torch.cat([pad(a1, m1), pad(a2, m2)])
    return heatmap_page([t1, t2], tok, rows, "t", scored=scored, answer=answer), m2


def test_heatmap_marks_the_answer_and_the_end_of_reasoning():
    page, n = _page(60)
    assert n > 1000  # a real trace's length, one token per character
    assert page.count('class="oar-chunk"') > 10  # the long trace is cut into lines
    for label in ("oar-p", "oar-g", "entropy", "random", "oracle"):  # every line holds every method's row
        assert page.count(f"<tr><th>{label}</th>") == page.count('class="oar-chunk"')
    ends = re.findall(r'class="[^"]*\boar-end(?:"| )', page)
    assert len(ends) == 2 * 5 + 1  # the bar in each row of 2 traces × 5 rows, and the legend's
    assert "answer span (underlined): tokens" in page and f"{n} tokens" in page
    assert 'title="oar-p · #0 · ' in page  # hover: method, token index, score


def test_wrap_tokens_breaks_before_words_and_after_newlines():
    toks = ["ab", " cd", " ef", "gh", "\n", "ij"]
    assert wrap_tokens(toks, 8) == [(0, 2), (2, 5), (5, 6)]  # " ef" moves down with its word; ⏎ ends a line
    assert wrap_tokens(["x" * 20, "y"], 5) == [(0, 1), (1, 2)]  # a token longer than a line gets its own
    assert wrap_tokens([], 5) == [(0, 0)]
    with pytest.raises(ValueError, match="line_chars must be >= 1, got 0"):
        wrap_tokens(toks, 0)
    with pytest.raises(ValueError, match="row 'b' has other tokens"):
        heatmap_html("p", [("a", ["x"], [0.1]), ("b", ["y"], [0.1])])
    with pytest.raises(ValueError, match=r"reasoning_end=5 must be in \[0, 1\]"):
        heatmap_html("p", [("a", ["x"], [0.1])], reasoning_end=5)


@needs_chromium
def test_heatmap_wraps_to_the_window_in_chromium(tmp_path):
    page, _ = _page(60)
    m = measure(page, tmp_path)
    assert m["inner"] == WIDTH
    assert m["scroll"] <= WIDTH, m  # the page never scrolls sideways
    assert m["chunks"] > 10 and m["misaligned"] == 0, m  # every method's row under the same tokens
    assert m["last_right"] <= m["box_right"], m  # the last token (the answer's end) is on screen
    assert m["scrolling_boxes"] == 0, m  # no line needs its own scroll bar at 1280 px


# ----------------------------------------------------------------------------------------------------
# report.html
# ----------------------------------------------------------------------------------------------------
METRICS = [f"oar/{name}" for name in (
    "ess_ratio", "top10_mass", "importance_seconds", "probe_fallback_frac", "entropy_by_role_pivot",
    "entropy_by_role_filler", "weight_pivot", "weight_filler", "scored_fraction", "advantage_std",
    "importance_max", "importance_mean",
)]  # fmt: skip


def _study(seeds: int) -> dict:
    """A study record as `oar_rl.study.cli` writes it, from made-up runs near 100% accuracy."""
    finals = {"grpo": [0.97, 1.0, 0.99], "oar-g": [0.60, 0.83, 0.7]}
    runs = {}
    for variant, accs in finals.items():
        for s in range(seeds):
            history = [{"step": 1, **{k: 0.1 * (i + 1) + 0.01 * s for i, k in enumerate(METRICS)}}]
            runs[f"{variant}/seed{s}"] = {
                "variant": variant, "seed": s, "curve": {"0": 0.5, "4": accs[s]}, "history": history,
                "final": {"sampled": accs[s], "greedy": accs[s]}, "train_seconds": 10.0,
            }  # fmt: skip
    protocol = {
        "task": "wordproblems", "steps": 4, "prompts_per_step": 4, "num_generations": 4, "probe": "as-mean",
        "tau": 0.5, "oar_beta": 1.0, "test_problems": 50, "eval_samples": 2, "temperature": 1.0,
        "eval_every": 4,
    }  # fmt: skip
    return {
        "protocol": protocol, "complete": True, "scope": {"seeds": seeds}, "runs": runs, "wall": {"s": 1},
        "learning_rate": {"value": 5e-5, "source": "task default"},
        "warm_start": {"recipe_hash": "f" * 64, "accuracy": {"sampled": 0.5, "greedy": 0.6}},
        "groups": aggregate({"main": list(finals)}, runs),
    }  # fmt: skip


def test_report_intervals_stay_in_range_and_few_seeds_are_flagged():
    page = render(_study(2), {})
    assert "With 2 seeds these intervals are not informative" in page
    assert "1 degree of freedom (t = 12.71)" in page
    assert "98.5 [79.4, 100.0*]" in page  # GRPO at .97, 1.0: the t-interval's 117.6 cut to 100, marked
    assert "clipped to it" in page
    bounds = re.findall(r"\[([-+]?[\d.]+)\*?, ([-+]?[\d.]+)\*?\]", page)
    numbers = [float(v) for pair in bounds for v in pair]
    assert numbers and all(-100.0 <= x <= 100.0 for x in numbers)
    three = render(_study(3), {})
    assert "not informative" not in three and "1 seed" not in three
    one = render(_study(1), {})
    assert "Some variants have 1 seed: they have no intervals" in one


@needs_chromium
def test_report_fits_the_window_in_chromium(tmp_path):
    m = measure(render(_study(2), {}), tmp_path)
    assert m["scroll"] <= WIDTH, m  # the page itself never scrolls sideways
    assert m["scrolling_boxes"] >= 1, m  # the credit-metrics table is wider: it scrolls in its own box


# ----------------------------------------------------------------------------------------------------
# the docs site: at 1280 px nothing is cut, nothing scrolls sideways but a marked wide table; the equations
# render with no network; no page loads anything (a font) from another host
# ----------------------------------------------------------------------------------------------------
SITE_PAGES = (
    "", "quickstart", "methods", "results/leaderboard", "results/credit-why", "results/cost", "results/study",
    "guides/own-credit-rule", "gpu",
)  # fmt: skip
"""The home page, the pages a new reader meets first and the results pages with the widest tables and the
longest commands ("" is the home page)."""
NO_WIDE_TABLES = ("results/leaderboard",)
"""Pages none of whose tables may scroll sideways either."""
CODE_MAY_SCROLL = ("gpu",)
"""Pages whose code blocks may still scroll inside their own box (a line longer than the column): docs/gpu.md
is rewritten for the H200 check in a change of its own, which breaks its long lines."""

SITE_MEASURE = """<script>window.addEventListener('load', () => setTimeout(function () {
  const article = document.querySelector('.md-content article');
  const col = article.getBoundingClientRect();
  const label = e => (e.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 80);
  const scroller = e => {  // the nearest box from e up to the article that scrolls sideways
    for (let a = e; a && a !== article; a = a.parentElement) {
      if (['auto', 'scroll'].includes(getComputedStyle(a).overflowX)) return a;
    }
    return null;
  };
  const past = r => r.right > col.right + 1 || r.left < col.left - 1;  // reaches out of the column
  const out = {inner: window.innerWidth, scroll: document.documentElement.scrollWidth,
    code: [], wraps: [], math: [], cut: [], tables: [], unmarked: [], hidden_first: [], tops: {}};
  for (const e of document.querySelectorAll('.md-content pre > code')) {
    const style = getComputedStyle(e);  // lines broken anywhere: a flag split mid-name, a comment at col. 0
    if (style.overflowWrap === 'anywhere' || style.wordBreak === 'break-all') out.wraps.push(label(e));
    const was = e.style.whiteSpace;
    e.style.whiteSpace = 'pre';  // every line as written: it must fit (long lines are broken by hand)
    if (e.scrollWidth > e.clientWidth + 1 || past(e.getBoundingClientRect())) out.code.push(label(e));
    e.style.whiteSpace = was;
  }
  for (const box of document.querySelectorAll('.md-content div.arithmatex')) {  // display equations
    const math = box.querySelector('mjx-math');
    if (!math) continue;
    const cut = box.scrollWidth > box.clientWidth + 1 || past(math.getBoundingClientRect());
    if (cut) out.math.push(label(box));
  }
  for (const t of document.querySelectorAll('.md-content table')) {
    const box = scroller(t.parentElement);
    if (!box) { if (past(t.getBoundingClientRect())) out.cut.push(label(t)); continue; }
    if (box.scrollWidth <= box.clientWidth + 1) continue;
    out.tables.push(label(t));  // wider than the column: it scrolls in its box, which must say so
    if (!box.classList.contains('oar-scroll')) out.unmarked.push(label(t));
    const first = t.querySelector('tbody tr > :first-child');
    box.scrollLeft = box.scrollWidth;  // scrolled to its right end, the row labels must still show
    const r = first.getBoundingClientRect(), b = box.getBoundingClientRect();
    if (r.left < b.left - 1 || r.right > b.right + 1) out.hidden_first.push(label(t));
    box.scrollLeft = 0;
  }
  for (const h of document.querySelectorAll('.md-content h2[id]')) {
    out.tops[h.id] = Math.round(h.getBoundingClientRect().top);
  }
  out.height = window.innerHeight;
  out.tex = document.querySelectorAll('.md-content .arithmatex').length;
  out.mjx = document.querySelectorAll('.md-content mjx-container').length;
  const pre = document.createElement('pre'); pre.id = 'oar-measure'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 1500));</script>"""


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The docs site, built as `make docs-build` builds it (MathJax from `make mathjax`'s .cache/)."""
    import os
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if not (root / ".cache/mathjax/es5/tex-mml-chtml.js").is_file():
        pytest.fail("MathJax is not fetched: run `make mathjax` (make docs-build and make test do)")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(root / "src")}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def measure_site(site, page: str, tmp_path, width: int = WIDTH) -> dict:
    """Load the built `page` in headless Chromium at `width` px with the network off and return what
    `SITE_MEASURE` found."""
    path = site / page / "index.html"  # "" is the home page
    probe = path.with_name("measure.html")
    probe.write_text(path.read_text(encoding="utf-8").replace("</body>", SITE_MEASURE + "</body>"), "utf-8")
    return chromium_measure(probe.as_uri(), tmp_path, width=width, offline=True, budget_ms=8000)


@needs_chromium
@pytest.mark.parametrize("page", SITE_PAGES)
def test_site_pages_fit_1280_px(site, page, tmp_path):
    """At 1280 px: no equation, code line or table cut; code never wraps mid-word (a flag split in two);
    a table wider than the column scrolls inside a box marked as scrolling, its first column in view."""
    m = measure_site(site, page, tmp_path)
    name = page or "home"
    assert m["scroll"] <= WIDTH, m  # the page itself never scrolls sideways
    assert m["wraps"] == [], f"{name}: code blocks break lines anywhere: {m['wraps']}"
    if page not in CODE_MAY_SCROLL:
        assert m["code"] == [], f"{name}: code lines wider than the column at {WIDTH} px: {m['code']}"
    assert m["math"] == [], f"{name}: equations wider than the column at {WIDTH} px: {m['math']}"
    assert m["cut"] == [], f"{name}: tables cut at the column's edge: {m['cut']}"
    assert m["unmarked"] == [], f"{name}: tables scroll in a box not marked as scrolling: {m['unmarked']}"
    assert m["hidden_first"] == [], f"{name}: scrolled, tables hide their first column: {m['hidden_first']}"
    if page in NO_WIDE_TABLES:
        assert m["tables"] == [], f"{name}: tables scroll sideways at {WIDTH} px: {m['tables']}"


@needs_chromium
def test_the_home_page_shows_where_to_start_above_the_fold(site, tmp_path):
    m = measure_site(site, "", tmp_path)
    assert 0 < m["tops"]["where-to-start"] < m["height"], m["tops"]


@needs_chromium
def test_methods_page_renders_its_equations_with_no_network(site, tmp_path):
    text = (site / "methods" / "index.html").read_text()
    assert "unpkg.com" not in text and "cdn.jsdelivr" not in text  # MathJax is the site's own copy
    m = measure_site(site, "methods", tmp_path)
    assert m["tex"] > 0 and m["mjx"] >= m["tex"], m  # every equation typeset by MathJax (mjx-container)


SEARCH_PROBE = """<script>window.addEventListener('load', () => setTimeout(function () {
  const out = {results: document.querySelectorAll('.md-search-result__item').length,
    meta: ((document.querySelector('.md-search-result__meta') || {}).textContent || '').trim()};
  const pre = document.createElement('pre'); pre.id = 'oar-measure'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}, 4000));</script>"""


@needs_chromium
def test_the_offline_site_searches_from_the_file_system(tmp_path):
    """`make docs-offline` (issue 47's follow-up): opened from file:// with the network off, a page's search
    finds the leaderboard; no page loads a script from unpkg.com (the shim is the site's own copy)."""
    import os
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if not (root / ".cache/iframe-worker/shim/index.js").is_file():
        pytest.fail("iframe-worker's shim is not fetched: run `make iframe-worker` (make test does)")
    site = tmp_path / "site"
    env = {**os.environ, "OFFLINE": "true", "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(root / "src")}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not [p for p in site.rglob("*.html") if "unpkg.com" in p.read_text(encoding="utf-8")]
    page = site / "results" / "blame.html"
    probe = page.with_name("probe.html")
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", SEARCH_PROBE + "</body>"), "utf-8")
    m = chromium_measure(probe.as_uri() + "?q=leaderboard", tmp_path, offline=True, budget_ms=10000)
    assert m["results"] > 0, m  # "Initializing search" forever where the worker cannot start from file://


FONT_HOSTS = ("fonts.googleapis.com", "fonts.gstatic.com", "use.typekit.net", "fonts.bunny.net")


def test_no_page_loads_a_font_from_another_host(site):
    """The site serves the system's fonts (mkdocs.yml `theme.font: false`, the stacks in extra.css): a page
    read with no network looks as it does online, and no page tells a font host who reads it."""
    loaded = []
    for path in sorted(site.rglob("*")):
        if path.suffix not in (".html", ".css") or "mathjax" in path.parts:
            continue
        text = path.read_text(encoding="utf-8")
        loaded += [f"{path.relative_to(site)}: {host}" for host in FONT_HOSTS if host in text]
        imports = re.findall(r"@import url\(['\"]?https?:[^)]*", text)
        loaded += [f"{path.relative_to(site)}: {m}" for m in imports]
    assert loaded == [], loaded[:10]


MATH_PAGES = ("methods",)
"""The pages whose `$…$` are equations; anywhere else a dollar sign is text (`final answer is $X$`)."""


def test_only_the_math_pages_typeset_math(site):
    typeset = sorted(
        str(p.parent.relative_to(site))
        for p in site.rglob("index.html")
        if 'class="arithmatex"' in p.read_text(encoding="utf-8")
    )
    assert typeset == sorted(MATH_PAGES), f"pages with typeset math: {typeset}; a `$` in text needs escaping"
