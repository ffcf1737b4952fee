#!/usr/bin/env bash
# The pytest part of `make test`, in three lanes on two cores:
#   lane 0: everything but the robot tests and the `serial` ones, two xdist workers (a module
#           stays on one worker; the longest groups, by tests/durations.json, start first);
#   lane 1: tests/robots (not `serial`), one process beside lane 0. Robot tests mostly wait on
#           DDS discovery and on the robot's own clock (100-1000 Hz JointState): they use about
#           a third of a core, so a third process fills the CPU they would leave idle on one
#           of lane 0's two workers. Their ROS domains differ per lane (tests/robots/conftest.py);
#   then the `serial` tests alone: they spawn their own workers or measure a rate.
# Lane 1's output is printed after lane 0's; the exit status is non-zero if any lane failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
export OMP_NUM_THREADS=1

robots_log="$(mktemp -t roborl-robots-lane.XXXXXX)"
ROBORL_TEST_LANE=1 "$PY" -m pytest -q -m "not serial" -o cache_dir=.pytest_cache/robots-lane \
	--durations=10 tests/robots >"$robots_log" 2>&1 &
robots=$!
trap 'kill "$robots" 2>/dev/null' EXIT INT TERM

"$PY" -m pytest -q -n 2 --dist loadgroup --no-loadscope-reorder -m "not serial" \
	--ignore=tests/robots --durations=20
main_status=$?
wait "$robots"
robots_status=$?
trap - EXIT INT TERM
echo "== tests/robots, run beside the above (lane 1) =="
cat "$robots_log"
rm -f "$robots_log"
if [ "$main_status" -ne 0 ] || [ "$robots_status" -ne 0 ]; then
	exit 1
fi
"$PY" -m pytest -q -m serial --durations=10
