// rcclx/host/detail/collective_runner.hpp: how the communicator runs a collective: check the call
// on every rank, choose where peers read the input (a registration, a captured graph's device
// table, or the workspace), launch (in chunks where the collective allows it, with the
// communicator's launch shape) and check the error record after the launch. The built-in
// collectives are short clients of run(); communicator::launch hands it a user's kernel.
//
//   rcclx::host::detail::collective_runner<8> runner(agree, options, workspace, registry);
//   runner.allreduce(in, out, count, rcclx::reduce_op::sum, rcclx::algorithm::automatic, stream);
//   runner.run(make_descriptor<float>(collective_kind::user, count), in, count, true, stream,
//              [=](const auto& table, bool uses_workspace) { /* launch */ });
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../core/ops.hpp"
#include "../../core/peer_table.hpp"
#include "../../dda/allreduce.hpp"
#include "../../dda/rooted.hpp"
#include "../../gpu/runtime.hpp"
#include "../../lpc/allreduce.hpp"
#include "../options.hpp"
#include "agreement.hpp"
#include "buffer_registry.hpp"
#include "call_check.hpp"
#include "launch_checks.hpp"
#include "one_shot.hpp"
#include "pad_slots.hpp"
#include "workspace.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

template <int MaxRanks>
class collective_runner {
  using registration = typename buffer_registry<MaxRanks>::registration;

 public:
  // Every argument must outlive the runner.
  collective_runner(agreement& agree, const communicator_options& opts, const workspace<MaxRanks>& ws,
                    buffer_registry<MaxRanks>& registry)
      : agree_(agree),
        opts_(opts),
        ws_(ws),
        registry_(registry),
        n_(agree.get_bootstrap().num_ranks()) {}
  collective_runner(const collective_runner&) = delete;
  collective_runner& operator=(const collective_runner&) = delete;

  // ---- the common path -------------------------------------------------------------------------

  // Checks the call, chooses where peers read the input, launches: `kernel(table_or_device_pointer,
  // uses_workspace)` (see communicator::launch). `local_error`: this rank's arguments are invalid;
  // with call checks every rank throws it.
  template <class T, class Kernel>
  void run(call_descriptor d, const T* input, std::size_t count, bool zero_copy, gpu::stream_t stream, Kernel kernel,
           const std::string& local_error = std::string()) {
    ensure_usable();
    const std::size_t bytes = count * sizeof(T);
    const registration* reg = nullptr;
    const buffer_path path = select_path(input, bytes, zero_copy, stream, &reg);
    if (reg) {
      d.reg_id = reg->id;
      d.reg_offset = static_cast<std::uint64_t>(reinterpret_cast<const char*>(input) - reg->ptr);
    }
    d.path = static_cast<std::uint32_t>(path);
    agree_.check_call(d, local_error);
    switch (path) {
      case buffer_path::registered: {
        const core::peer_table<T, MaxRanks> t = registry_.table_of(*reg, input);
        enqueue([kernel, t] { kernel(t, false); });
        break;
      }
      case buffer_path::captured: {
        const auto* t = static_cast<const core::peer_table<T, MaxRanks>*>(registry_.take_capture_slot(input, bytes));
        enqueue([kernel, t] { kernel(t, false); });
        break;
      }
      default: {
        const core::peer_table<T, MaxRanks> t = ws_.table().template as<T>();
        enqueue([kernel, t] { kernel(t, true); });
        break;
      }
    }
  }

  // ---- the collectives (see communicator's methods of the same names) ---------------------------

