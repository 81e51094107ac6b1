"""all_reduce_rmsnorm against float64 (plain and FP8 output), the device handles of a symmetric tensor,
and failures: bad arguments and shapes that differ across ranks (a clear error on every rank, the next
call works), a peer process that died (a clear error naming it, no hang), a rank that skips a call
while staying alive (an error within the timeout naming the call and the rank); no /dev/shm segment
outlives the job (a normal exit without destroy(), SIGKILL) and stale ones are reclaimed."""
import os
import tempfile
import threading
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import rcclx

from test_collectives import _device, _run, _same_bits_everywhere


def _e4m3_value(code):
    """OCP E4M3FN: bias 7, no infinities, S.1111.111 is NaN."""
    s = -1.0 if code & 0x80 else 1.0
    e, m = (code >> 3) & 0xF, code & 7
    if e == 15 and m == 7:
        return float("nan")
    return s * (m / 8.0 * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7))


EPS = {torch.float32: 2.0 ** -23, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


# ---- AllReduce + residual add + RMSNorm -----------------------------------------------------------

def _rmsnorm(rank, n, dtype):
    dev = _device()
    comm = rcclx.Communicator(timeout=20.0)
    tokens, hidden, eps = 5, 256, 1e-6
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(tokens, hidden, generator=g).to(dtype) for _ in range(n)]
    res0 = torch.randn(tokens, hidden, generator=g).to(dtype)
    weight = (torch.rand(hidden, generator=g) + 0.5).to(dtype)
    s = sum(x.double() for x in xs)
    new_res = s + res0.double()
    ref = new_res * torch.rsqrt(new_res.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
    e = EPS[dtype]
    outs = {}
    for algo in ("flat", "tree", "automatic"):
        residual = res0.clone().to(dev)
        out, r = comm.all_reduce_rmsnorm(xs[rank].to(dev), residual, weight.to(dev), eps, algorithm=algo)
        assert r is residual and out.dtype == dtype and out.shape == (tokens, hidden)
        # residual: the sum rounded to dtype, plus the residual, rounded again
        tol_r = 2 * e * (s.abs() + res0.double().abs()) + n * 2.0 ** -23 * s.abs() + 1e-30
        assert bool(((residual.double().cpu() - new_res).abs() <= tol_r).all()), algo
        rms = new_res.pow(2).mean(-1, keepdim=True).sqrt()
        tol = (2 * e * (ref.abs() + 1.0)) + 4 * e * (tol_r / rms) * weight.double().abs()
        assert bool(((out.double().cpu() - ref).abs() <= tol).all()), (algo, float((out.double().cpu() - ref).abs().max()))
        assert _same_bits_everywhere(out) and _same_bits_everywhere(residual), algo
        outs[algo] = out.cpu()
    assert torch.equal(outs["flat"], outs["tree"])  # the same bits whatever the algorithm
    # FP8 output (e4m3 codes of out / scale)
    residual = res0.clone().to(dev)
    scale = torch.tensor([0.5], device=dev)
    codes, _ = comm.all_reduce_rmsnorm(xs[rank].to(dev), residual, weight.to(dev), eps, out_dtype="e4m3", scale=scale)
    assert codes.dtype == torch.uint8
    vals = torch.tensor([_e4m3_value(c) for c in codes.cpu().flatten().tolist()], dtype=torch.float64)
    want = (ref / 0.5).clamp(-448, 448).flatten()
    assert bool(((vals - want).abs() <= 2.0 ** -4 * want.abs() + 4 * e * (want.abs() + 2) + 2.0 ** -9).all())
    assert _same_bits_everywhere(codes)
    comm.destroy()


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_all_reduce_rmsnorm_against_float64(n, dtype):
    _run(_rmsnorm, n, dtype)


def _rmsnorm_errors(rank, n):
    dev = _device()
    comm = rcclx.Communicator(timeout=20.0)
    w = torch.ones(64, device=dev)
    # a row of 6 floats (not whole 16-byte vectors) is accepted: the RMS is over the true row
    out, r = comm.all_reduce_rmsnorm(torch.ones(2, 6, device=dev), torch.ones(2, 6, device=dev), torch.ones(6, device=dev))
    assert bool((r.cpu() == n + 1).all()) and bool(((out.cpu() - 1.0).abs() <= 1e-5).all())
    # the same element count, a different row length on one rank: every rank fails, naming the shape
    shape = (4, 64) if rank != 1 else (8, 32)
    x = torch.ones(shape, device=dev)
    with pytest.raises(RuntimeError, match="shape"):
        comm.all_reduce_rmsnorm(x, torch.ones(shape, device=dev), torch.ones(shape[1], device=dev))
    with pytest.raises(RuntimeError, match="weight"):
        comm.all_reduce_rmsnorm(torch.ones(4, 64, device=dev), torch.ones(4, 64, device=dev), torch.ones(32, device=dev))
    with pytest.raises(ValueError, match="out_dtype"):
        comm.all_reduce_rmsnorm(torch.ones(4, 64, device=dev), torch.ones(4, 64, device=dev), w, out_dtype=torch.int8)
    # kernel handles of a tensor that is not symmetric
    with pytest.raises(RuntimeError, match="not a symmetric tensor"):
        comm.kernel_handles(torch.ones(64, device=dev))
    # the next call works
    res = torch.zeros(4, 64, device=dev)
    out, _ = comm.all_reduce_rmsnorm(torch.ones(4, 64, device=dev), res, w)
    assert bool((res.cpu() == n).all()) and bool(((out.cpu() - 1).abs() < 1e-5).all())
    comm.destroy()


@pytest.mark.parametrize("n", [2, 3])
def test_all_reduce_rmsnorm_bad_input_is_a_clear_error(n):
    _run(_rmsnorm_errors, n)


def test_kernel_handles_record():
    """The record's layout as the header reads it: magic, version, size, the pad slots."""
    _run(_handles, 2)


def _handles(rank, n):
    comm = rcclx.Communicator(timeout=20.0, max_tiles=100)
    ws = comm.symmetric_empty(4096, torch.uint8)
    h = comm.kernel_handles(ws)
    assert h.dtype == torch.uint8 and h.device.type == "cpu"
    words = h[:24].view(torch.int32).tolist()
    assert words[0] == 0x6B786372 and words[1] == 2 and words[2] == h.numel() and words[3] == rcclx.max_ranks
    assert (words[4], words[5]) == comm.tile_slots == (128, 100)
    del ws
    comm.destroy()


# ---- a peer process that died --------------------------------------------------------------------

def _dead_peer(rank, n, check_calls):
    dev = _device()
    comm = rcclx.Communicator(timeout=3.0, check_calls=check_calls)
    t = torch.ones(1000, device=dev)
    comm.all_reduce(t)  # everyone alive
    if rank == n - 1:
        if dev.type == "cuda":
            torch.cuda.synchronize()
        os._exit(0)  # dies without a word
    time.sleep(1.0)
    start = time.time()
    with pytest.raises(RuntimeError) as info:
        comm.all_reduce(t)
        comm.synchronize()  # GPU builds: the kernel records the timeout, raised here
    msg = str(info.value)
    if os.environ.get("RCCLX_SHOW_ERRORS"):
        print(f"[rank {rank}] {msg}", flush=True)
    assert f"rank {n - 1}" in msg, msg
    assert time.time() - start < 60, "the error took too long"
    os._exit(0)  # the group cannot be shut down cleanly with a member gone


@pytest.mark.parametrize("check_calls", [True, False], ids=["checked", "unchecked"])
def test_dead_peer_is_a_clear_error(check_calls):
    with tempfile.TemporaryDirectory() as d:
        ctx = mp.get_context("spawn")
        ps = [ctx.Process(target=_dead_peer_main, args=(r, 3, "file://" + os.path.join(d, "rv"), check_calls))
              for r in range(3)]
        for p in ps:
            p.start()
        for p in ps:
            p.join(120)
        codes = [p.exitcode for p in ps]
        for p in ps:
            if p.is_alive():
                p.kill()
        assert codes == [0, 0, 0], f"exit codes {codes} (a rank failed its checks or hung)"


def _dead_peer_main(rank, n, init, check_calls):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=n)
    try:
        _dead_peer(rank, n, check_calls)
    except BaseException:
        import traceback
        traceback.print_exc()
        os._exit(1)


