#!/usr/bin/env bash
# The wheels the GPU image lacks for the whole test suite (maintainers' harness, not product code), into .dev/wheels
# (hypothesis, for the tests) and .dev/wheels/suite (papermill, nbval, pytest-xdist, ipykernel, import-linter and
# their pure-Python dependencies), for Python 3.12 on x86_64, less what the GPU image or the vLLM bundle already has
# (results/h200/sessions/2026-12-02/GPU_SUITE_2026-12-02.md). Run from the project root after ../shared/device/build_bundle.sh; the
# wheels are installed there with `pip install --no-index --no-deps` (tools/gpu/h200_session.sh).
set -eu
plat="--python-version 3.12 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux_2_28_x86_64 --only-binary=:all:"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q $plat -d "$tmp/suite" papermill nbval pytest-xdist nbformat nbclient ipykernel \
  "import-linter>=2.1"
python3 -m pip download -q $plat -d "$tmp/base" hypothesis
have="numpy pytest pluggy iniconfig packaging click requests charset_normalizer idna urllib3 certifi \
  typing_extensions jsonschema jsonschema_specifications referencing rpds_py pyzmq tqdm pyyaml attrs psutil pygments \
  rich markdown_it_py mdurl coverage python_dateutil tzdata six debugpy"   # debugpy: optional to ipykernel, 5 MB of the 64 MiB carry
for d in suite base; do
  for w in "$tmp/$d"/*.whl; do
    name=$(basename "$w" | cut -d- -f1 | tr 'A-Z' 'a-z')
    case " $have " in *" $name "*) rm "$w" ;; esac
  done
done
mkdir -p .dev/wheels/suite
rm -f .dev/wheels/*.whl .dev/wheels/suite/*.whl
mv "$tmp"/base/*.whl .dev/wheels/
mv "$tmp"/suite/*.whl .dev/wheels/suite/
ls .dev/wheels .dev/wheels/suite | wc -l
du -sh .dev/wheels
