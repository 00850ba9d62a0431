"""DDP training fed by trdata, with exact checkpoint/resume of model, optimizer and loader.

    torchrun --nproc_per_node=N examples/train_ddp.py --data PATH [--model resnet50|resnet18|tiny] [--steps S]
             [--ckpt-dir DIR] [--save-every K] [--resume] [--stop-at STEP]
             [--feed trdata|synthetic|dataloader] [--bf16] [--decode MODE] [--pin MODE] [--rate] [--numa-report]
             [--repeat K]

Each process is one rank (torchrun sets RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE). trdata takes its rank and
world size from the initialized process group, feeds ``cuda:LOCAL_RANK`` (``device="cuda"``) and uses this
rank's share of the node's cores; without CUDA it runs on the CPU with the gloo backend. Every rank gets the
same number of batches per epoch, so DDP never hangs on a missing all-reduce.

Every step prints ``step, epoch, loss, checksum`` (rank 0; ``--all-ranks`` for every rank): the checksum is a
SHA-1 of the batch's image bytes and indices, so a run stopped (``--stop-at``) and resumed (``--resume``) can be
compared line by line with an uninterrupted one: with ``reproducible=True`` (the default here) the resumed
run feeds byte-identical batches and, the model/optimizer state being restored too, continues the loss curve.
Checkpoints: ``DIR/rank{r}.step{S}.pt`` = {model, optimizer, loader (trdata ``state_dict``), step}, one per rank,
written atomically every ``--save-every`` steps; each rank keeps its last two, and ``--resume`` continues from the
newest step that *every* rank has on disk (a kill can land between two ranks' writes of the same step).

Throughput (``--rate``, what ``benches/gpu/node_ddp.py`` runs on a node): no per-step lines; the steps after
``--warmup`` are timed and rank 0 prints one ``RATE {json}`` line with every rank's img/s. ``--feed synthetic``
trains on one batch made on the GPU (the ceiling), ``--feed dataloader`` on torch's DataLoader (torchvision
ImageFolder + v2 RandomResizedCrop/flip/normalize, DistributedSampler, ``--dl-workers`` processes per rank,
pin_memory). ``--bf16``: bf16 autocast, channels_last, trdata batches in bf16 NHWC. ``--numa-report``: rank 0
prints, for every rank, where its GPU, its workers' CPUs and its pinned staging memory (``/proc/self/numa_maps``)
are.
``--repeat K``: an epoch is the folder's file list K times over, so a small sample still makes epochs of many
batches (as ``benches/gpu/rn50_train.py --repeat``) instead of restarting the pipeline every batch or two.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import re
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import trdata
from torch.nn.parallel import DistributedDataParallel as DDP


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="ImageFolder root")
    p.add_argument("--model", choices=("resnet50", "resnet18", "tiny"), default="resnet50")
    p.add_argument("--steps", type=int, default=300, help="total optimizer steps (across epochs)")
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--image-size", type=int, default=None, help="crop size (default 224, tiny: 64)")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=None, help="decode threads per rank (default: core share)")
    p.add_argument(
        "--fast", action="store_true", help="reproducible=False (exactly-once, not byte-identical)"
    )
    p.add_argument("--ckpt-dir", default="ckpt-ddp")
    p.add_argument("--save-every", type=int, default=50)
    p.add_argument(
        "--resume", action="store_true", help="continue from the newest checkpoint step every rank has in DIR"
    )
    p.add_argument("--stop-at", type=int, default=None, help="save and exit hard after this step (kill test)")
    p.add_argument("--all-ranks", action="store_true", help="every rank prints its steps")
    p.add_argument("--feed", choices=("trdata", "synthetic", "dataloader"), default="trdata")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast + channels_last (CUDA)")
    p.add_argument("--decode", default="cpu", help="trdata decode= (cpu | gpu | auto | a GPU share)")
    p.add_argument(
        "--pin", default=None, help="trdata pin= (round-robin | numa | none; default: the loader's)"
    )
    p.add_argument(
        "--packed", default=None, help="a trdata.pack file instead of --data's folder (trdata feed)"
    )
    p.add_argument(
        "--rate", action="store_true", help="time the steps after --warmup; rank 0 prints RATE {json}"
    )
    p.add_argument("--warmup", type=int, default=20, help="untimed steps before the --rate window")
    p.add_argument(
        "--dl-workers", type=int, default=None, help="DataLoader processes per rank (default: core share)"
    )
    p.add_argument(
        "--numa-report", action="store_true", help="rank 0 prints every rank's GPU/CPU/memory NUMA placement"
    )
    p.add_argument(
        "--deterministic", action="store_true", help="deterministic algorithms, cuDNN (same losses on resume)"
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="each epoch is the folder's file list K times over (small samples: epochs of many batches)",
    )
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error(f"--repeat must be >= 1, got {args.repeat}")
    if args.repeat > 1 and args.packed:
        p.error("--repeat repeats an ImageFolder's file list; a --packed file is fed as it is")
    if args.rate and not 1 <= args.warmup < args.steps:
        p.error(f"--rate needs 1 <= --warmup ({args.warmup}) < --steps ({args.steps})")
    if args.feed != "trdata" and (args.resume or args.stop_at is not None):
        p.error("--resume/--stop-at need --feed trdata (only trdata's position is checkpointed)")
    return args


class TinyNet(nn.Module):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build_model(name: str, num_classes: int) -> nn.Module:
    if name == "tiny":
        return TinyNet(num_classes)
    import torchvision

    return getattr(torchvision.models, name)(num_classes=num_classes)


def checksum(images: torch.Tensor, indices) -> str:
    t = images.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)  # numpy has no bfloat16: hash the same bits
    h = hashlib.sha1(t.cpu().numpy().tobytes())
    h.update(bytes(memoryview(indices.astype("int64"))))
    return h.hexdigest()[:16]


def core_share() -> int:
    """This rank's share of the node's allowed cores (trdata's own default for its workers)."""
    return max(1, len(os.sched_getaffinity(0)) // int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


class SyntheticFeed:
    """One batch made on the device, served `steps` times (no loader: the model's own rate)."""

    def __init__(
        self, batch: int, size: int, classes: int, device: torch.device, dtype: torch.dtype, steps: int
    ):
        g = torch.Generator().manual_seed(0)
        self.images = torch.randn(batch, 3, size, size, generator=g).to(device, dtype)
        self.labels = torch.randint(0, classes, (batch,), generator=g).to(device)
        self.indices = torch.arange(batch).numpy()
        self.steps, self.epoch = steps, 0

    def __iter__(self):
        for _ in range(self.steps):
            yield self.images, self.labels, self.indices, self.epoch


def dataloader_feed(args, size: int, rank: int, world: int, epoch: int):
    """torch's DataLoader over torchvision's ImageFolder with the v2 recipe, this rank's DistributedSampler shard."""
    import torchvision
    from torch.utils.data import DataLoader, DistributedSampler
    from torchvision.transforms import v2

    tf = v2.Compose(
        [
            v2.RandomResizedCrop(size, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ToImage(),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ]
    )
    ds = torchvision.datasets.ImageFolder(args.data, transform=tf)
    if args.repeat > 1:
        ds = torch.utils.data.ConcatDataset([ds] * args.repeat)
    sampler = DistributedSampler(
        ds, num_replicas=world, rank=rank, shuffle=True, seed=args.seed, drop_last=True
    )
    sampler.set_epoch(epoch)
    workers = args.dl_workers if args.dl_workers is not None else core_share()
    return DataLoader(
        ds,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=workers,
        pin_memory=torch.cuda.is_available(),
        drop_last=True,
        persistent_workers=False,
        prefetch_factor=2 if workers else None,
    )


def numa_report(loader, local_rank: int) -> str:
    """Where this rank's GPU hangs, where its workers may run and where its big anonymous mappings (the pinned
    staging slabs among them) have their pages, by NUMA node."""
    from trdata import _core

    info = _core.machine_info()
    devs = info.get("cuda", {}).get("devices", [])
    gpu_node = devs[local_rank].get("numa_node") if local_rank < len(devs) else None
    cpu_node = {c: n["os_index"] for n in info.get("topology", {}).get("numa_nodes", []) for c in n["cpus"]}
    cpus = sorted(loader.cpus or os.sched_getaffinity(0))
    worker_nodes = sorted({cpu_node.get(c) for c in cpus}, key=str)
    pages: dict[str, int] = {}
    with open("/proc/self/numa_maps") as f:
        for line in f:
            fields = line.split()
            anon = next((int(x[5:]) for x in fields if x.startswith("anon=")), 0)
            if anon * 4096 < 16 << 20:
                continue  # only the big anonymous mappings: staging slabs, caching allocator, model
            for x in fields:
                if re.fullmatch(r"N\d+=\d+", x):
                    node, n = x[1:].split("=")
                    pages[node] = pages.get(node, 0) + int(n)
    where = f"cuda:{local_rank} on node {gpu_node}" if devs else "no GPU"
    return (
        f"NUMA rank {os.environ.get('RANK', '0')}: {where}; workers {loader.workers} "
        f"on CPUs {cpus[0]}-{cpus[-1]} ({len(cpus)}) = nodes {worker_nodes}; anonymous mappings >= 16 MiB, pages "
        f"by node {dict(sorted(pages.items()))}"
    )


def save(ckpt_dir: str, rank: int, state: dict) -> None:
    """Write rank's checkpoint of state["step"]; keep it and the one before."""
    path = os.path.join(ckpt_dir, f"rank{rank}.step{state['step']}.pt")
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)  # a kill during the write never leaves a torn checkpoint
    for old in saved_steps(ckpt_dir, rank)[:-2]:
        os.remove(os.path.join(ckpt_dir, f"rank{rank}.step{old}.pt"))


def saved_steps(ckpt_dir: str, rank: int) -> list[int]:
    """Steps of rank's complete checkpoints in ckpt_dir, ascending."""
    pattern = re.compile(rf"rank{rank}\.step(\d+)\.pt$")
    names = os.listdir(ckpt_dir) if os.path.isdir(ckpt_dir) else []
    return sorted(int(m.group(1)) for m in map(pattern.match, names) if m)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before the first cuBLAS call
        torch.use_deterministic_algorithms(True, warn_only=True)
    if cuda:
        torch.cuda.set_device(local_rank)
        torch.backends.cudnn.benchmark = not args.deterministic
        torch.backends.cudnn.deterministic = args.deterministic
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    bf16 = args.bf16 and cuda
    if args.bf16 and not cuda and rank == 0:
        print("note: --bf16 applies on CUDA only; this CPU run trains in float32", flush=True)

    size = args.image_size or (64 if args.model == "tiny" else 224)
    if args.packed:
        source = trdata.Packed(args.packed)
    else:
        folder = trdata.ImageFolder(args.data)
        source = (
            trdata.FileList(folder.paths * args.repeat, folder.labels * args.repeat, classes=folder.classes)
            if args.repeat > 1
            else folder
        )
    loader = trdata.Loader(
        source,
        batch_size=args.batch_size,
        transforms=[trdata.RandomResizedCrop(size), trdata.RandomHorizontalFlip()],
        normalize=trdata.IMAGENET,
        dtype="bfloat16" if bf16 else "float32",
        layout="NHWC" if bf16 else "NCHW",
        workers=args.workers
        if args.feed == "trdata"
        else 1,  # the other feeds keep only the checkpoint's state
        shuffle=True,
        seed=args.seed,
        reproducible=not args.fast,
        last_batch="drop",
        device="cuda" if cuda else "cpu",  # cuda → cuda:LOCAL_RANK; rank/world_size from the process group
        decode=args.decode if cuda else "cpu",
        **({"pin": args.pin} if args.pin else {}),
    )
    assert (loader.rank, loader.world_size) == (rank, world)
    if args.numa_report:
        next(iter(loader))  # the staging slabs exist once a batch was made
        # Rank 0 prints every rank's line: ranks that share one stdout pipe can glue their lines together (with
        # PYTHONUNBUFFERED set, print writes the text and the "\n" in two write()s), and node_ddp.py reads by line.
        reports: list = [None] * world
        dist.all_gather_object(reports, numa_report(loader, local_rank))
        if rank == 0:
            print("\n".join(reports), flush=True)

    torch.manual_seed(args.seed)
    model = build_model(args.model, len(source.classes)).to(device)
    if bf16:
        model = model.to(memory_format=torch.channels_last)
    model = DDP(model, device_ids=[local_rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    step = 0
    if args.resume:
        mine: list = [None] * world
        dist.all_gather_object(mine, saved_steps(args.ckpt_dir, rank))
        common = set.intersection(*(set(s) for s in mine))
        if not common:
            raise SystemExit(f"--resume: no checkpoint step that every rank has in {args.ckpt_dir} ({mine})")
        path = os.path.join(args.ckpt_dir, f"rank{rank}.step{max(common)}.pt")
        state = torch.load(path, map_location=device, weights_only=False)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        loader.load_state_dict(state["loader"])
        step = state["step"]
        if rank == 0:
            print(
                f"resumed at step {step}: epoch {state['loader']['epoch']}, batch {state['loader']['batches']}",
                flush=True,
            )
    os.makedirs(args.ckpt_dir, exist_ok=True)

    def checkpoint() -> None:
        save(
            args.ckpt_dir,
            rank,
            {
                "model": model.module.state_dict(),
                "optimizer": opt.state_dict(),
                "loader": loader.state_dict(),
                "step": step,
            },
        )

    def batches(epoch: int):
        """(images, labels, indices, epoch) of one epoch of the chosen feed, on `device`."""
        if args.feed == "synthetic":
            dtype = torch.bfloat16 if bf16 else torch.float32
            yield from SyntheticFeed(args.batch_size, size, len(source.classes), device, dtype, args.steps)
        elif args.feed == "dataloader":
            for images, labels in dataloader_feed(args, size, rank, world, epoch):
                yield images.to(device, non_blocking=True), labels.to(device, non_blocking=True), None, epoch
        else:
            loader.set_epoch(epoch)  # same epoch on every rank → same plan, own shard
            for batch in loader:
                if cuda:
                    images = batch.images  # already on cuda:LOCAL_RANK
                    if bf16:
                        images = images.permute(0, 3, 1, 2)  # NHWC storage = channels_last NCHW view, no copy
                    yield images, batch.labels, batch.indices, batch.epoch
                else:
                    images, labels = batch.torch()
                    yield images, labels, batch.indices, batch.epoch

    epoch = loader.epoch  # 0, or the epoch a resumed loader continues
    t0 = time.perf_counter()
    timed = None  # (steps, time) at the start of the --rate window
    while step < args.steps:
        for images, labels, indices, batch_epoch in batches(epoch):
            if bf16:
                images = images.to(memory_format=torch.channels_last)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                loss = F.cross_entropy(model(images), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if args.rate:
                if step == args.warmup:
                    if cuda:
                        torch.cuda.synchronize()
                    timed = (step, time.perf_counter())
            elif rank == 0 or args.all_ranks:
                digest = checksum(images, indices) if indices is not None else "-"
                print(
                    f"rank {rank} step {step} epoch {batch_epoch} loss {loss.item():.6f} checksum {digest}",
                    flush=True,
                )
            if not args.rate and (step % args.save_every == 0 or step == args.stop_at):
                checkpoint()  # loader state at this boundary: this batch counts as delivered
            if step == args.stop_at:
                dist.barrier()  # every rank's checkpoint is on disk
                sys.stdout.flush()
                os._exit(0)  # simulate a kill: no cleanup
            if step >= args.steps:
                break
        epoch += 1
    if cuda:
        torch.cuda.synchronize()
    if args.rate:
        if timed is None:
            raise SystemExit(f"--rate needs --steps ({args.steps}) > --warmup ({args.warmup})")
        mine = (step - timed[0]) * args.batch_size / (time.perf_counter() - timed[1])
        rates: list = [None] * world
        dist.all_gather_object(rates, mine)
        if rank == 0:
            info = dict(
                model=args.model,
                feed=args.feed,
                world=world,
                batch=args.batch_size,
                bf16=bf16,
                decode=args.decode,
                timed_steps=step - timed[0],
                per_rank=[round(r, 1) for r in rates],
                per_gpu_mean=round(sum(rates) / world, 1),
                per_gpu_min=round(min(rates), 1),
                total=round(sum(rates), 1),
                workers=loader.workers if args.feed == "trdata" else None,
            )
            print("RATE " + json.dumps(info), flush=True)
    else:
        checkpoint()
    if rank == 0:
        print(f"done: {step} steps in {time.perf_counter() - t0:.1f} s", flush=True)
    loader.close()
    dist.barrier()  # no rank tears the group down while another is still in a collective
    # DDP's reducer holds the process group: drop it (and the optimizer) so that destroy_process_group tears gloo's
    # threads down here, while the interpreter is whole, and not during its finalization, where a gloo thread still
    # holding work can abort the process ("terminate called without an active exception", seen once in CI).
    model = opt = None
    gc.collect()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    # Everything was closed above; skip interpreter finalization, where torch.distributed's C++ threads can still
    # abort a process that has finished its work (see the comment before destroy_process_group).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
