"""An example task package that lives outside `areal_adv/` (see README.md here)."""
