#!/usr/bin/env bash
# Creates .venv at the repo root with the pinned, hash-checked test dependencies from
# tests/requirements.txt. Idempotent: a stamp inside .venv holds the sha256 of the requirements
# file it was built from, so a second run with unchanged requirements returns at once.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
REQUIREMENTS=tests/requirements.txt
STAMP="$VENV/.brisk-requirements.sha256"
PYTHON="${PYTHON:-python3}"

want="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
if [[ -f "$STAMP" && -x "$VENV/bin/python" && "$(cat "$STAMP")" == "$want" ]]; then
  exit 0
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  echo "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
rm -f "$STAMP"
echo "installing $REQUIREMENTS into $VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
  --require-hashes --only-binary :all: -r "$REQUIREMENTS"
echo "$want" > "$STAMP"
echo "python test environment ready in $VENV"
