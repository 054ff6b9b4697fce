"""Math benchmarks and training sets on the Hugging Face Hub, normalised to ``prompt`` + ``answer`` rows.

Each Hub dataset is one `HubDataset` (id, config, default split, question column, how to get the
answer). Loading goes through `datasets.load_dataset`; the same normalisation runs on local files in
the Hub schema, found through ``data_files=`` or the ``OAR_RL_DATA_DIR`` directory
(``$OAR_RL_DATA_DIR/<name>/<split>.{jsonl,json,parquet}``, or ``$OAR_RL_DATA_DIR/<name>.{…}`` for the
dataset's default split only), which is
how the tests run without a network and how air-gapped machines use pre-downloaded copies.

Output columns: ``prompt`` (the templated question, str), ``answer`` (the gold final answer, str),
``question`` (the raw question, when the source has no such column) and every other source column.
GSM8K's worked solution, which the source calls ``answer``, is kept as ``raw_answer``. A local file whose
answer column holds such worked solutions (every row ending in ``#### 42``) is recognised by its content,
whatever its name, and reduced the same way; a column where only some rows end in ``####`` is refused.

DAPO-Math-17k comes in two schemas, told apart by the columns: the deduplicated
``open-r1/DAPO-Math-17k-Processed`` (``prompt`` str → ``solution``) and the raw
``BytedTsinghua-SIA/DAPO-Math-17k`` (``prompt`` = chat list, answer = ``reward_model.ground_truth``; each
prompt repeated ~100 times). Raw rows are deduplicated by question (first occurrence kept) and the raw
"Solve the following math problem step by step. … Answer: $Answer …" wrapper is stripped, so the
chosen template is the only instruction the policy sees.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oar_rl.data.templates import apply_template
from oar_rl.rewards.extract import missing_gold

if TYPE_CHECKING:
    from datasets import Dataset

DATA_DIR_ENV = "OAR_RL_DATA_DIR"
LOCAL_EXTENSIONS: dict[str, str] = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
QUESTION_CANDIDATES = ("prompt", "question", "problem")
ANSWER_CANDIDATES = ("answer", "final_answer", "ground_truth", "solution")
"""Tried in this order; ``final_answer`` before ``solution``, which holds worked solutions in MATH's and
OlympiadBench's schemas (``solution`` is still the answer of DAPO-Math's processed schema)."""
WORKED_SOLUTION_WORDS = 12
"""An automatically chosen ``solution`` column whose typical row has more words than this holds worked
solutions, not final answers: refused (name the column with answer_column= to use it anyway)."""


def answer_to_str(value: Any) -> str:
    """A gold answer as text: integral floats lose their ``.0`` (AMC23 stores 27.0 for 27); a one-element
    list (OlympiadBench's ``final_answer``) is its element. ValueError for a missing gold, a list of
    several answers (which one would be scored is a guess) and any other non-scalar value."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise ValueError(
                f"a gold answer is a list of {len(value)} answers {value!r}: scoring one of them would be "
                "a guess; keep problems with one final answer, or join them into the form the model "
                "should write"
            )
        value = value[0]
    if missing_gold(value):
        raise ValueError(f"a gold answer is {value!r}: the row has no gold; fix or drop it")
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if not isinstance(value, (str, int, float)):
        raise ValueError(f"a gold answer is a {type(value).__name__} ({value!r}), expected text or a number")
    return str(value).strip()


def gsm8k_answer(solution: str) -> str:
    """GSM8K's final answer: the text after the last ``####``, thousands separators removed."""
    if "####" not in solution:
        raise ValueError(f"GSM8K answer has no '####' marker: {solution[-80:]!r}")
    return solution.split("####")[-1].strip().replace(",", "")


_DAPO_PREFIX = re.compile(r"^\s*Solve the following math problem step by step\..*?\n\n", re.DOTALL)
_DAPO_SUFFIX = re.compile(r"\n\n\s*Remember to put your answer on its own line after \"Answer:\"\.?\s*$")


def strip_dapo_instructions(question: str) -> str:
    """The bare problem of a raw DAPO-Math-17k prompt (its "Answer: $Answer" wrapper removed)."""
    return _DAPO_SUFFIX.sub("", _DAPO_PREFIX.sub("", question)).strip()


