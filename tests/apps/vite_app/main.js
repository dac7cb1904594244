import { message } from "./message.js";

const show = (text) => {
  document.querySelector("#app").textContent = text;
};
show(message);
if (import.meta.hot) {
  import.meta.hot.accept("./message.js", (module) => show(module.message));
}
