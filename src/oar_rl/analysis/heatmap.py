"""Token-importance heatmaps: a completion's characters coloured by normalised importance, as HTML.

With the char-level tokenizer one token is one character, so a (C,) importance row maps straight onto
the completion text. For other tokenizers pass the decoded token strings. Scores are expected in [0, 1]
(e.g. `oar_rl.reshape.normalize_importance`, Eq. 14); values outside are clipped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence


def _colour(score: float) -> str:
    """White (0) to saturated orange-red (1), as a CSS rgba background."""
    s = min(1.0, max(0.0, score)) if math.isfinite(score) else 0.0
    return f"rgba(230, 85, 13, {0.08 + 0.87 * s:.3f})" if s > 0 else "transparent"


def heatmap_row(tokens: Sequence[str], scores: Sequence[float | None]) -> str:
    """One HTML fragment: each token in a `<span>` whose background encodes its score (title shows it).

    A score of None or NaN marks an unscored token, drawn in grey.
    """
    if len(tokens) != len(scores):
        raise ValueError(f"got {len(tokens)} tokens but {len(scores)} scores; they must match one to one")
    spans = []
    for tok, sc in zip(tokens, scores, strict=True):
        text = html.escape(tok).replace(" ", "&nbsp;").replace("\n", "&#9166;<br>")
        if sc is None or not math.isfinite(float(sc)):  # not scored (e.g. the answer span under AS probes)
            spans.append(f'<span title="not scored" style="color:#999">{text}</span>')
        else:
            spans.append(f'<span title="{sc:.3f}" style="background:{_colour(float(sc))}">{text}</span>')
    return '<span class="oar-trace">' + "".join(spans) + "</span>"


def heatmap_html(prompt: str, rows: Sequence[tuple[str, Sequence[str], Sequence[float | None]]]) -> str:
    """A table: the prompt, then one row per (label, tokens, scores) with the coloured completion."""
    body = [
        '<table class="oar-heatmap">',
        f"<tr><th>prompt</th><td><code>{html.escape(prompt)}</code></td></tr>",
    ]
    for label, tokens, scores in rows:
        body.append(
            f"<tr><th>{html.escape(label)}</th><td><code>{heatmap_row(tokens, scores)}</code></td></tr>"
        )
    body.append("</table>")
    legend = "".join(
        f'<span style="background:{_colour(v)};padding:0 6px">{v:.1f}</span>'
        for v in (0.0, 0.25, 0.5, 0.75, 1.0)
    )
    body.append(f'<p class="oar-legend">normalised importance: {legend}</p>')
    return "\n".join(body)
