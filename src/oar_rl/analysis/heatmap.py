"""Token-importance heatmaps: a completion's tokens coloured by normalised importance, as HTML and PNG.

A trace is cut into lines of at most `LINE_CHARS` characters at token boundaries (preferring a break
before a word, and always after a newline token). Each line is a small table with one row per method,
so every method's colours sit under the same tokens and the page wraps to its width instead of
scrolling sideways: the end of a trace (the last step, the answer), where OAR's weight sits, is on
screen. Token boundaries are thin rules, the answer span is underlined, a blue bar marks where the
reasoning ends, and hovering a token shows its method, index and score. A line wider than its box (a
very long single token, a narrow window) scrolls inside its own box; the page never scrolls sideways.

For other tokenizers than the char-level one pass the decoded token strings. Scores are expected in
[0, 1] (e.g. `oar_rl.reshape.normalize_importance`, Eq. 14); values outside are clipped; None or NaN is
an unscored token, drawn grey. `heatmap_png` draws the same rows with matplotlib (the real-model
figure), wrapping every `line_tokens` tokens.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

LINE_CHARS = 100
"""Characters per wrapped line: 100 monospace characters at 14 px plus the label column fit in about
1,000 px (a 1280-px window with the page margins has about 1,200)."""

HEATMAP_CSS = (
    ".oar-heatmap{margin-bottom:1.5em;max-width:100%}"
    ".oar-heatmap .oar-prompt{white-space:pre-wrap;overflow-wrap:anywhere;font-size:14px}"
    ".oar-heatmap .oar-where{color:#555;font-size:90%;margin:.2em 0 .4em}"
    ".oar-wrap{overflow-x:auto;max-width:100%}"
    ".oar-chunk{border-collapse:collapse;margin:0 0 .5em}"
    ".oar-chunk th{text-align:right;padding:1px 8px;font-weight:600;white-space:nowrap;font-size:13px;"
    "vertical-align:middle}"
    ".oar-chunk tr.oar-pos th{color:#888;font-weight:400;font-size:11px;padding-top:4px}"
    ".oar-trace{font-family:ui-monospace,'DejaVu Sans Mono',monospace;font-size:14px;line-height:1.7;"
    "white-space:pre;padding:0}"
    ".oar-trace span{box-shadow:inset -1px 0 0 rgba(0,0,0,.16)}"
    ".oar-trace span.oar-ans{color:#666;text-decoration:underline 2px #1f5fbf;text-underline-offset:3px}"
    ".oar-trace span.oar-end{box-shadow:inset 3px 0 0 #1f5fbf,inset -1px 0 0 rgba(0,0,0,.16)}"
    ".oar-trace span.oar-end-after{box-shadow:inset -3px 0 0 #1f5fbf}"
    ".oar-trace span.oar-off{color:#999}"
)
"""The heatmap's styles; a page that shows `heatmap_html` fragments puts these in its <style>."""


def _colour(score: float) -> str:
    """White (0) to saturated orange-red (1), as a CSS rgba background."""
    s = min(1.0, max(0.0, score)) if math.isfinite(score) else 0.0
    return f"rgba(230, 85, 13, {0.08 + 0.87 * s:.3f})" if s > 0 else "transparent"


def _shown(token: str) -> str:
    """The token as drawn: a newline as ⏎ (the line then breaks), a tab as ⇥, the rest as is."""
    return token.replace("\r\n", "⏎").replace("\n", "⏎").replace("\r", "⏎").replace("\t", "⇥")


def wrap_tokens(tokens: Sequence[str], line_chars: int = LINE_CHARS) -> list[tuple[int, int]]:
    """[start, stop) token ranges of the wrapped lines: at most `line_chars` shown characters per line
    (a longer single token gets a line of its own), breaking before a token that starts a word when one
    is at least half a line back, else before the token that does not fit; always after a newline."""
    if line_chars < 1:
        raise ValueError(f"line_chars must be >= 1, got {line_chars}")
    lines: list[tuple[int, int]] = []
    start, width, word = 0, 0, None  # word: the last index in this line where a word starts
    for i, tok in enumerate(tokens):
        n = len(_shown(tok))
        if i > start and width + n > line_chars:
            cut = (
                word
                if word is not None and sum(len(_shown(t)) for t in tokens[start:word]) >= line_chars // 2
                else i
            )
            lines.append((start, cut))
            start, width, word = cut, sum(len(_shown(t)) for t in tokens[cut:i]), None
        if i > start and (tok[:1].isspace() or tokens[i - 1][-1:].isspace()):
            word = i
        width += n
        if "\n" in tok or "\r" in tok:
            lines.append((start, i + 1))
            start, width, word = i + 1, 0, None
    if start < len(tokens) or not lines:
        lines.append((start, len(tokens)))
    return lines


