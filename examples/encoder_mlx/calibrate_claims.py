"""Calibrate every claim of both specs on MLX CPU and write bounds and bases (offline).

    python calibrate_claims.py pin        # sha256 pins of weights, config and tokenizer
    python calibrate_claims.py sweep      # write the sweep cases and parity-sweep.toml
    python calibrate_claims.py gpu-spec   # parity-gpu.toml (the sweep on the MLX GPU device)
    python calibrate_claims.py exact      # the five paired exact claims over the sweep
    python calibrate_claims.py agreement  # the stored argmax-agreement claims of parity.toml
    python calibrate_claims.py heldout    # accuracy / agreement / drift / ECE over 600 items
    python calibrate_claims.py crossfit   # those floors fitted on one half, checked on the other
    python calibrate_claims.py            # all of the above, in that order

Then record the references (``paritygate record parity.toml -y``,
``paritygate record parity-heldout.toml -y``) and run both gates.

* Exact claims (compile, pruning, block-local, token batching, prefix cache):
  ``paritygate.calibration.calibrate_claim`` over the correctness sweep (``parity-sweep.toml``:
  lengths around 64 and 128 (the window and the 64-query block edges), batch sizes around the
  16-item chunk, one
  to five options, padding mixes, duplicates), paired in one process, with the built-in output
  mutations and the optimization's planted bug (mutations.py). MLX CPU gives exactly zero noise,
  so calibration proposes byte equality (and would refuse, or propose a bound, where it did not).
* Held-out claims (``heldout``): through ``paritygate.calibration``: accuracy, agreement and
  ECE by ``calibrate_dataset_claim`` (a bootstrap over the 600 independent items, the one-sided
  95 % bound; the planted 2-bit bug must fall beyond it), probability drift by
  ``calibrate_claim`` (stored mode, the 2-bit bug as the model mutation). Paired McNemar (exact
  binomial on the discordant items) and Clopper-Pearson intervals go into
  ``calibration/heldout.json``.
"""

from __future__ import annotations

import json
import math
import platform
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import data  # noqa: E402

SPEC = HERE / "parity.toml"
SWEEP = HERE / "parity-sweep.toml"
HELDOUT = HERE / "parity-heldout.toml"
OUT = HERE / "calibration"
PINNED = ("weights/encoder_digits.safetensors", "weights/config.json", "weights/tokenizer.json")

EXACT_PLANS = {
    "compiled-exact": "stale-checkpoint",
    "pruned-exact": "pruned-without-key-mask",
    "block-local-exact": "window-off-by-one",
    "token-batching-exact": "order-not-restored",
    "prefix-cache-exact": "cache-key-without-options",
}


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def _hardware() -> str:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu or platform.processor()} ({platform.system()} {platform.machine()}), MLX CPU"


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in ("mlx", "numpy", "tokenizers", "scipy")}


# ------------------------------------------------------------------------------------------


def pin() -> None:
    import tomlkit

    for spec in (SPEC, HELDOUT):
        doc = tomlkit.parse(spec.read_text())
        files = doc["runners"]["baseline"]["pins"]["files"]
        for rel in PINNED:
            files[rel] = data.sha256_file(HERE / rel)
        spec.write_text(tomlkit.dumps(doc))
    sums = "".join(f"{data.sha256_file(HERE / rel)}  {Path(rel).name}\n" for rel in PINNED)
    (HERE / "weights" / "SHA256SUMS").write_text(sums)


def sweep_items() -> dict[str, list[data.Item]]:
    """The correctness sweep: held-out images, lengths set by truncating the long rubric."""
    images, digits = data.digits()
    _, held = data.split()
    rng = np.random.default_rng(64)
    pool = iter(int(i) for i in rng.permutation(held))
    base = 39  # [CLS] grid <32 words> question which digit ? [SEP]

    def at_length(length: int, k: int) -> data.Item:
        words = length - base - 2 * k
        assert 0 <= words <= len(data.RUBRICS[3].split()), (length, k)
        i = next(pool)
        item = data.make_item(images[i], digits[i], rng, k, 3)
        return data.Item(item.image, item.options, 3, item.digit, words)

    def short(k: int) -> data.Item:
        i = next(pool)
        return data.make_item(images[i], digits[i], rng, k, 0)

    cases: dict[str, list[data.Item]] = {}
    for length in (63, 64, 65, 66, 100, 127, 128, 129, 130, 175):
        cases[f"len-{length}"] = [at_length(length, 1 + length % 5)]
    for n in (15, 16, 17):
        cases[f"batch-{n}"] = [short(1 + j % 5) for j in range(n)]
    cases["options-1-to-5"] = [at_length(70 + 2 * k, k) for k in range(1, 6)]
    cases["padding-mix"] = [at_length(n, 2) for n in (130, 63, 129, 64, 45)]
    dup = short(3)
    cases["duplicates"] = [dup, short(2), dup, dup]
    return cases


