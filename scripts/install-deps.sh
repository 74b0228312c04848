#!/usr/bin/env bash
# Installs the Debian 12 packages brisk builds and tests with; does nothing when all are present.
set -euo pipefail

PACKAGES=(
  build-essential cmake ccache git curl
  libboost-dev            # Boost.Asio / Beast (1.74 on Debian 12)
  nlohmann-json3-dev      # 3.11
  libcli11-dev            # 2.3
  libspdlog-dev libfmt-dev
  libgtest-dev
  libbenchmark-dev        # Google Benchmark: bench/tools/sampler-speed
  libtomlplusplus-dev     # 3.3, brisk plan's data/*.toml
  libjs-chart.js          # Chart.js 3.9, inlined into brisk bench's report.html
  chromium                # headless, opens report.html in tests/integration/test_report_browser.py
  clang libclang-rt-14-dev  # clang 14 with libFuzzer, ASan and UBSan: tests/fuzz
  python3 python3-venv python3-pip
  python3-numpy python3-yaml  # llama.cpp's gguf-py: `brisk pull` converts all-minilm-l6-v2 with it
  prometheus              # 2.42, with promtool: tests/integration/test_prometheus.py
  haproxy                 # 2.6: tests/integration/test_haproxy.py; haproxy -c checks `brisk plan --emit haproxy`
)

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

echo "installing Debian packages: ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
