"""OARConfig / OARTrainer: the TRL seam, end to end on CPU with a tiny random Qwen2 and a char tokenizer.

Each training test runs a couple of GRPO steps (8-token completions as in TRL's own
tests do) with a deterministic toy reward (fraction of digit characters), captures what
`_generate_and_score_completions` hands to TRL's loss, and checks it against the definitions:
OAR rows sum to A_i·T_i, the entropy baseline matches a slow per-token reference, credit="none" is
bit-identical to `GRPOTrainer`, and a resumed run lands on the uninterrupted run's parameters.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from conftest import ANSWERS, PROMPTS, digit_reward, make_args, make_trainer
from oar_rl.config import OARConfig
from oar_rl.distributed import row_generators
from oar_rl.importance import perturbation_importance
from oar_rl.reshape import token_advantages
from oar_rl.tiny import tiny_qwen2
from oar_rl.trainer import OARTrainer


def capture(trainer: OARTrainer) -> list[dict[str, Any]]:
    """Record, per generation batch, the sequence advantages TRL computed, what the seam returned, and a
    copy of the policy as it was when the batch was generated (the old policy)."""
    records: list[dict[str, Any]] = []
    assign, generate = trainer._assign_credit, trainer._generate_and_score_completions

    def assign_spy(output, mask):
        records[-1]["seq_adv"] = output["advantages"].clone()
        return assign(output, mask)

    def generate_spy(inputs):
        records.append({"policy": copy.deepcopy(trainer.model).eval()})
        out = generate(inputs)
        records[-1]["out"] = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in out.items()}
        return out

    trainer._assign_credit = assign_spy
    trainer._generate_and_score_completions = generate_spy
    return records


def params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def slow_entropies(model, prompt_ids, prompt_mask, completion_ids, completion_mask) -> torch.Tensor:
    """Reference H_t: one sequence at a time, padding stripped, H = -Σ p log p at each completion token."""
    out = torch.zeros(completion_ids.shape, dtype=torch.float64)
    for b in range(completion_ids.shape[0]):
        p = prompt_ids[b][prompt_mask[b].bool()]
        n = int(completion_mask[b].sum())
        if n == 0:
            continue
        ids = torch.cat([p, completion_ids[b, :n]])[None]
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0].double()
        for t in range(n):
            probs = torch.softmax(logits[len(p) - 1 + t], dim=-1)
            out[b, t] = -(probs * torch.log(probs)).sum()
    return out


# ----------------------------------------------------------------------------------------------------
# config
# ----------------------------------------------------------------------------------------------------
def test_config_defaults_follow_paper(tmp_path):
    args = OARConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[])
    assert (args.num_generations, args.temperature, args.learning_rate) == (8, 1.0, 1e-6)
    assert (args.epsilon, args.epsilon_high, args.beta) == (0.2, 0.28, 0.0)
    assert (args.credit, args.probe, args.threshold) == ("oar-g", "as-mean", "quantile")  # as every command
    assert (args.tau, args.oar_beta, args.floor, args.noise_std) == (0.4, 2.0, 0.0, 1e-3)
    assert (args.entropy_alpha, args.entropy_kappa, args.probe_warmup_steps) == (0.4, 2.0, 0)
    assert args.answer_pattern is None and args.mask_token_id is None and args.perturbation_batch_size == 64
    for name in (
        "credit",
        "probe",
        "tau",
        "oar_beta",
        "threshold",
        "floor",
        "noise_std",
        "probe_warmup_steps",
    ):
        assert OARConfig.__dataclass_fields__[name].metadata["help"]


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"credit": "oar"}, r"credit='oar' .*grpo \(alias none\), random, entropy, oar-g, oar-p"),
        ({"probe": "last"}, r"probe='last' .*lt-logits, as-mean, as-joint"),
        ({"threshold": "median"}, r"threshold='median' .*quantile, value"),
        ({"tau": 1.5}, r"tau must be in \[0, 1\], got 1.5"),
        ({"tau": -0.1}, r"tau must be in \[0, 1\], got -0.1"),
        ({"tau": math.nan}, r"tau must be in \[0, 1\], got nan"),
        ({"oar_beta": -1.0}, r"oar_beta must be >= 0.*got -1.0"),
        ({"floor": 1.2}, r"floor must be in \[0, 1\], got 1.2"),
        ({"noise_std": 0.0}, r"noise_std must be > 0, got 0.0"),
        ({"oar_noise_draws": 0}, r"oar_noise_draws must be an int >= 1, got 0"),
        ({"oar_noise_scale": "relative"}, r"oar_noise_scale='relative' .*absolute, rms"),
        ({"perturbation_batch_size": 0}, r"perturbation_batch_size must be >= 1, got 0"),
        ({"entropy_alpha": -0.5}, r"entropy_alpha must be >= 0, got -0.5"),
        ({"entropy_kappa": 0.0}, r"entropy_kappa must be > 1 .*got 0.0"),
        ({"entropy_kappa": 0.5}, r"entropy_kappa must be > 1 .*flip the sign.*got 0.5"),
        ({"probe_warmup_steps": -1}, r"probe_warmup_steps must be >= 0, got -1"),
        ({"mask_token_id": -3}, r"mask_token_id must be .*got -3"),
        ({"answer_pattern": "(a)(b)"}, r"answer_pattern: .* has 2 capturing groups"),
        ({"answer_pattern": "(unclosed"}, r"answer_pattern: .* not a valid regular expression"),
    ],
)
def test_config_rejects_bad_values(tmp_path, overrides, match):
    with pytest.raises(ValueError, match=match):
        OARConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to=[], **overrides)


def test_trainer_requires_oar_config(tmp_path, tokenizer, dataset):
    args = make_args(tmp_path, cls=GRPOConfig)
    with pytest.raises(ValueError, match="OARTrainer needs an OARConfig"):
        make_trainer(args, tokenizer, dataset)


# ----------------------------------------------------------------------------------------------------
# two steps per credit mode
# ----------------------------------------------------------------------------------------------------
class GreedyPathCheck:
    """first-error's checker for the random test model: a text is right when it is the policy's own greedy
    completion of its prompt (the gold column holds the prompt). Monotone along a rollout: right until the
    rollout leaves the greedy path, wrong from there, so the search finds that token in every wrong
    rollout that leaves it."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.trainer, self.cache = tokenizer, None, {}

    def __call__(self, text: str, prompt: str) -> bool:
        key = (prompt, self.trainer.state.global_step)  # the policy that generated this step's batch
        if key not in self.cache:
            ids = torch.tensor([self.tokenizer(prompt)["input_ids"]])
            out = self.trainer.model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                max_new_tokens=self.trainer.args.max_completion_length,
                eos_token_id=self.trainer.eos_token_ids, pad_token_id=self.tokenizer.pad_token_id,
            )  # fmt: skip
            self.cache[key] = self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        return text == self.cache[key]


