// The CUDA build of linear_silu_kernel.cpp (nvcc).
#include "linear_silu_kernel.cpp"
