"""Train the digit DiT offline in PyTorch (CPU) and write the weights fixture.

Not part of CI. The committed ``weights/dit_digits.safetensors`` came from

    python train.py --steps 6000 --batch 256 --device cuda --no-samples   # about 2 minutes, one GPU
    python train.py --samples-only                                         # MLX CPU: PNG grid

(``--device cpu --threads 2`` works too; 6000 steps then take well over 10 minutes on 2 busy cores.)

Data: scikit-learn's bundled digits (1797 grey 8x8 images, no download), upscaled bilinearly to
16x16 and scaled to [-1, 1]. Objective: rectified flow, ``x_t = (1 - t) x0 + t noise``, the
network predicts the velocity ``noise - x0``. The weights saved are an exponential moving
average of the trained ones. Afterwards the script writes ``weights/SHA256SUMS`` and a PNG grid of
MLX samples (``weights/samples.png``) to look at.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from common import WEIGHTS, Config, update_sums
from torch_twin import TorchDiT


def load_digits_16() -> tuple[np.ndarray, np.ndarray]:
    from scipy.ndimage import zoom
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images.astype(np.float32) / 16.0  # (N, 8, 8) in [0, 1]
    up = np.stack([zoom(img, 2, order=1, mode="nearest", grid_mode=True) for img in images])
    return np.clip(up, 0.0, 1.0).astype(np.float32) * 2.0 - 1.0, digits.target.astype(np.int64)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=WEIGHTS)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-samples", action="store_true", help="skip the MLX sample grid")
    parser.add_argument("--samples-only", action="store_true", help="only draw the sample grid")
    args = parser.parse_args()
    if args.samples_only:
        save_sample_grid(args.out, args.out.parent / "samples.png")
        return

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    images, labels = load_digits_16()
    device = torch.device(args.device)
    data, targets = torch.from_numpy(images).to(device), torch.from_numpy(labels).to(device)

    config = Config()
    model = TorchDiT(config)
    model.init_for_training(args.seed)
    model.to(device)
    ema = TorchDiT(config).to(device)
    ema.load_state_dict(model.state_dict())
    ema.requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    warmup = 200
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            min(1.0, (s + 1) / warmup) * 0.5 * (1 + np.cos(np.pi * min(s, args.steps) / args.steps))
        ),
    )
    gen = torch.Generator(device=device).manual_seed(args.seed)
    start = time.perf_counter()
    running = None
    for step in range(args.steps):
        idx = torch.randint(0, len(data), (args.batch,), generator=gen, device=device)
        x0, y = data[idx], targets[idx]
        noise = torch.randn(x0.shape, generator=gen, device=device)
        t = torch.rand(args.batch, generator=gen, device=device)
        xt = (1 - t[:, None, None]) * x0 + t[:, None, None] * noise
        loss = torch.nn.functional.mse_loss(model(xt, t, y), noise - x0)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        decay = min(0.999, (1 + step) / (10 + step))
        with torch.no_grad():
            torch._foreach_lerp_(list(ema.parameters()), list(model.parameters()), 1 - decay)
        if step % 200 == 0 or step == args.steps - 1:
            running = loss.item() if running is None else 0.5 * running + 0.5 * loss.item()
            print(f"step {step:5d}  loss {running:.4f}  {time.perf_counter() - start:6.1f}s")

    from safetensors.torch import save_file

    args.out.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous() for k, v in ema.state_dict().items()}
    save_file(
        state, str(args.out), metadata={"format": "pt", "config": json.dumps(config.__dict__)}
    )
    update_sums(args.out, args.out.parent / "SHA256SUMS")
    print(
        f"wrote {args.out} ({args.out.stat().st_size} bytes) in {time.perf_counter() - start:.0f}s"
    )
    if not args.no_samples:
        save_sample_grid(args.out, args.out.parent / "samples.png")


def save_sample_grid(weights: Path, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from model import Pipeline, decode, load_model, make_cases

    cases = make_cases(40)
    images = decode(np.array(Pipeline(load_model(weights)).generate(cases)))
    fig, axes = plt.subplots(4, 10, figsize=(10, 4.4))
    for ax, img, case in zip(axes.flat, images, cases):
        ax.imshow(img, cmap="gray", vmin=0, vmax=1)
        ax.set_title(str(case.label), fontsize=8)
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(png, dpi=60)


if __name__ == "__main__":
    main()
