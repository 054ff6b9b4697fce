"""`oar-rl bench`: the training cost of each credit mode per completion token, as a ratio to GRPO.

Modules: `cli` (the command, the ratios and the reports), `steps` (one worker process per method,
interleaved steps, the memory readings), `scorers` (the importance functions timed on one batch,
the compute floors), `shapes` (the model and batch shapes). Nothing is re-exported here.
"""
