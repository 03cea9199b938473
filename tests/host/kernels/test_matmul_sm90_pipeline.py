"""The Hopper matmul's producer/consumer protocol (spio/src/matmul_sm90.cu), modelled step by step
and run under random interleavings: no deadlock, no slot overwritten while a wgmma reads it, and
every phase of a `full` barrier completes on exactly the bytes of its own k tile.

Persistent CTAs (PERSISTENT 1) run several tiles as one stream of (tile, k tile) items: the
producer's slot and phase carry over from tile to tile (it fills the next tile's first slots
while the consumers store this one), the consumers' too; each consumer releases a tile's last
slot once its batch completed, before the epilogue. The model checks that every slot a consumer
reads holds the (tile, k tile) it wants (never a k tile of another tile), with tiles from 1 to
several and k tiles from 1 upward, one CTA or a cluster of two walking the same tiles.

The model follows the kernel's loops line by line, for one CTA (cluster_m 1) or a cluster of two
(cluster_m 2). mbarriers as the PTX ISA defines them: a phase completes when its arrivals are in
and its transaction count is back to zero (the count may dip below zero when bytes land before
they are announced: a peer's multicast can beat this CTA's arrive.expect_tx); `try_wait.parity(P)`
passes once the phase of parity P has completed, i.e. while the current phase's parity is not P
(so a fresh barrier passes a wait for parity 1). TMA copies and wgmma batches complete
asynchronously, at moments the scheduler picks; a multicast copy lands in each destination CTA on
its own, and so does each remote mbarrier arrival.

In a cluster each CTA's producer copies its A box into its own slot and half of the B box into
the slot of both CTAs (each half counted down on the receiving CTA's `full` barrier, which
expects A + all of B); consumers release a slot on the `empty` barrier of both CTAs (count
2 x CONSUMERS). A cluster barrier (every actor arrives, then waits) ends the kernel; an actor's
arrival there follows its own remote arrivals (release), and nothing may land in a CTA that has
exited. A CTA past M (the padded one of an odd number of M tiles) runs the same protocol on
zero-filled A, so the model needs no case for it.

This checks the protocol (parities, arrival counts, byte counts, which slot is released where and
when), not the CUDA code's spelling of it; the GPU test checks that
(tests/gpu/kernels/test_matmul_sm90.py). Each `test_the_model_catches_*` breaks one rule and
expects the model to report it, so that the passing runs mean something.
"""

from __future__ import annotations

import functools
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

CONSUMERS = 2  # the kernel's consumer warpgroups
A_BYTES = 2  # the A box in the model's units (128 rows)
B_BYTES = 2  # the B box (BLOCK_N rows); in a cluster of two each CTA copies half


class ProtocolError(AssertionError):
    """A rule of the protocol broken (as opposed to a deadlock)."""


def check(cond: bool, message: str) -> None:
    if not cond:
        raise ProtocolError(message)


Item = tuple[int, int]  # (tile, k tile): one step of a CTA's stream
NOTHING: Item = (-1, -1)  # what a slot holds before its first fill


@dataclass
class Barrier:
    count: int
    arrived: int = 0
    tx: int = 0
    phase: int = 0  # completed phases
    announced: int = 0  # bytes announced in the current phase
    landed: list[tuple[Item, int]] = field(default_factory=list)  # (item, bytes) this phase
    completed: list[tuple[int, list[tuple[Item, int]]]] = field(default_factory=list)

    def arrive(self, tx: int = 0) -> None:
        check(self.arrived < self.count, "more arrivals than the barrier's count in one phase")
        self.arrived += 1
        self.tx += tx
        self.announced += tx
        self._maybe_complete()

    def complete_tx(self, n: int, item: Item) -> None:
        self.tx -= n
        self.landed.append((item, n))
        self._maybe_complete()

    def _maybe_complete(self) -> None:
        if self.arrived == self.count and self.tx == 0:
            self.completed.append((self.announced, self.landed))
            self.phase += 1
            self.arrived = self.announced = 0
            self.landed = []

    def passes(self, parity: int) -> bool:
        return self.phase % 2 != parity