  template <class T>
  void allreduce(const T* input, T* output, std::size_t count, const reduce_spec& op, algorithm algo,
                 gpu::stream_t stream) {
    if (algo == algorithm::low_precision) return allreduce_low_precision(input, output, count, op.op, stream);
    std::string local_error;
    algorithm a = algo;
    try {
      check_plain_call<collective_kind::allreduce>("allreduce", n_, MaxRanks, input, output, count, op, algo);
      a = dda::resolve_algorithm<T>(algo, count, n_);
    } catch (const std::exception& e) {
      local_error = strip_prefix(e.what());
    }
    const std::size_t bytes = count * sizeof(T);
    const bool disjoint = !overlaps(input, bytes, output, bytes);
    const bool zero_copy = local_error.empty() && (a == algorithm::flat ? disjoint : input == output);
    auto d = make_descriptor<T>(collective_kind::allreduce, count, static_cast<std::uint32_t>(op.op), to_string(op.op),
                                static_cast<std::uint32_t>(a), to_string(a));
    d.factor = factor_word(op);
    d.factor_on_device = op.factor_device ? 1u : 0u;
    const int n = n_;
    // This communicator's launch shape for c elements (a function of c and options that agree on
    // every rank).
    const auto shape = [this, a](std::size_t c) { return shape_of<T>(c, a); };
    run(d, input, count, zero_copy, stream,
        [=](const auto& t, bool uses_workspace) {
          if (!uses_workspace) {
            const auto s = shape(count);
            with_table(t, n, [&](const auto&... table) {
              dda::allreduce(table..., input, output, count, op, a, stream, s.blocks, s.threads);
            });
          } else if constexpr (!std::is_pointer<std::decay_t<decltype(t)>>::value) {  // (device tables: zero-copy)
            // Every chunk with the algorithm chosen for the whole call, so all ranks pair up.
            const std::size_t chunk = t.capacity_bytes / sizeof(T);
            for (std::size_t off = 0; off < count; off += chunk) {
              const std::size_t c = count - off < chunk ? count - off : chunk;
              const auto s = shape(c);
              dda::allreduce(t, input + off, output + off, c, op, a, stream, s.blocks, s.threads);
            }
          }
        },
        local_error);
  }

  // AllGather, ReduceScatter, AlltoAll (detail::one_shot): one launch, plain or low precision.
  template <collective_kind Kind, class T>
  void one_shot_call(const char* name, const T* input, T* output, std::size_t count, const reduce_spec& op,
                     algorithm algo, gpu::stream_t stream) {
    using traits = one_shot<Kind>;
    const std::string who = name;
    const bool low = algo == algorithm::low_precision;
    std::string local_error;
    bool zero_copy = false, sliced = false;
    try {
      if (!is_valid(algo))
        throw error(errc::invalid_argument, who + ": algorithm = " + std::to_string(static_cast<int>(algo)) +
                                                " is not an rcclx::algorithm");
      if (low) {
        if constexpr (!lpc::is_element_v<T>) throw error(errc::unsupported, low_precision_type_error<T>(who));
        else check_low_precision_call(who, traits::lpc_kind, n_, MaxRanks, input, output, count, op.op);
      } else {
        check_plain_call<Kind>(who, n_, MaxRanks, input, output, count, op, algo);
      }
      const std::size_t bytes = count * sizeof(T), out_bytes = traits::output_elems(count, n_) * sizeof(T);
      // Zero-copy (plain only; low precision writes its FP8 form into data[rank]): peers read this
      // rank's registration from the input on (a capture: the input alone), so the output must lie
      // outside that; an in-place AlltoAll therefore goes through the workspace.
      if (!low && count > 0) {
        const registration* reg = registry_.find(input, bytes);
        const std::size_t seen = reg ? static_cast<std::size_t>(reg->ptr + reg->bytes - reinterpret_cast<const char*>(input))
                                     : bytes;
        zero_copy = !overlaps(output, out_bytes, input, seen);
      }
      if (select_path(input, bytes, zero_copy, stream) == buffer_path::workspace) {
        if (low) {
          check_workspace_holds(who, count, lpc::workspace_bytes<>(traits::lpc_kind, count, n_),
                                " (the FP8 form with algorithm::low_precision; one launch: raise buffer_bytes)");
        } else if (bytes > ws_.buffer_bytes()) {
          // Larger than the workspace: in slices of every block (dda/strided.hpp).
          sliced = true;
          if (traits::template slice_elems<T>(ws_.buffer_bytes(), n_) == 0)
            throw error(errc::invalid_argument, who + ": communicator_options::buffer_bytes = " +
                                                    std::to_string(ws_.buffer_bytes()) + " holds less than one " +
                                                    "16-byte vector per rank");
        }
        check_outside_workspace(who, input, bytes, "input", !low);
        check_outside_workspace(who, output, out_bytes, "output", false);
      }
    } catch (const std::exception& e) {
      local_error = strip_prefix(e.what());
    }
    auto d = make_descriptor<T>(Kind, count, traits::reduces ? static_cast<std::uint32_t>(op.op) : 0u,
                                traits::reduces ? to_string(op.op) : "-", static_cast<std::uint32_t>(algo),
                                is_valid(algo) ? to_string(algo) : "invalid");
    if (traits::reduces) d.factor = factor_word(op), d.factor_on_device = op.factor_device ? 1u : 0u;
    const int n = n_;
    run(d, input, count, zero_copy, stream,
        [=](const auto& t, bool uses_workspace) {
          if (!low) {
            if constexpr (!std::is_pointer<std::decay_t<decltype(t)>>::value) {
              if (sliced && uses_workspace) return traits::plain_sliced(t, n, input, output, count, op, stream);
            }
            traits::plain(t, n, input, output, count, op, stream);
          } else if constexpr (lpc::is_element_v<T>) {
            traits::low_precision(t, n, input, output, count, op.op, stream);
          }
        },
        local_error);
  }

