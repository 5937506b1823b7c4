// The web explorer: Route, Map and LLMs views of the served space, from the service's own JSON
// endpoints (POST /v1/route, GET /v1/models, /v1/explore/map, /v1/explore/llms, /v1/similar). Plain JS, and
// plotly.js as the Python package ships it: nothing is fetched from outside this service.
"use strict";

// Okabe-Ito: distinguishable with the common colour-vision deficiencies; marker symbols repeat
// the distinction when there are more benchmarks than colours
const COLOURS = ["#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7", "#000000"];
const SYMBOLS = ["circle", "square", "triangle-up", "cross", "x", "star"];
const state = { models: null, map: null, llms: null };
const $ = (id) => document.getElementById(id);

// plotly.js (4.6 MB) loads when a chart is first drawn: running it holds the page's thread for a
// second or two on a slow machine, and fetching it costs the service, so nothing that needs no
// chart (the space's name, the route form, the LLM table, finding an LLM) waits for it. (Fetched
// as the page loads, it made finding an LLM among 5,049 twice as slow: benchmarks/zoo.py.)
const PLOTLY = "/static/plotly.min.js";
let plotlyLoading = null;
function plotly() {
  plotlyLoading ??= new Promise((resolve, reject) => {
    const s = document.createElement("script");
    s.src = PLOTLY;
    s.onload = () => resolve(window.Plotly);
    s.onerror = () => { plotlyLoading = null; reject(new Error("plotly.js did not load")); };
    document.head.append(s);
  });
  return plotlyLoading;
}

// a chart below the fold is drawn when it scrolls into view
function whenVisible(node, draw) {
  const seen = new IntersectionObserver((entries) => {
    if (entries.some((e) => e.isIntersecting)) { seen.disconnect(); draw(); }
  });
  seen.observe(node);
}

// A service that requires keys answers 401: ask for one once (a key with the route and explore
// scopes), keep it for this tab only, and send it with every request
let asking = null;
function askForKey() {
  asking ??= Promise.resolve(window.prompt(
    "This service needs an API key with the route and explore scopes (jeirt keys create --scopes route,explore):"))
    .then((key) => { if (key && key.trim()) sessionStorage.setItem("jeirt-key", key.trim()); asking = null; return !!key; });
  return asking;
}

async function getJSON(url, body) {
  for (let attempt = 0; ; attempt++) {
    const headers = body === undefined ? {} : { "content-type": "application/json" };
    const key = sessionStorage.getItem("jeirt-key");
    if (key) headers.authorization = `Bearer ${key}`;
    const r = await fetch(url, body === undefined ? { headers } : { method: "POST", headers, body: JSON.stringify(body) });
    const data = await r.json();
    if (r.status === 401 && attempt === 0 && await askForKey()) continue;
    if (!r.ok) throw new Error(data.error || `${url} answered ${r.status}`);
    return data;
  }
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  for (const c of children) node.append(c);
  return node;
}

// ---- tabs (arrow keys move between them, as the ARIA tabs pattern has it) ----------------------
const TABS = ["route", "map", "llms"];
function select(name) {
  for (const t of TABS) {
    const on = t === name;
    $(`tab-${t}`).setAttribute("aria-selected", on);
    $(`tab-${t}`).tabIndex = on ? 0 : -1;
    $(`panel-${t}`).hidden = !on;
  }
  $(`tab-${name}`).focus();
  if (name === "map") showMap();
  if (name === "llms") showLLMs();
}
for (const t of TABS) {
  $(`tab-${t}`).addEventListener("click", () => select(t));
  $(`tab-${t}`).addEventListener("keydown", (e) => {
    const i = TABS.indexOf(t);
    if (e.key === "ArrowRight") select(TABS[(i + 1) % TABS.length]);
    if (e.key === "ArrowLeft") select(TABS[(i + TABS.length - 1) % TABS.length]);
  });
}

// ---- Route -------------------------------------------------------------------------------------
function policies() {
  const withCosts = state.models && state.models.data.some((m) => m.cost !== null || m.input_usd_per_mtok != null);
  return ["tuned", "most_likely", ...(withCosts ? ["cost_weighted", "cheapest_within_margin", "quality_target"] : [])];
}

