// The CUDA build of engine_allreduce_f16_i32_i64_f64.cpp (nvcc).
#include "engine_allreduce_f16_i32_i64_f64.cpp"
