// The dashboard: plain DOM and SVG, no dependencies, no build step. Everything shown comes from the
// JSON API beside this file (relative URLs, so a token in the path carries over); text is always set
// as text, never parsed as HTML.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const main = document.getElementById("main");

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "onclick") el.addEventListener("click", v);
    else if (v !== null && v !== undefined) el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

function s(tag, attrs) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
  return el;
}

async function api(path, init) {
  const r = await fetch("api/" + path, init);
  const body = await r.json();
  if (!r.ok) throw new Error(body.message || ("HTTP " + r.status));
  return body;
}

const fmt = {
  int: (n) => (n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US")),
  ms: (n) => (n === null || n === undefined ? "-" : n >= 10000 ? (n / 1000).toFixed(1) + " s" : Math.round(n) + " ms"),
  pct: (r) => (r === null || r === undefined ? "-" : (r * 100).toFixed(1) + "%"),
  money: (c) => (c === null || c === undefined ? "-" : "$" + c.toFixed(4)),
  when: (ms) => (ms ? new Date(ms).toLocaleString() : "-"),
  time: (ms) => new Date(ms).toLocaleString([], {weekday: "short", hour: "2-digit", minute: "2-digit"}),
};

function card(label, value) {
  return h("div", {class: "card"}, h("div", {class: "label"}, label), h("div", {class: "value"}, value));
}

// A chart of one or two series over time: lines, or bars with `bars`. Missing values are gaps.
function chart(title, points, series, opts = {}) {
  const W = 380, H = 160, L = 44, B = 18, T = 8, R = 8;
  const svg = s("svg", {class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title});
  const values = points.flatMap((p) => series.map((k) => p[k])).filter((v) => v !== null && v !== undefined);
  const max = Math.max(opts.max || 0, ...values, 1e-9);
  const x = (i) => L + (points.length <= 1 ? 0 : (i * (W - L - R)) / (points.length - 1));
  const y = (v) => H - B - (v / max) * (H - B - T);
  svg.append(s("line", {class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B}));
  svg.append(s("line", {class: "axis", x1: L, y1: T, x2: L, y2: H - B}));
  const top = s("text", {x: L - 4, y: T + 8, "text-anchor": "end"});
  top.textContent = opts.label ? opts.label(max) : fmt.int(Math.round(max));
  svg.append(top);
  if (points.length) {
    for (const [i, anchor] of [[0, "start"], [points.length - 1, "end"]]) {
      const t = s("text", {x: x(i), y: H - 4, "text-anchor": anchor});
      t.textContent = fmt.time(points[i].t);
      svg.append(t);
    }
  }
  series.forEach((key, n) => {
    if (opts.bars) {
      const w = Math.max(1, (W - L - R) / Math.max(points.length, 1) - 1);
      points.forEach((p, i) => {
        const v = p[key] || 0;
        svg.append(s("rect", {class: "bar series-" + key + (n ? " bad" : ""), x: x(i) - w / 2, y: y(v), width: w, height: H - B - y(v)}));
      });
      return;
    }
    let d = "";
    points.forEach((p, i) => {
      const v = p[key];
      if (v === null || v === undefined) return;
      d += (d && points[i - 1] && points[i - 1][key] !== null && points[i - 1][key] !== undefined ? " L" : " M") + x(i).toFixed(1) + " " + y(v).toFixed(1);
    });
    svg.append(s("path", {class: "series series-" + key + (n ? " second" : ""), d: d.trim() || `M${L} ${H - B}`}));
    points.forEach((p, i) => {  // a dot per value: a lone point between gaps shows too
      if (p[key] !== null && p[key] !== undefined) svg.append(s("circle", {class: "dot" + (n ? " second" : ""), cx: x(i), cy: y(p[key]), r: 2}));
    });
  });
  const legend = series.length > 1 ? h("span", {class: "muted"}, " (" + series.join(", ").replaceAll("_", " ") + ")") : null;
  return h("div", {class: "chart-box"}, h("h3", {}, title, legend), svg);
}

function table(headers, rows) {
  return h("table", {},
    h("thead", {}, h("tr", {}, headers.map(([label, cls]) => h("th", {class: cls || null}, label)))),
    h("tbody", {}, rows));
}

function show(...nodes) {
  main.replaceChildren(...nodes);
}

// ---- pages -------------------------------------------------------------------------------------
async function overview() {
  const [o, days] = await Promise.all([api("overview?hours=24"), api("usage?since=7d&by=day")]);
  const t = o.totals;
  const series = o.series;
  show(
    h("h1", {}, "Last 24 hours"),
    h("div", {class: "cards"},
      card("Provider calls", fmt.int(t.calls)), card("Errors", fmt.int(t.errors)),
      card("Input tokens", fmt.int(t.input_tokens)), card("Output tokens", fmt.int(t.output_tokens)),
      card("Cache hit rate", fmt.pct(t.cache_hit_rate)), card("Mean TTFT", fmt.ms(t.mean_ttft_ms)), card("Cost", fmt.money(t.cost))),
    h("div", {class: "charts", id: "charts"},
      chart("Provider calls", series, ["calls"], {bars: true}),
      chart("Tokens", series, ["input_tokens", "output_tokens"]),
      chart("Cache hit rate", series, ["cache_hit_rate"], {max: 1, label: fmt.pct}),
      chart("Mean time to first token", series, ["ttft_ms"], {label: fmt.ms}),
      chart("Errors", series, ["errors"], {bars: true})),
    h("h2", {}, "By model"),
    table([["Model"], ["Calls", "num"], ["Errors", "num"], ["Input", "num"], ["Output", "num"], ["Cache read", "num"], ["Cache hit", "num"], ["Cost", "num"]],
      o.models.map((m) => h("tr", {},
        h("td", {}, m.model_id), h("td", {class: "num"}, fmt.int(m.calls)), h("td", {class: "num"}, fmt.int(m.errors)),
        h("td", {class: "num"}, fmt.int(m.input_tokens)), h("td", {class: "num"}, fmt.int(m.output_tokens)),
        h("td", {class: "num"}, fmt.int(m.cache_read_tokens)), h("td", {class: "num"}, fmt.pct(m.cache_hit_rate)),
        h("td", {class: "num"}, fmt.money(m.cost))))),
    h("h2", {}, "Last 7 days, by day"),
    table([["Day"], ["Model"], ["Calls", "num"], ["Errors", "num"], ["Input", "num"], ["Output", "num"], ["Cache hit", "num"], ["Cost", "num"]],
      days.rows.map((d) => h("tr", {"data-day": d.group},
        h("td", {}, d.group), h("td", {}, d.model_id), h("td", {class: "num"}, fmt.int(d.calls)), h("td", {class: "num"}, fmt.int(d.errors)),
        h("td", {class: "num"}, fmt.int(d.input_tokens)), h("td", {class: "num"}, fmt.int(d.output_tokens)),
        h("td", {class: "num"}, fmt.pct(d.cache_hit_rate)), h("td", {class: "num"}, fmt.money(d.cost))))));
}

async function conversations(cursor) {
  const page = await api("conversations?limit=50" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
  const rows = page.items.map((c) => h("tr", {"data-conversation": c.conversation_id},
    h("td", {class: "mono"}, h("a", {href: "#/conversation/" + encodeURIComponent(c.conversation_id)}, c.conversation_id.slice(0, 12))),
    h("td", {}, c.first_message || h("span", {class: "muted"}, "(no message)")),
    h("td", {}, c.model_id || "-"), h("td", {class: "num"}, c.turns), h("td", {}, fmt.when(c.last_activity_ms))));
  show(
    h("h1", {}, "Conversations"),
    rows.length ? table([["Conversation"], ["First message"], ["Model"], ["Turns", "num"], ["Last activity"]], rows) : h("p", {class: "muted"}, "No conversations yet."),
    h("div", {class: "pager"},
      cursor ? h("button", {onclick: () => route()}, "First page") : null, " ",
      page.next ? h("button", {id: "next", onclick: () => conversations(page.next)}, "Next page") : null));
}

function callRow(c) {
  const toolList = c.tools.length
    ? h("ul", {class: "tools"}, c.tools.map((t) => h("li", {}, t.name + " " + fmt.ms(t.ms), t.error ? h("span", {class: "bad"}, " error") : null)))
    : h("span", {class: "muted"}, "-");
  const bodies = c.has_bodies ? h("button", {onclick: (e) => showBodies(e.target, c)}, "bodies") : null;
  return h("tr", {"data-trace": c.trace_id, "data-seq": c.seq},
    h("td", {class: "num"}, c.seq), h("td", {}, c.purpose), h("td", {class: "num"}, fmt.ms(c.ttfb_ms)), h("td", {class: "num"}, fmt.ms(c.ttft_ms)),
    h("td", {class: "num"}, fmt.ms(c.duration_ms)), h("td", {class: "num"}, fmt.int(c.input_tokens)), h("td", {class: "num"}, fmt.int(c.output_tokens)),
    h("td", {class: "num"}, fmt.int(c.cache_read_tokens)), h("td", {}, c.error_kind ? h("span", {class: "bad"}, c.error_kind + ": " + (c.error_message || "")) : (c.finish_reason || "-")),
    h("td", {class: "num"}, fmt.money(c.cost)), h("td", {}, toolList), h("td", {}, bodies));
}

async function showBodies(button, c) {
  const b = await api("calls/" + encodeURIComponent(c.trace_id) + "/" + c.seq + "/bodies");
  button.replaceWith(h("div", {}, h("pre", {class: "body"}, b.request || ""), h("pre", {class: "body"}, b.response || "")));
}

async function conversation(id) {
  const c = await api("conversations/" + encodeURIComponent(id));
  const runs = c.runs.map((r, i) => h("section", {class: "run", "data-run": r.run_id},
    h("strong", {}, "Turn " + (i + 1) + " "), r.outcome === "succeeded" ? h("span", {class: "good"}, r.outcome) : h("span", {class: "bad"}, r.outcome || "running"),
    h("div", {class: "prompt"}, r.user_message || ""),
    h("div", {class: "meta"},
      "model " + (r.model_id || "-") + " · TTFT " + fmt.ms(r.ttft_ms) + " · duration " + fmt.ms(r.duration_ms) + " · cost " + fmt.money(r.cost)
      + " · phases " + Object.entries(r.phases).map(([p, ms]) => p + " " + fmt.ms(ms)).join(", ")
      + " · trace " + (r.trace_id || "-"),
      r.error_code ? h("div", {class: "bad"}, r.error_code + ": " + (r.error_message || "")) : null),
    r.calls.length
      ? table([["#", "num"], ["Purpose"], ["TTFB", "num"], ["TTFT", "num"], ["Duration", "num"], ["Input", "num"], ["Output", "num"], ["Cache read", "num"], ["Finish / error"], ["Cost", "num"], ["Tool calls"], [""]], r.calls.map(callRow))
      : h("p", {class: "muted"}, "No provider call.")));
  show(
    h("h1", {}, "Conversation ", h("span", {class: "mono"}, c.conversation_id)),
    h("div", {class: "cards"}, card("Turns", c.runs.length), card("Input tokens", fmt.int(c.tokens.input_tokens)),
      card("Output tokens", fmt.int(c.tokens.output_tokens)), card("Cost", fmt.money(c.cost))),
    ...runs);
}

async function live() {
  const l = await api("live");
  show(
    h("h1", {}, "Live runs"),
    h("div", {class: "cards"}, card("Runs in progress", l.runs.length), card("Active conversations", l.active_conversations), card("Open RunSSE streams", l.open_streams)),
    l.runs.length
      ? table([["Conversation"], ["Developer"], ["Model"], ["Phase"], ["Elapsed", "num"], ["Calls", "num"], ["Tool calls", "num"], ["Output", "num"]],
        l.runs.map((r) => h("tr", {},
          h("td", {class: "mono"}, h("a", {href: "#/conversation/" + encodeURIComponent(r.conversation_id)}, r.conversation_id.slice(0, 12))),
          h("td", {}, r.user || "-"), h("td", {}, r.model_id), h("td", {}, r.phase), h("td", {class: "num"}, fmt.ms(r.elapsed_ms)),
          h("td", {class: "num"}, r.calls), h("td", {class: "num"}, r.tool_calls), h("td", {class: "num"}, fmt.int(r.output_tokens)))))
      : h("p", {class: "muted"}, "No run in progress."));
}

async function testModel(button, cell, id) {
  button.disabled = true;
  cell.textContent = "testing…";
  try {
    const r = await api("models/" + encodeURIComponent(id) + "/test", {method: "POST", headers: {"content-type": "application/json"}, body: "{}"});
    cell.textContent = "TTFT " + fmt.ms(r.ttft_ms) + " · " + (r.tokens_per_second === null ? "-" : r.tokens_per_second.toFixed(1)) + " tokens/s";
  } catch (e) {
    cell.replaceChildren(h("span", {class: "bad"}, e.message));
  } finally {
    button.disabled = false;
  }
}

async function models() {
  const list = await api("models");
  show(
    h("h1", {}, "Models"),
    table([["Model"], ["Provider"], ["Upstream model"], ["Context", "num"], ["Price in / out / cache read / write ($/M)"], [""], ["Result"]],
      list.map((m) => {
        const result = h("td", {class: "result"});
        const button = h("button", {"data-model": m.id}, "test");
        button.addEventListener("click", () => testModel(button, result, m.id));
        const price = m.price ? [m.price.input, m.price.output, m.price.cache_read, m.price.cache_write].map((p) => p == null ? "-" : p).join(" / ") : "-";
        return h("tr", {}, h("td", {}, m.id), h("td", {}, m.provider), h("td", {}, m.model), h("td", {class: "num"}, fmt.int(m.context_window)),
          h("td", {}, price), h("td", {}, button), result);
      })));
}

// A team server: what each developer used (the user label of `cursor-byok usage --by user`).
async function developers() {
  const month = await api("usage?since=30d&by=user");
  show(
    h("h1", {}, "Developers, last 30 days"),
    month.rows.length ? table([["Developer"], ["Model"], ["Calls", "num"], ["Errors", "num"], ["Input", "num"], ["Output", "num"], ["Cache hit", "num"], ["Cost", "num"]],
      month.rows.map((d) => h("tr", {"data-user": d.group},
        h("td", {}, d.group || "-"), h("td", {}, d.model_id), h("td", {class: "num"}, fmt.int(d.calls)), h("td", {class: "num"}, fmt.int(d.errors)),
        h("td", {class: "num"}, fmt.int(d.input_tokens)), h("td", {class: "num"}, fmt.int(d.output_tokens)),
        h("td", {class: "num"}, fmt.pct(d.cache_hit_rate)), h("td", {class: "num"}, fmt.money(d.cost)))))
      : h("p", {class: "muted"}, "No provider calls in the last 30 days. On a team server (docs/team.md) each developer's calls are listed here."));
}

// Capture on records every agent RPC to disk: say so on every page while it lasts.
async function captureBanner() {
  const el = document.getElementById("capture");
  try {
    const c = await api("capture");
    el.hidden = !c.on;
    el.textContent = c.on ? `Capture is ON (${c.with_content ? "WITH CONTENT" : "redacted"}): every agent RPC stream is recorded to ${c.directory}. \`cursor-byok capture stop\` ends it.` : "";
  } catch (e) {
    el.hidden = true;
  }
}

// ---- routing -----------------------------------------------------------------------------------
async function route() {
  captureBanner();
  const [page, arg] = location.hash.replace(/^#\/?/, "").split("/");
  const name = page === "conversation" ? "conversations" : page || "overview";
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === name);
  delete document.body.dataset.ready;
  try {
    if (page === "conversation" && arg) await conversation(decodeURIComponent(arg));
    else if (page === "conversations") await conversations(null);
    else if (page === "live") await live();
    else if (page === "models") await models();
    else if (page === "developers") await developers();
    else await overview();
    document.body.dataset.ready = name;
  } catch (e) {
    show(h("p", {class: "bad"}, "Could not load this page: " + e.message));
  }
}

window.addEventListener("hashchange", route);
route();
