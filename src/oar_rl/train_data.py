"""`oar-rl train`'s data: the training set, checked before the model loads (`oar_rl.train`).

The columns are checked as soon as the dataset is loaded, before any model: `prompt`, `answer` where the
accuracy reward needs it, and the gold column (`--gold_column`) where the credit rule reads the gold
answers (a rule registered with ``standalone=False``, or any column named other than the default).
The shipped word-problem model was trained on raw prompts (no template): with a local file and no
`--template`, none is applied (:func:`template_for_model`), and a template it does not know is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SHIPPED_TEMPLATE = "none"
"""The prompt format of the shipped word-problem models: the problem text as it is (the tasks' own)."""


def check_gold_column(columns: list[str], args: Any, name: str | None) -> None:
    """ValueError naming `--gold_column` and the dataset's columns when the column is missing and the run's
    credit rule reads it: a rule that reads the outcome (``standalone=False``: first-error, save-prefix,
    ..., and a user's outcome rule), or a column named other than the default 'answer'."""
    from oar_rl.credit_names import registered
    from oar_rl.credits import CREDIT_MODES

    column = args.gold_column
    mode = CREDIT_MODES.get(registered(args.credit))
    reads = mode is not None and mode.scorer is not None and not mode.standalone
    if column in columns or not (reads or column != "answer"):
        return
    who = f"credit={args.credit!r}, which reads the gold answers" if reads else "the gold answers' column"
    raise ValueError(
        f"--gold_column {column!r}: dataset {name!r} has no such column ({who}); its columns: "
        f"{', '.join(columns)}"
    )


def template_for_model(data_args: Any, model: str) -> str | None:
    """The template note of a run of the shipped word-problem model (`model`: the resolved path) on a local
    file, else None. No `--template`: none is applied (`data_args.template` set to 'none'), the raw
    prompts the shipped model was trained on; another template: ValueError (every completion would be
    clipped and rewarded 0)."""
    from oar_rl import data
    from oar_rl.data.templates import check_template
    from oar_rl.shipped import SHIPPED_DIR

    shipped = Path(model).expanduser().resolve().is_relative_to(SHIPPED_DIR.resolve())
    if not shipped or not data_args.dataset or not data.is_local_path(data_args.dataset):
        return None
    if data_args.template is None:
        data_args.template = SHIPPED_TEMPLATE
        return "none: raw prompts, the shipped model's format (chosen for a local file)"
    if check_template(data_args.template) is not None:
        raise ValueError(
            f"--template {data_args.template}: the shipped word-problem model was trained on raw prompts "
            "(no template) and has never seen this one, so its completions would be clipped and rewarded 0; "
            "leave --template out (or give --template none), or train a model that knows the template"
        )
    return None


def load_train_dataset(data_args: Any, reward_names: list[str], args: Any = None):
    """The training `datasets.Dataset`, checked for the columns the rewards need and, given the run's
    `OARConfig` `args`, for the gold column its credit rule reads (:func:`check_gold_column`)."""
    from oar_rl import data

    if not data_args.dataset:
        raise ValueError(
            "--dataset is required (or TRL's --dataset_name): a name known to oar_rl.data or a local path"
        )
    if data_args.limit is not None and data_args.limit < 1:
        raise ValueError(f"limit must be >= 1 or None, got {data_args.limit}")
    kwargs: dict[str, Any] = {"limit": data_args.limit, "data_files": data_args.data_files}
    for key in ("template", "question_column", "answer_column"):
        if getattr(data_args, key) is not None:
            kwargs[key] = getattr(data_args, key)
    try:
        dataset = data.load(data_args.dataset, data_args.dataset_split, **kwargs)
    except ValueError as err:
        raise ValueError(f"dataset {data_args.dataset!r}: {err}") from err
    columns = list(dataset.column_names)
    if "prompt" not in columns:
        raise ValueError(f"dataset {data_args.dataset!r} has no 'prompt' column; columns: {columns}")
    if "accuracy" in reward_names and "answer" not in columns:
        raise ValueError(
            f"dataset {data_args.dataset!r} has no 'answer' column, which the accuracy reward needs; "
            f"columns: {columns}"
        )
    if len(dataset) == 0:
        raise ValueError(f"dataset {data_args.dataset!r} (split {data_args.dataset_split!r}) is empty")
    if args is not None:
        check_gold_column(columns, args, data_args.dataset)
    messages = conversational_prompts(data_args, len(dataset))
    if messages is not None:
        dataset = dataset.remove_columns("prompt").add_column("prompt", messages)
    return dataset


def _is_messages(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, dict) and "role" in m and "content" in m for m in value)
    )


def conversational_prompts(data_args: Any, rows: int) -> list[list[dict[str, str]]] | None:
    """The message lists of a local file whose prompt column is conversational (else None), with the
    prompt template applied to the last user message, in the rows `oar_rl.data.load` kept."""
    from oar_rl import data
    from oar_rl.data.benchmarks import DAPO_RAW, load_local_file, local_spec
    from oar_rl.data.templates import apply_template

    if not data.is_local_path(data_args.dataset):
        return None
    raw = load_local_file(data_args.dataset)
    spec = local_spec(raw, question_column=data_args.question_column, answer_column=data_args.answer_column)
    if spec is DAPO_RAW or not len(raw) or not _is_messages(raw[0][spec.question_column]):
        return None  # raw DAPO keeps its flattening (its prompts wrap the problem in instructions)
    template = data_args.template if data_args.template is not None else "answer-tag"
    out = []
    for i, value in enumerate(raw[spec.question_column][:rows]):
        if not _is_messages(value):
            raise ValueError(f"row {i} of {data_args.dataset!r}: prompt is not a list of messages: {value!r}")
        msgs = [{"role": str(m["role"]), "content": str(m["content"])} for m in value]
        last = max((j for j, m in enumerate(msgs) if m["role"] == "user"), default=None)
        if last is None:
            raise ValueError(f"row {i} of {data_args.dataset!r}: the conversation has no user message")
        msgs[last]["content"] = apply_template(msgs[last]["content"], template)
        out.append(msgs)
    return out


def check_enough_prompts(rows: int, args, name: str | None) -> None:
    """ValueError when the dataset cannot fill one generation batch, i.e. training would do zero steps.

    TRL's `RepeatSampler` drops an incomplete batch of `generation_batch_size / num_generations` prompts;
    with fewer rows than that the trainer stops at step 0 and would still save an untrained model.
    """
    prompts = args.generation_batch_size // args.num_generations
    if rows < prompts:
        raise ValueError(
            f"dataset {name!r} has {rows} row{'s' if rows != 1 else ''} but one generation batch needs "
            f"{prompts} prompts (generation_batch_size {args.generation_batch_size} = "
            f"per_device_train_batch_size x processes x steps_per_generation, / num_generations "
            f"{args.num_generations}): training would do zero optimizer steps. Use more rows (--limit) or "
            "a smaller batch"
        )
