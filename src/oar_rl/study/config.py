"""The study's configuration: settings, presets, methods, ablation groups and the run plan.

Two parts, kept apart on purpose:

- the *protocol* (task, warm start, budget, every hyperparameter, the evaluation): fixed before any
  comparison. Every run file records it; a rerun with a different protocol in the same output
  directory is refused with a diff of what changed (it never mixes results);
- the *scope* (which methods, how many seeds, which ablation groups): may grow between invocations,
  finished runs are reused.

Methods are read from the credit registry (`oar_rl.credits.CREDITS`), so a credit mode added to
the library, or registered by a `--credit-module` file, joins the study without an edit here; credit
"none" is called "grpo". A credit module's identity (the spec as given and the sha256 of its code,
`StudySettings.credit_modules`) is not part of the protocol every run shares: it is recorded on the runs
of its own rules (`credit_module` in the run file, `StudySettings.module_record`), so a study grows by a
user's rule reusing GRPO's runs, and a rule's run made by other code is refused, never reused
(`oar_rl.study.runner.RunStore`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from typing import Any

from oar_rl.tasks import DEFAULT_TASK

STUDY_FORMAT = 1
SCORED_TOKENS: tuple[str, ...] = ("reasoning", "before-answer")
"""`oar_rl.config.SCORED_TOKENS` (not imported: that module imports TRL; a test keeps the two equal)."""
TAUS: tuple[float, ...] = (0.0, 0.4, 0.7, 1.0)
"""τ ablation (paper Table 3 / Fig. 6): 0 boost-only, 1 suppress-only; run with OAR-G as in the paper."""
ABLATIONS: dict[str, str] = {
    "tau": "OAR-G at τ ∈ {0 (boost-only), 0.4, 0.7, 1.0 (suppress-only)} (paper Table 3, Fig. 6)",
    "probe": "OAR-P with the LT-Logits, AS-Mean and AS-Joint probes (paper Table 4: probes under masking)",
}


def all_methods() -> tuple[str, ...]:
    """Study method names: the registered credit modes, with "none" called "grpo" (listed first)."""
    from oar_rl.credits import CREDITS

    return ("grpo", *(c for c in CREDITS if c != "none"))


def credit_of(method: str) -> str:
    """The registered credit mode of a study method ("grpo" -> "none"; `oar_rl.credit_names`)."""
    from oar_rl.credit_names import registered

    return registered(method)


def probes() -> tuple[str, ...]:
    from oar_rl.probes import PROBES

    return tuple(PROBES)


@dataclass(frozen=True)
class Variant:
    """One trained configuration: a method plus hyperparameter overrides (empty for the main group)."""

    name: str
    method: str
    overrides: tuple[tuple[str, Any], ...] = ()

    @property
    def credit(self) -> str:
        return credit_of(self.method)


@dataclass(frozen=True)
class StudySettings:
    """One study. Fields up to `recall_trajectories` are the protocol; the rest is scope."""

    task: str = DEFAULT_TASK
    warm_start: str = "default"
    steps: int = 40
    prompts_per_step: int = 16
    num_generations: int = 8
    learning_rate: float | None = None
    """None until resolved (a --tune-lr choice, --lr, or the task's default; see `lr_source`)."""
    lr_source: str = ""
    max_completion_length: int | None = None
    """None: the task's default."""
    temperature: float = 1.0
    probe: str | None = None
    """None: the task's default probe."""
    tau: float = 0.4
    oar_beta: float = 2.0
    scored_tokens: str = "reasoning"
    """Which tokens OAR scores and reshapes (`OARConfig.scored_tokens`): the reasoning (the library's default
    since issue 26), or "before-answer", every token before the answer span, as studies made before it
    (results/study-wordproblems-v2) did. Their run files record no such key, so absent means
    "before-answer": they stay readable, and a run with today's default is refused there."""
    eval_every: int = 10
    test_problems: int = 300
    eval_samples: int = 2
    """Samples per test problem at the training temperature for the final accuracy (and the lr sweep's
    validation accuracy)."""
    curve_problems: int | None = None
    """Test problems (the first ones) for the accuracy curve every `eval_every` steps; None: all of them."""
    curve_samples: int | None = None
    """Samples per problem for the curve; None: `eval_samples`."""
    eval_seed: int = 1234
    train_prompts: int | None = None
    """Size of the RL prompt pool; None: 2 × steps × prompts_per_step."""
    recall_trajectories: int = 40
    """Correct warm-start trajectories for recall@K% (0: skip the recall analysis)."""
    micro_batch: int | None = None
    """At most this many rows per forward/backward pass of the update (`train_policy`'s gradient
    accumulation, `passes_per_step`); None: the
    task's (`Task.micro_batch`), and where it has none, one pass per optimizer step (every study before
    issue 58). Protocol when set: the update is the same up to float rounding, not bit for bit."""
    cpu_numerics: str | None = None
    """CPU numerics profile the runs train under (`oar_rl.numerics`: portable-x86, avx2); part of the
    protocol when set; None (native, the kernels the CPU picks) leaves it as before issue 49."""
    checkpoint_every: int | None = None
    """Save each run's full TRL checkpoint every this many steps (and at its last), beside the output, so
    that the same command resumes a run its process left unfinished (`oar_rl.study.checkpoints`); None:
    a run is all or nothing. Not protocol: it changes where a run's state is kept, not what it computes."""
    # --- scope ---
    credit_modules: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    """(module as given, sha256 of its code, the rules it registered) of each `--credit-module` loaded
    (`oar_rl.credit_modules.CreditModule`). Not in the shared protocol (a GRPO run does not depend on a
    user's file): each run of one of its rules records the module (`module_record`, the run file's
    `credit_module`), and a stored run whose module differs from this one is refused
    (`oar_rl.study.runner.RunStore`); the recall records the modules of the rules it scores."""
    methods: tuple[str, ...] = ()
    """Empty: every method (`all_methods()`)."""
    seeds: int = 5
    method_seeds: tuple[tuple[str, int], ...] = ()
    """(method, seeds) pairs that override `seeds` for those methods (e.g. fewer for the costly ones)."""
    method_lrs: tuple[tuple[str, float], ...] = ()
    """(method, learning rate) chosen per method by the sweep (`--tune-lr`); a method not listed trains
    at `learning_rate` (GRPO's). Filled in by the study from lr_tuning.json, never by hand."""
    ablations: tuple[str, ...] = ()
    # --- learning-rate sweep (its own protocol: the study's minus the learning rate) ---
    lr_grid: tuple[float, ...] = (1e-5, 2e-5, 5e-5, 1e-4, 2e-4)
    tune_seeds: int = 2
    validation_problems: int = 200
    greedy_tolerance: float | None = None
    """Points the chosen rate's mean greedy validation accuracy may fall below the warm start's (the sweep
    then measures greedy too, and a rate beyond the tolerance cannot be chosen: `oar_rl.study.lr_choice`);
    None: greedy is not part of the choice (every study before issue 58)."""

    def __post_init__(self) -> None:
        for entry in self.credit_modules:
            if not (isinstance(entry, tuple) and len(entry) == 3 and isinstance(entry[2], tuple)):
                raise ValueError(
                    f"credit_modules entry {entry!r} must be (module as given, sha256, rules it registered): "
                    "`oar_rl.credit_modules.CreditModule`'s spec, sha256 and rules"
                )
        valid = all_methods()
        bad = [m for m in self.methods if m not in valid]
        if bad:
            from oar_rl.credit_names import unknown_message

            hint = "" if self.credit_modules else " (a rule from your own file needs --credit-module)"
            what = "; ".join(unknown_message("method", m, valid) for m in bad)
            raise ValueError(f"unknown methods {bad}: {what}{hint}")
        if len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods {list(self.methods)} contain duplicates")
        if self.methods and "grpo" not in self.methods:
            raise ValueError(
                f"methods {list(self.methods)} must include grpo: every comparison is paired to it"
            )
        bad = [a for a in self.ablations if a not in ABLATIONS]
        if bad:
            raise ValueError(f"unknown ablations {bad}; valid ablations: {', '.join(ABLATIONS)}")
        for name in ("seeds", "steps", "prompts_per_step", "eval_every", "test_problems", "eval_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        for name in ("tune_seeds", "validation_problems"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.greedy_tolerance is not None and not self.greedy_tolerance >= 0:
            raise ValueError(f"greedy_tolerance={self.greedy_tolerance} must be >= 0 points (or None)")
        from oar_rl.numerics import profile_env

        profile_env(self.cpu_numerics)  # ValueError names the valid profiles
        for name in ("curve_problems", "curve_samples"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1 (or None)")
        if self.curve_problems is not None and self.curve_problems > self.test_problems:
            raise ValueError(
                f"curve_problems={self.curve_problems} must be <= test_problems={self.test_problems} "
                "(the curve uses the first test problems)"
            )
        for m, n in self.method_seeds:
            if m not in valid:
                raise ValueError(f"unknown method {m!r} in method_seeds; valid methods: {', '.join(valid)}")
            if n < 1:
                raise ValueError(f"seeds for {m}: {n} must be >= 1")
        for m, lr in self.method_lrs:
            if m not in valid or not lr > 0:
                raise ValueError(f"method_lrs entry ({m!r}, {lr}) needs a valid method and a positive rate")
        if self.recall_trajectories < 0:
            raise ValueError(f"recall_trajectories={self.recall_trajectories} must be >= 0")
        if self.num_generations < 2:
            raise ValueError(f"num_generations={self.num_generations} must be >= 2 (GRPO needs a group)")
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise ValueError(f"learning_rate={self.learning_rate} must be > 0")
        if not self.lr_grid or any(not lr > 0 for lr in self.lr_grid):
            raise ValueError(f"lr_grid={list(self.lr_grid)} must be non-empty and positive")
        if not 0.0 <= self.tau <= 1.0:
            raise ValueError(f"tau={self.tau} must be in [0, 1]")
        if self.scored_tokens not in SCORED_TOKENS:
            raise ValueError(
                f"scored_tokens={self.scored_tokens!r} is not valid; choose one of {', '.join(SCORED_TOKENS)}"
            )
        if self.probe is not None and self.probe not in probes():
            raise ValueError(f"probe={self.probe!r}; valid probes: {', '.join(probes())}")
        if self.micro_batch is not None and self.micro_batch < 1:
            raise ValueError(f"micro_batch={self.micro_batch} must be >= 1 (or None)")
        if self.checkpoint_every is not None and self.checkpoint_every < 1:
            raise ValueError(f"checkpoint_every={self.checkpoint_every} must be >= 1 step (or None: none)")
        if self.train_prompts is not None and self.train_prompts < self.prompts_per_step:
            raise ValueError(f"train_prompts={self.train_prompts} must be >= prompts_per_step")

    # --- derived -------------------------------------------------------------------------------------
    @property
    def method_list(self) -> tuple[str, ...]:
        return self.methods or all_methods()

    def seeds_for(self, method: str) -> int:
        """Seeds of `method`: its `method_seeds` entry, else `seeds`."""
        return dict(self.method_seeds).get(method, self.seeds)

    @property
    def max_seeds(self) -> int:
        return max([self.seeds_for(m) for m in self.method_list], default=self.seeds)

    def module_record(self, method: str) -> dict[str, str] | None:
        """The credit module whose rule `method` is, as its runs record it ({"module", "sha256"}); None for
        a method no `credit_modules` entry registered (the built-in rules)."""
        for spec, sha256, rules in self.credit_modules:
            if credit_of(method) in rules:
                return {"module": spec, "sha256": sha256}
        return None

    def module_records(self) -> dict[str, dict[str, str] | None]:
        """`module_record` of every method this study trains (its method list and ablation groups)."""
        methods = {v.method for group in self.variants().values() for v in group}
        return {m: self.module_record(m) for m in (*self.method_list, *sorted(methods))}

    def lr_for(self, method: str) -> float | None:
        """The learning rate `method` trains at in the main group: its own sweep choice, else GRPO's."""
        return dict(self.method_lrs).get(method, self.learning_rate)

    @property
    def n_curve(self) -> tuple[int, int]:
        """(problems, samples per problem) of the accuracy curve."""
        return (self.curve_problems or self.test_problems, self.curve_samples or self.eval_samples)

    @property
    def n_train_prompts(self) -> int:
        return self.train_prompts or 2 * self.steps * self.prompts_per_step

    def resolved(self, task) -> StudySettings:
        """Task defaults filled in (probe, completion length)."""
        return replace(
            self,
            probe=self.probe or task.probe,
            max_completion_length=self.max_completion_length or task.max_completion_length,
            micro_batch=self.micro_batch or task.micro_batch,
        )

    def protocol(self) -> dict[str, Any]:
        """Everything that determines a run's result, except its method, overrides and seed."""
        d = asdict(self)
        for key in ("methods", "seeds", "method_seeds", "method_lrs", "ablations", "lr_grid", "tune_seeds",
                    "validation_problems", "greedy_tolerance", "checkpoint_every"):  # fmt: skip
            del d[key]
        for key in (
            "curve_problems",
            "curve_samples",
            "micro_batch",
        ):  # absent when unset: earlier studies hold
            if d[key] is None:
                del d[key]
        if d["cpu_numerics"] is None:  # native: absent, so every protocol made before issue 49 holds
            del d["cpu_numerics"]
        else:
            from oar_rl.numerics import record

            d["cpu_numerics"] = record(self.cpu_numerics)
        del d["credit_modules"]  # recorded on the runs of each module's own rules (`module_record`)
        if d["scored_tokens"] == "before-answer":  # the scored set of every study before issue 26
            del d["scored_tokens"]
        d["study_format"] = STUDY_FORMAT
        return d

    def tuning_protocol(self) -> dict[str, Any]:
        """The sweep's protocol: the study's without the learning rate, plus the sweep's own settings."""
        d = self.protocol()
        for key in ("learning_rate", "lr_source", "recall_trajectories", "curve_problems", "curve_samples"):
            d.pop(key, None)
        d.update(tune_seeds=self.tune_seeds, validation_problems=self.validation_problems)
        if self.greedy_tolerance is not None:  # absent when unset: earlier sweeps' protocols hold
            d["greedy_tolerance"] = self.greedy_tolerance
        return d

    # --- the run plan --------------------------------------------------------------------------------
    def variants(self) -> dict[str, list[Variant]]:
        """Run groups: "main" (every method at the protocol's hyperparameters) and each ablation.

        An ablation value equal to the protocol's own (τ = `tau`, probe = `probe`) is the main group's
        run itself, shared rather than trained twice.
        """
        groups: dict[str, list[Variant]] = {"main": [self._main_variant(m) for m in self.method_list]}
        own = [m for m in self.method_list if self.lr_for(m) != self.learning_rate]
        if own:  # every method also at GRPO's learning rate (shared with "main" where the rates agree)
            groups["grpo_lr"] = [
                Variant(f"{m}[lr=grpo]", m, (("learning_rate", self.learning_rate),))
                if m in own
                else self._main_variant(m)
                for m in self.method_list
            ]
        if "tau" in self.ablations:
            groups["tau"] = [
                self._main_variant("oar-g") if t == self.tau else self._main_variant("oar-g", tau=t)
                for t in TAUS
            ]
        if "probe" in self.ablations:
            groups["probe"] = [
                self._main_variant("oar-p") if p == self.probe else self._main_variant("oar-p", probe=p)
                for p in probes()
            ]
        return groups

    def _main_variant(self, method: str, **override: Any) -> Variant:
        """`method` at its own learning rate, with one optional ablation override (tau= or probe=)."""
        lr = self.lr_for(method)
        lr_part: tuple[tuple[str, Any], ...] = (("learning_rate", lr),) if lr != self.learning_rate else ()
        if not override:
            return Variant(method, method, lr_part)
        ((key, value),) = override.items()
        return Variant(f"{method}[{key}={value:g}]" if key == "tau" else f"{method}[{key}={value}]", method,
                       ((key, value), *lr_part))  # fmt: skip

    def runs(self) -> list[tuple[Variant, int]]:
        """Every distinct (variant, seed) to train, seed-major (all variants of seed 0 first); a variant
        gets its method's seeds (`seeds_for`)."""
        seen: dict[str, Variant] = {}
        for group in self.variants().values():
            for v in group:
                seen.setdefault(v.name, v)
        return [(v, s) for s in range(self.max_seeds) for v in seen.values() if s < self.seeds_for(v.method)]

    def with_scope(self, **changes: Any) -> StudySettings:
        return replace(self, **changes)


def protocol_hash(protocol: dict[str, Any]) -> str:
    blob = json.dumps(protocol, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def protocol_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable lines `key: old -> new` for every key that differs (missing shown as <absent>)."""
    lines = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if a != b:
            lines.append(f"  {key}: {a!r} -> {b!r}")
    return lines


PRESETS: dict[str, StudySettings] = {
    # The comparison on the word-problem testbed (docs/results/study.md), on the converged fallible-teacher
    # warm start (docs/history.md): 30 steps of 16 prompts x 8, every
    # method's learning rate swept on the validation split with one grid (pilots put GRPO's optimum between
    # 3e-4 and 1e-3: 1e-3 starts to break greedy accuracy), 10 seeds (5 for the two costliest peers), final
    # accuracy on 500 x 4 test samples.
    "full": StudySettings(
        task="wordproblems",
        # the v2 study's seven methods, named so that a credit mode added later (first-error, issue 26)
        # does not join this protocol's run plan unasked
        methods=("grpo", "random", "entropy", "oar-g", "oar-p", "grail", "oar-gp"),
        steps=30,
        prompts_per_step=16,
        num_generations=8,
        eval_every=5,
        test_problems=500,
        eval_samples=4,
        curve_problems=150,
        curve_samples=2,
        seeds=10,
        method_seeds=(("grail", 5), ("oar-gp", 5)),
        lr_grid=(1e-4, 2e-4, 4e-4, 8e-4),
        tune_seeds=1,
        validation_problems=300,
    ),
    # `make demo`: the main comparison in miniature; no ablations, no interval worth the name with 2
    # seeds (the t quantile at 1 degree of freedom is 12.7), but every part of the report is produced.
    "quick": StudySettings(
        methods=("grpo", "oar-g", "oar-p"),
        seeds=2,
        steps=16,
        prompts_per_step=8,
        eval_every=4,
        test_problems=150,
        eval_samples=2,
        recall_trajectories=16,
        lr_grid=(1e-4, 3e-4, 1e-3),
        tune_seeds=1,
        validation_problems=100,
    ),
    # The pretrained regime (issue 58; experiments/pretrained_regime/README.md): SmolLM2-135M-Instruct from
    # its LoRA SFT warm start on the short word problems. Sized so that one run fits about an hour of a
    # 2-core CPU with its evaluations: 20 steps of 8 prompts x 8 completions (micro-batches of 8 rows,
    # the task's), the curve at step 10 on 50 test problems, the final accuracy on the 150 x 2 test
    # samples the warm start was measured on. The sweep chooses among rates that keep greedy validation
    # accuracy within 2 points of the warm start's.
    "pretrained": StudySettings(
        task="wordproblems-smollm2",
        methods=("grpo", "oar-g", "entropy", "lowest-prob"),
        seeds=10,
        steps=20,
        prompts_per_step=8,
        num_generations=8,
        eval_every=10,
        test_problems=150,
        eval_samples=2,
        curve_problems=50,
        curve_samples=2,
        recall_trajectories=0,
        lr_grid=(3e-6, 1e-5, 3e-5),
        tune_seeds=2,
        validation_problems=100,
        greedy_tolerance=2.0,
        checkpoint_every=5,  # a run is an hour or more: a stopped process loses at most 5 steps
    ),
    # Hidden, for the tests: the seconds-to-build warm start, a few seconds per run.
    "tiny": StudySettings(
        task="arithmetic",
        warm_start="test",
        methods=("grpo", "oar-g"),
        seeds=2,
        steps=2,
        prompts_per_step=2,
        num_generations=2,
        max_completion_length=12,
        eval_every=1,
        test_problems=4,
        eval_samples=1,
        recall_trajectories=2,
        lr_grid=(1e-5, 1e-4),
        tune_seeds=1,
        validation_problems=4,
    ),
}