# ---- /dev/shm: no segment outlives the job -------------------------------------------------------

def _shm_of(pids):
    """The /dev/shm entries created by the processes `pids` (rcclx names them rcclx.<pid>.*)."""
    if not os.path.isdir("/dev/shm"):
        return []
    prefixes = tuple(f"rcclx.{p}." for p in pids)
    return sorted(e for e in os.listdir("/dev/shm") if e.startswith(prefixes))


def _shm_job(rank, n, ready, end):
    """Set-up with every kind of shared memory: the communicator's workspace, the symmetric_empty
    pool and the all_reduce_rmsnorm workspace; then `end`: "exit" (no destroy()) or "wait" (in a
    collective that never completes, until the test kills the processes)."""
    comm = rcclx.Communicator(timeout=2.0, check_calls=False)
    t = comm.symmetric_empty(1000, torch.float32)
    t.fill_(rank + 1)
    comm.all_reduce(t)
    assert bool((t == n * (n + 1) / 2).all())
    res = torch.zeros(4, 64)
    out, _ = comm.all_reduce_rmsnorm(torch.ones(4, 64), res, torch.ones(64))
    assert bool((res == n).all()) and bool(((out - 1).abs() < 1e-5).all())
    dist.barrier()  # every rank's set-up is over
    left = _shm_of([os.getpid()])
    ready.put((rank, os.getpid(), left))
    if end == "wait":
        if rank == 0:
            time.sleep(600)  # the peers wait for this rank until the test kills it
        x = torch.ones(16)
        while True:
            try:
                comm.all_reduce(x)
            except RuntimeError:
                time.sleep(0.05)  # a peer that never arrives: a timeout, then every call refused
    # "exit": a normal exit that leaves the communicator alive (no destroy())


