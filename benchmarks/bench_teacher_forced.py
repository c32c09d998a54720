"""Per-token cost of teacher-forced capture against a plain forward pass, side by side.

Target (issue 21): capturing teacher-forced next-token distributions for a sequence claim costs
at most 1.2x a plain forward pass over the same tokens. Both arms run the lm_port example's
transformers float32 model (torch CPU, eager) on the same token ids, interleaved block by block:

- ``forward``: one forward pass over prompt + continuation, the logits of every position on the
  host (what any runner returning ``logits`` does);
- ``capture``: the same forward pass, then the streaming comparison a sequence claim makes
  (:class:`paritygate.sequence.TeacherForcedAccumulator`: per-position KL, top-1, top-k,
  max-abs against recorded reference logits) and its result.

Prints per-token milliseconds of both arms and the ratio (median of per-block ratios, and the
fastest block of each arm). ``--repeat N`` tiles the case's tokens to a longer sequence (the
model's context is 1024).

    python benchmarks/bench_teacher_forced.py [--blocks 15] [--repeat 4] [--threads 2]
    python benchmarks/bench_teacher_forced.py --memory [--vocab 32000]

``--memory``: no model; the accumulator is fed random logits 64 positions at a time (streaming)
for sequences of 512 to 16384 positions, and tracemalloc reports the peak of memory allocated
while feeding (the 64-position chunks of both sides included) and what the accumulator keeps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "lm_port"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--calls", type=int, default=5, help="calls per block")
    parser.add_argument("--repeat", type=int, default=4, help="tile the tokens this many times")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--case", default="chat-01-split-multi")
    parser.add_argument("--memory", action="store_true", help="streaming memory, no model")
    parser.add_argument("--vocab", type=int, default=32000)
    args = parser.parse_args()
    if args.memory:
        return memory(args.vocab)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from paritygate.sequence import TeacherForcedAccumulator

    torch.set_num_threads(args.threads)
    model_dir = EXAMPLE / "model"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager"
    ).eval()
    case = json.loads((EXAMPLE / "cases" / f"{args.case}.json").read_text())
    text = (
        tokenizer.apply_chat_template(case["messages"], tokenize=False, add_generation_prompt=True)
        if case["kind"] == "chat"
        else case["text"]
    ) + case["continuation"]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] * args.repeat
    ids = torch.tensor([ids[:1024]])
    n = ids.shape[1]

    def forward() -> np.ndarray:
        with torch.no_grad():
            return model(ids).logits[0].numpy()

    reference = forward() + np.float32(1e-4)  # stands for the recorded reference's logits

    def capture() -> None:
        logits = forward()
        acc = TeacherForcedAccumulator(top_k=5)
        acc.add(reference, logits)
        acc.result()

    arms = {"forward": forward, "capture": capture}
    for fn in arms.values():  # warm-up
        fn()
    per_call: dict[str, list[float]] = {a: [] for a in arms}
    ratios = []
    for block in range(args.blocks):
        order = list(arms) if block % 2 == 0 else list(reversed(arms))
        seconds = {}
        for arm in order:
            start = time.perf_counter()
            for _ in range(args.calls):
                arms[arm]()
            seconds[arm] = (time.perf_counter() - start) / args.calls
            per_call[arm].append(seconds[arm])
        ratios.append(seconds["capture"] / seconds["forward"])
    print(
        f"tokens {n}, vocab {reference.shape[1]}, {args.blocks} blocks x {args.calls} calls, "
        f"torch {torch.__version__}, {args.threads} threads"
    )
    for arm in arms:
        med = statistics.median(per_call[arm]) / n * 1e3
        best = min(per_call[arm]) / n * 1e3
        print(f"{arm:8s} median {med:.4f} ms/token  best {best:.4f} ms/token")
    best_ratio = min(per_call["capture"]) / min(per_call["forward"])
    print(f"ratio capture/forward: median {statistics.median(ratios):.3f}x, best {best_ratio:.3f}x")
    return 0


def memory(vocab: int, chunk: int = 64) -> int:
    import tracemalloc

    from paritygate.sequence import TeacherForcedAccumulator

    rng = np.random.default_rng(0)
    base = rng.normal(size=(chunk, vocab)).astype(np.float32) * 3
    noisy = base + rng.normal(scale=1e-3, size=base.shape).astype(np.float32)
    TeacherForcedAccumulator(top_k=5).add(base, noisy)  # numba loaded before tracing
    print(
        f"vocab {vocab}, {chunk} positions per add(), top-5; float32 logits per side per chunk "
        f"{base.nbytes / 2**20:.1f} MiB"
    )
    for n in (512, 2048, 8192, 16384):
        tracemalloc.start()
        acc = TeacherForcedAccumulator(top_k=5)
        for start in range(0, n, chunk):
            ref = base + np.float32(start)  # a fresh chunk per step, as a runner would stream it
            acc.add(ref, noisy + np.float32(start))
            del ref
        result = acc.result()
        kept = sum(a.nbytes for part in acc._parts for a in part)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        full = 2 * n * vocab * 4
        print(
            f"positions {n:6d}: peak {peak / 2**20:7.1f} MiB, kept {kept / 2**10:7.1f} KiB "
            f"({kept / n:.0f} B/position); both sides' full logits would be "
            f"{full / 2**20:8.1f} MiB; kl_max {result.kl_max:.2e}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
