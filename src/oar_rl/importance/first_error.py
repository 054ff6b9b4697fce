"""First-error credit (``credit="first-error"``; not in the OAR paper, issue 26).

In a wrong rollout (A_i < 0) the blame goes to the *first* token after which the policy itself can no
longer reach the gold answer: the smallest t such that the greedy continuation of y_≤t is wrong while
that of y_<t is right. It is found by a search over the row's scored (reasoning) tokens with batched
greedy continuations. That token gets importance 1, every other token 0, and the scores go through the
same Eq. 14-17 reshaping as OAR's (with τ = 0.4, β = 2 the first error gets 3× the weight of the others
before the sum-preserving rescale). Correct rollouts, rows the policy cannot solve even before their
first scored token, and rows whose whole reasoning still continues to the right answer (the slip is in
the answer itself) get no score: uniform weights, as GRPO.

Why (issue 26, `results/blame/`): OAR-P and OAR-G score what the answer *reads from*. When an early
slip is carried forward by later, correct steps, the last result scores highest and the slip average:
on a wrong rollout OAR multiplies the penalty on correct work. The greedy continuation is a
one-sample Monte-Carlo value of the prefix (VinePPO, Kazemnejad et al. 2024, estimates it with several
samples); locating the first step whose value drops by bisection is OmegaPRM's (Luo et al. 2024)
divide-and-conquer search for the first error; Math-Shepherd (Wang et al. 2024) labels steps by the
same continuation test. Using the located token as an OAR-style importance (a larger share of the
sequence's negative advantage) is this project's construction.

The search, in few sequential rounds (issue 35). A binary search over T candidates needs ⌈log₂ T⌉
halvings, each one round of greedy generation that waits for the previous one; on a GPU a round costs
about the same whether it continues 8 prefixes or 200, so the rounds are the cost. With branching
k = 2^d (`OARConfig.first_error_branching`) each round continues, for every searching row, all the cut
points the binary search *could* query in its next d halvings (the k − 1 nodes of that depth-d
subtree of its decision tree), then walks those d halvings with the answers. The located token is
therefore the binary search's own, always, not only where the outcome is monotone; the two checks of
the search's ends (right before the first candidate, wrong after the last) share the first round.
Rounds per step: ⌈⌈log₂ T⌉ / d⌉ (at least 1); continuations per row ≤ 2 + (k − 1)·rounds, against
2 + ⌈log₂ T⌉ for k = 2 (and 1 + ⌈log₂ T⌉ rounds before issue 35, which checked the ends in a round of
their own). Fewer rounds did not make the search faster where it was measured, so the default is
k = 2, the binary search, on every device; k is exposed for larger models, whose rounds may dominate.
`oar-rl bench --shape wordproblems --methods none,first-error-k2,first-error-k4,first-error-k8,
first-error-k16 --prompts 4 --num-generations 8 --no-scorers`, rounds / generated tokens / importance
seconds per step for k = 2 / 4 / 8 / 16:

- this project's shared 2-core CPU (`--repeats 3 --threads 1`, load ~8): 7 / 4 / 3 / 2 rounds, 9.8k /
  13.3k / 18.5k / 25.2k tokens, 39 / 45 / 64 / 23 s (the last is load noise), the step 9.0× / 13.1× /
  13.7× / 13.1× GRPO's;
- one H100 (`--repeats 2 --threads 0`, 2026-11-26, results/gpu-check-h100-2026-11-26-after): 7 / 4 / 3 /
  2 rounds, 10.4k / 13.5k / 19.2k / 25.3k tokens, 5.5 / 6.9 / 9.7 / 12.0 s, the step 12.1× / 15.0× /
  20.7× / 25.3× GRPO's. On this 0.19M-parameter model a round's cost grows with its continuations even on
  the GPU (transformers' sampling loop over a longer, wider batch), so the extra continuations cost more
  than the rounds they save.

Reusing greedy runs (issue 33; `OARConfig.first_error_reuse_greedy`, on by default). A cut inside a run
of tokens the policy would itself have chosen has the same greedy continuation, so the same check, as the
run's other cuts (:mod:`oar_rl.importance.greedy_runs`). One teacher-forced pass marks the runs; each
round then generates only for runs not yet answered, from the run's last cut. The search asks the same
questions and, in exact arithmetic, gets the same answers, so the located token does not change (in
float32 another batch composition may flip a near-tie of `generate` either way, as another batch size
can without the reuse; measured below: no change). Each continuation checks the premise (its first token
is the pass's argmax) and a disagreement warns and repeats the search without the reuse.

Measured (`results/first-error-reuse/`): on one H100, `oar-rl bench --shape wordproblems --methods
none,first-error,first-error-plain --prompts 4 --num-generations 8 --repeats 3 --threads 0`,
importance 2.24 s per step against 5.03 s without the reuse (continuations 93 vs 155, generated tokens
4.3k vs 10.0k; the step 5.1× GRPO's against 9.5×), no warning. On this project's 2-core CPU
(`python -m experiments.first_error_reuse --train-steps 3`): identical located tokens on all 121 rows with
a flip of three long-regime batches of 16 × 8, continuations −34%, generated tokens −36% (its seconds
ran beside other jobs: not a timing); three training steps on the long screen's recipe give
bit-identical weights with the reuse and without.

Continuing from the rollouts' own cache (issue 46; `OARConfig.first_error_decode`, "cached" by default).
The continuations no longer go through ``generate``: :mod:`oar_rl.importance.greedy_decode` cuts each
prefix's key-value cache out of one teacher-forced pass over the searched rollouts (no prefill), decodes
greedily with finished rows leaving the batch and, on Llama-shaped models, verifies prompt-lookup drafts
(the batch's own texts) several tokens per forward. Same questions, same argmax, so the same located
tokens (tests/test_greedy_decode.py compares them with the ``generate`` search's on the long warm start's
rollouts); "generate" keeps the search before issue 46. `oar-rl bench --shape wordproblems-long --methods
none,first-error-generate,first-error --prompts 4 --num-generations 8 --repeats 3 --no-scorers
--threads 1`, this project's 2-core CPU shared with three other jobs (load 1.6-3), three runs: the step
1.64× / 1.67× / 1.78× GRPO's against 3.18× / 3.24× / 3.52× with "generate", importance 1.1 / 1.8 / 2.1 s
against 3.9 / 7.6 / 6.8 s, the same 6 rounds and 63-67 continuations in 406 / 406 / 381 forwards one
after the other against 1,611 / 1,611 / 1,402 (docs/results/cost.md). Short of the ≤ 1.5× goal: ~400
decode forwards, each ~1 ms of per-op overhead plus attention over 400-700 cached columns for 25-50 positions.

Finished prefixes. A completion prefix that ends in an end-of-sequence token is a finished rollout: its
continuation is empty (:func:`finished`), so the check reads the rollout as the reward did. Continuations
stop at the tokenizer's EOS and at every EOS of the model's generation config, as TRL's rollouts do
(:func:`eos_token_ids`), and are cut after their first EOS.

Assumptions, stated: the search assumes the continuation value is monotone along the rollout (right
up to the first error, wrong after it); where it is not, it returns *a* flip point (a candidate whose
prefix continues wrong while the one before continues right), not necessarily the first. Greedy decoding
stands in for the policy's expected value: exact for a policy that is greedy-correct on its training
problems, an approximation elsewhere (the testbed's warm start is greedy-correct on 298 of its 300
reviewed training problems). Each continuation gets the completion budget the row had left
(`max_new_tokens` − prefix).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from oar_rl.importance.greedy_decode import (
    DecodeCost,
    RolloutCache,
    continue_from_cache,
    generate_continuations,
    rollout_cache,
)
from oar_rl.importance.greedy_runs import GreedyRuns, greedy_departures, greedy_runs
from oar_rl.model_parts import architecture_name, eval_mode
from oar_rl.probes import ScoringBatch

DEFAULT_BRANCHING = 2
"""The binary search: the fastest k measured on a CPU and on an H100 (module docstring)."""
DECODES = ("cached", "generate", "generate-lookup", "generate-static")
"""Continuations from the rollouts' own key-value cache in a lean loop (:mod:`~.greedy_decode`), or by
``generate`` (before issue 46): batched, per prefix with prompt lookup, or over a static cache (issue 58)."""
DEFAULT_DECODE = "cached"
"""The decode a search uses when its caller names none (`oar-rl bench` sets it per worker process)."""


def check_decode(decode: str, name: str = "decode") -> str:
    if decode not in DECODES:
        raise ValueError(f"{name} must be one of {', '.join(DECODES)}, got {decode!r}")
    return decode


def check_branching(branching: int, name: str = "branching") -> int:
    """`branching` as an int if it is a power of two >= 2 (the search walks whole binary levels)."""
    k = branching
    if isinstance(k, bool) or not isinstance(k, int) or k < 2 or k & (k - 1):
        raise ValueError(f"{name} must be a power of two >= 2 (2, 4, 8, 16, ...), got {branching!r}")
    return k


@dataclass
class SearchStats:
    """The search's cost: rounds, continuations, positions computed (padding, drafts) and tokens kept."""

    calls: int = 0  # calls of first_error_positions with at least one generation round
    rounds: int = 0
    continuations: int = 0
    reused: int = 0  # cuts answered from a run already continued (greedy_runs), nothing generated
    generated_tokens: int = 0
    continued_tokens: int = 0  # the continuations' own tokens (EOS included): the same for either decode
    forwards: int = 0  # forwards of the continuations, one after the other (prefill included)
    pass_seconds: float = 0.0  # the teacher-forced pass over the searched rollouts (runs, cache)
    decode_seconds: float = 0.0  # the continuations (generate: prefill and decode; cached: decode)
    check_seconds: float = 0.0  # detokenizing and checking the continued texts

    def add(self, other: SearchStats) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