def _shm_main(rank, n, init, ready, end):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=n)
    try:
        _shm_job(rank, n, ready, end)
    except BaseException:
        import traceback
        traceback.print_exc()
        os._exit(1)


def _start_shm_job(n, end, d):
    ctx = mp.get_context("spawn")
    ready = ctx.Queue()
    ps = [ctx.Process(target=_shm_main, args=(r, n, "file://" + os.path.join(d, "rv"), ready, end)) for r in range(n)]
    for p in ps:
        p.start()
    reports = []
    try:
        for _ in range(n):
            reports.append(ready.get(timeout=120))
    except BaseException:
        for p in ps:
            p.kill()
        raise
    return ps, sorted(reports)


@pytest.mark.skipif(rcclx.backend != "host", reason="/dev/shm segments are the host backend's memory")
@pytest.mark.parametrize("end", ["exit", "sigkill"])
def test_no_shm_segment_outlives_the_job(end):
    """Three processes set up a communicator, a symmetric tensor and all_reduce_rmsnorm's workspace:
    once set-up is over no name of theirs is left in /dev/shm, and none after they exit without
    destroy() or are killed with SIGKILL while the peers wait in a collective."""
    n = 3
    with tempfile.TemporaryDirectory() as d:
        ps, reports = _start_shm_job(n, "exit" if end == "exit" else "wait", d)
        pids = [p.pid for p in ps]
        try:
            for rank, pid, left in reports:
                assert left == [], f"rank {rank} (pid {pid}) still has /dev/shm names after set-up: {left}"
            if end == "sigkill":
                time.sleep(0.5)  # the peers are in a collective waiting for rank 0
                ps[0].kill()
                time.sleep(0.5)
                for p in ps[1:]:
                    p.kill()
            for p in ps:
                p.join(60)
            codes = [p.exitcode for p in ps]
        finally:
            for p in ps:
                if p.is_alive():
                    p.kill()
                    p.join(10)
        if end == "exit":
            assert codes == [0] * n, f"exit codes {codes}"
        else:
            assert codes == [-9] * n, f"exit codes {codes}"
        assert _shm_of(pids) == [], f"/dev/shm entries left by the job's processes {pids}: {_shm_of(pids)}"


