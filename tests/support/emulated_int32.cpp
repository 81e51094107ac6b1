// The shared emulated_peers<std::int32_t, 16> kernels (see emulated_peers.hpp), compiled once for the suite.
#define RCCLX_TEST_DEFINE_SHARED_PEERS
#include "emulated_peers.hpp"

RCCLX_TEST_SHARED_PEERS(, std::int32_t);