_RECORDERS: list[SearchStats] = []


@contextlib.contextmanager
def recording() -> Iterator[SearchStats]:
    """Sums the searches run inside the block; blocks nest, each removing its own recorder by identity."""
    stats = SearchStats()
    _RECORDERS.append(stats)
    try:
        yield stats
    finally:
        del _RECORDERS[next(i for i, r in enumerate(_RECORDERS) if r is stats)]


def eos_token_ids(model: nn.Module, tokenizer) -> list[int]:
    """The ids that end a rollout, as TRL's GRPOTrainer stops them: the tokenizer's EOS, then every EOS
    of the model's generation config."""
    config = getattr(model, "generation_config", None)
    ids = getattr(config, "eos_token_id", None) if config is not None else None
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    eos = tokenizer.eos_token_id
    if eos is not None and eos not in ids:
        ids = [eos, *ids]
    return [int(i) for i in ids]


def finished(completion_prefix: Sequence[int], eos: Collection[int]) -> bool:
    """Whether a completion prefix is a finished rollout (it ends in an EOS token): its continuation is
    empty. The one place the search decides it."""
    return len(completion_prefix) > 0 and int(completion_prefix[-1]) in eos


def _continue_greedy(
    model: nn.Module,
    tokenizer,
    prefixes: list[Tensor],
    budgets: list[int],
    *,
    batch_size: int,
    eos: Sequence[int] = (),
    stats: SearchStats | None = None,
    cache: RolloutCache | None = None,
    items: Sequence[tuple[int, int]] = (),
    mode: str = "generate",
) -> list[list[int]]:
    """Greedy continuations (token ids) of each 1-D `prefixes[i]` (prompt + completion prefix), at most
    `budgets[i]` new tokens each (0: none), each stopped at and cut after its first token in `eos`.
    With `cache`, prefix i is row `items[i][0]` of the cache cut after `items[i][1]` completion tokens,
    continued by `continue_from_cache`; else by ``generate`` as `mode` says ("cached": plain ``generate``)."""
    t0 = time.perf_counter()
    cost = DecodeCost()
    if cache is not None:
        conts = continue_from_cache(model, cache, items, budgets, eos=eos, batch_size=batch_size, cost=cost)
    else:
        conts = generate_continuations(model, tokenizer, prefixes, budgets, eos=eos, batch_size=batch_size,
                                       cost=cost, mode="generate" if mode == "cached" else mode)  # fmt: skip
    if stats is not None:
        stats.generated_tokens += cost.tokens
        stats.forwards += cost.forwards
        stats.decode_seconds += time.perf_counter() - t0
        stats.continued_tokens += sum(len(c) for c in conts)
    return conts