// what a policy needs besides its name (the explorer asks within 5% of the best p), and the
// scores of the LLMs with the highest p (the chart shows 30; a zoo has thousands)
function request(queries, policy) {
  const body = { queries, policy, top_k: 200 };
  return policy === "quality_target" ? { ...body, target_share: 0.95 } : body;
}

async function route(event) {
  event.preventDefault();
  $("route-error").textContent = "";
  const queries = $("query").value.split("\n").map((q) => q.trim()).filter((q) => q);
  if (!queries.length) { $("route-error").textContent = "Type a question first."; return; }
  const policy = $("policy").value;
  const out = $("route-results");
  out.replaceChildren(el("p", {}, "routing…"));
  try {
    const main = await getJSON("/v1/route", request(queries, policy));
    out.replaceChildren(...main.results.map((r, i) => renderResult(r, i, queries[i])));
    // the picks under the other policies follow, one request each
    for (const p of policies().filter((p) => p !== policy)) {
      const rs = (await getJSON("/v1/route", request(queries, p))).results;
      rs.forEach((r, i) => out.querySelector(`.result[data-query="${i}"] .others`).append(` · under ${p}: ${r.chosen}`));
    }
  } catch (e) {
    $("route-error").textContent = e.message;
  }
}

function renderResult(r, i, query) {
  const box = el("div", { class: "result", "data-query": i });
  box.append(el("p", { class: "pick" }, `${query.slice(0, 120)} → `,
    el("strong", { class: "chosen", "data-query": i }, r.chosen),
    ` (p = ${r.p_correct.toFixed(3)}, policy ${r.policy})`));
  const facts = [`difficulty ||E_Q|| = ${r.difficulty.toFixed(2)}`];
  if (r.nearest_benchmark) facts.push(`nearest benchmark: ${r.nearest_benchmark}`);
  if (r.expected_cost !== null) facts.push(`expected cost: $${r.expected_cost.toPrecision(3)}`);
  box.append(el("p", { class: "facts" }, facts.join(" · "), el("span", { class: "others" })));
  box.append(el("p", { class: "why" }, why(r)));
  const shown = chartRows(r);
  const bars = el("div", { class: "plot", id: `bars-${i}`, role: "img", style: `height: ${Math.max(300, 24 * shown.length + 60)}px`,
    "aria-label": `probability of a correct answer for each LLM and the policy's own score; highest p ${r.scores[0].model}` });
  const hist = el("div", { class: "plot", id: `difficulty-${i}`, role: "img",
    "aria-label": `this question's difficulty ${r.difficulty.toFixed(2)} among the training questions'` });
  box.append(el("div", { class: "two" }, bars, hist));
  plotly().then((Plotly) => {
    const s = [...shown].reverse();  // plotly draws the first row at the bottom
    const names = s.map((m) => (m.model === r.chosen ? `▶ ${m.model}` : m.model));
    const differs = s.some((m) => Math.abs(m.score - m.p_correct) > 1e-9);
    const traces = [{ type: "bar", orientation: "h", name: "P(correct)", x: s.map((m) => m.p_correct), y: names,
      text: s.map((m) => (differs ? `p ${m.p_correct.toFixed(3)} · score ${m.score.toFixed(3)}` : m.p_correct.toFixed(3))),
      textposition: "outside", cliponaxis: false, hoverinfo: "y+text",
      marker: { color: s.map((m) => (m.model === r.chosen ? "#D55E00" : "#0072B2")) } }];
    if (differs) {
      traces.push({ type: "scatter", mode: "markers", name: `the ${r.policy} policy's score`, x: s.map((m) => m.score),
        y: names, marker: { symbol: "diamond", size: 10, color: "#000" }, hoverinfo: "skip" });
    }
    const lo = Math.min(0, ...s.map((m) => m.score));
    Plotly.newPlot(bars, traces,
      { margin: { l: 20, r: 110, t: 25, b: 35 }, title: { text: "P(correct) per LLM", font: { size: 13 } },
        xaxis: { range: [lo, 1] }, showlegend: differs, legend: { orientation: "h", y: -0.08 },
        yaxis: { automargin: true, tickmode: "array", tickvals: names, ticktext: names } },
      { displayModeBar: false, responsive: true });
    drawDifficulty(hist, r.difficulty);
  });
  return box;
}