@dataclass
class Cta:
    rank: int
    full: list[Barrier]
    empty: list[Barrier]
    parts: list[dict[str, Item | None]]  # per slot: part -> the item it holds (None: in flight)
    readers: list[int]  # wgmma batches in flight on each slot
    done: set[str] = field(default_factory=set)  # actors of this CTA that finished
    exited: bool = False


@dataclass
class Copy:
    dest: int  # the CTA it lands in
    slot: int
    part: str
    item: Item
    size: int


@dataclass
class World:
    stages: int
    k_tiles: int
    cluster: int = 1
    tiles: int = 1  # tiles of each CTA (the same for both CTAs of a cluster)
    persistent: bool = False  # the kernel's PERSISTENT (tiles > 1 needs it)
    empty_count: int | None = None  # default CONSUMERS * cluster (the kernel's)
    slot_bytes: int = A_BYTES + B_BYTES  # what a producer announces on its `full` barrier
    ctas: list[Cta] = field(init=False)
    copies: list[Copy] = field(default_factory=list)  # TMA in flight
    arrivals: list[tuple[str, int, int]] = field(default_factory=list)  # (from, CTA, slot)
    cluster_arrived: int = 0
    actors: int = field(init=False)

    def __post_init__(self) -> None:
        count = self.empty_count or CONSUMERS * self.cluster
        parts = ["a"] + [f"b{r}" for r in range(self.cluster)]
        self.ctas = [
            Cta(
                rank=r,
                full=[Barrier(1) for _ in range(self.stages)],
                empty=[Barrier(count) for _ in range(self.stages)],
                parts=[dict.fromkeys(parts, NOTHING) for _ in range(self.stages)],
                readers=[0] * self.stages,
            )
            for r in range(self.cluster)
        ]
        self.actors = self.cluster * (1 + CONSUMERS)
        assert self.persistent or self.tiles == 1, "one tile per CTA unless persistent"

    def stream(self) -> list[Item]:
        """The CTA's (tile, k tile) items in the order the producer loads them."""
        return [(t, kt) for t in range(self.tiles) for kt in range(self.k_tiles)]

    def land(self, copy: Copy) -> None:
        cta = self.ctas[copy.dest]
        check(not cta.exited, f"a copy of {copy.item} lands in CTA {copy.dest} after it "
              "exited")  # fmt: skip
        check(cta.readers[copy.slot] == 0, f"{copy.item} lands in slot {copy.slot} of "
              f"CTA {copy.dest} while a wgmma reads it")  # fmt: skip
        cta.parts[copy.slot][copy.part] = copy.item
        cta.full[copy.slot].complete_tx(copy.size, copy.item)

    def deliver(self, dest: int, slot: int) -> None:
        cta = self.ctas[dest]
        check(not cta.exited, f"a remote arrival on CTA {dest} after it exited")
        cta.empty[slot].arrive()


def cluster_barrier(w: World, name: str, cta: Cta) -> Iterator[str]:
    """barrier.cluster.arrive.release then .wait: the actor's remote arrivals are delivered
    before its arrival counts; it passes once every actor of the cluster arrived."""
    while any(src == name for src, _, _ in w.arrivals):
        yield "wait"
    w.cluster_arrived += 1
    while w.cluster_arrived < w.actors:
        yield "wait"


def advance(w: World, s: int, phase: int) -> tuple[int, int]:
    """The next slot of the ring and its phase (the persistent kernel's carried counters)."""
    return (0, phase ^ 1) if s + 1 == w.stages else (s + 1, phase)


