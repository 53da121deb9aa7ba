"""A behaviour fingerprint of a suite run: a hash that changes when the trainer's behaviour on it changes.

A suite row's config hash sees edits of its task and estimator, but not of the
trainer's code: when the sampler, the loss or an estimator's arithmetic changes,
the same config trains differently and the committed row no longer describes
the code. The fingerprint closes that gap cheaply. It trains the row's own task
and estimator for a few updates at a fixed seed (the tiny model: about a second)
and hashes everything those updates produce that a row's numbers depend on:

- every step's sampled batch (tokens, masks, behaviour log-probs) and the
  advantages the estimator computed from it;
- every step's metrics, timings and memory left out (reward, losses, gradient
  norm, clip fraction, entropy, KL, ...), at full float precision;
- the held-out evaluation after the last update (greedy decoding);
- the policy's (and a critic's) weights after the last update, bit for bit.

Any change of behaviour that the first updates exercise changes the hash; a
change of timings, logging or docs does not. A row records the fingerprint of
its (task, estimator) at the commit that measured it; `tests/bench/
test_suite_rows_current.py` recomputes them at HEAD and names the command that
refreshes the campaign when one differs.
"""

from __future__ import annotations

import hashlib
import struct
import tempfile
from typing import Any

import torch

from bench.suite.suite_definitions import run_config

#: The updates and the seed of a fingerprint run (the campaign's rows use seeds 1..10).
FINGERPRINT_UPDATES = 2
FINGERPRINT_SEED = 0
#: Metric-name prefixes and names that measure the machine, not the behaviour.
_MACHINE_KEYS = ("time/", "throughput/", "memory/", "seconds", "tokens_per_s", "eval/seconds", "peak_")
#: The batch fields hashed each step (the ones present: a critic adds values, a process reward token_rewards).
_BATCH_FIELDS = ("input_ids", "attention_mask", "loss_mask", "logprobs", "values", "token_rewards")


def _update_tensor(digest: Any, name: str, tensor: torch.Tensor) -> None:
    t = tensor.detach().to("cpu").contiguous()
    digest.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
    digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())


def _update_metrics(digest: Any, row: dict[str, Any]) -> None:
    for key in sorted(row):
        if key.startswith(_MACHINE_KEYS) or key in _MACHINE_KEYS:
            continue
        value = row[key]
        if isinstance(value, float):
            digest.update(f"{key}=".encode() + struct.pack("<d", value))
        else:
            digest.update(f"{key}={value!r};".encode())


def _update_module(digest: Any, prefix: str, module: torch.nn.Module) -> None:
    for name, tensor in module.state_dict().items():
        _update_tensor(digest, f"{prefix}.{name}", tensor)


def behaviour_fingerprint(task: str, estimator: str) -> str:
    """16 hex digits of sha256 over a short run of (task, estimator): batches, advantages, metrics, weights."""
    from areal_adv.api.cli_args import load_config
    from areal_adv.trainer.run.loop import Trainer

    config = run_config(task, estimator, FINGERPRINT_SEED, steps=FINGERPRINT_UPDATES, eval_every=FINGERPRINT_UPDATES)
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory(prefix="suite_fingerprint_") as tmp:
        trainer = Trainer(load_config({**config, "output": {**config["output"], "dir": tmp}}))
        for step in range(FINGERPRINT_UPDATES):
            out = trainer.step(step)
            for field in _BATCH_FIELDS:
                if isinstance(out.batch.get(field), torch.Tensor):
                    _update_tensor(digest, f"{step}.{field}", out.batch[field])
            _update_tensor(digest, f"{step}.advantages", out.data["advantages"])
            _update_metrics(digest, out.metrics)
        _update_module(digest, "policy", trainer.policy)
        if trainer.critic is not None:
            _update_module(digest, "critic", trainer.critic.engine.model)
    return digest.hexdigest()[:16]
