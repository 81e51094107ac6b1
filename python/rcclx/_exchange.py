"""The set-up exchange and the per-call checks of a communicator: an allgather of bytes, over a
torch.distributed group or over a torch.distributed Store (a TCPStore, the default group's store,
a PrefixStore of them)."""
import datetime

import torch.distributed as dist


def group_allgather(group, n):
    """allgather(bytes) -> bytes over a torch.distributed group (all_gather_object)."""

    def allgather(data: bytes) -> bytes:
        out = [None] * n
        dist.all_gather_object(out, data, group=group)
        return b"".join(out)

    return allgather


class StoreAllgather:
    """allgather(bytes) -> bytes over a Store: exchange k sets "k/<rank>" and waits for every rank's
    key, at most `timeout_s` seconds; a rank that does not arrive in time is named. A rank's key of
    exchange k - 1 is deleted once exchange k is complete (every rank has read it by then)."""

    def __init__(self, store, rank, n, timeout_s):
        self.store, self.rank, self.n = store, rank, n
        self.timeout = datetime.timedelta(seconds=float(timeout_s))
        self.seq = 0

    def __call__(self, data: bytes) -> bytes:
        seq = self.seq
        self.seq += 1
        keys = [f"{seq}/{r}" for r in range(self.n)]
        self.store.set(keys[self.rank], data)
        try:
            self.store.wait(keys, self.timeout)
        except RuntimeError as e:
            missing = []
            for r, k in enumerate(keys):
                try:
                    self.store.wait([k], datetime.timedelta(milliseconds=10))
                except RuntimeError:
                    missing.append(r)
            raise RuntimeError(
                f"rcclx: exchange #{seq} (a call check or the set-up) waited {self.timeout.total_seconds():g} s "
                f"for rank(s) {missing}, which did not arrive (a rank that skipped a call, stopped or died; "
                f"the communicator's timeout bounds this wait): {e}") from None
        out = [data if r == self.rank else bytes(self.store.get(k)) for r, k in enumerate(keys)]
        if seq > 0:
            try:
                self.store.delete_key(f"{seq - 1}/{self.rank}")
            except RuntimeError:
                pass
        return b"".join(out)
