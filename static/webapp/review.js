// Review pages: j/k (or →/←) move between groups; the judge-vs-human agreement chart. Only URLs and numbers
// are read from the page; no model output is touched here.
(function () {
  "use strict";
  const nav = document.getElementById("group-nav");
  if (nav) {
    document.addEventListener("keydown", (e) => {
      const tag = (e.target.tagName || "").toLowerCase();
      if (tag === "input" || tag === "textarea" || tag === "select" || e.ctrlKey || e.metaKey || e.altKey) return;
      const next = e.key === "j" || e.key === "ArrowRight";
      const prev = e.key === "k" || e.key === "ArrowLeft";
      const url = next ? nav.dataset.next : prev ? nav.dataset.prev : "";
      if (url) { e.preventDefault(); window.location.assign(url); }
    });
  }
  const data = document.getElementById("agreement-data");
  function draw() {
    if (!data || !window.Plotly || !document.getElementById("agreement-chart")) return;
    const steps = JSON.parse(data.textContent).steps;
    const x = steps.map((s) => s.step);
    const line = (key, name) => ({x, y: steps.map((s) => s[key]), mode: "lines+markers", name: name});
    Plotly.react("agreement-chart", [line("pairwise", "pairwise agreement"), line("spearman", "Spearman ρ"),
                                     line("kendall_tau", "Kendall τ")],
                 {margin: {t: 10, r: 10, b: 40, l: 45}, height: 240, xaxis: {title: {text: "step"}, dtick: 1, tickformat: "d"},
                  yaxis: {range: [-1.05, 1.05]}, legend: {orientation: "h"}, paper_bgcolor: "rgba(0,0,0,0)"},
                 {displayModeBar: false, responsive: true});
  }
  window.addEventListener("load", draw);
})();
