// The run page's held-out win-rate curve and monitor chart, drawn from the page's own data (evaluation-data).
// Live: it follows the run's websocket through run.js. Text from the engine goes in as textContent only.
(function () {
  "use strict";
  const node = document.getElementById("evaluation-data");
  if (!node) return;
  const data = JSON.parse(node.textContent);

  function draw() {
    if (!window.Plotly) return;
    // Steps are whole numbers: integer ticks (no 1.5), at most about ten of them.
    const steps = data.curve.map((p) => p.step).concat(...Object.values(data.monitors).map((s) => s.map((p) => p[0])));
    const span = steps.length ? Math.max(...steps) - Math.min(...steps) + 1 : 1;
    const layout = {margin: {t: 10, r: 55, b: 40, l: 50}, height: 300,
                    xaxis: {title: {text: "step"}, tickformat: "d", tick0: 0, dtick: Math.max(1, Math.ceil(span / 10))},
                    legend: {orientation: "h", y: -0.25}, paper_bgcolor: "rgba(0,0,0,0)"};
    const curve = data.curve;
    if (curve.length) {
      document.getElementById("eval-chart").hidden = false;
      const x = curve.map((p) => p.step);
      Plotly.react("eval-chart", [
        {x, y: curve.map((p) => p.ci_high), mode: "lines", line: {width: 0}, showlegend: false, hoverinfo: "skip"},
        {x, y: curve.map((p) => p.ci_low), mode: "lines", line: {width: 0}, fill: "tonexty",
         fillcolor: "rgba(22,163,74,0.15)", name: "95 % interval", hoverinfo: "skip"},
        {x, y: curve.map((p) => p.win_rate), mode: "lines+markers", name: "win rate vs base", line: {color: "#16a34a"},
         customdata: curve.map((p) => [p.ci_low, p.ci_high, p.scenarios, p.samples]),
         hovertemplate: "step %{x}: %{y:.0%} (95 %: %{customdata[0]:.0%}–%{customdata[1]:.0%}), " +
                        "%{customdata[2]} scenarios × %{customdata[3]} answers<extra></extra>"},
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
    // No monitor value yet: the page's sentence instead of plotly's bare -1..6 axes.
    document.getElementById("monitor-chart").hidden = !traces.length;
    document.getElementById("monitor-chart-empty").hidden = traces.length > 0;
    if (!traces.length) return;
    Plotly.react("monitor-chart", traces, {...layout, yaxis: {title: {text: "rate / score"}},
      yaxis2: {title: {text: "chars"}, overlaying: "y", side: "right"}}, {displayModeBar: false, responsive: true});
  }
  function byStep(points, point) {
    const i = points.findIndex((p) => p.step === point.step);
    if (i >= 0) points[i] = point; else points.push(point);
    points.sort((a, b) => a.step - b.step);
  }

  // "Evaluate now" put a pending note where its button was: the outcome replaces it, and the table's cell.
  function settle(kind, d) {
    const pending = document.getElementById("evaluating-" + d.step);
    const m = d.metrics || {};
    const rate = typeof m.eval_win_rate === "number" ? Math.round(m.eval_win_rate * 100) + "%" : "—";
    if (kind === "evaluation") {
      const cell = document.getElementById("win-rate-" + d.step);
      if (cell) cell.textContent = rate;
      if (pending) { pending.className = "done"; pending.textContent = "evaluated: win rate " + rate; }
    } else if (pending) {
      pending.className = "error";
      pending.textContent = "evaluation failed: " + String(d.error || "no reason given").slice(0, 300);
    }
  }

  // Live: run.js re-dispatches every websocket message of the run as a `studio:run-event`.
  document.addEventListener("studio:run-event", (e) => {
    const {kind, data: d} = e.detail;
    if (kind === "evaluation" || kind === "evaluation_failed") settle(kind, d);
    if (kind === "evaluation") {
      const m = d.metrics || {};
      byStep(data.curve, {step: d.step, win_rate: m.eval_win_rate ?? null, ci_low: m.eval_ci_low ?? null,
                          ci_high: m.eval_ci_high ?? null, scenarios: m.eval_scenarios ?? null,
                          samples: m.eval_samples ?? null, env_checkpoint: m.eval_env_checkpoint ?? null,
                          env_base: m.eval_env_base ?? null});
    } else if (kind === "step_finished") {
      for (const key of Object.keys(data.labels)) {
        const value = (d.metrics || {})[key];
        if (typeof value !== "number") continue;
        const series = data.monitors[key] || (data.monitors[key] = []);
        const i = series.findIndex((p) => p[0] === d.step);
        if (i >= 0) series[i] = [d.step, value]; else series.push([d.step, value]);
      }
    } else if (kind === "monitor_alert") {
      const li = document.createElement("li");
      li.className = "alert";
      li.textContent = "step " + d.step + " · " + d.monitor + ": " + d.message + (d.pause ? " · paused the run" : "");
      const list = document.getElementById("monitor-alerts");
      list.querySelectorAll(".muted").forEach((x) => x.remove());
      list.appendChild(li);
      return;
    } else {
      return;
    }
    draw();
  });
  if (document.readyState === "complete") draw(); else window.addEventListener("load", draw);
})();
