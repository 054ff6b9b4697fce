"""MkDocs hook: serve the figures under results/ and MathJax without copying them into docs/.

Every `results/<folder>/<name>.png` becomes the site file `assets/results/<folder>/<name>.png`, so a page
shows a measured figure with `![...](../assets/results/real-model/recall.png)` (from docs/results/*.md)
while the file itself stays where the run wrote it.

MathJax (npm's `mathjax` 3, unpacked into the git-ignored `.cache/mathjax/` by `make mathjax`, which
`make docs-build` runs) becomes `assets/mathjax/`: its script and fonts are served from the site, so the
equations render with no network. Without it the build stops and says how to fetch it.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
MATHJAX = ROOT / ".cache" / "mathjax" / "es5"


def on_files(files, config):
    for png in sorted((ROOT / "results").glob("*/*.png")):
        rel = png.relative_to(ROOT / "results").as_posix()
        files.append(File.generated(config, f"assets/results/{rel}", abs_src_path=str(png)))
    if not (MATHJAX / "tex-mml-chtml.js").is_file():
        raise PluginError(f"MathJax is not in {MATHJAX}: run `make mathjax` (npm pack mathjax@3)")
    for path in sorted(p for p in MATHJAX.rglob("*") if p.is_file()):
        rel = path.relative_to(MATHJAX).as_posix()
        files.append(File.generated(config, f"assets/mathjax/{rel}", abs_src_path=str(path)))
    return files
