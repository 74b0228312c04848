#!/usr/bin/env bash
# Packs what bench/gpu_check.sh needs on a lent GPU machine into .device/ (git-ignored via
# .git/info/exclude; about 50 MB, under the device tool's 64 MiB): the CUDA brisk (xz), the
# portable random-gguf, the Debian shared libraries brisk links that a CUDA image lacks, and the
# Llama 3 vocabulary. Run `make cuda` first. The device command then is, with carry [".device"]:
#   mkdir -p /tmp/bin && xz -dc .device/brisk.xz > /tmp/bin/brisk && chmod +x /tmp/bin/brisk &&
#   cp .device/random-gguf /tmp/bin/ && export LD_LIBRARY_PATH=$PWD/.device/lib:<dirs of
#   libcublas.so.13, libcudart.so.13, libnccl.so.2 there> &&
#   bench/gpu_check.sh /tmp/bin .device/ggml-vocab-llama-bpe.gguf /tmp/gpu;
#   tar czf $OUT/gpu.tar.gz -C /tmp gpu
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .git/info .device/lib
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
cmake --build build-cuda --target brisk random-gguf
xz -T0 -6 -c build-cuda/bin/brisk > .device/brisk.xz
cp build-cuda/bin/random-gguf .device/
cp .deps/llama.cpp/models/ggml-vocab-llama-bpe.gguf .device/
for lib in $(ldd build-cuda/bin/brisk | awk '/spdlog|fmt|tomlplusplus|gomp/ {print $3}'); do
  cp -L "$lib" .device/lib/
done
du -sh .device
