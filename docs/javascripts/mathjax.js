// MathJax for the maths pymdownx.arithmatex (generic mode) leaves in the pages: it wraps each
// formula in an element of class "arithmatex", delimited by \( \) inline and \[ \] as a block.
// Only those elements are typeset; the rest of the page (code, tables of numbers) is left alone.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
};

// mkdocs-material swaps pages without a reload when instant navigation is on: typeset each new one.
if (typeof document$ !== "undefined") {
  document$.subscribe(() => {
    if (window.MathJax && MathJax.typesetPromise) {
      MathJax.startup.output.clearCache();
      MathJax.typesetClear();
      MathJax.texReset();
      MathJax.typesetPromise();
    }
  });
}
