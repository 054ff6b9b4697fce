"""The word-problem task: generator, role labeller, tokenizer, shipped warm start, ground-truth metrics."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import ANSWERS, PROMPTS, make_args, make_trainer
from oar_rl.data import wordproblems as wp
from oar_rl.metrics import pivot_advantage_share, pivot_fraction, pivot_recall_at_k
from oar_rl.roles import role_masks, token_roles_from_chars


@pytest.fixture(scope="module")
def tok():
    return wp.build_tokenizer()


# ---------------------------------------------------------------------------------------------------
# generator and labeller


def test_generator_is_deterministic_and_consistent():
    a, b = wp.generate(wp.DEFAULT_CONFIG, 50, 3), wp.generate(wp.DEFAULT_CONFIG, 50, 3)
    assert a == b
    assert a != wp.generate(wp.DEFAULT_CONFIG, 50, 4)
    for p in a:
        assert wp.label_roles(p.solution) == list(p.roles)
        # the steps are right, chain into the answer, and every equation is written in the solution
        for x, op, y, r in p.steps:
            assert {"+": x + y, "-": x - y, "*": x * y}[op] == r
            assert f"{x}{op}{y}={r}" in p.solution
        assert p.steps[-1][3] == p.answer
        assert p.solution.endswith(f"<answer>{p.answer}</answer>")
        assert 0 <= p.answer <= wp.DEFAULT_CONFIG.max_result
        # distractors: the prompt holds numbers that no step uses
        used = {n for s in p.steps for n in (s[0], s[2])}
        prompt_numbers = [int(n) for n in re.findall(r"\d+", p.prompt)]
        assert len(prompt_numbers) >= len(p.steps) + wp.DEFAULT_CONFIG.min_distractors
        assert any(n not in used for n in prompt_numbers) or len(set(prompt_numbers)) < len(prompt_numbers)


def test_teacher_slips_keep_the_problems_and_carry_the_slip_to_the_answer():
    clean = wp.generate(wp.DEFAULT_CONFIG, 600, 4321)
    slipped = wp.generate(wp.DEFAULT_CONFIG, 600, 4321, slip_prob=0.2)
    assert wp.generate(wp.DEFAULT_CONFIG, 600, 4321, slip_prob=0.0) == clean
    eq = re.compile(r"(\d+)([+\-*])(\d+)=(\d+)")
    wrong = 0
    for c, s in zip(clean, slipped, strict=True):
        # the same problem, gold answer and role layout; only numbers of the worked solution may differ
        assert (s.prompt, s.answer, s.steps) == (c.prompt, c.answer, c.steps)
        assert wp.label_roles(s.solution) == list(s.roles)
        assert re.sub(r"\d+", "#", s.solution) == re.sub(r"\d+", "#", c.solution)
        written = [(int(a), o, int(b), int(r)) for a, o, b, r in eq.findall(s.solution)]
        for a, o, b, r in written:
            exact = {"+": a + b, "-": a - b, "*": a * b}[o]
            assert r == exact or r - exact in wp.SLIP_OFFSETS  # a slip is off by a listed offset
            assert r >= 0
        sums = [w[3] for w in written if w[1] != "*"]  # the running count, step after step
        assert [w[0] for w in written if w[1] != "*"][1:] == sums[:-1]  # each step uses the last one
        # the teacher believes its slip: the answer it writes is its own chain's end
        told = int(re.search(r"<answer>(\d+)</answer>", s.solution).group(1))
        assert told == written[-1][3]  # the last step is never the bags' product (its sum follows)
        wrong += told != s.answer
    # about 1 - 0.8^(results per problem) of the demonstrations end wrong (~0.4 for 2-4 results)
    assert 0.3 < wrong / len(slipped) < 0.5
    with pytest.raises(ValueError, match=r"slip_prob=1.5 must be in \[0, 1\)"):
        wp.generate(wp.DEFAULT_CONFIG, 1, 0, slip_prob=1.5)


def test_filler_varies_while_pivots_follow_the_problem():
    problems = wp.generate(wp.DEFAULT_CONFIG, 300, 0)
    openings = {p.solution.split(".")[0] for p in problems}
    assert len(openings) > 20  # several phrasings, names and items
    first_word = {p.solution.split()[0] for p in problems}
    assert len(first_word) >= 4


def test_splits_are_disjoint_from_train():
    train = {p.prompt for p in wp.split_problems("train", 2000)}
    assert not train & {p.prompt for p in wp.split_problems("eval", 50)}
    with pytest.raises(ValueError, match="unknown split 'test'"):
        wp.split_problems("test")
    ds = wp.load("eval", 5)
    assert ds.column_names == ["prompt", "answer", "solution"]


def test_label_roles():
    text = "So we add, 12+5=17. Done. <answer>17</answer>"
    roles = wp.label_roles(text)
    assert roles is not None
    marks = "".join({"pivot": "P", "filler": ".", "answer": "A"}[r] for r in roles)
    assert marks == "...........PPPP.PP........" + "A" * len("<answer>17</answer>")
    assert wp.label_roles(text + "  \n") is not None
    for bad in ("12+5=17.", "<answer>1</answer><answer>2</answer>", text + " more", "a <answer>3"):
        assert wp.label_roles(bad) is None, bad
    # a minus sign not between two digits is prose
    assert wp.label_roles("a - b 3-1=2 <answer>2</answer>")[2] == "filler"


def test_config_validation():
    with pytest.raises(ValueError, match="max_events"):
        wp.WordProblemConfig(min_events=3, max_events=2)
    with pytest.raises(ValueError, match="remark_prob"):
        wp.WordProblemConfig(remark_prob=1.5)


# ---------------------------------------------------------------------------------------------------
# tokenizer and token roles


def test_tokenizer_is_deterministic_word_level_and_qwen2_compatible(tok, tmp_path):
    assert wp.build_tokenizer().backend_tokenizer.to_str() == tok.backend_tokenizer.to_str()
    problems = wp.split_problems("eval", 40)
    for p in problems:
        ids = tok(p.solution, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == p.solution
        pieces = [tok.decode([i]) for i in ids]
        assert all(len(x) == 1 for x in pieces if x.strip().isdigit())  # digits split
        words = [x.strip() for x in pieces if x.strip().isalpha()]
        assert set(words) <= set(re.findall(r"[A-Za-z]+", p.solution))  # whole words, not fragments
        assert len(ids) < len(p.solution) / 2.5  # words, not characters
    from transformers import AutoTokenizer

    from oar_rl.tiny import tiny_qwen2

    tiny_qwen2(len(tok), hidden_size=16, num_heads=2, num_kv_heads=1).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    auto = AutoTokenizer.from_pretrained(tmp_path)
    for p in problems:
        assert auto(p.prompt + p.solution)["input_ids"] == tok(p.prompt + p.solution)["input_ids"]


def test_token_roles_from_chars():
    assert token_roles_from_chars(["ab", " 1", "<a>"], ["filler"] * 3 + ["pivot"] + ["answer"] * 3) == [
        "filler",
        "pivot",
        "answer",
    ]
    with pytest.raises(ValueError, match="cover 3 characters"):
        token_roles_from_chars(["abc"], ["filler"])


def test_role_masks_match_the_generator(tok):
    problems = wp.split_problems("eval", 6)
    rows = [tok(p.solution, add_special_tokens=False)["input_ids"] for p in problems]
    width = max(map(len, rows)) + 2
    ids = torch.full((len(rows) + 1, width), tok.pad_token_id)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    ids[0, len(rows[0])], mask[0, len(rows[0])] = tok.eos_token_id, 1  # TRL's mask includes the EOS
    junk = tok("no answer here", add_special_tokens=False)["input_ids"]
    ids[-1, : len(junk)], mask[-1, : len(junk)] = torch.tensor(junk), 1
    pivot, filler, known = role_masks(ids, mask, tok, wp.label_roles)
    assert known.tolist() == [True] * len(rows) + [False]
    assert not (pivot[-1].any() or filler[-1].any())
    for i, p in enumerate(problems):
        digits = sum(len(str(x)) + len(str(y)) + len(str(r)) for x, _, y, r in p.steps)
        assert int(pivot[i].sum()) == digits + len(p.steps)  # every digit and operator, one token each
        assert not (pivot[i] & ~mask[i].bool()).any()
    assert not (pivot[0, len(rows[0])] or filler[0, len(rows[0])])  # the EOS has no role


# ---------------------------------------------------------------------------------------------------
# ground-truth credit metrics


def _masks(roles: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([[r == "p" for r in roles]]), torch.tensor([[r == "f" for r in roles]])


def test_pivot_advantage_share_equals_pivot_fraction_under_grpo():
    pivot, filler = _masks(list("pffpfa."))  # a = answer, . = padding
    grpo = torch.full((1, 7), -0.7)
    assert pivot_fraction(pivot, filler).item() == pytest.approx(2 / 5)
    assert pivot_advantage_share(grpo, pivot, filler).item() == pytest.approx(2 / 5)
    credit = torch.tensor([[2.0, 0.5, 0.5, 2.0, 0.0, 9.0, 9.0]])
    assert pivot_advantage_share(credit, pivot, filler).item() == pytest.approx(4 / 5)
    zero = torch.zeros(1, 7)
    assert pivot_advantage_share(zero, pivot, filler).item() == pytest.approx(2 / 5)
    with pytest.raises(ValueError, match="overlap"):
        pivot_fraction(pivot, pivot)


def _recall_reference(scores: list[float], roles: str, fraction: float) -> float:
    """Exact expectation over every tie-breaking order (enumerates permutations)."""
    idx = [i for i, r in enumerate(roles) if r in "pf"]
    k = max(1, round(fraction * len(idx)))
    n_pivot = sum(roles[i] == "p" for i in idx)
    total, count = 0.0, 0
    for perm in itertools.permutations(idx):
        ranked = sorted(perm, key=lambda i: -scores[i])  # stable: ties keep the permutation's order
        total += sum(roles[i] == "p" for i in ranked[:k]) / n_pivot
        count += 1
    return total / count


@pytest.mark.parametrize("fraction", [0.1, 0.34, 0.5, 0.8, 1.0])
def test_pivot_recall_matches_slow_reference(fraction):
    gen = torch.Generator().manual_seed(0)
    for _ in range(12):
        roles = "".join("pfa"[int(torch.randint(3, (1,), generator=gen))] for _ in range(6))
        if "p" not in roles:
            roles = "p" + roles[1:]
        scores = torch.randint(0, 3, (6,), generator=gen).float().tolist()  # many ties
        pivot, filler = _masks(list(roles))
        got = pivot_recall_at_k(torch.tensor([scores]), pivot, filler, fraction).item()
        assert got == pytest.approx(_recall_reference(scores, roles, fraction)), (roles, scores)


def test_pivot_recall_chance_and_perfect():
    pivot, filler = _masks(list("pfffpfffff"))
    flat = pivot_recall_at_k(torch.ones(1, 10), pivot, filler, 0.2).item()
    assert flat == pytest.approx(0.2)  # constant scores: chance, whatever the positions
    perfect = pivot_recall_at_k(pivot.float(), pivot, filler, 0.2).item()
    assert perfect == pytest.approx(1.0)
    with pytest.raises(ValueError, match="fraction"):
        pivot_recall_at_k(torch.ones(1, 10), pivot, filler, 0.0)
    none_p, none_f = _masks(list("ffff"))
    assert pivot_recall_at_k(torch.ones(1, 4), none_p, none_f, 0.5).item() == 0.0


# ---------------------------------------------------------------------------------------------------
# the shipped warm start


def test_shipped_warm_start_matches_its_recipe(tok):
    from oar_rl.shipped import WORDPROBLEMS_RECIPE, load_task_model, shipped_path, verify_shipped

    path = verify_shipped("wordproblems")
    manifest = json.loads((path / "oar_rl_manifest.json").read_text())
    assert manifest["recipe_hash"] == WORDPROBLEMS_RECIPE.hash()
    assert json.loads((path / "oar_rl_recipe.json").read_text()) == WORDPROBLEMS_RECIPE.to_dict()
    # the shipped tokenizer is the one the generator's source builds today
    shipped_tok = json.loads((path / "tokenizer.json").read_text())
    assert shipped_tok["model"]["vocab"] == json.loads(tok.backend_tokenizer.to_str())["model"]["vocab"]
    model, loaded_tok, loaded_path = load_task_model("wordproblems")
    assert loaded_path == shipped_path("wordproblems")
    m = WORDPROBLEMS_RECIPE.model
    assert model.config.hidden_size == m.hidden_size and model.config.num_hidden_layers == m.num_layers
    assert model.config.vocab_size == len(loaded_tok) == len(tok)
    size = sum(f.stat().st_size for f in path.iterdir())
    assert size < 8 * 2**20


def test_the_first_recipe_keeps_its_hash():
    """Fields added to recipes later (slip_prob) are absent at their default, so the first shipped warm
    start, which the first study used, is still named by the hash recorded with its results."""
    from oar_rl.shipped import FIRST_WORDPROBLEMS_RECIPE, WORDPROBLEMS_RECIPE

    assert FIRST_WORDPROBLEMS_RECIPE.hash() == "d30225c1cf6e2256"
    assert "slip_prob" not in FIRST_WORDPROBLEMS_RECIPE.to_dict()["sft"]
    assert WORDPROBLEMS_RECIPE.to_dict()["sft"]["slip_prob"] == 0.2


def test_verify_shipped_rejects_edited_files(tmp_path, monkeypatch):
    import shutil

    from oar_rl import shipped as tiny

    copy = tmp_path / "wordproblems"
    shutil.copytree(tiny.shipped_path("wordproblems"), copy)
    monkeypatch.setattr(tiny, "SHIPPED_DIR", tmp_path)
    tiny.verify_shipped("wordproblems")
    with open(copy / "config.json", "a") as f:
        f.write(" ")
    with pytest.raises(ValueError, match="do not match their manifest"):
        tiny.verify_shipped("wordproblems")
    with pytest.raises(ValueError, match="unknown task"):
        tiny.verify_shipped("nope")


# ---------------------------------------------------------------------------------------------------
# the trainer hook


def _toy_roles(text: str) -> list[str] | None:
    """Digits are pivots; a completion starting with 'a' is 'unparseable'."""
    if text.startswith("a"):
        return None
    return ["pivot" if c.isdigit() else "filler" for c in text]


def _train_logs(tmp_path: Path, credit: str) -> list[dict[str, Any]]:
    from datasets import Dataset

    from oar_rl.tiny import build_char_tokenizer

    args = make_args(
        tmp_path / credit,
        credit=credit,
        per_device_train_batch_size=8,
        max_completion_length=10,
        gradient_checkpointing=True,  # GRPOConfig's default, which this test always ran with
    )
    ds = Dataset.from_dict({"prompt": PROMPTS[:4], "answer": ANSWERS[:4]})
    trainer = make_trainer(args, build_char_tokenizer(), ds, token_roles=_toy_roles)
    trainer.train()
    return [h for h in trainer.state.log_history if "oar/pivot_frac" in h]


def test_trainer_logs_ground_truth_credit_metrics(tmp_path):
    grpo = _train_logs(tmp_path, "none")
    assert len(grpo) == 2
    for h in grpo:
        assert h["oar/pivot_adv_share"] == pytest.approx(h["oar/pivot_frac"], abs=1e-6)
        assert 0.0 <= h["oar/roles_unknown_frac"] <= 1.0
        assert "oar/pivot_recall@20" not in h  # plain GRPO has no importance signal
    rand = _train_logs(tmp_path, "random")
    for h in rand:
        assert 0.0 <= h["oar/pivot_recall@10"] <= 1.0 and 0.0 <= h["oar/pivot_recall@20"] <= 1.0
    assert any(abs(h["oar/pivot_adv_share"] - h["oar/pivot_frac"]) > 1e-4 for h in rand)


def test_trainer_rejects_a_non_callable_labeller(tmp_path):
    from oar_rl.trainer import OARTrainer

    with pytest.raises(ValueError, match="token_roles must be a callable"):
        OARTrainer(model=None, token_roles="digits")


# ---------------------------------------------------------------------------------------------------
# the task API and the warm start's role figures


def test_task_api():
    from oar_rl.tasks import SPLITS, get_task

    task = get_task("wordproblems")
    assert task.trainer_kwargs()["token_roles"] is wp.label_roles and "validation" in SPLITS
    rows = task.prompts("train", 4)
    answers = [r["answer"] for r in rows]
    assert task.reward([f"x <answer>{a}</answer>" for a in answers], answer=answers) == [1.0] * 4
    assert task.reward(["<answer>-1</answer>"], answer=["3"]) == [0.0]
    assert get_task("arithmetic").label_roles is None
    with pytest.raises(ValueError, match="unknown task 'chess'"):
        get_task("chess")


def test_role_statistics_of_the_shipped_warm_start():
    """The word-problem warm start's role figures (what the study and `oar-rl demo` write to
    summary.json["task"]), on its own samples of 4 held-out problems."""
    from oar_rl.roles import role_statistics
    from oar_rl.tasks import get_task

    task = get_task("wordproblems")
    ws = task.load_warm_start("default", None)
    stats = role_statistics(
        ws.model,
        ws.tokenizer,
        [r["prompt"] for r in task.prompts("test", 4)],  # the held-out eval split's first problems
        task.trainer_kwargs()["token_roles"],
        max_new_tokens=task.max_completion_length,
        seed=1234,
    )
    assert set(stats) >= {"pivot_fraction", "entropy_by_role", "mean_reasoning_tokens"}
    assert stats["labelled"] + stats["unlabelled"] == 4


def test_completion_token_roles(tok):
    from oar_rl.roles import completion_token_roles

    p = wp.split_problems("eval", 1)[0]
    ids = tok(p.solution, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    roles = completion_token_roles(ids, tok, wp.label_roles)
    assert len(roles) == len(ids) and roles[-1] == "answer"
    assert roles.count("pivot") == sum(len(f"{x}{op}{y}{r}") for x, op, y, r in p.steps)
    assert completion_token_roles(tok("no answer")["input_ids"], tok, wp.label_roles) is None


def test_study_task_adapter(tok):
    from oar_rl.tasks.wordproblems import WORDPROBLEMS

    test = WORDPROBLEMS.prompts("test", 20)
    val = WORDPROBLEMS.prompts("validation", 20)
    assert len(test) == len(val) == 20 and not {r["prompt"] for r in test} & {r["prompt"] for r in val}
    ws = WORDPROBLEMS.load_warm_start("default", None)
    from oar_rl.shipped import WORDPROBLEMS_RECIPE

    assert ws.recipe_hash == WORDPROBLEMS_RECIPE.hash()
    p = wp.split_problems("eval", 1)[0]
    roles = WORDPROBLEMS.label_roles(p.prompt, tok(p.solution)["input_ids"], ws.tokenizer)
    assert roles is not None and "pivot" in roles and "filler" in roles
    assert WORDPROBLEMS.trainer_kwargs()["token_roles"] is wp.label_roles
