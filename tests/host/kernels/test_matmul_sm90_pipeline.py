"""The Hopper matmul's producer/consumer protocol (spio/src/matmul_sm90.cu), modelled step by step
and run under random interleavings: no deadlock, and no slot overwritten while a wgmma reads it.

The model follows the kernel's loops line by line. mbarriers as the PTX ISA defines them: a phase
completes when its arrivals are in and its transaction bytes have landed; `try_wait.parity(P)`
passes once the phase of parity P has completed, i.e. while the current phase's parity is not
P (so a fresh barrier passes a wait for parity 1). TMA copies and wgmma batches complete
asynchronously, at moments the scheduler picks. This checks the protocol (parities, arrival
counts, which slot is released when), not the CUDA code's spelling of it; the GPU test checks
that (tests/gpu/kernels/test_matmul_sm90.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

CONSUMERS = 2  # the kernel's consumer warpgroups: the empty barriers' arrival count


@dataclass
class Barrier:
    count: int
    arrived: int = 0
    tx: int = 0
    phase: int = 0  # completed phases

    def arrive(self, tx: int = 0) -> None:
        self.arrived += 1
        self.tx += tx
        self._maybe_complete()

    def complete_tx(self, n: int) -> None:
        self.tx -= n
        assert self.tx >= 0, "more bytes landed than announced"
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        if self.arrived == self.count and self.tx == 0:
            self.phase += 1
            self.arrived = 0

    def passes(self, parity: int) -> bool:
        return self.phase % 2 != parity


@dataclass
class World:
    stages: int
    k_tiles: int
    full: list[Barrier] = field(init=False)
    empty: list[Barrier] = field(init=False)
    slot: list[int | None] = field(init=False)  # the k tile a slot holds (None: being filled)
    readers: list[int] = field(init=False)  # wgmma batches in flight on each slot
    copies: list[tuple[int, int]] = field(default_factory=list)  # TMA in flight: (slot, k tile)

    def __post_init__(self) -> None:
        self.full = [Barrier(1) for _ in range(self.stages)]
        self.empty = [Barrier(CONSUMERS) for _ in range(self.stages)]
        self.slot = [None] * self.stages
        self.readers = [0] * self.stages


BYTES = 2  # A and B boxes: two transactions per slot in the model


def producer(w: World):
    """The producer thread: for each k tile, wait until its slot is free, announce, copy."""
    for kt in range(w.k_tiles):
        s, phase = kt % w.stages, (kt // w.stages) & 1
        while not w.empty[s].passes(phase ^ 1):
            yield "wait"
        assert w.readers[s] == 0, f"k tile {kt}: slot {s} refilled while a wgmma reads it"
        w.full[s].arrive(tx=BYTES)
        w.slot[s] = None
        w.copies.append((s, kt))
        yield "step"


def consumer(w: World, batches: list):
    """One consumer warpgroup: wait for the slot, issue its batch, keep one in flight, release
    the previous slot."""
    for kt in range(w.k_tiles):
        s, phase = kt % w.stages, (kt // w.stages) & 1
        while not w.full[s].passes(phase):
            yield "wait"
        assert w.slot[s] == kt, f"consumer read slot {s} holding {w.slot[s]}, wanted k tile {kt}"
        w.readers[s] += 1
        batches.append(s)  # committed, in flight
        while len(batches) > 1:  # wait_group<1>: the previous batch has completed
            yield "wait"
        if kt > 0:
            w.empty[(kt - 1) % w.stages].arrive()
        yield "step"
    while batches:  # wait_group<0>
        yield "wait"


def run(stages: int, k_tiles: int, seed: int) -> None:
    rng = random.Random(seed)
    w = World(stages, k_tiles)
    batches: list[list[int]] = [[] for _ in range(CONSUMERS)]
    actors = {"producer": producer(w)} | {
        f"consumer{c}": consumer(w, batches[c]) for c in range(CONSUMERS)
    }
    done: set[str] = set()
    for _ in range(100_000):
        events = [("actor", name) for name in actors if name not in done]
        events += [("copy", i) for i in range(len(w.copies))]
        events += [("batch", c) for c in range(CONSUMERS) if batches[c]]
        if not events:
            return  # everything finished
        kind, what = rng.choice(events)
        if kind == "actor":
            try:
                next(actors[what])
            except StopIteration:
                done.add(what)
        elif kind == "copy":
            s, kt = w.copies.pop(what)
            w.slot[s] = kt
            w.full[s].complete_tx(BYTES)
        else:  # the oldest batch of consumer `what` completes
            s = batches[what].pop(0)
            w.readers[s] -= 1
        runnable = any(name not in done for name in actors) or w.copies or any(batches)
        if not runnable:
            return
    pytest.fail(f"stages={stages} k_tiles={k_tiles} seed={seed}: no progress (deadlock)")


@pytest.mark.parametrize("stages", [2, 3, 4, 5, 6, 8])
def test_protocol_never_deadlocks_nor_overwrites_a_slot_in_use(stages, seed):
    for k_tiles in (1, 2, stages - 1, stages, stages + 1, 3 * stages + 2, 17):
        for rep in range(20):
            run(stages, k_tiles, seed * 1000 + rep)


def test_the_model_catches_a_wrong_parity():
    """A producer that waits with the full barrier's parity (not phase ^ 1) on empty blocks at
    its first wait: the model must report the deadlock, or the test above proves nothing."""

    def bad_producer(w: World):
        for kt in range(w.k_tiles):
            s, phase = kt % w.stages, (kt // w.stages) & 1
            while not w.empty[s].passes(phase):
                yield "wait"
            w.full[s].arrive(tx=BYTES)
            w.copies.append((s, kt))
            yield "step"

    global producer
    good = producer
    producer = bad_producer  # type: ignore[assignment]
    try:
        with pytest.raises(pytest.fail.Exception, match="deadlock"):
            run(3, 5, 0)
    finally:
        producer = good  # type: ignore[assignment]
