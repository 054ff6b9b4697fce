#!/usr/bin/env bash
# Wheels for running oar-rl on a GPU machine without internet (docs/gpu.md).
#
#   bash benchmarks/gpu_wheels.sh [DIR]        # default DIR: .whl at the repository root (git-ignored)
#
# Downloads, for CPython 3.12 on manylinux x86-64, exactly the pinned packages oar-rl needs that the
# GPU image lacks or has at another version (its own list: torch 2.11 + CUDA 13, accelerate 1.15, peft,
# transformers 5.17, tokenizers 0.23.2, huggingface_hub 1.33, safetensors 0.8, pyarrow, pandas, numpy,
# tqdm, matplotlib, pyyaml, sympy, xxhash, regex, jinja2, psutil, typer):
#   - trl 1.16.0 and transformers 5.23.0: oar-rl pins both (the TRL seam); transformers 5.23 needs
#     huggingface-hub >=1.31,<3, tokenizers >=0.23.1,<0.24, safetensors >=0.8, regex >=2025.10.22 --
#     the image's versions satisfy them, so those are not carried;
#   - datasets 5.2.0 with dill 0.4.1 and multiprocess 0.70.19 (missing there), and fsspec 2026.9.0
#     (datasets 5.2 needs fsspec <= 2026.9.0; the image's may be newer);
#   - math-verify 0.9.0 with latex2sympy2_extended 1.11.0 and antlr4-python3-runtime 4.13.2 (the
#     rewards), pebble 5.2.3 (the reward worker pool).
# The versions are the ones the project's tests run with. torch is never carried: the GPU machine's
# own CUDA build is the one to test. oar-rl itself travels as source (PYTHONPATH=$PWD/src).
#
# Then, on the GPU machine, from the repository root (no index, nothing fetched):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/src
#   python3 -m oar_rl.cli gpu-check --out gpu_check_out
# Installing into /tmp/site shadows the machine's transformers 5.17 with the pinned 5.23 (wanted).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${1:-$ROOT/.whl}"
LIMIT_MIB=60
PACKAGES=(
    trl==1.16.0
    transformers==5.23.0
    datasets==5.2.0
    dill==0.4.1
    multiprocess==0.70.19
    fsspec==2026.9.0
    math-verify==0.9.0
    latex2sympy2_extended==1.11.0
    antlr4-python3-runtime==4.13.2
    pebble==5.2.3
)

mkdir -p "$DIR"
# one version of each: wheels left from an older run of this script would stop the install there
find "$DIR" -maxdepth 1 -type f -name '*.whl' -delete
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$DIR" "${PACKAGES[@]}"

count=$(find "$DIR" -maxdepth 1 -type f -name '*.whl' | wc -l)
if [ "$count" -ne "${#PACKAGES[@]}" ]; then
    echo "gpu_wheels.sh: expected ${#PACKAGES[@]} wheels in $DIR, found $count" >&2
    exit 1
fi
size_kib=$(du -sk "$DIR" | cut -f1)
if [ "$size_kib" -gt $((LIMIT_MIB * 1024)) ]; then
    echo "gpu_wheels.sh: $DIR holds $((size_kib / 1024)) MiB, over the ${LIMIT_MIB} MiB limit" >&2
    exit 1
fi
echo "gpu_wheels.sh: $count wheels, $((size_kib / 1024)) MiB in $DIR"
echo "on the GPU machine: python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir" \
    "--upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:\$PWD/src"
