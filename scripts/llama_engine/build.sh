#!/usr/bin/env bash
# Builds the real llama.cpp HTTP server (`llama-server`, CPU only) and a tiny test model for
# fleetgate's integration tests and benchmarks. Everything comes from PyPI: the llama.cpp
# source tree vendored in the llama-cpp-python sdist, and gguf-py from that same tree.
#
# The model has random weights (its answers are noise) but the real Qwen2 byte-level BPE
# tokenizer and the real Qwen2.5-Instruct chat template, so token counts, context errors,
# templates and streaming are the engine's own. A tokenizer.json of the same vocabulary is
# written beside it, for fleetgate's optional local tokenizer.
#
# Output: $FLEETGATE_LLAMA_HOME (default ~/.cache/fleetgate-llama). Each step is skipped
# when its output is already there, so a second run takes well under a second. The first
# build takes about 5-6 minutes on 2 cores. Prints, on stdout, three shell assignments:
#   LLAMA_SERVER=…  LLAMA_MODEL=…  LLAMA_TOKENIZER=…
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
home="${FLEETGATE_LLAMA_HOME:-$HOME/.cache/fleetgate-llama}"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
jobs="${JOBS:-$(nproc)}"
work="$home/build"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
cmake_dir="$work/cmake-$version"
server="$home/bin/llama-server"
model="$home/model/fleetgate-tiny-qwen2tok.gguf"
tokenizer="$home/model/fleetgate-tiny-qwen2tok.tokenizer.json"

say() { printf '[llama-engine] %s\n' "$*" >&2; }
mkdir -p "$work" "$home/bin" "$home/model"

need=()
for tool in cmake g++ make; do command -v "$tool" >/dev/null || need+=("$tool"); done
if ((${#need[@]})); then
  say "installing ${need[*]} (apt-get)"
  apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi

if [[ ! -f "$src/tools/server/server.cpp" ]]; then
  say "fetching the llama-cpp-python $version sdist from PyPI"
  python3 -m pip download --quiet --no-deps --no-binary=:all: "llama-cpp-python==$version" \
    -d "$work" >&2
  tar xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
fi

if ! "$server" --version >/dev/null 2>&1; then
  say "compiling llama-server with $jobs jobs (about 5 minutes on 2 cores; log in $work)"
  cmake -S "$src" -B "$cmake_dir" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=OFF -DGGML_CCACHE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >"$work/cmake.log" 2>&1 ||
    { tail -40 "$work/cmake.log" >&2; exit 1; }
  cmake --build "$cmake_dir" --target llama-server -j"$jobs" >"$work/build.log" 2>&1 ||
    { tail -40 "$work/build.log" >&2; exit 1; }
  install -m 0755 "$cmake_dir/bin/llama-server" "$server"
fi

if [[ ! -s "$model" || ! -s "$tokenizer" ]]; then
  venv="$work/venv"
  if [[ ! -x "$venv/bin/python" ]]; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet "$src/gguf-py" >&2
  fi
  say "writing the test model and its tokenizer.json"
  "$venv/bin/python" "$here/make_model.py" "$src" "$model.part" "$tokenizer.part" >&2
  mv "$model.part" "$model"
  mv "$tokenizer.part" "$tokenizer"
fi

echo "LLAMA_SERVER=$server"
echo "LLAMA_MODEL=$model"
echo "LLAMA_TOKENIZER=$tokenizer"
