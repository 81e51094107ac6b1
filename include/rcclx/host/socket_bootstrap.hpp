// rcclx/host/socket_bootstrap.hpp: the built-in bootstrap: a Unix-domain-socket rendezvous among
// the processes of one node, configured from torchrun's variables or from explicit arguments.
//
//   // torchrun --nproc-per-node 8 app.py   (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)
//   rcclx::host::socket_bootstrap bs(rcclx::host::launch_config::from_env());
//   // or explicitly: every process passes the same id, its rank and the rank count
//   rcclx::host::socket_bootstrap bs2(rank, 8, "my-job-42");
//
// Rank 0 listens on a socket named after the id (Linux abstract namespace by default, so a crashed
// job leaves no file behind; a filesystem path if socket_options::path or RCCLX_BOOTSTRAP_SOCKET is
// set); the others connect with bounded retries and say who they are (rank, rank count, pid).
// Rank 0 checks the claims (a rank outside [0, N), a rank claimed twice, a different rank count) and
// either welcomes everyone (with every rank's pid) or sends every connected rank the same error.
// allgather goes through rank 0 (a star: 2 messages per rank; node-local and tiny, so the
// simplest topology wins). Every step has a deadline; a peer whose socket closes (the process
// exited) is reported to every rank as errc::peer_failure naming it, at once, not after a timeout.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap.hpp"
#include "detail/env.hpp"
#include "detail/socket.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {

struct socket_options {
  // Filesystem path of rank 0's socket. Empty: the abstract name "rcclx-bootstrap/<id>" (Linux).
  std::string path;
  // How long ranks wait for each other at start-up (connect retries, rank 0's accepts).
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(120)};
  // How long an allgather waits for the slowest rank (a hung process; a dead one is seen at once).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

// Who this process is, as a launcher describes it.
struct launch_config {
  int rank = 0;
  int num_ranks = 0;
  int local_rank = 0;
  int device = 0;             // the GPU to use: RCCLX_DEVICE if set (scripts/launch), else local_rank
  std::string unique_id;      // the same on every process of the job; names the socket
  std::string socket_path;    // RCCLX_BOOTSTRAP_SOCKET, if set

  // torchrun's variables: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (and
  // LOCAL_WORLD_SIZE: with several nodes, the communicator covers this node's processes and
  // LOCAL_RANK / LOCAL_WORLD_SIZE are used). RCCLX_BOOTSTRAP_ID replaces MASTER_ADDR:MASTER_PORT.
  static launch_config from_env() {
    launch_config c;
    const int world = env_int("WORLD_SIZE", -1);
    const int rank = env_int("RANK", -1);
    const int local_rank = env_int("LOCAL_RANK", -1);
    const int local_world = env_int("LOCAL_WORLD_SIZE", -1);
    if (world < 0) throw error(errc::invalid_argument, "WORLD_SIZE is not set (launch with torchrun, or pass rank, size and id explicitly)");
    if (rank < 0 && local_rank < 0) throw error(errc::invalid_argument, "neither RANK nor LOCAL_RANK is set");
    if (local_world > 0 && local_world != world) {
      if (local_rank < 0) throw error(errc::invalid_argument, "LOCAL_WORLD_SIZE != WORLD_SIZE (several nodes) but LOCAL_RANK is not set");
      c.rank = local_rank;
      c.num_ranks = local_world;
    } else {
      c.rank = rank >= 0 ? rank : local_rank;
      c.num_ranks = world;
    }
    c.local_rank = local_rank >= 0 ? local_rank : c.rank;
    c.device = env_int("RCCLX_DEVICE", c.local_rank);
    if (const char* id = std::getenv("RCCLX_BOOTSTRAP_ID"); id && *id) {
      c.unique_id = id;
    } else {
      const char* port = std::getenv("MASTER_PORT");
      if (!port || !*port) throw error(errc::invalid_argument, "MASTER_PORT is not set (nor RCCLX_BOOTSTRAP_ID)");
      const char* addr = std::getenv("MASTER_ADDR");
      c.unique_id = std::string(addr && *addr ? addr : "localhost") + ":" + port;
    }
    if (const char* p = std::getenv("RCCLX_BOOTSTRAP_SOCKET"); p && *p) c.socket_path = p;
    return c;
  }

