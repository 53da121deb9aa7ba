"""The overrides that shrink a trainer run to a tiny random-init model and quiet output, for tests."""

from __future__ import annotations

#: A random-init policy of 32 hidden units (seconds per run on one core).
TINY_MODEL = ["model.hidden_size=32", "model.num_heads=2", "model.intermediate_size=64"]
#: No progress bar and no curve plot: a test reads the metrics file, not the terminal.
QUIET = ["output.progress_bar=false", "output.plot=false"]
#: Two prompts of four rollouts on the tiny model, quiet.
TINY = ["rollout.batch_size=2", "rollout.n_samples=4", *TINY_MODEL, *QUIET]
