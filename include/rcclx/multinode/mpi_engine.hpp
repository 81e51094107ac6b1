// rcclx/multinode/mpi_engine.hpp: the inter-node engine over the user's MPI communicator. Include
// it where <mpi.h> is available (link MPI::MPI_CXX); rcclx's other headers never include MPI.
//
//   MPI_Comm across;                                   // the user's: the same local rank on every node
//   MPI_Comm_split(MPI_COMM_WORLD, local_rank, node, &across);
//   rcclx::multinode::mpi_engine eng(across);          // rank = node; the communicator is not duplicated
//   rcclx::multinode::hierarchical<8> h(node_comm, eng, topo);
//
// The adapter never creates, duplicates or frees the communicator; it must outlive the engine,
// and MPI must be initialised (and not finalised) while the engine is used. Buffers are passed to
// MPI as they are: host memory on the host backend; device memory on GPU backends needs a
// GPU-aware MPI (the adapter waits for `stream` before each call, since MPI does not order itself
// after GPU streams). bf16 and fp16 sums use a user-defined MPI operation that adds in fp32 and
// rounds to the type at each step (MPI has no bf16 type); float32 uses MPI_FLOAT / MPI_SUM.
// Errors: MPI's error handler of the communicator applies (MPI_ERRORS_ARE_FATAL by default: the
// job aborts); with MPI_ERRORS_RETURN an error code becomes an rcclx::error naming the call.
#pragma once

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <string>

#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../core/types.hpp"
#include "../gpu/runtime.hpp"
#include "engine.hpp"

RCCLX_NAMESPACE_BEGIN
namespace multinode {

namespace detail {

// MPI_User_function: inout[i] = T(fp32(in[i]) + fp32(inout[i])).
template <class T>
void mpi_sum_in_fp32(void* in, void* inout, int* len, MPI_Datatype*) {
  using tr = core::value_traits<T>;
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = tr::store(tr::load(a[i]) + tr::load(b[i]));
}

inline void mpi_check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw error(errc::runtime, std::string("mpi_engine: ") + call + " failed: " + text);
}

}  // namespace detail

class mpi_engine final : public engine {
 public:
  explicit mpi_engine(MPI_Comm comm) : comm_(comm) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) throw error(errc::invalid_argument, "mpi_engine: MPI is not initialised (call MPI_Init first)");
    if (comm == MPI_COMM_NULL) throw error(errc::invalid_argument, "mpi_engine: comm is MPI_COMM_NULL");
    detail::mpi_check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    detail::mpi_check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    detail::mpi_check(MPI_Type_contiguous(2, MPI_BYTE, &half_type_), "MPI_Type_contiguous");
    detail::mpi_check(MPI_Type_commit(&half_type_), "MPI_Type_commit");
    detail::mpi_check(MPI_Op_create(&detail::mpi_sum_in_fp32<bf16>, 1, &bf16_sum_), "MPI_Op_create");
    detail::mpi_check(MPI_Op_create(&detail::mpi_sum_in_fp32<fp16>, 1, &fp16_sum_), "MPI_Op_create");
  }
  mpi_engine(const mpi_engine&) = delete;
  mpi_engine& operator=(const mpi_engine&) = delete;
  ~mpi_engine() override {
    int finalized = 1;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Op_free(&bf16_sum_);
    MPI_Op_free(&fp16_sum_);
    MPI_Type_free(&half_type_);
  }

  int rank() const override { return rank_; }
  int num_ranks() const override { return size_; }
  const char* name() const override { return "mpi"; }
  MPI_Comm comm() const { return comm_; }

  void allreduce(const void* in, void* out, std::size_t count, data_type type, gpu::stream_t stream) override {
    if (count > static_cast<std::size_t>(INT_MAX))
      throw error(errc::unsupported, "mpi_engine: allreduce of count = " + std::to_string(count) +
                                         " elements exceeds MPI's int count (" + std::to_string(INT_MAX) + ")");
    MPI_Datatype t = MPI_FLOAT;
    MPI_Op op = MPI_SUM;
    if (type == data_type::bfloat16) t = half_type_, op = bf16_sum_;
    else if (type == data_type::float16) t = half_type_, op = fp16_sum_;
    else if (type != data_type::float32)
      throw error(errc::invalid_argument, "mpi_engine: allreduce: type = " + std::to_string(static_cast<int>(type)) +
                                              " is not an rcclx::multinode::data_type");
    gpu::stream_synchronize(stream);
    detail::mpi_check(MPI_Allreduce(in == out ? MPI_IN_PLACE : in, out, static_cast<int>(count), t, op, comm_),
                      "MPI_Allreduce");
  }

  void allgather(const void* in, void* out, std::size_t bytes, gpu::stream_t stream) override {
    if (bytes > static_cast<std::size_t>(INT_MAX))
      throw error(errc::unsupported, "mpi_engine: allgather of bytes = " + std::to_string(bytes) +
                                         " per rank exceeds MPI's int count (" + std::to_string(INT_MAX) + ")");
    gpu::stream_synchronize(stream);
    const bool in_place = in == static_cast<const char*>(out) + static_cast<std::size_t>(rank_) * bytes;
    detail::mpi_check(MPI_Allgather(in_place ? MPI_IN_PLACE : in, static_cast<int>(bytes), MPI_BYTE, out,
                                    static_cast<int>(bytes), MPI_BYTE, comm_),
                      "MPI_Allgather");
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  MPI_Datatype half_type_ = MPI_DATATYPE_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  MPI_Op fp16_sum_ = MPI_OP_NULL;
};

}  // namespace multinode
RCCLX_NAMESPACE_END