@pytest.mark.parametrize("credit", ["none", "random", "entropy", "oar-g", "oar-p", "first-error"])
def test_two_steps_per_credit_mode(tmp_path, tokenizer, dataset, credit):
    kwargs = {}
    if credit == "first-error":  # golds and a checker under which the search finds flips
        dataset = Dataset.from_dict({"prompt": PROMPTS, "answer": PROMPTS})
        kwargs["answer_check"] = GreedyPathCheck(tokenizer)
    trainer = make_trainer(make_args(tmp_path, credit=credit), tokenizer, dataset, **kwargs)
    if credit == "first-error":
        kwargs["answer_check"].trainer = trainer
    before = params(trainer.model)
    records = capture(trainer)
    trainer.train()

    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    after = params(trainer.model)
    for name, value in before.items():
        assert not torch.equal(value, after[name]), f"parameter {name} did not change"

    assert len(records) == 2  # one generation batch per step (steps_per_generation = 1)
    for rec in records:
        seq_adv, out = rec["seq_adv"], rec["out"]
        adv, mask = out["advantages"], out["completion_mask"].bool()
        if credit == "none":
            assert torch.equal(adv, seq_adv)  # untouched (B,): exactly TRL's tensor
            continue
        assert adv.shape == out["completion_ids"].shape and adv.dtype == torch.float32
        assert torch.all(adv[~mask] == 0)
        rows_nonzero = seq_adv != 0
        assert torch.all(adv[~rows_nonzero] == 0)
        if credit in ("random", "oar-g", "oar-p", "first-error"):
            # sum-preserving (Eq. 17): Σ_t A_t = A_i · T_i on every row
            expected = seq_adv * mask.sum(1)
            torch.testing.assert_close(adv.sum(1), expected, rtol=1e-5, atol=1e-5)
            # and the credit is really redistributed: not the plain broadcast
            active = rows_nonzero & (mask.sum(1) > 1)
            assert active.any()
            assert not torch.allclose(adv[active], (seq_adv[:, None] * mask)[active])
            # same sign as A_i everywhere (weights are non-negative)
            assert torch.all(adv * seq_adv[:, None] >= 0)
        if credit == "first-error":  # only wrong rows (A_i < 0) are reshaped
            right = seq_adv >= 0
            torch.testing.assert_close(adv[right], (seq_adv[:, None] * mask)[right])

    if credit == "entropy":
        # each batch was scored by its old policy: compare with the slow reference of Eq. 6
        for rec in records:
            out, seq_adv = rec["out"], rec["seq_adv"]
            keys = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
            h = slow_entropies(rec["policy"], *(out[k] for k in keys))
            a = seq_adv.double()[:, None]
            ref = (a + torch.minimum(0.4 * h, a.abs() / 2.0)) * out["completion_mask"]
            ref[seq_adv == 0] = 0.0
            torch.testing.assert_close(out["advantages"].double(), ref, rtol=1e-4, atol=1e-5)

    if credit == "oar-p":
        # old policy: each batch's credit equals a direct recomputation with the weights that generated it
        keys = ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
        for rec in records:
            out, seq_adv = rec["out"], rec["seq_adv"]
            rows = (seq_adv != 0) & out["completion_mask"].bool().any(1)
            importance = perturbation_importance(rec["policy"], *(out[k][rows] for k in keys))
            expected = torch.zeros_like(out["advantages"])
            expected[rows], _ = token_advantages(seq_adv[rows], importance, out["completion_mask"][rows])
            torch.testing.assert_close(out["advantages"], expected, rtol=1e-5, atol=1e-6)
        # ... and the policy did move between the two generation batches
        first, second = (dict(r["policy"].named_parameters()) for r in records)
        assert any(not torch.equal(first[k], second[k]) for k in first)

    logged = [h for h in trainer.state.log_history if "oar/ess_ratio" in h]
    assert len(logged) == 2
    for h in logged:
        assert 0.0 < h["oar/ess_ratio"] <= 1.0 + 1e-6
        assert 0.0 < h["oar/top10_mass"] <= 1.0
        assert 0.0 <= h["oar/boosted_frac"] <= 1.0
        # the random test model writes no answer span: the default probe (as-mean) falls back on every row
        assert h["oar/probe_fallback_frac"] == (1.0 if credit in ("oar-g", "oar-p") else 0.0)
        assert h["oar/importance_seconds"] >= 0.0
        if credit == "none":
            assert h["oar/ess_ratio"] == pytest.approx(1.0, abs=1e-6)
            assert h["oar/boosted_frac"] == 0.0
            assert h["oar/top10_mass"] == pytest.approx(0.125, abs=1e-6)  # K/T = 1/8 with 8-token rows
        elif credit in ("oar-g", "oar-p", "random", "first-error"):
            assert h["oar/ess_ratio"] < 0.999 and h["oar/boosted_frac"] > 0.0


