"""Distributed behaviour without torch: ranks as separate OS processes (multiprocessing, spawn), torchrun-style
environment defaults and CPU shares, and exact resume across a killed process."""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import pickle
import random
import sys
from collections import Counter
from pathlib import Path

import pytest
import trdata

SPAWN = mp.get_context("spawn")
BATCH = 4
N = 50  # 50 samples: uneven over 3 and 4 ranks, and over the batch size → fillers and a short/padded tail


def _loader(paths, **kw):
    kw.setdefault("transforms", [trdata.RandomResizedCrop(32), trdata.RandomHorizontalFlip()])
    kw.setdefault("batch_size", BATCH)
    kw.setdefault("workers", 2)
    kw.setdefault("dtype", "uint8")
    kw.setdefault("shuffle", True)
    kw.setdefault("seed", 11)
    return trdata.Loader(trdata.FileList(paths, list(range(len(paths)))), **kw)


def _digest(batch) -> list:
    """(indices, valid, per-row sha1) of a batch."""
    rows = [hashlib.sha1(batch.images[i].tobytes()).hexdigest() for i in range(len(batch))]
    return [batch.indices.tolist(), batch.valid, rows, batch.epoch]


def _consume_epoch(args) -> list:
    """Child process: rank r of W consumes one epoch; returns its batch digests."""
    paths, kw = args
    with _loader(paths, **kw) as loader:
        return [_digest(b) for b in loader]


def _run_batches(loader, count: int) -> list:
    """Digests of the next `count` batches, crossing epoch ends (a resumed loader finishes its epoch first)."""
    out: list = []
    while len(out) < count:
        for b in loader:
            out.append(_digest(b))
            if len(out) == count:
                break
    return out


def _interrupted(paths, kw, k, state_path, out_path) -> None:
    """Child: take k batches of epoch 0, save state_dict and die without cleanup (as if killed)."""
    loader = _loader(paths, **kw)
    got = []
    if k:
        for b in loader:
            got.append(_digest(b))
            if len(got) == k:
                break
    state = loader.state_dict()
    Path(state_path).write_bytes(pickle.dumps(state))
    Path(out_path).write_bytes(pickle.dumps(got))
    os._exit(0)


def _resumed(paths, kw, count, state_path, out_path) -> None:
    """Child: a fresh loader loads the state and delivers the next `count` batches."""
    with _loader(paths, **kw) as loader:
        loader.load_state_dict(pickle.loads(Path(state_path).read_bytes()))
        got = _run_batches(loader, count)
    Path(out_path).write_bytes(pickle.dumps(got))


def _in_child(target, *args) -> None:
    p = SPAWN.Process(target=target, args=args)
    p.start()
    p.join(120)
    assert p.exitcode == 0, f"child {target.__name__} failed with exit code {p.exitcode}"


@pytest.fixture(scope="module")
def pool():
    with SPAWN.Pool(4) as p:
        yield p


@pytest.fixture(scope="module")
def paths(small_paths):
    return small_paths[:N]


@pytest.mark.parametrize("last_batch", ["drop", "pad", "partial"])
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_ranks_in_processes_cover_the_epoch_exactly_once(pool, paths, world_size, last_batch):
    kw = [
        dict(rank=r, world_size=world_size, last_batch=last_batch, reproducible=r % 2 == 0)
        for r in range(world_size)
    ]
    epochs = pool.map(_consume_epoch, [(paths, k) for k in kw], chunksize=1)
    assert len({len(e) for e in epochs}) == 1, "every rank yields the same number of batches (no DDP hang)"
    seen: list[int] = []
    crops: dict[int, str] = {}
    for epoch in epochs:
        for indices, valid, rows, _ in epoch:
            if last_batch != "partial":
                assert len(indices) == BATCH
            seen.extend(indices[:valid])
            assert set(indices[valid:]) <= set(range(N)), "filling rows repeat real samples"
            for i, h in zip(indices, rows):
                assert crops.setdefault(i, h) == h, "a sample's crop depends on (seed, epoch, sample) only"
    if last_batch == "drop":
        assert len(seen) == len(set(seen))
        # Each rank drops at most its short tail.
        assert len(seen) >= N - world_size * (BATCH - 1) - world_size
    else:
        assert sorted(seen) == list(range(N))


