"""`oar-rl attribute`: token-importance heatmaps of reasoning traces, one row per scorer.

Shared helpers for the analysis commands live here too: loading a model (a directory, a known model
name such as `smollm2-135m`, a `.gguf` file, or the embedded default), the chat template, sampling
trajectories with their token ids, batching them in TRL's layout (left-padded prompts, right-padded
completions), finding answer spans and scoring them with every importance method.

Chat template: a tokenizer with one (an instruct model) gets each prompt as one user message under its
template with the generation prompt, as TRL does for conversational datasets; `--no-chat` scores the
raw prompt, `--chat` insists (error without a template). The answer span is the one the accuracy
reward scores (`--answer-pattern rewarded`, the default); a trace without one is scored by OAR-P/OAR-G
with LT-Logits and gets no GRAIL score, and the command says so on the console and in the page.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from oar_rl.fetch import resolve_model
from oar_rl.io import ensure_writable_dir, write_text_atomic
from oar_rl.tasks import Task, get_task

METHODS = ("oar-p", "oar-g", "entropy", "random", "grail")
"""The built-in scorers the study's recall analysis scores, in display order; `scorable_methods` adds
every other standalone rule (oar-p-span, entropy-80-20, rules of --credit-module)."""
DEFAULT_METHODS = ("oar-p", "oar-g", "entropy", "random")  # "grail" on request (--credits ...,grail)
MAX_NEW_TOKENS = 96
"""The analysis commands' sampling budget when not given (at least the task's completion length when
they sample the task's own problems: `sampling_budget`)."""


@dataclass
class Trajectory:
    """One sampled (or given) trace: unpadded ids and texts."""

    prompt: str
    completion: str
    answer: str
    prompt_ids: torch.Tensor  # (P,)
    completion_ids: torch.Tensor  # (T,)


def load_model(spec: str | None, task: Task | None = None, cache_dir: str | None = None):
    """(model in eval mode, tokenizer with left padding) from any `--model` value (`oar_rl.options`:
    a directory, a known model name, a `.gguf` file, or a warm start by name, 'default' being the shipped
    word-problem model); None: the warm start of `task`. A warm start of another task than `task` is an
    error (`check_model_task`)."""
    from oar_rl.options import check_model_task

    if task is not None:
        check_model_task(spec, task.name)
    if spec is None:
        if task is None:
            raise ValueError("--model is required without a task")
        spec = str(task.load_warm_start("default", cache_dir).path)
    spec = resolve_model(spec, cache_dir)
    if not Path(spec).is_dir():
        raise ValueError(
            f"--model {spec!r} is not a directory; pass a saved model dir, a .gguf file, 'default', or "
            "a known model name (smollm2-135m; see `oar-rl fetch-model`)"
        )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from oar_rl.console import no_load_bars

    tok = AutoTokenizer.from_pretrained(spec)
    tok.padding_side = "left"  # batched generation; completions are re-laid out by batch_layout
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    with no_load_bars():
        model = AutoModelForCausalLM.from_pretrained(spec)
    return model.eval(), tok


CHAT_CHOICES = ("auto", "on", "off")


def resolve_chat(tokenizer, choice: str | bool | None) -> bool:
    """Whether prompts go through the chat template: 'auto'/None -> when the tokenizer has one."""
    has = bool(getattr(tokenizer, "chat_template", None))
    if choice in (None, "auto"):
        return has
    if choice in ("on", True):
        if not has:
            raise ValueError("--chat: the tokenizer has no chat template (use --no-chat)")
        return True
    if choice in ("off", False):
        return False
    raise ValueError(f"chat={choice!r} is not valid; choose one of {', '.join(CHAT_CHOICES)}")


def format_prompt(tokenizer, prompt: str, chat: bool) -> str:
    """The prompt as the model sees it: as is, or one user message under the chat template."""
    if not chat:
        return prompt
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
    )


def given_trajectory(tokenizer, prompt: str, completion: str, *, chat: bool, answer: str = "") -> Trajectory:
    """A trajectory from texts: the (templated) prompt and the completion tokenized without specials."""
    p_ids = tokenizer(format_prompt(tokenizer, prompt, chat), add_special_tokens=False)["input_ids"]
    c_ids = tokenizer(completion, add_special_tokens=False)["input_ids"]
    return Trajectory(prompt, completion, answer, torch.tensor(p_ids), torch.tensor(c_ids))


