"""Issue 12: no silent no-ops (zero-step training, empty files), no runaway memory (a bad model cache)."""

from __future__ import annotations

import json
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
