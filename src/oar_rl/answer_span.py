"""Answer spans from completion text, the positions they leave to score, and mask validation.

Answer spans (:func:`answer_span_mask`). The default (``pattern=None``) is ``"rewarded"``: the span the
accuracy reward scores, in every format it accepts (``\\boxed{…}``, ``<answer>…</answer>``, "the final
answer is …"; :func:`oar_rl.rewards.extract.answer_char_span`), so an answer-span probe scores the answer
the reward checks whatever format the model writes. (Before issue 17 the default was the ``<answer>``
tags only, and a ``\\boxed{}`` completion silently fell back to LT-Logits; :data:`ANSWER_TAG_PATTERN`
gives that span, and the embedded study tasks pin it so their results do not move.) For a pattern, the
span is the *content* of the last match:
for ``<answer>…</answer>`` the characters between the tags, for ``\\boxed{…}`` the characters inside
the outer braces (balanced by scanning, ``\\{``/``\\}`` escapes skipped). The tags themselves are not in
the span: they are format, the paper's AS probes average "positions that predict the final answer
span", and the closing tag is predicted after the answer is already fixed. An empty content
(``<answer></answer>``) is no span.

Characters to tokens. A token belongs to the span when the characters it contributes to overlap the
content (BPE tokens that straddle a tag boundary count). The character range of each token is found by
decoding the sampled ids incrementally (with a few tokens of left context), not by re-encoding the
text: sampled ids are often not the tokenizer's canonical encoding of their own text, so offsets from
a re-encoding would not line up with them. A byte-level token that holds only part of a multi-byte
UTF-8 character (``😀`` is four byte tokens in a byte-level BPE) is mapped to the character it helps to
build, as the tokenizer's ``offset_mapping`` maps it (tests check the two agree on canonical encodings),
so an answer made of such characters has no holes.

Reasoning tokens (:func:`reasoning_mask`). The paper's importance is over the *reasoning* tokens T. The
format that introduces the answer (the ``<answer>`` tag, ``\\boxed{``, "The final answer is") is not
reasoning: it sits next to the probe, takes a row's top scores and squeezes the min-max range of the
reasoning tokens (issue 26). :func:`reasoning_mask` marks the valid tokens that end before that format
starts (:func:`oar_rl.rewards.extract.reasoning_end` for the rewarded span; for ``"boxed"`` or a regex,
the start of the last match, with the same lead-in rule). A token that straddles the boundary is format.
A row without an answer marker is all reasoning.

Scored positions (:func:`scored_positions`). With an answer-span probe only the valid completion tokens
strictly *before* the span start get a score; the span and everything after it get 0 (and so keep
weight 1 after reshaping, which is the trainer's job). A row without a span falls back to LT-Logits for
the whole row; :func:`has_answer_span` tells which rows did.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

ANSWER_TAG_PATTERN = r"<answer>(.*?)</answer>"
"""The content between the last ``<answer>`` and its ``</answer>`` (the default before issue 17)."""

BOXED = "boxed"
"""Pass ``pattern="boxed"`` to use the content of the last balanced ``\\boxed{…}``."""

REWARDED = "rewarded"
"""Pass ``pattern="rewarded"`` to use the span the accuracy reward scores
(:func:`oar_rl.rewards.extract.answer_char_span`: the last-ending ``<answer>``, ``\\boxed`` or "final
answer is" marker, the rule applied again inside it). A completion with no marker has no span. The
default (``pattern=None``)."""

DEFAULT_ANSWER_PATTERN = REWARDED
"""What ``pattern=None`` means everywhere (OARConfig.answer_pattern, the analysis commands)."""

# Tokens of left context used when decoding a token into its characters (byte-level BPE needs up to 4
# to complete a UTF-8 character, SentencePiece needs 1 to keep a leading space).
_DECODE_CONTEXT = 6
_REPLACEMENT = "\ufffd"  # what a decoder gives for an incomplete UTF-8 sequence

# ----------------------------------------------------------------------------------------------------
# answer spans


def _compile_pattern(pattern: str | None) -> re.Pattern[str] | str | None:
    """None -> the default ("rewarded"); "boxed" -> None (brace scanner); "rewarded" -> "rewarded" (the
    rewards' rule); else a regex with one group."""
    if pattern is None:
        pattern = DEFAULT_ANSWER_PATTERN
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(
            f"pattern={pattern!r} is empty; pass a regex with exactly one capturing group, "
            f'"{BOXED}", "{REWARDED}", or None for the default ("{DEFAULT_ANSWER_PATTERN}")'
        )
    if pattern == BOXED:
        return None
    if pattern == REWARDED:
        return REWARDED
    try:
        compiled = re.compile(pattern, re.DOTALL)
    except re.error as err:
        raise ValueError(f"pattern={pattern!r} is not a valid regular expression: {err}") from err
    if compiled.groups != 1:
        raise ValueError(
            f"pattern={pattern!r} has {compiled.groups} capturing groups; it needs exactly one "
            "(the answer content), e.g. r'<answer>(.*?)</answer>'"
        )
    return compiled


def compile_answer_pattern(pattern: str | None) -> re.Pattern[str] | str | None:
    """Validate an answer pattern as :func:`answer_span_mask` would (ValueError if bad).

    Returns the compiled regex, None for ``"boxed"`` (scanned, not matched by a regex), or
    ``"rewarded"`` for the rewards' rule (also what None, the default, gives).
    """
    return _compile_pattern(pattern)


def last_boxed_span(text: str) -> tuple[int, int] | None:
    """Character span [start, end) of the content of the last balanced ``\\boxed{…}`` in `text`.

    Matches are non-overlapping, left to right (like ``re.finditer``); an unbalanced ``\\boxed{`` (cut
    off by the length limit) is skipped. ``\\{`` and ``\\}`` do not count as braces.
    """
    key = "\\boxed{"
    found: tuple[int, int] | None = None
    i = text.find(key)
    while i != -1:
        start = i + len(key)
        depth, j, end = 1, start, -1
        while j < len(text):
            ch = text[j]
            if ch == "\\" and j + 1 < len(text) and text[j + 1] in "{}":
                j += 2
                continue
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    end = j
                    break
            j += 1
        if end == -1:  # unbalanced: look for a later, complete one
            i = text.find(key, i + 1)
            continue
        found = (start, end)
        i = text.find(key, end + 1)
    return found


def _last_span(text: str, compiled: re.Pattern[str] | str | None) -> tuple[int, int] | None:
    if compiled is None:
        return last_boxed_span(text)
    if compiled == REWARDED:
        from oar_rl.rewards.extract import answer_char_span  # the rewards' one rule

        start, end, kind = answer_char_span(text)
        return None if kind is None else (start, end)
    span = None
    for m in compiled.finditer(text):
        span = m.span(1)
    return span


def _flush_invalid(
    pending: list[tuple[int, str]], spans: list[tuple[int, int]], text_parts: list[str], pos: int
) -> int:
    """Pending byte tokens that never formed a character (invalid, or cut off at the end of the row):
    their replacement text stays in the row's text and each of them maps to all of it."""
    raw = "".join(tail for _, tail in pending)
    for j, _ in pending:
        spans[j] = (spans[j][0], pos + len(raw))
    text_parts.append(raw)
    return pos + len(raw)


def token_spans(tokenizer, rows: list[list[int]]) -> list[tuple[str, list[tuple[int, int]]]]:
    """Per row: its text and, per token, the character range [lo, hi) of that text it contributes to.

    Token k's piece is decode(ids[k-W:k+1]) minus decode(ids[k-W:k]) (W = _DECODE_CONTEXT). Decoding with
    left context keeps SentencePiece's leading spaces and completes byte-level characters split over
    tokens. A token after which the decode ends in U+FFFD (an incomplete UTF-8 sequence) is *pending*:
    the text before the partial character is its own, and its range extends over the first character
    of the token that completes the sequence (all the byte tokens of one character map to that
    character, like the tokenizer's ``offset_mapping``). Pending tokens that never complete a
    character (invalid bytes, or a character cut by the length limit) keep their raw pieces, so the
    text stays the row's own decode, and each maps to the replacement text they make together.
    Special tokens keep their text here; :func:`answer_masks` passes only the tokens of the reward's
    text (:func:`text_tokens`). All decodes go through one ``batch_decode``.
    """
    queries: list[list[int]] = []
    for ids in rows:
        for k in range(len(ids)):
            lo = max(0, k - _DECODE_CONTEXT)
            queries.append(ids[lo:k])
            queries.append(ids[lo : k + 1])
    texts = (
        tokenizer.batch_decode(queries, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if queries
        else []
    )
    out: list[tuple[str, list[tuple[int, int]]]] = []
    q = 0
    for ids in rows:
        text_parts: list[str] = []
        spans: list[tuple[int, int]] = []
        pos = 0
        pending: list[tuple[int, str]] = []  # (token index, raw piece) of tokens inside a partial char
        for k in range(len(ids)):
            prev, cur = texts[q], texts[q + 1]
            q += 2
            rewrote = not cur.startswith(prev)  # this token completed (rewrote) a partial character
            if rewrote:
                common = next(
                    (i for i, (a, c) in enumerate(zip(prev, cur, strict=False)) if a != c),
                    min(len(prev), len(cur)),
                )
                piece = cur[common:]
            else:
                piece = cur[len(prev) :]
            if cur.endswith(_REPLACEMENT):  # an incomplete character: wait for the token that ends it
                stable = piece.rstrip(_REPLACEMENT)  # text before the partial character is final
                spans.append((pos, pos + len(stable)))
                text_parts.append(stable)
                pos += len(stable)
                pending.append((k, piece[len(stable) :]))
                continue
            if pending and rewrote:  # the partial bytes are part of this token's first character
                for j, _ in pending:
                    spans[j] = (spans[j][0], pos + 1)
                pending = []
            pos = _flush_invalid(pending, spans, text_parts, pos)
            pending = []
            spans.append((pos, pos + len(piece)))
            text_parts.append(piece)
            pos += len(piece)
        _flush_invalid(pending, spans, text_parts, pos)
        out.append(("".join(text_parts), spans))
    return out


def _reasoning_end(text: str, compiled: re.Pattern[str] | str | None) -> int | None:
    """Character index where the reasoning of `text` ends (the answer's introducing format starts), or
    None when `text` has no answer marker of the pattern."""
    from oar_rl.rewards.extract import lead_in_start, reasoning_end

    if compiled == REWARDED:
        return reasoning_end(text)
    if compiled is None:  # "boxed": the command of the last balanced \boxed{...}
        span = last_boxed_span(text)
        if span is None:
            return None
        return lead_in_start(text, text.rfind("\\boxed", 0, span[0]))
    last = None
    for m in compiled.finditer(text):
        last = m
    return None if last is None else lead_in_start(text, last.start())


def text_tokens(completion_ids: Tensor, completion_mask: Tensor, tokenizer) -> Tensor:
    """(B, C) bool: the valid tokens whose text the reward reads: every valid token but the tokenizer's
    special ones (EOS, pad, ``<unk>``, ...), which TRL drops from the text it gives the reward
    (``skip_special_tokens=True``). The one place that decides which tokens an answer span (or a role,
    `oar_rl.roles`) may hold; the others take no characters."""
    special = torch.tensor(sorted(set(tokenizer.all_special_ids)), dtype=torch.long)
    ids = completion_ids.detach().cpu().long()
    return completion_mask.bool().cpu() & ~torch.isin(ids, special)


def _with_empty_spans(keep: list[bool], spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Per valid token, its character range: `spans` for the tokens of the text (`keep`), in order, and an
    empty range where the text stands for the others (special tokens hold no characters)."""
    out: list[tuple[int, int]] = []
    it = iter(spans)
    pos = 0
    for k in keep:
        lo, hi = next(it) if k else (pos, pos)
        out.append((lo, hi))
        pos = hi
    return out


def answer_masks(
    completion_ids: Tensor,
    completion_mask: Tensor,
    tokenizer,
    *,
    pattern: str | None = None,
) -> tuple[Tensor, Tensor]:
    """(answer span (B, C) bool, reasoning tokens (B, C) bool) from one decode of the rows.

    The answer span is :func:`answer_span_mask`'s. The reasoning tokens are the valid tokens whose
    characters end at or before the start of the format that introduces the answer (module docstring);
    every valid token of a row without an answer marker. Both read the text the reward reads
    (:func:`text_tokens`): a special token (the EOS after a trailing answer) is never in the span, and is
    reasoning only where it stands before the reasoning's end.
    """
    compiled = _compile_pattern(pattern)
    _check_ids_and_mask(completion_ids, completion_mask, "completion")
    valid = completion_mask.bool()
    ids_cpu = completion_ids.detach().cpu()
    valid_cpu = valid.cpu()
    text_cpu = text_tokens(ids_cpu, valid_cpu, tokenizer)  # (B, C): what the reward's text is made of
    rows = [ids_cpu[b][text_cpu[b]].tolist() for b in range(ids_cpu.shape[0])]
    answer = torch.zeros(completion_ids.shape, dtype=torch.bool)
    reasoning = valid_cpu.clone()
    for b, (text, text_spans) in enumerate(token_spans(tokenizer, rows)):
        cols = valid_cpu[b].nonzero().flatten().tolist()
        spans = _with_empty_spans(text_cpu[b][valid_cpu[b]].tolist(), text_spans)
        end = _reasoning_end(text, compiled)
        if end is not None:
            for col, (lo, hi) in zip(cols, spans, strict=True):
                reasoning[b, col] = lo < end and hi <= end
        span = _last_span(text, compiled)
        if span is None or span[0] == span[1]:
            continue
        s, e = span
        for col, (lo, hi) in zip(cols, spans, strict=True):
            if hi > lo and lo < e and hi > s:  # non-empty overlap of [lo, hi) and [s, e)
                answer[b, col] = True
    return answer.to(completion_ids.device), reasoning.to(completion_ids.device)


def reasoning_mask(
    completion_ids: Tensor,
    completion_mask: Tensor,
    tokenizer,
    *,
    pattern: str | None = None,
) -> Tensor:
    """(B, C) bool: the reasoning tokens of each row (see :func:`answer_masks`)."""
    return answer_masks(completion_ids, completion_mask, tokenizer, pattern=pattern)[1]


def answer_span_mask(
    completion_ids: Tensor,
    completion_mask: Tensor,
    tokenizer,
    *,
    pattern: str | None = None,
) -> Tensor:
    """Which completion tokens lie inside the answer span (content of the LAST pattern match).

    Args:
        completion_ids: (B, C) integer token ids, right-padded.
        completion_mask: (B, C) 1 on real completion tokens, 0 on padding (bool or 0/1 numbers).
        tokenizer: anything with ``batch_decode`` (any Hugging Face tokenizer).
        pattern: None or ``"rewarded"`` (the default) for the answer the accuracy reward scores
            (:data:`REWARDED`); ``"boxed"`` for the last balanced ``\\boxed{…}``; or a regex
            with exactly one capturing group (the content), matched with ``re.DOTALL``.

    Returns:
        (B, C) bool, True on valid tokens whose characters overlap the span content (a byte token of a
        multi-byte character counts for that character). Rows with no match (or an empty content) are
        all False.
    """
    return answer_masks(completion_ids, completion_mask, tokenizer, pattern=pattern)[0]


# ----------------------------------------------------------------------------------------------------
# scored positions


def has_answer_span(answer_mask: Tensor) -> Tensor:
    """(B,) bool: rows whose answer mask marks at least one token (the others fall back to LT-Logits)."""
    if answer_mask.ndim != 2:
        raise ValueError(f"answer_mask must be 2-D (B, C), got shape {tuple(answer_mask.shape)}")
    return answer_mask.bool().any(dim=1)


def scored_positions(completion_mask: Tensor, answer_mask: Tensor) -> Tensor:
    """(B, C) bool: the completion tokens that get an importance score under an answer-span probe.

    Rows with a span: valid tokens strictly before the first span token. Rows without: every valid
    token (LT-Logits fallback).
    """
    _check_mask(completion_mask, "completion_mask")
    check_answer_mask(answer_mask, completion_mask)
    return positions_before(completion_mask, answer_mask)


def positions_before(completion_mask: Tensor, answer_mask: Tensor) -> Tensor:
    """:func:`scored_positions` of masks already validated (e.g. a `ScoringBatch`'s): no checks."""
    valid = completion_mask.bool()  # (B, C)
    span = answer_mask.bool()  # (B, C)
    has = span.any(dim=1)  # (B,)
    C = valid.shape[1]
    idx = torch.arange(C, device=valid.device)
    first = torch.where(span, idx, C).amin(dim=1) if C else torch.zeros_like(has, dtype=torch.long)  # (B,)
    before = idx[None, :] < first[:, None]  # (B, C)
    return valid & torch.where(has[:, None], before, True)


# ----------------------------------------------------------------------------------------------------
# validation shared with the scorers


def _check_mask(mask: Tensor, name: str) -> None:
    if not isinstance(mask, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool and mask.numel() and not bool(((mask == 0) | (mask == 1)).all()):
        bad = mask[(mask != 0) & (mask != 1)].flatten()[:3].tolist()
        raise ValueError(f"{name} must contain only 0/1 (or bool), found values like {bad}")
    if mask.is_complex():
        raise ValueError(f"{name} must be bool, integer or float 0/1, got dtype {mask.dtype}")


def _check_ids_and_mask(ids: Tensor, mask: Tensor, name: str) -> None:
    if not isinstance(ids, Tensor) or ids.ndim != 2:
        shape = tuple(ids.shape) if isinstance(ids, Tensor) else type(ids).__name__
        raise ValueError(f"{name}_ids must be a 2-D tensor (B, {name[0].upper()}), got {shape}")
    if ids.dtype.is_floating_point or ids.is_complex() or ids.dtype == torch.bool:
        raise ValueError(f"{name}_ids must hold integer token ids, got dtype {ids.dtype}")
    _check_mask(mask, f"{name}_mask")
    if mask.shape != ids.shape:
        raise ValueError(
            f"{name}_mask shape {tuple(mask.shape)} does not match {name}_ids shape {tuple(ids.shape)}"
        )


def check_answer_mask(answer_mask: Tensor, completion_mask: Tensor, *, name: str = "answer_mask") -> None:
    """Raise ValueError unless `answer_mask` (or another token mask, called `name`) is a 0/1 (B, C) mask
    inside `completion_mask`."""
    _check_mask(answer_mask, name)
    if answer_mask.shape != completion_mask.shape:
        raise ValueError(
            f"{name} shape {tuple(answer_mask.shape)} does not match completion_mask shape "
            f"{tuple(completion_mask.shape)}"
        )
    if bool((answer_mask.bool() & ~completion_mask.bool().to(answer_mask.device)).any()):
        raise ValueError(f"{name} marks padding positions (where completion_mask is 0)")


def check_batch(
    prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor, completion_mask: Tensor
) -> None:
    """Validate the TRL batch layout: (B, P) prompt ids/mask and (B, C) completion ids/mask."""
    _check_ids_and_mask(prompt_ids, prompt_mask, "prompt")
    _check_ids_and_mask(completion_ids, completion_mask, "completion")
    if prompt_ids.shape[0] != completion_ids.shape[0]:
        raise ValueError(
            f"prompt batch size {prompt_ids.shape[0]} != completion batch size {completion_ids.shape[0]}"
        )
