"""Image–text training fed by trdata: a tiny CLIP-style model on WebDataset shards of jpg + txt (+ json), the
layout img2dataset writes for DataComp/LAION.

    python examples/train_clip.py [--shards 'DIR/{000000..000003}.tar'] [--steps 20] [--batch 32] [--size 64]

Without ``--shards`` it first writes 4 small shards of synthetic images with captions (``--make N`` samples) in a
temporary folder. trdata reads the images (RandomResizedCrop + flip, float32, ImageNet normalization) and hands
the ``.txt`` captions over in ``batch.extras["txt"]``; ``batch_transform`` tokenizes them per batch with
Hugging Face ``tokenizers`` (a word-level tokenizer trained on the captions here, so nothing is downloaded; a real
run loads its model's tokenizer with ``Tokenizer.from_pretrained``), in trdata's prefetch thread, off the
training loop. The model: a small conv image tower and a mean-of-embeddings text tower, trained with CLIP's
symmetric InfoNCE loss. Prints ``step, loss`` per step and, at the end, the first loss and the last.
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
from typing import Any

import numpy as np
import torch
import trdata
from PIL import Image
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

COLORS = ["red", "green", "blue", "yellow", "white", "black"]
SHAPES = ["square", "stripe", "frame"]


def caption_image(rng: np.random.Generator) -> tuple[bytes, str]:
    """A synthetic picture and its caption ("a red stripe on black"): the text says what the pixels show."""
    palette = {"red": (220, 30, 30), "green": (30, 200, 60), "blue": (40, 60, 220), "yellow": (230, 220, 40),
               "white": (240, 240, 240), "black": (15, 15, 15)}  # fmt: skip
    fg, bg = rng.choice(len(COLORS), 2, replace=False)
    shape = SHAPES[int(rng.integers(len(SHAPES)))]
    a = np.empty((96, 96, 3), np.uint8)
    a[:] = palette[COLORS[bg]]
    if shape == "square":
        a[28:68, 28:68] = palette[COLORS[fg]]
    elif shape == "stripe":
        a[:, 40:56] = palette[COLORS[fg]]
    else:
        a[8:88, 8:88] = palette[COLORS[fg]]
        a[20:76, 20:76] = palette[COLORS[bg]]
    a = np.clip(a.astype(np.int16) + rng.integers(-12, 13, a.shape), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(a).save(out, "JPEG", quality=90)
    return out.getvalue(), f"a {COLORS[fg]} {shape} on {COLORS[bg]}"


def make_shards(folder: str, n: int, shards: int = 4) -> str:
    """``shards`` tar files of jpg + txt + json members in webdataset's layout; returns their brace pattern."""
    import tarfile

    rng = np.random.default_rng(0)
    per = -(-n // shards)
    for s in range(shards):
        with tarfile.open(os.path.join(folder, f"{s:06d}.tar"), "w") as tar:
            for i in range(s * per, min(n, (s + 1) * per)):
                jpg, text = caption_image(rng)
                meta = f'{{"key": "{i:09d}", "caption": "{text}"}}'.encode()
                for ext, data in (("jpg", jpg), ("txt", text.encode()), ("json", meta)):
                    info = tarfile.TarInfo(f"{i:09d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return os.path.join(folder, f"{{000000..{shards - 1:06d}}}.tar")


def expand(pattern: str) -> list[str]:
    """webdataset's brace expansion of one ``{a..b}`` range (zero-padded as written)."""
    if "{" not in pattern:
        return [pattern]
    head, rest = pattern.split("{", 1)
    span, tail = rest.split("}", 1)
    a, b = span.split("..")
    return [f"{head}{i:0{len(a)}d}{tail}" for i in range(int(a), int(b) + 1)]


def train_tokenizer(captions: list[str]) -> Tokenizer:
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(captions, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]"]))
    tok.enable_padding(pad_id=tok.token_to_id("[PAD]"), pad_token="[PAD]", length=8)
    tok.enable_truncation(8)
    return tok


class TinyCLIP(torch.nn.Module):
    def __init__(self, vocab: int, dim: int = 64) -> None:
        super().__init__()
        self.image = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 5, stride=2, padding=2), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, dim),
        )  # fmt: skip
        self.words = torch.nn.Embedding(vocab, dim, padding_idx=0)
        self.text = torch.nn.Linear(dim, dim)
        self.logit_scale = torch.nn.Parameter(torch.tensor(np.log(1 / 0.07), dtype=torch.float32))

    def forward(self, images: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        img = torch.nn.functional.normalize(self.image(images), dim=-1)
        mask = (ids != 0).unsqueeze(-1).float()
        txt = (self.words(ids) * mask).sum(1) / mask.sum(1).clamp(min=1)
        txt = torch.nn.functional.normalize(self.text(txt), dim=-1)
        logits = self.logit_scale.exp() * img @ txt.t()
        target = torch.arange(len(images))
        return (
            torch.nn.functional.cross_entropy(logits, target)
            + torch.nn.functional.cross_entropy(logits.t(), target)
        ) / 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shards", help="brace pattern or path of jpg+txt shards (default: make synthetic ones)")
    ap.add_argument("--make", type=int, default=512, help="samples of the synthetic shards")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=None)
    args = ap.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        pattern = args.shards or make_shards(tmp, args.make)
        source = trdata.WebDataset(expand(pattern), target_key=None, extras=("txt",), cache_dir=False)
        # the tokenizer's vocabulary: trained on one epoch of captions (a real run loads a pretrained one)
        with trdata.Loader(
            source, batch_size=256, transforms=[trdata.CenterCrop(8)], last_batch="partial"
        ) as scan:
            tokenizer = train_tokenizer([c for b in scan for c in b.extras["txt"]])

        def tokenize(batch: trdata.Batch, _generator: Any) -> tuple[torch.Tensor, torch.Tensor]:
            ids = [e.ids for e in tokenizer.encode_batch(batch.extras["txt"])]
            return torch.from_numpy(np.asarray(batch.images)), torch.tensor(ids, dtype=torch.long)

        loader = trdata.Loader(
            source,
            batch_size=args.batch,
            transforms=[trdata.RandomResizedCrop(args.size, scale=(0.6, 1.0)), trdata.RandomHorizontalFlip()],
            normalize=trdata.IMAGENET,
            dtype="float32",
            shuffle=True,
            workers=args.workers,
            batch_transform=tokenize,
        )
        model = TinyCLIP(tokenizer.get_vocab_size())
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        losses: list[float] = []
        with loader:
            epoch = 0
            while len(losses) < args.steps:
                loader.set_epoch(epoch)
                for images, ids in loader:
                    loss = model(images, ids)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    losses.append(float(loss))
                    print(f"step {len(losses)}, loss {losses[-1]:.4f}", flush=True)
                    if len(losses) == args.steps:
                        break
                epoch += 1
        print(f"first loss {losses[0]:.4f}, last loss {losses[-1]:.4f}")


if __name__ == "__main__":
    main()
