"""Datasets for training and evaluation, all normalised to a ``prompt`` (str) and an ``answer`` (str) column.

``load(name_or_path, split=None, *, template="answer-tag", limit=None, data_files=None)``:

* a Hub benchmark -- ``gsm8k``, ``math500``, ``aime24``, ``aime25``, ``amc23``, ``dapo-math``
  (``dapo-math-raw`` for the undeduplicated original); see `oar_rl.data.benchmarks`;
* ``arithmetic`` -- the embedded synthetic task (`oar_rl.data.arithmetic`, imported lazily). Its prompts
  are already in the answer-tag format the embedded model is warm-started on, so ``template`` must be
  ``"answer-tag"`` (the default; prompts unchanged) or None;
* a local ``.jsonl`` / ``.json`` / ``.parquet`` file, with ``question_column`` / ``answer_column`` naming the
  columns (defaults: the first of prompt/question/problem and of answer/final_answer/ground_truth/solution;
  a one-element list gold is its element, a list of several is refused, and an automatically chosen
  ``solution`` column of worked solutions is refused: name the answer column).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from oar_rl.data.benchmarks import (
    HUB_DATASETS,
    LOCAL_EXTENSIONS,
    load_hub,
    load_local_file,
    local_spec,
    normalise,
)
from oar_rl.data.templates import TEMPLATE_NAMES, apply_template, check_template

if TYPE_CHECKING:
    from datasets import Dataset

NAMES: tuple[str, ...] = (*HUB_DATASETS, "arithmetic")

__all__ = ["HUB_DATASETS", "NAMES", "TEMPLATE_NAMES", "apply_template", "is_known", "load"]


def is_local_path(name: str) -> bool:
    """Whether ``name`` denotes a local data file (by its extension)."""
    return Path(name).suffix.lower() in LOCAL_EXTENSIONS


def is_known(name: str) -> bool:
    """Whether ``load`` accepts ``name`` (a known name or a path with a supported extension)."""
    return name in NAMES or is_local_path(name)


def load(
    name: str | os.PathLike,
    split: str | None = None,
    *,
    template: str | None = "answer-tag",
    limit: int | None = None,
    data_files: str | Sequence[str] | None = None,
    question_column: str | None = None,
    answer_column: str | None = None,
) -> Dataset:
    """The dataset ``name`` as a `datasets.Dataset` with ``prompt`` and ``answer`` (str) columns first.

    ``split``: the split (None: the dataset's default -- the test split for benchmarks, ``train`` for
    ``dapo-math`` and ``arithmetic``). ``limit``: keep only the first ``limit`` rows (>= 1).
    ``data_files``: local file(s) in the Hub schema of ``name``, used instead of the Hub.
    Raises ValueError for an unknown name, a missing column, or a bad argument.
    """
    name = os.fspath(name)
    template = check_template(template)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be an int >= 1 or None, got {limit!r}")
    if name == "arithmetic":
        if template not in (None, "answer-tag"):
            raise ValueError(
                f"template {template!r} is not available for 'arithmetic': its prompts are fixed to the "
                "answer-tag format; use template='answer-tag' or None"
            )
        from oar_rl.data import arithmetic

        ds = arithmetic.load(split or "train")
        return ds.select(range(min(limit, len(ds)))) if limit is not None else ds
    if name in HUB_DATASETS:
        return load_hub(name, split, template=template, limit=limit, data_files=data_files)
    if is_local_path(name):
        if split is not None and split != "train":
            raise ValueError(f"a local file has a single split 'train', got split={split!r}")
        ds = load_local_file(name)
        spec = local_spec(ds, question_column=question_column, answer_column=answer_column, name=name)
        return normalise(ds, spec, template=template, limit=limit)
    raise ValueError(
        f"unknown dataset {name!r}; valid names: {', '.join(NAMES)}, "
        f"or a local file ending in {', '.join(LOCAL_EXTENSIONS)}"
    )
