"""How much of exact OAR-P's ranking does span-level OAR-P keep, and at what cost? (README.md)."""
