"""Run records timed together in paired rounds, built (not measured), for the tests of what judges them: one call a
step, each step the round's ratio times 1 ms with 1% noise."""

from __future__ import annotations

import numpy as np

STEPS = 3  # steps a round


def timed_run(release: str, group: str, ratio_per_round: list[float], run_id: str, seed: int,
              label: str | None = None) -> dict:
    """A run of `release` timed in `group` (the runs of one group were timed together)."""
    rng = np.random.default_rng(seed)
    samples = [int(1e6 * r * (1 + 0.01 * rng.standard_normal())) for r in ratio_per_round for _ in range(STEPS)]
    return {"run_id": run_id, "group": group, "requested": release, "status": "ok",
            "environment": {"jax": release}, "contender": {"mode": "frozen", "settings": {}, "label": label or release},
            "timing": {"group": group, "samples_ns": samples, "steps": [1] * len(samples),
                       "rounds": [STEPS] * len(ratio_per_round)}}
