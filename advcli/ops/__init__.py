"""Pure tensor operations the estimators are built from (no I/O, no configuration)."""
