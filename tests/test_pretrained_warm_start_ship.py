"""Shipping the pretrained regime's warm start (`experiments.pretrained_regime.warm_start`), on a tiny base.

- `differences` names every figure that is not bit-identical, nested keys and int/float included;
- `ship` refuses a check that did not match and an adapter that is not the one checked, and copies the
  checked one verified;
- `copy_adapter` (what `restore` does) puts a shipped adapter where `lora_sft.load` finds it, so that
  nothing is built; it keeps an identical entry and refuses to overwrite another or to copy nothing;
- the committed record the check reproduces has the figures and protocol keys the check reads.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from experiments.pretrained_regime import warm_start as wsmod
from oar_rl import lora_sft
from test_lora_warm_start import SPEC, base, built, q_proj  # noqa: F401  (fixtures: the tiny base, its build)


def test_differences_name_every_figure_not_bit_identical():
    want = {"entropy_by_role": {"pivot": 0.05676011083178532, "answer": 0.1}, "labelled": 149}
    assert wsmod.differences(json.loads(json.dumps(want)), want) == {}
    got = {"entropy_by_role": {"pivot": 0.05676011083178533, "answer": 0.1}, "labelled": 149.0, "extra": 1}
    assert wsmod.differences(got, want) == {
        "entropy_by_role.pivot": [0.05676011083178533, 0.05676011083178532],
        "extra": [1, None],
        "labelled": [149.0, 149],
    }


def _record(adapter: Path, match: bool) -> dict:
    return {"match": match, "against": "x.json", "differences": {} if match else {"a": [1, 2]},
            "adapter": wsmod.adapter_identity(adapter)}  # fmt: skip


def test_ship_copies_only_the_adapter_that_was_checked_and_matched(built, tmp_path):  # noqa: F811
    _, ws = built
    with pytest.raises(ValueError, match=r"did not reproduce x.json \(1 figures differ\).*nothing shipped"):
        wsmod.ship(_record(ws.adapter, match=False), ws.adapter, tmp_path / "pkg")
    other = tmp_path / "other"
    shutil.copytree(ws.adapter, other)
    manifest = json.loads((other / lora_sft.MANIFEST_FILE).read_text())
    manifest["build"]["seconds"] += 1  # another build of the same recipe: same files, another manifest
    (other / lora_sft.MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="is not the one checked"):
        wsmod.ship(_record(ws.adapter, match=True), other, tmp_path / "pkg")
    assert not (tmp_path / "pkg").exists()
    dest = wsmod.ship(_record(ws.adapter, match=True), ws.adapter, tmp_path / "pkg")
    assert lora_sft.adapter_problem(dest, ws.recipe) is None
    assert sorted(p.name for p in dest.iterdir()) == sorted(p.name for p in ws.adapter.iterdir())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_a_restored_adapter_is_loaded_without_a_build(built, base, tmp_path):  # noqa: F811
    _, ws = built
    entry = tmp_path / "cache" / ws.adapter.name
    assert wsmod.copy_adapter(ws.adapter, entry, ws.recipe) == entry
    loaded = lora_sft.load(SPEC, "tiny-regime", cache_dir=tmp_path / "cache", base_dir=base, build=False)
    assert loaded.adapter == entry and torch.equal(q_proj(loaded.model), q_proj(ws.model))
    assert entry.stat().st_mode & 0o777 == 0o777 & ~lora_sft._umask()  # a build's, not mkdtemp's 0700
    assert wsmod.copy_adapter(ws.adapter, entry, ws.recipe) == entry  # the same adapter: kept
    (entry / "adapter_config.json").write_text("{}")
    with pytest.raises(ValueError, match="exists and is not the adapter"):
        wsmod.copy_adapter(ws.adapter, entry, ws.recipe)
    assert (entry / "adapter_config.json").read_text() == "{}"  # left as it was
    with pytest.raises(ValueError, match="there is no adapter at"):
        wsmod.copy_adapter(tmp_path / "nowhere", tmp_path / "x", ws.recipe)


def test_a_damaged_source_is_not_copied(built, tmp_path):  # noqa: F811
    _, ws = built
    src = tmp_path / "src"
    shutil.copytree(ws.adapter, src)
    (src / "adapter_model.safetensors").write_bytes(b"0")
    with pytest.raises(lora_sft.WarmStartError, match="do not match the sha256"):
        wsmod.copy_adapter(src, tmp_path / "dest", ws.recipe)
    assert not (tmp_path / "dest").exists()


def test_the_committed_record_holds_what_the_check_reads():
    rec = json.loads((Path(__file__).parents[1] / wsmod.AGAINST).read_text())
    assert set(wsmod.PROTOCOL_KEYS) <= set(rec["protocol"]) and rec["recipe_hash"] == "364de6914e16e593"
    figures = rec["task_figures"]
    assert set(figures["entropy_by_role"]) == {"pivot", "filler", "answer"} and figures["labelled"] == 149
