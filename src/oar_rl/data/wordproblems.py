"""Synthetic math word problems whose worked solutions have a known causal structure.

A problem tells a short story about one person's stock of one item, with distractor quantities (another
person's stock, another item) that a solution must ignore, and asks for the final count::

    prompt:   "Mia has 14 apples and 9 pears. Leo has 6 apples. Mia buys 3 bags with 4 apples in each
               bag. Mia gives 5 apples to Leo. How many apples does Mia have now?"
    solution: "Only the apples of Mia matter here. The pears do not count. First, the bags hold 3*4=12
               apples. Then she adds them, so 14+12=26. Good. Next, she gives some away, which leaves
               26-5=21.<answer>21</answer>"

Every character of a solution has a *role* (`label_roles`):

- ``pivot``: the numbers written in the reasoning (each operand says which prompt quantity is used,
  each result is a computed value) and the operator between two numbers. Changing any of them changes
  the answer or makes the trace wrong.
- ``answer``: the ``<answer>…</answer>`` span (tags included), the project's answer format.
- ``filler``: everything else. The warm-start data samples several interchangeable phrasings for every
  step, optional remarks, and a free order of the independent opening statements, so a warm-started
  policy is genuinely uncertain about filler while the pivots are determined by the problem.

Roles are a property of the completion text, not of the problem: `label_roles` parses any completion
(one the policy wrote, too). It returns None -- roles unknown -- when the text has no closed answer
span, more than one, or anything but whitespace after it; callers must exclude such completions from
role metrics and count them, never guess.

There is no counterpart in the paper (which trains on DAPO-Math). The task exists so credit assignment
can be scored against ground truth on a laptop CPU; the paper's premise (§1) -- few decisive tokens
among many stylistic ones -- is built in by construction. Numbers stay small (results 0..60, changes
2..9) so a tiny model can learn the arithmetic; the difficulty is in picking the right quantities
(distractors) and chaining two to four steps.
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, ClassVar

from oar_rl.data.wordproblem_phrases import (
    CLOSINGS,
    DISTRACTORS,
    FIRST,
    GAIN_CLAUSES,
    GAIN_PROMPTS,
    IGNORES,
    ITEMS,
    LOSS_CLAUSES,
    LOSS_PROMPTS,
    MUL_ADD_CLAUSES,
    MUL_CLAUSES,
    MUL_PROMPT,
    NAMES,
    NEUTRAL_CLAUSES,
    NEXT,
    OPENINGS,
    QUESTIONS,
    REMARKS,
    RESTATES,
    TRAP_GAIN_PROMPTS,
    TRAP_LOSS_PROMPTS,
)

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import PreTrainedTokenizerFast

PIVOT, FILLER, ANSWER = "pivot", "filler", "answer"
ROLES: tuple[str, ...] = (PIVOT, FILLER, ANSWER)

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER_RE = re.compile(r"\d+")
_OPERATOR_RE = re.compile(r"(?<=\d)[+\-*](?=\d)")


TASK_NAMES: tuple[str, ...] = ("wordproblems", "wordproblems-long")
"""The task names a `WordProblemConfig` may carry: the short regime and the long one."""


@dataclass(frozen=True)
class WordProblemConfig:
    """Difficulty and style knobs (frozen: part of the warm-start recipe hash)."""

    name: str = "wordproblems"
    """Task name (tells this config apart from the arithmetic one inside a recipe)."""
    min_events: int = 2
    max_events: int = 3
    """Events that change the asked count (a bags event takes two solution steps)."""
    max_start: int = 25
    max_change: int = 9
    max_factor: int = 5
    """Bag count and bag size are drawn from 2..max_factor."""
    mul_prob: float = 0.3
    """Probability that one event is a bags (multiplication) event."""
    min_distractors: int = 2
    max_distractors: int = 3
    max_result: int = 60
    remark_prob: float = 0.5
    """Probability of an optional remark after each step."""
    ignore_prob: float = 0.6
    """Probability of each of (up to two) opening remarks about the distractors."""
    trap_prob: float = 0.0
    """Probability that a problem has one trap event (`TRAP_GAIN_PROMPTS` / `TRAP_LOSS_PROMPTS`) at a
    random gain or loss event (the long regime)."""
    neutral_clauses: bool = False
    """Gain and loss steps use `NEUTRAL_CLAUSES` (the long regime)."""
    restate: bool = False
    """Each change of the stock is followed by its running total (`RESTATES`; the long regime)."""

    LATER_FIELDS: ClassVar[tuple[str, ...]] = ("trap_prob", "neutral_clauses", "restate")
    """Fields added after recipes were shipped: left out of a recipe while at their defaults, so the
    earlier recipes keep their hashes (`oar_rl.tiny.Recipe.to_dict`)."""

    def __post_init__(self) -> None:
        if self.name not in TASK_NAMES:
            raise ValueError(f"WordProblemConfig.name must be one of {TASK_NAMES}, got {self.name!r}")
        if not 1 <= self.min_events <= self.max_events:
            raise ValueError(f"need 1 <= min_events <= max_events, got {self.min_events}, {self.max_events}")
        if not 0 <= self.min_distractors <= self.max_distractors <= len(DISTRACTORS):
            raise ValueError(
                f"need 0 <= min_distractors <= max_distractors <= {len(DISTRACTORS)}, "
                f"got {self.min_distractors}, {self.max_distractors}"
            )
        for f in ("mul_prob", "remark_prob", "ignore_prob", "trap_prob"):
            if not 0.0 <= getattr(self, f) <= 1.0:
                raise ValueError(f"{f}={getattr(self, f)} must be in [0, 1]")
        if self.max_factor < 2 or self.max_start < 1 or self.max_change < 1:
            raise ValueError("max_factor must be >= 2, max_start and max_change >= 1")
        if self.max_result < self.max_start:
            raise ValueError(f"max_result={self.max_result} must be >= max_start={self.max_start}")

    def to_dict(self) -> dict:
        d = asdict(self)
        for f in self.LATER_FIELDS:
            if d[f] == type(self).__dataclass_fields__[f].default:
                del d[f]
        return d


DEFAULT_CONFIG = WordProblemConfig()
LONG_CONFIG = WordProblemConfig(
    name="wordproblems-long",
    min_events=6,
    max_events=8,
    max_result=99,
    trap_prob=0.5,
    neutral_clauses=True,
    restate=True,
)
"""The long-chain regime (issue 33): 6-8 events, results up to 99, a trap event in half the problems,
clauses that leave the direction to the operator, and the running total restated after each change."""
SPLITS: dict[str, tuple[WordProblemConfig, int, int]] = {
    "train": (DEFAULT_CONFIG, 20_000, 4321),
    "validation": (DEFAULT_CONFIG, 500, 8765),
    "eval": (DEFAULT_CONFIG, 500, 5679),
}
"""(config, size, seed) per split; validation/eval exclude problems whose prompt occurs in train."""
LONG_SPLITS: dict[str, tuple[WordProblemConfig, int, int]] = {
    "train": (LONG_CONFIG, 20_000, 4331),
    "validation": (LONG_CONFIG, 500, 8775),
    "eval": (LONG_CONFIG, 500, 5689),
}
"""The long regime's splits (other seeds than the short regime's)."""
SPLITS_BY_TASK: dict[str, dict[str, tuple[WordProblemConfig, int, int]]] = {
    "wordproblems": SPLITS,
    "wordproblems-long": LONG_SPLITS,
}


@dataclass(frozen=True)
class WordProblem:
    prompt: str
    solution: str
    answer: int
    roles: tuple[str, ...]
    """One role per character of `solution` (as `label_roles(solution)` gives)."""
    steps: tuple[tuple[int, str, int, int], ...]


def _segments_to_text(segments: list[tuple[str, str]]) -> tuple[str, tuple[str, ...]]:
    text = "".join(s for s, _ in segments)
    roles = tuple(r for s, r in segments for _ in s)
    return text, roles


def make_problem(
    cfg: WordProblemConfig, rng: random.Random, slips: tuple[random.Random, float, float] | None = None
) -> WordProblem:
    """Draw one problem (redrawing until every intermediate result is within [0, max_result]).

    `slips` = (rng, q[, misread]): the worked solution is a fallible teacher's (see `teacher_slips`),
    drawn from its own rng so the problem and its phrasing are those of the clean stream.
    """
    while True:
        out = _try_problem(cfg, rng, slips)
        if out is not None:
            return out


SLIP_OFFSETS: tuple[int, ...] = (-2, -1, 1, 2)
"""How far a slipped result lands from the right one."""


def teacher_slips(
    steps: list[tuple[int, str, int, int]],
    kinds: list[str],
    start: int,
    rng: random.Random,
    q: float,
    traps: list[bool] | None = None,
    misread: float = 0.0,
) -> list[tuple[int, str, int, int]]:
    """The steps as a fallible teacher writes them: each computed result is off by one of `SLIP_OFFSETS`
    with probability `q`, and every later step uses the slipped value (the teacher believes its slip), so
    the demonstration's answer is wrong. Slips never make a result negative. A step marked in `traps`
    (a trap event's phrasing, the long regime) is misread with probability `misread`: its operator is the
    other one of + and -, carried like a slip. q = 0 with no misread returns `steps`."""
    traps = traps if traps is not None else [False] * len(steps)
    if q == 0.0 and not (misread > 0.0 and any(traps)):
        return steps
    out: list[tuple[int, str, int, int]] = []
    acc, bag = start, 0
    for (a, op, b, _), kind, trap in zip(steps, kinds, traps, strict=True):
        a, b = (a, b) if kind == "mul" else (acc, bag) if kind == "mul_add" else (acc, b)
        if trap and misread > 0.0 and rng.random() < misread:
            op = "-" if op == "+" else "+"
        r = a * b if op == "*" else a + b if op == "+" else a - b
        if q > 0.0 and rng.random() < q:
            offsets = [d for d in SLIP_OFFSETS if r + d >= 0]
            if not offsets:  # a misread took away far more than there is: write the clean steps
                return steps
            r += rng.choice(offsets)
        if r < 0:  # an earlier slip or misread took away more than there is: write the clean steps
            return steps
        out.append((a, op, b, r))
        acc, bag = (acc, r) if kind == "mul" else (r, bag)
    return out


def _try_problem(
    cfg: WordProblemConfig, rng: random.Random, slips: tuple[random.Random, float, float] | None = None
) -> WordProblem | None:
    (name, pron), (other, _) = rng.sample(NAMES, 2)
    item, item2 = rng.sample(ITEMS, 2)
    n_events = rng.randint(cfg.min_events, cfg.max_events)
    mul_at = rng.randrange(n_events) if rng.random() < cfg.mul_prob else -1
    trap_at = -1
    if cfg.trap_prob > 0.0 and rng.random() < cfg.trap_prob:  # never drawn in the short regime
        trap_at = rng.choice([i for i in range(n_events) if i != mul_at])
    start = rng.randint(1, cfg.max_start)
    acc = start
    events: list[tuple[str, ...]] = []  # (kind, prompt sentence, *numbers)
    steps: list[tuple[int, str, int, int]] = []
    fmt = {"n": name, "o": other, "item": item, "item2": item2}
    for i in range(n_events):
        if i == mul_at:
            k, m = rng.randint(2, cfg.max_factor), rng.randint(2, cfg.max_factor)
            steps += [(k, "*", m, k * m), (acc, "+", k * m, acc + k * m)]
            acc += k * m
            events.append(("mul", MUL_PROMPT.format(k=k, m=m, **fmt)))
        elif acc > 2 and rng.random() < 0.5:
            k = rng.randint(2, min(cfg.max_change, acc))
            steps.append((acc, "-", k, acc - k))
            acc -= k
            table = TRAP_LOSS_PROMPTS if i == trap_at else LOSS_PROMPTS
            events.append(("loss", rng.choice(table).format(k=k, **fmt)))
        else:
            k = rng.randint(2, cfg.max_change)
            steps.append((acc, "+", k, acc + k))
            acc += k
            table = TRAP_GAIN_PROMPTS if i == trap_at else GAIN_PROMPTS
            events.append(("gain", rng.choice(table).format(k=k, **fmt)))
        if acc > cfg.max_result:
            return None
    # the prompt: the start, distractors at random places among the events, the question
    n_dis = rng.randint(cfg.min_distractors, cfg.max_distractors)
    distractors = [t.format(d=rng.randint(1, cfg.max_start), **fmt) for t in rng.sample(DISTRACTORS, n_dis)]
    body = [e[1] for e in events]
    for d in distractors:
        body.insert(rng.randint(0, len(body)), d)
    prompt = " ".join([f"{name} has {start} {item}.", *body, rng.choice(QUESTIONS).format(**fmt)])

    # the worked solution, as (text, role) segments
    sfmt = {**fmt, "p": pron, "P": pron.capitalize()}
    seg: list[tuple[str, str]] = []

    def say(text: str) -> None:
        text = text.strip()
        if text:
            if seg:
                seg.append((" ", FILLER))
            seg.append((text[0].upper() + text[1:] if text else text, FILLER))

    opening = [rng.choice(OPENINGS)]
    ignores = [t for t in rng.sample(IGNORES, 2) if rng.random() < cfg.ignore_prob]
    intro = opening + ignores
    rng.shuffle(intro)  # independent statements: free order
    for t in intro:
        say(t.format(**sfmt))
    kinds: list[str] = []
    traps: list[bool] = []
    for i, (kind, *_) in enumerate(events):
        kinds += ["mul", "mul_add"] if kind == "mul" else [kind]
        traps += [False, False] if kind == "mul" else [i == trap_at]
    clauses = {"gain": GAIN_CLAUSES, "loss": LOSS_CLAUSES, "mul": MUL_CLAUSES, "mul_add": MUL_ADD_CLAUSES}
    if cfg.neutral_clauses:
        clauses["gain"] = clauses["loss"] = NEUTRAL_CLAUSES
    written = teacher_slips(steps, kinds, start, *slips[:2], traps, *slips[2:]) if slips else steps
    for j, ((a, op, b, r), kind) in enumerate(zip(written, kinds, strict=True)):
        conn = rng.choice(FIRST if j == 0 else NEXT)
        clause = rng.choice(clauses[kind]).format(**sfmt)
        say(f"{conn} {clause}")
        seg += [(" ", FILLER), (str(a), PIVOT), (op, PIVOT), (str(b), PIVOT), ("=", FILLER)]
        seg += [(str(r), PIVOT), (".", FILLER)]
        if cfg.restate and kind != "mul":  # the running total, its number a pivot like every number
            head, tail = rng.choice(RESTATES).format(r="{r}", **sfmt).split("{r}")
            seg += [(" " + head, FILLER), (str(r), PIVOT), (tail, FILLER)]
        if rng.random() < cfg.remark_prob:
            say(rng.choice(REMARKS))
    say(rng.choice(CLOSINGS))
    told = written[-1][3]  # the answer the solution reaches (the last step is never the bags' product)
    seg += [(" ", FILLER), (f"<answer>{told}</answer>", ANSWER)]
    solution, roles = _segments_to_text(seg)
    return WordProblem(prompt, solution, acc, roles, tuple(steps))


def generate(
    cfg: WordProblemConfig, n: int, seed: int, *, slip_prob: float = 0.0, misread_prob: float = 0.0
) -> list[WordProblem]:
    """`n` problems drawn with a private RNG seeded by `seed` (reproducible, no global state).

    `slip_prob` > 0: each solution is a fallible teacher's demonstration (`teacher_slips`); prompts,
    phrasing and `answer` (the right one) are those of the clean stream, slips come from a second RNG.
    `misread_prob` > 0 (the long regime): the same teacher misreads each trap event with that probability.
    """
    if n < 0:
        raise ValueError(f"n={n} must be >= 0")
    if not 0.0 <= slip_prob < 1.0:
        raise ValueError(f"slip_prob={slip_prob} must be in [0, 1)")
    if not 0.0 <= misread_prob < 1.0:
        raise ValueError(f"misread_prob={misread_prob} must be in [0, 1)")
    rng = random.Random(seed)
    slips = None
    if slip_prob > 0 or misread_prob > 0:
        slips = (random.Random(f"slips-{seed}"), slip_prob, misread_prob)
    return [make_problem(cfg, rng, slips) for _ in range(n)]


_TRAIN_PROMPTS: dict[str, set[str]] = {}


def split_problems(split: str, n: int | None = None, task: str = "wordproblems") -> list[WordProblem]:
    """The problems of a named split ('train', 'validation', 'eval') of `task` (a name in `TASK_NAMES`);
    held-out ones avoid train prompts."""
    if task not in SPLITS_BY_TASK:
        raise ValueError(f"unknown word-problem task {task!r}; valid: {', '.join(SPLITS_BY_TASK)}")
    splits = SPLITS_BY_TASK[task]
    if split not in splits:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(splits)}")
    cfg, size, seed = splits[split]
    size = size if n is None else n
    if size < 0:
        raise ValueError(f"n={n} must be >= 0")
    if split == "train":
        return generate(cfg, size, seed)
    if task not in _TRAIN_PROMPTS:
        tcfg, tsize, tseed = splits["train"]
        _TRAIN_PROMPTS[task] = {p.prompt for p in generate(tcfg, tsize, tseed)}
    train_prompts = _TRAIN_PROMPTS[task]
    rng = random.Random(seed)
    out: list[WordProblem] = []
    while len(out) < size:
        p = make_problem(cfg, rng)
        if p.prompt not in train_prompts:
            out.append(p)
    return out


def to_dataset(problems: list[WordProblem]) -> Dataset:
    """A `datasets.Dataset` with columns prompt, answer (str), solution."""
    from datasets import Dataset

    return Dataset.from_dict(
        {
            "prompt": [p.prompt for p in problems],
            "answer": [str(p.answer) for p in problems],
            "solution": [p.solution for p in problems],
        }
    )


def load(split: str, n: int | None = None, task: str = "wordproblems") -> Dataset:
    """The split as a `Dataset` (prompt, answer, solution); deterministic (a prefix of any longer n)."""
    return to_dataset(split_problems(split, n, task))


def label_roles(completion: str) -> list[str] | None:
    """One role per character of `completion`, or None when its structure cannot be parsed.

    The completion must hold exactly one closed ``<answer>…</answer>`` span followed by nothing but
    whitespace. Before the span: digits are ``pivot``, an operator between two digits is ``pivot``,
    everything else ``filler``. The span (tags included) is ``answer``; trailing whitespace ``filler``.
    """
    spans = list(_ANSWER_RE.finditer(completion))
    if len(spans) != 1 or completion.count("<answer>") != 1:
        return None
    span = spans[0]
    if completion[span.end() :].strip():
        return None
    roles = [FILLER] * len(completion)
    reasoning = completion[: span.start()]
    for m in _NUMBER_RE.finditer(reasoning):
        roles[m.start() : m.end()] = [PIVOT] * (m.end() - m.start())
    for m in _OPERATOR_RE.finditer(reasoning):
        roles[m.start()] = PIVOT
    roles[span.start() : span.end()] = [ANSWER] * (span.end() - span.start())
    return roles


def corpus_texts(cfg: WordProblemConfig = DEFAULT_CONFIG) -> list[str]:
    """Texts covering every word the generator can write (for building the tokenizer's vocabulary).

    Derived from the phrase tables, not from sampled problems, so the vocabulary is a pure function of
    this module's source.
    """
    texts = [*GAIN_PROMPTS, *LOSS_PROMPTS, MUL_PROMPT, *DISTRACTORS, *QUESTIONS]
    texts += [*OPENINGS, *IGNORES, *FIRST, *NEXT, *REMARKS, *CLOSINGS]
    texts += [*GAIN_CLAUSES, *LOSS_CLAUSES, *MUL_CLAUSES, *MUL_ADD_CLAUSES]
    if cfg.trap_prob > 0.0:
        texts += [*TRAP_GAIN_PROMPTS, *TRAP_LOSS_PROMPTS]
    if cfg.neutral_clauses:
        texts += list(NEUTRAL_CLAUSES)
    if cfg.restate:
        texts += list(RESTATES)
    words = [n for n, _ in NAMES] + [p for _, p in NAMES] + [p.capitalize() for _, p in NAMES] + list(ITEMS)
    out = []
    for t in texts:
        t = re.sub(r"\{[a-zA-Z0-9]+\}", " ", t)
        out += [t, t[:1].upper() + t[1:], t.lower()]
    out += [" ".join(words), "<answer>0123456789</answer>", "0+1-2*3=4."]
    return out


PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<s>", "</s>"
_QWEN2_PRETOKENIZE = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+"""
)
TOKENIZER_SAMPLE = (2000, 97)
"""(problems, seed) sampled to count piece frequencies for the merges (fixed: part of the vocabulary)."""


def build_tokenizer(cfg: WordProblemConfig = DEFAULT_CONFIG) -> PreTrainedTokenizerFast:
    """A byte-level BPE whose vocabulary holds every word the generator writes as one token.

    Laid out exactly as Qwen2's tokenizer (NFC, Qwen2's pre-tokenizer regex -- digits split one per
    token -- then byte-level), so `AutoTokenizer`, which rebuilds any `qwen2` checkpoint's tokenizer as
    `Qwen2Tokenizer` from the saved vocab and merges, gives the same ids. Ids 0-3 are pad/unk/bos/eos;
    the 256 byte symbols follow, so any text encodes. Merges are learned by `BpeTrainer` on the phrase
    tables (`corpus_texts`) plus `TOKENIZER_SAMPLE` generated problems, with no vocabulary cap, so
    training runs until every piece is a single token: deterministic for a given source.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_QWEN2_PRETOKENIZE), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    core.decoder = decoders.ByteLevel()
    n, seed = TOKENIZER_SAMPLE
    texts = corpus_texts(cfg)
    texts += [t for p in generate(cfg, n, seed) for t in (p.prompt, p.solution)]
    trainer = trainers.BpeTrainer(
        vocab_size=100_000,
        min_frequency=1,
        show_progress=False,
        special_tokens=[PAD, UNK, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        padding_side="left",
        model_max_length=4096,
    )
