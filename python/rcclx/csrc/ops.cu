// nvcc compiles the extension as CUDA (the library's CUDA backend): the same source.
#include "ops.cpp"