def _set_up_only(rank, n):
    rcclx.Communicator(timeout=5.0).destroy()


@pytest.mark.skipif(rcclx.backend != "host", reason="/dev/shm segments are the host backend's memory")
def test_stale_segments_of_a_dead_process_are_reclaimed():
    """A segment whose creator died before it was unlinked (a process killed during set-up) is
    removed by the next communicator's set-up; one of a live process is kept."""
    import subprocess
    dead = subprocess.Popen(["true"])
    dead.wait()  # reaped: its pid names no process
    stale = f"/dev/shm/rcclx.{dead.pid}.0123456789ab.0"
    alive = f"/dev/shm/rcclx.{os.getpid()}.0123456789ab.7"
    for path in (stale, alive):
        with open(path, "wb") as f:
            f.write(b"\0" * 4096)
    try:
        _run(_set_up_only, 2)
        assert os.path.exists(alive), "the segment of a live process was removed"
        assert not os.path.exists(stale), "the segment of a dead process is still in /dev/shm"
    finally:
        for path in (stale, alive):
            if os.path.exists(path):
                os.unlink(path)


# ---- a rank that skips a call, alive: an error within the timeout naming the call and the rank ----

def _show(rank, msg):
    if os.environ.get("RCCLX_SHOW_ERRORS"):
        print(f"[rank {rank}] {msg}", flush=True)


def _skipped_call(rank, n):
    """A communicator over the default group and one over a sub-group: the rank that skips a call
    stays alive (in a gloo barrier, whose own timeout is 30 minutes); the others' call ends after the
    communicator's timeout (2 s), or a shorter per-call one (call_timeout), naming it."""
    dev = _device()
    t = torch.ones(8, device=dev)
    comm = rcclx.Communicator(timeout=2.0)
    comm.all_reduce(t)
    assert bool((t.cpu() == n).all())
    if rank != n - 1:
        start = time.monotonic()
        with pytest.raises(RuntimeError) as info:
            comm.reduce_scatter(torch.empty(2, device=dev), torch.ones(2 * n, device=dev))
        msg = str(info.value)
        _show(rank, msg)
        assert "rcclx.Communicator.reduce_scatter" in msg and f"rank(s) [{n - 1}]" in msg, msg
        assert "waited 2 s" in msg, msg
        assert time.monotonic() - start < 60, "the error took too long"
        # The exchanges are out of step from then on: the next call says so at once.
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="unusable since an earlier exchange failed.*reduce_scatter"):
            comm.all_reduce(t)
        assert time.monotonic() - start < 1.0
    dist.barrier()
    # A sub-group of ranks 1 and 2 (group ranks 0 and 1): its communicator exchanges under the
    # group's name; the call's timeout (1 s) is shorter than the communicator's (120 s).
    sub = dist.new_group([1, 2])
    if rank in (1, 2):
        c = rcclx.Communicator(group=sub, timeout=120.0)
        t = torch.full((5,), float(rank), device=dev)
        c.all_reduce(t)
        assert bool((t.cpu() == 3.0).all())
        if rank == 2:
            start = time.monotonic()
            with pytest.raises(RuntimeError) as info, c.call_timeout(1.0, "my_step"):
                c.broadcast(t, 0)
            msg = str(info.value)
            _show(rank, msg)
            assert "my_step (rcclx.Communicator.broadcast)" in msg and "rank(s) [0]" in msg, msg
            assert "waited 1 s" in msg and "the call's timeout" in msg, msg
            assert time.monotonic() - start < 60, "the error took too long"
    dist.barrier()
    os._exit(0)  # the communicators' exchanges are out of step: they cannot be destroyed together


