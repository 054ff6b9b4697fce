"""Issue 12: no silent no-ops (zero-step training, empty files), no runaway memory (a bad model cache)."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
from transformers import Qwen2ForCausalLM

from oar_rl import cli, tiny
from oar_rl.tiny import ModelSpec, Recipe, SFTSpec

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny-cpu.yaml")
# builds in about a second: one SFT step on a 4-problem pool
MICRO = Recipe(
    model=ModelSpec(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=32),
    sft=SFTSpec(steps=1, batch_size=2, warmup_steps=0, num_problems=4),
)


@pytest.fixture
def no_big_models(monkeypatch):
    """Any attempt to instantiate a Qwen2 wider than 1024 fails at once instead of eating the machine."""
    original = Qwen2ForCausalLM.__init__

    def guarded(self, config, *args, **kwargs):
        if config.hidden_size > 1024:
            raise AssertionError(f"a default-sized Qwen2 was built (hidden_size={config.hidden_size})")
        original(self, config, *args, **kwargs)

    monkeypatch.setattr(Qwen2ForCausalLM, "__init__", guarded)


@pytest.mark.parametrize(
    "damage",
    ["delete config.json", "empty config.json", "truncate weights", "delete tokenizer.json", "wrong shape"],
)
def test_bad_cache_entry_is_rebuilt_never_loaded_with_a_default_config(
    tmp_path, no_big_models, damage, capsys
):
    _, _, path = tiny.load_default_model(MICRO, cache_dir=tmp_path, progress=False)
    if damage == "delete config.json":
        (path / "config.json").unlink()
    elif damage == "empty config.json":
        (path / "config.json").write_text("")
    elif damage == "truncate weights":
        w = path / "model.safetensors"
        w.write_bytes(w.read_bytes()[:-100])
    elif damage == "delete tokenizer.json":
        (path / "tokenizer.json").unlink()
    else:
        cfg = json.loads((path / "config.json").read_text())
        cfg["hidden_size"] = 4096
        (path / "config.json").write_text(json.dumps(cfg))
    assert tiny.cache_problem(path, MICRO) is not None
    model, tok, again = tiny.load_default_model(MICRO, cache_dir=tmp_path, progress=False)
    assert again == path and model.config.hidden_size == 16 and len(tok) == model.config.vocab_size
    assert "unusable" in capsys.readouterr().err  # said so, even with progress=False
    assert tiny.cache_problem(path, MICRO) is None


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _train(model_dir, out, *extra) -> list[str]:
    return [
        "train",
        "--config",
        TINY,
        "--model_name_or_path",
        str(model_dir),
        "--output_dir",
        str(out),
        *extra,
    ]


def test_train_on_too_small_dataset_is_an_error_not_a_zero_step_run(tiny_model_dir, tmp_path, capsys):
    one = _write(tmp_path / "one.jsonl", json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")
    # tiny-cpu.yaml: 8 completions per step, 4 per prompt -> each generation batch needs 2 prompts
    assert cli.main(_train(tiny_model_dir, tmp_path / "run", "--dataset", one)) == 2
    err = capsys.readouterr().err
    assert "1 row" in err and "2 prompts" in err
    assert not (tmp_path / "run" / "model.safetensors").exists()


@pytest.mark.parametrize("text", ["", "\n\n", '{"foo": 1}\n'])
def test_train_on_empty_or_columnless_file_is_one_clear_line(tiny_model_dir, tmp_path, capsys, text):
    bad = _write(tmp_path / "bad.jsonl", text)
    assert cli.main(_train(tiny_model_dir, tmp_path / "run", "--dataset", bad)) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("oar-rl train")]
    assert len(err) == 1 and "bad.jsonl" in err[0] and "Traceback" not in err[0]
    assert ("empty" in err[0]) if not text.strip() else ("column" in err[0])


@pytest.mark.parametrize("text", ["", '{"foo": 1}\n'])
def test_eval_on_empty_or_columnless_file_is_one_clear_line(tiny_model_dir, tmp_path, capsys, text):
    bad = _write(tmp_path / "bad.jsonl", text)
    argv = ["eval", "--model", str(tiny_model_dir), "--out", str(tmp_path / "ev"), "--benchmarks", bad]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl" in err and "Hub" not in err and "DATA_DIR" not in err
    assert ("empty" in err) if not text.strip() else ("column" in err)


# ----------------------------------------------------------------------------------------------------
# trackers and terminal output
# ----------------------------------------------------------------------------------------------------
def test_two_step_demo_run_logs_to_tensorboard_and_a_jsonl_file(tiny_model_dir, tmp_path, capsys):
    from oar_rl.answer_span import ANSWER_TAG_PATTERN
    from oar_rl.data.arithmetic import load
    from oar_rl.study.training import train_policy
    from oar_rl.tasks import exact_reward

    logs = tmp_path / "logs"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train_policy(  # two steps of 2x2 completions, as the removed arithmetic demo's test preset ran them
            tiny_model_dir,
            load("train", 8),
            exact_reward,
            credit="oar-g",
            seed=0,
            steps=2,
            prompts_per_step=2,
            num_generations=2,
            learning_rate=5e-5,
            max_completion_length=12,
            temperature=1.0,
            workdir=tmp_path / "work",
            probe="as-mean",
            tau=0.4,
            oar_beta=2.0,
            answer_pattern=ANSWER_TAG_PATTERN,
            report_to="tensorboard",
            log_dir=logs,
            desc="oar-g",
        )
    deprecations = [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]
    assert not [m for m in deprecations if "checkpointing" in m], deprecations  # known harmless: silenced
    events = list((logs / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logs / "tensorboard"))
    acc.Reload()
    assert any("reward" in tag for tag in acc.Tags()["scalars"])
    rows = [json.loads(line) for line in (logs / "logs.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "reward" in r] == [1, 2]
    captured = capsys.readouterr()
    # the terminal shows a bar, not TRL's log dicts
    assert "'reward'" not in captured.out + captured.err and "oar-g" in captured.err
    assert "Loading weights" not in captured.err  # the warm start's load showed the one bar


def test_missing_tracker_is_refused_before_any_loading(monkeypatch):
    import importlib.util

    from oar_rl import console

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "trackio" else real(n, *a))
    with pytest.raises(ValueError, match=r"oar-rl\[trackers\]"):
        console.check_trackers("tensorboard,trackio")
    assert console.check_trackers("none") == [] and console.check_trackers(["tensorboard"]) == ["tensorboard"]


def test_summary_lines():
    from oar_rl.console import summary

    hist = [{"step": 1, "reward": 0.25, "loss": 0.1}, {"step": 2, "reward": 0.75}, {"train_runtime": 3.0}]
    assert summary(hist) == [
        "2 steps logged",
        "reward: 0.25 -> 0.75 (mean 0.5)",
        "loss: 0.1 -> 0.1 (mean 0.1)",
    ]
    assert summary([]) == ["no logged steps"]


# ----------------------------------------------------------------------------------------------------
# one flag style, TRL's dataset names, defaults in every help, OAR options under their own heading
# ----------------------------------------------------------------------------------------------------
def test_eval_and_analysis_commands_take_both_spellings():
    from oar_rl.eval import evaluation

    a = evaluation.build_parser().parse_args(["--model", "m", "--out", "o", "--max_new_tokens", "7"])
    b = evaluation.build_parser().parse_args(["--model", "m", "--out", "o", "--max-new-tokens", "7"])
    assert a.max_new_tokens == b.max_new_tokens == 7


def test_train_takes_trl_dataset_names_on_the_command_line_and_in_yaml(tmp_path):
    from oar_rl import train

    argv = ["--dataset_name", "gsm8k", "--dataset_train_split", "test", "--use_cpu", "true"]
    data_args, _, _ = train.build_parser().parse_args_and_config(argv)
    assert (data_args.dataset, data_args.dataset_split) == ("gsm8k", "test")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("dataset_name: arithmetic\ndataset_train_split: eval\nuse_cpu: true\n")
    data_args, _, _ = train.build_parser().parse_args_and_config(["--config", str(recipe)])
    assert (data_args.dataset, data_args.dataset_split) == ("arithmetic", "eval")
    recipe.write_text("dataset: arithmetic\ndataset_name: gsm8k\nuse_cpu: true\n")
    with pytest.raises(ValueError, match="alias"):
        train.build_parser().parse_args_and_config(["--config", str(recipe)])


@pytest.mark.parametrize(
    ("command", "flag", "default"),
    [
        ("eval", "--temperature", "0.6"),
        ("attribute", "--max-new-tokens", "96"),
        ("oracle", "--max-problems", "400"),
        ("oracle", "--model", "the task's warm start"),
        ("bench", "--threads", "1"),
        ("demo", "--out", "demo_out"),
        ("train", "--tau", "0.4"),
    ],
)
def test_every_help_shows_defaults(command, flag, default, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    assert exit_.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"  {flag}[ ,]|  {flag}$", line))
    entry = [lines[start]]  # the option's entry: its line and the indented lines under it
    for line in lines[start + 1 :]:
        if not line.startswith("   ") or line.lstrip().startswith("--"):
            break
        entry.append(line)
    assert f"(default: {default})" in " ".join(" ".join(entry).split())


def test_train_help_lists_oar_options_first_under_their_heading(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = capsys.readouterr().out
    headings = ("OAR options: model, data", "OAR options: credit", "TRL options")
    data, credit, trl = (text.index(h) for h in headings)
    assert data < credit < trl
    assert (
        data
        < text.index("--model_name_or_path")
        < text.index("--dataset_name")
        < credit
        < text.index("--credit")
        < text.index("--tau")
        < trl
    )
    assert trl < text.index("--learning_rate")


# ----------------------------------------------------------------------------------------------------
# oracle: samples only what --trajectories needs, warns when it finds fewer; report items
# ----------------------------------------------------------------------------------------------------
def test_oracle_samples_only_what_n_needs(tiny_model_dir, monkeypatch):
    import oar_rl.data.arithmetic as arithmetic
    from oar_rl.analysis import recall
    from oar_rl.analysis.attribute import load_model

    monkeypatch.setattr(arithmetic, "check", lambda text, answer: True)
    model, tok = load_model(str(tiny_model_dir))
    ds = arithmetic.load("eval").select(range(200))
    trajs, correct = recall.sample_correct(model, tok, ds, 3, max_new_tokens=4, seed=0, chunk=8)
    assert len(correct) == 3 and len(trajs) == 8  # one chunk, not all 200 prompts


def test_oracle_warns_when_fewer_correct_than_n_and_plots_n_and_intervals(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    import oar_rl.data.arithmetic as arithmetic
    from oar_rl.analysis import recall

    monkeypatch.setattr(arithmetic, "check", lambda text, answer: len(text) % 2 == 1)
    titles = []
    real_plot = recall.plot_recall
    monkeypatch.setattr(recall, "plot_recall", lambda *a, **k: titles.append(k) or real_plot(*a, **k))
    out = tmp_path / "o"
    argv = [
        "--model",
        str(tiny_model_dir),
        "--trajectories",
        "50",
        "--max-problems",
        "6",
        "--max-new-tokens",
        "7",
    ]
    assert recall.main([*argv, "--credits", "random", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    result = json.loads((out / "recall.json").read_text())
    assert f"only {result['trajectories']} correct trajectories of the 50 asked for" in err
    assert titles[0]["n"] == result["trajectories"]
    for k, (lo, hi) in result["recall_ci95"]["random"].items():
        assert lo <= result["recall"]["random"][k] + 1e-9 and result["recall"]["random"][k] <= hi + 1e-9


def test_heatmaps_grey_unscored_tokens_and_caption_matches_rows():
    import torch

    from oar_rl.analysis.attribute import Trajectory, heatmap_page
    from oar_rl.tiny import build_char_tokenizer

    tok = build_char_tokenizer()
    c_ids = torch.tensor(tok("12<answer>3</answer>", add_special_tokens=False)["input_ids"])
    t = Trajectory("p", "", "3", torch.tensor([5]), c_ids)
    scores = torch.zeros(1, c_ids.numel())  # (1, C): normalised scores are 0 outside the reasoning tokens
    scored = torch.zeros(1, c_ids.numel(), dtype=torch.bool)
    scored[0, :2] = True
    page = heatmap_page([t], tok, {"oar-p": scores}, "t", scored=scored)
    assert page.count(' · not scored"') == c_ids.numel() - 2
    assert "oracle" not in page
    page = heatmap_page([t], tok, {"oar-p": scores, "oracle": scores}, "t", scored=scored)
    assert "oracle row" in page


def test_results_md_names_the_embedded_model_not_its_hash(tmp_path):
    from oar_rl.eval.evaluation import results_markdown
    from oar_rl.fetch import display_model_name

    entry = tmp_path / tiny.DEFAULT_RECIPE.hash()
    entry.mkdir()
    (entry / "oar_rl_recipe.json").write_text("{}")
    assert display_model_name(str(entry)) == "default (embedded)"
    other = tmp_path / "0123456789abcdef"
    other.mkdir()
    (other / "oar_rl_recipe.json").write_text("{}")
    assert display_model_name(str(other)) == "embedded (recipe 0123456789abcdef)"
    assert display_model_name("Qwen/Qwen2.5-7B") == "Qwen2.5-7B"
    cfg = {"model": str(entry), "k": [1], "n": 1, "temperature": 0.6, "top_p": 1, "max_new_tokens": 8}
    cfg |= {"template": "answer-tag", "seed": 0}
    bench = {"gsm8k": {"pass@1": 0.5, "num_problems": 2, "num_scored": 2}}
    md = results_markdown({"config": cfg, "benchmarks": bench, "avg": 0.5})
    assert "| default (embedded) |" in md and tiny.DEFAULT_RECIPE.hash() not in md
    assert "template=answer-tag, seed=0" in md  # an older results.json: no per-benchmark template
    # the template as applied: task benchmarks are in their own format (results.md said answer-tag)
    row = {"pass@1": 0.5, "num_problems": 2, "num_scored": 2}
    bench = {"gsm8k": row | {"template": "answer-tag"}, "wordproblems": row | {"template": None}}
    md = results_markdown({"config": cfg, "benchmarks": bench, "avg": 0.5})
    assert "template=answer-tag (not wordproblems: task benchmarks, in their own format)" in md
    del bench["gsm8k"]
    md = results_markdown({"config": cfg, "benchmarks": bench, "avg": 0.5})
    assert "template=none (task benchmarks, in their own format)" in md


def test_train_warns_when_every_completion_is_clipped(tiny_model_dir, tmp_path):
    # a random model never emits EOS within 4 tokens: every completion is clipped
    argv = _train(tiny_model_dir, tmp_path / "run", "--max_completion_length", "4", "--max_steps", "1")
    with pytest.warns(UserWarning, match="every completion at step 1 was clipped at max_completion_length=4"):
        assert cli.main(argv) == 0


def test_typos_get_a_suggestion(tmp_path, capsys):
    assert cli.main(["evl"]) == 2
    assert "did you mean 'eval'?" in capsys.readouterr().err
    argv = ["train", "--config", TINY, "--datset", "x", "--output_dir", str(tmp_path)]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "--datset (did you mean --dataset?)" in err and len(err.strip().splitlines()) == 1
    recipe = tmp_path / "r.yaml"
    recipe.write_text("credt: oar-p\nuse_cpu: true\n")
    assert cli.main(["train", "--config", str(recipe)]) == 2
    assert "--credt (did you mean --credit?)" in capsys.readouterr().err


def test_demo_is_the_quick_study_on_wordproblems(tmp_path, monkeypatch, capsys):
    from oar_rl.study import cli as study_cli

    seen = []
    monkeypatch.setattr(study_cli, "main", lambda argv: seen.append(argv) or 0)
    out = str(tmp_path / "d")
    extra = ["--credits", "grpo", "--seeds", "1", "--steps", "2", "--fresh"]
    assert cli.main(["demo", "--out", out]) == 0
    assert cli.main(["demo", "--out", out, *extra]) == 0
    quick = ["--quick", "--task", "wordproblems", "--out", out, "--threads", "1"]
    assert seen == [quick, [*quick, *extra]]
    assert "the quick study" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["demo", "--task", "arithmetic"])  # the demo is the word-problem study only


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["task-figures", "--problems", "0"], "--problems must be >= 1, got 0"),
        (["task-figures", "--task", "bogus"], "bogus"),
        (["task-figures", "--task", "wordproblems", "--model", "/no/such/model"], "no such directory"),
        (["oracle", "--heatmaps", "-2"], r"--heatmaps must be >= 0 \(traces shown\), got -2"),
        (["oracle", "--max-new-tokens", "0"], "--max-new-tokens must be >= 1, got 0"),
        (["attribute", "--max-new-tokens", "-1"], "--max-new-tokens must be >= 1, got -1"),
    ],
)
def test_analysis_commands_refuse_bad_values_before_loading_anything(argv, message, monkeypatch, capsys):
    """These ended in tracebacks after the model had loaded (task-figures: after the whole measurement),
    or were accepted (`--heatmaps -2` showed all traces but the last two)."""
    from oar_rl.analysis import task_figures

    def must_not_measure(*a, **k):
        raise AssertionError("the measurement must not start on bad input")

    monkeypatch.setattr(task_figures, "measure", must_not_measure)
    assert cli.main(argv) == 2
    assert re.search(message, capsys.readouterr().err)


def test_task_figures_checks_out_before_measuring(tmp_path, monkeypatch, capsys):
    from oar_rl.analysis import task_figures

    monkeypatch.setattr(task_figures, "measure", lambda *a, **k: pytest.fail("measured before --out"))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli.main(["task-figures", "--problems", "2", "--out", str(blocker)]) == 2
    assert "--out" in capsys.readouterr().err