  // communicator::broadcast (Reduces false) and communicator::reduce: always through the workspace,
  // in chunks of buffer_bytes, each with the algorithm chosen for the whole call.
  template <bool Reduces, class T>
  void rooted(const T* input, T* output, std::size_t count, int root, const reduce_spec& op, algorithm algo,
              gpu::stream_t stream) {
    const char* who = Reduces ? "reduce" : "broadcast";
    const bool is_root = agree_.get_bootstrap().rank() == root;
    const bool in_needed = Reduces || is_root, out_needed = !Reduces || is_root;
    std::string local_error;
    algorithm a = algo;
    try {
      if constexpr (Reduces) kernel::check_spec<T>(who, op);
      a = dda::check_rooted_call<T>(who, n_, MaxRanks, input, output, count, root, algo, 0, in_needed,
                                            out_needed);
      if (in_needed) check_outside_workspace(who, input, count * sizeof(T), "input", true);
      if (out_needed) check_outside_workspace(who, output, count * sizeof(T), "output", false);
    } catch (const std::exception& e) {
      local_error = strip_prefix(e.what());
    }
    const collective_kind kind = Reduces ? collective_kind::reduce : collective_kind::broadcast;
    auto d = make_descriptor<T>(kind, count, Reduces ? static_cast<std::uint32_t>(op.op) : 0u,
                                Reduces ? to_string(op.op) : "-", static_cast<std::uint32_t>(a),
                                is_valid(a) ? to_string(a) : "invalid");
    d.root = static_cast<std::uint32_t>(root);
    if (Reduces) d.factor = factor_word(op), d.factor_on_device = op.factor_device ? 1u : 0u;
    const auto shape = [this, a](std::size_t c) { return shape_of<T>(c, a); };
    run(d, input, count, false, stream,
        [=](const auto& t, bool) {
          if constexpr (!std::is_pointer<std::decay_t<decltype(t)>>::value) {  // (never zero-copy)
            const std::size_t chunk = t.capacity_bytes / sizeof(T);
            for (std::size_t off = 0; off < count; off += chunk) {
              const std::size_t c = count - off < chunk ? count - off : chunk;
              const auto s = shape(c);
              const T* in = in_needed ? input + off : nullptr;
              T* out = out_needed ? output + off : nullptr;
              if constexpr (Reduces) dda::reduce(t, in, out, c, root, op, a, stream, s.blocks, s.threads);
              else dda::broadcast(t, in, out, c, root, a, stream, s.blocks, s.threads);
            }
          }
        },
        local_error);
  }

