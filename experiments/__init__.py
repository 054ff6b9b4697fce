"""The project's own experiments, one folder each beside its results: what each asks, how to rerun it
(`python -m experiments.<name> ...` from the repository root), its results folder and its docs page are
in the folder's README.md (index: experiments/README.md). Experiments use only oar_rl's public API; the
wheel ships none of them."""