def scorable_methods() -> tuple[str, ...]:
    """:data:`METHODS` and every other rule `compute_importance` scores standalone (read live: rules of a
    --credit-module count), except `position`, the control every recall table carries already."""
    from oar_rl.credits import SCORED_CREDITS

    return (*METHODS, *(m for m in SCORED_CREDITS if m not in METHODS and m != "position"))


def parse_methods(a: argparse.Namespace) -> list[str]:
    """`--credits` of an analysis command, after loading its `--credit-module` files."""
    from oar_rl.credit_modules import load_credit_modules

    load_credit_modules(getattr(a, "credit_module", None))
    return parse_list(a.methods, scorable_methods(), "--credits")


def parse_list(value: str, valid: tuple[str, ...], flag: str) -> list[str]:
    """The comma-separated `value`, each item in `valid`; ValueError naming what is wrong with each other
    one (a rule that cannot be scored standalone is said to be one, not "unknown")."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in valid]
    if bad or not items:
        from oar_rl.credit_names import not_scorable

        said = "; ".join(not_scorable(v, valid) for v in bad) or f"no value in {value!r}"
        raise ValueError(f"{flag}: {said}; valid: {', '.join(valid)}")
    return items


@torch.no_grad()
def sample_trajectories(
    model, tokenizer, prompts: list[str], answers: list[str], *, chat: bool = False, **kwargs
) -> list[Trajectory]:
    """One sampled completion per prompt, keeping the generated ids; `chat`: prompts go through the
    chat template (`format_prompt`); other keyword arguments as `oar_rl.sampling.sample_ids` (temperature,
    max_new_tokens, batch_size, seed, progress)."""
    from oar_rl.sampling import sample_ids

    shown = [format_prompt(tokenizer, p, chat) for p in prompts]
    pairs = sample_ids(model, tokenizer, shown, **kwargs)
    return [
        Trajectory(prompt, tokenizer.decode(c_ids), answer, p_ids, c_ids)
        for prompt, answer, (p_ids, c_ids) in zip(prompts, answers, pairs, strict=True)
    ]


def batch_layout(trajs: list[Trajectory], pad_id: int):
    """TRL layout: (prompt_ids, prompt_mask) left-padded (B, P); (completion_ids, completion_mask)
    right-padded (B, C)."""
    p_len = max(t.prompt_ids.numel() for t in trajs)
    c_len = max(max(t.completion_ids.numel() for t in trajs), 1)
    b = len(trajs)
    prompt_ids = torch.full((b, p_len), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((b, p_len), dtype=torch.long)
    completion_ids = torch.full((b, c_len), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((b, c_len), dtype=torch.long)
    for i, t in enumerate(trajs):
        n, m = t.prompt_ids.numel(), t.completion_ids.numel()
        prompt_ids[i, p_len - n :] = t.prompt_ids
        prompt_mask[i, p_len - n :] = 1
        completion_ids[i, :m] = t.completion_ids
        completion_mask[i, :m] = 1
    return prompt_ids, prompt_mask, completion_ids, completion_mask


def answer_spans(trajs: list[Trajectory], tokenizer, answer_pattern: str | None = None):
    """(TRL-layout batch, (B, C) answer-span mask) of `trajs`; None pattern: the rewarded span."""
    from oar_rl.answer_span import answer_span_mask

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    batch = batch_layout(trajs, pad)
    return batch, answer_span_mask(batch[2], batch[3], tokenizer, pattern=answer_pattern)


def span_notes(has_span: torch.Tensor, methods: list[str], probe: str, pattern: str | None) -> list[str]:
    """Plain-language notes on traces without an answer span: what each method did with them."""
    missing = int((~has_span).sum())
    n = has_span.numel()
    name = pattern or "rewarded"
    notes = [f"answer span (--answer-pattern {name}) found in {n - missing} of {n} traces"]
    if missing == 0:
        return notes
    oar = [m for m in methods if m in ("oar-p", "oar-g")]
    if oar and probe != "lt-logits":
        notes.append(
            f"probe {probe}: {missing} of {n} traces have no answer span, so {' and '.join(oar)} scored "
            "them with LT-Logits (the next-token distribution after the completion) instead"
        )
    if "grail" in methods:
        notes.append(
            f"grail: {missing} of {n} traces have no answer span; GRAIL scores the saliency of the "
            "answer span's NLL, so it has no score there and their grail row is blank (in training such "
            "rows keep weight 1)"
        )
    return notes


def method_scores(
    model,
    tokenizer,
    trajs: list[Trajectory],
    methods: list[str],
    *,
    probe: str = "lt-logits",
    seed: int = 0,
    answer_pattern: str | None = None,
    scored_tokens: str = "reasoning",
    skipped: dict[str, str] | None = None,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Normalised importance (Eq. 14) of every method, and the (B, C) mask of the *reasoning* tokens.
    `skipped` (a dict): a rule that reads the outcome (`oar_rl.scoring.NotStandalone`) is left out and
    recorded there, rule -> why, instead of stopping the call.

    Reasoning tokens are the completion tokens before the format that introduces the answer (the
    ``<answer>`` tag, "The final answer is \\boxed{"; :func:`oar_rl.answer_span.reasoning_mask`), all of
    them in a row without an answer marker: the tokens credit assignment is about, as the trainer scores
    them by default (`OARConfig.scored_tokens`). Every method scores only those (OAR-G noises only them)
    and is normalised over them, so rankings are comparable across methods. ``scored_tokens=
    "before-answer"`` gives the earlier set (every token before the answer span, the tag included).
    """
    from oar_rl.answer_span import answer_masks, scored_positions
    from oar_rl.config import SCORED_TOKENS, oar_defaults
    from oar_rl.credits import CREDIT_MODES, ScoringContext, compute_importance
    from oar_rl.reshape import normalize_importance
    from oar_rl.scoring import NotStandalone

    if scored_tokens not in SCORED_TOKENS:
        raise ValueError(
            f"scored_tokens={scored_tokens!r} is not valid; choose one of {', '.join(SCORED_TOKENS)}"
        )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    batch = batch_layout(trajs, pad)
    answer_mask, reasoning_only = answer_masks(batch[2], batch[3], tokenizer, pattern=answer_pattern)
    if scored_tokens == "reasoning":
        reasoning = reasoning_only & batch[3].bool()  # (B, C)
    else:
        reasoning = scored_positions(batch[3], answer_mask) & batch[3].bool()  # (B, C)
    given = reasoning if scored_tokens == "reasoning" else None
    out = {}
    settings = oar_defaults()
    for method in methods:
        mode = CREDIT_MODES[method]
        ctx = ScoringContext(settings=settings, probe=probe, generator=torch.Generator().manual_seed(seed),
                             tokenizer=tokenizer)  # fmt: skip
        kwargs: dict = {"reasoning_mask": given, **mode.kwargs(ctx)}  # the rule's options, as in training
        if mode.probe:
            kwargs["answer_mask"] = answer_mask if probe != "lt-logits" else None
        if mode.reshape == "grail":  # saliency of the answer span's NLL; rows without a span score 0
            kwargs["answer_mask"] = answer_mask
        try:
            raw = compute_importance(method, model, *batch, **kwargs)
        except NotStandalone as err:  # a rule that reads the outcome, registered as standalone
            if skipped is None:
                raise
            skipped[method] = str(err)
            continue
        out[method] = normalize_importance(raw.float(), reasoning)
    return out, reasoning


