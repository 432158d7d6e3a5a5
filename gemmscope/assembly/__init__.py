"""Traces made one job, before any verdict: each kernel attributed to its launch and the NVTX
ranges around it (attribution, with TE's range grammar in te_ranges), many traces read in workers
(loading), which traces are ranks of one job (one_job), and the job itself (job)."""
