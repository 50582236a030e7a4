#!/usr/bin/env bash
# `make k8s-check`: validate deploy/kubernetes/ offline (scripts/k8s_check.py says what is
# checked). Installs the pinned validator (deploy/kubernetes/requirements.txt) into a venv under
# .cache/k8s/ once; later runs reuse it and take a few seconds.
#
# Environment:
#   TOOLWIRE_BIN       toolwire binary for `toolwire check` (default: ${CARGO_TARGET_DIR:-target}/debug/toolwire)
#   K8S_VENV           venv directory (default .cache/k8s/venv)
#   K8S_VERSIONS       Kubernetes versions to validate against (default "1.30.0 1.37.0")
#   K8S_CHECK_KUBECTL  0: do not compare with `kubectl kustomize` even where kubectl is installed
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
export TOOLWIRE_BIN=${TOOLWIRE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/debug/toolwire}
VENV=${K8S_VENV:-$ROOT/.cache/k8s/venv}
REQ=deploy/kubernetes/requirements.txt
STAMP=$VENV/.requirements.sha256

want=$(sha256sum "$REQ" | cut -d' ' -f1)
if [[ ! -x $VENV/bin/python || ! -f $STAMP || $(cat "$STAMP") != "$want" ]]; then
    echo "k8s-check: installing $REQ into $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV" || {
        echo "k8s-check: python3 -m venv failed; install python3-venv (apt-get install -y python3-venv)" >&2
        exit 1
    }
    "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$REQ"
    echo "$want" > "$STAMP"
fi

PATH=$VENV/bin:$PATH exec "$VENV/bin/python" scripts/k8s_check.py
