// The guided start: clicking an example selects the model warmed up for it, where the deployment offers one
// (webapp/guided_start_forms.py): a person picking Tic Tac Toe after 2048 gets the games model, not the 2048 one.
// The model stays theirs to change afterwards.
document.addEventListener("change", (event) => {
  const input = event.target;
  if (!(input instanceof HTMLInputElement) || input.name !== "example" || !input.closest("#guided-start-form")) return;
  const mapping = document.getElementById("guided-example-models");
  const model = mapping ? JSON.parse(mapping.textContent)[input.value] : undefined;
  if (!model) return;
  for (const radio of input.form.querySelectorAll('input[name="base_model"]')) {
    if (radio.value === model) radio.checked = true;
  }
});
