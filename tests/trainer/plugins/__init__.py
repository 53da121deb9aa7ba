"""Task and reward plugins for the tests, defined outside `areal/` (errors included)."""
