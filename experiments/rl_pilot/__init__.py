"""One GRPO (or any credit mode's) pilot run on the word-problem testbed, outside the study (README.md)."""