def _subtree(lo: int, hi: int, depth: int) -> list[int]:
    """The cut indices a binary search on the open interval (lo, hi) may query in its next `depth`
    halvings: the nodes of that depth of its decision tree."""
    if depth == 0 or hi - lo <= 1:
        return []
    mid = (lo + hi) // 2
    return [mid, *_subtree(lo, mid, depth - 1), *_subtree(mid, hi, depth - 1)]


def _descend(lo: int, hi: int, depth: int, right: dict[int, bool]) -> tuple[int, int]:
    """`depth` halvings of the binary search on (lo, hi) with the answers `right` (index -> right)."""
    for _ in range(depth):
        if hi - lo <= 1:
            break
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if right[mid] else (lo, mid)
    return lo, hi


class _RunsDisagree(RuntimeError):
    """A continuation's first token is not the teacher-forced argmax (`greedy_runs`' premise fails)."""


def first_error_positions(
    model: nn.Module,
    batch: ScoringBatch,
    *,
    tokenizer,
    gold: Sequence[str],
    check: Callable[[str, str], bool],
    rows: Sequence[int],
    max_new_tokens: int,
    batch_size: int = 64,
    branching: int = DEFAULT_BRANCHING,
    stats: SearchStats | None = None,
    reuse_greedy: bool = True,
    decode: str | None = None,
) -> dict[int, int | None]:
    """{row: completion index of its first error, or None (no flip found)} for the rows `rows`.

    The binary search over each row's scored tokens, d = log₂ `branching` halvings per round (module
    docstring); all searching rows share each round's batched greedy continuations. `reuse_greedy`: answer
    every cut from its run of greedy tokens (:mod:`oar_rl.importance.greedy_runs`; same questions, same
    answers, fewer continuations); if a continuation contradicts the runs, warns and searches again
    without them. `decode`: one of :data:`DECODES` (None: :data:`DEFAULT_DECODE`). `stats` (and any
    :func:`recording` block) gets the rounds, continuations, reused answers, generated tokens and seconds.
    """
    levels = check_branching(branching).bit_length() - 1
    decode = check_decode(DEFAULT_DECODE if decode is None else decode)
    cost = SearchStats()
    args = (model, batch, tokenizer, gold, check, rows, max_new_tokens, batch_size, levels, cost, decode)
    try:
        out = _search(*args, reuse=reuse_greedy)
    except _RunsDisagree as err:
        warnings.warn(
            f"first-error: {err}; the teacher-forced pass and generate() disagree on "
            f"{architecture_name(model)}, so this search runs again without reusing greedy runs",
            RuntimeWarning,
            stacklevel=2,
        )
        out = _search(*args, reuse=False)
    if cost.rounds:
        cost.calls = 1
    for sink in ([stats] if stats is not None else []) + _RECORDERS:
        sink.add(cost)
    return out


