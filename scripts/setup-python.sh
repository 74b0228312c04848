#!/usr/bin/env bash
# Makes .venv at the repo root hold the pinned, hash-checked test dependencies from
# tests/requirements.txt. The environment itself is built once per requirements file, in
# $BRISK_HOME/venvs/<sha256 of the file> (beside the model cache), and .venv is a link to it: a
# fresh clone with the same requirements reuses it instead of installing again (14-25 s of every
# clean-clone `make test`, BENCHMARKS.md). Idempotent; a stamp inside the environment marks it
# complete, and a lock keeps two clones from building the same one at once.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
REQUIREMENTS=tests/requirements.txt
PYTHON="${PYTHON:-python3}"
BRISK_HOME="${BRISK_HOME:-$HOME/.cache/brisk}"

want="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
shared="$BRISK_HOME/venvs/$want"
stamp="$shared/.brisk-requirements.sha256"

if [[ -L "$VENV" && "$(readlink "$VENV")" == "$shared" && -f "$stamp" && -x "$VENV/bin/python" ]]; then
  exit 0
fi

mkdir -p "$BRISK_HOME/venvs"
exec 9>"$BRISK_HOME/venvs/.lock"
flock 9
if [[ ! -f "$stamp" || ! -x "$shared/bin/python" ]]; then
  rm -rf "$shared"
  echo "creating $shared"
  "$PYTHON" -m venv "$shared"
  echo "installing $REQUIREMENTS into $shared"
  "$shared/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    --require-hashes --only-binary :all: -r "$REQUIREMENTS"
  echo "$want" > "$stamp"
fi
flock -u 9

# A .venv of an earlier layout (a directory) or a link to other requirements is replaced.
rm -rf "$VENV"
ln -s "$shared" "$VENV"
echo "python test environment ready in $VENV -> $shared"
