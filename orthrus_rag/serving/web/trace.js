// One question's trace as it streams in: retrievals with their passages, reasoning text as it is generated, the
// answer, the time line and, for an example, the gold panel.

import { el, seconds } from "./dom.js";

const SEGMENTS = {
  retrieve: [["queue_s", "queue"], ["embed_s", "embed"], ["search_s", "search"]],
  reason: [["queue_s", "queue"], ["prefill_s", "prefill"], ["decode_s", "decode"]],
};
const TOTALS = [["queue_s", "queue"], ["embed_s", "embed"], ["search_s", "search"], ["prefill_s", "prefill"],
                ["decode_s", "decode"], ["other_s", "other"]];

export class TraceView {
  constructor(container) {
    this.root = container;
    this.root.replaceChildren();
    this.calls = new Map();  // call number -> {card, text, ended}
    this.ended = [];  // retrieval and reasoning events, for the time line
    this.steps = el("ol", { class: "calls" });
    this.head = el("div", { class: "trace-head" });
    this.root.append(this.head, this.steps);
  }

  handle(event) {
    const handler = {
      start: () => this.head.replaceChildren(el("span", { class: "pill" }, event.pipeline), " ", event.question),
      call_start: () => this.startCall(event),
      text: () => this.calls.get(event.call)?.text.append(event.text),
      retrieval: () => this.endRetrieval(event),
      reasoning: () => this.endReasoning(event),
      answer: () => this.showAnswer(event),
      error: () => this.showError(event.error),
    }[event.type];
    if (handler) handler();
  }

  startCall(event) {
    const retrieve = event.kind === "retrieve";
    const title = retrieve ? `Retrieval: ${event.input}` : "Reasoning";
    const text = el("pre", { class: "text streaming" });
    const card = el("li", { class: `call ${event.kind}`, "data-call": event.call },
                    el("div", { class: "call-title" }, el("span", { class: "kind" }, retrieve ? "search" : "think"),
                       " ", title), retrieve ? null : text);
    this.calls.set(event.call, { card, text });
    this.steps.append(card);
  }

  endRetrieval(event) {
    const call = this.calls.get(event.call);
    const list = el("ol", { class: "passages" }, event.passages.map((p) => el("li", { class: "passage" },
      el("span", { class: "title" }, p.title || p.id), " ", el("span", { class: "score" }, p.score.toFixed(3)),
      el("div", { class: "snippet" }, p.text.length > 180 ? `${p.text.slice(0, 180)}…` : p.text))));
    call.card.append(list, this.callTime(event));
    this.ended.push({ kind: "retrieve", ...event });
  }

  endReasoning(event) {
    const call = this.calls.get(event.call);
    call.text.textContent = event.text;
    call.text.classList.remove("streaming");
    call.card.append(this.callTime(event, `${event.prompt_tokens} prompt + ${event.completion_tokens} new tokens`));
    this.ended.push({ kind: "reason", ...event });
  }

  callTime(event, extra) {
    return el("div", { class: "call-time" }, `${seconds(event.end_s - event.start_s)}`, extra ? ` · ${extra}` : null);
  }

  showAnswer(event) {
    if (!this.calls.size) this.showPlainTrace(event.trace);  // a server whose pipelines cannot stream their calls
    this.root.append(el("div", { class: "answer" }, el("span", { class: "label" }, "Answer"),
                        el("strong", { class: "answer-text" }, event.answer || "(no answer)"),
                        el("span", { class: "call-time" }, seconds(event.latency_s))));
    this.root.append(timeline(this.ended, event.timeline));
    if (event.score) this.root.append(goldPanel(event.score));
  }

  showPlainTrace(trace) {
    for (const [i, e] of trace.entries()) {
      this.steps.append(el("li", { class: `call ${e.kind}`, "data-call": i },
                           el("div", { class: "call-title" }, e.kind === "retrieve" ? `Retrieval: ${e.input}`
                                                                                     : "Reasoning"),
                           el("pre", { class: "text" }, e.output)));
    }
  }

  showError(error) {
    this.root.append(el("div", { class: "error" }, error.message));
  }
}

function timeline(calls, totals) {
  const span = Math.max(totals.total_s, ...calls.map((c) => c.end_s), 1e-6);
  const rows = calls.map((c) => {
    const parts = SEGMENTS[c.kind].map(([key, name]) => el("span", {
      class: `seg ${name}`, title: `${name} ${seconds(c[key])}`,
      style: `width:${(100 * c[key]) / Math.max(c.end_s - c.start_s, 1e-6)}%`,
    }));
    return el("div", { class: "tl-row" }, el("span", { class: "tl-label" }, `${c.kind === "retrieve" ? "search" :
      "think"} ${c.call}`), el("div", { class: "tl-track" }, el("div", {
      class: "tl-bar", style: `left:${(100 * c.start_s) / span}%;width:${(100 * (c.end_s - c.start_s)) / span}%`,
    }, parts)));
  });
  const legend = TOTALS.map(([key, name]) => el("span", { class: "legend-item" },
                                                el("span", { class: `swatch seg ${name}` }), `${name} ${seconds(totals[key])}`));
  return el("div", { class: "timeline" }, el("div", { class: "label" }, `Where the ${seconds(totals.total_s)} went`),
            el("div", { class: "legend" }, legend), rows);
}

function goldPanel(score) {
  const matched = score.acc > 0;
  const titles = score.gold_titles.map((t) => el("li", { class: score.found_titles.includes(t) ? "found" : "missed" },
                                                 `${score.found_titles.includes(t) ? "✓" : "✗"} ${t}`));
  return el("div", { class: `gold ${matched ? "match" : "miss"}` },
            el("div", {}, el("span", { class: "label" }, "Gold answer"), el("strong", { class: "gold-answer" },
                                                                            score.gold),
               score.aliases.length ? ` (also: ${score.aliases.join(", ")})` : null),
            el("div", { class: "verdict" }, matched ? "✓ matched" : "✗ not matched",
               ` · Acc ${score.acc.toFixed(0)} · EM ${score.em.toFixed(0)} · F1 ${score.f1.toFixed(2)}`),
            el("div", {}, el("span", { class: "label" }, "Gold passages found"),
               score.recall === null ? " (none listed)" : ` ${score.found_titles.length} of ${score.gold_titles.length}`),
            el("ul", { class: "gold-titles" }, titles));
}