def test_credit_none_is_bit_identical_to_grpo(tmp_path, tokenizer, dataset):
    common = dict(max_steps=1)
    grpo = make_trainer(
        make_args(tmp_path / "grpo", cls=GRPOConfig, **common), tokenizer, dataset, GRPOTrainer
    )
    start = params(grpo.model)
    grpo.train()
    none = make_trainer(make_args(tmp_path / "none", credit="none", **common), tokenizer, dataset)
    assert all(torch.equal(v, start[k]) for k, v in params(none.model).items())
    none.train()
    oarg = make_trainer(make_args(tmp_path / "oarg", credit="oar-g", **common), tokenizer, dataset)
    oarg.train()

    p_grpo, p_none, p_oarg = params(grpo.model), params(none.model), params(oarg.model)
    assert any(not torch.equal(p_grpo[k], start[k]) for k in start)  # the step did something
    assert all(torch.equal(p_grpo[k], p_none[k]) for k in start)
    # the comparison can fail: token advantages change the update
    assert any(not torch.equal(p_grpo[k], p_oarg[k]) for k in start)


def test_resume_matches_uninterrupted_run(tmp_path, tokenizer, dataset):
    common = dict(credit="oar-g", max_steps=4, save_strategy="steps", save_steps=2, save_only_model=False)
    full = make_trainer(make_args(tmp_path / "full", **common), tokenizer, dataset)
    full.train()
    checkpoint = tmp_path / "full" / "out" / "checkpoint-2"
    assert (checkpoint / "trainer_state.json").exists()

    resumed = make_trainer(make_args(tmp_path / "resumed", **common), tokenizer, dataset, seed=1)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    assert resumed.state.global_step == 4
    p_full, p_resumed = params(full.model), params(resumed.model)
    for name in p_full:
        torch.testing.assert_close(p_resumed[name], p_full[name], rtol=0, atol=1e-6, msg=name)
    # a run that differs (another seed for the noise and sampling) does not land there
    other = make_trainer(make_args(tmp_path / "other", **{**common, "seed": 1}), tokenizer, dataset)
    other.train()
    assert any(not torch.allclose(params(other.model)[k], p_full[k], atol=1e-6) for k in p_full)


