"""The set-up exchange and the per-call checks of a communicator: an allgather of bytes over a
torch.distributed Store (a TCPStore, the default group's store, a PrefixStore of them), every wait
bounded. A communicator over a group exchanges over the default group's store, under a prefix
naming the group and the communicator's place among those built over it (group_store)."""
import collections
import datetime
import itertools
import os
import threading
import time

import torch.distributed as dist

_built = collections.defaultdict(itertools.count)  # group name -> communicators built over it here
_built_lock = threading.Lock()


def _group_name(group):
    """The name torch.distributed gave the group (the same on each of its ranks), or None."""
    c10d = dist.distributed_c10d
    pg = group if group is not None else c10d._get_default_group()
    for get in (lambda: pg.group_name,                               # torch 2.x
                lambda: c10d._get_process_group_name(pg),            # torch 2.x
                lambda: c10d._world.pg_names[pg],                    # torch 2.x
                lambda: c10d._pg_names[pg]):                         # torch 1.13
        try:
            name = get()
        except (AttributeError, KeyError, RuntimeError, TypeError):
            continue
        if isinstance(name, str):
            return name
    return None


def group_store(group):
    """A Store for the exchanges of a communicator over `group`: the default group's store under the
    prefix "rcclx.group/<the group's name>/<k>/", k counting the communicators built over that group
    in this process (each rank of a group builds its communicators in the same order, so the ranks
    agree on k without a word). None where torch does not expose the default store or the name."""
    try:
        base = dist.distributed_c10d._get_default_store()
    except (AttributeError, RuntimeError):
        return None
    name = _group_name(group)
    if name is None:
        return None
    with _built_lock:
        k = next(_built[name])
    return dist.PrefixStore(f"rcclx.group/{name}/{k}/", base)


def group_allgather(group, n):
    """allgather(bytes) -> bytes over a torch.distributed group (all_gather_object): bounded by the
    group's own timeout only. Used where group_store finds no store (see Communicator)."""

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
    key, at most `timeout_s` seconds (`limit`, where set, for the exchanges of one call); a rank that
    does not arrive in time is named with the call (`call`, set by the Communicator around each of
    its calls), and one whose process has exited (the ranks share a host: their pids are in the
    store) is named at once. A rank's key of exchange k - 1 is deleted once exchange k is complete
    (every rank has read it by then). After an exchange that failed (a rank did not arrive, or exited),
    the ranks' exchanges are out of step: every later one raises at once, naming the one that failed."""

    _SLICE = datetime.timedelta(seconds=1)

    def __init__(self, store, rank, n, timeout_s):
        self.store, self.rank, self.n = store, rank, n
        self.timeout_s = float(timeout_s)
        self.call = None    # the call whose exchanges run now ("rcclx.Communicator.all_reduce", ...)
        self.limit = None   # seconds bounding those exchanges instead of timeout_s (a per-call timeout)
        self.seq = 0
        self.failed = None  # why the exchanges are out of step (the first one that failed)
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

    def _what(self, seq):
        if self.call is None:
            return f"rcclx: exchange #{seq} (a call through the operators torch.ops.rcclx.*)"
        return f"{self.call}: exchange #{seq}"

    def __call__(self, data: bytes) -> bytes:
        if self.failed is not None:
            raise RuntimeError(f"{self._what(self.seq)}: the communicator is unusable since an earlier exchange "
                               f"failed ({self.failed}); destroy it and build a new one")
        try:
            return self._exchange(data)
        except RuntimeError as e:
            self.failed = str(e)
            raise

    def _exchange(self, data):
        seq = self.seq
        self.seq += 1
        keys = [f"{seq}/{r}" for r in range(self.n)]
        self.store.set(keys[self.rank], data)
        bound = self.timeout_s if self.limit is None else float(self.limit)
        deadline = time.monotonic() + bound
        while True:
            left = deadline - time.monotonic()
            try:
                self.store.wait(keys, min(self._SLICE, datetime.timedelta(seconds=max(left, 0.001))))
                break
            except RuntimeError as e:
                if "timeout" not in str(e).lower() and "timed out" not in str(e).lower():
                    raise RuntimeError(f"{self._what(seq)}: the store failed (did rank 0, which serves a "
                                       f"TCPStore, exit?): {e}") from None
                missing = self._missing(keys)
                if not missing:
                    continue
                dead = self._dead(missing)
                if dead:
                    raise RuntimeError(f"{self._what(seq)}: {', '.join(dead)} no longer running") from None
                if time.monotonic() >= deadline:
                    whose = "the call's timeout" if self.limit is not None else "the communicator's timeout"
                    raise RuntimeError(
                        f"{self._what(seq)} waited {bound:g} s for rank(s) {missing}, which did not arrive (a "
                        f"rank that skipped the call or stopped; {whose} bounds this wait)") from None
        out = [data if r == self.rank else bytes(self.store.get(k)) for r, k in enumerate(keys)]
        if seq > 0:
            try:
                self.store.delete_key(f"{seq - 1}/{self.rank}")
            except RuntimeError:
                pass
        return b"".join(out)
