// The shared dda:: per-rank launchers (see launchers.hpp), compiled once for the suite.
#define RCCLX_TEST_DEFINE_LAUNCHERS
#include "launchers.hpp"

RCCLX_TEST_DDA_ALLREDUCE(, float);
RCCLX_TEST_DDA_ALLREDUCE(, rcclx::bf16);
RCCLX_TEST_DDA_ALLREDUCE(, rcclx::fp16);
RCCLX_TEST_DDA_ALLREDUCE(, std::int32_t);
RCCLX_TEST_DDA_COLLECTIVES(, float);
RCCLX_TEST_DDA_COLLECTIVES(, rcclx::bf16);
