#!/usr/bin/env bash
# Device-tool helper (run from the repo root on the GPU machine): `tools/device-run.sh pytest ARGS`
# or `tools/device-run.sh run SCRIPT ARGS`. The repo root on sys.path would shadow the
# tlgemm.macros / tlgemm.schedules mapping of pyproject, so the packages are linked under
# /tmp/tlp as an install would lay them out; TileLang caches kernels in .tlcache/.
source .devbundle/enter.sh
R=$PWD
mkdir -p /tmp/tlp/tlgemm
for f in $R/tlgemm/*; do ln -sfn $f /tmp/tlp/tlgemm/; done
ln -sfn $R/macros /tmp/tlp/tlgemm/macros
ln -sfn $R/schedules /tmp/tlp/tlgemm/schedules
export PYTHONPATH=/tmp/tlp:/tmp/devbundle
export TILELANG_CACHE_DIR=$R/.tlcache
mode=$1; shift
if [ "$mode" = pytest ]; then
  python3 -c "import sys; sys.path=[p for p in sys.path if p not in ('', '$R')]; import pytest; sys.exit(pytest.main(sys.argv[1:]))" "$@"
else
  python3 "$@"
fi