def _search(
    model, batch, tokenizer, gold, check, rows, max_new_tokens, batch_size, levels, cost, decode: str, *,
    reuse: bool,
) -> dict[int, int | None]:  # fmt: skip
    """The search of :func:`first_error_positions`, adding its cost to `cost`."""
    P = batch.prompt_len
    scored = batch.scored("lt-logits").cpu()  # (B, C) valid (reasoning) tokens
    cand = {b: scored[b].nonzero().flatten().tolist() for b in rows}
    prompt = {b: batch.input_ids[b, :P][batch.attention_mask[b, :P].bool()] for b in rows}
    comp = {b: batch.input_ids[b, P:] for b in rows}
    comp_ids = {b: comp[b].tolist() for b in rows}
    prompt_ids = {b: tuple(prompt[b].tolist()) for b in rows}
    eos = eos_token_ids(model, tokenizer)
    eos_set = set(eos)
    live = [b for b in rows if cand[b]]
    departures = greedy_departures(model) if reuse and live else []
    if departures:
        warnings.warn(
            f"first-error: the generation config of {architecture_name(model)} sets {', '.join(departures)}, "
            "so greedy generate() may not take the argmax; the search does not reuse greedy runs",
            RuntimeWarning,
            stacklevel=3,
        )
        reuse = False
    t0 = time.perf_counter()
    cached = decode == "cached"
    source, hidden = _rollout_cache(model, batch, live, batch_size) if cached and live else (None, None)
    slot = {b: i for i, b in enumerate(live)}  # row of the cache
    runs = _runs(model, batch, live, eos, batch_size, hidden) if reuse else {}
    cost.pass_seconds += time.perf_counter() - t0
    known: dict[tuple, bool] = {}  # (prompt, completion up to the run's first cut, gold) -> check

    def cut(b: int, i: int) -> int:
        """Completion tokens kept for the cut after candidate index i (-1: before the first candidate)."""
        return cand[b][0] if i < 0 else cand[b][i] + 1

    def generate(queries: list[tuple[int, int]]) -> tuple[list[bool], list[list[int]], list[int]]:
        """Whether the greedy continuation after completion[:n] of row b reaches the gold, per (b, n);
        with the continuations and their budgets."""
        cost.rounds += 1
        cost.continuations += len(queries)
        heads = [comp_ids[b][:n] for b, n in queries]
        prefixes = [torch.cat([prompt[b], comp[b][:n]]) for b, n in queries]
        budgets = [
            0 if finished(h, eos_set) else max(0, max_new_tokens - n)
            for h, (_, n) in zip(heads, queries, strict=True)
        ]
        conts = _continue_greedy(
            model, tokenizer, prefixes, budgets, batch_size=batch_size, eos=eos, stats=cost, cache=source,
            items=[(slot[b], n) for b, n in queries] if source is not None else (), mode=decode,
        )  # fmt: skip
        t0 = time.perf_counter()
        texts = tokenizer.batch_decode(
            [h + c for h, c in zip(heads, conts, strict=True)], skip_special_tokens=True
        )
        ok = [bool(check(t, str(gold[b]))) for t, (b, _) in zip(texts, queries, strict=True)]
        cost.check_seconds += time.perf_counter() - t0
        return ok, conts, budgets

    def correct(queries: list[tuple[int, int]]) -> list[bool]:
        if not queries:
            return []
        if not reuse:
            return generate(queries)[0]
        keys = [  # the text up to the run's first cut, and the gold it is checked against
            (prompt_ids[b], tuple(comp_ids[b][: runs[b].start[n]]), str(gold[b])) for b, n in queries
        ]
        todo: dict[tuple, tuple[int, int]] = {}  # each unknown run, continued from its longest last cut
        for k, (b, n) in zip(keys, queries, strict=True):
            e = runs[b].end[n]
            if k not in known and (k not in todo or e > todo[k][1]):
                todo[k] = (b, e)
        cost.reused += len(queries) - len(todo)
        if todo:
            pairs = list(todo.values())
            ok, conts, budgets = generate(pairs)
            for (b, e), cont, budget in zip(pairs, conts, budgets, strict=True):
                expected = runs[b].top[e]
                if budget > 0 and expected >= 0 and (not cont or cont[0] != expected):
                    got = cont[0] if cont else "nothing"
                    raise _RunsDisagree(
                        f"row {b}: after {e} completion tokens generate() continued with {got}, the "
                        f"forward pass's sure argmax is token {expected}"
                    )
            known.update(zip(todo, ok, strict=True))
        return [known[k] for k in keys]

    lo = {b: -1 for b in live}  # index into cand[b] known right (-1: before the first candidate)
    hi = {b: len(cand[b]) - 1 for b in live}  # index known wrong (after the ends are checked)
    ends = True  # the first round also checks both ends of every row
    searched: list[int] = []
    while live:
        plan = {b: _subtree(lo[b], hi[b], levels) for b in live}
        queries = [(b, i) for b in live for i in ([-1, hi[b]] if ends else []) + plan[b]]
        answers = correct([(b, cut(b, i)) for b, i in queries])
        right: dict[int, dict[int, bool]] = {b: {} for b in live}
        for (b, i), ok in zip(queries, answers, strict=True):
            right[b][i] = ok
        if ends:  # right before the first candidate, wrong after the last: else no flip to find
            live = [b for b in live if right[b][-1] and not right[b][hi[b]]]
            searched = list(live)
            ends = False
        for b in live:
            lo[b], hi[b] = _descend(lo[b], hi[b], levels, right[b])
        live = [b for b in live if hi[b] - lo[b] > 1]
    out: dict[int, int | None] = {b: None for b in rows}  # rows dropped at the ends keep None
    out.update({b: cand[b][hi[b]] for b in searched})
    return out


