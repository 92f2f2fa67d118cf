#!/usr/bin/env bash
# Sourced by the version checks: cd to the checkout, set ROOT, create (or reuse) the venv $1 and activate it with
# an up-to-date pip.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
[ -x "$1/bin/python" ] || "${PYTHON:-python3}" -m venv "$1"
. "$1/bin/activate"
python -m pip install -q --upgrade pip