def sweep() -> None:
    """Write calibration/sweep/*.json and parity-sweep.toml (parity.toml over the sweep cases)."""
    folder = HERE / "cases" / "sweep"
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, items in sweep_items().items():
        path = folder / f"{name}.json"
        data.write_items(path, items)
        entries.append(
            f'[cases.{name}]\npath = "cases/sweep/{name}.json"\n'
            f'sha256 = "{data.sha256_file(path)}"\n'
        )
    text = SPEC.read_text()
    start, end = "# --- cases (make_cases.py) ---", "# --- end of cases ---"
    block = "\n".join(entries)
    text = re.sub(
        re.escape(start) + ".*?" + re.escape(end),
        lambda _: f"{start}\n\n{block}\n{end}",
        text,
        flags=re.S,
    )
    text = re.sub(r'^published = \["README.md[^"]*"\].*\n', "", text, flags=re.M)
    header = (
        "# GENERATED by calibrate_claims.py sweep: parity.toml's runners and claims over the\n"
        "# correctness sweep (lengths around 64 and 128: the window and the 64-query block\n"
        "# edges; batch sizes\n"
        "# around the 16-item chunk, one to five options, padding mixes, duplicates).\n"
        "# Run it with `paritygate gate parity-sweep.toml`. Do not edit: edit parity.toml.\n"
    )
    text = text.replace('name = "encoder-mlx"', 'name = "encoder-mlx-sweep"')
    text = text.replace('references = "references"\n', "")
    text = text.replace(
        'name = "encoder-mlx-sweep"', 'name = "encoder-mlx-sweep"\nreferences = "references-sweep"'
    )
    # A one-item sweep case has nothing to reuse in its first call (its rubric cut, options and
    # image are new): the reuse band holds on the workload cases of parity.toml, not here.
    text = text.replace(
        'activity = { calls = "data:PrefixCache.reuse", min = 1,',
        'activity = { calls = "data:PrefixCache.reuse", min = 0,',
    )
    SWEEP.write_text(header + text)


# The GPU calibrations of parity-gpu.toml's exact claims (gpu/run_all_gpu.sh; committed): MLX
# CUDA 0.32.4 on an H200 with TF32 off and at MLX's default (on), and on an H100 at the default.
GPU_CALIBRATIONS = (
    "calibration/gpu-h200/calib-tf32-off.json",
    "calibration/gpu-h200/calib-tf32-default.json",
    "calibration/gpu-h100/calib-exact-tf32-on.json",
)
GPU_CLASS = ("hopper", "*H[12]00*")  # the hardware class the GPU calibrations ran on


