"""The paper's Figure 5 on a real model (SmolLM2-135M-Instruct): recall of oracle causal tokens by each
signal, with the position and random controls and recall per reasoning step (README.md)."""
