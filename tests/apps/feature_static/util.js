export function setResult(id, text) {
  const element = document.getElementById(id);
  element.textContent = text;
  element.dataset.done = "1";
}