// at most 30 LLMs in the chart (the highest p), the chosen one always among them
function chartRows(r) {
  const top = r.scores.slice(0, 30);
  const chosen = r.scores.find((m) => m.model === r.chosen);
  return top.some((m) => m.model === r.chosen) || !chosen ? top : [...top.slice(0, 29), chosen];
}

// why the pick is not simply the highest p, in the policy's own terms
function why(r) {
  const best = r.scores[0];
  const pick = r.scores.find((m) => m.model === r.chosen) || best;
  if (best.model === r.chosen) return `${r.chosen} has the highest P(correct) and is the pick.`;
  const rule = {
    tuned: "the policy chosen on validation questions ranks the LLMs by its own score: P(correct) blended with " +
      "how each LLM did on the nearest training questions and on the benchmark this question most likely belongs to " +
      "(and keeps the best-on-average LLM unless another is clearly better)",
    cost_weighted: "cost_weighted ranks the LLMs by P(correct) − cost_weight × cost",
    cheapest_within_margin: "cheapest_within_margin takes the cheapest LLM whose P(correct) is within the margin of the best",
    quality_target: "quality_target takes the cheapest LLM whose P(correct) reaches 95% of the best one's",
  }[r.policy] || `${r.policy} ranks the LLMs by its own score`;
  return `Why not ${best.model} (the highest P(correct), ${best.p_correct.toFixed(3)})? ${rule[0].toUpperCase()}${rule.slice(1)}: ` +
    `${r.chosen} scores ${pick.score.toFixed(3)} against ${best.score.toFixed(3)}.`;
}

async function drawDifficulty(node, value) {
  const map = await loadMap().catch(() => null);
  if (!map) return;
  const Plotly = await plotly();
  const h = map.difficulty_histogram;
  const mids = h.counts.map((_, k) => (h.edges[k] + h.edges[k + 1]) / 2);
  Plotly.newPlot(node, [{ type: "bar", x: mids, y: h.counts, marker: { color: "#999" }, name: "training questions" }],
    { margin: { l: 45, r: 10, t: 25, b: 35 }, title: { text: "difficulty among training questions", font: { size: 13 } },
      shapes: [{ type: "line", x0: value, x1: value, yref: "paper", y0: 0, y1: 1, line: { color: "#D55E00", width: 3 } }],
      showlegend: false }, { displayModeBar: false, responsive: true });
}

// ---- Map ---------------------------------------------------------------------------------------
function loadMap() {
  if (!state.map) state.map = getJSON("/v1/explore/map");
  return state.map;
}

async function showMap() {
  let map;
  try { map = await loadMap(); } catch (e) { $("map-note").textContent = e.message; return; }
  if ($("map-plot").dataset.drawn === map.space) return;
  $("map-note").textContent = `${map.projection}; ${map.sampling} (of ${map.questions_total}); ` +
    `${map.benchmarks.length} benchmarks; axes explain ${(100 * map.explained_variance[0]).toFixed(0)}% and ` +
    `${(100 * map.explained_variance[1]).toFixed(0)}% of the directions' variance. Hover or click a point.`;
  const p = map.points;
  const traces = map.benchmarks.map((b, k) => {
    const rows = p.benchmark.flatMap((x, i) => (x === b ? [i] : []));
    return { type: "scattergl", mode: "markers", name: b, x: rows.map((i) => p.x[i]), y: rows.map((i) => p.y[i]),
      customdata: rows.map((i) => [i, p.difficulty[i]]),
      text: rows.map((i) => (p.text ? p.text[i].slice(0, 120) : p.question_id[i])),
      hovertemplate: "%{text}<br>difficulty %{customdata[1]:.2f}<extra>" + b + "</extra>",
      marker: { size: 5, opacity: 0.7, color: COLOURS[k % COLOURS.length],
        symbol: SYMBOLS[Math.floor(k / COLOURS.length) % SYMBOLS.length] } };
  });
  const Plotly = await plotly();
  // a zoo's thousands of LLMs: WebGL markers named on hover; a few dozen: SVG, named on the map
  const many = map.llms.name.length > 40;
  traces.push({ type: many ? "scattergl" : "scatter", mode: many ? "markers" : "markers+text", name: "LLMs",
    x: map.llms.x, y: map.llms.y, text: map.llms.name, textposition: "top center", textfont: { size: 9 },
    marker: { symbol: "diamond", size: many ? 5 : 9, color: "#000", opacity: many ? 0.5 : 1 },
    hovertemplate: "%{text}<extra>LLM vector</extra>" });
  await Plotly.newPlot("map-plot", traces, { margin: { l: 40, r: 10, t: 10, b: 40 }, legend: { itemsizing: "constant" },
    xaxis: { title: "PC 1" }, yaxis: { title: "PC 2" } }, { responsive: true });
  $("map-plot").dataset.drawn = map.space;
  $("map-plot").on("plotly_click", (ev) => pointDetail(map, ev.points[0]));
}