def _rollout_cache(model, batch: ScoringBatch, rows: list[int], batch_size: int):
    """(the rollouts' key-value cache, the body's hidden states) of the searched rows, in the order of
    `rows`; (None, None) for a model whose body or cache the lean decode cannot run (it then uses
    ``generate``)."""
    index = torch.tensor(rows, device=batch.input_ids.device)
    try:
        ids, att = batch.input_ids[index], batch.attention_mask[index]
        return rollout_cache(model, ids, att, batch.prompt_len, batch_size=batch_size)
    except (AttributeError, ValueError, TypeError):
        return None, None


def _runs(
    model, batch: ScoringBatch, rows: list[int], eos: list[int], batch_size: int, hidden: Tensor | None = None
) -> dict:
    """{row: GreedyRuns} of the searched rows (`hidden`: their body's hidden states, if already run). A
    row whose valid tokens are not a prefix of its completion, and every row of a model without a decoder
    body and LM head oar-rl can run (`model_parts`), gets runs of one cut each: nothing is reused there,
    the search is the plain one."""
    if not rows:
        return {}
    index = torch.tensor(rows, device=batch.input_ids.device)
    mask = batch.completion_mask[index].cpu()
    lengths = mask.sum(dim=1).tolist()
    try:
        found = greedy_runs(
            model, batch.input_ids[index], batch.attention_mask[index], batch.prompt_len, lengths, eos,
            batch_size=batch_size, hidden=hidden,
        )  # fmt: skip
    except (AttributeError, ValueError):  # no body / LM head oar-rl can run: every cut is its own run
        found = [None] * len(rows)
    out = {}
    for r, (b, L, g) in enumerate(zip(rows, lengths, found, strict=True)):
        if g is None or not bool(mask[r, :L].all()):
            g = GreedyRuns(list(range(L + 1)), list(range(L + 1)), [-1] * (L + 1))
        out[b] = g
    return out


