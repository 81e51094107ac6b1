# The rcclx Python package (python/rcclx): a torch extension over the header-only library.
#   pip install --no-build-isolation .      (Debian bookworm: into a venv, docs/pytorch.md, section Building)
# Built for the CUDA backend when torch has CUDA and nvcc is found (RCCLX_TORCH_BACKEND=cuda|host
# chooses), otherwise for the host backend (CPU tensors, ranks as processes sharing memory).
import os

import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension, CUDA_HOME
import torch

here = os.path.dirname(os.path.abspath(__file__))
want = os.environ.get("RCCLX_TORCH_BACKEND", "cuda" if (torch.version.cuda and CUDA_HOME) else "host")
if want not in ("host", "cuda"):
    raise SystemExit(f"RCCLX_TORCH_BACKEND must be host or cuda (got {want!r})")
include = [os.path.join(here, "include")]
# A release build, as the C++ library's Release (NDEBUG: checked mode off); RCCLX_TORCH_CHECKS=1 builds
# the checked mode in (device-side agreement checks on every call, docs/checks.md).
checks = ["-DRCCLX_CHECKS=1"] if os.environ.get("RCCLX_TORCH_CHECKS") == "1" else ["-DNDEBUG"]
cxx = ["-O2", "-std=c++17"] + checks
src = "python/rcclx/csrc/"
# The communicator's side (no torch header): engine.cpp and its collectives' launches, split so that
# nvcc compiles them in parallel (engine_impl.hpp), and the fused ops.
collectives = ["engine_allreduce_f32_bf16", "engine_allreduce_f16_i32_i64_f64", "engine_allreduce_i8_u8_bool",
               "engine_reduce_f32_bf16_i32_i64", "engine_reduce_f16_f64_i8_u8_bool", "engine_copy"]
if want == "cuda":
    # ops.cpp and dist_backend.cpp (torch's side) by the host compiler; the communicator and its
    # kernels by nvcc, in parallel.
    cuda_sources = ["engine.cu", "fused.cu"] + [c + ".cu" for c in collectives]
    ext = CUDAExtension("rcclx._C", [src + "ops.cpp", src + "dist_backend.cpp"] + [src + f for f in cuda_sources],
                        include_dirs=include,
                        extra_compile_args={"cxx": cxx + ["-DRCCLX_TORCH_CUDA=1"],
                                            "nvcc": ["-O2", "-std=c++17", "--expt-relaxed-constexpr"] + checks})
else:
    # g++ compiles the collectives together (engine_collectives.cpp includes them) in less time than apart.
    host_sources = ["ops.cpp", "dist_backend.cpp", "engine.cpp", "engine_collectives.cpp", "fused.cpp"]
    ext = CppExtension("rcclx._C", [src + f for f in host_sources], include_dirs=include,
                       extra_compile_args=cxx)


class build_py_with_headers(build_py):
    """Also installs the rcclx headers into the package (rcclx/include), for users' extensions
    (rcclx.include_dir())."""

    def run(self):
        super().run()
        dst = os.path.join(self.build_lib, "rcclx", "include", "rcclx")
        if os.path.isdir(dst):
            shutil.rmtree(dst)
        shutil.copytree(os.path.join(here, "include", "rcclx"), dst)


setup(
    name="rcclx",
    version="0.1.0",
    description="rcclx collectives for PyTorch",
    package_dir={"": "python"},
    packages=["rcclx", "rcclx.torchcomms"],
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtension, "build_py": build_py_with_headers},
    # The real torchcomms (meta-pytorch/torchcomms) finds rcclx here: torchcomms.new_comm("rcclx_shm", ...)
    # (its own "rcclx" is AMD's RCCLX library). Untested: torchcomms is not installed where rcclx is tested.
    entry_points={"torchcomms.backends": ["rcclx_shm = rcclx._torchcomms_backend"]},
)
