"""The set-up exchange and the per-call checks of a communicator: an allgather of bytes over a
torch.distributed Store (a TCPStore, the default group's store, a PrefixStore of them), every wait
bounded. A communicator over a group exchanges over the default group's store, under a prefix
naming the group and the communicator's place among those built over it (group_store)."""
import collections
import ctypes
import datetime
import itertools
import mmap
import os
import struct
import threading
import time
import uuid
import zlib

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

    def __init__(self, store, rank, n, timeout_s, native=None):
        self.store, self.rank, self.n = store, rank, n
        self.timeout_s = float(timeout_s)
        self.call = None    # the call whose exchanges run now ("rcclx.Communicator.all_reduce", ...)
        self.limit = None   # seconds bounding those exchanges instead of timeout_s (a per-call timeout)
        # The mailbox's C++ side (rcclx._C.NativeMailbox, given to the communicator's create): once
        # attached, the C++ exchanges post and collect there, and come here only for a late peer,
        # with the number of the exchange they posted. It holds the exchanges' count (seq).
        self._native = native
        self._seq = 0  # the count without a C++ side (the native one starts at 0 too)
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

    @property
    def seq(self):
        """The number of the next exchange (shared with the mailbox's C++ side)."""
        return self._native.seq if self._native is not None else self._seq

    @seq.setter
    def seq(self, value):
        if self._native is not None:
            self._native.seq = value
        else:
            self._seq = value

    def _bound(self):
        return self.timeout_s if self.limit is None else float(self.limit)

    def _give_up(self, seq, missing, bound, deadline):
        """Raises if a missing rank's process exited, or (past the deadline) that they did not arrive."""
        dead = self._dead(missing)
        if dead:
            raise RuntimeError(f"{self._what(seq)}: {', '.join(dead)} no longer running") from None
        if time.monotonic() >= deadline:
            whose = "the call's timeout" if self.limit is not None else "the communicator's timeout"
            raise RuntimeError(
                f"{self._what(seq)} waited {bound:g} s for rank(s) {missing}, which did not arrive (a "
                f"rank that skipped the call or stopped; {whose} bounds this wait)") from None

    def _what(self, seq):
        if self.call is None:
            return f"rcclx: exchange #{seq} (a call through the operators torch.ops.rcclx.*)"
        return f"{self.call}: exchange #{seq}"

    def __call__(self, data: bytes, posted=None) -> bytes:
        """Exchange `data`; posted: the number of the exchange whose slot the C++ side already wrote
        (its peers were late), whose payloads this collects."""
        if self.failed is not None:
            raise RuntimeError(f"{self._what(self.seq)}: the communicator is unusable since an earlier exchange "
                               f"failed ({self.failed}); destroy it and build a new one")
        try:
            if posted is not None:
                return self._box.collect(self, int(posted), data)
            return self._exchange(data)
        except RuntimeError as e:
            self.failed = str(e)
            if self._native is not None:
                self._native.detach()
            if self.rank == 0 and self._box_path and self.seq <= 2:  # a set-up that failed: no one uses it
                try:
                    os.unlink(self._box_path)
                except OSError:
                    pass
            raise

    def _exchange(self, data):
        seq = self.seq
        if self._box is not None:
            self.seq += 1
            return self._box.exchange(self, seq, data)
        if seq == 0 and self.rank == 0:
            self._box_path = _Mailbox.create(self.n)
            self.store.set("mailbox", self._box_path or "")
        out = self._store_exchange(seq, data)
        if seq == 0:
            self._box_open()
        elif seq == 1:
            self._box_start()
        return out

    # The mailbox: a /dev/shm file with a slot per rank, created by rank 0 at exchange #0 and mapped
    # by every rank; from exchange #2 on, when every rank mapped it (each says so before exchange #1),
    # exchanges go through it (microseconds instead of the store's round trips). Rank 0 unlinks the
    # name after exchange #1: every rank has mapped it by then.
    _box = None
    _box_path = None
    _box_map = None

    def _box_open(self):
        ok = False
        try:
            path = self.store.get("mailbox").decode()
            if path:
                self._box_map = _Mailbox.map(path, self.n)
                self._box_path = path
                ok = True
        except (RuntimeError, OSError, ValueError):
            ok = False
        self.store.set(f"mailbox/{self.rank}", "1" if ok else "0")

    def _box_start(self):
        ok = all(self.store.get(f"mailbox/{r}") == b"1" for r in range(self.n))
        if self.rank == 0 and self._box_path:
            try:
                os.unlink(self._box_path)
            except OSError:
                pass
        if ok:
            # Every rank's pid now, so that a peer that exits is named without the store (whose
            # server, rank 0, may be the one that exited).
            for r in range(self.n):
                if r not in self.pids:
                    self.pids[r] = int(self.store.get(f"pid/{r}"))
            self._box = _Mailbox(self._box_map, self.rank, self.n)
            if self._native is not None:
                self._box_view = ctypes.c_char.from_buffer(self._box_map)  # keeps the mapping's address
                self._native.attach(ctypes.addressof(self._box_view), self.rank, self.n, _Mailbox.SLOT)
        self._box_map = None

    def _store_exchange(self, seq, data):
        self.seq += 1
        keys = [f"{seq}/{r}" for r in range(self.n)]
        self.store.set(keys[self.rank], data)
        bound = self._bound()
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
                self._give_up(seq, missing, bound, deadline)
        out = [data if r == self.rank else bytes(self.store.get(k)) for r, k in enumerate(keys)]
        if seq > 0:
            try:
                self.store.delete_key(f"{seq - 1}/{self.rank}")
            except RuntimeError:
                pass
        return b"".join(out)


