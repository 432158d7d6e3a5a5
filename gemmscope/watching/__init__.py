"""A job watched while it runs: each window of it (a few training steps every so often, or each
trace another tool drops in a folder) judged as it lands, one record per window in a timeline,
and alerts where a window differs from the job's first (timeline, alerts, follow)."""
