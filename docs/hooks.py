"""MkDocs hook: serve the figures under results/ without copying them into docs/.

Every `results/<folder>/<name>.png` becomes the site file `assets/results/<folder>/<name>.png`, so a page
shows a measured figure with `![...](../assets/results/real-model/recall.png)` (from docs/results/*.md)
while the file itself stays where the run wrote it.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]


def on_files(files, config):
    for png in sorted((ROOT / "results").glob("*/*.png")):
        rel = png.relative_to(ROOT / "results").as_posix()
        files.append(File.generated(config, f"assets/results/{rel}", abs_src_path=str(png)))
    return files
