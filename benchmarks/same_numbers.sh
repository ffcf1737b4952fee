#!/bin/bash
# Fixed-seed runs whose metrics must not change when code is only moved (a re-layout).
#   benchmarks/same_numbers.sh REPO OUT     # run the five runs with REPO's roborl, into OUT
#   python benchmarks/same_numbers_compare.py OUT_BEFORE OUT_AFTER
# Run it on the commit before and after (e.g. a `git worktree` of each); run "before" twice
# first: the two must be identical, or the comparison cannot see a difference.
set -e
REPO=$(cd "$1" && pwd); OUT=$2; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-$HERE/.venv/bin/python}
export PYTHONPATH=$REPO OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
cd "$OUT"
R="$PY -m roborl.core.cli train progress=false seed=0"
DATA=$PWD/pendulum_3000.hdf5
if [ ! -f "$DATA" ]; then
  (cd "$HERE" && PYTHONPATH=$HERE/tests/offline:$HERE/tests $PY -c "
from test_offline import behaviour_dataset
behaviour_dataset(n=3000).save('$DATA')")
fi
$R total_steps=3000 eval_every=1500 checkpoint_every=3000 hydra.run.dir=default > default.log 2>&1
$R algo=sac env=hopper total_steps=1500 learning_starts=500 eval_every=750 eval_episodes=2 \
  hydra.run.dir=sac > sac.log 2>&1
$R algo=iql dataset="$DATA" env=inverted_pendulum total_updates=600 eval_every=300 \
  eval_episodes=2 log_every=100 hydra.run.dir=iql > iql.log 2>&1
$R algo=wsrl dataset="$DATA" env=inverted_pendulum algo.pretrain_steps=300 algo.warmup_steps=200 \
  total_steps=600 eval_every=300 eval_episodes=2 log_every=100 hydra.run.dir=wsrl > wsrl.log 2>&1
$R algo=drq env=tabletop_reach_pixels env.kwargs.image_size=16 +env.frame_stack=2 \
  algo.batch_size=16 algo.hidden_sizes=[32,32] total_steps=300 learning_starts=100 eval_every=150 \
  eval_episodes=2 checkpoint_every=300 log_every=50 hydra.run.dir=drq > drq.log 2>&1
echo "wrote $OUT"
