"""Ground-truth token roles (pivot / filler / answer) for tasks that can label their completions.

A task provides a *labeller*: ``completion text -> one role per character`` (or None when the text
cannot be parsed, e.g. `oar_rl.data.wordproblems.label_roles`). Roles are properties of the completion
the policy wrote, so they are computed from the sampled text, never taken from the dataset. This module
maps character roles to token roles and measures role statistics of a model on its own samples.

A token's role: ``pivot`` if any of its characters is a pivot, else ``answer`` if any is in the answer
span, else ``filler``. Reasoning tokens are the pivot and filler tokens (those outside the answer span).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

PIVOT, FILLER, ANSWER = "pivot", "filler", "answer"
Labeller = Callable[[str], "Sequence[str] | None"]


def token_roles_from_chars(pieces: Sequence[str], char_roles: Sequence[str]) -> list[str]:
    """One role per token from per-character roles; `pieces` are the tokens' texts, joined = the text."""
    total = sum(len(p) for p in pieces)
    if total != len(char_roles):
        raise ValueError(
            f"the token pieces cover {total} characters but {len(char_roles)} character roles were given"
        )
    out, pos = [], 0
    for piece in pieces:
        out.append(_role_of(char_roles[pos : pos + len(piece)]))
        pos += len(piece)
    return out


def _role_of(chunk: Sequence[str]) -> str:
    """A token's role from its characters' roles: pivot > answer > filler."""
    if PIVOT in chunk:
        return PIVOT
    if ANSWER in chunk:
        return ANSWER
    return FILLER


def role_masks(
    completion_ids: torch.Tensor, completion_mask: torch.Tensor, tokenizer, labeller: Labeller
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token role masks of a batch of completions.

    Args:
        completion_ids, completion_mask: (B, C). tokenizer: decodes the ids. labeller: text -> char roles.

    Returns:
        (pivot (B, C) bool, filler (B, C) bool, known (B,) bool). Rows the labeller cannot parse (it
        returns None) are all-False and `known` is False for them. Only valid tokens get a role;
        special tokens (EOS, pad, unk) get none and are left out of the labelled text, as TRL leaves
        them out of the text it gives the reward (`skip_special_tokens=True`).
    """
    import torch

    from oar_rl.answer_span import text_tokens, token_spans

    ids = completion_ids.cpu()
    # Special tokens (TRL's completion mask includes the EOS) are skipped, as in the text the reward sees.
    mask = text_tokens(ids, completion_mask, tokenizer)  # (B, C)
    rows = [ids[i][mask[i]].tolist() for i in range(ids.shape[0])]
    decoded = token_spans(tokenizer, rows)  # per row: (text, per-token [lo, hi) character ranges)
    pivot = torch.zeros(ids.shape, dtype=torch.bool)  # (B, C)
    filler = torch.zeros(ids.shape, dtype=torch.bool)  # (B, C)
    known = torch.zeros(ids.shape[0], dtype=torch.bool)  # (B,)
    for i, (text, spans) in enumerate(decoded):
        char_roles = labeller(text)
        if char_roles is None:
            continue
        if len(char_roles) != len(text):
            raise ValueError(
                f"the labeller gave {len(char_roles)} roles for a text of {len(text)} characters"
            )
        roles = [_role_of(char_roles[lo:hi]) for lo, hi in spans]
        cols = mask[i].nonzero(as_tuple=True)[0]  # (T_i,)
        pivot[i, cols] = torch.tensor([r == PIVOT for r in roles], dtype=torch.bool)
        filler[i, cols] = torch.tensor([r == FILLER for r in roles], dtype=torch.bool)
        known[i] = True
    dev = completion_ids.device
    return pivot.to(dev), filler.to(dev), known.to(dev)


def role_statistics(
    model,
    tokenizer,
    prompts: list[str],
    labeller: Labeller,
    *,
    temperature: float = 1.0,
    max_new_tokens: int = 160,
    seed: int = 0,
    batch_size: int = 64,
) -> dict:
    """Role statistics of `model`'s own samples: what the task's ``summary.json["task"]`` reports.

    Samples one completion per prompt, labels it, and measures the policy's entropy (at `temperature`)
    at every completion token. Returns ``pivot_fraction`` (pivot tokens / reasoning tokens, pooled),
    ``entropy_by_role`` ({pivot, filler, answer}: mean entropy in nats over tokens of that role),
    ``mean_reasoning_tokens`` (per labelled completion), ``labelled`` and ``unlabelled`` counts.
    """
    from oar_rl.importance.baselines import entropy_importance
    from oar_rl.sampling import sample_ids

    samples = sample_ids(
        model, tokenizer, prompts, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed
    )
    sums = {PIVOT: 0.0, FILLER: 0.0, ANSWER: 0.0}
    counts = {PIVOT: 0, FILLER: 0, ANSWER: 0}
    labelled = 0
    for start in range(0, len(samples), batch_size):
        chunk = [s for s in samples[start : start + batch_size] if s[1].numel()]
        if not chunk:
            continue
        p_ids, p_mask = _left_pad([p for p, _ in chunk], tokenizer.pad_token_id)
        c_ids, c_mask = _right_pad([c for _, c in chunk], tokenizer.pad_token_id)
        ent = entropy_importance(model, p_ids, p_mask, c_ids, c_mask, temperature=temperature)  # (N, C)
        pivot, filler, known = role_masks(c_ids, c_mask, tokenizer, labeller)
        answer = c_mask.bool() & known[:, None] & ~pivot & ~filler  # (N, C)
        labelled += int(known.sum())
        for role, m in ((PIVOT, pivot), (FILLER, filler), (ANSWER, answer)):
            sums[role] += float(ent[m].sum())
            counts[role] += int(m.sum())
    reasoning = counts[PIVOT] + counts[FILLER]
    return {
        "pivot_fraction": counts[PIVOT] / reasoning if reasoning else None,
        "entropy_by_role": {r: (sums[r] / counts[r] if counts[r] else None) for r in (PIVOT, FILLER, ANSWER)},
        "mean_reasoning_tokens": reasoning / labelled if labelled else None,
        "labelled": labelled,
        "unlabelled": len(samples) - labelled,
        "temperature": temperature,
    }


def _left_pad(rows: list[torch.Tensor], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = r
        mask[i, width - len(r) :] = 1
    return ids, mask


def _right_pad(rows: list[torch.Tensor], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        mask[i, : len(r)] = 1
    return ids, mask


def completion_token_roles(completion_ids: Sequence[int], tokenizer, labeller: Labeller) -> list[str] | None:
    """One role per token of a single completion (the study's `label_roles` shape), or None if unknown.

    Special tokens (e.g. a trailing EOS) are left out of the labelled text and counted with the answer
    span: they are neither pivots nor filler.
    """
    import torch

    ids = torch.tensor([list(completion_ids)], dtype=torch.long)  # (1, T)
    pivot, filler, known = role_masks(ids, torch.ones_like(ids), tokenizer, labeller)
    if not bool(known[0]):
        return None
    pairs = zip(pivot[0].tolist(), filler[0].tolist(), strict=True)
    return [PIVOT if p else FILLER if f else ANSWER for p, f in pairs]
