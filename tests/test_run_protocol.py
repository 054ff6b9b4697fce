"""Issue 56 item 4: a run file's protocol block says what ran (`oar_rl.study.provenance`).

Written since issue 56: the block is the run's effective protocol (the study's with the arm's overrides
and learning rate put in), `protocol_changes` what they changed, `protocol_hash` the study protocol's
(one per folder, as the leaderboard and a resumed study read it), `code` the commit. Written before: the
study protocol, kept as written; `run_settings` reads the run's own settings from either kind.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oar_rl.study.config import protocol_hash
from oar_rl.study.provenance import code_version, effective_protocol, run_settings, study_protocol
from oar_rl.study.runner import RunStore, StudyError

ROOT = Path(__file__).resolve().parents[1]
STUDY = {"learning_rate": 2e-4, "prompts_per_step": 16, "num_generations": 8, "tau": 0.4, "split": "test"}


def _record(overrides: dict, learning_rate: float) -> dict:
    return {"variant": "arm", "method": "grpo", "seed": 1, "overrides": overrides,
            "learning_rate": learning_rate, "final": {"sampled": 0.5}}  # fmt: skip


def test_the_protocol_block_states_every_override_and_the_study_hash_stays_one_per_folder(tmp_path):
    store = RunStore(tmp_path, STUDY)
    over = {"learning_rate": 1e-4, "prompts_per_step": 21, "num_generations": 15, "steps_per_generation": 2}
    store.put("arm", 1, _record(over, 1e-4))
    store.put("grpo", 1, _record({}, 2e-4) | {"variant": "grpo"})
    arm = json.loads((tmp_path / "arm.seed1.json").read_text())
    grpo = json.loads((tmp_path / "grpo.seed1.json").read_text())
    for key, value in over.items():
        assert arm["protocol"][key] == value, key
    assert arm["protocol_changes"]["learning_rate"] == {"study": 2e-4, "run": 1e-4}
    assert arm["protocol_changes"]["steps_per_generation"] == {"run": 2}  # a key the study lacks
    assert grpo["protocol"] == STUDY and grpo["protocol_changes"] == {}
    assert arm["protocol_hash"] == grpo["protocol_hash"] == protocol_hash(STUDY)
    assert study_protocol(arm) == STUDY and run_settings(arm) == arm["protocol"]
    assert set(store.check_all()) == {"arm/seed1", "grpo/seed1"}


@pytest.mark.parametrize("key", ["learning_rate", "prompts_per_step", "num_generations"])
def test_a_block_that_does_not_reflect_the_runs_override_is_refused(tmp_path, key):
    store = RunStore(tmp_path, STUDY)
    store.put("arm", 1, _record({"learning_rate": 1e-4, "prompts_per_step": 21, "num_generations": 15}, 1e-4))
    path = tmp_path / "arm.seed1.json"
    rec = json.loads(path.read_text())
    rec["protocol"][key] = STUDY[key]  # the study default written where the run's value belongs
    path.write_text(json.dumps(rec))
    with pytest.raises(StudyError, match="not the study protocol with the run's own overrides"):
        store.check_all()


def test_a_changed_study_protocol_is_still_refused_for_both_kinds_of_file(tmp_path):
    RunStore(tmp_path, STUDY).put("arm", 1, _record({"learning_rate": 1e-4}, 1e-4))
    legacy = _record({"learning_rate": 1e-4}, 1e-4) | {"key": "old/seed1", "protocol": STUDY,
                                                       "protocol_hash": protocol_hash(STUDY)}  # fmt: skip
    (tmp_path / "old.seed1.json").write_text(json.dumps(legacy))
    assert len(RunStore(tmp_path, STUDY).check_all()) == 2
    for name in ("arm", "old"):
        with pytest.raises(StudyError, match="tau"):
            RunStore(tmp_path, {**STUDY, "tau": 0.5}).get(name, 1)


def test_a_file_written_before_reports_its_runs_settings_from_its_overrides():
    legacy = _record({"learning_rate": 1e-4, "prompts_per_step": 30}, 1e-4) | {"protocol": STUDY}
    assert study_protocol(legacy) == STUDY  # its block is the study's, as written
    got = run_settings(legacy)
    assert (got["learning_rate"], got["prompts_per_step"], got["num_generations"]) == (1e-4, 30, 8)
    assert effective_protocol(STUDY, {"tau": 0.4})[1] == {}  # an override equal to the study's: no change


def test_the_code_version_names_this_checkout():
    code = code_version()
    assert set(code) == {"commit", "dirty"}
    if (ROOT / ".git").exists():
        assert code["commit"] and len(code["commit"]) == 40 and isinstance(code["dirty"], bool)
