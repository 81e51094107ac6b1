# Example 06's extension, built the way a torch extension is: against an installed rcclx package
# (its headers: rcclx.include_dir()) and for the same backend (rcclx.backend: "host" or "cuda").
#   python3 setup.py build_ext --inplace
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension, CUDAExtension

import rcclx

flags = ["-O2", "-std=c++17"]
if rcclx.backend == "cuda":
    ext = CUDAExtension("linear_silu_ext", ["linear_silu.cu"], include_dirs=[rcclx.include_dir()],
                        extra_compile_args={"cxx": flags, "nvcc": flags + ["--expt-relaxed-constexpr"]})
else:
    ext = CppExtension("linear_silu_ext", ["linear_silu.cpp"], include_dirs=[rcclx.include_dir()],
                       extra_compile_args=flags)
setup(name="linear_silu_ext", ext_modules=[ext], cmdclass={"build_ext": BuildExtension})
