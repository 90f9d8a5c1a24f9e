// Several runs on one chart: mean reward and judge-vs-human agreement per step (data from runs_overlay).
(function () {
  const data = document.getElementById("overlay-data");
  if (!data || typeof Plotly === "undefined") return;
  const series = JSON.parse(data.textContent);
  const layout = (title) => ({margin: {t: 10, r: 10, b: 40, l: 45}, height: 300, showlegend: true,
    legend: {orientation: "h", y: -0.25},
    xaxis: {title: {text: "step"}, tickformat: "d", dtick: 1, rangemode: "tozero"},  // steps are whole numbers
    yaxis: {title: {text: title}, range: [0, 1.05]}});
  const line = (s, key, suffix) => ({x: s[key].map(p => p.step), y: s[key].map(p => p.value), mode: "lines+markers",
    name: s.label + (s.rubric ? " · " + s.rubric : "") + suffix});
  const draw = (id, key, title) => {
    const traces = series.filter(s => s[key].length).map(s => line(s, key, ""));
    const box = document.getElementById(id);
    if (!box) return;
    if (!traces.length) { box.hidden = true; const empty = document.getElementById(id + "-empty"); if (empty) empty.hidden = false; return; }
    Plotly.newPlot(id, traces, layout(title), {displayModeBar: false, responsive: true});
  };
  draw("overlay-reward", "reward", "mean reward");
  draw("overlay-agreement", "agreement", "pairwise agreement");
})();
