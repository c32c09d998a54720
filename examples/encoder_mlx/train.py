"""Offline training of the decision model (PyTorch on CPU), then conversion to safetensors.

Never run in CI. The exact command the committed weights come from:

    python train.py --steps 3000 --threads 2

It writes ``weights/tokenizer.json`` (tokenizers' WordLevel over the item text's closed
vocabulary), ``weights/config.json``, ``weights/encoder_digits.safetensors`` and
``weights/train.log`` (loss and validation accuracy as training went). Training sees only the
training images of ``data.split()`` (150 of them kept apart for the validation line of the
log); every step draws fresh questions about them (1 to 5 candidate digits, one random rubric
per batch).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import data  # noqa: E402
from model import CONFIG, WEIGHTS, Config  # noqa: E402

RUBRIC_P = (0.5, 0.3, 0.15, 0.05)


def draw_items(images, digits, idx, rng, rubric=None):
    """Questions about images ``idx``: 1..5 options; one rubric for all (a batch has no padding
    waste) or, with ``rubric=None``, a random one per item."""
    items = []
    for i in idx:
        n = int(rng.integers(1, data.MAX_OPTIONS + 1))
        r = int(rng.choice(len(data.RUBRICS), p=RUBRIC_P)) if rubric is None else rubric
        items.append(data.make_item(images[i], digits[i], rng, n, r))
    return items


def tensors(tokenizer, items):
    import torch

    batch = data.collate(data.prepare_items(tokenizer, items))
    return (
        torch.from_numpy(batch.ids.astype(np.int64)),
        torch.from_numpy(batch.lengths.astype(np.int64)),
        torch.from_numpy(batch.markers.astype(np.int64)),
        torch.from_numpy(batch.marker_mask),
        torch.from_numpy(batch.features),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    from safetensors.numpy import save_file
    from torch_twin import TorchDecisionModel, state_for_mlx

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    tok_path = data.TOKENIZER_PATH
    tok_path.parent.mkdir(exist_ok=True)
    data.build_tokenizer().save(str(tok_path))
    tokenizer = data.load_tokenizer(tok_path)
    cfg = Config(vocab_size=tokenizer.get_vocab_size())
    CONFIG.write_text(json.dumps(cfg.to_json(), indent=2) + "\n")

    images, digits = data.digits()
    train_idx, _ = data.split()  # the held-out images are never read here
    train_idx, val_idx = train_idx[:-150], train_idx[-150:]
    eval_items = draw_items(images, digits, val_idx, np.random.default_rng(1234))

    model = TorchDecisionModel(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.steps)
    log = open(HERE / "weights" / "train.log", "w")
    start = time.time()
    for step in range(1, args.steps + 1):
        model.train()
        idx = rng.choice(train_idx, size=args.batch, replace=False)
        items = draw_items(images, digits, idx, rng, int(rng.choice(len(data.RUBRICS), p=RUBRIC_P)))
        ids, lengths, markers, mmask, feats = tensors(tokenizer, items)
        action, choice = model(ids, lengths, markers, mmask, feats)
        target_a = torch.tensor([it.digit for it in items])
        target_c = torch.tensor([it.answer for it in items])
        loss = F.cross_entropy(action, target_a) + F.cross_entropy(choice, target_c)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 100 == 0 or step == args.steps:
            model.eval()
            with torch.no_grad():
                accs = []
                for s in range(0, len(eval_items), 50):
                    part = eval_items[s : s + 50]
                    a, c = model(*tensors(tokenizer, part))
                    accs.append(
                        (
                            (a.argmax(1).numpy() == [it.digit for it in part]).sum(),
                            (c.argmax(1).numpy() == [it.answer for it in part]).sum(),
                        )
                    )
            acc_a = sum(x[0] for x in accs) / len(eval_items)
            acc_c = sum(x[1] for x in accs) / len(eval_items)
            line = (
                f"step {step} loss {loss.item():.4f} val150 action {acc_a:.3f} "
                f"choice {acc_c:.3f} elapsed {time.time() - start:.0f}s"
            )
            print(line, flush=True)
            log.write(line + "\n")
            log.flush()
    save_file(state_for_mlx(model), str(WEIGHTS))
    log.write(f"command: python train.py {' '.join(sys.argv[1:])}\n")
    log.write(f"torch {torch.__version__}, threads {args.threads}\n")
    log.close()


if __name__ == "__main__":
    main()
