"""`oar-rl eval`: sample n completions per problem and report unbiased pass@k.

Modules: `config` (EvalConfig, the CLI parser, the per-benchmark job record), `sampling` (the
transformers and vLLM samplers, chat templates, the prompt-length check), `evaluation` (the files,
the run, pass@k and mean@n; `oar-rl eval`'s `main`). Nothing is re-exported here, so importing one
module does not pull in a model library; `pass_at_k` and `mean_at_n` are also `oar_rl`'s top-level names.
"""