  // communicator::alltoallv: every rank's splits are exchanged first (one bootstrap allgather), so
  // every rank checks the same matrix (rank r's output split p equals rank p's input split r) and
  // runs the same number of slices (up to the largest split of any rank) through the workspace.
  template <class T>
  void alltoallv(const T* input, const std::size_t* input_splits, T* output, const std::size_t* output_splits,
                 gpu::stream_t stream) {
    ensure_usable();
    const std::string who = "alltoallv";
    const int n = n_;
    std::string local_error;
    std::array<std::uint64_t, 2 * MaxRanks> mine{};
    std::size_t in_total = 0, out_total = 0;
    try {
      if (!input_splits || !output_splits)
        throw error(errc::invalid_argument, who + ": input_splits and output_splits must not be null");
      for (int p = 0; p < n; ++p) {
        mine[static_cast<std::size_t>(p)] = input_splits[p];
        mine[static_cast<std::size_t>(MaxRanks + p)] = output_splits[p];
        in_total += input_splits[p];
        out_total += output_splits[p];
      }
      kernel::check_count<T>(who, in_total);
      kernel::check_count<T>(who, out_total);
      if (in_total) kernel::check_user_pointer<T>(who, "input", input);
      if (out_total) kernel::check_user_pointer<T>(who, "output", output);
      if (kernel::overlaps(input, in_total * sizeof(T), output, out_total * sizeof(T)))
        throw error(errc::invalid_argument, who + ": input and output overlap (they must be disjoint)");
      if (one_shot<collective_kind::alltoall>::template slice_elems<T>(ws_.buffer_bytes(), n) == 0)
        throw error(errc::invalid_argument, who + ": communicator_options::buffer_bytes = " +
                                                std::to_string(ws_.buffer_bytes()) + " holds less than one 16-byte "
                                                "vector per rank");
      check_outside_workspace(who, input, in_total * sizeof(T), "input", false);
      check_outside_workspace(who, output, out_total * sizeof(T), "output", false);
    } catch (const std::exception& e) {
      local_error = strip_prefix(e.what());
    }
    const auto all = agree_.exchange(mine, local_error, errc::invalid_argument);
    std::uint64_t max_len = 0, total = 0;
    for (int r = 0; r < n; ++r) {
      for (int p = 0; p < n; ++p) {
        const std::uint64_t sends = all[static_cast<std::size_t>(p)][static_cast<std::size_t>(r)];
        const std::uint64_t expects = all[static_cast<std::size_t>(r)][static_cast<std::size_t>(MaxRanks + p)];
        if (sends != expects)
          throw error(errc::mismatch, who + ": rank " + std::to_string(r) + " expects " + std::to_string(expects) +
                                          " elements from rank " + std::to_string(p) + ", which sends " +
                                          std::to_string(sends) + " (output_splits[" + std::to_string(p) +
                                          "] of rank " + std::to_string(r) + " must equal input_splits[" +
                                          std::to_string(r) + "] of rank " + std::to_string(p) + ")");
        max_len = std::max(max_len, sends);
        total += sends;
      }
    }
    dda::uneven_splits<MaxRanks> sp{};
    std::size_t in_off = 0, out_off = 0;
    for (int p = 0; p < n; ++p) {
      sp.in_off[p] = in_off;
      sp.in_len[p] = input_splits[p];
      sp.out_off[p] = out_off;
      sp.out_len[p] = output_splits[p];
      in_off += input_splits[p];
      out_off += output_splits[p];
    }
    const auto d = make_descriptor<T>(collective_kind::alltoallv, static_cast<std::size_t>(total));
    const std::size_t longest = static_cast<std::size_t>(max_len);
    run(d, input, in_total, false, stream, [=](const auto& t, bool) {
      if constexpr (!std::is_pointer<std::decay_t<decltype(t)>>::value) {  // (never zero-copy)
        const std::size_t k = one_shot<collective_kind::alltoall>::template slice_elems<T>(t.capacity_bytes, n);
        dda::alltoallv(t, input, output, sp, longest, k, stream);
      }
    });
  }

  // communicator::barrier.
  void barrier(gpu::stream_t stream) {
    ensure_usable();
    agree_.check_call(make_descriptor<unsigned char>(collective_kind::barrier, 0));
    const core::signal_pads<MaxRanks> s = ws_.table().signals;
    enqueue([s, stream] { pad_slots<MaxRanks>::barrier(s, stream); });
  }

  // communicator::check_user_call.
  template <class T>
  void check_user_call(const char* name, std::size_t count, std::uint32_t shape, const std::string& local_error) {
    ensure_usable();
    std::uint32_t h = 2166136261u;  // the name's FNV-1a hash: compared as the "algorithm"
    for (const char* c = name; *c; ++c) h = (h ^ static_cast<unsigned char>(*c)) * 16777619u;
    auto d = make_descriptor<T>(collective_kind::user, count, 0, "-", h, name);
    d.shape = shape;
    agree_.check_call(d, local_error);
  }