def chat_question(messages: Sequence[dict[str, Any]]) -> str:
    """The last user message's content of a chat-format prompt."""
    users = [m for m in messages if m.get("role") == "user"] or list(messages)
    if not users:
        raise ValueError("a chat-format prompt has no messages")
    return str(users[-1].get("content", ""))


@dataclass(frozen=True)
class HubDataset:
    """Where a benchmark lives on the Hub and which columns hold its question and answer."""

    hub_id: str
    """Repository id on the Hugging Face Hub."""
    config: str | None
    """Dataset configuration name (None: the default one)."""
    default_split: str
    """Split used when the caller gives none."""
    question_column: str
    """Column holding the question (a string, or a chat list for raw DAPO)."""
    answer_column: str
    """Column holding the raw answer (a dotted path reads into a struct column)."""
    answer_fn: Callable[[Any], str] = field(default=answer_to_str)
    """Raw answer value -> gold final answer string."""
    question_fn: Callable[[Any], str] = field(default=str)
    """Raw question value -> question text."""
    dedup: bool = False
    """Keep only the first row of each question (raw DAPO repeats every prompt)."""
    raw_answer_column: str | None = None
    """If set, the source's answer column is kept under this name before ``answer`` is overwritten."""


def _dapo_raw_question(value: Any) -> str:
    return strip_dapo_instructions(chat_question(value) if isinstance(value, list) else str(value))


DAPO_RAW = HubDataset(
    hub_id="BytedTsinghua-SIA/DAPO-Math-17k",
    config=None,
    default_split="train",
    question_column="prompt",
    answer_column="reward_model.ground_truth",
    question_fn=_dapo_raw_question,
    dedup=True,
)

HUB_DATASETS: dict[str, HubDataset] = {
    "gsm8k": HubDataset(
        "openai/gsm8k",
        "main",
        "test",
        "question",
        "answer",
        answer_fn=gsm8k_answer,
        raw_answer_column="raw_answer",
    ),
    "math500": HubDataset("HuggingFaceH4/MATH-500", None, "test", "problem", "answer"),
    "aime24": HubDataset("HuggingFaceH4/aime_2024", None, "train", "problem", "answer"),
    "aime25": HubDataset("yentinglin/aime_2025", None, "train", "problem", "answer"),
    "amc23": HubDataset("math-ai/amc23", None, "test", "question", "answer"),
    "dapo-math": HubDataset("open-r1/DAPO-Math-17k-Processed", "en", "train", "prompt", "solution"),
    "dapo-math-raw": DAPO_RAW,
}


def _is_dapo_raw(column_names: Sequence[str], first_prompt: Any) -> bool:
    return "reward_model" in column_names and isinstance(first_prompt, list)


def _read_column(ds: Dataset, path: str) -> list[Any]:
    """A (possibly dotted, struct-nested) column as a Python list; ValueError naming the columns found."""
    head, *rest = path.split(".")
    if head not in ds.column_names:
        raise ValueError(f"answer/question column {path!r} not found; columns found: {list(ds.column_names)}")
    values = ds[head]
    for key in rest:
        try:
            values = [v[key] for v in values]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"column {head!r} has no field {key!r} (needed for {path!r})") from exc
    return list(values)


def _pick(columns: Sequence[str], explicit: str | None, candidates: Sequence[str], what: str) -> str:
    if explicit is not None:
        if explicit.split(".")[0] not in columns:
            raise ValueError(f"{what} column {explicit!r} not found; columns found: {list(columns)}")
        return explicit
    for name in candidates:
        if name in columns:
            return name
    raise ValueError(
        f"no {what} column (looked for {', '.join(candidates)}); columns found: {list(columns)}; "
        f"pass {what}_column=..."
    )


