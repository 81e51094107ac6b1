# Example 06's extension, built the way a torch extension is: against an installed rcclx package
# (its headers: rcclx.include_dir()) and for the same backend (rcclx.backend: "host" or "cuda").
#   python3 setup.py build_ext --inplace
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

import os

# RCCLX_INCLUDE_DIR and RCCLX_BACKEND, when set, stand in for the installed package (a build that runs
# before or beside rcclx's own).
if os.environ.get("RCCLX_INCLUDE_DIR") and os.environ.get("RCCLX_BACKEND"):
    include, backend = os.environ["RCCLX_INCLUDE_DIR"], os.environ["RCCLX_BACKEND"]
else:
    import rcclx
    include, backend = rcclx.include_dir(), rcclx.backend

flags = ["-O2", "-std=c++17", "-DNDEBUG"]
if backend == "cuda":
    # the torch side by the host compiler, the kernel (no torch header) by nvcc
    ext = CUDAExtension("linear_silu_ext", ["linear_silu.cpp", "linear_silu_kernel.cu"], include_dirs=[include],
                        extra_compile_args={"cxx": flags + ["-DLINEAR_SILU_CUDA=1"],
                                            "nvcc": flags + ["--expt-relaxed-constexpr"]})
else:
    ext = CppExtension("linear_silu_ext", ["linear_silu.cpp", "linear_silu_kernel.cpp"], include_dirs=[include],
                       extra_compile_args=flags)
setup(name="linear_silu_ext", ext_modules=[ext], cmdclass={"build_ext": BuildExtension})
