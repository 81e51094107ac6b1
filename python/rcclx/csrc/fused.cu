// The CUDA build of fused.cpp.
#include "fused.cpp"
