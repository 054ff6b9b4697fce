"""Does OAR-GP find exact OAR-P's top tokens on trained models? (README.md; the code: `hybrid_recall.py`)"""
