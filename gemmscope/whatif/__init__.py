"""`gemmscope whatif`: per group of a run's GEMMs, the time now, the time measured at each other
precision on this GPU, what to change and the change written out for the run's framework.

groups (the run's GEMMs grouped, from a check of its traces), measure (the GPU run that times each
group's module at every recipe, and its reader), advice (time at stake, recommendations), changes
(the files that apply them), report (terminal, JSON, HTML). The GPU side is gemmscope.whatif.runner.
"""
