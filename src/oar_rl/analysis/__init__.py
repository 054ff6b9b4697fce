"""Analysis tools: the counterfactual oracle (`oracle`), recall statistics (`recall_stats`), the
`oar-rl oracle` pipeline (`recall`), token heatmaps, training-curve plots. Each module is imported on
its own (nothing is re-exported here), so importing one does not pull in matplotlib or a model. The
cost benchmark is `oar_rl.bench`; evaluation is `oar_rl.eval`."""