def gpu_spec() -> None:
    """parity-gpu.toml: the sweep spec with every runner on the MLX GPU device, its claims under
    the hardware class of the GPUs calibrated (H100 and H200), calibrated from GPU_CALIBRATIONS:
    an exact claim that every calibration proposes as byte equality is calibrated with the basis
    of the latest run at TF32's default; one that any calibration refuses leaves the GPU spec
    (named with its noise in the header), gated there by argmax agreement only."""
    text = SWEEP.read_text()
    text = text.replace('device = "cpu" }', 'device = "gpu" }').replace(
        'device = "cpu"', 'device = "gpu"'
    )
    text = text.replace('name = "encoder-mlx-sweep"', 'name = "encoder-mlx-gpu"')
    text = text.replace('references = "references-sweep"', 'references = "references-gpu"')
    name, pattern = GPU_CLASS
    text = text.replace(
        '[hardware.mlx-cpu]\nsystem = "Linux"\nmachine = "x86_64"',
        f'[hardware.{name}]\nsystem = "Linux"\ngpu = "{pattern}"',
    )
    text = text.replace('hardware = "mlx-cpu"', f'hardware = "{name}"')
    text = re.sub(r'^status = "calibrated"\n', 'status = "provisional"\n', text, flags=re.M)
    text = re.sub(
        r"^\[claims\.[a-z0-9-]+\.basis(?:\.[a-z0-9_-]+)*\]\n(?:[^\[\n][^\n]*\n)*\n?",
        "",
        text,
        flags=re.M,
    )
    runs = [(path, json.loads((HERE / path).read_text())) for path in GPU_CALIBRATIONS]
    keep, dropped = {}, []
    for claim in re.findall(r"^\[claims\.([a-z0-9-]+-exact)\]$", text, flags=re.M):
        results = [(path, run) for path, run in runs if claim in run.get("exact", {})]
        refused = [(path, run) for path, run in results if run["exact"][claim]["refused"]]
        if refused:
            path, run = refused[-1]
            noise = max(run["exact"][claim]["by_metric"]["max_abs"]["noise"])
            dropped.append(f"{claim} (refused: max-abs noise up to {noise:.2g}, {path})")
            text = re.sub(rf"^\[claims\.{claim}\]\n(?:[^\[\n][^\n]*\n)*\n?", "", text, flags=re.M)
        elif results and all(r["exact"][claim]["proposal"] == "exact" for _, r in results):
            path, run = [(p, r) for p, r in results if r.get("tf32") != 0][-1]
            keep[claim] = {**run["exact"][claim]["basis"], "evidence": path}
    header = (
        f"# GENERATED by calibrate_claims.py gpu-spec (MLX GPU device, class {name}): "
        "parity.toml's runners and claims over the\n"
    )
    text = text.replace(
        "# GENERATED by calibrate_claims.py sweep: parity.toml's runners and claims over the\n",
        header,
    )
    gone = "".join(f"#   {d}\n" for d in dropped)
    text = text.replace(
        "# Run it with `paritygate gate parity-sweep.toml`. Do not edit: edit parity.toml.\n",
        "# Run it with `paritygate gate parity-gpu.toml` on an H100 or H200 with MLX CUDA; its"
        " bounds come\n# from gpu/run_all_gpu.sh (calibration/gpu-*/). Do not edit: edit"
        " parity.toml.\n# Exact claims that the GPU calibration refused (gated here by argmax"
        " agreement only):\n" + gone,
    )
    (HERE / "parity-gpu.toml").write_text(text)
    from paritygate import update_claim

    for claim, basis in keep.items():
        update_claim(HERE / "parity-gpu.toml", claim, status="calibrated", basis=basis)


