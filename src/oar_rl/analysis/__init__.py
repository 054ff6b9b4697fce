"""Analysis tools: the counterfactual oracle and causal-token recall, token heatmaps, training-curve
plots and the demo's HTML report. Each module is imported on its own (nothing is re-exported here), so
importing one does not pull in matplotlib or a model."""