def _cell(token: str, score: float | None, title: str, cls: list[str]) -> str:
    text = html.escape(_shown(token))
    if score is None or not math.isfinite(float(score)):  # not scored (e.g. the answer span)
        return f'<span class="{" ".join(["oar-off", *cls])}" title="{title} · not scored">{text}</span>'
    style = f"background:{_colour(float(score))}"
    klass = f' class="{" ".join(cls)}"' if cls else ""
    return f'<span{klass} title="{title} · {float(score):.3f}" style="{style}">{text}</span>'


def heatmap_row(
    tokens: Sequence[str],
    scores: Sequence[float | None],
    label: str = "",
    *,
    start: int = 0,
    length: int | None = None,
    answer: Sequence[bool] | None = None,
    reasoning_end: int | None = None,
) -> str:
    """One HTML row fragment: each token a `<span>` whose background encodes its score; its title (the
    hover text) is '`label` · #index · score'. `tokens` are the trace's `start`-th onwards (`length`: the
    trace's length, default `start + len(tokens)`); `answer` (one flag per token of the trace) underlines
    the answer span; `reasoning_end` (a token index of the trace, up to `length`) draws the bar before that
    token, or after the trace's last token when it equals `length`."""
    if len(tokens) != len(scores):
        raise ValueError(f"got {len(tokens)} tokens but {len(scores)} scores; they must match one to one")
    length = start + len(tokens) if length is None else length
    name = f"{label} · " if label else ""
    cells = []
    for j, (tok, sc) in enumerate(zip(tokens, scores, strict=True)):
        i = start + j
        cls = ["oar-ans"] if answer is not None and answer[i] else []
        if reasoning_end == i:
            cls.append("oar-end")
        elif reasoning_end == length == i + 1:
            cls.append("oar-end-after")  # the reasoning runs to the trace's last token
        cells.append(_cell(tok, sc, f"{name}#{i}", cls))
    return '<span class="oar-trace">' + "".join(cells) + "</span>"


def _where(n: int, answer: Sequence[bool] | None, reasoning_end: int | None) -> str:
    parts = [f"{n} tokens"]
    if reasoning_end == 0:
        parts.append("no reasoning tokens (the blue bar is at the start)")
    elif reasoning_end is not None:
        parts.append(f"reasoning: tokens 0–{reasoning_end - 1}, ending at the blue bar")
    span = [i for i in range(n) if answer is not None and answer[i]]
    if span:
        parts.append(f"answer span (underlined): tokens {span[0]}–{span[-1]}")
    elif answer is not None:
        parts.append("no answer span")
    return "; ".join(parts)


