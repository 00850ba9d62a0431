"""DDP training fed by trdata, with exact checkpoint/resume of model, optimizer and loader.

    torchrun --nproc_per_node=N examples/train_ddp.py --data PATH [--model resnet50|tiny] [--steps S]
             [--ckpt-dir DIR] [--save-every K] [--resume] [--stop-at STEP]

Each process is one rank (torchrun sets RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE). trdata takes its rank and
world size from the initialized process group, feeds ``cuda:LOCAL_RANK`` (``device="cuda"``) and uses this
rank's share of the node's cores; without CUDA it runs on the CPU with the gloo backend. Every rank gets the
same number of batches per epoch, so DDP never hangs on a missing all-reduce.

Every step prints ``step, epoch, loss, checksum`` (rank 0; ``--all-ranks`` for every rank): the checksum is a
SHA-1 of the batch's image bytes and indices, so a run stopped (``--stop-at``) and resumed (``--resume``) can be
compared line by line with an uninterrupted one: with ``reproducible=True`` (the default here) the resumed
run feeds byte-identical batches and, the model/optimizer state being restored too, continues the loss curve.
Checkpoints: ``DIR/rank{r}.pt`` = {model, optimizer, loader (trdata ``state_dict``), step}, one per rank,
written atomically every ``--save-every`` steps.
"""

from __future__ import annotations

import argparse
import hashlib
import os
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
    p.add_argument("--model", choices=("resnet50", "tiny"), default="resnet50")
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
    p.add_argument("--resume", action="store_true", help="continue from DIR/rank{r}.pt")
    p.add_argument("--stop-at", type=int, default=None, help="save and exit hard after this step (kill test)")
    p.add_argument("--all-ranks", action="store_true", help="every rank prints its steps")
    return p.parse_args(argv)


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

    return torchvision.models.resnet50(num_classes=num_classes)


def checksum(images: torch.Tensor, indices) -> str:
    h = hashlib.sha1(images.detach().contiguous().cpu().numpy().tobytes())
    h.update(bytes(memoryview(indices.astype("int64"))))
    return h.hexdigest()[:16]


def save(path: str, state: dict) -> None:
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)  # a kill during the write never leaves a torn checkpoint


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")

    size = args.image_size or (64 if args.model == "tiny" else 224)
    source = trdata.ImageFolder(args.data)
    loader = trdata.Loader(
        source,
        batch_size=args.batch_size,
        transforms=[trdata.RandomResizedCrop(size), trdata.RandomHorizontalFlip()],
        normalize=trdata.IMAGENET,
        dtype="float32",
        workers=args.workers,
        shuffle=True,
        seed=args.seed,
        reproducible=not args.fast,
        last_batch="drop",
        device="cuda" if cuda else "cpu",  # cuda → cuda:LOCAL_RANK; rank/world_size from the process group
    )
    assert (loader.rank, loader.world_size) == (rank, world)

    torch.manual_seed(args.seed)
    model = build_model(args.model, len(source.classes)).to(device)
    model = DDP(model, device_ids=[local_rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    ckpt = os.path.join(args.ckpt_dir, f"rank{rank}.pt")
    step = 0
    if args.resume:
        state = torch.load(ckpt, map_location=device, weights_only=False)
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
            ckpt,
            {
                "model": model.module.state_dict(),
                "optimizer": opt.state_dict(),
                "loader": loader.state_dict(),
                "step": step,
            },
        )

    epoch = loader.epoch  # 0, or the epoch a resumed loader continues
    t0 = time.perf_counter()
    while step < args.steps:
        loader.set_epoch(epoch)  # same epoch on every rank → same plan, own shard
        for batch in loader:
            if cuda:
                images, labels = batch.images, batch.labels  # already on cuda:LOCAL_RANK
            else:
                images, labels = batch.torch()
            loss = F.cross_entropy(model(images), labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if rank == 0 or args.all_ranks:
                print(
                    f"rank {rank} step {step} epoch {batch.epoch} loss {loss.item():.6f} "
                    f"checksum {checksum(images, batch.indices)}",
                    flush=True,
                )
            if step % args.save_every == 0 or step == args.stop_at:
                checkpoint()  # loader state at this boundary: this batch counts as delivered
            if step == args.stop_at:
                dist.barrier()  # every rank's checkpoint is on disk
                sys.stdout.flush()
                os._exit(0)  # simulate a kill: no cleanup
            if step >= args.steps:
                break
        epoch += 1
    checkpoint()
    if rank == 0:
        print(f"done: {step} steps in {time.perf_counter() - t0:.1f} s", flush=True)
    loader.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
