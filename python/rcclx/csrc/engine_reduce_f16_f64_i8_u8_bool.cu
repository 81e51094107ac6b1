// The CUDA build of engine_reduce_f16_f64_i8_u8_bool.cpp (nvcc).
#include "engine_reduce_f16_f64_i8_u8_bool.cpp"