def test_resume_after_an_evaluation_matches_the_uninterrupted_run(tmp_path, tokenizer, dataset):
    """Evaluation batches draw OAR-G noise from a stream of their own: the checkpoint saved right after an
    evaluation resumes onto the uninterrupted run (before, the evaluation had moved training's batch
    counter, which a resumed run starts afresh)."""
    common = dict(
        credit="oar-g", max_steps=4, save_strategy="steps", save_steps=2, save_only_model=False,
        eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=4,
    )  # fmt: skip
    evals = dataset.select(range(2))
    full = make_trainer(make_args(tmp_path / "full", **common), tokenizer, dataset, eval_dataset=evals)
    full.train()
    keys = full._oar_rng_keys
    assert keys["eval"][0] == 4 and keys["train"] == (3, 0)  # both streams drew, apart
    resumed = make_trainer(make_args(tmp_path / "resumed", **common), tokenizer, dataset, eval_dataset=evals)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "out" / "checkpoint-2"))
    p_full, p_resumed = params(full.model), params(resumed.model)
    for name in p_full:
        torch.testing.assert_close(p_resumed[name], p_full[name], rtol=0, atol=1e-6, msg=name)


def test_generation_batch_reused_across_iterations_and_truncation_masked(tmp_path, tokenizer, dataset):
    # 2 micro-steps per generation, 2 passes over each generation batch: 1 generation for 2 optimizer steps
    args = make_args(
        tmp_path,
        credit="oar-g",
        gradient_accumulation_steps=2,
        num_iterations=2,
        mask_truncated_completions=True,
    )
    trainer = make_trainer(args, tokenizer, dataset)
    records = capture(trainer)
    trainer.train()
    assert len(records) == 1
    out = records[0]["out"]
    assert out["advantages"].shape == out["completion_ids"].shape  # (8, C), split into 2 × (4, C) by TRL
    # truncated completions (no EOS within 8 tokens) are masked: no advantage survives on them
    truncated = out["completion_mask"].sum(1) == 0
    assert torch.all(out["advantages"][truncated] == 0)
    assert all(math.isfinite(h["loss"]) for h in trainer.state.log_history if "loss" in h)


def test_answer_span_probe_warmup_and_fallback(tmp_path, tokenizer, dataset):
    # The random model never writes <answer>…</answer>: after the warm-up every scored row falls back.
    args = make_args(tmp_path, credit="oar-g", probe="as-mean", probe_warmup_steps=1)
    trainer = make_trainer(args, tokenizer, dataset)
    trainer.train()
    fractions = [
        h["oar/probe_fallback_frac"] for h in trainer.state.log_history if "oar/probe_fallback_frac" in h
    ]
    assert fractions == [0.0, 1.0]


def test_reward_function_that_raises_stops_the_run_loudly(tmp_path, tokenizer, dataset):
    def broken_reward(completions, **kwargs):
        raise RuntimeError("reward exploded")

    args = make_args(tmp_path, credit="oar-g", max_steps=4)
    trainer = make_trainer(args, tokenizer, dataset, reward=broken_reward)
    with pytest.raises(RuntimeError, match=r"broken_reward failed on every completion .*reward exploded"):
        trainer.train()
    unsafe = make_trainer(
        make_args(tmp_path, credit="oar-g", safe_rewards=False), tokenizer, dataset, reward=broken_reward
    )
    with pytest.raises(RuntimeError, match="reward exploded"):  # TRL's behaviour when asked for it
        unsafe.train()


