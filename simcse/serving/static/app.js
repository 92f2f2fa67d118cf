// The search page of `simcse serve`: talks to the JSON API of the same server, loads nothing else.
"use strict";

const $ = (id) => document.getElementById(id);
let searchSeq = 0;

async function api(path, params) {
  const url = params ? `${path}?${new URLSearchParams(params)}` : path;
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  let body = null;
  try { body = await response.json(); } catch (_) { /* not JSON: reported below */ }
  if (!response.ok) {
    throw new Error(body && body.error ? body.error : `HTTP ${response.status}`);
  }
  return body;
}

function setStatus(el, text, isError) {
  el.textContent = text;
  el.classList.toggle("error", Boolean(isError));
}

function resultItem(hit) {
  const li = document.createElement("li");
  li.className = "result";
  li.dataset.rank = String(hit.rank);
  li.dataset.score = String(hit.score);
  const rank = document.createElement("span");
  rank.className = "rank";
  rank.textContent = `${hit.rank}.`;
  const sentence = document.createElement("span");
  sentence.className = "sentence";
  sentence.textContent = hit.sentence;
  const line = document.createElement("div");
  line.className = "score-line";
  const bar = document.createElement("div");
  bar.className = "bar";
  bar.setAttribute("role", "img");
  bar.setAttribute("aria-label", `cosine ${hit.score.toFixed(4)}`);
  const fill = document.createElement("span");
  fill.style.width = `${(Math.max(0, Math.min(1, hit.score)) * 100).toFixed(1)}%`;
  bar.appendChild(fill);
  const score = document.createElement("span");
  score.className = "score";
  score.textContent = hit.score.toFixed(4);
  line.append(bar, score);
  li.append(rank, sentence, line);
  return li;
}

function render(data) {
  const list = $("results");
  list.replaceChildren(...data.results.map(resultItem));
  const n = data.results.length;
  const time = `${data.elapsed_ms.toFixed(1)} ms`;
  setStatus($("status"), n
    ? `${n} result${n === 1 ? "" : "s"} in ${time}`
    : `No sentence with cosine ≥ ${data.threshold} (${time}); lower the threshold.`);
}

async function search() {
  const query = $("query").value;
  const seq = ++searchSeq;
  if (!query.trim()) {
    setStatus($("status"), "Type a query first.", true);
    return;
  }
  setStatus($("status"), "Searching…");
  try {
    const data = await api("/api/search", {
      query, top_k: $("top-k").value, threshold: $("threshold").value,
    });
    if (seq !== searchSeq) return; // a newer search was started meanwhile
    render(data);
  } catch (err) {
    if (seq !== searchSeq) return;
    $("results").replaceChildren();
    setStatus($("status"), err.message, true);
  }
  document.body.dataset.searches = String(Number(document.body.dataset.searches || 0) + 1);
}

async function compare() {
  const out = $("sim-result");
  setStatus(out, "Comparing…");
  try {
    const data = await api("/api/similarity", { sentence1: $("sentence1").value, sentence2: $("sentence2").value });
    out.dataset.score = String(data.score);
    setStatus(out, `Cosine similarity: ${data.score.toFixed(4)} (${data.elapsed_ms.toFixed(1)} ms)`);
  } catch (err) {
    delete out.dataset.score;
    setStatus(out, err.message, true);
  }
}

function showExamples(examples) {
  const box = $("examples");
  box.replaceChildren(...examples.map((text) => {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "example";
    b.textContent = text;
    b.addEventListener("click", () => { $("query").value = text; search(); });
    return b;
  }));
}

async function init() {
  $("search-form").addEventListener("submit", (e) => { e.preventDefault(); search(); });
  $("sim-form").addEventListener("submit", (e) => { e.preventDefault(); compare(); });
  document.addEventListener("keydown", (e) => {
    const typing = e.target instanceof HTMLInputElement || e.target instanceof HTMLTextAreaElement;
    if (e.key === "/" && !typing) { e.preventDefault(); $("query").focus(); }
  });
  try {
    const [info, ex] = await Promise.all([api("/api/info"), api("/api/examples")]);
    showInfo(info);
    $("top-k").value = info.defaults.top_k;
    $("threshold").value = info.defaults.threshold;
    showExamples(ex.examples);
    if (info.status === "indexing") waitForIndex();
  } catch (err) {
    setStatus($("about"), `Cannot reach the server: ${err.message}`, true);
  }
  document.body.dataset.ready = "1";
  $("query").focus();
}

function showInfo(info) {
  const source = info.source.split(/[\\/]/).pop();
  document.body.dataset.index = info.status;
  if (info.status === "ok") {
    setStatus($("about"), `Model ${info.model} (pooler ${info.pooler}) · index of `
      + `${info.size.toLocaleString("en")} sentences of ${source} (${info.backend}, ${info.dim}-d)`);
  } else if (info.status === "indexing") {
    setStatus($("about"), `Model ${info.model} (pooler ${info.pooler}) · indexing `
      + `${info.size.toLocaleString("en")} / ${info.total.toLocaleString("en")} sentences of ${source}; `
      + "search works when it is done");
  } else {
    setStatus($("about"), `The index of ${source} could not be built; this server cannot search.`, true);
  }
  $("about").title = `${info.model_path}\n${info.source}`;
}

// While the server indexes its corpus (right after start-up), show the progress until searches are answered.
async function waitForIndex() {
  for (;;) {
    await new Promise((done) => setTimeout(done, 1000));
    try {
      const info = await api("/api/info");
      showInfo(info);
      if (info.status !== "indexing") return;
    } catch (_) { /* the server is restarting or gone: try again */ }
  }
}

init();
