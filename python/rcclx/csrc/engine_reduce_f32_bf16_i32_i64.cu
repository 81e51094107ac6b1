// The CUDA build of engine_reduce_f32_bf16_i32_i64.cpp (nvcc).
#include "engine_reduce_f32_bf16_i32_i64.cpp"