async function pointDetail(map, pt) {
  if (!Array.isArray(pt.customdata)) return;  // an LLM, not a question
  const i = pt.customdata[0];
  const p = map.points;
  const text = p.text ? p.text[i] : null;
  const box = $("map-detail");
  box.replaceChildren(el("p", {}, el("strong", {}, p.benchmark[i]), ` · ${p.question_id[i]} · difficulty ${p.difficulty[i].toFixed(2)}`),
    el("p", {}, text || "(the space stores no question texts)"));
  if (!text) return;
  try {
    const r = (await getJSON("/v1/route", { query: text, policy: "most_likely", top_k: 8 })).results[0];
    box.append(el("p", {}, "most likely to answer: " + r.scores.map((s) => `${s.model} ${s.p_correct.toFixed(2)}`).join(", ")));
  } catch (e) { box.append(el("p", { class: "error" }, e.message)); }
}

// ---- LLMs --------------------------------------------------------------------------------------
let llmsAtLoad = null;  // asked for as the page loads; each later visit of the tab asks again
async function showLLMs() {
  let t;
  const asked = llmsAtLoad ?? getJSON("/v1/explore/llms");
  llmsAtLoad = null;
  try { t = await asked; } catch (e) { $("llms-note").textContent = e.message; return; }
  state.llms = t;
  const n = t.onboarded.filter((x) => x).length;
  $("llms-note").textContent = `${t.llms.length} LLMs (${n} onboarded) on ${t.benchmarks.length} benchmarks, space ${t.space}.`;
  // a zoo's thousands: the table, the heatmap and the compare lists hold the best TOP by overall
  // predicted accuracy; any other LLM is found by name
  const order = t.llms.map((_, i) => i).sort((a, b) => t.overall[b] - t.overall[a]);
  const top = order.slice(0, TOP);
  t.index = new Map(t.llms.map((name, i) => [name, i]));
  $("llm-names").replaceChildren(...t.llms.map((name) => el("option", { value: name })));
  $("llm-caption").textContent = "Predicted accuracy per benchmark (mean predicted probability over its training " +
    "questions)" + (order.length > TOP ? `: the ${TOP} highest of ${order.length} overall; find any other above` : "");
  const table = $("llm-table");
  table.querySelectorAll("thead, tbody").forEach((x) => x.remove());
  const head = el("tr", {}, el("th", { scope: "col" }, "LLM"), el("th", { scope: "col" }, "overall"),
    ...t.benchmarks.map((b) => el("th", { scope: "col" }, b)));
  const body = el("tbody", {}, ...top.map((i) => llmRow(t, i)));
  table.append(el("thead", {}, head), body);
  for (const id of ["cmp-a", "cmp-b"]) {
    $(id).replaceChildren(...top.map((i) => el("option", { value: i }, t.llms[i])));
  }
  if (top.length > 1) $("cmp-b").value = top[1];
  compare();
  $("versions").replaceChildren(...(t.versions || []).map((v) =>
    el("li", {}, `version ${v.version}${v.aliases.length ? " @" + v.aliases.join(", @") : ""}`)));
  if (t.versions === null) $("versions").append(el("li", {}, "the registry cannot be read right now"));
  const shown = top.slice(0, 50);
  whenVisible($("heatmap"), () => drawHeatmap(t, shown));
}