def test_same_sample_same_crop_on_any_world_size(pool, paths):
    """Reproducibility across topologies: W=1 and W=3 give every sample the same augmentation."""
    one = pool.apply(_consume_epoch, ((paths, dict(rank=0, world_size=1, reproducible=True)),))
    three = pool.map(_consume_epoch, [(paths, dict(rank=r, world_size=3)) for r in range(3)], chunksize=1)
    crop = lambda epochs: {i: h for e in epochs for idx, v, rows, _ in e for i, h in zip(idx[:v], rows[:v])}  # noqa: E731
    assert crop([one]) == crop(three)


_ENV_PROBE = r"""
import json, os, sys
import trdata
paths = json.loads(sys.argv[1])
loader = trdata.Loader(trdata.FileList(paths, list(range(len(paths)))), batch_size=4,
                       transforms=[trdata.CenterCrop(16)], dtype="uint8")
seen = [i for b in loader for i in b.indices[:b.valid].tolist()]
pinned = set()
for task in os.listdir("/proc/self/task"):
    try:
        comm = open(f"/proc/self/task/{task}/comm").read().strip()
        if comm.startswith("trdata-w"):
            line = [l for l in open(f"/proc/self/task/{task}/status") if l.startswith("Cpus_allowed_list")][0]
            pinned.add(line.split(":")[1].strip())
    except OSError:
        pass
print(json.dumps(dict(rank=loader.rank, world_size=loader.world_size, workers=loader.workers, cpus=loader.cpus,
                      seen=seen, pinned=sorted(pinned), torch="torch" in sys.modules)))
"""