  // The launch shape of an AllReduce of `count` elements (communicator::launch_shape).
  template <class T>
  launch_shape shape_of(std::size_t count, algorithm a) const {
    return allreduce_shape<T>(count, a, n_, opts_.collective_blocks, opts_.flat_threads, opts_.max_blocks);
  }

  // ---- errors and host-backend capture ---------------------------------------------------------

  // Throws if a kernel of this rank recorded an error; the communicator is unusable from then on.
  void check_errors() {
    const core::error_record rec = ws_.recorded_error();
    if (rec.code != 0) {
      failed_ = true;
      failed_message_ = ws_.describe(rec);
      throw error(static_cast<errc>(rec.code), failed_message_);
    }
  }

  void ensure_usable() const {
    if (failed_) throw error(errc::peer_failure, "communicator unusable after an earlier error: " + failed_message_);
    // Host backend: a kernel of the user's own (launch()) may have left a record no call has read;
    // a launch on such pads would fail on that state, not on its own.
    if (ws_.error_recorded())
      throw error(errc::invalid_argument, "communicator: the pads still hold an earlier error (" +
                                              ws_.describe(ws_.recorded_error()) +
                                              "): reset: re-create the communicator");
  }

  // Host backend: from begin_host_capture to end_host_capture, launches are recorded, not run.
  bool host_capturing() const { return host_capturing_; }
  void begin_host_capture() {
    host_capturing_ = true;
    host_ops_.clear();
  }
  std::vector<std::function<void()>> end_host_capture() {
    host_capturing_ = false;
    std::vector<std::function<void()>> ops = std::move(host_ops_);
    host_ops_.clear();
    return ops;
  }

 private:
  // The call check's factor of a reduction: premul_sum's factor (ranks with different
  // factors would not produce the same bits), 0 for the other ops.
  static double factor_word(const reduce_spec& op) {
    return op.op == reduce_op::premul_sum && !op.factor_device ? op.factor : 0.0;
  }

  // Where run() lets peers read `bytes` of input at `input` (zero_copy: the caller allows it).
  // Peers read zero-copy inputs with 16-byte vectors: only 16-byte aligned inputs qualify (the
  // same offset into buffers registered 16-byte aligned is aligned on every rank).
  buffer_path select_path(const void* input, std::size_t bytes, bool zero_copy, gpu::stream_t stream,
                          const registration** reg_out = nullptr) const {
    zero_copy = zero_copy && bytes > 0 && reinterpret_cast<std::uintptr_t>(input) % 16 == 0;
    const registration* reg = zero_copy ? registry_.find(input, bytes) : nullptr;
    if (reg_out) *reg_out = reg;
    if (reg) return buffer_path::registered;
    if (zero_copy && opts_.zero_copy_capture && (host_capturing_ || gpu::stream_is_capturing(stream)))
      return buffer_path::captured;
    return buffer_path::workspace;
  }

  template <class T>
  static std::string low_precision_type_error(const std::string& who) {
    return who + ": algorithm::low_precision takes float or bf16 elements, not " + type_tag<T>::name() +
           " (use flat, tree or automatic)";
  }

  // The workspace path writes this rank's symmetric buffer while peers read it: user buffers must lie
  // outside it (a plain collective's input may be the buffer itself: its copy is then skipped).
  void check_outside_workspace(const std::string& who, const void* p, std::size_t bytes, const char* name,
                               bool may_be_it) const {
    if (may_be_it && p == ws_.data()) return;
    if (overlaps(p, bytes, ws_.data(), ws_.buffer_bytes()))
      throw error(errc::invalid_argument, who + ": " + name + " lies in the communicator's workspace, which peers read");
  }

  void check_workspace_holds(const std::string& who, std::size_t count, std::size_t need, const char* remedy) const {
    if (need > ws_.buffer_bytes())
      throw error(errc::invalid_argument, who + ": count = " + std::to_string(count) + " needs " + std::to_string(need) +
                                              " bytes of workspace per rank, more than communicator_options::"
                                              "buffer_bytes = " + std::to_string(ws_.buffer_bytes()) + remedy);
  }

