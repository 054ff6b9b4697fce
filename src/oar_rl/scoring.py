"""What a caller knows when it scores a batch: :class:`ScoringContext`, the one context of every credit rule.

The trainer (`OARTrainer._score`), `oar-rl blame` and the standalone analyses (`compute_importance`,
without the outcome) build it; a rule's `options` (`oar_rl.register_credit`) turns it into the scorer's
keyword arguments, or hands it over whole (``options=lambda ctx: {"ctx": ctx}``). Its *outcome* fields
let a rule read how each rollout ended (the gold answers, the answer check, the sequence advantages,
the completion budget): `first-error` and `save-prefix` are built on them, and so can a user's rule be
(docs/guides/own-credit-rule.md). A field a caller could not fill is None, and a rule reads it with
:meth:`ScoringContext.need`, which refuses loudly, naming the field and how to supply it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import torch
from torch import Tensor


class RuleError(ValueError):
    """A credit rule failed: its `options`, its scorer, or the check of its scores. The message names the
    rule, the value and what is valid, in one line (`oar-rl` prints it so; `--debug`: the traceback)."""


class MissingOutcome(RuleError):
    """A rule read an outcome field (:attr:`ScoringContext.OUTCOME`) its caller did not give."""

    field: str = ""
    """The field read."""


class NotStandalone(RuleError):
    """A rule registered as standalone read an outcome field that standalone scoring (`oar-rl attribute`,
    `oracle`, the study's recall) never gives: it needs ``standalone=False``."""


@dataclass(frozen=True)
class ScoringContext:
    """What a caller knows when it scores a batch; a rule's `options` turns it into scorer kwargs.

    The same context reaches every rule, built-in or from a user's file, in training (`OARTrainer`), in
    `oar-rl blame` and, without the outcome fields, in the standalone analyses (`compute_importance`).
    The *outcome* fields (`gold`, `check`, `advantages`, `max_new_tokens`) let a rule read how each
    rollout ended, as `first-error` and `save-prefix` do; a rule reads them with :meth:`need`, which
    names the field and where it comes from when a caller has none. Per-row fields are aligned with the
    scored batch's rows.
    """

    settings: Mapping[str, Any] = field(default_factory=dict)
    """`OARConfig`'s field values (the trainer's config; the analyses pass its defaults)."""
    probe: str = "lt-logits"
    """The outcome probe in effect (given to rules with `probe=True`)."""
    generator: Any = None
    """One CPU `torch.Generator`, or one per row (the trainer's row-keyed draws); rules with `noisy=True`."""
    batch_size: int | None = None
    """Rows per forward pass (the trainer: TRL's micro-batch size)."""
    temperature: float = 1.0
    """The sampling temperature."""
    tokenizer: Any = None
    """The policy's tokenizer (to decode completions), when the caller has one."""
    gold: Sequence[str] | None = None
    """Outcome: each row's gold answer (training: the dataset column `OARConfig.gold_column`; `blame`: the
    task's answers). None where the caller has none (e.g. a dataset without that column)."""
    check: Callable[[str, str], bool] | None = None
    """Outcome: the task's answer check, ``(completion text, gold) -> correct`` (training: the trainer's
    `answer_check`, by default the math-verify accuracy reward; the study: the task's own check)."""
    advantages: Tensor | None = None
    """Outcome: (B,) float, each row's sequence advantage A_i (training: GRPO's group-normalised
    advantage; `blame`, which scores wrong rollouts: −1 per row). Its sign says right (> 0) or wrong."""
    max_new_tokens: int | None = None
    """The completion budget (`OARConfig.max_completion_length`): what a continuation may generate."""
    extras: Mapping[str, Any] = field(default_factory=dict)
    """Anything else a caller passes (none of oar-rl's own callers do; kept for a user's own caller)."""

    OUTCOME: ClassVar[tuple[str, ...]] = ("gold", "check", "advantages", "max_new_tokens")

    def need(self, name: str, rule: str) -> Any:
        """The field `name` for the rule `rule`, or a ValueError that names the field, the rule and how
        a caller supplies it (never a silent default)."""
        names = [f.name for f in fields(self)]
        if name not in names:
            raise ValueError(f"ScoringContext has no field {name!r}; its fields: {', '.join(names)}")
        value = getattr(self, name)
        if value is None:
            column = self.settings.get("gold_column", "answer")
            err = (MissingOutcome if name in self.OUTCOME else ValueError)(
                f"credit rule {rule!r} needs ScoringContext.{name}, which this caller did not give: "
                + _SUPPLY.get(name, "pass it when building the ScoringContext").format(column=column)
            )
            err.field = name
            raise err
        return value

    def rows(self, keep: Sequence[bool]) -> ScoringContext:
        """This context for the rows where `keep` is true (per-row fields sliced, in order): for a caller
        that scores a subset of its batch."""
        n = len(self.gold) if self.gold is not None else None
        n = self.advantages.shape[0] if n is None and self.advantages is not None else n
        if n is not None and len(keep) != n:
            raise ValueError(f"ScoringContext.rows: {len(keep)} flags for a context of {n} rows")
        index = [i for i, k in enumerate(keep) if k]
        gen = self.generator
        if isinstance(gen, (list, tuple)) and gen:  # one per row (an empty list: the rule draws none)
            gen = [gen[i] for i in index]
        gold = None if self.gold is None else [self.gold[i] for i in index]
        adv = self.advantages
        if adv is not None:
            adv = adv[torch.tensor(index, dtype=torch.long, device=adv.device)]
        return dataclasses.replace(self, generator=gen, gold=gold, advantages=adv)


_SUPPLY = {
    "gold": "in training, give each prompt's gold answer in the dataset column gold_column={column!r} "
    "(OARConfig.gold_column; a row without it has none); in your own caller, ScoringContext(gold=[...]), "
    "one answer per row",
    "check": "OARTrainer(answer_check=...) or ScoringContext(check=...): (completion text, gold) -> bool",
    "advantages": "ScoringContext(advantages=...): a (B,) tensor of each row's sequence advantage",
    "max_new_tokens": "ScoringContext(max_new_tokens=...): the completion budget",
    "tokenizer": "ScoringContext(tokenizer=...): the policy's tokenizer",
}
