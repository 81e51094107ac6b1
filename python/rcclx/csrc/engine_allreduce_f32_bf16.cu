// The CUDA build of engine_allreduce_f32_bf16.cpp (nvcc).
#include "engine_allreduce_f32_bf16.cpp"
