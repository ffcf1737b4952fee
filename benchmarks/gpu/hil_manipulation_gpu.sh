#!/usr/bin/env bash
# Issue 33's arms on one GPU box, in one call of at most 10 minutes: every run of the arms goes
# at once (16 cores, one GPU) until DEADLINE_S, and each run's policy-only evaluations so far
# come back. It does not buy the 36,000 steps: on an H200 eight runs at once made 8.6-9.8 env
# steps/s each (the GPU takes the processes' small kernels in turns), so a call ends near
# 4,000 steps (benchmarks/results/hil_manipulation_seeds.md). PROFILE_S=90 shows where a
# step's time goes. The box is air-gapped with a CUDA torch:
#
#   scripts/download_gpu_wheels.sh                # here: .gpu-wheels/ (cp312 wheels)
#   mkdir -p .hilgpu && cp WORK/demos.npz .hilgpu/ && cp -r WORK/classifier_relabelled .hilgpu/classifier
#   # on the box, carrying .gpu-wheels, .hilgpu and .gl (the EGL loaders, see docs/performance.md):
#   bash benchmarks/gpu/hil_manipulation_gpu.sh
#
# WORK is a finished `benchmarks/hil_manipulation.py --work WORK` (its demos and the classifier
# after the hard-negative round), so the GPU time goes to the arms. The runs' metrics and logs
# come back as $OUT/hil_gpu_runs.tar.gz: unpack it and pass the run directories to
# `python benchmarks/hil_manipulation_controls.py` (LABEL=RUN_DIR,...) for the table and IQMs.
set -uo pipefail
cd "$(dirname "$0")/../.."
START=$(date +%s)
DEADLINE_S="${DEADLINE_S:-500}"   # seconds after START when every run is stopped (SIGINT)
STEPS="${STEPS:-36000}"
SEEDS="${SEEDS:-4}"
BC_SEEDS="${BC_SEEDS:-3}"
PRIVILEGED_SEEDS="${PRIVILEGED_SEEDS:-2}"
PROFILE_S="${PROFILE_S:-0}"      # > 0: profile one run alone first (cProfile)
# The CPU benchmark's defaults (change them as its flags that made .hilgpu were changed):
RL_ALGO="${RL_ALGO:-serl}"         # serl: RLPD with SERL's values (discount 0.96), or rlpd
NORMALIZED="${NORMALIZED:-true}"   # true: state in workspace units (demos recorded so too)
PX="${PX:-32}"                     # camera size, and CAMERAS the views (front,side or front)
CAMERAS="${CAMERAS:-front,side}"
OUT="${OUT:-/tmp/hil_gpu_out}"
WORK=/tmp/hil_gpu
mkdir -p "$OUT" "$WORK"
PY="${PYTHON:-python3}"
DEVICE="${DEVICE:-cuda}"   # DEVICE=cpu INSTALL=0: a dry run of this script on a CPU machine

