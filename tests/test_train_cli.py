"""`oar-rl train`: recipe parsing, the tiny CPU recipe end to end (train, save, resume), clear errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from datasets import Dataset

from conftest import another_version
from oar_rl import checkpoints, cli, train
from oar_rl.tiny import build_char_tokenizer, tiny_qwen2

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny-cpu.yaml")
RECIPES = sorted((ROOT / "configs").glob("qwen2.5-*-dapo-*.yaml"))
MODES = {"grpo": "none", "random": "random", "entropy": "entropy", "oar-g": "oar-g", "oar-p": "oar-p"}


def digit_reward(completions: list[str], **kwargs) -> list[float]:
    """Deterministic toy reward with variance on a random model (math rewards are all 0 there)."""
    return [sum(ch.isdigit() for ch in c) / max(1, len(c)) for c in completions]


def trainer_state(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "trainer_state.json").read_text())


# ----------------------------------------------------------------------------------------------------
# recipes
# ----------------------------------------------------------------------------------------------------
def test_paper_recipes_exist_for_both_models_and_every_mode():
    names = {p.stem for p in RECIPES}
    expected = {f"{m}-dapo-{mode}" for m in ("qwen2.5-7b", "qwen2.5-math-7b") for mode in MODES}
    assert names == expected


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_paper_recipe_parses_with_section_4_1_settings(recipe):
    # bf16 is switched off only because this machine has no GPU; everything else is the file's.
    data_args, args, model_args = train.build_parser().parse_args_and_config(
        ["--config", str(recipe), "--bf16", "false"]
    )
    mode = recipe.stem.split("-dapo-")[1]
    assert args.credit == MODES[mode]
    assert model_args.model_name_or_path in ("Qwen/Qwen2.5-7B", "Qwen/Qwen2.5-Math-7B")
    assert ("math" in recipe.stem) == (model_args.model_name_or_path == "Qwen/Qwen2.5-Math-7B")
    assert data_args.dataset == "dapo-math" and data_args.reward_funcs == ["accuracy", "format"]
    assert (args.num_generations, args.learning_rate, args.temperature) == (8, 1e-6, 1.0)
    assert args.max_completion_length == 1024
    assert (args.tau, args.oar_beta, args.beta, args.epsilon, args.epsilon_high) == (0.4, 2.0, 0.0, 0.2, 0.28)
    # 8 GPUs x 8 per device x 8 accumulation = 512 completions = 64 prompts x G
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps * 8 == 64 * 8
    assert args.use_vllm and args.vllm_mode == "colocate"
    assert model_args.dtype == "bfloat16" and args.gradient_checkpointing


# ----------------------------------------------------------------------------------------------------
# end to end
# ----------------------------------------------------------------------------------------------------
def test_train_tiny_recipe_saves_and_resumes(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    common = ["--config", TINY, "--model_name_or_path", str(tiny_model_dir), "--output_dir", str(out)]
    # the recipe's rewards (accuracy, format) plus a toy one imported by dotted path (this module)
    rewards = ["--reward_funcs", "accuracy", "format", f"{__name__}.digit_reward"]
    overrides = [
        "--credit",
        "oar-p",
        *rewards,
        "--max_steps",
        "2",
        "--save_strategy",
        "steps",
        "--save_steps",
        "1",
    ]
    assert cli.main(["train", *common, *overrides]) == 0
    assert "credit=oar-p done at step 2" in capsys.readouterr().out

    state = trainer_state(out / "checkpoint-2")
    assert state["global_step"] == 2
    logs = [h for h in state["log_history"] if "loss" in h]
    assert len(logs) == 2
    for h in logs:
        assert 0.0 < h["oar/ess_ratio"] < 1.0 and math.isfinite(h["loss"])
        for name in ("accuracy_reward", "format_reward", "digit_reward"):
            assert f"rewards/{name}/mean" in h
    saved = tiny_qwen2(len(build_char_tokenizer()), seed=0).from_pretrained(out)
    initial = tiny_qwen2(len(build_char_tokenizer()), seed=0)
    assert any(not torch.equal(p, q) for p, q in zip(saved.parameters(), initial.parameters(), strict=True))

    # resume from the newest checkpoint and go one step further
    assert train.main([*common, *overrides, "--max_steps", "3", "--resume_from_checkpoint", "true"]) == 0
    assert trainer_state(out / "checkpoint-3")["global_step"] == 3

    # resuming under other settings mixes two runs (the checkpoint's scheduler wins): refused, naming them
    capsys.readouterr()
    again = [*common, *overrides, "--max_steps", "4", "--resume_from_checkpoint", "latest"]
    assert train.main([*again, "--learning_rate", "0.5", "--tau", "0.9"]) == 2
    err = capsys.readouterr().err
    assert "was saved under other settings (learning_rate: " in err and "tau: 0.4 -> 0.9" in err
    # the model is recorded; a resume that would load another one (a retrained directory, a moved Hub
    # branch) is refused, naming both
    import shutil

    identity = json.loads((out / checkpoints.MODEL_FILE).read_text())
    assert identity["model"] == str(Path(tiny_model_dir).resolve()) and len(identity["fingerprint"]) == 16
    other = tmp_path / "other-model"
    shutil.copytree(tiny_model_dir, other)
    another_version(other)
    moved = [str(other) if a == str(tiny_model_dir) else a for a in again]
    assert train.main(moved) == 2
    assert f"was trained from {identity['model']} (fingerprint {identity['fingerprint']})" in (
        capsys.readouterr().err
    )
    (out / checkpoints.MODEL_FILE).unlink()  # a run started before the model was recorded: warned, recorded
    with pytest.warns(UserWarning, match="cannot be checked against the one it was trained from"):
        assert train.main(again) == 0
    assert json.loads((out / checkpoints.MODEL_FILE).read_text()) == identity
    # a fresh run into the directory of another: its logs.jsonl would mix, `latest` would pick its checkpoint
    assert train.main([*common, *overrides]) == 2
    assert (
        "holds another run (checkpoint-4, checkpoint-3, checkpoint-2, logs.jsonl)" in capsys.readouterr().err
    )
    # a save cut short: `latest` skips it, naming it; named, it is refused
    (out / "checkpoint-4" / "trainer_state.json").unlink()
    with pytest.warns(UserWarning, match=r"skipping .*checkpoint-4, an incomplete checkpoint"):
        assert checkpoints.resolve_checkpoint("latest", str(out)) == str(out / "checkpoint-3")
    with pytest.raises(ValueError, match=r"not a complete checkpoint \(no trainer_state\.json\)"):
        checkpoints.resolve_checkpoint(str(out / "checkpoint-4"), str(out))


# ----------------------------------------------------------------------------------------------------
# clear errors
# ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--reward_funcs", "accuracy", "bogus"], "unknown reward function 'bogus'; valid: accuracy, format"),
        (
            ["--reward_funcs", "no_such_module.fn"],
            "reward function 'no_such_module.fn' could not be imported",
        ),
        (["--reward_weights", "1.0"], "reward_weights has 1 values but there are 2 reward functions"),
        (["--tau", "2"], r"tau must be in [0, 1], got 2.0"),
        (["--credit", "oar-x"], "--credit='oar-x' is not valid (did you mean 'oar-"),
        (["--resume_from_checkpoint", "true"], "no checkpoint-* directory"),
        (["--resume_from_checkpoint", "/no/such/checkpoint"], "not a directory"),
        (["--model_name_or_path", ""], "--model is required (TRL's --model_name_or_path)"),
        (["--dataset", ""], "--dataset is required"),
        (["--limit", "0"], "limit must be >= 1"),
    ],
)
def test_configuration_errors_are_reported(tiny_model_dir, tmp_path, capsys, extra, message):
    argv = [
        "--config",
        TINY,
        "--model_name_or_path",
        str(tiny_model_dir),
        "--output_dir",
        str(tmp_path / "o"),
        *extra,
    ]
    try:
        code = train.main(argv)
    except SystemExit as exit_:  # argparse's own errors (bad choices) exit with 2
        code = exit_.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_dataset_without_answer_column_is_rejected(monkeypatch):
    from oar_rl import data

    no_answer = Dataset.from_dict({"prompt": ["1+1="], "question": ["x"]})
    monkeypatch.setattr(data, "load", lambda *a, **k: no_answer, raising=False)
    args = train.DataArguments(dataset="my-data")
    with pytest.raises(ValueError, match=r"no 'answer' column, which the accuracy reward needs; columns: \["):
        train.load_train_dataset(args, ["accuracy", "format"])
    assert len(train.load_train_dataset(args, ["format"])) == 1  # format alone does not need it
    no_prompt = Dataset.from_dict({"question": ["x"], "answer": ["2"]})
    monkeypatch.setattr(data, "load", lambda *a, **k: no_prompt, raising=False)
    with pytest.raises(ValueError, match="no 'prompt' column"):
        train.load_train_dataset(args, ["format"])


def test_reward_from_dotted_path(monkeypatch):
    fn = train.resolve_reward("oar_rl.rewards.format_reward")
    assert fn(["<answer>2</answer>"]) == [1.0]
    with pytest.raises(ValueError, match="is not callable"):
        train.resolve_reward("oar_rl.rewards.__doc__")


def test_local_file_dataset_without_answer_is_a_clear_error(tiny_model_dir, tmp_path, capsys):
    path = tmp_path / "questions.jsonl"
    path.write_text('{"question": "1+1=", "hint": "two"}\n')
    argv = ["--config", TINY, "--model_name_or_path", str(tiny_model_dir), "--dataset", str(path)]
    assert train.main([*argv, "--output_dir", str(tmp_path / "o")]) == 2
    assert "no answer column" in capsys.readouterr().err


def test_train_on_local_file_with_named_columns(tiny_model_dir, tmp_path):
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps({"q": f"{i}+{i}=", "gold": str(2 * i)}) + "\n" for i in range(8)))
    argv = [
        "--config",
        TINY,
        "--model_name_or_path",
        str(tiny_model_dir),
        "--output_dir",
        str(tmp_path / "o"),
    ]
    extra = ["--dataset", str(path), "--question_column", "q", "--answer_column", "gold", "--max_steps", "1"]
    assert (
        train.main([*argv, *extra, "--credit", "random", "--reward_funcs", f"{__name__}.digit_reward"]) == 0
    )
    assert (tmp_path / "o" / "model.safetensors").exists()


def test_sharded_checkpoints_are_complete_and_unreadable_args_are_a_warning(tmp_path):
    """FSDP's SHARDED_STATE_DICT and DeepSpeed ZeRO keep the weights in a subdirectory (Trainer resumes from
    them); a training_args.bin another version cannot unpickle does not block a resume."""
    ckpt = tmp_path / "checkpoint-5"
    (ckpt / "global_step5").mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text("{}")
    assert checkpoints.missing_parts(ckpt) == []
    assert checkpoints.resolve_checkpoint("latest", str(tmp_path)) == str(ckpt)
    (ckpt / "global_step5").rmdir()
    assert checkpoints.missing_parts(ckpt) == [
        "weights (model.safetensors or pytorch_model.bin or adapter_model.safetensors, or a sharded state)"
    ]
    (ckpt / "training_args.bin").write_bytes(b"not a pickle")
    with pytest.warns(UserWarning, match="cannot read its training_args.bin"):
        checkpoints.check_resume(str(ckpt), object())
    assert checkpoints.checkpoints(tmp_path / "missing") == []


def test_a_hub_model_is_trained_at_one_commit_and_a_resume_on_a_moved_branch_is_refused(
    tiny_model_dir, tmp_path, capsys, offline_hub
):
    """Offline here (the commit comes from the cache's refs; online the Hub is asked): the run loads the
    resolved commit, records it, and a resume after the branch moved names the commit to pin."""
    import json
    import shutil

    from conftest import hub_cache

    cache = offline_hub
    old, new = "a" * 40, "b" * 40
    hub_cache(cache, "org/tiny", old, Path(tiny_model_dir))
    out = tmp_path / "run"
    args = ["--config", TINY, "--model_name_or_path", "org/tiny", "--output_dir", str(out),
            "--max_steps", "1", "--save_strategy", "steps", "--save_steps", "1"]  # fmt: skip
    assert train.main(args) == 0
    recorded = json.loads((out / checkpoints.MODEL_FILE).read_text())
    assert recorded == {"model": "org/tiny", "fingerprint": f"hub:{old}"}
    moved = tmp_path / "moved"
    shutil.copytree(tiny_model_dir, moved)
    hub_cache(cache, "org/tiny", new, moved)  # the branch moves
    capsys.readouterr()
    resume = [*args[:-6], "--max_steps", "2", "--save_strategy", "steps", "--save_steps", "1",
              "--resume_from_checkpoint", "latest"]  # fmt: skip
    assert train.main(resume) == 2
    assert f"--model_revision {old}" in capsys.readouterr().err
    assert train.main([*resume, "--model_revision", old]) == 0  # pinned to the commit it was trained from
    # a recipe's model_init_kwargs revision is the pin too, and may not disagree with --model_revision
    assert (
        train.main(
            [*args[:5], str(tmp_path / "r2"), *args[6:], "--model_init_kwargs", f'{{"revision": "{old}"}}']
        )
        == 0
    )
    assert json.loads((tmp_path / "r2" / checkpoints.MODEL_FILE).read_text())["fingerprint"] == f"hub:{old}"
    conflict = [*args[:5], str(tmp_path / "r3"), *args[6:], "--model_revision", new,
                "--model_init_kwargs", '{"revision": "main"}']  # fmt: skip
    assert train.main(conflict) == 2 and "disagree" in capsys.readouterr().err
    # resuming another run's checkpoint into a new directory checks that run's model
    other = [*args[:3], str(tiny_model_dir), "--output_dir", str(tmp_path / "r4"), *args[6:-4],
             "--max_steps", "2", "--resume_from_checkpoint", str(out / "checkpoint-1")]  # fmt: skip
    assert train.main(other) == 2 and f"fingerprint hub:{old}" in capsys.readouterr().err
    # a LoRA adapter records its base's commit (TRL's peft config names none: PEFT would load `main`)
    lora = [*args[:5], str(tmp_path / "r6"), *args[6:], "--use_peft"]
    assert train.main(lora) == 0
    adapter = json.loads(next((tmp_path / "r6").rglob("adapter_config.json")).read_text())
    assert adapter["revision"] == new  # `main` has moved to `new` by now: the run was pinned there
    # a revision is for a Hub id
    local = [*args[:3], str(tiny_model_dir), "--output_dir", str(tmp_path / "r5"), *args[6:]]
    assert (
        train.main([*local, "--model_revision", "v1"]) == 2 and "is for a Hub id" in capsys.readouterr().err
    )


def test_a_fingerprint_reads_weights_in_subfolders_when_none_are_at_the_top(tmp_path):
    from oar_rl.model_identity import model_fingerprint

    for name in ("a", "b"):
        (tmp_path / name / "sub").mkdir(parents=True)
        (tmp_path / name / "config.json").write_text("{}")
        (tmp_path / name / "sub" / "model.safetensors").write_bytes(name.encode() * 100)
    assert model_fingerprint(str(tmp_path / "a")) != model_fingerprint(str(tmp_path / "b"))


# ----------------------------------------------------------------------------------------------------
# --credit-module
# ----------------------------------------------------------------------------------------------------
@pytest.fixture
def rule_files(tmp_path):
    """Two credit-module files, each registering one rule; unloaded after the test."""
    from oar_rl import credits
    from oar_rl.credit_modules import LOADED

    paths = []
    for stem in ("t_rules_a", "t_rules_b"):
        path = tmp_path / f"{stem}.py"
        path.write_text(
            "from oar_rl import register_credit\n"
            f"register_credit('t-{stem[-1]}', lambda m, b, **kw: b.completion_mask.float(), "
            "reshape='weights')\n"
        )
        paths.append(str(path))
    yield paths
    for path in paths:
        mod = LOADED.pop(str(Path(path).resolve()), None)
        for name in mod.rules if mod else ():
            if name in credits.CREDIT_MODES:
                credits.unregister_credit(name)


def _parse_train(argv):
    train._load_credit_modules(argv)  # as main does, before the parser
    return train.build_parser().parse_args_and_config(argv)[1]


def test_credit_module_takes_several_values_and_repeats_accumulate(rule_files, tmp_path):
    """`--credit-module a.py b.py` (train's help shows nargs '+'): the pre-scan loaded only a.py, so
    `--credit t-b` failed argparse's choices; `--credit-module a --credit-module b` recorded only b."""
    from oar_rl.credit_modules import specs_in_argv

    a, b = rule_files
    rest = ["--output_dir", str(tmp_path / "out"), "--use_cpu", "true", "--report_to", "none"]
    assert specs_in_argv(["--credit-module", a, b, "--credit", "t-b"]) == [a, b]
    assert specs_in_argv(["--credit_module", a, "--x", "--credit-module=" + b, "c"]) == [a, b]
    args = _parse_train(["--credit-module", a, b, "--credit", "t-b", *rest])
    assert args.credit == "t-b" and args.credit_module == [a, b]
    args = _parse_train(["--credit-module", a, "--credit", "t-a", "--credit_module", b, *rest])
    assert args.credit == "t-a" and args.credit_module == [a, b]
    recipe = tmp_path / "recipe.yaml"  # the recipe's modules, then the command line's (all loaded)
    recipe.write_text(f"credit_module: [{a}]\ncredit: t-a\n")
    args = _parse_train(["--config", str(recipe), "--credit-module", b, a, *rest])
    assert args.credit == "t-a" and args.credit_module == [a, b]
