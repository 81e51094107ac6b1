// The shared lpc:: per-rank launchers (see launchers.hpp), compiled once for the suite.
#define RCCLX_TEST_DEFINE_LAUNCHERS
#include "launchers.hpp"

RCCLX_TEST_LPC_COLLECTIVES(, float);
RCCLX_TEST_LPC_COLLECTIVES(, rcclx::bf16);
