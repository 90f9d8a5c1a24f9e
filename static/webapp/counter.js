// A visible character counter under every textarea with data-limit (long pasted text: rubrics, prompts).
// The server refuses text over the limit with an error; nothing is ever cut.
(function () {
  function attach(area) {
    if (area.dataset.counted) return;
    area.dataset.counted = "1";
    const limit = parseInt(area.dataset.limit, 10);
    const counter = document.createElement("p");
    counter.className = "char-counter muted";
    area.insertAdjacentElement("afterend", counter);
    const update = () => {
      const n = area.value.length;
      counter.textContent = n.toLocaleString() + " / " + limit.toLocaleString() + " characters" +
        (n > limit ? " — " + (n - limit).toLocaleString() + " over the limit: shorten it before saving" : "");
      counter.classList.toggle("error", n > limit);
    };
    area.addEventListener("input", update);
    update();
  }
  function scan() { document.querySelectorAll("textarea[data-limit]").forEach(attach); }
  document.addEventListener("DOMContentLoaded", scan);
  document.addEventListener("htmx:afterSwap", scan);
})();
