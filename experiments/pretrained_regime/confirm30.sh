#!/usr/bin/env bash
# The pretrained regime's confirmation (results/pretrained-regime/PREREGISTRATION.md, Amendment 2):
# one process at 2 torch threads, seed by seed across both folders (confirm30/'s missing runs of
# seeds 0..s, then grpo-steps39/'s), each run checkpointed every 2 steps. Run again, it resumes:
# a finished run file is kept, an unfinished run restarts from its newest checkpoint.
#
#   experiments/pretrained_regime/confirm30.sh CODE PYTHON OUT [--fit]
#
# CODE: a checkout of the confirmation's code (a detached worktree of cb5f29d); PYTHON: the
# interpreter with oar-rl's dependencies; OUT: the regime's results folder (results/pretrained-regime
# of the checkout that commits the run files). --fit (Amendment 4, for a machine whose stretch cannot
# hold an OAR-G run or a GRPO run of 39 steps, with no checkpoint of the order's next run on its
# disk): confirm30/'s GRPO runs of every seed first, then the order.
set -euo pipefail
fit=0
if [ $# -eq 4 ] && [ "$4" = "--fit" ]; then
    fit=1
elif [ $# -ne 3 ]; then
    echo "usage: $0 CODE PYTHON OUT [--fit] (see the comment at its top)" >&2
    exit 2
fi
code=$1 python=$2 out=$3
for d in "$code/src/oar_rl" "$out/confirm30" "$out/grpo-steps39"; do
    [ -d "$d" ] || { echo "$0: no folder $d" >&2; exit 2; }
done
cd "$code"
study() {
    PYTHONPATH=src:. "$python" -m oar_rl.cli study --pretrained --lr 1e-5 --threads 2 \
        --checkpoint-every 2 --yes "$@"
}
if [ "$fit" = 1 ]; then
    study --credits grpo --seeds 6 --steps 30 --out "$out/confirm30"
fi
for n in 1 2 3 4 5 6; do  # --seeds n: seeds 0..n-1
    study --credits grpo,oar-g --seeds "$n" --steps 30 --out "$out/confirm30"
    study --credits grpo --seeds "$n" --steps 39 --out "$out/grpo-steps39"
done
