const status = document.getElementById("asset-status");
status.textContent = "root-absolute script loaded";
status.classList.add("loaded");
fetch("/media?path=videos/intro.mp4&session=demo-session")
  .then((response) => response.json())
  .then((data) => {
    document.getElementById("media").textContent = JSON.stringify(data);
  })
  .catch((error) => {
    document.getElementById("media").textContent = "failed: " + error;
  });
