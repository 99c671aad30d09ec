// The engine view: the last steps of each engine (GET /v1/engine/steps), one stacked bar per step.

import { getJSON } from "./api.js";
import { el } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const KINDS = [  // bottom to top
  ["decode", "decode", (s) => s.tokens.decode],
  ["prefill", "prefill", (s) => s.tokens.prefill],
  ["embed", "embed (generator's layers)", (s) => s.tokens.embed - s.embedder_tokens],
  ["embedder", "embed (co-located embedder)", (s) => s.embedder_tokens],
  ["copied", "passage KV copied in (not computed)", (s) => s.copied_tokens ?? 0],
];
const HEIGHT = 160;
const BAR = 6;
const MIN_HEIGHT = 1;

export class EngineView {
  constructor(container, legend, { keep = 120, periodMs = 500 } = {}) {
    this.root = container;
    this.keep = keep;
    this.periodMs = periodMs;
    this.replicas = new Map();  // name -> {steps: [], chart, stats}
    this.paused = false;
    legend.replaceChildren(...KINDS.map(([cls, name]) => el("span", { class: "legend-item" },
                                                             el("span", { class: `swatch ${cls}` }), name)));
  }

  start() {
    const tick = async () => {
      if (!this.paused) await this.poll();
      setTimeout(tick, this.periodMs);
    };
    tick();
  }

  async poll() {
    const lasts = [...this.replicas.values()].map((r) => r.steps.at(-1)?.id ?? 0);
    const since = lasts.length ? Math.min(...lasts) : 0;
    try {
      const body = await getJSON(`/v1/engine/steps?since=${since}&limit=${this.keep}`);
      for (const { replica, steps } of body.replicas) this.add(replica, steps);
    } catch (err) {
      if (err.needsKey) this.paused = true;  // resumed once the page has a key
      else for (const replica of this.replicas.values()) replica.steps = [];  // a restarted server counts from 1
    }
  }

  add(name, steps) {
    const replica = this.replicas.get(name) || this.create(name);
    const last = replica.steps.at(-1)?.id ?? 0;
    const fresh = steps.filter((s) => s.id > last);
    if (!fresh.length && replica.drawn) return;
    replica.steps = replica.steps.concat(fresh).slice(-this.keep);
    draw(replica);
  }

  create(name) {
    const chart = document.createElementNS(SVG, "svg");
    chart.setAttribute("class", "steps-chart");
    chart.setAttribute("viewBox", `0 0 ${this.keep * BAR} ${HEIGHT}`);
    chart.setAttribute("preserveAspectRatio", "none");
    const stats = el("div", { class: "engine-stats" });
    const box = el("div", { class: "replica", "data-replica": name }, el("h3", {}, name), chart, stats);
    this.root.append(box);
    const replica = { steps: [], chart, stats, keep: this.keep, drawn: false };
    this.replicas.set(name, replica);
    return replica;
  }
}

function draw(replica) {
  const { steps, chart, keep } = replica;
  const scale = Math.max(1, ...steps.map(rows));
  const offset = keep - steps.length;
  const bars = [];
  steps.forEach((step, i) => {
    const total = rows(step);
    const height = (HEIGHT * Math.sqrt(total)) / Math.sqrt(scale);  // square root: a few decodes stay visible
    let y = HEIGHT;
    for (const [cls, , count] of KINDS) {
      if (count(step) <= 0) continue;
      const h = Math.max(MIN_HEIGHT, (height * count(step)) / total);
      y -= h;
      const rect = document.createElementNS(SVG, "rect");
      for (const [k, v] of Object.entries({ x: (offset + i) * BAR, y, width: BAR - 1, height: h, class: cls,
                                            "data-step": step.id })) rect.setAttribute(k, v);
      const title = document.createElementNS(SVG, "title");
      title.textContent = describe(step);
      rect.append(title);
      bars.push(rect);
    }
  });
  chart.replaceChildren(...bars);
  replica.stats.replaceChildren(...stats(steps, scale));
  replica.drawn = true;
}

// The step's tokens, computed or copied in: what its bar's height shows.
function rows(step) {
  return step.tokens.decode + step.tokens.prefill + step.tokens.embed + (step.copied_tokens ?? 0);
}

function describe(step) {
  const t = step.tokens;
  const copied = step.copied_tokens || step.recomputed_tokens
    ? `; passage KV: ${step.copied_tokens ?? 0} tokens copied in, ${step.recomputed_tokens ?? 0} computed again` : "";
  return `step ${step.id}: ${t.decode} decode, ${t.prefill} prefill, ${t.embed} embed tokens in ` +
         `${(1000 * step.step_s).toFixed(0)} ms${copied}`;
}

function stats(steps, scale) {
  const last = steps.at(-1);
  if (!last) return [el("span", {}, "no steps yet: ask a question")];
  const recent = steps.slice(-20);
  const tokens = recent.reduce((n, s) => n + s.tokens.decode + s.tokens.prefill + s.tokens.embed, 0);
  const busy = recent.reduce((n, s) => n + s.step_s, 0);
  const items = [
    ["step", last.id], ["running", last.running], ["waiting (generate)", last.waiting.generate ?? 0],
    ["waiting (embed)", last.waiting.embed ?? 0], ["KV blocks", `${last.kv_blocks_used} / ${last.kv_blocks_total}`],
    ["tokens/s (last 20 steps)", busy > 0 ? Math.round(tokens / busy) : 0], ["tallest bar", `${scale} tokens`],
  ];
  return items.map(([name, value]) => el("span", { class: "stat" }, `${name}: `, el("strong", {}, String(value))));
}
