"""The real model (SmolLM2-135M): estimator campaigns, diagnostics, probes, the bf16 rollout copy."""
