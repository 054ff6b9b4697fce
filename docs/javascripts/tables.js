// A table wider than the content column scrolls inside the box Material puts it in
// (.md-typeset__scrollwrap). Mark that box `oar-scroll` (extra.css: a label saying it scrolls, the first
// column kept in view) when, and only when, its table does not fit; again when the window is resized.
function oarMarkWideTables() {
  for (const box of document.querySelectorAll(".md-typeset__scrollwrap")) {
    box.classList.toggle("oar-scroll", box.scrollWidth > box.clientWidth + 1);
  }
}
document$.subscribe(() => setTimeout(oarMarkWideTables, 0));  // after Material has boxed the tables
window.addEventListener("resize", oarMarkWideTables);
