"""The estimator suite: small tasks, many seeds, the statistics and reports, the diagnostics and racing evidence."""
