"""Does the shipped markov drafter match its training answers better than new answers to the same
prompts? A teacher-forced test of the over-fitting reading of the heads' over-confidence.

seen_prompts.py showed the first-position gap (confidence - acceptance) is nearly as large on
training prompts with new answers as on held-out prompts, so it is not a prompt-level gap. If
the drafter memorised its 221k training tokens (2.4 passes at 8,000 steps), its acceptance on
the training anchors themselves would sit near its confidence, and drop on new answers.

Rule, fixed before any result:
- Anchors: N anchors drawn with seed 0 from the training cache (.cache/dsim/data/main, the
  shipped drafters' data) and N from the --samples 5 cache (.cache/dsim/data/s5: the same
  prompts, new temperature-1 answers; an answer identical to a training one is possible but
  improbable at 160 tokens).
- Teacher-forced, as in training: per draft position, the exact acceptance probability
  c* = sum_V min(p_d, p_t) and the head's confidence sigmoid(conf_logit); means over the
  anchors with a 90% bootstrap interval over anchors for c* at position 1.
- Reading: memorisation is shown if c*_1 on training anchors exceeds c*_1 on new answers and
  the two 90% intervals do not overlap; the size of the difference is compared with the
  held-out gap (+0.134).
- Added 2026-12-01, before its run: `--trained-on s5` for a drafter trained on the s5 cache
  (run_v2f.sh) swaps the roles: its training answers are s5's, the main cache's are new to it.
  The gap c*_1(training) - c*_1(new) gets a 90% interval from the two bootstraps (independent
  anchor sets). The 300k data relieved memorisation if, at 8,000 steps, the s5 markov's gap
  interval lies wholly below the 221k markov's; if they overlap, no measurable change.
Usage: python experiments/drafters/memorization.py [--drafter drafters/markov.pt]
[--out memorization.md] [--trained-on main|s5]
--trained-on main (default) is drafters/markov.pt of commit analyze.SHIPPED_8000 (once replaced:
`git show 971733a:drafters/markov.pt > runs/markov-221k.pt`); s5 is runs/s5/markov-8000.pt.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from analyze import REPO

from dsim.models.checkpoint import load_drafter
from dsim.models.data import TrainCache
from dsim.models.target import load_target
from dsim.models.train import TrainingData

HERE = Path(__file__).resolve().parent
N = 2048
OTHER = {"main": "s5", "s5": "main"}  # the cache of new answers to the training prompts


def teacher_forced(drafter, target, folder: Path) -> dict:
    """Per position: mean c* and mean confidence over N anchors; c*_1's bootstrap interval."""
    data = TrainingData(
        TrainCache.load(folder), target.lm_head_weight, drafter.vocab, drafter.config
    )
    rows = data.anchors[
        torch.randperm(len(data.anchors), generator=torch.Generator().manual_seed(0))[:N]
    ]
    accept, conf = [], []
    with torch.no_grad():
        for chunk in rows.split(256):
            batch = data.batch(chunk)
            logits, conf_logits, _ = drafter(
                batch["hidden"], batch["anchor"], batch["tokens"], history=batch["history"]
            )
            p_d = torch.softmax(logits, dim=-1)
            accept.append(torch.minimum(p_d, batch["target_probs"]).sum(-1))
            conf.append(torch.sigmoid(conf_logits))
    a, c = torch.cat(accept).numpy(), torch.cat(conf).numpy()  # (N, gamma)
    boot = a[np.random.default_rng(0).integers(0, len(a), (2000, len(a))), 0].mean(1)
    lo, hi = np.percentile(boot, [5, 95])
    return {"accept": a.mean(0), "conf": c.mean(0), "lo90": lo, "hi90": hi, "boot": boot}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--drafter", default="drafters/markov.pt")
    parser.add_argument("--out", default="memorization.md")
    parser.add_argument("--trained-on", choices=sorted(OTHER), default="main")
    args = parser.parse_args()
    torch.set_num_threads(1)
    target = load_target()
    drafter = load_drafter(REPO / args.drafter, target).eval()
    caches = {
        "training answers": args.trained_on,
        "new answers, same prompts": OTHER[args.trained_on],
    }
    res = {
        k: teacher_forced(drafter, target, REPO / ".cache/dsim/data" / v) for k, v in caches.items()
    }
    lines = [
        f"`{args.drafter}`, trained on the {args.trained_on} cache, teacher-forced, {N} anchors "
        "per cache (seed 0).",
        "",
        "| anchors | c* at 1 [90%] | confidence at 1 | c* at 1..7 | confidence at 1..7 |",
        "| --- | --- | --- | --- | --- |",
    ] + [
        f"| {k} | {r['accept'][0]:.3f} [{r['lo90']:.3f}, {r['hi90']:.3f}] | {r['conf'][0]:.3f} | "
        + " / ".join(f"{x:.2f}" for x in r["accept"])
        + " | "
        + " / ".join(f"{x:.2f}" for x in r["conf"])
        + " |"
        for k, r in res.items()
    ]
    seen, new = res.values()
    shown = seen["accept"][0] > new["accept"][0] and seen["lo90"] > new["hi90"]
    gap_lo, gap_hi = np.percentile(seen["boot"] - new["boot"], [5, 95])
    lines += [
        "",
        f"Memorisation {'shown' if shown else 'not shown'} (rule in memorization.py): c*_1 "
        f"{seen['accept'][0]:.3f} on training answers, {new['accept'][0]:.3f} on new ones "
        f"({seen['accept'][0] - new['accept'][0]:+.3f} [{gap_lo:+.3f}, {gap_hi:+.3f}]).",
    ]
    text = "\n".join(lines) + "\n"
    (HERE / args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
