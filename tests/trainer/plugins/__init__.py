"""Task and reward plugins for the tests, defined outside `areal_adv/` (errors included)."""