  // Elements of one low-precision AllReduce launch: the whole call when its FP8 workspace fits, else
  // the largest multiple of the quantization block that fits. A function of count, N and
  // buffer_bytes only, so every rank cuts the same chunks; whole blocks, so the chunks quantize
  // exactly the blocks one call would (each block's result depends on that block alone): the same bits.
  std::size_t low_precision_allreduce_chunk(const std::string& who, std::size_t count) const {
    using config = lpc::default_config;
    const std::size_t budget = ws_.buffer_bytes();
    const auto fits = [&](std::size_t c) { return lpc::workspace_bytes<config>(lpc::collective::allreduce, c, n_) <= budget; };
    if (fits(count)) return count;
    const std::size_t b = static_cast<std::size_t>(config::block_size);
    // In blocks; an element takes at least one byte of workspace, so a chunk is below buffer_bytes.
    std::size_t lo = 0, hi = std::min(count, budget) / b;
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo + 1) / 2;
      if (fits(mid * b)) lo = mid;
      else hi = mid - 1;
    }
    if (lo == 0)
      check_workspace_holds(who, b, lpc::workspace_bytes<config>(lpc::collective::allreduce, b, n_),
                            " (one quantization block with algorithm::low_precision)");
    return lo * b;
  }

  template <class T>
  void allreduce_low_precision(const T* input, T* output, std::size_t count, reduce_op op, gpu::stream_t stream) {
    const std::string who = "allreduce";
    std::string local_error;
    std::size_t chunk = count;
    try {
      if constexpr (!lpc::is_element_v<T>) {
        throw error(errc::unsupported, low_precision_type_error<T>(who));
      } else {
        check_low_precision_call(who, lpc::collective::allreduce, n_, MaxRanks, input, output, count, op);
        chunk = low_precision_allreduce_chunk(who, count);
        check_outside_workspace(who, input, count * sizeof(T), "input", false);
        check_outside_workspace(who, output, count * sizeof(T), "output", false);
      }
    } catch (const std::exception& e) {
      local_error = strip_prefix(e.what());
    }
    auto d = make_descriptor<T>(collective_kind::allreduce, count, static_cast<std::uint32_t>(op), to_string(op),
                                static_cast<std::uint32_t>(algorithm::low_precision), to_string(algorithm::low_precision));
    const int n = n_;
    const auto blocks = [this](std::size_t c) { return shape_of<T>(c, algorithm::low_precision).blocks; };
    // Never zero-copy: the kernel writes the input's FP8 form into data[rank].
    run(d, input, count, false, stream,
        [=](const auto& t, bool) {
          if constexpr (!lpc::is_element_v<T>) {
            (void)t;  // rejected above, on every rank
          } else if constexpr (std::is_pointer<std::decay_t<decltype(t)>>::value) {
            lpc::allreduce(t, n, input, output, count, op, stream, blocks(count));
          } else {
            for (std::size_t off = 0; off < count; off += chunk) {
              const std::size_t c = count - off < chunk ? count - off : chunk;
              lpc::allreduce(t, input + off, output + off, c, op, stream, blocks(c));
            }
          }
        },
        local_error);
  }

  // Runs (or, while the host backend captures, records) one launch; on the host backend the
  // launch has finished on return, so its error record is checked at once.
  template <class F>
  void enqueue(F f) {
#if RCCLX_BACKEND_HOST
    if (host_capturing_) {
      host_ops_.emplace_back([this, f] { run_checked(f); });
      return;
    }
    run_checked(f);
#else
    f();
#endif
  }

  // Host backend: a launcher that found its barrier timed out may throw by itself; either way the
  // error record is turned into the communicator's error (which names the missing process's state).
  template <class F>
  void run_checked(const F& f) {
    try {
      f();
    } catch (const error&) {
      check_host_errors();
      throw;
    }
    check_host_errors();
  }

  void check_host_errors() {
    if (ws_.error_recorded()) check_errors();
  }

  agreement& agree_;
  const communicator_options& opts_;
  const workspace<MaxRanks>& ws_;
  buffer_registry<MaxRanks>& registry_;
  int n_;
  bool host_capturing_ = false;
  std::vector<std::function<void()>> host_ops_;
  bool failed_ = false;
  std::string failed_message_;
};

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