async function drawHeatmap(t, shown) {
  const Plotly = await plotly();
  Plotly.newPlot("heatmap", [{ type: "heatmap", z: shown.map((i) => t.accuracy[i]), x: t.benchmarks,
    y: shown.map((i) => t.llms[i] + (t.onboarded[i] ? " *" : "")), colorscale: "Cividis", zmin: 0, zmax: 1,
    colorbar: { title: { text: "predicted accuracy" } } }],
  { margin: { l: 190, r: 10, t: 10, b: 120 }, yaxis: { autorange: "reversed" } }, { responsive: true });
}

const TOP = 100;
function llmRow(t, i) {
  return el("tr", t.onboarded[i] ? { class: "onboarded" } : {}, el("td", {}, t.llms[i]),
    el("td", {}, t.overall[i].toFixed(3)), ...t.accuracy[i].map((v) => el("td", {}, v.toFixed(3))));
}

// an LLM found by name: its row, and the LLMs that answer most like it (GET /v1/similar)
async function find() {
  const t = state.llms;
  const name = $("find").value.trim();
  if (!t || !name) return;
  const box = $("found");
  let i = t.index.get(name);
  if (i === undefined) {  // part of a name: the first LLM that contains it, any case
    const needle = name.toLowerCase();
    i = t.llms.findIndex((n) => n.toLowerCase().includes(needle));
    if (i < 0) { box.replaceChildren(el("p", { class: "error" }, `no LLM named like “${name}”`)); return; }
  }
  const head = el("tr", {}, el("th", { scope: "col" }, "LLM"), el("th", { scope: "col" }, "overall"),
    ...t.benchmarks.map((b) => el("th", { scope: "col" }, b)));
  box.replaceChildren(el("table", { id: "found-row" }, el("thead", {}, head), el("tbody", {}, llmRow(t, i))),
    el("p", {}, "finding the LLMs that answer alike…"));
  if (![...$("cmp-a").options].some((o) => Number(o.value) === i)) $("cmp-a").append(el("option", { value: i }, t.llms[i]));
  $("cmp-a").value = i;
  compare();
  try {
    const near = await getJSON(`/v1/similar?llm=${encodeURIComponent(t.llms[i])}&k=10`);
    const items = near.similar.map((s) => el("li", {}, el("strong", {}, s.llm), " — " + [
      s.agreement === null ? "too few shared questions" : `agrees on ${(100 * s.agreement).toFixed(1)}% of ${s.shared} shared questions`,
      `vector cosine ${s.cosine.toFixed(3)}`, ...(s.params_b === null ? [] : [`${s.params_b}B parameters`])].join(" · ")));
    box.lastChild.replaceWith(el("h3", {}, `The LLMs that answer most like ${t.llms[i]}`), el("ol", { id: "similar" }, ...items));
  } catch (e) { box.lastChild.replaceWith(el("p", { class: "error" }, e.message)); }
}

function compare() {
  const t = state.llms;
  if (!t) return;
  const a = Number($("cmp-a").value), b = Number($("cmp-b").value);
  const rows = t.benchmarks.map((bench, k) => {
    const d = t.accuracy[a][k] - t.accuracy[b][k];
    const better = Math.abs(d) < 0.005 ? "level" : (d > 0 ? t.llms[a] : t.llms[b]);
    return el("li", {}, `${bench}: ${better} (${t.accuracy[a][k].toFixed(3)} vs ${t.accuracy[b][k].toFixed(3)})`);
  });
  $("compare").replaceChildren(el("ul", {}, ...rows));
}

// ---- start ---------------------------------------------------------------------------------------
$("route-form").addEventListener("submit", route);
$("cmp-a").addEventListener("change", compare);
$("cmp-b").addEventListener("change", compare);
$("find").addEventListener("change", find);
getJSON("/v1/models").then((m) => {
  state.models = m;  // the first page: enough to tell whether prices are set
  $("space").textContent = `space ${m.space} (@${m.alias}), ${m.total} LLMs`;
  for (const option of $("policy").options) {
    option.disabled = !policies().includes(option.value);
  }
}).catch((e) => { $("space").textContent = e.message; });
loadMap().catch(() => {});  // warm: the difficulty chart and the map come from it
llmsAtLoad = getJSON("/v1/explore/llms");
llmsAtLoad.catch(() => {});  // its error is shown when the tab is