  static int env_int(const char* name, int fallback) {
    const char* v = detail::env_text(name);
    if (!v) return fallback;
    long long x = 0;
    if (!detail::parse_int(v, 0, 1000000, x))
      throw error(errc::invalid_argument, std::string(name) + " = '" + v + "' is not a rank number (an integer in [0, 1000000])");
    return static_cast<int>(x);
  }
};

class socket_bootstrap final : public bootstrap {
 public:
  socket_bootstrap(int rank, int num_ranks, const std::string& unique_id, socket_options opts = {})
      : rank_(rank), num_ranks_(num_ranks), opts_(std::move(opts)) {
    if (num_ranks < 1 || num_ranks > 4096)
      throw error(errc::invalid_argument, "socket_bootstrap: num_ranks = " + std::to_string(num_ranks) +
                                              " is outside [1, 4096]");
    if (unique_id.empty()) throw error(errc::invalid_argument, "socket_bootstrap: the unique id is empty");
    id_hash_ = fnv1a(unique_id);
    addr_ = detail::socket_address::make(opts_.path, "rcclx-bootstrap/" + unique_id);
    pids_.assign(static_cast<std::size_t>(num_ranks), 0);
    if (rank < 0 || rank >= num_ranks) {
      // Tell rank 0 (for a few seconds at most), so every rank fails now instead of waiting for
      // a rank that will never come; then fail here with the local reason.
      if (num_ranks > 1) {
        try {
          rendezvous_client(std::min(opts_.connect_timeout, std::chrono::milliseconds(5000)));
        } catch (const error&) {
        }
      }
      throw error(errc::invalid_argument, "socket_bootstrap: bad rank number: rank = " + std::to_string(rank) +
                                              " is outside [0, " + std::to_string(num_ranks) + ")");
    }
    pids_[static_cast<std::size_t>(rank)] = static_cast<int>(::getpid());
    if (num_ranks == 1) return;
    if (rank == 0 && listen_root())
      rendezvous_root();
    else
      rendezvous_client(opts_.connect_timeout);  // a second rank 0 joins as a client: rank 0 reports the duplicate
  }

  explicit socket_bootstrap(const launch_config& c, socket_options opts = {})
      : socket_bootstrap(c.rank, c.num_ranks, c.unique_id, with_path(std::move(opts), c.socket_path)) {}

  socket_bootstrap(const socket_bootstrap&) = delete;
  socket_bootstrap& operator=(const socket_bootstrap&) = delete;
  ~socket_bootstrap() override = default;

  int rank() const override { return rank_; }
  int num_ranks() const override { return num_ranks_; }
  // Every rank's process id (from the rendezvous): lets callers tell a dead peer from a slow one.
  const std::vector<int>& pids() const { return pids_; }
  const std::string& address() const { return addr_.printable; }

  void allgather(const void* in, void* out, std::size_t bytes) override {
    if (failed_) throw error(fail_code_, "bootstrap unusable after an earlier error: " + fail_msg_);
    ++seq_;
    if (num_ranks_ == 1) {
      std::memcpy(out, in, bytes);
      return;
    }
    if (rank_ == 0)
      allgather_root(in, out, bytes);
    else
      allgather_client(in, out, bytes);
  }

 private:
  // ---- wire format ----------------------------------------------------------------------------
  static constexpr std::uint32_t magic = 0x72636278u;  // "rcbx"
  static constexpr std::uint32_t version = 1;
  enum frame_type : std::uint32_t { f_hello = 1, f_welcome = 2, f_data = 3, f_result = 4, f_abort = 5 };
  struct frame_header {
    std::uint32_t magic;
    std::uint32_t type;
    std::uint64_t size;  // payload bytes
    std::uint64_t seq;   // allgather number (0 during the rendezvous)
  };
  struct hello_payload {
    std::uint32_t version;
    std::int32_t rank;
    std::int32_t num_ranks;
    std::int32_t pid;
    std::uint64_t id_hash;
  };

