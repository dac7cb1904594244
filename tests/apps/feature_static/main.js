import { setResult } from "/static/util.js";

setResult("module", "loaded /static/util.js");

setResult("css", getComputedStyle(document.getElementById("css-probe")).color);

const image = document.getElementById("image");
image.decode().then(
  () => setResult("image-size", `${image.naturalWidth}x${image.naturalHeight}`),
  (error) => setResult("image-size", `failed: ${error}`),
);

fetch("/api/hello?x=1")
  .then((response) => response.json())
  .then((data) => setResult("fetch", data.path))
  .catch((error) => setResult("fetch", `failed: ${error}`));

function websocketCheck() {
  const socket = new WebSocket(`ws://${location.host}/ws`, ["chat.v1", "chat.v2"]);
  socket.binaryType = "arraybuffer";
  const seen = [];
  socket.onopen = () => {
    socket.send("hello");
    const binary = new Uint8Array(1 << 20);
    for (let i = 0; i < binary.length; i++) binary[i] = i % 251;
    socket.send(binary);
  };
  socket.onmessage = (event) => {
    if (typeof event.data === "string") {
      seen.push(`text=${event.data}`);
    } else {
      const bytes = new Uint8Array(event.data);
      const intact = bytes.every((value, i) => value === i % 251);
      seen.push(`binary=${bytes.length}${intact ? "" : " corrupted"}`);
      socket.send("close:4001:bye");
    }
  };
  socket.onclose = (event) => {
    setResult("ws", `protocol=${socket.protocol} ${seen.join(" ")} close=${event.code} ${event.reason}`);
  };
  socket.onerror = () => setResult("ws", "error");
}
websocketCheck();

function sseCheck() {
  const source = new EventSource("/sse?count=3&interval_ms=50");
  const ids = [];
  let resumed = null;
  source.onmessage = (event) => {
    const data = JSON.parse(event.data);
    ids.push(data.id);
    if (data.resumed_from !== null) resumed = data.resumed_from;
    if (data.id === 6) {
      source.close();
      setResult("sse", `ids=${ids.join(",")} resumed_from=${resumed}`);
    }
  };
}
sseCheck();

function sseLatencyCheck() {
  const source = new EventSource("/sse?count=3&interval_ms=700&hold=1");
  const latencies = [];
  source.onmessage = (event) => {
    const data = JSON.parse(event.data);
    latencies.push(Date.now() - data.sent);
    if (latencies.length === 3) {
      source.close();
      setResult("sse-latency", `max_ms=${Math.max(...latencies).toFixed(0)}`);
    }
  };
}
sseLatencyCheck();

const audio = document.getElementById("audio");
audio.addEventListener("seeked", () => {
  setResult("media", `seeked=${Math.round(audio.currentTime)} duration=${Math.round(audio.duration)}`);
}, { once: true });
audio.addEventListener("error", () => setResult("media", `error ${audio.error && audio.error.code}`));
// The metadata may have loaded before this module ran.
if (audio.readyState >= HTMLMediaElement.HAVE_METADATA) {
  audio.currentTime = 20;
} else {
  audio.addEventListener("loadedmetadata", () => { audio.currentTime = 20; }, { once: true });
}

document.getElementById("file").addEventListener("change", async (event) => {
  const file = event.target.files[0];
  const form = new FormData();
  form.append("file", file, file.name);
  try {
    const response = await fetch("/upload", { method: "POST", body: form });
    const data = await response.json();
    setResult("upload", `size=${data.size} sha256=${data.sha256}`);
  } catch (error) {
    setResult("upload", `failed: ${error}`);
  }
});
