// The CUDA build of engine.cpp (nvcc).
#include "engine.cpp"