def heatmap_page(
    trajs: list[Trajectory],
    tokenizer,
    rows: dict[str, torch.Tensor],
    title: str,
    scored: torch.Tensor | None = None,
    notes: list[str] | None = None,
    answer: torch.Tensor | None = None,
) -> str:
    """A self-contained HTML page: per trajectory, one coloured row per method (and the oracle if given),
    wrapped to the page's width (`oar_rl.analysis.heatmap`).

    `scored` (B, C) marks the tokens that were scored (the reasoning tokens); the others (the answer span,
    padding) are drawn grey as "not scored", never as a white score of 0, and the reasoning's end (after
    its last scored token) is marked. `answer` (B, C) marks the answer span, underlined.
    """
    import html

    from oar_rl.analysis.heatmap import HEATMAP_CSS, heatmap_html, legend_html

    caption = (
        "Each token's background shows its normalised importance Î (Eq. 14) over the reasoning tokens; "
        "hover a token for its method, index and value. Grey tokens are not scored. Long traces wrap: "
        "each line shows every method's row under the same tokens."
    )
    if "oracle" in rows:
        caption += " The oracle row marks causal pivots (Eq. 19) in full colour."
    parts = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em} p,li{overflow-wrap:break-word}"
        f"{HEATMAP_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><p>{caption}</p>{legend_html()}",
    ]
    if notes:
        parts.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    for i, t in enumerate(trajs):
        n = t.completion_ids.numel()
        pieces = [tokenizer.decode([int(x)]) for x in t.completion_ids]
        keep = [True] * n if scored is None else [bool(v) for v in scored[i, :n].tolist()]
        heat = [
            (
                name,
                pieces,
                [float(v) if k else None for v, k in zip(scores[i, :n].tolist(), keep, strict=True)],
            )
            for name, scores in rows.items()
        ]
        last = max((j for j, k in enumerate(keep) if k), default=None)
        end = None if scored is None else 0 if last is None else last + 1
        span = None if answer is None else [bool(v) for v in answer[i, :n].tolist()]
        parts.append(heatmap_html(t.prompt, heat, answer=span, reasoning_end=end))
    parts.append("</body></html>")
    return "\n".join(parts)