export MUJOCO_GL=egl PYOPENGL_PLATFORM=egl PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 WANDB_MODE=offline
export PX CAMERAS
if [ "${INSTALL:-1}" = 1 ]; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    "$PY" -m pip install -q --no-index --no-deps .gpu-wheels/*.whl || exit 1
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
fi
"$PY" - <<'EOF' || exit 1
import os, time, torch
from roborl.sim.benchmarks.fetch_pixels import FetchPixelEnv
env = FetchPixelEnv(image_size=int(os.environ["PX"]), end_on_success=False,
                    cameras=os.environ["CAMERAS"].split(","))
env.reset(seed=0)
t = time.perf_counter()
for _ in range(200):
    env.step(env.action_space.sample())
env.close()
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
print(f"torch {torch.__version__} on {gpu}; Fetch {env.image_size} px {env.cameras} step "
      f"{(time.perf_counter() - t) / 200 * 1e3:.2f} ms (EGL)")
EOF
echo "ready after $(( $(date +%s) - START )) s"

COMMON=(
    env=fetch_push_pixels env.kwargs.image_size="$PX" env.kwargs.cameras="[$CAMERAS]"
    env.kwargs.end_on_success=false
    env.kwargs.normalized_state="$NORMALIZED"
    total_steps="$STEPS" learning_starts=500 eval_every=3000 eval_episodes=20
    checkpoint_every="$STEPS" log_every=1000 progress=false torch_threads=1 device="$DEVICE"
)
ALGO=(algo.batch_size=128 algo.conv_channels=16 algo.conv_strided=2)
PERSON="scripted_person={window_s:0.4,max_takeover_s:1.0}"
LEARNED=(demos=.hilgpu/demos.npz
    "reward={name:classifier,path:.hilgpu/classifier,consecutive:2,threshold:0.8}")
# The control: the block's position in the state and the env's true reward (demos recorded
# with that state), so neither vision nor the classifier stands between RLPD and the task.
PRIVILEGED=(env.kwargs.privileged_block=true demos=.hilgpu/demos_privileged.npz)
launch() {  # arm seed overrides...
    local arm=$1 seed=$2; shift 2
    local left=$(( DEADLINE_S - ($(date +%s) - START) ))
    mkdir -p "$WORK/$arm"
    timeout -k 30 -s INT "$left" "$PY" -m roborl.core.cli train "$@" "${COMMON[@]}" \
        seed="$seed" hydra.run.dir="$WORK/$arm/seed$seed" > "$WORK/$arm/seed$seed.log" 2>&1 &
}
# Pre-flight: a few updates of each algorithm on CUDA with the scripted person, so a broken
# box (a missing wheel) fails in seconds.
for algo in "$RL_ALGO" pixel_bc; do
    "$PY" -m roborl.core.cli train algo=$algo "${ALGO[@]}" "$PERSON" "${COMMON[@]}" "${LEARNED[@]}" total_steps=120 \
        learning_starts=60 eval_every=120 eval_episodes=1 checkpoint_every=120 demo_fraction=0.5 \
        hydra.run.dir="$WORK/preflight_$algo" > "$WORK/preflight_$algo.log" 2>&1 \
        || { tail -n 40 "$WORK/preflight_$algo.log"; exit 1; }
done
echo "pre-flight passed after $(( $(date +%s) - START )) s"
# PROFILE_S > 0: first one rlpd_hil run alone under cProfile for that long, so the call says
# where a step's time goes on this box (the top of the cumulative table comes back).
if [ "$PROFILE_S" -gt 0 ]; then
    timeout -k 30 -s INT "$PROFILE_S" "$PY" -m cProfile -o "$WORK/profile.pstats" \
        -m roborl.core.cli train algo="$RL_ALGO" "${ALGO[@]}" "$PERSON" "${COMMON[@]}" \
        "${LEARNED[@]}" seed=50 hydra.run.dir="$WORK/profile" > "$WORK/profile.log" 2>&1
    "$PY" - "$WORK/profile.pstats" > "$OUT/hil_gpu_profile.txt" <<'PYEOF' \
        || tail -n 20 "$WORK/profile.log"
import pstats, sys
stats = pstats.Stats(sys.argv[1])
stats.sort_stats("cumulative").print_stats(45)
stats.sort_stats("tottime").print_stats(30)
PYEOF
    grep -o '"step": [0-9]*, "updates": [0-9]*' "$WORK/profile/metrics.jsonl" | tail -n 1
    echo "profile done after $(( $(date +%s) - START )) s"
fi
for s in $(seq 0 $((SEEDS - 1))); do
    launch rlpd_hil "$s" algo="$RL_ALGO" "${ALGO[@]}" "$PERSON" "${LEARNED[@]}"
    launch rlpd "$s" algo="$RL_ALGO" "${ALGO[@]}" "${LEARNED[@]}"
done
for s in $(seq 0 $((BC_SEEDS - 1))); do
    launch bc_hil "$((100 + s))" algo=pixel_bc "${ALGO[@]}" "$PERSON" demo_fraction=1.0 \
        "${LEARNED[@]}"
done
for s in $(seq 0 $((PRIVILEGED_SEEDS - 1))); do
    launch rlpd_hil_privileged "$s" algo="$RL_ALGO" "${ALGO[@]}" "$PERSON" "${PRIVILEGED[@]}"
done
wait
echo "runs stopped after $(( $(date +%s) - START )) s"
for arm in rlpd_hil rlpd bc_hil rlpd_hil_privileged; do tail -n 3 "$WORK/$arm/seed$( [ $arm = bc_hil ] && echo 100 || echo 0).log"; done
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader || true
"$PY" - > "$OUT/hil_gpu_fired.json" <<'EOF'
import json, sys
from pathlib import Path

sys.path.insert(0, "benchmarks")
from hil_manipulation import fired_precision  # the reward's precision on each run's fired frames

runs = sorted(p for p in Path("/tmp/hil_gpu").glob("*/seed*") if p.is_dir())
print(json.dumps({f"{p.parent.name}/{p.name}": fired_precision(p) for p in runs}, indent=1))
EOF
(cd "$WORK" && tar czf "$OUT/hil_gpu_runs.tar.gz" --exclude=checkpoints --exclude='*.png' .)
for f in "$WORK"/*/seed*/metrics.jsonl; do
    printf '%s: ' "$f"
    grep -o '"step": [0-9]*, "updates": [0-9]*, "eval/return_mean[^}]*success_rate": [0-9.]*' "$f" \
        | sed 's/"eval\/return_mean.*success_rate"/success/' | tr '\n' ' '
    echo
done
