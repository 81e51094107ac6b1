# scripts/setup.sh: sourced by scripts/test and scripts/demo. Installs the Debian bookworm packages
# rcclx's build and checks need, when they are missing and we are allowed to (root + apt-get).
# Sets RCCLX_JOBS, RCCLX_ROOT and RCCLX_GENERATOR.
set -euo pipefail
RCCLX_SETUP_START="${RCCLX_SETUP_START:-$(date +%s)}"
RCCLX_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RCCLX_JOBS="${RCCLX_JOBS:-$(nproc 2>/dev/null || echo 2)}"

rcclx_need_packages() {
  local missing=()
  command -v cmake >/dev/null || missing+=(cmake)
  command -v g++ >/dev/null || missing+=(g++)
  command -v ninja >/dev/null || missing+=(ninja-build)
  [ -f /usr/include/catch2/catch.hpp ] || [ -f /usr/local/include/catch2/catch_test_macros.hpp ] \
    || [ -f /usr/include/catch2/catch_test_macros.hpp ] || missing+=(catch2)
  if [ "${RCCLX_SKIP_AMD:-0}" != 1 ]; then
    command -v hipcc >/dev/null || missing+=(hipcc)
    [ -d /usr/include/rocprim ] || missing+=(librocprim-dev)
    command -v clang++-19 >/dev/null || missing+=(clang-19)
  fi
  if [ "${RCCLX_SKIP_PYTHON:-0}" != 1 ]; then
    # The Python package's tests (label python): Debian's interpreter and torch (CPU).
    [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import torch" 2>/dev/null || missing+=(python3-torch)
    [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import pytest" 2>/dev/null || missing+=(python3-pytest)
    [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import setuptools" 2>/dev/null || missing+=(python3-setuptools)
    # The install the tests use (docs/pytorch.md): a venv (ensurepip) and pip building a wheel.
    [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import wheel" 2>/dev/null || missing+=(python3-wheel)
    [ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import ensurepip" 2>/dev/null || missing+=(python3-venv)
    [ -f /usr/include/python3.11/Python.h ] || missing+=(python3-dev)
    # The torch extension's headers (python3-torch only recommends them).
    [ -f /usr/include/torch/extension.h ] || missing+=(libtorch-dev)
    [ -f /usr/include/pybind11/pybind11.h ] || missing+=(pybind11-dev)
  fi
  if [ "${RCCLX_SKIP_MPI:-0}" != 1 ]; then
    # The hierarchical collectives' tests across simulated nodes (label mpi): Open MPI.
    command -v mpicxx >/dev/null || missing+=(libopenmpi-dev)
    command -v mpirun >/dev/null || missing+=(openmpi-bin)
  fi
  echo "${missing[@]:-}"
}

missing="$(rcclx_need_packages)"
if [ -n "${missing// /}" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing Debian packages: $missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
  else
    echo "== missing packages ($missing) and no root apt-get: those parts will be skipped" >&2
  fi
fi

if command -v ninja >/dev/null; then RCCLX_GENERATOR=Ninja; else RCCLX_GENERATOR="Unix Makefiles"; fi

# CUDA is preinstalled in its default location on these machines (never installed by us).
RCCLX_NVCC=""
if command -v nvcc >/dev/null; then RCCLX_NVCC="$(command -v nvcc)";
elif [ -x /usr/local/cuda/bin/nvcc ]; then RCCLX_NVCC=/usr/local/cuda/bin/nvcc; fi
