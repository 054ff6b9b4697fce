"""What OAR costs: scorer time per forward pass, scoring memory, generation time (README.md)."""
