"""The processes of one command launched N times (torchrun / accelerate launch): who this process is,
its share of a list of work, and a store through which the ranks hand objects to rank 0 and back.

    ranks = Ranks.from_env()          # 1 process: rank 0 of 1, no store
    mine = ranks.share(todo)          # every size-th item, from this rank's index
    ranks.put("batch/7", rows)        # any rank; rank 0 reads it with ranks.take("batch/7") (blocks)
    ranks.announce("plan", obj)       # rank 0; every other rank reads it with ranks.hear("plan")

Why a key-value store and not torch.distributed's collectives: an evaluation opens and closes one vLLM
engine after another in each process, and each engine makes and then destroys its own process's default
process group (vLLM's UniProc executor, a world of 1); the store is the launcher's own (torch's env://
rendezvous: the torchrun agent's TCPStore, or one that rank 0 hosts at MASTER_ADDR:MASTER_PORT), which
no engine touches. Keys live under a prefix of their own per `session` so that a second evaluation in
the same command (selection evaluates one checkpoint after another) never reads the first one's keys.

What this file does not know: what is exchanged (pickled Python objects), models, evaluation.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from datetime import timedelta

from trlvr.errors import UserError

# how long a rank waits for another's object: a batch of generation on a slow machine, not a lost peer
# (the launcher ends every rank when one fails)
WAIT = timedelta(hours=6)
_CURRENT: list = []  # Ranks.current()
ERROR = "__trlvr_error__"  # the value a rank hands over instead of its object when it failed


class PeerFailed(UserError):
    """Another rank failed; `message` is its one-line reason (that rank says the whole story itself)."""

    def __init__(self, key: str, message: str):
        super().__init__(f"another process failed ({key}): {message}")
        self.message = message


@dataclass
class Ranks:
    """This process's place among the command's processes. `store`: None for one process."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    store: object = None
    _sessions: list = field(default_factory=lambda: [0])

    @classmethod
    def current(cls) -> Ranks:
        """This process's ranks, met once per process (a second rendezvous would host a second store)."""
        if not _CURRENT:
            _CURRENT.append(cls.from_env())
        return _CURRENT[0]

    @classmethod
    def from_env(cls, environ=None) -> Ranks:
        """The launcher's ranks (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT); one process
        when WORLD_SIZE is unset or 1."""
        env = os.environ if environ is None else environ
        size = int(env.get("WORLD_SIZE", "1") or 1)
        if size == 1:
            return cls()
        import torch.distributed as dist

        store, rank, size = next(dist.rendezvous("env://", timeout=WAIT))
        return cls(rank, size, int(env.get("LOCAL_RANK", rank)), store)

    @property
    def writer(self) -> bool:
        """Rank 0: the one process that writes a shared output directory."""
        return self.rank == 0

    def share(self, items: list) -> list:
        """This rank's share of `items`: every size-th one, from its own index (disjoint, covering)."""
        return items[self.rank :: self.size]

    def owner(self, index: int) -> int:
        """The rank whose share holds items[index]."""
        return index % self.size

    def session(self, name: str) -> Ranks:
        """A view whose keys live under a prefix of their own: the n-th session of every rank is the same
        one, since every rank runs the same command in the same order."""
        if self.store is None:
            return self
        import torch.distributed as dist

        self._sessions[0] += 1
        prefix = f"trlvr/{name}/{self._sessions[0]}/"
        return Ranks(
            self.rank, self.size, self.local_rank, dist.PrefixStore(prefix, self.store), self._sessions
        )

    def put(self, key: str, obj) -> None:
        """Hand `obj` to whoever takes `key` (does not wait)."""
        self.store.set(key, pickle.dumps(obj))

    def take(self, key: str):
        """The object put under `key` (waits for it; the key is deleted once read). A peer's failure
        (`fail`) raises PeerFailed."""
        value = pickle.loads(self.store.get(key))
        self.store.delete_key(key)
        if isinstance(value, tuple) and len(value) == 2 and value[0] == ERROR:
            raise PeerFailed(key, value[1])
        return value

    def announce(self, key: str, obj) -> None:
        """Rank 0: tell every other rank `obj` under `key` (each reads it with `hear`)."""
        for r in range(1, self.size):
            self.put(f"{key}@{r}", obj)

    def hear(self, key: str):
        """What rank 0 announced under `key`."""
        return self.take(f"{key}@{self.rank}")

    def fail(self, key: str, message: str, *, everyone: bool = False) -> None:
        """Put a failure where a peer waits for `key` (rank 0: `everyone` announces it to every rank)."""
        if everyone:
            self.announce(key, (ERROR, message))
        else:
            self.put(key, (ERROR, message))


def pin_local_device(ranks: Ranks | None = None, environ=None) -> None:
    """Several processes on one machine, each with an engine of its own: process k sees only GPU k (its
    LOCAL_RANK-th visible device), as vLLM's own data-parallel examples do, because a one-process vLLM
    engine always takes device 0 of what it sees. Call before anything touches CUDA (the CUDA runtime reads
    CUDA_VISIBLE_DEVICES once, at its first call, e.g. `torch.cuda.is_available()`): `ranks` None reads
    RANK / WORLD_SIZE / LOCAL_RANK from the environment, without the rendezvous, so that `trlvr.cli.main`
    pins before it parses a single flag. Nothing to do for one process or a machine without
    CUDA_VISIBLE_DEVICES' meaning (CPU: every process uses the CPU)."""
    env = os.environ if environ is None else environ
    if ranks is None:
        local = int(env.get("LOCAL_RANK") or env.get("RANK") or 0)
        ranks = Ranks(int(env.get("RANK") or local), int(env.get("WORLD_SIZE") or 1), local)
    if ranks.size == 1 or env.get("TRLVR_DEVICE_PINNED") == "1":
        return
    visible = env.get("CUDA_VISIBLE_DEVICES")
    devices = [d for d in visible.split(",") if d.strip()] if visible else None
    if devices is not None and ranks.local_rank >= len(devices):
        raise UserError(
            f"process {ranks.rank} (LOCAL_RANK {ranks.local_rank}) has no GPU of its own: "
            f"CUDA_VISIBLE_DEVICES={visible} lists {len(devices)}; launch at most that many processes"
        )
    env["CUDA_VISIBLE_DEVICES"] = devices[ranks.local_rank] if devices is not None else str(ranks.local_rank)
    env["TRLVR_DEVICE_PINNED"] = "1"
