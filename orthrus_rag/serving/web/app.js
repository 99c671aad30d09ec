// The page: Ask (with examples and their gold), Compare, Engine; the API key prompt; messages.

import { ApiError, explain, getJSON, setApiKey, streamRag } from "./api.js";
import { el } from "./dom.js";
import { EngineView } from "./engine.js";
import { TraceView } from "./trace.js";

const $ = (id) => document.getElementById(id);
const state = { pipelines: [], engine: null };

function showMessage(text) {
  $("message").textContent = text;
  $("message").hidden = !text;
}

function handleError(err) {
  showMessage(err instanceof ApiError ? err.message : `Unexpected error in the page: ${err.message}`);
  if (err.needsKey) askForKey();
}

function askForKey() {
  $("key-form").hidden = false;
  $("key-input").focus();
}

// ---- tabs --------------------------------------------------------------------------------------------------------
function showTab(name) {
  for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.tab === name);
  for (const panel of document.querySelectorAll(".panel")) panel.hidden = panel.id !== name;
}

// ---- pipelines and examples --------------------------------------------------------------------------------------
async function loadPipelines() {
  const listed = await getJSON("/v1/rag/pipelines");
  state.pipelines = listed.pipelines;
  const names = listed.pipelines.map((p) => p.name);
  const options = (selected) => names.map((n) => el("option", { value: n, selected: n === selected }, n));
  $("pipeline").replaceChildren(...options(listed.default));
  $("compare-left").replaceChildren(...options(names.includes("standard_rag") ? "standard_rag" : names[0]));
  $("compare-right").replaceChildren(...options(names.includes("ircot") ? "ircot" : names.at(-1)));
  showSettings();
}

function settingsOf(name) {
  return state.pipelines.find((p) => p.name === name)?.settings || {};
}

function showSettings() {
  const settings = settingsOf($("pipeline").value);
  for (const [id, key] of [["k", "k"], ["max-steps", "max_steps"]]) {
    $(id).value = settings[key] ?? "";
    $(id).disabled = settings[key] === undefined;
  }
}

async function loadExamples(source) {
  const listed = await getJSON(`/v1/rag/examples?source=${encodeURIComponent(source || "demo")}`);
  $("example-source").replaceChildren(...listed.sources.map((s) => el("option", { value: s,
                                                                                  selected: s === listed.source }, s)));
  $("example").replaceChildren(el("option", { value: "" }, "(type your own)"),
                               ...listed.data.map((q) => el("option", { value: q.id, "data-question": q.question },
                                                            `${q.id.split(":")[1]}: ${q.question}`)));
}

function chooseExample() {
  const option = $("example").selectedOptions[0];
  if (option && option.value) $("question").value = option.dataset.question;
}

function exampleFor(question) {
  const option = $("example").selectedOptions[0];
  return option && option.value && option.dataset.question === question ? option.value : undefined;
}

// ---- asking ------------------------------------------------------------------------------------------------------
function requestBody(question, pipeline) {
  const body = { question, pipeline };
  const settings = settingsOf(pipeline);
  for (const [id, key] of [["k", "k"], ["max-steps", "max_steps"]]) {
    const value = parseInt($(id).value, 10);
    if (!$(id).disabled && Number.isInteger(value) && value !== settings[key]) body[key] = value;
  }
  const example = exampleFor(question);
  if (example) body.example = example;
  return body;
}

async function runInto(container, body) {
  const view = new TraceView(container);
  try {
    await streamRag(body, (event) => {
      view.handle(event);
      if (event.type === "error") showMessage(explain(0, event.error));
    });
  } catch (err) {
    view.showError({ message: err.message });
    throw err;
  }
}

// Runs a form's question: an empty one is a message, the button is off while it runs, failures are messages.
async function submit(event, { input, button, empty, run }) {
  event.preventDefault();
  const question = $(input).value.trim();
  if (!question) {
    showMessage(empty);
    return;
  }
  showMessage("");
  $(button).disabled = true;
  try {
    await run(question);
  } catch (err) {
    handleError(err);
  } finally {
    $(button).disabled = false;
  }
}

function ask(event) {
  return submit(event, {
    input: "question", button: "ask-button", empty: "Type a question first (or pick one of the examples).",
    run: (question) => runInto($("ask-result"), requestBody(question, $("pipeline").value)),
  });
}

function compare(event) {
  return submit(event, {
    input: "compare-question", button: "compare-button", empty: "Type a question to compare the two pipelines on.",
    run: compareBoth,
  });
}

async function compareBoth(question) {
  const sides = [["compare-left", "compare-left-result"], ["compare-right", "compare-right-result"]];
  const results = await Promise.allSettled(sides.map(([pick, out]) => runInto($(out), { question,
                                                                                         pipeline: $(pick).value })));
  const failed = results.find((r) => r.status === "rejected");
  if (failed) throw failed.reason;
}

// ---- start -------------------------------------------------------------------------------------------------------
async function load() {
  try {
    await loadPipelines();
    await loadExamples($("example-source").value);
    showMessage("");
    if (state.engine) state.engine.paused = false;
  } catch (err) {
    handleError(err);
  }
}

function wire() {
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => showTab(tab.dataset.tab));
  $("ask-form").addEventListener("submit", ask);
  $("compare-form").addEventListener("submit", compare);
  $("pipeline").addEventListener("change", showSettings);
  $("example").addEventListener("change", chooseExample);
  $("example-source").addEventListener("change", () => loadExamples($("example-source").value).catch(handleError));
  $("key-change").addEventListener("click", askForKey);
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    setApiKey($("key-input").value.trim());
    $("key-form").hidden = true;
    $("key-change").hidden = false;
    load();
  });
}

wire();
state.engine = new EngineView($("engine-replicas"), $("engine-legend"));
state.engine.start();
load();