def normalise(
    ds: Dataset,
    spec: HubDataset,
    *,
    template: str | None,
    limit: int | None = None,
) -> Dataset:
    """Rows of ``ds`` (in ``spec``'s schema) as ``prompt`` (templated) + ``answer`` (str) + other columns."""
    if spec.answer_column.split(".")[0] not in ds.column_names:
        raise ValueError(
            f"{spec.hub_id}: answer column {spec.answer_column!r} not found; "
            f"columns found: {list(ds.column_names)}"
        )
    if spec.question_column not in ds.column_names:
        raise ValueError(
            f"{spec.hub_id}: question column {spec.question_column!r} not found; "
            f"columns found: {list(ds.column_names)}"
        )
    questions = [spec.question_fn(q) for q in ds[spec.question_column]]
    if spec.dedup:
        seen: set[str] = set()
        keep = [i for i, q in enumerate(questions) if not (q in seen or seen.add(q))]
        if len(keep) < len(questions):
            ds = ds.select(keep)
            questions = [questions[i] for i in keep]
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
        questions = questions[: len(ds)]
    raw_answers = _read_column(ds, spec.answer_column)
    missing = [i for i, a in enumerate(raw_answers) if missing_gold(a)]
    if missing:
        raise ValueError(
            f"{spec.hub_id}: {len(missing)} row(s) have no gold answer (None/NaN in column "
            f"{spec.answer_column!r}), first rows {missing[:5]}; fix or drop them"
        )
    answers = []
    for i, a in enumerate(raw_answers):
        try:
            answers.append(spec.answer_fn(a))
        except ValueError as err:
            raise ValueError(f"{spec.hub_id}: row {i}, column {spec.answer_column!r}: {err}") from err
    columns = {
        "prompt": [apply_template(q, template) for q in questions],
        "answer": answers,
    }
    if "question" not in ds.column_names or spec.question_column == "question":
        columns["question"] = questions
    if spec.raw_answer_column is not None:
        columns[spec.raw_answer_column] = [str(a) for a in raw_answers]
    from datasets import Dataset, concatenate_datasets

    new = Dataset.from_dict(columns)
    rest = ds.remove_columns([c for c in ds.column_names if c in columns])
    if not rest.column_names:
        return new
    if rest._indices is not None:  # axis=1 concatenation needs a dataset without an indices mapping
        rest = rest.flatten_indices()
    return concatenate_datasets([new, rest], axis=1)


_GSM8K_FINAL = re.compile(r"(?:^|\n)####[ \t]*\S[^\n]*\s*$")


def _gsm8k_style(ds: Dataset, column: str) -> bool:
    """Whether every row of ``column`` is a GSM8K worked solution ending in ``#### <answer>``.

    ValueError when only some rows are (a mixed column cannot be reduced safely either way).
    """
    values = ds[column]
    if not values or not all(isinstance(v, str) for v in values):
        return False
    marked = [bool(_GSM8K_FINAL.search(v)) for v in values]
    if all(marked):
        return True
    if any(marked):
        bad = marked.index(False)
        raise ValueError(
            f"answer column {column!r} holds GSM8K-style worked solutions ('#### <answer>') in "
            f"{sum(marked)} of {len(marked)} rows, but row {bad} has none: {values[bad][-80:]!r}; "
            "fix the file so every row has the marker, or none does"
        )
    return False


