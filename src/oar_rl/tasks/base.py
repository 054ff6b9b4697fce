"""What a task is: `Task` (everything a command needs from one), `WarmStart`, and the helpers both
embedded tasks share (the exact reward and checker, the study's splits over a generator's streams).

A task gives its prompts per split, a TRL reward function, an exact correctness checker, a warm-start
loader, its generator's own named splits as datasets, and optionally a role labeller (ground-truth
`pivot`/`filler`/`answer` per completion token) and extra `OARTrainer` keyword arguments (e.g. a
`token_roles` hook that logs ground-truth credit metrics). `oar-rl study`, `oracle`, `attribute` and
`eval` are generic over this interface.

Splits: `prompts` serves the study's `train` (the RL prompts), `validation` (only for choosing the
learning rate) and `test` (the held-out accuracy the study reports); validation and test are disjoint.
`dataset` serves the generator's own named splits (`split_names`, e.g. train/eval/hard), which the
analysis commands and `oar-rl eval` sample from (`default_split` unless told).

The built-in tasks live in `tasks/arithmetic.py` and `tasks/wordproblems.py`; the registry
(`get_task`, `task_names`, `register`) in `oar_rl.tasks`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oar_rl.answer_span import ANSWER_TAG_PATTERN

SPLITS = ("train", "validation", "test")
ROLES = ("pivot", "filler", "answer")


@dataclass
class WarmStart:
    """A loaded warm start: the model (eval mode), its tokenizer, the saved directory training reloads
    from, and the identity of its recipe (hash + description) for study.json."""

    model: Any
    tokenizer: Any
    path: Path
    recipe_hash: str
    recipe: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    """Everything a command needs from a task (see the module docstring)."""

    name: str
    description: str
    prompts: Callable[[str, int], list[dict[str, Any]]]
    """(split, n) -> n rows, each with at least "prompt" and "answer" (str); every column reaches the
    reward function as a keyword argument, as in TRL."""
    reward: Callable[..., list[float]]
    """A TRL reward function: (completions, answer, **columns) -> list of floats."""
    check: Callable[[str, str], bool]
    """(completion text, gold answer) -> exactly correct; used for held-out accuracy and the oracle."""
    load_warm_start: Callable[[str, str | None], WarmStart]
    """(variant, cache_dir) -> WarmStart; variants are listed in `warm_starts`."""
    warm_starts: tuple[str, ...] = ("default",)
    label_roles: Callable[[str, Sequence[int], Any], Sequence[str] | None] | None = None
    """Optional (prompt, completion token ids, tokenizer) -> one role of `ROLES` per completion token,
    or None where the completion cannot be labelled (it is then left out of the ground-truth recall)."""
    trainer_kwargs: Callable[[], dict[str, Any]] | None = None
    """Optional extra keyword arguments for `OARTrainer` (e.g. {"token_roles": ...})."""
    answer_pattern: str | None = ANSWER_TAG_PATTERN
    """The answer-span pattern of `oar_rl.answer_span.answer_span_mask`. The embedded tasks answer in
    <answer>...</answer>, the span the study always used; pinned here since the library default became
    'rewarded' (issue 17), so the committed study results stay what they were. None: the library's."""
    max_completion_length: int = 72
    probe: str = "as-mean"
    """Outcome probe the study uses for OAR by default (the τ and probe ablations vary around it)."""
    learning_rate: float = 5e-5
    learning_rate_note: str = ""
    """Where the default learning rate comes from; used only when no `--tune-lr` choice exists."""
    load_split: Callable[[str], Any] | None = None
    """Optional split name -> `datasets.Dataset` with "prompt" and "answer" (str) columns: the task
    generator's own named splits (`split_names`), which :meth:`dataset` serves."""
    split_names: tuple[str, ...] = ()
    default_split: str = "eval"
    """The held-out split of :meth:`dataset`: what `oar-rl oracle`, `attribute` and `eval` use by default."""
    cost_per_completion: tuple[float, float, int] | None = None
    """(seconds per trained GRPO completion, per sampled evaluation completion, torch threads) measured for
    this task, for the study's time estimate (`oar_rl.study.plan`); None: the testbed's figures there."""
    micro_batch: int | None = None
    """At most this many rows per forward/backward pass of the study's update (`StudySettings.micro_batch`);
    None: one pass
    per optimizer step. The pretrained regime needs it: one pass over a step's 64 rows does not fit 24 GB."""
    data_task: str | None = None
    """The word-problem generator (`oar_rl.data.wordproblems.SPLITS_BY_TASK`) whose problems this task asks,
    when not its own name (the pretrained regime asks `wordproblems`'); None: its name, or none at all."""
    render: Callable[[str], str] | None = None
    """Optional raw problem text -> the prompt the model sees (the pretrained regime's chat template); None:
    the problem text is the prompt. For commands that start from the generator's problems (`oar-rl blame`)."""

    def dataset(self, split: str | None = None, *, limit: int | None = None) -> Any:
        """The generator's named split `split` (None: `default_split`) as a `datasets.Dataset`, its first
        `limit` rows (None: all); ValueError for a split the task does not have."""
        split = self.default_split if split is None else split
        if self.load_split is None:
            raise ValueError(f"task {self.name!r} has no named data splits")
        if split not in self.split_names:
            raise ValueError(
                f"split {split!r} is not valid for task {self.name!r}; choose {', '.join(self.split_names)}"
            )
        ds = self.load_split(split)
        return ds.select(range(min(limit, len(ds)))) if limit is not None else ds


def exact_check(completion: str, answer: str) -> bool:
    """Whether the completion's last `<answer>` holds the gold integer: the embedded tasks' exact checker
    (`oar_rl.data.arithmetic.check`, looked up when called)."""
    from oar_rl.data.arithmetic import check

    return check(completion, answer)


def exact_reward(completions: list[Any], answer: list[str], **kwargs: Any) -> list[float]:
    """1.0 when the completion's last `<answer>` holds the right integer, else 0.0 (`exact_check`)."""
    from oar_rl.rewards import completion_text

    return [float(exact_check(completion_text(c), a)) for c, a in zip(completions, answer, strict=True)]


def split_rows(
    split: str,
    n: int,
    *,
    draw: Callable[[str, int], Sequence[Any]],
    test_max: int,
    candidates: Callable[[int], Sequence[Any]],
    key: Callable[[Any], Any],
) -> list[dict[str, Any]]:
    """A task's `prompts(split, n)` over its generator's streams (`draw(name, n)`: the first n problems
    of a named stream, each with `.prompt` and `.answer`).

    `train` is the train stream; `test` the first n (at most `test_max`) of the held-out `eval` stream;
    `validation` the first n of `candidates(n)` whose `key` is not among the first `test_max` test
    problems'.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    if n < 0:
        raise ValueError(f"n={n} must be >= 0")
    if split == "train":
        problems = draw("train", n)
    elif split == "test":
        if n > test_max:
            raise ValueError(f"at most {test_max} test problems (the rest is held out), got {n}")
        problems = draw("eval", n)
    else:
        test_keys = {key(p) for p in draw("eval", test_max)}
        problems = [p for p in candidates(n) if key(p) not in test_keys][:n]
        if len(problems) < n:  # pragma: no cover - the candidates are many more than needed
            raise RuntimeError(f"could not draw {n} validation problems disjoint from the test split")
    return [{"prompt": p.prompt, "answer": str(p.answer)} for p in problems]
