// The run page's held-out win-rate curve and monitor chart, drawn from the page's own data (evaluation-data).
// Numbers only: text from the engine is rendered by Django templates, escaped.
(function () {
  "use strict";
  function draw() {
    const node = document.getElementById("evaluation-data");
    if (!node || !window.Plotly) return;
    const data = JSON.parse(node.textContent);
    const layout = {margin: {t: 10, r: 55, b: 40, l: 50}, height: 300, xaxis: {title: {text: "step"}},
                    legend: {orientation: "h", y: -0.25}, paper_bgcolor: "rgba(0,0,0,0)"};
    const curve = data.curve;
    if (curve.length) {
      const x = curve.map((p) => p.step);
      Plotly.react("eval-chart", [
        {x, y: curve.map((p) => p.ci_high), mode: "lines", line: {width: 0}, showlegend: false, hoverinfo: "skip"},
        {x, y: curve.map((p) => p.ci_low), mode: "lines", line: {width: 0}, fill: "tonexty",
         fillcolor: "rgba(22,163,74,0.15)", name: "95 % interval", hoverinfo: "skip"},
        {x, y: curve.map((p) => p.win_rate), mode: "lines+markers", name: "win rate vs base", line: {color: "#16a34a"}},
        {x, y: x.map(() => 0.5), mode: "lines", name: "parity", line: {dash: "dot", color: "#888"}},
        {x, y: curve.map((p) => p.env_checkpoint), mode: "lines+markers", name: "env reward: checkpoint",
         yaxis: "y", line: {dash: "dash"}},
        {x, y: curve.map((p) => p.env_base), mode: "lines", name: "env reward: base", line: {dash: "dash"}},
      ], {...layout, yaxis: {range: [0, 1]}}, {displayModeBar: false, responsive: true});
    }
    const traces = [];
    for (const [key, points] of Object.entries(data.monitors)) {
      const trace = {x: points.map((p) => p[0]), y: points.map((p) => p[1]), mode: "lines+markers",
                     name: data.labels[key] || key};
      if (key === "mon_length_chars") trace.yaxis = "y2";
      traces.push(trace);
    }
    Plotly.react("monitor-chart", traces, {...layout, yaxis: {title: {text: "rate / score"}},
      yaxis2: {title: {text: "chars"}, overlaying: "y", side: "right"}}, {displayModeBar: false, responsive: true});
  }
  if (document.readyState === "complete") draw(); else window.addEventListener("load", draw);
})();
