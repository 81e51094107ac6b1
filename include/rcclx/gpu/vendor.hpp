// rcclx/gpu/vendor.hpp: the one place that includes a vendor runtime header.
// Nothing here is aliased into the global namespace; users include rcclx inside their own kernels.
//
//   #include <rcclx/gpu/vendor.hpp>   // hip_runtime.h, cuda_runtime.h, or nothing on host
#pragma once

#include "../config.hpp"

#if RCCLX_BACKEND_HIP
#  include <hip/hip_runtime.h>
#elif RCCLX_BACKEND_CUDA
#  include <cuda_runtime.h>
#endif
