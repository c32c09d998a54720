"""Teach the seeded model to answer the grounding prompt with each case's boxes; rewrite
``model/model.safetensors``.

Not part of CI. The committed weights came from

    python make_model.py && python make_cases.py && python train.py

``make_model.py`` writes the seeded weights; this script then runs ``STEPS`` full-batch AdamW
steps (transformers, float32, CPU, ``torch.manual_seed(SEED)``) on the 16 cases: the prompt
(image + text, the reference's chat template and preprocessing) followed by the case's answer
and ``<|im_end|>``, the loss on the answer's tokens only. The model memorizes the answers (16
images, the training set is the gate's cases): a parity gate needs a model whose greedy answer
is box JSON, not one that generalizes. The loss goes from about 8.9 to about 1e-3 (``model/
train_log.json``). The committed weights are pinned by sha256, not this script's output on
another machine.
"""

from __future__ import annotations

import json
import time

import make_model
import numpy as np
import preprocess
import runners

SEED = 20261205
STEPS = 60
LR = 2e-3


def main() -> None:
    import torch
    from safetensors.torch import load_file, save_file

    torch.manual_seed(SEED)
    ref = runners.TransformersRunner()
    model = ref.model.train()
    image_token = model.config.image_token_id
    batch = []
    for path in sorted(runners.CASES_DIR.glob("*.json")):
        if path.name == "SHA256SUMS.json":
            continue
        case = json.loads(path.read_text())
        pixels, grid = preprocess.process_image(runners.case_image(case), ref.config)
        prompt = ref.prompt(case, grid)
        answer = ref.tokenizer(case["continuation"] + "<|im_end|>", add_special_tokens=False)
        ids = np.concatenate([prompt, np.asarray(answer["input_ids"], dtype=np.int64)])
        labels = ids.copy()
        labels[: len(prompt)] = -100
        batch.append(
            dict(
                input_ids=torch.from_numpy(ids)[None],
                labels=torch.from_numpy(labels)[None],
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                mm_token_type_ids=torch.from_numpy((ids == image_token).astype(np.int64))[None],
                pixel_values=torch.from_numpy(pixels),
                image_grid_thw=torch.from_numpy(grid),
            )
        )
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    log, start = [], time.perf_counter()
    for step in range(STEPS):
        opt.zero_grad()
        total = 0.0
        for inputs in batch:
            loss = model(**inputs).loss
            (loss / len(batch)).backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        log.append({"step": step, "loss": total / len(batch)})
        print(step, f"{total / len(batch):.4g}", flush=True)
    seconds = time.perf_counter() - start
    # the trained values under the committed file's own names (make_model.py's layout)
    path = runners.MODEL_DIR / "model.safetensors"
    names = load_file(str(path))
    trained = {}
    for key, value in model.state_dict().items():
        if key.startswith("lm_head."):
            continue
        key = key.replace("model.visual.", "visual.").replace("model.language_model.", "model.")
        assert key in names, key
        trained[key] = value.detach().contiguous().clone()
    assert set(trained) == set(names)
    save_file(trained, str(path), metadata={"format": "pt"})
    info = dict(steps=STEPS, lr=LR, seed=SEED, cases=len(batch), seconds=round(seconds, 1))
    (runners.MODEL_DIR / "train_log.json").write_text(json.dumps(dict(info, log=log), indent=1))
    make_model.write_sums(runners.MODEL_DIR)
    print(f"trained {STEPS} steps in {seconds:.0f} s; wrote {path}")


if __name__ == "__main__":
    main()