def test_skipped_call_is_a_clear_error_within_the_timeout():
    with tempfile.TemporaryDirectory() as d:
        ctx = mp.get_context("spawn")
        ps = [ctx.Process(target=_skipped_call_main, args=(r, 3, "file://" + os.path.join(d, "rv")))
              for r in range(3)]
        for p in ps:
            p.start()
        deadline = time.monotonic() + 120
        for p in ps:
            p.join(max(deadline - time.monotonic(), 0.1))
        codes = [p.exitcode for p in ps]
        for p in ps:
            if p.is_alive():
                p.kill()
        assert codes == [0, 0, 0], f"exit codes {codes} (a rank failed its checks or hung)"


def _skipped_call_main(rank, n, init):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=n)
    try:
        _skipped_call(rank, n)
    except BaseException:
        import traceback
        traceback.print_exc()
        os._exit(1)


# ---- the exchanges' shared-memory mailbox ---------------------------------------------------------

def test_exchange_mailbox_small_and_large_payloads():
    """StoreAllgather over one store for 3 ranks (threads): exchanges #0 and #1 go through the store,
    the later ones through rank 0's /dev/shm mailbox, whose name is gone after #1; payloads of every
    size (a slot's 16 KiB exceeded: through the store) and different per rank, in rank order."""
    from rcclx._exchange import StoreAllgather
    store = dist.HashStore()
    n = 3
    ags = [StoreAllgather(store, r, n, 20.0) for r in range(n)]
    sizes = [0, 5, 16 << 10, 40 << 10, 3, 1, 17 << 10]
    results = [[] for _ in range(n)]
    errors = []

    def payload(k, r):
        return bytes([(k * 7 + r + i) % 251 for i in range(sizes[k % len(sizes)] + r)])

    def run(r):
        try:
            for k in range(2 * len(sizes) + 2):
                results[r].append(ags[r](payload(k, r)))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    for r in range(n):
        assert len(results[r]) == 2 * len(sizes) + 2
        for k, got in enumerate(results[r]):
            assert got == b"".join(payload(k, p) for p in range(n)), (r, k)
    assert all(ag._box is not None for ag in ags), "the mailbox was not used"
    assert not os.path.exists(ags[0]._box_path), "the mailbox's name outlived exchange #1"


def test_mailbox_crc_is_zlibs():
    """The mailbox's C++ side and Python's read each other's slots: their crc32 must be zlib's."""
    import zlib
    for size in (0, 1, 7, 255, 5000):
        data = bytes((i * 37 + size) % 256 for i in range(size))
        for seed in (0, 1, zlib.crc32(b"\x05" + bytes(7)), 0xFFFFFFFF):
            assert rcclx._C.crc32(data, seed) == zlib.crc32(data, seed), (size, seed)


def _late_ranks(rank, n):
    """Calls where one rank arrives milliseconds after the others: its peers' C++ side gives up
    polling and Python collects that exchange; every other call completes in C++. Results against
    sums computed here, and all_to_all_v's splits (exchanged through the mailbox) uneven."""
    dev = _device()
    comm = rcclx.Communicator(check_calls=True, timeout=60.0)
    for i in range(24):
        if i % 3 == 0 and rank == (i // 3) % n:
            time.sleep(0.01)
        t = torch.full((4 + i,), float(rank + 1) * (i + 1), device=dev)
        comm.all_reduce(t)
        assert bool((t.cpu() == (i + 1) * n * (n + 1) / 2).all()), (i, t)
        # rank r sends (r + p + i) % 3 + 1 elements to rank p, each holding 1000 r + p
        ins = [(rank + p + i) % 3 + 1 for p in range(n)]
        outs = [(p + rank + i) % 3 + 1 for p in range(n)]
        x = torch.cat([torch.full((ins[p],), 1000.0 * rank + p) for p in range(n)]).to(dev)
        y = torch.empty(sum(outs), device=dev)
        comm.all_to_all_single(y, x, outs, ins)
        want = torch.cat([torch.full((outs[p],), 1000.0 * p + rank) for p in range(n)])
        assert torch.equal(y.cpu(), want), (i, y)
    assert comm._allgather._native is not None and comm._allgather._native.attached
    comm.destroy()


def test_late_ranks_through_the_mailbox():
    _run(_late_ranks, 3)
