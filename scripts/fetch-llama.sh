#!/usr/bin/env bash
# Fetches the pinned llama.cpp source. It travels inside the registry's llama-cpp-python
# source distribution (vendor/llama.cpp); we pin that file by version and sha256.
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_CPP_PYTHON_VERSION=0.3.36
LLAMA_CPP_PYTHON_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
# The registry's own address of that file (its simple index lists it). Fetched directly it takes
# under a second; `pip download --no-binary :all:` took 293 s on a cold machine, nearly all of it
# building the sdist's build dependencies (cmake, ninja) from source only to read its metadata.
LLAMA_CPP_PYTHON_URL=https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz
DEST=.deps/llama.cpp
STAMP="$DEST/.brisk-pin"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$LLAMA_CPP_PYTHON_SHA256" ]]; then
  exit 0
fi

mkdir -p .deps/download
ARCHIVE=".deps/download/llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}.tar.gz"
if [[ ! -f "$ARCHIVE" ]] || ! echo "$LLAMA_CPP_PYTHON_SHA256  $ARCHIVE" | sha256sum -c --status; then
  echo "fetching llama.cpp source (llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION} sdist)"
  if ! python3 - "$LLAMA_CPP_PYTHON_URL" "$ARCHIVE" <<'PY'
import shutil, sys, urllib.request
url, dest = sys.argv[1], sys.argv[2]
with urllib.request.urlopen(url, timeout=180) as response, open(dest + ".part", "wb") as out:
    shutil.copyfileobj(response, out)
shutil.move(dest + ".part", dest)
PY
  then
    # A mirror that does not serve the registry's file paths: let pip find the file (its build
    # dependencies as wheels, so only the metadata step runs).
    echo "direct download failed; asking pip" >&2
    python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python -d .deps/download \
      "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}"
  fi
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
