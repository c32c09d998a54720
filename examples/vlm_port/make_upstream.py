"""The upstream that ``paritygate bootstrap`` clones in this example (BOOTSTRAP.md): a git
repository holding a clean copy of the installed mlx-vlm source (``mlx_vlm/``, without
``__pycache__``), committed once as installed, then once more with the seed's bug planted in
``mlx_vlm/prompt_utils.py``: qwen2_5_vl's message format switched to qwen2_vl's, which puts the
image after the text. ``patches/qwen2_5_vl-image-first.patch`` fixes it.

    python make_upstream.py DEST      # prints the pinned commit (the planted one)

The commits' author, committer and dates are fixed, so the same installed mlx-vlm gives the same
commit ids on every machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

FIXED = '    "qwen2_5_vl": MessageFormat.LIST_WITH_IMAGE_FIRST,\n'
PLANTED = '    "qwen2_5_vl": MessageFormat.LIST_WITH_IMAGE,\n'
PROMPT_UTILS = "mlx_vlm/prompt_utils.py"


def _git(dest: Path, *args: str) -> str:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="vlm_port",
        GIT_AUTHOR_EMAIL="vlm_port@example.invalid",
        GIT_COMMITTER_NAME="vlm_port",
        GIT_COMMITTER_EMAIL="vlm_port@example.invalid",
        GIT_AUTHOR_DATE="2026-12-05T00:00:00+00:00",
        GIT_COMMITTER_DATE="2026-12-05T00:00:00+00:00",
    )
    done = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=dest,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def make_upstream(dest: Path) -> str:
    """Create the upstream repository in ``dest`` (new or empty); the planted commit's id."""
    import mlx_vlm

    source = Path(mlx_vlm.__file__).resolve().parent
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise SystemExit(f"{dest}: not empty")
    shutil.copytree(source, dest / "mlx_vlm", ignore=shutil.ignore_patterns("__pycache__"))
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", f"mlx-vlm {mlx_vlm.__version__} as installed")
    path = dest / PROMPT_UTILS
    text = path.read_text(encoding="utf-8")
    if FIXED not in text:
        raise SystemExit(f"{PROMPT_UTILS}: qwen2_5_vl's message format line not found")
    path.write_text(text.replace(FIXED, PLANTED), encoding="utf-8")
    _git(dest, "commit", "-q", "-a", "-m", "qwen2_5_vl: the image after the text")
    return _git(dest, "rev-parse", "HEAD")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python make_upstream.py DEST")
    print(make_upstream(Path(sys.argv[1])))
