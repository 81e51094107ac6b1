// The CUDA build of engine_allreduce_i8_u8_bool.cpp (nvcc).
#include "engine_allreduce_i8_u8_bool.cpp"
