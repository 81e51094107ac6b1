// The dda:: AllReduce launchers tests/dda/launcher_test.cpp calls (tests/support/launchers.hpp),
// compiled with emulated threads for rcclx_test_emulate_dda_launcher (the suite's shared copies are
// built with one-thread blocks, another inline namespace). Only the two element types it uses.
#define RCCLX_TEST_DEFINE_LAUNCHERS
#include "../support/launchers.hpp"

RCCLX_TEST_DDA_ALLREDUCE(, float);
RCCLX_TEST_DDA_ALLREDUCE(, rcclx::bf16);
