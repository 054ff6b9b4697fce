"""`oar-rl study`: the comparison of credit-assignment methods, done under a fixed protocol.

Modules (the tasks themselves come from the task registry, `oar_rl.tasks`): `config` (settings,
presets, methods, ablation groups, the protocol), `args` (the command line), `plan` (what a study will
run and its estimated time, printed first), `training` (one RL run with held-out evaluation),
`demo` (`oar-rl demo`: the quick study), `runner` (resumable run store, learning-rate sweep), `recall`
(recall@K% vs the oracle and the ground truth), `stats` (t-intervals, paired tests; `scipy.stats`),
`report` (study.json, plots, HTML), `screen` and `screen_plan` (a pre-registered screen of credit rules,
for any plan), `cli`.

Protocol (issue 8, "Rules for the study"): the same warm start, the same prompts per seed, the same
budget and the same hyperparameters for every method; the learning rate is chosen on a validation split
disjoint from the test split (`--tune-lr` sweeps every method with one grid), then frozen; every run made
is reported.

Departures from the paper's evaluation, and why: the paper reports single runs on 7B models; here a
tiny model on a synthetic task runs several seeds, so results are means with Student-t intervals over
seeds and differences paired by seed. Held-out accuracy is the mean correctness of `eval_samples`
samples per test problem at the training temperature (the paper's avg@k on its benchmarks), plus greedy
accuracy at the end; every run of a study shares the test problems and the sampling seed.
"""

from oar_rl.study.cli import build_parser, main, run_study

__all__ = ["build_parser", "main", "run_study"]
