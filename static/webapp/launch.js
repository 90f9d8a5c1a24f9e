// A warning the server put at the top of the form (an identical run launched moments ago) takes the focus and
// the view, so the page does not look as if it merely reloaded.
(function () {
  "use strict";
  const warning = document.querySelector("[data-focus]");
  if (!warning) return;
  warning.scrollIntoView({block: "start"});
  warning.focus({preventScroll: true});
})();
// The launch form shows the fields of the chosen run kind only: inputs marked data-kind="grpo" or "sft" (forms.py)
// are hidden with their label while the other kind is chosen. Without this script every field shows, and the
// server ignores the other kind's.
(function () {
  "use strict";
  const radios = document.querySelectorAll('input[name="kind"]');
  if (!radios.length) return;
  function apply() {
    const chosen = (document.querySelector('input[name="kind"]:checked') || {}).value || "grpo";
    document.querySelectorAll("[data-kind]").forEach((input) => {
      const row = input.closest(".field");
      if (row) row.hidden = input.dataset.kind !== chosen;
    });
  }
  radios.forEach((radio) => radio.addEventListener("change", apply));
  apply();
})();
// The reasoning choice (keep or drop Qwen3's <think> block) is shown for the agents on a reasoning model only:
// the field lists them in data-agents (forms.py). Hidden, it goes back to "keep", which every model takes; the
// server refuses "drop" for the others, with the reason, where this script does not run.
(function () {
  "use strict";
  const choice = document.querySelector("select[data-agents]");
  const agent = document.querySelector('select[name="agent"]');
  if (!choice || !agent) return;
  const row = choice.closest(".field");
  function apply() {
    const shown = choice.dataset.agents.split(" ").includes(agent.value);
    if (row) row.hidden = !shown;
    if (!shown) choice.value = "keep";
  }
  agent.addEventListener("change", apply);
  apply();
})();
