// Example 06: your own kernel in your own torch extension, on an rcclx.Communicator's handles.
// A row-parallel linear layer out = silu(x W + bias): x (M x K) and W (K x N) are split over the
// ranks along K; each rank's kernel multiplies its slice tile by tile, the tile-level AllReduce
// sums the partial products across ranks inside the same kernel, and the epilogue adds the bias
// and applies SiLU (linear_silu_kernel.cpp). This file is the torch side.
//
//   python3 setup.py build_ext --inplace       (this directory; rcclx installed or on PYTHONPATH)
//   pytest test_linear_silu.py                 (2 and 3 processes, against torch in float64)
#include <torch/extension.h>
#if LINEAR_SILU_CUDA
#  include <ATen/cuda/CUDAContext.h>
#endif

#include "linear_silu.hpp"

namespace {

// out = silu(sum over ranks of x_r w_r + bias), on every rank. handles: comm.kernel_handles(workspace).
at::Tensor forward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias, const at::Tensor& handles) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(0) && bias.numel() == w.size(1),
              "linear_silu: shapes x [M, k], w [k, N], bias [N] expected");
  TORCH_CHECK(x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat,
              "linear_silu: float32 tensors expected");
  const at::Tensor hc = handles.contiguous(), xc = x.contiguous(), wc = w.contiguous(), bc = bias.contiguous();
  at::Tensor out = at::empty({x.size(0), w.size(1)}, x.options());
#if LINEAR_SILU_CUDA
  void* stream = at::cuda::getCurrentCUDAStream().stream();
#else
  void* stream = nullptr;
#endif
  const std::string err = linear_silu_launch(hc.data_ptr(), hc.nbytes(), xc.data_ptr<float>(), wc.data_ptr<float>(),
                                             bc.data_ptr<float>(), out.data_ptr<float>(), x.size(0), w.size(1),
                                             x.size(1), stream);
  TORCH_CHECK(err.empty(), err);
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("workspace_bytes", &linear_silu_workspace_bytes, "Symmetric workspace bytes for an M x N output",
        py::arg("M"), py::arg("N"));
  m.def("forward", &forward, "silu(x w + bias), summed over the ranks inside the kernel", py::arg("x"), py::arg("w"),
        py::arg("bias"), py::arg("handles"));
}