def test_a_completion_whose_reward_raises_is_scored_none_and_training_goes_on(
    tmp_path, tokenizer, dataset, caplog
):
    state: dict[str, Any] = {"bad": None}

    def picky_reward(completions, **kwargs):
        if state["bad"] is None:  # the very first completion seen breaks this reward, whenever it appears
            state["bad"] = completions[0]
        if state["bad"] in completions:
            raise RuntimeError("this completion breaks the reward")
        return digit_reward(completions)

    trainer = make_trainer(make_args(tmp_path, credit="oar-g"), tokenizer, dataset, reward=picky_reward)
    with caplog.at_level("WARNING", logger="oar_rl.rewards"):
        trainer.train()
    assert "picky_reward raised on" in caplog.text
    key = "rewards/picky_reward/failed_frac"
    failed = [h[key] for h in trainer.state.log_history if key in h]
    assert failed and 0 < failed[0] < 1  # only the failing completion was dropped, the others were scored
    assert all(math.isfinite(h["loss"]) for h in trainer.state.log_history if "loss" in h)


def test_random_credit_counts_a_batch_with_no_row_to_score(tmp_path, tokenizer, dataset):
    """A rank whose batch has no row to score (all advantages 0) still counts the batch, so the next batch
    of the same step draws the key every other rank draws for it (before: the count stood still there)."""
    trainer = make_trainer(make_args(tmp_path, credit="random"), tokenizer, dataset)
    trainer.model.train()  # as in a training step (evaluation draws from a stream of its own)
    B, C = 4, 6
    output = {
        "prompt_ids": torch.ones(B, 3, dtype=torch.long), "prompt_mask": torch.ones(B, 3, dtype=torch.long),
        "completion_ids": torch.ones(B, C, dtype=torch.long),
        "completion_mask": torch.ones(B, C, dtype=torch.long),
    }  # fmt: skip
    mask = torch.ones(B, C, dtype=torch.bool)
    trainer._assign_credit({**output, "advantages": torch.zeros(B)}, mask)  # nothing to score
    assert trainer._oar_rng_keys["train"] == (0, 0)
    credit = trainer._assign_credit({**output, "advantages": torch.tensor([1.0, -1.0, 0.5, 0.0])}, mask)
    assert trainer._oar_rng_keys["train"] == (0, 1)  # the second batch of step 0
    expected = row_generators(trainer.args.seed, 0, 1, [0, 1, 2])
    want = torch.stack([torch.rand(C, generator=g) for g in expected])
    assert torch.equal(credit.importance[:3], want)  # the random scores are that key's draws


def test_evaluate_uses_token_credit_too(tmp_path, tokenizer, dataset):
    args = make_args(tmp_path, credit="oar-g", per_device_eval_batch_size=4)
    trainer = OARTrainer(
        model=tiny_qwen2(len(tokenizer), seed=0),
        reward_funcs=digit_reward,
        args=args,
        train_dataset=dataset,
        eval_dataset=dataset.select(range(2)),
        processing_class=tokenizer,
    )
    records = capture(trainer)
    metrics = trainer.evaluate()
    assert math.isfinite(metrics["eval_loss"]) and "eval_oar/importance_seconds" in metrics
    assert records and all(r["out"]["advantages"].dim() == 2 for r in records)