def exact(
    claims: list[str] | None = None,
    spec: Path = SWEEP,
    write: bool = True,
    cases: list[str] | None = None,
) -> dict:
    """Calibrate the exact claims over ``spec``'s cases (all 16, or ``cases`` for a dry run)."""
    from paritygate import update_claim
    from paritygate.calibration import DEFAULT_MUTATIONS, calibrate_claim, write_bound

    if write:
        OUT.mkdir(exist_ok=True)
    results = {}
    for claim_id in claims or list(EXACT_PLANS):
        mutation = EXACT_PLANS[claim_id]
        result = calibrate_claim(
            spec,
            claim_id,
            cases=cases,
            mutations=DEFAULT_MUTATIONS,
            model_mutations={mutation: f"mutations:{mutation.replace('-', '_')}_case"},
            min_cases=len(cases) if cases else 16,
        )
        print(result.summary(), "\n", flush=True)
        results[claim_id] = result.to_dict()
        if not write:
            continue
        (OUT / f"{claim_id}.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
        (OUT / f"{claim_id}.txt").write_text(result.summary() + "\n")
        fields = write_bound(SPEC, claim_id, result)
        basis = dict(fields["basis"])
        basis["evidence"] = f"calibration/{claim_id}.json"
        basis["cases"] = list(result.cases)
        basis["spec"] = "parity-sweep.toml"
        update_claim(SPEC, claim_id, basis=basis)
    return results


# ------------------------------------------------------------------------------------------
# Held-out


def _softmax(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64) - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    from scipy.stats import binomtest

    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return float(ci.low), float(ci.high)


def mcnemar_exact(right_a: np.ndarray, right_b: np.ndarray) -> dict:
    """Paired test on the same items: exact binomial on the discordant pairs."""
    from scipy.stats import binomtest

    b = int(np.sum(right_a & ~right_b))  # a right, b wrong
    c = int(np.sum(~right_a & right_b))
    p = float(binomtest(b, b + c, 0.5).pvalue) if b + c else 1.0
    return {"a_only_right": b, "b_only_right": c, "p_value": p}


def heldout_outputs(
    names=("baseline", "q8", "q4"), bug: str | None = "two-bit-weights", limit: int | None = None
) -> dict:
    """Outputs of ``names`` (and the planted bug) over the held-out items (the first ``limit``)."""
    import gate_runners
    import mutations

    items = []
    for k in range(10):
        items += data.read_items(HERE / "cases" / f"heldout-{k:02d}.json")
    items = items[:limit]
    outs = {name: gate_runners.run_items(name, items) for name in names}
    if bug:
        runner, planted = mutations.MUTATIONS[bug]
        with planted():
            outs[bug] = gate_runners.run_items(runner, items)
    return {"items": items, "outputs": outs}


def heldout_metrics(items, outs) -> dict:
    from paritygate.structured import expected_calibration_error

    digits_ = np.array([i.digit for i in items])
    answers = np.array([i.answer for i in items])
    n = len(items)
    ref = outs["baseline"]
    majority = {
        "action": float(np.bincount(digits_).max() / n),
        "choice": float(np.bincount(answers).max() / n),
    }
    result: dict = {"n_items": n, "majority_class": majority, "variants": {}}
    for name, out in outs.items():
        row: dict = {}
        for head, labels in (("action", digits_), ("choice", answers)):
            right = out[head].argmax(1) == labels
            k = int(right.sum())
            low, high = clopper_pearson(k, n)
            row[f"{head}_accuracy"] = k / n
            row[f"{head}_ci95"] = [low, high]
            row[f"{head}_lcb_minus_majority"] = low - majority[head]
            ref_right = ref[head].argmax(1) == labels
            row[f"{head}_mcnemar_vs_fp32"] = mcnemar_exact(ref_right, right)
        for h in ("action", "choice"):
            row[f"{h}_agreement"] = float(np.mean(out[h].argmax(1) == ref[h].argmax(1)))
        drift = 0.0
        for h in ("action_prob", "choice_prob"):
            drift = max(drift, float(np.abs(out[h].astype(np.float64) - ref[h]).max()))
        row["prob_drift"] = drift
        row["finite"] = all(bool(np.isfinite(out[h]).all()) for h in ("action", "choice"))
        if row["finite"]:
            row["action_ece"] = float(
                expected_calibration_error(_softmax(out["action"]), digits_, n_bins=15)
            )
        result["variants"][name] = row
    return result


BUG = {"two-bit-weights": "mutations:two_bit_weights_case"}


def heldout(claims: list[str] | None = None) -> None:
    """The held-out claims through ``paritygate.calibration``, the 2-bit bug as the model
    mutation each must catch:

    * accuracy, agreement, ECE: ``calibrate_dataset_claim`` with a bootstrap over the 600
      independent items (``unit="rows"``: the ten cases are chunks of 60), the one-sided 95 %
      bound rounded outwards; a claim whose bug stays inside that sampling noise is refused;
    * probability drift (max-abs, stored): ``calibrate_claim`` over the ten cases, the 2-bit bug
      as the model mutation, no output-level mutations (an approximation changes outputs on
      purpose).

    A refused claim keeps its claim with the bound at the bootstrap bound (still gated: it fails
    larger damage) and status ``provisional``, the refusal in its basis; README and QUALITY.md
    say which claims catch the planted bug. Accuracy intervals (Clopper-Pearson) and McNemar go
    into ``calibration/heldout.json``.
    """
    from paritygate import load_spec, update_claim
    from paritygate.calibration import calibrate_claim, calibrate_dataset_claim, write_bound

    spec = load_spec(HELDOUT)
    run = heldout_outputs()
    metrics = heldout_metrics(run["items"], run["outputs"])
    summary = {}
    for claim_id, claim in spec.claims.items():
        if claims and claim_id not in claims:
            continue
        extra = {"hardware": _hardware(), "date": _now(), "versions": _versions()}
        extra["evidence"] = "calibration/heldout.json"
        if claim.metric == "max_abs":
            result = calibrate_claim(
                spec, claim_id, mutations=(), model_mutations=BUG, min_cases=len(spec.cases)
            )
            print(result.summary(), "\n", flush=True)
            fields = write_bound(HELDOUT, claim_id, result)
            update_claim(HELDOUT, claim_id, basis={**fields["basis"], **extra})
            summary[claim_id] = {"bound": result.proposed_bound, "refused": False}
            continue
        result = calibrate_dataset_claim(spec, claim_id, model_mutations=BUG, unit="rows")
        print(result.summary(), "\n", flush=True)
        basis = {**result.basis(), **extra}
        if result.refused:
            direction = result.direction
            q = 1000
            bound = (
                math.floor(result.interval * q) / q
                if direction == "min"
                else math.ceil(result.interval * q) / q
            )
            basis["refused"] = result.reason
            status = "provisional"
        else:
            bound, status = result.proposed_bound, "calibrated"
        update_claim(HELDOUT, claim_id, bound=bound, status=status, basis=basis)
        summary[claim_id] = {
            "bound": bound,
            "observed": result.observed,
            "bootstrap_bound": result.interval,
            "two-bit-weights": result.mutations.get("two-bit-weights"),
            "refused": result.refused,
        }
    metrics["claims"] = summary
    OUT.mkdir(exist_ok=True)
    (OUT / "heldout.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


HALVES = (
    [f"heldout-{k:02d}" for k in range(5)],  # items 0-299
    [f"heldout-{k:02d}" for k in range(5, 10)],  # items 300-599
)


def crossfit() -> None:
    """Cross-fit of the held-out floors: each dataset claim's bound is proposed by the same rule
    as ``heldout`` (one-sided 95 % bootstrap over rows, rounded outwards) from one half of the
    items and checked on the other half, both ways round; written to
    ``calibration/heldout-crossfit.json``. The non-inferiority claims are left out: their margin
    is stated, not fitted."""
    from paritygate import load_spec
    from paritygate.calibration import calibrate_dataset_claim

    spec = load_spec(HELDOUT)
    out: dict = {"halves": [list(h) for h in HALVES], "date": _now(), "hardware": _hardware()}
    out["claims"] = {}
    for claim_id, claim in spec.claims.items():
        if claim.scope != "dataset" or claim.metric == "accuracy_noninferiority":
            continue
        folds = []
        for fit, check in (HALVES, HALVES[::-1]):
            fitted = calibrate_dataset_claim(spec, claim_id, cases=fit, unit="rows")
            q = 1000
            bound = fitted.proposed_bound
            if bound is None:
                low = fitted.direction == "min"
                bound = (math.floor if low else math.ceil)(fitted.interval * q) / q
            checked = calibrate_dataset_claim(
                spec, claim_id, cases=check, unit="rows", resamples=200
            )
            holds = (
                checked.observed >= bound if claim.direction == "min" else checked.observed <= bound
            )
            folds.append(
                {
                    "fit": fit[0] + ".." + fit[-1],
                    "bound": bound,
                    "observed_on_fit": fitted.observed,
                    "observed_on_check": checked.observed,
                    "holds": bool(holds),
                }
            )
            print(f"{claim_id}: {folds[-1]}", flush=True)
        out["claims"][claim_id] = {
            "metric": claim.metric,
            "spec_bound": claim.bound,
            "folds": folds,
            "holds_both": all(f["holds"] for f in folds),
        }
    out["all_hold"] = all(c["holds_both"] for c in out["claims"].values())
    OUT.mkdir(exist_ok=True)
    (OUT / "heldout-crossfit.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"cross-fit: every floor holds on the half it was not fitted on: {out['all_hold']}")


def agreement() -> None:
    """The stored argmax-agreement claims of parity.toml: compiled, pruned and block-local
    against the baseline over every workload and sweep item (byte-equal on MLX CPU, so 1.0)."""
    import gate_runners

    from paritygate import load_spec, update_claim

    items = []
    for path in (SPEC, SWEEP):
        for case in load_spec(path).cases.values():
            items += data.read_items(case.load())
    base = gate_runners.run_items("baseline", items)
    for head in ("action", "choice"):
        observed = {}
        for cand in ("compiled", "pruned", "block-local"):
            out = gate_runners.run_items(cand, items)
            observed[cand] = float(np.mean(out[head].argmax(1) == base[head].argmax(1)))
        noise = min(observed.values())
        if noise < 1.0:
            raise SystemExit(f"{head}: agreement {observed} below 1.0: no exact claim here")
        basis = {
            "metric": "agreement",
            "mode": "stored",
            "n": len(items),
            "measured": observed,
            "noise": "none: the outputs are byte-equal (see the exact claims)",
            "hardware": _hardware(),
            "date": _now(),
            "versions": _versions(),
            "cases": "every case of parity.toml and parity-sweep.toml",
        }
        update_claim(SPEC, f"exact-paths-{head}-agreement", status="calibrated", basis=basis)


def main(args: list[str]) -> None:
    steps = args[:1] or ["pin", "sweep", "gpu-spec", "exact", "agreement", "heldout"]
    for step in steps:
        if step == "pin":
            pin()
        elif step == "sweep":
            sweep()
        elif step == "exact":
            exact(args[1:] or None)
        elif step == "heldout":
            heldout(args[1:] or None)
        elif step == "crossfit":
            crossfit()
        elif step == "gpu-spec":
            gpu_spec()
        elif step == "agreement":
            agreement()
        else:
            raise SystemExit(f"unknown step {step!r}: pin, sweep, exact or heldout")


if __name__ == "__main__":
    main(sys.argv[1:])