def _probe(paths, env: dict) -> dict:
    import json
    import subprocess

    full = {
        k: v
        for k, v in os.environ.items()
        if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
    }
    full.update(env)
    out = subprocess.run(
        [sys.executable, "-c", _ENV_PROBE, json.dumps(paths)],
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _expand(cpu_list: str) -> set[int]:
    cpus: set[int] = set()
    for part in cpu_list.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def test_env_defaults_give_the_shard_and_disjoint_cpu_shares(paths):
    allowed = sorted(os.sched_getaffinity(0))
    results = [
        _probe(paths, dict(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2"))
        for r in range(2)
    ]
    for r, res in enumerate(results):
        assert (res["rank"], res["world_size"]) == (r, 2)
        assert not res["torch"], "trdata never imports torch to find the rank"
        assert res["workers"] == len(res["cpus"]) >= 1
        # Every worker thread is bound inside this rank's share.
        for p in res["pinned"]:
            assert _expand(p) <= set(res["cpus"])
    a, b = (set(r["cpus"]) for r in results)
    if len(allowed) >= 2:
        assert not a & b, "ranks of one node never share cores"
        assert a | b == set(allowed)
    # The shards: disjoint, and together the whole epoch (default last_batch='partial').
    assert not set(results[0]["seen"]) & set(results[1]["seen"])
    assert sorted(results[0]["seen"] + results[1]["seen"]) == list(range(N))
    # Explicit arguments win over the environment; without any, rank 0 of 1.
    alone = _probe(paths, {})
    assert (alone["rank"], alone["world_size"]) == (0, 1) and sorted(alone["seen"]) == list(range(N))
    assert alone["cpus"] == allowed


def test_torch_distributed_wins_over_env(paths, tmp_path):
    pytest.importorskip("torch")
    code = r"""
import os, sys, json
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
import trdata
os.environ.update(RANK="3", WORLD_SIZE="5")
paths = json.loads(sys.argv[2])
l = trdata.Loader(trdata.FileList(paths, list(range(len(paths)))), batch_size=4, transforms=[trdata.CenterCrop(16)])
e = trdata.Loader(trdata.FileList(paths, list(range(len(paths)))), batch_size=4, rank=1, world_size=2,
                 transforms=[trdata.CenterCrop(16)])
print(l.rank, l.world_size, e.rank, e.world_size)
dist.destroy_process_group()
"""
    import json
    import subprocess

    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "pg"), json.dumps(paths)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0", "1", "1", "2"]


RESUME_CASES = [
    dict(reproducible=True, world_size=1, rank=0, last_batch="partial"),
    dict(reproducible=False, world_size=1, rank=0, last_batch="partial"),
    dict(reproducible=False, world_size=3, rank=2, last_batch="pad"),
    dict(reproducible=True, world_size=2, rank=1, last_batch="drop"),
]


@pytest.mark.parametrize("case", range(len(RESUME_CASES)))
def test_kill_and_resume_matches_the_uninterrupted_run(paths, tmp_path, case):
    kw = dict(RESUME_CASES[case], workers=3)
    with _loader(paths, **kw) as loader:
        n = len(loader)
        reference = _run_batches(loader, 2 * n)  # epochs 0 and 1, uninterrupted
    rng = random.Random(case)
    for k in sorted({0, n, *rng.sample(range(1, n), 2)}):
        state, first, rest = (tmp_path / f"{k}.{name}" for name in ("state", "first", "rest"))
        _in_child(_interrupted, paths, kw, k, str(state), str(first))
        _in_child(_resumed, paths, kw, 2 * n - k, str(state), str(rest))
        got = pickle.loads(first.read_bytes()) + pickle.loads(rest.read_bytes())
        assert len(got) == 2 * n
        assert [g[3] for g in got] == [r[3] for r in reference], f"k={k}: epochs continue e, e+1"
        if kw["reproducible"]:
            assert got == reference, f"k={k}: the resumed stream is byte-identical"
        else:
            for e in (0, 1):
                mine = [(i, h) for g in got if g[3] == e for i, h in zip(g[0][: g[1]], g[2][: g[1]])]
                ref = [(i, h) for r in reference if r[3] == e for i, h in zip(r[0][: r[1]], r[2][: r[1]])]
                assert Counter(mine) == Counter(ref), f"k={k}, epoch {e}: every sample exactly once"
                assert len({i for i, _ in mine}) == len(mine)
            assert [len(g[0]) for g in got] == [len(r[0]) for r in reference]
            assert [g[1] for g in got] == [r[1] for r in reference]


def test_load_state_dict_validates_the_fingerprint(paths):
    with _loader(paths, world_size=2, rank=0) as loader:
        it = iter(loader)
        next(it)
        sd = loader.state_dict()
    assert sd["version"] == 1 and sd["epoch"] == 0 and sd["batches"] == 1
    assert sd["fingerprint"]["world_size"] == 2 and len(sd["delivered"]) == 1  # fast mode: a bitmap
    for field, kw in (
        ("world_size", dict(world_size=3)),
        ("rank", dict(rank=1, world_size=2)),
        ("batch_size", dict(world_size=2, batch_size=5)),
        ("last_batch", dict(world_size=2, last_batch="drop")),
        ("reproducible", dict(world_size=2, reproducible=True)),
        ("seed", dict(world_size=2, seed=1)),
        ("shuffle", dict(world_size=2, shuffle=False)),
    ):
        with _loader(paths, **kw) as other, pytest.raises(trdata.ConfigError, match=field):
            other.load_state_dict(sd)
    with _loader(paths[:-1], world_size=2) as other, pytest.raises(trdata.ConfigError, match="num_samples"):
        other.load_state_dict(sd)
    with _loader(paths, world_size=2) as other, pytest.raises(trdata.ConfigError, match="state_dict"):
        other.load_state_dict({"version": 1})
    with _loader(paths, world_size=2) as other:
        other.load_state_dict(sd)
        assert other.state_dict() == sd  # a loaded, not yet started state is saved unchanged
        other.set_epoch(3)  # another epoch discards the resume point
        assert (other.state_dict()["epoch"], other.state_dict()["batches"]) == (3, 0)


def test_corrupted_fast_mode_bitmap_is_rejected_not_a_hang(paths):
    """A bitmap with the right number of bits but the wrong ones (a real sample swapped for a pad row) would
    make workers write outside the remaining slots; it must be a ConfigError naming `delivered`."""
    files = paths[:42]  # 42 samples, batch 4, pad → 44 rows: rows 42, 43 are pad rows (the tail [R, T))
    with _loader(files, last_batch="pad") as loader:
        it = iter(loader)
        for _ in range(3):
            next(it)
        sd = loader.state_dict()
    bitmap = bytearray(sd["delivered"][0])
    first_set = next(i for i in range(42) if bitmap[i // 8] >> (i % 8) & 1)
    bitmap[first_set // 8] &= ~(1 << (first_set % 8))
    bitmap[42 // 8] |= 1 << (42 % 8)
    bad = dict(sd, delivered=[bytes(bitmap)])
    with _loader(files, last_batch="pad") as other:
        with pytest.raises(trdata.ConfigError, match="delivered"):
            other.load_state_dict(bad)
        other.load_state_dict(sd)  # the genuine one still loads and finishes the epoch exactly once
        rest = [i for b in other for i in b.indices[: b.valid].tolist()]
    assert len(rest) == 42 - 12 and len(set(rest)) == len(rest)