DDP_SCRIPT = """
import json, sys, torch
torch.set_num_threads(1)
from datasets import Dataset
from oar_rl.tiny import build_char_tokenizer, tiny_qwen2
from oar_rl.config import OARConfig
from oar_rl.distributed import row_generators
from oar_rl.trainer import OARTrainer

def digit_reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]

out = sys.argv[1]
tok = build_char_tokenizer()
ds = Dataset.from_dict(json.load(open(sys.argv[2])))
args = OARConfig(output_dir=out, credit="oar-g", learning_rate=0.01, per_device_train_batch_size=4,
                 num_generations=4, max_completion_length=8, max_steps=2, use_cpu=True, bf16=False,
                 report_to=[], logging_steps=1, seed=0, gradient_checkpointing=False, save_strategy="no",
                 disable_tqdm=True)
trainer = OARTrainer(model=tiny_qwen2(len(tok), seed=0), reward_funcs=digit_reward, args=args,
                     train_dataset=ds, processing_class=tok)
trainer.train()
rank = trainer.accelerator.process_index
checksum = sum(float(p.double().sum()) for p in trainer.model.parameters())
with open(f"{out}/rank{rank}.json", "w") as f:
    json.dump({"world": trainer.accelerator.num_processes, "checksum": checksum,
               "logs": [h for h in trainer.state.log_history if "loss" in h]}, f)
# tear the process group down before exit: left to interpreter shutdown, gloo's threads can abort a rank
# ("terminate called without an active exception") on a loaded machine; that happened even after an
# explicit teardown (2 ranks beside two other jobs on 2 cores), from C++ destructors at exit, so each rank
# leaves without running them once its file is written and the group is down
trainer.accelerator.wait_for_everyone()
torch.distributed.destroy_process_group()
import os
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


def test_two_process_ddp_gathers_credit_metrics(tmp_path):
    """Two CPU ranks (gloo): the run completes, ranks stay in sync, and both log the same global metrics."""
    import os
    import subprocess
    import sys

    script = tmp_path / "ddp_run.py"
    script.write_text(DDP_SCRIPT)
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"prompt": PROMPTS, "answer": ANSWERS}))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    proc = subprocess.run(
        [*cmd, str(script), str(tmp_path), str(data)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert all(r["world"] == 2 for r in ranks)
    assert ranks[0]["checksum"] == pytest.approx(ranks[1]["checksum"], rel=1e-9, abs=1e-9)
    for a, b in zip(ranks[0]["logs"], ranks[1]["logs"], strict=True):
        assert math.isfinite(a["loss"])
        for key in ("oar/ess_ratio", "oar/top10_mass", "oar/boosted_frac"):
            assert key in a and a[key] == b[key]  # gathered over both ranks before averaging


@pytest.mark.parametrize(
    ("pattern", "text", "span"),
    [(None, "so 4<answer>42</answer>", "42"), ("boxed", r"so \boxed{17} ok", "17")],
)
def test_answer_span_probe_inputs_decode_completions(tmp_path, tokenizer, dataset, pattern, text, span):
    args = make_args(tmp_path, credit="oar-p", probe="as-joint", answer_pattern=pattern)
    trainer = make_trainer(args, tokenizer, dataset)
    rows = [text, "no span here"]
    width = max(len(r) for r in rows)
    ids = torch.zeros(2, width, dtype=torch.long)
    mask = torch.zeros(2, width, dtype=torch.long)
    for b, row in enumerate(rows):
        ids[b, : len(row)] = torch.tensor(tokenizer(row, add_special_tokens=False)["input_ids"])
        mask[b, : len(row)] = 1
    assert trainer._probe() == "as-joint"
    answer_mask, reasoning = trainer._token_masks(ids, mask, span=True)
    start = text.index(span)
    expected_span = torch.zeros(width, dtype=torch.bool)
    expected_span[start : start + len(span)] = True
    assert torch.equal(answer_mask[0], expected_span) and not answer_mask[1].any()
    fmt = text.index("<answer>") if pattern is None else text.index("\\boxed")  # the introducing format
    end = len(text[:fmt].rstrip())  # the whitespace before it is format too
    assert torch.equal(reasoning[0], torch.arange(width) < end)  # reasoning only: the format is not scored
    assert torch.equal(reasoning[1], mask[1].bool())  # no answer marker: every valid token
    args.scored_tokens = "before-answer"  # the earlier behaviour: no reasoning mask
    assert trainer._token_masks(ids, mask, span=True)[1] is None


def test_oar_g_noise_options_reach_the_scorer(tmp_path, tokenizer, dataset, monkeypatch):
    import dataclasses

    from oar_rl import credits

    seen: list[dict[str, Any]] = []
    real = credits.CREDIT_MODES["oar-g"].scorer

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setitem(
        credits.CREDIT_MODES, "oar-g", dataclasses.replace(credits.CREDIT_MODES["oar-g"], scorer=spy)
    )
    args = make_args(
        tmp_path, credit="oar-g", oar_noise_draws=2, oar_noise_scale="rms", noise_std=0.05, max_steps=1
    )
    make_trainer(args, tokenizer, dataset).train()
    assert seen and all(
        k["num_draws"] == 2 and k["noise_scale"] == "rms" and k["noise_std"] == 0.05 for k in seen
    )


def test_loss_sees_exactly_the_sampled_tokens_at_their_sampling_log_probs(tmp_path):
    """What TRL's loss trains on is what `generate` sampled: the same token ids up to and including the
    first EOS, masked after it, with the log-probabilities the sampling distribution gave them (TRL's
    forward runs without position_ids; on the shipped word-problem model, a RoPE Qwen2 with left-padded
    prompts, that must change nothing but rounding). Checked on the real testbed tokenizer and weights."""
    from oar_rl.shipped import load_task_model

    model, tok, _ = load_task_model("wordproblems")
    from oar_rl.data.wordproblems import split_problems

    probs = split_problems("train", 4)
    data = Dataset.from_dict({"prompt": [p.prompt for p in probs], "answer": [str(p.answer) for p in probs]})
    args = make_args(tmp_path, credit="none", per_device_train_batch_size=8, max_completion_length=160,
                     max_steps=1, learning_rate=1e-5)  # fmt: skip
    trainer = OARTrainer(model=model, reward_funcs=digit_reward, args=args, train_dataset=data,
                         processing_class=tok)  # fmt: skip
    sampled: list[torch.Tensor] = []
    generate = trainer.model.generate

    def generate_spy(*a, **kw):
        out = generate(*a, **kw)
        sampled.append(out.clone())
        return out

    trainer.model.generate = generate_spy
    seen: list[dict[str, torch.Tensor]] = []
    compute_loss = trainer._compute_loss

    def loss_spy(model, inputs):
        seen.append({k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)})
        return compute_loss(model, inputs)

    trainer._compute_loss = loss_spy
    policy = copy.deepcopy(trainer.model).eval()
    trainer.train()
    assert len(sampled) == 1 and len(seen) == 1
    inputs, gen = seen[0], sampled[0]
    p_ids, p_mask = inputs["prompt_ids"], inputs["prompt_mask"]
    c_ids, c_mask = inputs["completion_ids"], inputs["completion_mask"]
    width, eos = p_ids.shape[1], tok.eos_token_id
    assert gen.shape[1] > width and gen.shape[0] == c_ids.shape[0]

    def through_eos(row: list[int]) -> list[int]:
        return row[: row.index(eos) + 1] if eos in row else row

    # every sampled row (prompt without padding, completion through its first EOS), as a multiset: TRL may
    # shuffle rows between generation and loss
    sampled_rows = sorted(
        (tuple(g[:width][g[:width] != tok.pad_token_id].tolist()), tuple(through_eos(g[width:].tolist())))
        for g in gen
    )
    loss_rows = []
    for b in range(c_ids.shape[0]):
        n = int(c_mask[b].sum())
        assert bool(c_mask[b, :n].all()) and not c_mask[b, n:].any()  # one block of real tokens
        assert c_ids[b, n - 1] == eos or n == c_ids.shape[1]  # it ends at EOS (or at the length cap)
        loss_rows.append((tuple(p_ids[b][p_mask[b].bool()].tolist()), tuple(c_ids[b, :n].tolist())))
    assert sorted(loss_rows) == sampled_rows
    # the log-probs the loss sees are the sampling distribution's (positions as generate used them)
    ids, attn = torch.cat([p_ids, c_ids], 1), torch.cat([p_mask, c_mask], 1)
    with torch.no_grad():
        loss_side, _, _ = trainer._get_per_token_logps_and_entropies(policy, ids, attn, c_ids.shape[1])
        pos = (attn.cumsum(1) - 1).clamp(min=0)
        # body and head of the copy (TRL's patched forward would fall back to the original model's forward)
        hidden = policy.model(input_ids=ids, attention_mask=attn, position_ids=pos).last_hidden_state
        logits = policy.lm_head(hidden[:, p_ids.shape[1] - 1 : -1])
        sampling = torch.log_softmax(logits.float(), -1).gather(-1, c_ids[..., None])[..., 0]
    m = c_mask.bool()
    torch.testing.assert_close(loss_side[m], sampling[m], rtol=0, atol=1e-4)
