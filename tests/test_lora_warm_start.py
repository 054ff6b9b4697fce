"""The LoRA SFT warm start of a pretrained regime (`oar_rl.lora_sft`) and the regime's task, on a tiny base.

The base here is a random 1-layer Llama with a character tokenizer that speaks ChatML (SmolLM2's chat
template), saved with an `oar_rl_source.json` like a fetched model, so every test takes seconds; the whole
path on the real SmolLM2 is tests/test_pretrained_regime.py.

- the recipe hash moves with every ingredient (each knob, the base's source, the training texts);
- a build writes the adapter, its recipe and manifest and a completion marker, then the merged model,
  whose weights are the base's plus the LoRA delta; it is deterministic, and a second load builds nothing;
- a cached adapter that is not its recipe's (edited file, foreign manifest, no marker) is refused, loudly,
  and left as it is; a base whose chat template is not ChatML is refused;
- a damaged merged directory is merged again; a shipped adapter is used when present and verified;
- the task: the word problems' prompts, answers and splits, rendered in the chat template.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from oar_rl import lora_sft
from oar_rl.lora_sft import LoraSFTSpec, WarmStartError

CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPEC = LoraSFTSpec(base="tiny", num_examples=8, system_prompt="Answer as <answer>N</answer>.", rank=4,
                   alpha=8, learning_rate=1e-2, batch_size=4, steps=3)  # fmt: skip


def save_base(path: Path, template: str = CHATML, source: str = "a" * 64) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    from oar_rl.tiny import build_char_tokenizer

    tok = build_char_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.eos_token = "<|im_end|>"
    tok.chat_template = template
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=1024, tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    (path / "oar_rl_source.json").write_text(json.dumps({"name": "tiny", "sha256": source}))
    return path


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return save_base(tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def built(base, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return cache, lora_sft.load(SPEC, "tiny-regime", cache_dir=cache, base_dir=base, progress=False)


def q_proj(model) -> torch.Tensor:
    return model.model.layers[0].self_attn.q_proj.weight.detach().clone()


def test_the_recipe_hash_moves_with_every_ingredient(base, tmp_path):
    rec = lora_sft.recipe(SPEC, base)
    assert lora_sft.recipe_hash(rec) == lora_sft.recipe_hash(lora_sft.recipe(SPEC, base))  # stable
    assert rec["spec"]["steps"] == 3 and len(rec["base_source_sha256"]) == 64 and rec["kind"] == "lora-sft"
    hashes = {lora_sft.recipe_hash(rec)}
    changes = ({"steps": 4}, {"learning_rate": 2e-2}, {"rank": 8}, {"seed": 1}, {"num_examples": 9},
               {"system_prompt": "Other."}, {"target_modules": ("q_proj",)},
               {"data_task": "wordproblems-long"})  # fmt: skip
    for change in changes:
        hashes.add(lora_sft.recipe_hash(lora_sft.recipe(replace(SPEC, **change), base)))
    other_source = save_base(tmp_path / "other", source="b" * 64)
    hashes.add(lora_sft.recipe_hash(lora_sft.recipe(SPEC, other_source)))
    assert len(hashes) == 10
    with pytest.raises(ValueError, match="system_prompt"):
        replace(SPEC, system_prompt=" ")


def test_a_build_writes_adapter_manifest_marker_and_the_merged_model(built, base):
    from transformers import AutoModelForCausalLM

    cache, ws = built
    entry = cache / f"tiny-regime-{ws.recipe_hash}"
    assert ws.adapter == entry and ws.path == cache / f"tiny-regime-{ws.recipe_hash}.merged"
    names = {f.name for f in entry.iterdir()}
    assert names == {*lora_sft.ADAPTER_FILES, lora_sft.MANIFEST_FILE, lora_sft.COMPLETE_MARKER}
    manifest = json.loads((entry / lora_sft.MANIFEST_FILE).read_text())
    assert manifest["recipe"] == ws.recipe and len(manifest["build"]["loss"]) == SPEC.steps
    config = json.loads((entry / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "tiny"  # a name: the same bytes wherever the cache is
    assert config["target_modules"] == sorted(SPEC.target_modules)  # not a set's order, which varies
    pretrained = AutoModelForCausalLM.from_pretrained(base)
    delta = q_proj(ws.model) - q_proj(pretrained)
    assert delta.abs().max() > 1e-4  # the LoRA moved the weights: not the base
    assert ws.tokenizer.padding_side == "left"
    assert ws.tokenizer.apply_chat_template(
        [{"role": "user", "content": "x"}], tokenize=False
    )  # template kept


def test_the_build_is_deterministic_and_a_second_load_builds_nothing(built, base, tmp_path, capsys):
    cache, ws = built
    again = lora_sft.load(SPEC, "tiny-regime", cache_dir=cache, base_dir=base)
    assert "building" not in capsys.readouterr().err
    assert torch.equal(q_proj(again.model), q_proj(ws.model))
    other = lora_sft.load(SPEC, "tiny-regime", cache_dir=tmp_path, base_dir=base, progress=False)
    name = "adapter_model.safetensors"
    assert (other.adapter / name).read_bytes() == (ws.adapter / name).read_bytes()


def _copy(entry: Path, cache: Path) -> Path:
    import shutil

    shutil.copytree(entry, cache / entry.name)
    return cache / entry.name


@pytest.mark.parametrize("damage", ["edited", "foreign", "unmarked"])
def test_a_cached_adapter_that_is_not_its_recipes_is_refused(built, base, tmp_path, damage):
    _, ws = built
    entry = _copy(ws.adapter, tmp_path)
    if damage == "edited":
        weights = entry / "adapter_model.safetensors"
        data = bytearray(weights.read_bytes())
        data[-1] ^= 1
        weights.write_bytes(bytes(data))
        why = "do not match the sha256"
    elif damage == "foreign":
        manifest = json.loads((entry / lora_sft.MANIFEST_FILE).read_text())
        manifest["recipe"]["spec"]["steps"] = 999
        (entry / lora_sft.MANIFEST_FILE).write_text(json.dumps(manifest))
        why = "built from recipe"
    else:
        (entry / lora_sft.COMPLETE_MARKER).unlink()
        why = "no completion marker"
    before = {f.name: f.read_bytes() for f in entry.iterdir()}
    with pytest.raises(WarmStartError, match=f"refusing the warm start at .*{why}.*not loaded; delete"):
        lora_sft.load(SPEC, "tiny-regime", cache_dir=tmp_path, base_dir=base, command="oar-rl warm-start -x")
    assert {f.name: f.read_bytes() for f in entry.iterdir()} == before  # left as it was: nothing rebuilt
    assert not (tmp_path / f"{entry.name}.merged").exists()


def test_a_changed_recipe_builds_its_own_entry_and_a_missing_one_can_be_refused(built, base, tmp_path):
    cache, ws = built
    with pytest.raises(WarmStartError, match="is not built; build it with `oar-rl warm-start --task x`"):
        lora_sft.load(SPEC, "tiny-regime", cache_dir=tmp_path, base_dir=base, build=False,
                      command="oar-rl warm-start --task x")  # fmt: skip
    changed = lora_sft.load(
        replace(SPEC, steps=1), "tiny-regime", cache_dir=cache, base_dir=base, progress=False
    )
    assert changed.recipe_hash != ws.recipe_hash and ws.adapter.is_dir()
    assert not torch.equal(q_proj(changed.model), q_proj(ws.model))


def test_a_damaged_merged_model_is_merged_again(built, base, tmp_path, capsys):
    _, ws = built
    entry = _copy(ws.adapter, tmp_path)
    first = lora_sft.load(SPEC, "tiny-regime", cache_dir=tmp_path, base_dir=base, progress=False)
    (first.path / "config.json").write_text((first.path / "config.json").read_text() + " ")
    again = lora_sft.load(SPEC, "tiny-regime", cache_dir=tmp_path, base_dir=base, progress=False)
    assert "is unusable (its files do not match" in capsys.readouterr().err
    assert torch.equal(q_proj(again.model), q_proj(ws.model)) and again.adapter == entry


def test_a_shipped_adapter_is_used_when_present_and_verified(built, base, tmp_path):
    _, ws = built
    shipped = _copy(ws.adapter, tmp_path / "package")
    loaded = lora_sft.load(SPEC, "tiny-regime", cache_dir=tmp_path / "cache", base_dir=base, shipped=shipped)
    assert loaded.adapter == shipped and not (tmp_path / "cache" / ws.adapter.name).exists()
    assert torch.equal(q_proj(loaded.model), q_proj(ws.model))
    (shipped / "adapter_config.json").write_text("{}")
    with pytest.raises(WarmStartError, match="the package's adapter is not the code's recipe"):
        lora_sft.load(SPEC, "tiny-regime", cache_dir=tmp_path / "cache", base_dir=base, shipped=shipped)


def test_a_base_without_chatml_is_refused(tmp_path):
    other = save_base(tmp_path / "b", template="{% for m in messages %}{{ m['content'] }}{% endfor %}")
    with pytest.raises(WarmStartError, match="chat template does not render prompts as oar-rl's ChatML"):
        lora_sft.recipe(SPEC, other)
    (other / "oar_rl_source.json").unlink()
    with pytest.raises(WarmStartError, match="oar-rl fetch-model"):
        lora_sft._source_sha256(other)


def test_the_regime_task_is_the_word_problems_in_chat():
    from oar_rl.bench.shapes import SYSTEM_PROMPT as bench_prompt
    from oar_rl.tasks import get_task, task_names
    from oar_rl.tasks.pretrained import SYSTEM_PROMPT, WARM_START_SPECS

    task, words = get_task("wordproblems-smollm2"), get_task("wordproblems")
    assert "wordproblems-smollm2" in task_names() and task.warm_starts == ("default", "test")
    assert bench_prompt is SYSTEM_PROMPT and WARM_START_SPECS["default"].system_prompt == SYSTEM_PROMPT
    spec = WARM_START_SPECS["default"]
    assert (spec.rank, spec.alpha, spec.learning_rate, spec.batch_size, spec.steps, spec.num_examples) == (
        16, 32, 5e-4, 8, 200, 1600)  # fmt: skip
    assert set(spec.target_modules) == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }
    for split, n in (("train", 3), ("validation", 3), ("test", 3)):
        mine, theirs = task.prompts(split, n), words.prompts(split, n)
        assert [r["answer"] for r in mine] == [r["answer"] for r in theirs]
        assert [r["prompt"] for r in mine] == [
            f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n{r['prompt']}<|im_end|>\n"
            "<|im_start|>assistant\n"
            for r in theirs
        ]
    ds = task.dataset("eval", limit=2)
    assert ds["answer"] == words.dataset("eval", limit=2)["answer"] and ds["prompt"][0].endswith(
        "assistant\n"
    )
    assert task.check("so 4+6=10. <answer>10</answer>", "10") and task.max_completion_length == 128
    with pytest.raises(ValueError, match="valid: default, test"):
        task.load_warm_start("other", None)


def test_the_warm_start_command_verifies_a_shipped_one_and_refuses_an_unknown_variant(capsys):
    from oar_rl import cli
    from oar_rl.shipped import shipped_path

    assert cli.main(["warm-start", "--task", "wordproblems"]) == 0
    out = capsys.readouterr().out.strip().splitlines()[-1]
    assert (
        out.startswith("warm start wordproblems/default: recipe ")
        and str(shipped_path("wordproblems")) in out
    )
    assert cli.main(["warm-start", "--task", "wordproblems", "--warm-start", "test"]) == 1
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("oar-rl warm-start: error: --warm-start 'test' is not valid")
        and "valid: default" in err
    )