def first_error_scores(
    model: nn.Module,
    batch: ScoringBatch,
    *,
    tokenizer,
    gold: Sequence[str],
    check: Callable[[str, str], bool],
    direction: Tensor,
    max_new_tokens: int,
    batch_size: int = 64,
    branching: int = DEFAULT_BRANCHING,
    probe: str | None = None,
    reuse_greedy: bool = True,
    decode: str | None = None,
) -> Tensor:
    """(B, C) float32: 1 at each wrong row's first error (:func:`first_error_positions`), 0 elsewhere.

    Args:
        tokenizer: decodes prefixes and continuations for `check`.
        gold: per row, the gold answer the reward checks against.
        check: (completion text, gold) -> correct; the task's exact checker.
        direction: (B,) sign of each row's advantage; only rows with direction < 0 are searched.
        max_new_tokens: the completion budget (a continuation gets what the prefix left of it).
        branching: k = 2^d, cut points per row per round + 1 (module docstring); the located tokens do
            not depend on it, the number of sequential generation rounds does.
        probe: ignored (no outcome probe); accepted so the trainer calls every bi-level scorer alike.
        reuse_greedy: answer cuts from their runs of greedy tokens (:func:`first_error_positions`); the
            located tokens do not depend on it, the continuations generated do.
        decode: one of :data:`DECODES` (:func:`first_error_positions`; None: :data:`DEFAULT_DECODE`).
    """
    del probe
    check_branching(branching)
    if decode is not None:
        check_decode(decode)
    B, C = batch.completion_mask.shape
    if len(gold) != B:
        raise ValueError(f"gold has {len(gold)} answers for a batch of {B} rows")
    if tuple(direction.shape) != (B,):
        raise ValueError(f"direction must have shape ({B},), got {tuple(direction.shape)}")
    if int(max_new_tokens) < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    out = torch.zeros(B, C, dtype=torch.float32, device=batch.input_ids.device)
    rows = [b for b in range(B) if float(direction[b]) < 0]
    if not rows:
        return out
    with torch.no_grad(), eval_mode(model):
        found = first_error_positions(
            model,
            batch,
            tokenizer=tokenizer,
            gold=gold,
            check=check,
            rows=rows,
            max_new_tokens=int(max_new_tokens),
            batch_size=batch_size,
            branching=branching,
            reuse_greedy=reuse_greedy,
            decode=decode,
        )
    for b, t in found.items():
        if t is not None:
            out[b, t] = 1.0
    return out
