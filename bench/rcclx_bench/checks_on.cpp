// The checked-mode half of rcclx-bench's checks-cost measurement (checks_cost.hpp).
#if !defined(RCCLX_CHECKS) || RCCLX_CHECKS != 1
#  error "checks_on.cpp is compiled with RCCLX_CHECKS=1 (bench/rcclx_bench/CMakeLists.txt)"
#endif
#define RCCLX_BENCH_CHECKS_COST_IMPL allreduce_us_checks_on
#include "checks_cost.hpp"
