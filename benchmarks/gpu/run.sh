#!/usr/bin/env bash
# One call on an air-gapped GPU box (Python 3.12 with a CUDA torch): install the wheels that
# scripts/download_gpu_wheels.sh put in .gpu-wheels/ (no index, no network), install roborl from
# this tree without touching torch, then run the GPU section. JSON under $OUT when it is set.
#
#   bash benchmarks/gpu/run.sh [sac_gpu.py options]
#   bash benchmarks/gpu/run.sh --learner [learner_gpu.py options]   # issue 52: gpu.json/.md
set -euo pipefail
SCRIPT=benchmarks/gpu/sac_gpu.py
if [ "${1:-}" = "--learner" ]; then
    SCRIPT=benchmarks/gpu/learner_gpu.py
    shift
fi
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
WHEELS="${WHEELS:-.gpu-wheels}"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    "$PY" "$SCRIPT" "$@"   # says in one line that there is no CUDA, exits 0
    exit 0
fi
if [ -d "$WHEELS" ]; then
    # --no-deps: the folder holds the whole closure minus what the box has (torch, numpy...),
    # so pip never tries to resolve (and replace) the machine's torch.
    "$PY" -m pip install -q --no-index --no-deps --find-links "$WHEELS" "$WHEELS"/*.whl
fi
"$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e .
export MUJOCO_GL="${MUJOCO_GL:-egl}" PYTHONUNBUFFERED=1
"$PY" -c "import roborl, gymnasium, mujoco, stable_baselines3, torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
exec "$PY" "$SCRIPT" "$@"
