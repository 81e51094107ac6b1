// The shared emulated_peers<rcclx::fp16, 16> kernels (see emulated_peers.hpp), compiled once for the suite.
#define RCCLX_TEST_DEFINE_SHARED_PEERS
#include "emulated_peers.hpp"

RCCLX_TEST_SHARED_PEERS(, rcclx::fp16);