class _Mailbox:
    """The exchanges of a communicator's ranks through a shared-memory file (StoreAllgather's
    mailbox). Rank r's slot for exchange k is slot (r, k % 2): a rank writes exchange k + 2 only after
    exchange k + 1 completed, when every peer had read exchange k. A slot holds (k, length, crc32 of
    k and the payload, payload), k written last; a reader takes the payload only when k and the crc
    match, so a torn or reordered read is read again. A payload larger than a slot goes through the
    store (the slot then says so)."""

    SLOT = 16 << 10
    _HEAD = struct.Struct("<QQI4x")  # seq, length, crc
    _BIG = 1 << 63

    @staticmethod
    def create(n):
        """Rank 0: a new file of n ranks' slots in /dev/shm (None where there is none)."""
        if not os.path.isdir("/dev/shm"):
            return None
        _reclaim_mailboxes()
        path = f"/dev/shm/rcclx.{os.getpid()}.mailbox.{uuid.uuid4().hex[:12]}"
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            try:
                os.ftruncate(fd, 2 * n * _Mailbox.SLOT)
            finally:
                os.close(fd)
        except OSError:
            return None
        return path

    @staticmethod
    def map(path, n):
        fd = os.open(path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size != 2 * n * _Mailbox.SLOT:
                raise ValueError("mailbox size")
            return mmap.mmap(fd, 2 * n * _Mailbox.SLOT)
        finally:
            os.close(fd)

    def __init__(self, buf, rank, n):
        self.buf, self.rank, self.n = buf, rank, n
        self.stored = {1}  # exchanges whose payload this rank put in the store (#1 went there)

    def _at(self, r, seq):
        return (2 * r + (seq & 1)) * self.SLOT

    def exchange(self, owner, seq, data):
        at = self._at(self.rank, seq)
        size = len(data)
        if size > self.SLOT - self._HEAD.size:
            owner.store.set(f"{seq}/{self.rank}", data)
            self.stored.add(seq)
            payload, size = b"", self._BIG
        else:
            payload = data
        seed = zlib.crc32(struct.pack("<Q", seq))  # the crc of seq, continued over each payload
        self.buf[at + 8:at + 16] = struct.pack("<Q", size)
        self.buf[at + 16:at + 20] = struct.pack("<I", zlib.crc32(payload, seed))
        self.buf[at + 24:at + 24 + len(payload)] = payload
        self.buf[at:at + 8] = struct.pack("<Q", seq)  # last: the slot is ready
        return self.collect(owner, seq, data, seed)

    def collect(self, owner, seq, data, seed=None):
        """Every rank's payload of exchange `seq`, this rank's (`data`) already posted; seed: the
        crc of seq (computed here when the poster did not)."""
        if seed is None:
            seed = zlib.crc32(struct.pack("<Q", seq))
        out = [None] * self.n
        out[self.rank] = data
        left = [r for r in range(self.n) if r != self.rank]
        bound = owner._bound()
        start = time.monotonic()
        deadline, polls = start + bound, 0
        look = min(start + 1.0, deadline)
        while left:
            left = [r for r in left if not self._take(owner, r, seq, seed, out)]
            if not left:
                break
            polls += 1
            if polls > 64:  # then at most 0.1 ms between looks (a late peer's arrival is seen that soon)
                time.sleep(min(1e-4, 1e-6 * (polls - 64)))
                now = time.monotonic()
                if now >= look:  # about once a second, and at the deadline: a peer that exited, or too late
                    look = min(now + 1.0, deadline)
                    owner._give_up(seq, left, bound, deadline)
        for old in [k for k in self.stored if k <= seq - 2]:  # every peer has read it
            self.stored.discard(old)
            try:
                owner.store.delete_key(f"{old}/{self.rank}")
            except RuntimeError:
                pass
        return b"".join(out)

    def _take(self, owner, r, seq, seed, out):
        at = self._at(r, seq)
        got, size, crc = self._HEAD.unpack_from(self.buf, at)
        if got != seq:
            return False
        if size == self._BIG:
            payload = b""
        elif size > self.SLOT - self._HEAD.size:
            return False
        else:
            payload = bytes(self.buf[at + 24:at + 24 + size])
        if zlib.crc32(payload, seed) != crc or \
                self._HEAD.unpack_from(self.buf, at)[0] != seq:
            return False
        out[r] = bytes(owner.store.get(f"{seq}/{r}")) if size == self._BIG else payload
        return True


def _reclaim_mailboxes():
    """Removes /dev/shm/rcclx.<pid>.mailbox.* files whose creator has exited (a job killed before
    its rank 0 unlinked the name)."""
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return
    for name in names:
        parts = name.split(".")
        if len(parts) >= 3 and parts[0] == "rcclx" and parts[2] == "mailbox" and parts[1].isdigit():
            if _gone(int(parts[1])):
                try:
                    os.unlink(os.path.join("/dev/shm", name))
                except OSError:
                    pass