def producer(w: World, cta: Cta, restart: bool = False) -> Iterator[str]:
    """The producer thread: for each k tile of each of its tiles, wait until its slot is free
    (in every CTA its copies write), announce A + B on its own `full` barrier, copy A here and
    its share of B to all. Slot and phase run on across tiles (PERSISTENT's counters; with one
    tile, kt % stages and (kt / stages) & 1 as the plain kernel computes them). `restart`: a
    broken variant that starts every tile at slot 0, phase 0."""
    r = cta.rank
    s, phase = 0, 0
    for t in range(w.tiles):
        if restart:
            s, phase = 0, 0
        for kt in range(w.k_tiles):
            item = (t, kt)
            while not cta.empty[s].passes(phase ^ 1):
                yield "wait"
            for dest in w.ctas if w.cluster > 1 else [cta]:
                check(dest.readers[s] == 0, f"{item}: slot {s} of CTA {dest.rank} refilled "
                      "while a wgmma reads it")  # fmt: skip
            cta.full[s].arrive(tx=w.slot_bytes)
            cta.parts[s]["a"] = None
            w.copies.append(Copy(r, s, "a", item, A_BYTES))
            for dest in w.ctas:  # B: the whole box alone, one half to each CTA in a cluster
                dest.parts[s][f"b{r}"] = None
                w.copies.append(Copy(dest.rank, s, f"b{r}", item, B_BYTES // w.cluster))
            s, phase = advance(w, s, phase)
            yield "step"
    if w.cluster > 1:
        yield from cluster_barrier(w, f"producer{r}", cta)


def consumer(w: World, cta: Cta, c: int, batches: list[int], restart: bool = False,
             release_last: bool = True) -> Iterator[str]:  # fmt: skip
    """One consumer warpgroup, tile after tile: wait for the slot, issue its batch, keep one in
    flight, release the previous slot (on every CTA's `empty` barrier in a cluster: remote
    arrivals in flight); persistent, once the tile's batches completed, release its last slot,
    then store the tile (the epilogue, while the producer refills the slots). Broken variants:
    `restart` starts every tile at slot 0, phase 0; `release_last` False never frees a tile's
    last slot (the plain kernel's rule)."""
    name = f"consumer{cta.rank}.{c}"
    s, phase = 0, 0
    for t in range(w.tiles):
        if restart:
            s, phase = 0, 0
        prev = 0
        for kt in range(w.k_tiles):
            while not cta.full[s].passes(phase):
                yield "wait"
            check(all(v == (t, kt) for v in cta.parts[s].values()), f"CTA {cta.rank} read slot "
                  f"{s} holding {cta.parts[s]}, wanted {(t, kt)} in every part")  # fmt: skip
            cta.readers[s] += 1
            batches.append(s)  # committed, in flight
            while len(batches) > 1:  # wait_group<1>: the previous batch has completed
                yield "wait"
            if kt > 0:
                release(w, cta, name, prev)
            prev = s
            s, phase = advance(w, s, phase)
            yield "step"
        while batches:  # wait_group<0>
            yield "wait"
        if w.persistent:
            if release_last:
                release(w, cta, name, prev)
            yield "epilogue"
    if w.cluster > 1:
        yield from cluster_barrier(w, name, cta)  # arrive, epilogue, wait


def release(w: World, cta: Cta, name: str, slot: int) -> None:
    """A consumer frees `slot`: on its own `empty` barrier alone, or in a cluster on every CTA's
    (mbarrier::arrive_cluster to each rank; each arrival lands on its own)."""
    if w.cluster == 1:
        cta.empty[slot].arrive()
    else:
        for dest in range(w.cluster):
            w.arrivals.append((name, dest, slot))


Producer = Callable[[World, Cta], Iterator[str]]


Consumer = Callable[[World, Cta, int, list[int]], Iterator[str]]


def run(stages: int, k_tiles: int, seed: int, cluster: int = 1, producer_fn: Producer | None = None,
        consumer_fn: Consumer | None = None, **world) -> None:  # fmt: skip
    rng = random.Random(seed)
    w = World(stages, k_tiles, cluster, **world)
    produce = producer_fn or producer
    consume = consumer_fn or consumer
    batches = {(r, c): [] for r in range(cluster) for c in range(CONSUMERS)}
    actors: dict[str, tuple[Cta, Iterator[str]]] = {}
    for cta in w.ctas:
        actors[f"producer{cta.rank}"] = (cta, produce(w, cta))
        for c in range(CONSUMERS):
            actors[f"consumer{cta.rank}.{c}"] = (cta, consume(w, cta, c, batches[cta.rank, c]))
    done: set[str] = set()
    for _ in range(200_000):
        events: list[tuple[str, object]] = [("actor", n) for n in actors if n not in done]
        events += [("copy", i) for i in range(len(w.copies))]
        events += [("arrival", i) for i in range(len(w.arrivals))]
        events += [("batch", key) for key, b in batches.items() if b]
        if not events:
            break  # everything finished
        kind, what = rng.choice(events)
        if kind == "actor":
            cta, actor = actors[what]  # type: ignore[index]
            try:
                next(actor)
            except StopIteration:
                done.add(what)  # type: ignore[arg-type]
                cta.done.add(what)  # type: ignore[arg-type]
                if len(cta.done) == 1 + CONSUMERS:
                    cta.exited = True
        elif kind == "copy":
            w.land(w.copies.pop(what))  # type: ignore[call-overload]
        elif kind == "arrival":
            _, dest, slot = w.arrivals.pop(what)  # type: ignore[call-overload]
            w.deliver(dest, slot)
        else:  # the oldest batch of that consumer completes
            r, c = what  # type: ignore[misc]
            s = batches[r, c].pop(0)
            w.ctas[r].readers[s] -= 1
    else:
        pytest.fail(f"stages={stages} k_tiles={k_tiles} cluster={cluster} tiles={w.tiles} "
                    f"seed={seed}: no progress (deadlock)")  # fmt: skip
    if len(done) < len(actors):
        pytest.fail(f"stages={stages} k_tiles={k_tiles} cluster={cluster} tiles={w.tiles} "
                    f"seed={seed}: deadlock, stuck: {sorted(set(actors) - done)}")  # fmt: skip
    # Every phase of every `full` barrier: announced exactly A + B, and got exactly the bytes
    # of its own stream item (no early or late copy counted in the wrong phase).
    stream = w.stream()
    for cta in w.ctas:
        for s, bar in enumerate(cta.full):
            for p, (announced, landed) in enumerate(bar.completed):
                item = stream[p * stages + s]
                check(announced == A_BYTES + B_BYTES, f"CTA {cta.rank} slot {s} phase {p}: "
                      f"announced {announced}")  # fmt: skip
                check(
                    all(i == item for i, _ in landed) and sum(n for _, n in landed) == announced,
                    f"CTA {cta.rank} slot {s} phase {p} ({item}) completed on {landed}",
                )
            check(len(bar.completed) == len(range(s, len(stream), stages)), f"CTA {cta.rank} "
                  f"slot {s}: {len(bar.completed)} phases completed")  # fmt: skip


K_TILES = lambda stages: (1, 2, stages - 1, stages, stages + 1, 3 * stages + 2, 17)  # noqa: E731


@pytest.mark.parametrize("stages", [2, 3, 4, 5, 6, 8])
def test_protocol_never_deadlocks_nor_overwrites_a_slot_in_use(stages, seed):
    for k_tiles in K_TILES(stages):
        for rep in range(20):
            run(stages, k_tiles, seed * 1000 + rep)


@pytest.mark.parametrize("stages", [2, 3, 4, 5, 6, 8])
def test_cluster_protocol_never_deadlocks_nor_overwrites_either_cta(stages, seed):
    """Two CTAs, B multicast in halves, consumers releasing both CTAs' slots: no deadlock, no
    slot of either CTA refilled while its wgmma reads it, exact bytes per phase, no arrival or
    copy after a CTA exits."""
    for k_tiles in K_TILES(stages):
        for rep in range(20):
            run(stages, k_tiles, seed * 1000 + rep, cluster=2)


# (k tiles, tiles) of the persistent runs: one k tile (every tile a single slot, the ring
# turning over tile by tile), fewer k tiles than slots, a ring's worth, more, and 1-4 tiles.
PERSISTENT_STREAMS = lambda stages: [  # noqa: E731
    (k_tiles, tiles)
    for k_tiles in (1, 2, stages - 1, stages, stages + 1, 2 * stages + 1)
    for tiles in (1, 2, 3, 4)
]


@pytest.mark.parametrize("cluster", [1, 2])
@pytest.mark.parametrize("stages", [2, 3, 4, 5, 6, 8])
def test_persistent_stream_never_deadlocks_nor_reads_another_tiles_slot(stages, cluster, seed):
    """Several tiles a CTA (both CTAs of a cluster walking the same number), one stream: no
    deadlock, no slot refilled while a wgmma reads it, every slot read holding the (tile,
    k tile) the consumer wants, each `full` phase on exactly its item's bytes."""
    for k_tiles, tiles in PERSISTENT_STREAMS(stages):
        for rep in range(8):
            run(stages, k_tiles, seed * 1000 + rep, cluster=cluster, tiles=tiles, persistent=True)


def _fails(match: str, cluster: int = 1, tries: int = 200, k_tiles: int = 7, **kwargs) -> None:
    """Some of `tries` random interleavings of the broken protocol must fail with `match`."""
    errors = []
    for seed in range(tries):
        try:
            run(3, k_tiles, seed, cluster=cluster, **kwargs)
        except (ProtocolError, pytest.fail.Exception) as e:
            errors.append(str(e))
    assert errors, "the model accepted a broken protocol"
    assert any(match in e for e in errors), errors[:3]


def test_the_model_catches_a_wrong_parity():
    """A producer that waits with the full barrier's parity (not phase ^ 1) on empty blocks at
    its first wait: the model must report the deadlock, or the tests above prove nothing."""

    def bad_producer(w: World, cta: Cta) -> Iterator[str]:
        for kt in range(w.k_tiles):
            s, phase = kt % w.stages, (kt // w.stages) & 1
            while not cta.empty[s].passes(phase):
                yield "wait"
            cta.full[s].arrive(tx=w.slot_bytes)
            yield "step"

    with pytest.raises(pytest.fail.Exception, match="deadlock"):
        run(3, 5, 0, producer_fn=bad_producer)
    with pytest.raises(pytest.fail.Exception, match="deadlock"):
        run(3, 5, 0, cluster=2, producer_fn=bad_producer)


def test_the_model_catches_consumers_releasing_only_their_own_cta(monkeypatch):
    """Consumers that arrive only on their own CTA's `empty` barrier (count CONSUMERS): a
    producer refills the peer's slot while the peer's wgmma still reads it."""

    def local_release(w: World, cta: Cta, name: str, slot: int) -> None:
        w.arrivals.append((name, cta.rank, slot))

    monkeypatch.setattr(sys.modules[__name__], "release", local_release)
    _fails("while a wgmma reads it", cluster=2, empty_count=CONSUMERS)


def test_the_model_catches_a_full_barrier_expecting_only_its_own_copies():
    """A `full` barrier announced with A + this CTA's half of B only: the phase completes before
    the peer's half lands (or on the wrong bytes)."""
    _fails("CTA", cluster=2, slot_bytes=A_BYTES + B_BYTES // 2)


def test_the_model_catches_an_exit_without_the_cluster_barrier(monkeypatch):
    """Without the final cluster barrier a CTA may exit while its peer still arrives on it."""

    def no_barrier(w: World, name: str, cta: Cta) -> Iterator[str]:
        yield from ()

    monkeypatch.setattr(sys.modules[__name__], "cluster_barrier", no_barrier)
    _fails("after it exited", cluster=2)


def test_the_model_catches_a_tiles_last_slot_never_released():
    """Persistent consumers that release only slots of k tiles > 0 (the plain kernel's rule,
    which never frees a tile's last slot): the producer waits for it forever once the stream
    laps the ring."""
    plain = functools.partial(consumer, release_last=False)
    for cluster in (1, 2):
        with pytest.raises(pytest.fail.Exception, match="deadlock"):
            run(3, 2, 0, cluster=cluster, tiles=3, persistent=True, consumer_fn=plain)


def test_the_model_catches_a_consumer_restarting_the_ring_each_tile():
    """Consumers that start each tile at slot 0, phase 0 (the ring position not carried over)
    while the producer runs on: they read a slot holding another tile's k tile, or wait for a
    phase that already passed."""
    restarting = functools.partial(consumer, restart=True)
    _fails("wanted (1, 0)", k_tiles=2, tiles=3, persistent=True, consumer_fn=restarting)


def test_the_model_catches_a_producer_restarting_the_ring_each_tile():
    """A producer that starts each tile's copies at slot 0, phase 0 (its counters not carried
    over): it refills slots the consumers still read (or overfills a phase's arrivals)."""
    restarting = functools.partial(producer, restart=True)
    _fails("refilled while a wgmma reads it", k_tiles=2, tiles=3, persistent=True,
           producer_fn=restarting)  # fmt: skip
