// The unchecked half of rcclx-bench's checks-cost measurement (checks_cost.hpp).
#if !defined(RCCLX_CHECKS) || RCCLX_CHECKS != 0
#  error "checks_off.cpp is compiled with RCCLX_CHECKS=0 (bench/rcclx_bench/CMakeLists.txt)"
#endif
#define RCCLX_BENCH_CHECKS_COST_IMPL allreduce_us_checks_off
#include "checks_cost.hpp"
