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
