#!/usr/bin/env bash
# Device-tool helper (run from the repo root on the GPU machine): `tools/device-run.sh pytest ARGS`
# or `tools/device-run.sh run SCRIPT ARGS`. The repo root on sys.path would shadow the
# tlgemm.macros / tlgemm.schedules mapping of pyproject, so the packages are linked under
# /tmp/tlp as an install would lay them out, and commands run from /tmp/tlrun, a mirror of
# the repo without the three package folders (pytest-xdist workers put their working
# directory first on sys.path). TileLang caches kernels in .tlcache/. Wheels carried in
# .whl/ (e.g. pytest-xdist) are installed into /tmp/site first.
source .devbundle/enter.sh
R=$PWD
mkdir -p /tmp/tlp/tlgemm /tmp/tlrun $R/.tlcache
for f in $R/tlgemm/*; do ln -sfn $f /tmp/tlp/tlgemm/; done
ln -sfn $R/macros /tmp/tlp/tlgemm/macros
ln -sfn $R/schedules /tmp/tlp/tlgemm/schedules
for f in $R/* $R/.tlcache; do ln -sfn $f /tmp/tlrun/; done
rm -f /tmp/tlrun/tlgemm /tmp/tlrun/macros /tmp/tlrun/schedules
if compgen -G "$R/.whl/*.whl" >/dev/null && [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $R/.whl/*.whl
fi
export PYTHONPATH=/tmp/tlp:/tmp/devbundle${PYTHONPATH_EXTRA:+:$PYTHONPATH_EXTRA}:/tmp/site
export TILELANG_CACHE_DIR=$R/.tlcache
cd /tmp/tlrun
mode=$1; shift
if [ "$mode" = pytest ]; then
  python3 -m pytest "$@"
else
  python3 "$@"
fi
