"""An example task package that lives outside `areal/` (see README.md here)."""
