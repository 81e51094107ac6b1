// rcclx/host/detail/call_check.hpp: what each rank says it is calling, gathered before a
// collective so that ranks which disagree (count, type, op, algorithm, buffers) fail together
// with one message instead of hanging or reading garbage.
//
// Cost: one bootstrap allgather of sizeof(call_descriptor) = 120 bytes per collective: two small
// messages per rank through rank 0's socket, some 10-50 us on one node, and a host-side
// synchronisation point. communicator_options::check_calls (or RCCLX_CHECK_CALLS=0) turns it off
// once a program is known to be consistent.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "../../core/error.hpp"
#include "../../core/types.hpp"
#include "enum_name.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

enum class collective_kind : std::uint32_t {
  barrier = 1,
  allreduce = 2,
  allgather = 3,
  reduce_scatter = 4,
  alltoall = 5,
  broadcast = 6,
  reduce = 7,
  alltoallv = 8,
  user = 100,  // a user's kernel run through communicator::launch
};

inline const char* to_string(collective_kind k) {
  switch (k) {
    case collective_kind::barrier: return "barrier";
    case collective_kind::allreduce: return "allreduce";
    case collective_kind::allgather: return "allgather";
    case collective_kind::reduce_scatter: return "reduce_scatter";
    case collective_kind::alltoall: return "alltoall";
    case collective_kind::broadcast: return "broadcast";
    case collective_kind::reduce: return "reduce";
    case collective_kind::alltoallv: return "alltoallv";
    case collective_kind::user: return "user kernel";
  }
  return "collective";
}

// Where a collective's peers read this rank's input from.
enum class buffer_path : std::uint32_t {
  workspace = 0,   // copied into the communicator's symmetric buffer inside the kernel
  registered = 1,  // zero-copy from a buffer registered with register_buffer
  captured = 2,    // zero-copy from a buffer seen during graph capture (patched after capture)
};

inline const char* to_string(buffer_path p) {
  static constexpr const char* names[] = {"workspace (copy)", "registered buffer", "graph-captured buffer"};  // by value
  return enum_name(p, names, "?");
}

// Element type identity on the wire.
template <class T>
struct type_tag {
  static constexpr std::uint32_t id = 0x1000u + static_cast<std::uint32_t>(sizeof(T));
  static const char* name() { return "user type"; }
};
#define RCCLX_DETAIL_TYPE_TAG(T, ID, NAME)            \
  template <>                                         \
  struct type_tag<T> {                                \
    static constexpr std::uint32_t id = ID;           \
    static const char* name() { return NAME; }        \
  };
RCCLX_DETAIL_TYPE_TAG(float, 1, "float32")
RCCLX_DETAIL_TYPE_TAG(double, 2, "float64")
RCCLX_DETAIL_TYPE_TAG(::rcclx::bf16, 3, "bfloat16")
RCCLX_DETAIL_TYPE_TAG(::rcclx::fp16, 4, "float16")
RCCLX_DETAIL_TYPE_TAG(std::int32_t, 5, "int32")
RCCLX_DETAIL_TYPE_TAG(std::uint32_t, 6, "uint32")
RCCLX_DETAIL_TYPE_TAG(std::int64_t, 7, "int64")
RCCLX_DETAIL_TYPE_TAG(std::uint64_t, 8, "uint64")
RCCLX_DETAIL_TYPE_TAG(std::int8_t, 9, "int8")
RCCLX_DETAIL_TYPE_TAG(std::uint8_t, 10, "uint8")
RCCLX_DETAIL_TYPE_TAG(bool, 11, "bool")
#undef RCCLX_DETAIL_TYPE_TAG

struct call_descriptor {
  std::uint32_t kind;        // collective_kind
  std::uint32_t type_id;     // type_tag<T>::id
  std::uint32_t op;          // reduce op (as its enum value), 0 where none applies
  std::uint32_t algo;        // algorithm requested (enum value)
  std::uint32_t path;        // buffer_path
  std::uint32_t shape;       // a call's shape word beyond its count (user calls: e.g. a row length)
  std::uint32_t root;        // broadcast, reduce: the root rank (0 elsewhere)
  std::uint32_t factor_on_device;  // premul_sum: 1 when its factor is read from device memory
  std::uint64_t count;       // elements
  std::uint64_t reg_id;      // registration number (registered path)
  std::uint64_t reg_offset;  // bytes from the registered buffer's start (registered path)
  std::uint64_t seq;         // collective number on this communicator
  double factor;             // premul_sum: its factor (0 elsewhere)
  char type_name[16];
  char op_name[16];
  char algo_name[16];
};
static_assert(sizeof(call_descriptor) == 120, "call_descriptor is exchanged between processes");

