// The CUDA build of linear_silu.cpp (nvcc compiles the same source for CUDA tensors).
#include "linear_silu.cpp"
