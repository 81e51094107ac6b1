"""The set-up exchange and the per-call checks of a communicator: an allgather of bytes, over a
torch.distributed group or over a torch.distributed Store (a TCPStore, the default group's store,
a PrefixStore of them)."""
import datetime
import os
import time

import torch.distributed as dist


def group_allgather(group, n):
    """allgather(bytes) -> bytes over a torch.distributed group (all_gather_object)."""

    def allgather(data: bytes) -> bytes:
        out = [None] * n
        dist.all_gather_object(out, data, group=group)
        return b"".join(out)

    return allgather


def _gone(pid):
    """Has process `pid` (on this host) exited? A zombie counts as exited."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except (OSError, IndexError):
        return False


class StoreAllgather:
    """allgather(bytes) -> bytes over a Store: exchange k sets "k/<rank>" and waits for every rank's
    key, at most `timeout_s` seconds; a rank that does not arrive in time is named, and one whose
    process has exited (the ranks share a host: their pids are in the store) is named at once. A
    rank's key of exchange k - 1 is deleted once exchange k is complete (every rank has read it by
    then)."""

    _SLICE = datetime.timedelta(seconds=1)

    def __init__(self, store, rank, n, timeout_s):
        self.store, self.rank, self.n = store, rank, n
        self.timeout = datetime.timedelta(seconds=float(timeout_s))
        self.seq = 0
        self.pids = {}
        store.set(f"pid/{rank}", str(os.getpid()))

    def _missing(self, keys):
        missing = []
        for r, k in enumerate(keys):
            try:
                self.store.wait([k], datetime.timedelta(milliseconds=10))
            except RuntimeError:
                missing.append(r)
        return missing

    def _dead(self, ranks):
        dead = []
        for r in ranks:
            if r not in self.pids:
                try:
                    self.store.wait([f"pid/{r}"], datetime.timedelta(milliseconds=10))
                    self.pids[r] = int(self.store.get(f"pid/{r}"))
                except (RuntimeError, ValueError):
                    continue
            if _gone(self.pids[r]):
                dead.append(f"rank {r} (pid {self.pids[r]})")
        return dead

    def __call__(self, data: bytes) -> bytes:
        seq = self.seq
        self.seq += 1
        keys = [f"{seq}/{r}" for r in range(self.n)]
        self.store.set(keys[self.rank], data)
        deadline = time.monotonic() + self.timeout.total_seconds()
        while True:
            left = deadline - time.monotonic()
            try:
                self.store.wait(keys, min(self._SLICE, datetime.timedelta(seconds=max(left, 0.001))))
                break
            except RuntimeError as e:
                if "timeout" not in str(e).lower() and "timed out" not in str(e).lower():
                    raise RuntimeError(f"rcclx: exchange #{seq} (a call check or the set-up): the store failed "
                                       f"(did rank 0, which serves a TCPStore, exit?): {e}") from None
                missing = self._missing(keys)
                if not missing:
                    continue
                dead = self._dead(missing)
                if dead:
                    raise RuntimeError(f"rcclx: exchange #{seq} (a call check or the set-up): "
                                       f"{', '.join(dead)} no longer running") from None
                if time.monotonic() >= deadline:
                    raise RuntimeError(
                        f"rcclx: exchange #{seq} (a call check or the set-up) waited "
                        f"{self.timeout.total_seconds():g} s for rank(s) {missing}, which did not arrive (a rank "
                        f"that skipped a call or stopped; the communicator's timeout bounds this wait): {e}") from None
        out = [data if r == self.rank else bytes(self.store.get(k)) for r, k in enumerate(keys)]
        if seq > 0:
            try:
                self.store.delete_key(f"{seq - 1}/{self.rank}")
            except RuntimeError:
                pass
        return b"".join(out)