def heatmap_html(
    prompt: str,
    rows: Sequence[tuple[str, Sequence[str], Sequence[float | None]]],
    *,
    answer: Sequence[bool] | None = None,
    reasoning_end: int | None = None,
    line_chars: int = LINE_CHARS,
) -> str:
    """One trace: the prompt, a line saying where the reasoning and the answer are, then the completion
    wrapped into lines (`wrap_tokens`), each line one small table with a row per (label, tokens, scores).

    Every row must hold the same tokens (they are one trace scored by several methods). `answer` is a
    per-token flag of the answer span; `reasoning_end` the index of the first token after the reasoning
    (the length of the trace when the reasoning runs to its end). Put `HEATMAP_CSS` in the page's style.
    """
    if not rows:
        raise ValueError("heatmap_html needs at least one (label, tokens, scores) row")
    tokens = list(rows[0][1])
    n = len(tokens)
    for label, toks, scores in rows:
        if list(toks) != tokens:
            raise ValueError(
                f"row {label!r} has other tokens than row {rows[0][0]!r}; every row is one trace"
            )
        if len(scores) != n:
            raise ValueError(
                f"row {label!r}: got {n} tokens but {len(scores)} scores; they must match one to one"
            )
    if answer is not None and len(answer) != n:
        raise ValueError(f"answer has {len(answer)} flags for {n} tokens; give one per token")
    if reasoning_end is not None and not 0 <= reasoning_end <= n:
        raise ValueError(f"reasoning_end={reasoning_end} must be in [0, {n}] (a token index of the trace)")
    body = [
        '<div class="oar-heatmap">',
        f'<p class="oar-prompt"><b>prompt</b> <code>{html.escape(prompt)}</code></p>',
        f'<p class="oar-where">{html.escape(_where(n, answer, reasoning_end))}</p>',
    ]
    for start, stop in wrap_tokens(tokens, line_chars):
        table = [f'<tr class="oar-pos"><th>#{start}–{max(start, stop - 1)}</th><td></td></tr>']
        for label, toks, scores in rows:
            row = heatmap_row(
                toks[start:stop], scores[start:stop], label,
                start=start, length=n, answer=answer, reasoning_end=reasoning_end,
            )  # fmt: skip
            table.append(f"<tr><th>{html.escape(label)}</th><td>{row}</td></tr>")
        body.append('<div class="oar-wrap"><table class="oar-chunk">' + "".join(table) + "</table></div>")
    body.append("</div>")
    return "\n".join(body)


def legend_html() -> str:
    """The colour scale and the marks, one line."""
    scale = "".join(
        f'<span style="background:{_colour(v)};padding:0 6px">{v:.2f}</span>'
        for v in (0.0, 0.25, 0.5, 0.75, 1.0)
    )
    marks = (
        ' <span class="oar-trace"><span class="oar-end">&nbsp;</span></span> reasoning ends'
        ' <span class="oar-trace"><span class="oar-ans">answer</span></span> answer span (not scored)'
    )
    return f'<p class="oar-legend">normalised importance: {scale} {marks}</p>'


def heatmap_png(
    trajs: Sequence[Any], tok: Any, rows: Mapping[str, Any], mask: Any, path: Path, line_tokens: int = 40
) -> list[tuple[int, int, int]]:
    """Figure 4/8 style: per trace, one row of coloured tokens per method (and the oracle), over the tokens
    `mask` (B, C) keeps (from the first), each row scaled to its own maximum there; a trace longer than
    `line_tokens` wraps into several panels, each with every method's row. Which traces are drawn is the
    caller's choice (`experiments.real_model.recall --max-traces`). Returns the panels drawn, as
    (trace, first token, stop)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import torch

    from oar_rl.io import savefig_atomic

    if line_tokens < 1:
        raise ValueError(f"line_tokens must be >= 1, got {line_tokens}")
    panels = []  # (trace index, start, stop)
    for i in range(len(trajs)):
        n = int(mask[i].sum())
        panels += [(i, s, min(n, s + line_tokens)) for s in range(0, max(n, 1), line_tokens)]
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(13, 1.0 + 0.42 * len(rows) * len(panels)), squeeze=False
    )
    for ax, (i, s, e) in zip(axes[:, 0], panels, strict=True):
        t, n = trajs[i], int(mask[i].sum())
        ids = t.completion_ids[s:e]
        pieces = [tok.decode([int(x)]).replace("\n", "⏎").replace("$", r"\$") for x in ids]
        grid = torch.stack([r[i, :n].float() for r in rows.values()])
        grid = (grid / grid.amax(dim=1, keepdim=True).clamp_min(1e-12))[:, s:e].numpy()  # each row to its max
        ax.imshow(grid, aspect="auto", cmap="Reds", vmin=0, vmax=1)
        ax.set_yticks(range(len(rows)), list(rows), fontsize=7)
        ax.set_xticks(range(e - s), pieces, fontsize=6, rotation=90)
        ax.set_title(t.prompt if s == 0 else f"(tokens {s}–{e - 1})", fontsize=7, loc="left")
    fig.tight_layout()
    savefig_atomic(fig, path, dpi=90)
    plt.close(fig)
    return panels
