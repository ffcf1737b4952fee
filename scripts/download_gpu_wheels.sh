#!/usr/bin/env bash
# Download the cp312 manylinux wheels that benchmarks/gpu/ needs on an air-gapped GPU box whose
# Python 3.12 already holds a CUDA torch: roborl's dependencies and stable-baselines3 (the peer),
# minus torch and what such a box's image ships (numpy, matplotlib, ...). They land in
# .gpu-wheels/ (ignored by git, never committed); benchmarks/gpu/run.sh installs them offline.
#
#   scripts/download_gpu_wheels.sh [DEST]      # DEST defaults to .gpu-wheels
#
# Versions are those of this checkout's venv (what the tests ran with). Packages whose wheel
# is pure Python but published only as an sdist (antlr4-python3-runtime, hydra's parser) are
# built into a py3-none-any wheel here.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="${1:-.gpu-wheels}"
PY="${PYTHON:-.venv/bin/python}"
mkdir -p "$DEST"

# The dependency closure of roborl (core) + stable-baselines3 + Gymnasium-Robotics (the
# manipulation benchmark) + cyclonedds (the teleop channel the scripted person speaks through),
# from this venv's metadata.
# Skipped: torch and its CUDA runtime (the box has them) and packages the GPU image already
# holds (see the device notes), which would only make the carried tree larger.
mapfile -t PINS < <("$PY" - <<'EOF'
import importlib.metadata as md
import re

SKIP = {
    "torch", "triton", "numpy", "matplotlib", "pillow", "pyyaml", "tqdm", "pluggy",
    "safetensors", "packaging", "typing-extensions", "cloudpickle", "absl-py", "filelock",
    "fsspec", "jinja2", "markupsafe", "sympy", "mpmath", "networkx", "contourpy", "cycler",
    "fonttools", "kiwisolver", "pyparsing", "python-dateutil", "six", "setuptools", "imageio",
}
def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()

seen: dict[str, str] = {}
import tomllib

deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
todo = [(re.split(r"[\s<>=!~\[(;]", d, maxsplit=1)[0], "") for d in deps]
todo += [("stable-baselines3", ""), ("gymnasium", "mujoco"), ("gymnasium-robotics", "")]
todo += [("cyclonedds", "")]
while todo:
    name, extra = todo.pop()
    key = norm(name)
    if key in SKIP or key.startswith(("nvidia-", "cuda-")):
        continue
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        continue
    if key not in seen:
        seen[key] = dist.version
    for req in dist.requires or []:
        spec, _, marker = req.partition(";")
        if "extra" in marker and f'"{extra}"' not in marker and f"'{extra}'" not in marker:
            continue
        dep = re.split(r"[\s<>=!~\[(]", spec.strip(), maxsplit=1)[0]
        if norm(dep) not in seen:
            todo.append((dep, ""))
for key, version in sorted(seen.items()):
    print(f"{key}=={version}")
EOF
)

echo "downloading ${#PINS[@]} packages into $DEST: ${PINS[*]}"
PLATFORMS=()
for p in manylinux_2_39_x86_64 manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64 \
    manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
    manylinux2014_x86_64 manylinux1_x86_64 any; do
    PLATFORMS+=(--platform "$p")
done
for pin in "${PINS[@]}"; do
    if ! "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --abi cp312 --abi abi3 --abi none "${PLATFORMS[@]}" -d "$DEST" "$pin"; then
        echo "no cp312 wheel for $pin: building a pure-Python wheel from its sdist"
        "$PY" -m pip wheel -q --no-deps -w "$DEST" "$pin"
    fi
done
du -sh "$DEST"
echo "carry it: device run with carry=[\"$DEST\"] and command 'bash benchmarks/gpu/run.sh'"