def scoring_parser() -> argparse.ArgumentParser:
    """The options every analysis command shares: the shared task, model, seed, threads, cache, probe and
    answer span (`oar_rl.options`), plus methods, sampling length and the chat template."""
    from oar_rl.argparsing import add, add_renaming
    from oar_rl.credit_modules import add_flag
    from oar_rl.options import MODEL_HELP, shared_parser

    p = shared_parser(
        "task", "model", "seed", "threads", "cache-dir", "probe", "answer-pattern",
        model={"default": None, "help": f"{MODEL_HELP} (default: the task's warm start)"},
    )  # fmt: skip
    group = p.add_argument_group("scoring options")
    add_renaming(
        group,
        "--credits",
        "--methods",
        dest="methods",
        default=",".join(DEFAULT_METHODS),
        help=f"credit rules to score, comma-separated, of {', '.join(scorable_methods())}, and the "
        "standalone rules of --credit-module",
    )
    add_flag(group)
    add(
        group,
        "--max-new-tokens",
        type=int,
        default=None,
        help=f"longest sampled completion, in tokens (default: {MAX_NEW_TOKENS}); sampling the task's own "
        "problems, at least the task's completion length (wordproblems: 160)",
    )
    chat = group.add_mutually_exclusive_group()
    chat.add_argument(
        "--chat",
        dest="chat",
        action="store_const",
        const="on",
        default="auto",
        help="apply the tokenizer's chat template to prompts (default: when it has one, as TRL does for "
        "conversational data)",
    )
    chat.add_argument(
        "--no-chat", "--no_chat", dest="chat", action="store_const", const="off", help="use raw prompts"
    )
    return p


def scoring_settings(a: argparse.Namespace, task: Task, methods: list[str], budget: int, chat: bool) -> dict:
    """The resolved settings an analysis command prints at its start (`oar_rl.console.print_settings`)."""
    model = a.model if a.model is not None else f"warm start of {task.name}"
    return {
        "task": task.name,
        "model": model if model == a.model_path else f"{model} -> {a.model_path}",
        "methods": ",".join(methods),
        "probe": f"{a.probe} (answer span: {a.answer_pattern}"
        + ("; traces without one: lt-logits)" if a.probe != "lt-logits" else ")"),
        "max new tokens": budget,
        "chat template": "on" if chat else "off",
        "seed": a.seed,
        "threads": a.threads or "torch's choice",
        "out": a.out,
    }


def sampling_budget(max_new_tokens: int | None, task: Task, task_problems: bool) -> int:
    """`--max-new-tokens`, else `MAX_NEW_TOKENS`, raised to the task's completion length when the command
    samples the task's own problems (so a long correct solution is not cut off)."""
    if max_new_tokens is not None:
        if max_new_tokens < 1:
            raise ValueError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
        return max_new_tokens
    return max(MAX_NEW_TOKENS, task.max_completion_length) if task_problems else MAX_NEW_TOKENS