  static socket_options with_path(socket_options o, const std::string& p) {
    if (o.path.empty()) o.path = p;
    return o;
  }

  static std::uint64_t fnv1a(const std::string& s) {
    std::uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
  }

  static std::string seconds(std::chrono::milliseconds ms) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(ms.count()) / 1000.0);
    return buf;
  }

  std::string who(int r) const {
    std::string s = "rank " + std::to_string(r);
    if (r >= 0 && r < num_ranks_ && pids_[static_cast<std::size_t>(r)] > 0)
      s += " (pid " + std::to_string(pids_[static_cast<std::size_t>(r)]) + ")";
    return s;
  }

  [[noreturn]] void fail(errc code, const std::string& msg) {
    failed_ = true;
    fail_code_ = code;
    fail_msg_ = msg;
    throw error(code, msg);
  }

  static bool send_frame(int fd, std::uint32_t type, std::uint64_t seq, const void* payload, std::size_t bytes,
                         detail::deadline_type deadline) {
    frame_header h{magic, type, bytes, seq};
    if (detail::send_all(fd, &h, sizeof(h), deadline) != detail::io_status::ok) return false;
    return bytes == 0 || detail::send_all(fd, payload, bytes, deadline) == detail::io_status::ok;
  }

  static void send_abort(int fd, errc code, const std::string& msg, detail::deadline_type deadline) {
    std::string payload(sizeof(std::uint32_t), '\0');
    const auto c = static_cast<std::uint32_t>(code);
    std::memcpy(&payload[0], &c, sizeof(c));
    payload += msg;
    (void)send_frame(fd, f_abort, 0, payload.data(), payload.size(), deadline);  // best effort
  }

  // Reads an abort frame's payload into an error.
  static error abort_error(int fd, const frame_header& h, detail::deadline_type deadline) {
    std::string payload(static_cast<std::size_t>(std::min<std::uint64_t>(h.size, 1 << 20)), '\0');
    if (payload.size() < sizeof(std::uint32_t) ||
        detail::recv_all(fd, &payload[0], payload.size(), deadline) != detail::io_status::ok)
      return error(errc::peer_failure, "rank 0 aborted the job (message lost)");
    std::uint32_t c = 0;
    std::memcpy(&c, payload.data(), sizeof(c));
    return error(static_cast<errc>(c), payload.substr(sizeof(c)));
  }

  // ---- rendezvous -----------------------------------------------------------------------------
  // Binds rank 0's socket. False if a live process already listens on an abstract name (then this
  // process is a second rank 0, or another job uses the same id: joining as a client tells which).
  bool listen_root() {
    listener_ = detail::make_socket();
    if (::bind(listener_.get(), reinterpret_cast<const sockaddr*>(&addr_.addr), addr_.len) != 0) {
      const int e = errno;
      if (e != EADDRINUSE)
        throw error(errc::runtime, "rank 0 cannot bind the bootstrap socket " + addr_.printable + ": " + detail::errno_text(e));
      // Someone holds the address. Is it alive (another job) or a leftover file (a crashed job)?
      detail::fd_handle probe = detail::make_socket();
      const bool alive = ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&addr_.addr), addr_.len) == 0;
      if (alive && addr_.path.empty()) {
        listener_.reset();
        return false;
      }
      if (alive || addr_.path.empty())
        throw error(errc::runtime, "bootstrap socket " + addr_.printable +
                                       " is in use by another live process (another job with the same "
                                       "MASTER_ADDR:MASTER_PORT / unique id?)");
      throw error(errc::runtime, "stale bootstrap socket " + addr_.printable +
                                     ": the file exists but no process listens on it (left by an earlier job "
                                     "that crashed?); delete it or choose another MASTER_PORT / socket path");
    }
    bound_path_ = !addr_.path.empty();
    if (::listen(listener_.get(), 4096) != 0)
      throw error(errc::runtime, "listen on " + addr_.printable + " failed: " + detail::errno_text(errno));
    return true;
  }

  void stop_listening() {
    listener_.reset();
    if (bound_path_) {
      ::unlink(addr_.path.c_str());
      bound_path_ = false;
    }
  }

  // Rank 0, its socket bound (listen_root): accepts until every rank has said who it is.
  void rendezvous_root() {
    auto deadline = detail::clock_type::now() + opts_.connect_timeout;
    struct pending {
      detail::fd_handle fd;
    };
    std::vector<pending> unidentified;
    clients_.resize(static_cast<std::size_t>(num_ranks_));
    std::vector<detail::fd_handle> rejected;  // connections that get the error too
    std::string err;
    errc err_code = errc::ok;
    auto set_err = [&](errc c, const std::string& m) {
      if (err.empty()) {
        err = m;
        err_code = c;
        // Give the ranks still on their way a moment to connect and hear about it, then stop.
        deadline = std::min(deadline, detail::clock_type::now() + std::chrono::seconds(2));
      }
    };
    int heard = 0;  // hellos received (valid or not)
    while (heard < num_ranks_ - 1) {
      std::vector<pollfd> fds;
      fds.push_back(pollfd{listener_.get(), POLLIN, 0});
      for (auto& p : unidentified) fds.push_back(pollfd{p.fd.get(), POLLIN, 0});
      const int left = detail::ms_left(deadline);
      if (left == 0) break;
      const int r = ::poll(fds.data(), fds.size(), left);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        stop_listening();
        throw error(errc::runtime, "poll during the rendezvous failed: " + detail::errno_text(errno));
      }
      if (fds[0].revents & POLLIN) {
        const int c = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) unidentified.push_back(pending{detail::fd_handle(c)});
      }
      for (std::size_t i = fds.size() - 1; i >= 1; --i) {
        if (!fds[i].revents) continue;
        detail::fd_handle fd = std::move(unidentified[i - 1].fd);
        unidentified.erase(unidentified.begin() + static_cast<std::ptrdiff_t>(i - 1));
        frame_header h{};
        hello_payload hp{};
        const auto short_deadline = std::min(deadline, detail::clock_type::now() + std::chrono::seconds(10));
        if (detail::recv_all(fd.get(), &h, sizeof(h), short_deadline) != detail::io_status::ok ||
            h.magic != magic || h.type != f_hello || h.size != sizeof(hp) ||
            detail::recv_all(fd.get(), &hp, sizeof(hp), short_deadline) != detail::io_status::ok) {
          continue;  // not one of ours (or it went away before saying who it is): drop it
        }
        ++heard;
        if (hp.version != version) {
          set_err(errc::mismatch, "rank " + std::to_string(hp.rank) + " (pid " + std::to_string(hp.pid) +
                                      ") speaks bootstrap protocol version " + std::to_string(hp.version) +
                                      ", rank 0 version " + std::to_string(version) + " (mixed rcclx versions)");
        } else if (hp.id_hash != id_hash_) {
          set_err(errc::mismatch, "a process (pid " + std::to_string(hp.pid) + ") with another job id connected to " +
                                      addr_.printable);
        } else if (hp.num_ranks != num_ranks_) {
          set_err(errc::mismatch, "world size mismatch: rank " + std::to_string(hp.rank) + " (pid " +
                                      std::to_string(hp.pid) + ") was started with WORLD_SIZE = " +
                                      std::to_string(hp.num_ranks) + ", rank 0 (pid " + std::to_string(::getpid()) +
                                      ") with " + std::to_string(num_ranks_));
        } else if (hp.rank < 0 || hp.rank >= num_ranks_) {
          set_err(errc::invalid_argument, "bad rank number: a process (pid " + std::to_string(hp.pid) +
                                              ") claims rank " + std::to_string(hp.rank) + ", outside [0, " +
                                              std::to_string(num_ranks_) + ")");
        } else if (hp.rank == 0 || clients_[static_cast<std::size_t>(hp.rank)].valid()) {
          const int first = hp.rank == 0 ? static_cast<int>(::getpid()) : pids_[static_cast<std::size_t>(hp.rank)];
          set_err(errc::invalid_argument, "duplicate rank: rank " + std::to_string(hp.rank) + " is claimed by pid " +
                                              std::to_string(first) + " and by pid " + std::to_string(hp.pid));
        } else {
          pids_[static_cast<std::size_t>(hp.rank)] = hp.pid;
          clients_[static_cast<std::size_t>(hp.rank)] = std::move(fd);
          continue;
        }
        rejected.push_back(std::move(fd));
      }
    }
    stop_listening();  // frees the name for the next job at once
    if (err.empty() && heard < num_ranks_ - 1) {
      std::string missing;
      for (int r = 1; r < num_ranks_; ++r)
        if (!clients_[static_cast<std::size_t>(r)].valid()) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      set_err(errc::timeout, "rendezvous at " + addr_.printable + " timed out after " + seconds(opts_.connect_timeout) +
                                 ": rank(s) " + missing + " never connected");
    }
    const auto send_deadline = detail::clock_type::now() + std::chrono::seconds(5);
    if (!err.empty()) {
      for (auto& c : clients_)
        if (c.valid()) send_abort(c.get(), err_code, err, send_deadline);
      for (auto& c : rejected) send_abort(c.get(), err_code, err, send_deadline);
      clients_.clear();
      fail(err_code, err);
    }
    for (int r = 1; r < num_ranks_; ++r) {
      if (!send_frame(clients_[static_cast<std::size_t>(r)].get(), f_welcome, 0, pids_.data(),
                      pids_.size() * sizeof(int), send_deadline))
        fail(errc::peer_failure, who(r) + " closed its bootstrap connection during the rendezvous (the process exited?)");
    }
  }

  void rendezvous_client(std::chrono::milliseconds connect_timeout) {
    const auto deadline = detail::clock_type::now() + connect_timeout;
    int last_errno = 0;
    auto backoff = std::chrono::milliseconds(5);
    for (;;) {
      detail::fd_handle fd = detail::make_socket();
      if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr_.addr), addr_.len) == 0) {
        root_ = std::move(fd);
        break;
      }
      last_errno = errno;
      if (last_errno != ECONNREFUSED && last_errno != ENOENT && last_errno != EAGAIN && last_errno != EINTR)
        throw error(errc::runtime, "rank " + std::to_string(rank_) + " cannot connect to " + addr_.printable + ": " +
                                       detail::errno_text(last_errno));
      if (detail::clock_type::now() + backoff >= deadline) {
        std::string hint = " (is rank 0 running with the same MASTER_ADDR:MASTER_PORT / unique id?)";
        if (!addr_.path.empty() && last_errno == ECONNREFUSED)
          hint = " (connection refused: the socket file exists but nobody listens; a stale file from an earlier "
                 "job, or rank 0 has not started)";
        throw error(errc::timeout, "rank " + std::to_string(rank_) + " could not reach rank 0 at " + addr_.printable +
                                       " within " + seconds(connect_timeout) + hint);
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
    }
    // Rank 0 answers once everyone has connected; it gives up at its own deadline, which is no
    // later than ours plus the time we spent before it started listening.
    const auto answer_deadline = detail::clock_type::now() + opts_.connect_timeout + std::chrono::seconds(5);
    frame_header h{magic, f_hello, sizeof(hello_payload), 0};
    hello_payload hp{version, rank_, num_ranks_, static_cast<std::int32_t>(::getpid()), id_hash_};
    if (detail::send_all(root_.get(), &h, sizeof(h), answer_deadline) != detail::io_status::ok ||
        detail::send_all(root_.get(), &hp, sizeof(hp), answer_deadline) != detail::io_status::ok)
      fail_after_root_closed("rank 0 closed the bootstrap connection during the rendezvous");
    const auto st = detail::recv_all(root_.get(), &h, sizeof(h), answer_deadline);
    if (st == detail::io_status::timeout)
      fail(errc::timeout, "rank " + std::to_string(rank_) + ": rank 0 did not complete the rendezvous within " +
                              seconds(opts_.connect_timeout));
    if (st == detail::io_status::closed || h.magic != magic)
      fail(errc::peer_failure, "rank 0 closed the bootstrap connection during the rendezvous (it exited or failed)");
    if (h.type == f_abort) {
      const error e = abort_error(root_.get(), h, answer_deadline);
      fail(e.code(), message_of(e));
    }
    if (h.type != f_welcome || h.size != pids_.size() * sizeof(int) ||
        detail::recv_all(root_.get(), pids_.data(), pids_.size() * sizeof(int), answer_deadline) != detail::io_status::ok)
      fail(errc::peer_failure, "rank 0 sent a malformed rendezvous answer");
  }

  // Rank 0 may have sent the reason (an abort) and exited before our message went out: report
  // the reason if it is waiting in our receive buffer, else `fallback`.
  [[noreturn]] void fail_after_root_closed(const std::string& fallback) {
    const auto d = detail::clock_type::now() + std::chrono::milliseconds(200);
    frame_header h{};
    if (detail::recv_all(root_.get(), &h, sizeof(h), d) == detail::io_status::ok && h.magic == magic &&
        h.type == f_abort) {
      const error e = abort_error(root_.get(), h, d);
      fail(e.code(), message_of(e));
    }
    fail(errc::peer_failure, fallback);
  }

  // what() without the "rcclx: <code>: " prefix, to rethrow with the same code.
  static std::string message_of(const error& e) {
    std::string w = e.what();
    const std::string prefix = std::string("rcclx: ") + to_string(e.code()) + ": ";
    return w.compare(0, prefix.size(), prefix) == 0 ? w.substr(prefix.size()) : w;
  }

  // ---- allgather ------------------------------------------------------------------------------
  void allgather_root(const void* in, void* out, std::size_t bytes) {
    char* result = static_cast<char*>(out);
    std::memcpy(result, in, bytes);
    const auto deadline = detail::clock_type::now() + opts_.timeout;
    std::vector<char> got(static_cast<std::size_t>(num_ranks_), 0);
    got[0] = 1;
    int remaining = num_ranks_ - 1;
    std::string err;
    errc err_code = errc::ok;
    int failed_rank = -1;
    std::vector<pollfd> fds;
    std::vector<int> fd_rank;
    while (remaining > 0 && err.empty()) {
      fds.clear();
      fd_rank.clear();
      for (int r = 1; r < num_ranks_; ++r) {
        if (got[static_cast<std::size_t>(r)]) continue;
        fds.push_back(pollfd{clients_[static_cast<std::size_t>(r)].get(), POLLIN, 0});
        fd_rank.push_back(r);
      }
      const int left = detail::ms_left(deadline);
      const int pr = left == 0 ? 0 : ::poll(fds.data(), fds.size(), left);
      if (pr < 0 && errno == EINTR) continue;
      if (pr <= 0) {
        std::string missing;
        for (int r = 1; r < num_ranks_; ++r)
          if (!got[static_cast<std::size_t>(r)]) missing += (missing.empty() ? "" : ", ") + who(r);
        err_code = errc::timeout;
        err = "bootstrap allgather #" + std::to_string(seq_) + " timed out after " + seconds(opts_.timeout) + ": " +
              missing + " did not arrive";
        break;
      }
      for (std::size_t i = 0; i < fds.size() && err.empty(); ++i) {
        if (!fds[i].revents) continue;
        const int r = fd_rank[i];
        const int fd = fds[i].fd;
        frame_header h{};
        auto st = detail::recv_all(fd, &h, sizeof(h), deadline);
        if (st == detail::io_status::ok && h.magic == magic && h.type == f_data && h.seq == seq_ && h.size == bytes)
          st = detail::recv_all(fd, result + static_cast<std::size_t>(r) * bytes, bytes, deadline);
        else if (st == detail::io_status::ok) {
          failed_rank = r;
          err_code = errc::mismatch;
          if (h.magic != magic || h.type != f_data)
            err = who(r) + " sent a malformed bootstrap message";
          else if (h.seq != seq_)
            err = "ranks are out of step: " + who(r) + " is at bootstrap call #" + std::to_string(h.seq) +
                  ", rank 0 at #" + std::to_string(seq_) + " (they called collectives in a different order or number)";
          else
            err = "bootstrap allgather #" + std::to_string(seq_) + ": " + who(r) + " contributed " +
                  std::to_string(h.size) + " bytes, rank 0 " + std::to_string(bytes) +
                  " (the ranks are in different calls)";
          break;
        }
        if (st == detail::io_status::closed) {
          failed_rank = r;
          err_code = errc::peer_failure;
          err = who(r) + " closed its bootstrap connection (the process exited or failed) during bootstrap call #" +
                std::to_string(seq_);
        } else if (st == detail::io_status::timeout) {
          failed_rank = r;
          err_code = errc::timeout;
          err = who(r) + " stopped in the middle of a bootstrap message";
        } else {
          got[static_cast<std::size_t>(r)] = 1;
          --remaining;
        }
      }
    }
    const auto send_deadline = detail::clock_type::now() + std::chrono::seconds(5);
    if (!err.empty()) {
      for (int r = 1; r < num_ranks_; ++r)
        if (r != failed_rank) send_abort(clients_[static_cast<std::size_t>(r)].get(), err_code, err, send_deadline);
      fail(err_code, err);
    }
    const std::size_t total = static_cast<std::size_t>(num_ranks_) * bytes;
    for (int r = 1; r < num_ranks_; ++r) {
      if (!send_frame(clients_[static_cast<std::size_t>(r)].get(), f_result, seq_, out, total,
                      detail::clock_type::now() + opts_.timeout)) {
        const std::string m = who(r) + " closed its bootstrap connection (the process exited or failed) during bootstrap call #" +
                              std::to_string(seq_);
        for (int q = r + 1; q < num_ranks_; ++q) send_abort(clients_[static_cast<std::size_t>(q)].get(), errc::peer_failure, m, send_deadline);
        fail(errc::peer_failure, m);
      }
    }
  }

  void allgather_client(const void* in, void* out, std::size_t bytes) {
    // Rank 0 waits up to `timeout` for the slowest rank, starting when it arrives; allow it that
    // much after our own arrival, plus as much again for rank 0 itself arriving late.
    const auto deadline = detail::clock_type::now() + 2 * opts_.timeout;
    if (!send_frame(root_.get(), f_data, seq_, in, bytes, deadline))
      fail_after_root_closed(who(0) + " closed the bootstrap connection (the process exited or failed) during "
                                      "bootstrap call #" + std::to_string(seq_));
    frame_header h{};
    const auto st = detail::recv_all(root_.get(), &h, sizeof(h), deadline);
    if (st == detail::io_status::timeout)
      fail(errc::timeout, "bootstrap call #" + std::to_string(seq_) + ": no answer from rank 0 within " +
                              seconds(2 * opts_.timeout));
    if (st == detail::io_status::closed)
      fail(errc::peer_failure, who(0) + " closed the bootstrap connection (the process exited or failed) during "
                                        "bootstrap call #" + std::to_string(seq_));
    if (h.magic != magic) fail(errc::peer_failure, "rank 0 sent a malformed bootstrap message");
    if (h.type == f_abort) {
      const error e = abort_error(root_.get(), h, deadline);
      fail(e.code(), message_of(e));
    }
    const std::size_t total = static_cast<std::size_t>(num_ranks_) * bytes;
    if (h.type != f_result || h.size != total || h.seq != seq_)
      fail(errc::mismatch, "bootstrap call #" + std::to_string(seq_) + ": rank 0 answered a different call");
    if (detail::recv_all(root_.get(), out, total, deadline) != detail::io_status::ok)
      fail(errc::peer_failure, who(0) + " closed the bootstrap connection in the middle of an answer");
  }

  int rank_;
  int num_ranks_;
  socket_options opts_;
  std::uint64_t id_hash_ = 0;
  detail::socket_address addr_;
  detail::fd_handle listener_;
  bool bound_path_ = false;
  std::vector<detail::fd_handle> clients_;  // rank 0: one per rank (index 0 unused)
  detail::fd_handle root_;                  // other ranks: the connection to rank 0
  std::vector<int> pids_;
  std::uint64_t seq_ = 0;
  bool failed_ = false;
  errc fail_code_ = errc::ok;
  std::string fail_msg_;
};

}  // namespace host
RCCLX_NAMESPACE_END
