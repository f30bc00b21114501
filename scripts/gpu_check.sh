#!/usr/bin/env bash
# The GPU check (scripts/gpu_check.py) on a machine with a GPU and no network.
#
#   bash scripts/gpu_check.sh --prepare   # here, with PyPI: wheels, NLTK data, the bench's 'before' src/ into .gpu-check/ (20 MB)
#   bash scripts/gpu_check.sh             # there: installs .gpu-check/wheels into /tmp/envharness-site, runs the check
#
# The GPU machine's own torch, transformers, tokenizers, accelerate and numpy are used (they hold
# its CUDA); only what it lacks travels (the list below). Results in $OUT (default runs/gpu-check).
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=.gpu-check
PY=${PYTHON:-python3}
# What a GPU machine with torch + transformers (as the reference probe found one) lacks, pinned to
# the versions this project is tested with.
WHEELS="annotated-doc==0.0.7 annotated-types==0.8.0 datasets==5.2.0 defusedxml==0.7.1 dill==0.4.1 fastapi==0.165.0
joblib==1.6.0 multiprocess==0.70.19 nltk==3.10.4 opentelemetry-api==1.45.2 pydantic==2.14.4 pydantic-core==2.50.5
python-multipart==0.0.34 starlette==1.10.0 textarena==0.7.4 trl==1.16.0 typing-inspection==0.4.5 uvicorn==0.54.0
websockets==17.4 typing-extensions==4.16.0"

if [ "${1:-}" = "--prepare" ]; then
  PYVER=${GPU_PYTHON_VERSION:-3.12}
  mkdir -p "$DIR/wheels"
  .venv/bin/pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$DIR/wheels" $WHEELS
  .venv/bin/python -m envharness.envs.textarena.nltk_data --dir "$DIR/nltk_data"
  # the train-step bench's "before" column: src/ of that revision (there is no git there)
  rm -rf "$DIR/before" && mkdir -p "$DIR/before" && git archive --format=tar "${BENCH_BEFORE:-d80ae1c}" src | tar -x -C "$DIR/before"
  du -sh "$DIR"
  exit 0
fi

if [ -x .venv/bin/python ] && [ ! -d "$DIR/wheels" ]; then
  PY=.venv/bin/python   # this project's own set-up: everything is installed
  export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}"
else
  SITE=${GPU_CHECK_SITE:-/tmp/envharness-site}
  if ! $PY -c "import torch, transformers" 2>/dev/null; then
    echo "gpu-check: $PY has no torch + transformers; nothing to check with"; exit 0
  fi
  $PY -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$DIR"/wheels/*.whl || exit 2
  export PYTHONPATH="$SITE:src${PYTHONPATH:+:$PYTHONPATH}" NLTK_DATA="$PWD/$DIR/nltk_data"
fi
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1 \
  PYTHONUNBUFFERED=1 WANDB_MODE=disabled
exec timeout -k 10 "${GPU_CHECK_TIMEOUT_S:-900}" $PY scripts/gpu_check.py "$@"
