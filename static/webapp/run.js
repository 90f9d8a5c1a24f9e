// The run page's live layer: one websocket, replaying from the last event the page was rendered with, then
// streaming. Server-rendered fragments (Django templates, escaped) are fetched for groups, steps and the
// header; this script only builds chart arrays and sets textContent, so no model output is ever parsed as HTML.
(function () {
  "use strict";
  const live = document.getElementById("run-live");
  if (!live) return;
  const chart = JSON.parse(document.getElementById("chart-data").textContent);
  let lastSeq = parseInt(live.dataset.lastSeq, 10) || 0;
  let socket = null;
  let retry = 1000;
  const finalStatuses = new Set(["completed", "failed", "cancelled"]);

  // A double-click on a run control is one action: the first click's answer swaps the header, and Resume takes
  // Pause's place, so the second click (event.detail 2) would undo what the first did. Dropped before htmx sees it.
  document.addEventListener("click", (event) => {
    if (event.detail > 1 && event.target instanceof Element && event.target.closest("#run-header .controls")) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);

  function byStep(points, point) {
    const i = points.findIndex((p) => p.step === point.step);
    if (i >= 0) points[i] = point; else points.push(point);
    points.sort((a, b) => a.step - b.step);
  }

  // An SFT run's curves: the training loss of each step and the held-out loss (step 0: before training).
  function drawLoss() {
    const box = document.getElementById("loss-chart");
    if (!box) return;
    const pts = chart.points.filter((p) => p.loss !== null && p.loss !== undefined);
    const held = chart.held_out || [];
    box.dataset.points = String(pts.length);
    box.dataset.heldOut = String(held.length);
    if (!pts.length && !held.length) {
      box.classList.add("chart-empty");
      box.textContent = "The loss curves appear when the first step finishes.";
      return;
    }
    if (box.classList.contains("chart-empty")) { box.classList.remove("chart-empty"); box.textContent = ""; }
    const last = Math.max(...pts.map((p) => p.step), ...held.map((p) => p.step));
    const layout = {margin: {t: 10, r: 10, b: 40, l: 45}, height: 260, showlegend: true, legend: {orientation: "h"},
                    xaxis: {title: {text: "step"}, tickformat: "d", tick0: 0, dtick: Math.max(1, Math.ceil((last + 1) / 10))},
                    yaxis: {title: {text: "loss (nats / token)"}}, paper_bgcolor: "rgba(0,0,0,0)"};
    Plotly.react("loss-chart", [
      {x: pts.map((p) => p.step), y: pts.map((p) => p.loss), mode: "lines", name: "training loss",
       line: {color: "#2563eb"}},
      {x: held.map((p) => p.step), y: held.map((p) => p.loss), mode: "lines+markers", name: "held-out loss",
       line: {color: "#dc2626"}},
    ], layout, {displayModeBar: false, responsive: true});
  }

  function drawCharts() {
    if (!window.Plotly) return;
    if (chart.kind === "sft") { drawLoss(); return; }
    const pts = chart.points;
    const x = pts.map((p) => p.step);
    const mean = pts.map((p) => p.reward_mean);
    const std = pts.map((p) => p.reward_std || 0);
    // The ± std band, one closed shape per run of steps that have a mean: a step with no reward (every group
    // skipped) breaks it, where a band filled "to the next trace" would join the two sides across the gap.
    const bands = [];
    let segment = [];
    for (const [i, m] of [...mean.entries(), [mean.length, null]]) {
      if (m !== null && m !== undefined) { segment.push(i); continue; }
      if (segment.length === 1) {  // a lone step: a short bar, so its spread still shows
        const k = segment[0];
        bands.push({x: [x[k] - 0.15, x[k] + 0.15, x[k] + 0.15, x[k] - 0.15],
                    y: [mean[k] + std[k], mean[k] + std[k], mean[k] - std[k], mean[k] - std[k]]});
      } else if (segment.length) {
        const back = [...segment].reverse();
        bands.push({x: [...segment.map((k) => x[k]), ...back.map((k) => x[k])],
                    y: [...segment.map((k) => mean[k] + std[k]), ...back.map((k) => mean[k] - std[k])]});
      }
      segment = [];
    }
    bands.forEach((band, i) => Object.assign(band, {
      mode: "lines", line: {width: 0}, fill: "toself", fillcolor: "rgba(37,99,235,0.15)", name: "± std",
      legendgroup: "std", showlegend: i === 0, hoverinfo: "skip", meta: "std-band"}));
    // No step yet: say so instead of plotly's empty -1..6 axes.
    for (const id of ["reward-chart", "source-chart"]) {
      const box = document.getElementById(id);
      if (!pts.length) {
        box.classList.add("chart-empty");
        box.textContent = "The curves appear when the first step finishes.";
      } else if (box.classList.contains("chart-empty")) {
        box.classList.remove("chart-empty");
        box.textContent = "";
      }
    }
    if (!pts.length) return;
    // Steps are whole numbers: integer ticks, at most about ten of them.
    const dtick = Math.max(1, Math.ceil((x[x.length - 1] - x[0] + 1) / 10));
    const layout = {margin: {t: 10, r: 10, b: 40, l: 45}, height: 260,
                    xaxis: {title: {text: "step"}, tickformat: "d", tick0: 0, dtick: dtick},
                    showlegend: true, legend: {orientation: "h"}, paper_bgcolor: "rgba(0,0,0,0)"};
    const has = (values) => values.some((v) => v !== null && v !== undefined);
    Plotly.react("reward-chart", [
      ...bands,
      {x, y: mean, mode: "lines+markers", name: "reward mean", line: {color: "#2563eb"}},
    ], layout, {displayModeBar: false, responsive: true});
    // Only the series this run can have: no "judge score" legend entry for a run without a judge.
    const sources = [
      {x, y: pts.map((p) => p.judge_mean), mode: "lines+markers", name: "judge score"},
      {x, y: pts.map((p) => p.env_mean), mode: "lines+markers", name: "env reward"},
    ].filter((series) => has(series.y));
    for (const [name, series] of Object.entries(chart.criteria || {})) {
      sources.push({x: series.map((s) => s.step), y: series.map((s) => s.value), mode: "lines+markers",
                    name: name, line: {dash: "dot"}});
    }
    Plotly.react("source-chart", sources, layout, {displayModeBar: false, responsive: true});
    document.getElementById("reward-chart").dataset.points = String(pts.length);
  }

  // htmx queues requests per source element and keeps only the newest queued one; with no source every request
  // shares <body>, so a burst of events (two groups scored at once) would drop fragments. Each target is its own
  // source here, one request per target at a time, and a refresh asked for meanwhile runs once after it.
  const refreshes = {};

  function fetchInto(url, target, swap) {
    if (!window.htmx) return;
    const state = refreshes[target] || (refreshes[target] = {busy: false, again: null});
    if (state.busy) { state.again = [url, swap]; return; }
    state.busy = true;
    htmx.ajax("GET", url, {source: target, target: target, swap: swap}).finally(() => {
      state.busy = false;
      const again = state.again;
      state.again = null;
      if (again) fetchInto(again[0], target, again[1]);
    });
  }

  function groupUrl(groupId) {
    return live.dataset.groupUrl.replace("/0/", "/" + groupId + "/");
  }

  function refreshCard(card) {
    fetchInto(groupUrl(card.id.slice("group-".length)), "#" + card.id, "outerHTML");
  }

  function onGroup(data) {
    const id = "group-" + data.group_id;
    // A resumed run redoes its interrupted step: the new group replaces the old one of the same step and index,
    // whose row is gone (re-fetching it would be a 404). Drop its card, as a reload would not show it.
    const same = '[data-step="' + data.step + '"][data-index="' + data.group_index + '"]';
    document.querySelectorAll("#groups " + same).forEach((old) => { if (old.id !== id) old.remove(); });
    if (document.getElementById(id)) return;  // already rendered (page load raced the event)
    const empty = document.getElementById("no-groups");
    if (empty) empty.remove();
    const slot = document.createElement("div");  // the card replaces its slot when it arrives
    slot.id = id;
    slot.dataset.step = data.step;
    slot.dataset.index = data.group_index;
    // In the order a reload shows: newest step first, groups of a step in index order.
    const list = document.getElementById("groups");
    const after = Array.from(list.querySelectorAll(":scope > [data-step]")).find((card) => {
      const step = Number(card.dataset.step);
      return step < data.step || (step === data.step && Number(card.dataset.index) > data.group_index);
    });
    const shown = list.querySelectorAll(":scope > [data-step]").length;
    if (after) list.insertBefore(slot, after);
    else if (list.querySelector(":scope > button")) list.insertBefore(slot, list.querySelector(":scope > button"));
    else list.appendChild(slot);
    keepShown(list, shown);
    if (slot.isConnected) fetchInto(groupUrl(data.group_id), "#" + id, "outerHTML");
  }

  // A reload shows the newest groups a page at a time, "Older groups" after them. Live, the list keeps as many
  // cards as it had (a page at least; more once older ones were asked for): the oldest goes as a new one comes,
  // and the button asks for the groups after the cards shown. Unbounded, a long run's page grew by a card a group.
  function keepShown(list, shown) {
    const keep = Math.max(shown, Number(live.dataset.groupsPage));
    const cards = Array.from(list.querySelectorAll(":scope > [data-step]"));
    if (cards.length <= keep) return;
    cards.slice(keep).forEach((card) => card.remove());
    let more = list.querySelector(":scope > button");
    if (!more) {
      more = document.createElement("button");
      more.className = "button";
      more.textContent = "Older groups";
      more.setAttribute("hx-get", live.dataset.groupsUrl);
      more.setAttribute("hx-swap", "outerHTML");
      list.appendChild(more);
    }
    const url = new URL(more.getAttribute("hx-get"), window.location.origin);
    url.searchParams.set("offset", String(keep));
    more.setAttribute("hx-get", url.pathname + url.search);
    if (window.htmx) htmx.process(more);
  }

  function refreshStepCards(step) {
    // What a card says about training ("Trained on", advantages) changes when its step is handed over and
    // trains: re-render every card of the step, so no card keeps "not yet" beside one that says trained.
    document.querySelectorAll('#groups .group[data-step="' + step + '"]').forEach(refreshCard);
  }

  function refreshCheckpoints() {
    fetchInto(live.dataset.checkpointsUrl, "#checkpoints", "innerHTML");
    fetchInto(live.dataset.checkpointTableUrl, "#checkpoint-table-card", "outerHTML");
  }

  function onStep(data) {
    const m = data.metrics || {};
    byStep(chart.points, {step: data.step, reward_mean: m.reward_mean ?? null, reward_std: m.reward_std ?? null,
                          judge_mean: m.judge_mean ?? null, env_mean: m.env_mean ?? null, loss: m.loss ?? null});
    for (const [name, value] of Object.entries(data.criteria_means || {})) {
      chart.criteria[name] = chart.criteria[name] || [];
      byStep(chart.criteria[name], {step: data.step, value: value});
    }
    drawCharts();
    fetchInto(live.dataset.stepsUrl, "#steps", "innerHTML");
    refreshStepCards(data.step);
  }

  function onRunSummary(run) {
    if (!run) return;
    const phase = document.getElementById("run-phase");
    if (phase) phase.textContent = run.phase || "";
    const progress = document.getElementById("run-progress");
    if (progress) progress.textContent = run.steps_done + " / " + run.total_steps;
  }

  const handlers = {
    group_scored: onGroup,
    // The step now trains on reviewed rewards: re-render its cards with the recomputed advantages.
    review_applied: (data) => refreshStepCards(data.step),
    step_finished: onStep,
    held_out_loss: (data) => {
      chart.held_out = chart.held_out || [];
      byStep(chart.held_out, {step: data.step, loss: data.loss ?? null});
      drawCharts();
    },
    checkpoint_saved: refreshCheckpoints,
    evaluation: refreshCheckpoints,  // the table's win rates
    run_started: refreshCheckpoints,  // a resume may record the checkpoint a dead worker never reported
    override: (data) => {  // a person changed human scores (here or in another tab): the card as a reload shows it
      const card = document.getElementById("group-" + data.group_id);
      if (card) refreshCard(card);
    },
  };
  // An external agent's panel (clients, the step's groups, time left): re-rendered by the server on the events
  // that change it, and every 10 s while the run is active (a client counts as connected for 30 s after its
  // last request, which is no event). Between renders its time left counts down here.
  let externalRendered = Date.now();  // when the panel's time left was computed (about: its fetch began)
  function refreshExternal() {
    if (!live.dataset.externalUrl) return;
    externalRendered = Date.now();
    fetchInto(live.dataset.externalUrl, "#external-panel", "outerHTML");
  }
  for (const kind of ["rollouts_wanted", "rollouts_closed", "rollouts_submitted", "rollouts_client", "status",
                      "run_finished", "run_failed"]) {
    const before = handlers[kind];
    handlers[kind] = before ? (data) => { before(data); refreshExternal(); } : refreshExternal;
  }
  if (live.dataset.externalUrl) {
    setInterval(() => {
      const panel = document.getElementById("external-panel");
      if (!panel || finalStatuses.has(panel.dataset.status)) return;
      const cell = document.getElementById("external-deadline");
      const left = parseFloat(panel.dataset.deadline);
      if (cell && !isNaN(left) && panel.dataset.status !== "paused") {
        cell.textContent = Math.max(0, Math.round(left - (Date.now() - externalRendered) / 1000)) + " s";
      }
      if (Date.now() - externalRendered > 10000) refreshExternal();
    }, 1000);
  }

  // run_held: a paused engine reached its boundary, the only event that ends "Pausing" when the pause met the
  // engine between two steps.
  const headerKinds = new Set(["status", "run_started", "run_finished", "run_failed", "review_requested",
                               "review_applied", "step_finished", "events_summarized", "run_held"]);
  // What an answer of a step that has not trained says follows the run's state (webapp/review_state.py): a park,
  // a resume, a failure or the end change what Resume or Approve will do with it, so those cards are re-rendered.
  // (Not on run_started: a resumed engine's new groups replace those cards, and a refresh racing that is a 404.)
  const fateKinds = new Set(["status", "run_finished", "run_failed", "review_requested"]);

  function refreshUntrainedCards(run) {
    if (!run) return;
    document.querySelectorAll("#groups .group[data-step]").forEach((card) => {
      if (Number(card.dataset.step) > run.steps_done) refreshCard(card);
    });
  }

  function onMessage(message) {
    if (message.seq <= lastSeq) return;
    lastSeq = message.seq;
    const handler = handlers[message.kind];
    if (handler) handler(message.data);
    document.dispatchEvent(new CustomEvent("studio:run-event", {detail: message}));  // evaluation.js listens
    onRunSummary(message.data.run);
    if (fateKinds.has(message.kind)) refreshUntrainedCards(message.data.run);
    if (headerKinds.has(message.kind)) fetchInto(live.dataset.headerUrl, "#run-header", "outerHTML");
  }

  const REFUSED = {4401: "not logged in: live updates stopped", 4403: "no access to this run any more",
                   4404: "no such run for you: live updates stopped"};

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + live.dataset.wsPath + "?after=" + lastSeq);
    socket.onopen = () => { retry = 1000; setIndicator(true); };
    socket.onmessage = (e) => JSON.parse(e.data).forEach(onMessage);  // a frame: one window's events, in seq order
    socket.onclose = (e) => {
      setIndicator(false);
      if (REFUSED[e.code]) {  // no access (any more): reconnecting would be refused again
        const dot = document.getElementById("live-indicator");
        if (dot) dot.title = REFUSED[e.code];
        return;
      }
      setTimeout(connect, retry);  // reconnects resume from lastSeq: nothing is missed or repeated
      retry = Math.min(retry * 2, 15000);
    };
  }

  function setIndicator(on) {
    const dot = document.getElementById("live-indicator");
    if (dot) { dot.classList.toggle("on", on); dot.title = on ? "live" : "reconnecting"; }
  }

  document.body.addEventListener("htmx:afterSettle", () => setIndicator(socket && socket.readyState === 1));
  window.addEventListener("load", drawCharts);
  connect();
  window.studioRun = {chart: chart, lastSeq: () => lastSeq};
})();