// Copies a name, truncated and NUL-terminated.
template <std::size_t N>
inline void copy_name(char (&dst)[N], const char* src) {
  const std::size_t len = src ? std::strlen(src) : 0;
  const std::size_t n = len < N - 1 ? len : N - 1;
  if (n) std::memcpy(dst, src, n);
  dst[n] = '\0';
}

template <class T>
inline call_descriptor make_descriptor(collective_kind kind, std::size_t count, std::uint32_t op = 0,
                                       const char* op_name = "-", std::uint32_t algo = 0,
                                       const char* algo_name = "-") {
  call_descriptor d{};
  d.kind = static_cast<std::uint32_t>(kind);
  d.type_id = type_tag<T>::id;
  d.op = op;
  d.algo = algo;
  d.count = count;
  copy_name(d.type_name, type_tag<T>::name());
  copy_name(d.op_name, op_name);
  copy_name(d.algo_name, algo_name);
  return d;
}

// Every rank's value for a message: " rank 0: <text(all[0])>, rank 1: <text(all[1])>, ...".
template <class Seq, class Text>
inline std::string per_rank(const Seq& all, Text text) {
  std::string m;
  for (std::size_t r = 0; r < all.size(); ++r) m += std::string(r ? ", " : " ") + "rank " + std::to_string(r) + ": " + text(all[r]);
  return m;
}

// Compares every rank's descriptor with rank 0's; returns "" or a message naming the field and
// every rank's value. Every rank computes the same message from the same gathered data.
inline std::string compare_descriptors(const std::vector<call_descriptor>& all) {
  const call_descriptor& a = all[0];
  auto list = [&](const char* field, auto value_of) {
    return std::string(to_string(static_cast<collective_kind>(a.kind))) + " call #" + std::to_string(a.seq) +
           ": ranks disagree on " + field + ":" + per_rank(all, value_of);
  };
  auto num = [](std::uint64_t v) { return std::to_string(v); };
  for (std::size_t r = 1; r < all.size(); ++r) {
    const call_descriptor& b = all[r];
    if (b.seq != a.seq)
      return list("the collective number (a rank skipped or added a call)", [&](const call_descriptor& d) { return num(d.seq); });
    if (b.kind != a.kind)
      return list("the collective", [](const call_descriptor& d) { return std::string(to_string(static_cast<collective_kind>(d.kind))); });
    if (b.type_id != a.type_id)
      return list("the element type", [](const call_descriptor& d) { return std::string(d.type_name); });
    if (b.count != a.count)
      return list("the element count", [&](const call_descriptor& d) { return num(d.count); });
    if (b.op != a.op)
      return list("the reduction op", [](const call_descriptor& d) { return std::string(d.op_name); });
    if (b.shape != a.shape)
      return list("the shape (row length)", [&](const call_descriptor& d) { return num(d.shape); });
    if (b.root != a.root)
      return list("the root", [&](const call_descriptor& d) { return num(d.root); });
    if (b.factor_on_device != a.factor_on_device)
      return list("where the premul_sum factor is", [](const call_descriptor& d) {
        return std::string(d.factor_on_device ? "device memory" : "a host value");
      });
    if (std::memcmp(&b.factor, &a.factor, sizeof(double)) != 0)
      return list("the premul_sum factor", [](const call_descriptor& d) { return std::to_string(d.factor); });
    if (b.algo != a.algo)
      return list("the algorithm", [](const call_descriptor& d) { return std::string(d.algo_name); });
    if (b.path != a.path)
      return list("where the input lives (register the buffer on every rank or on none; zero-copy also needs a "
                  "16-byte aligned input)",
                  [](const call_descriptor& d) { return std::string(to_string(static_cast<buffer_path>(d.path))); });
    if (b.path == static_cast<std::uint32_t>(buffer_path::registered) && (b.reg_id != a.reg_id || b.reg_offset != a.reg_offset))
      return list("the registered buffer (registration number, offset in it)", [&](const call_descriptor& d) {
        return "#" + num(d.reg_id) + " +" + num(d.reg_offset);
      });
  }
  return {};
}

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
