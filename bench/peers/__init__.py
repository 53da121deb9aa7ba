"""Speed and equality against peers: TRL's GRPO step, the estimators' references, verl, the former sampler."""
