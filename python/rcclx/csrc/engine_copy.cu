// The CUDA build of engine_copy.cpp (nvcc).
#include "engine_copy.cpp"