def chat_message(command: str, chat: bool, choice: str) -> str:
    """One console line saying whether the chat template is applied, and how to change it."""
    if chat:
        return f"[{command}] prompts go through the tokenizer's chat template (--no-chat: raw prompts)"
    why = "--no-chat" if choice == "off" else "the tokenizer has none"
    return f"[{command}] raw prompts, no chat template ({why})"


def build_parser() -> argparse.ArgumentParser:
    """The `oar-rl attribute` parser."""
    from oar_rl.argparsing import add, add_renamed, new_parser
    from oar_rl.options import shared_parser

    p = new_parser(
        "oar-rl attribute",
        __doc__.split("\n\n")[0],
        parents=[
            scoring_parser(),
            shared_parser("out", out={"default": "attribute_out", "help": "directory for heatmaps.html"}),
        ],
    )
    add(p, "--prompt", help="prompt text; with --completion scores that trace, else one is sampled")
    add(p, "--completion", help="completion text to score (needs --prompt)")
    add(
        p, "--traces", type=int, default=3, help="traces sampled from the task's held-out split (no --prompt)"
    )
    add_renamed(p, "--n", "--traces", "traces to sample; `oar-rl eval --samples` is samples per problem")
    return p


def main(argv: list[str] | None = None) -> int:
    from oar_rl.console import print_settings
    from oar_rl.options import apply_threads

    a = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        methods = parse_methods(a)
        if a.completion is not None and a.prompt is None:
            raise ValueError("--completion needs --prompt")
        if a.traces < 1:
            raise ValueError(f"--traces must be >= 1, got {a.traces}")
        sampling_budget(a.max_new_tokens, get_task(a.task), task_problems=a.prompt is None)  # checks it
        from oar_rl.answer_span import compile_answer_pattern

        compile_answer_pattern(a.answer_pattern)
        out = ensure_writable_dir(a.out)
        task = get_task(a.task)
        apply_threads(a.threads)
        model, tok = load_model(a.model, task, a.cache_dir)
        a.model_path = model.name_or_path
        chat = resolve_chat(tok, a.chat)
    except ValueError as exc:
        print(f"oar-rl attribute: {exc}", file=sys.stderr)
        return 2
    budget = sampling_budget(a.max_new_tokens, task, task_problems=a.prompt is None)
    print_settings("attribute", scoring_settings(a, task, methods, budget, chat))
    print(chat_message("attribute", chat, a.chat), flush=True)
    if a.prompt is not None and a.completion is not None:
        trajs = [given_trajectory(tok, a.prompt, a.completion, chat=chat)]
    else:
        if a.prompt is not None:
            prompts, answers = [a.prompt], [""]
        else:
            ds = task.dataset(limit=a.traces)
            prompts, answers = list(ds["prompt"]), list(ds["answer"])
        trajs = sample_trajectories(
            model, tok, prompts, answers, chat=chat, max_new_tokens=budget, seed=a.seed
        )
    trajs = [t for t in trajs if t.completion_ids.numel() > 0]
    if not trajs:
        print("oar-rl attribute: every completion is empty; nothing to score", file=sys.stderr)
        return 1
    _, answer_mask = answer_spans(trajs, tok, a.answer_pattern)
    notes = span_notes(answer_mask.any(dim=1), methods, a.probe, a.answer_pattern)
    for note in notes:
        print(f"[attribute] {note}", flush=True)
    scores, reasoning = method_scores(
        model, tok, trajs, methods, probe=a.probe, seed=a.seed, answer_pattern=a.answer_pattern
    )
    notes.insert(0, chat_message("attribute", chat, a.chat).split("] ", 1)[1])
    page = heatmap_page(
        trajs, tok, scores, "oar-rl token importance", scored=reasoning, notes=notes, answer=answer_mask
    )
    write_text_atomic(out / "heatmaps.html", page)
    print(f"[attribute] wrote {out / 'heatmaps.html'} ({len(trajs)} traces × {len(methods)} methods)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
