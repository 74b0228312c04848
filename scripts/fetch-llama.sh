#!/usr/bin/env bash
# Fetches the pinned llama.cpp source. It travels inside the registry's llama-cpp-python
# source distribution (vendor/llama.cpp); we pin that file by version and sha256.
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_CPP_PYTHON_VERSION=0.3.36
LLAMA_CPP_PYTHON_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
DEST=.deps/llama.cpp
STAMP="$DEST/.brisk-pin"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$LLAMA_CPP_PYTHON_SHA256" ]]; then
  exit 0
fi

mkdir -p .deps/download
ARCHIVE=".deps/download/llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}.tar.gz"
if [[ ! -f "$ARCHIVE" ]] || ! echo "$LLAMA_CPP_PYTHON_SHA256  $ARCHIVE" | sha256sum -c --status; then
  echo "fetching llama.cpp source (llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION} sdist)"
  python3 -m pip download --quiet --no-deps --no-binary :all: -d .deps/download \
    "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}"
fi
if ! echo "$LLAMA_CPP_PYTHON_SHA256  $ARCHIVE" | sha256sum -c --status; then
  echo "error: $ARCHIVE does not match the pinned sha256 $LLAMA_CPP_PYTHON_SHA256" >&2
  exit 1
fi

rm -rf "$DEST" .deps/extract
mkdir -p .deps/extract
tar -xzf "$ARCHIVE" -C .deps/extract "llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp"
mv ".deps/extract/llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp" "$DEST"
rm -rf .deps/extract
echo "$LLAMA_CPP_PYTHON_SHA256" > "$STAMP"
echo "llama.cpp source ready in $DEST"