def _worked_solutions(ds: Dataset, column: str) -> bool:
    """Whether the median row of a text column has more than :data:`WORKED_SOLUTION_WORDS` words."""
    words = sorted(len(str(v).split()) for v in ds[column])
    return bool(words) and words[len(words) // 2] > WORKED_SOLUTION_WORDS


def local_spec(
    ds: Dataset, *, question_column: str | None = None, answer_column: str | None = None, name: str = "local"
) -> HubDataset:
    """A spec for a local file: explicit columns, else raw-DAPO detection, else the usual column names."""
    columns = list(ds.column_names)
    explicit = question_column is not None or answer_column is not None
    if not explicit and len(ds) and "prompt" in columns and _is_dapo_raw(columns, ds[0]["prompt"]):
        return DAPO_RAW
    q = _pick(columns, question_column, QUESTION_CANDIDATES, "question")
    a = _pick(columns, answer_column, ANSWER_CANDIDATES, "answer")
    if a == q:
        raise ValueError(f"question and answer column are both {q!r}; columns found: {columns}")
    first = ds[0][q] if len(ds) else ""
    question_fn = chat_question if isinstance(first, list) else str
    if answer_column is None and a == "solution" and _worked_solutions(ds, a):
        raise ValueError(
            f"column 'solution' holds worked solutions (typical row over {WORKED_SOLUTION_WORDS} words), "
            f"not final answers, and no answer column was found among {list(ANSWER_CANDIDATES[:-1])}; "
            f"columns found: {columns}; pass answer_column=... naming the final-answer column (or "
            "'solution' to score against the solutions)"
        )
    if "." not in a and _gsm8k_style(ds, a):
        return HubDataset(
            name, None, "train", q, a, gsm8k_answer, question_fn, raw_answer_column="raw_answer"
        )
    return HubDataset(name, None, "train", q, a, question_fn=question_fn)


def load_local_file(path: str | os.PathLike | Sequence[str]) -> Dataset:
    """A local ``.jsonl``/``.json``/``.parquet`` file (or list of files of one type) as one Dataset."""
    from datasets import load_dataset

    paths = [str(path)] if isinstance(path, (str, os.PathLike)) else [str(p) for p in path]
    if not paths:
        raise ValueError("data_files is empty")
    kinds = set()
    for p in paths:
        suffix = Path(p).suffix.lower()
        if suffix not in LOCAL_EXTENSIONS:
            raise ValueError(
                f"unsupported data file {p!r}; supported extensions: {', '.join(LOCAL_EXTENSIONS)}"
            )
        if not Path(p).is_file():
            raise ValueError(f"data file {p!r} does not exist")
        kinds.add(LOCAL_EXTENSIONS[suffix])
        if suffix != ".parquet" and not Path(p).read_bytes().strip():
            raise ValueError(f"data file {p!r} is empty: it holds no rows")
    if len(kinds) > 1:
        raise ValueError(f"data files mix formats {sorted(kinds)}: {paths}")
    try:
        return load_dataset(kinds.pop(), data_files=paths, split="train")
    except StopIteration as err:  # what `datasets` raises on a file with no rows
        raise ValueError(f"data file(s) {paths} hold no rows") from err


def find_local_override(name: str, split: str, default_split: str) -> Path | None:
    """``$OAR_RL_DATA_DIR/<name>/<split>.<ext>``, or for the dataset's default split also
    ``$OAR_RL_DATA_DIR/<name>.<ext>``, if it exists. ValueError when only the split-less file exists and
    another split is asked for (it stands for the default split: returning it for every split would,
    say, train on a test set)."""
    root = os.environ.get(DATA_DIR_ENV)
    if not root:
        return None

    def first(base: Path) -> Path | None:
        for ext in LOCAL_EXTENSIONS:
            candidate = base.with_name(base.name + ext)
            if candidate.is_file():
                return candidate
        return None

    found = first(Path(root) / name / split)
    if found is not None:
        return found
    plain = first(Path(root) / name)
    if plain is not None and split != default_split:
        raise ValueError(
            f"{name}: split {split!r} asked for, but ${DATA_DIR_ENV} has only {plain}, which stands for "
            f"the default split {default_split!r}; add {Path(root) / name / split}.jsonl (or .json, "
            f".parquet) for the {split!r} split"
        )
    return plain


def load_hub(
    name: str,
    split: str | None = None,
    *,
    template: str | None,
    limit: int | None = None,
    data_files: str | Sequence[str] | None = None,
) -> Dataset:
    """A known Hub benchmark, from ``data_files`` / ``$OAR_RL_DATA_DIR`` when given, else from the Hub."""
    spec = HUB_DATASETS[name]
    split = split or spec.default_split
    local = data_files if data_files is not None else find_local_override(name, split, spec.default_split)
    if local is not None:
        ds = load_local_file(local)
    else:
        from datasets import load_dataset

        ds = load_dataset(spec.hub_id, spec.config, split=split)
    if name == "dapo-math" and len(ds) and _is_dapo_raw(ds.column_names, ds[0]["prompt"]):
        spec = DAPO_RAW  # the raw schema handed in under the processed name
    return normalise(ds, spec, template=template, limit=limit)
