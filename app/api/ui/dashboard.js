// The broker's dashboard: polls /admin/ha, /admin/store and /metrics with the token given (a
// read-only monitor token is enough) and /readyz, and draws the master/slave diff per slave
// over the last five minutes on a time axis (in DLedger mode: the leader's lag per peer, keyed
// and charted the same way).
// No library and no network beyond the broker itself. State is kept in `window.twinlogDashboard`
// so that a test (or a curious operator) can read what the page drew.
"use strict";

const HISTORY_MS = 5 * 60 * 1000;
const SAMPLES_MAX = 2000; // per slave: a bound even with a short interval
const params = new URLSearchParams(location.search);
const intervalMs = Math.max(100, Number(params.get("interval_ms")) || 2000);
const colors = ["#3b6fd4", "#d9822b", "#147a3d", "#b42318", "#7a3bd4", "#2b9ad9"];

// The chart's frame, in viewBox units: the plot is inside the margins, the axes' labels in them.
const CHART = { width: 800, height: 240, left: 70, right: 12, top: 10, bottom: 24 };
// With every diff at 0 the y axis still runs to a small round number of bytes.
const FLAT_TOP_BYTES = 1024;
const TICK_MS = 60 * 1000;

const state = {
  history: {},   // slave id -> [{t, diff}]
  chart: null,   // what the last drawing placed: window, axes' ticks, each series' points
  lastPuts: null, // {t, total} for the put rate
  errors: 0,
  polls: 0,
};
window.twinlogDashboard = state;

function token() {
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) sessionStorage.setItem("twinlog-token", fromHash);
  return sessionStorage.getItem("twinlog-token") || "";
}

async function get(path, asText) {
  const headers = token() ? { Authorization: `Bearer ${token()}` } : {};
  const response = await fetch(path, { headers, cache: "no-store" });
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new Error(`${path}: ${response.status} ${detail}`);
  }
  return asText ? response.text() : response.json();
}

// Prometheus text format: `name{label="value",...} number` lines (comments skipped).
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = line.match(/^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)/);
    if (!match) continue;
    const labels = {};
    for (const pair of (match[3] || "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
      labels[pair[1]] = pair[2];
    }
    samples.push({ name: match[1], labels, value: Number(match[4]) });
  }
  return samples;
}

function escapeXml(text) {
  return String(text).replace(/[<>&"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function setText(id, value) { document.getElementById(id).textContent = value; }

// Rows of cells; with none, one row saying so (`empty`) across the table's columns.
function fillTable(id, rows, empty) {
  const body = document.querySelector(`#${id} tbody`);
  if (!rows.length) {
    const td = document.createElement("td");
    td.className = "empty";
    td.colSpan = document.querySelectorAll(`#${id} thead th`).length || 2;
    td.textContent = empty;
    const row = document.createElement("tr");
    row.appendChild(td);
    body.replaceChildren(row);
    return;
  }
  body.replaceChildren(...rows.map((cells) => {
    const row = document.createElement("tr");
    for (const cell of cells) {
      const td = document.createElement("td");
      if (typeof cell === "number") td.className = "number";
      if (typeof cell === "boolean") td.className = cell ? "yes" : "no";
      td.textContent = typeof cell === "boolean" ? (cell ? "yes" : "NO") : String(cell);
      row.appendChild(td);
    }
    return row;
  }));
}

// Label/value rows of a panel (a fact table has no header).
function fillFacts(id, facts) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...facts.map(([label, value]) => {
    const row = document.createElement("tr");
    const head = document.createElement("th");
    head.textContent = label;
    const cell = document.createElement("td");
    if (typeof value === "boolean") {
      cell.className = value ? "yes" : "no";
      cell.textContent = value ? "yes" : "NO";
    } else {
      cell.textContent = String(value ?? "-");
    }
    row.append(head, cell);
    return row;
  }));
}

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

function formatBytes(bytes) {
  let value = bytes, unit = 0;
  while (Math.abs(value) >= 1024 && unit < UNITS.length - 1) { value /= 1024; unit += 1; }
  const digits = unit === 0 || Number.isInteger(value) ? 0 : 1;
  return `${value.toFixed(digits)} ${UNITS[unit]}`;
}

function formatTime(t) {
  const date = new Date(t);
  return [date.getHours(), date.getMinutes()].map((n) => String(n).padStart(2, "0")).join(":");
}

// A round step of bytes (a power of two: 256 B, 1 KiB, 32 KiB...) that cuts `range` in at
// most `count` parts.
function byteStep(range, count) {
  return 2 ** Math.ceil(Math.log2(Math.max(1, range / count)));
}

function record(now, slaves) {
  for (const slave of slaves) {
    const series = (state.history[slave.slave_id] ||= []);
    series.push({ t: now, diff: slave.diff_bytes });
    while (series.length > SAMPLES_MAX || (series.length && series[0].t < now - HISTORY_MS)) {
      series.shift();
    }
  }
}

// The last five minutes, now at the right edge: a sample sits at its own time (a young page
// fills only the right end), the y axis runs from 0 to a round number of bytes with its ticks
// labelled, the legend is the list under the chart.
function drawChart(now) {
  const { width, height, left, right, top, bottom } = CHART;
  const plotWidth = width - left - right, plotHeight = height - top - bottom;
  const from = now - HISTORY_MS;
  const all = Object.values(state.history).flat();
  const highest = Math.max(0, ...all.map((p) => p.diff));
  const range = Math.max(highest, FLAT_TOP_BYTES);
  const step = byteStep(range, 4);
  const yTop = Math.ceil(range / step) * step;
  const x = (t) => left + plotWidth * (t - from) / HISTORY_MS;
  const y = (d) => top + plotHeight * (1 - d / yTop);
  const parts = [];
  const yTicks = [];
  for (let value = 0; value <= yTop; value += step) {
    yTicks.push({ value, label: formatBytes(value) });
    parts.push(`<line class="grid" x1="${left}" x2="${width - right}" y1="${y(value)}" ` +
               `y2="${y(value)}"/>`);
    parts.push(`<text class="y-tick" x="${left - 6}" y="${y(value) + 4}" text-anchor="end">` +
               `${formatBytes(value)}</text>`);
  }
  const xTicks = [];
  for (let t = Math.ceil(from / TICK_MS) * TICK_MS; t <= now; t += TICK_MS) {
    xTicks.push({ t, x: x(t), label: formatTime(t) });
    parts.push(`<line class="grid" x1="${x(t)}" x2="${x(t)}" y1="${top}" ` +
               `y2="${height - bottom}"/>`);
    parts.push(`<text class="x-tick" data-t="${t}" x="${x(t)}" y="${height - 6}" ` +
               `text-anchor="middle">${formatTime(t)}</text>`);
  }
  parts.push(`<line class="axis" x1="${left}" x2="${left}" y1="${top}" ` +
             `y2="${height - bottom}"/>`);
  parts.push(`<line class="axis" x1="${left}" x2="${width - right}" y1="${height - bottom}" ` +
             `y2="${height - bottom}"/>`);
  const series = {};
  const legend = [];
  Object.entries(state.history).forEach(([id, samples], index) => {
    const color = colors[index % colors.length];
    const points = samples.map((p) => [x(p.t), y(p.diff)]);
    series[id] = points;
    const text = points.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(" ");
    parts.push(`<polyline data-slave="${escapeXml(id)}" fill="none" stroke="${color}" ` +
               `stroke-width="2" points="${text}"/>`);
    if (points.length) {
      const [px, py] = points[points.length - 1];
      parts.push(`<circle cx="${px.toFixed(1)}" cy="${py.toFixed(1)}" r="3" fill="${color}"/>`);
    }
    const item = document.createElement("li");
    item.dataset.slave = id;
    item.style.setProperty("--color", color);
    item.textContent = id;
    legend.push(item);
  });
  document.getElementById("diff-chart").innerHTML = parts.join("");
  document.getElementById("legend").replaceChildren(...legend);
  state.chart = { now, from, plot: { left, right: width - right, top, bottom: height - bottom },
                  yTop, yTicks, xTicks, series };
}

function showMetrics(now, samples) {
  const puts = samples.filter((s) => s.name === "twinlog_puts_total" &&
                                     s.labels.status === "PUT_OK")
                      .reduce((sum, s) => sum + s.value, 0);
  if (state.lastPuts) {
    const seconds = (now - state.lastPuts.t) / 1000;
    setText("put-rate", seconds > 0 ? ((puts - state.lastPuts.total) / seconds).toFixed(1) : "-");
  }
  state.lastPuts = { t: now, total: puts };
  fillTable("topics", samples.filter((s) => s.name === "twinlog_topic_messages_total")
                             .map((s) => [s.labels.topic, s.value]), "No topic yet.");
  fillTable("lag", samples.filter((s) => s.name === "twinlog_consumer_lag_messages")
                          .map((s) => [s.labels.group, s.labels.topic, s.value]),
            "No consumer group yet: lag shows once a group exists or commits an offset.");
  fillTable("timers", timerRows(samples), "No delayed message yet.");
  fillTable("pop", popRows(samples), "No group receives yet.");
}

// Group consumption (docs/group-consumption.md): per group and topic, messages by state and
// the dead letters.
function popRows(samples) {
  const rows = new Map();
  const row = (s) => {
    const key = `${s.labels.group}\u0000${s.labels.topic}`;
    if (!rows.has(key)) rows.set(key, [s.labels.group, s.labels.topic, 0, 0, 0, 0]);
    return rows.get(key);
  };
  const columns = { ready: 2, in_flight: 3, retrying: 4 };
  for (const s of samples) {
    if (s.name === "twinlog_pop_messages" && s.labels.state in columns) {
      row(s)[columns[s.labels.state]] = s.value;
    } else if (s.name === "twinlog_pop_messages_ended_total" &&
               s.labels.outcome === "dead_lettered") {
      row(s)[5] = s.value;
    }
  }
  return [...rows.values()];
}

// Delayed messages (docs/delayed-messages.md): pending per kind of lane, then what became of
// the due ones.
function timerRows(samples) {
  const value = (name, labels) => samples
    .filter((s) => s.name === name &&
                   Object.entries(labels).every(([key, v]) => s.labels[key] === v))
    .reduce((sum, s) => sum + s.value, 0);
  return [
    ["pending on delay levels", value("twinlog_timer_pending_messages", { kind: "level" })],
    ["pending timers", value("twinlog_timer_pending_messages", { kind: "timer" })],
    ["delivered", value("twinlog_timer_delivered_total", {})],
    ["cancelled", value("twinlog_timer_cancelled_total", {})],
    ["dropped, topic deleted", value("twinlog_timer_dropped_total", { reason: "topic_missing" })],
  ];
}

// The store's disk and commit-log offsets (GET /admin/store).
function showStore(store) {
  const files = store.commit_log_files;
  fillFacts("disk", [
    ["data dir on disk", formatBytes(store.disk_used_bytes)],
    ["filesystem used", `${(100 * store.disk_used_ratio).toFixed(1)} %`],
    ["commit-log files", files.length
      ? `${files.length} of ${formatBytes(files[0].size_bytes)}` : "none yet"],
    ["consume queues", `${store.consume_queue_count} (${store.consume_queue_open_files} open)`],
  ]);
  fillFacts("offsets", [
    ["min offset", store.min_offset],
    ["max offset", store.max_offset],
    ["flushed offset", store.flushed_offset],
    ["dispatch behind", formatBytes(store.dispatch_behind_bytes)],
    ["failed queues", store.dispatch_failed_queues.length],
  ]);
}

// GET /readyz needs no token and answers 503 with the same body when not ready.
async function readiness() {
  const response = await fetch("/readyz", { cache: "no-store" });
  return response.json();
}

function showReadiness(ready) {
  const link = ready.ha_link;
  fillFacts("readiness", [
    ["ready", ready.ready],
    ["state", ready.state],
    ["role", ready.role],
    ["HA link", link ? (link.connected ? `connected to ${link.master_address}` : "down") : "-"],
    ["detail", ready.detail ?? "-"],
  ]);
}

// The header and table labels: classic HA, or a DLedger member (docs/dledger.md).
const CLASSIC_LABELS = {
  epoch: "epoch", connections: "HA connections", chart: "Master/slave diff",
  heads: ["slave", "address", "state", "ack offset", "diff bytes", "in sync"],
};
const DLEDGER_LABELS = {
  epoch: "term", connections: "peers in contact", chart: "Leader/peer lag",
  heads: ["peer", "DLedger address", "dispatcher", "match index", "lag bytes", "in sync"],
};
// A peer is in contact when a message from it reached this member this recently: a live
// leader sends heartbeats many times within it (default election timeout 600 ms), and a
// poll every few seconds still sees a steady count.
const CONTACT_MS = 3000;

function setLabels(labels) {
  setText("epoch-label", labels.epoch);
  setText("connections-label", labels.connections);
  setText("chart-title", labels.chart);
  document.querySelector("#slaves thead tr").replaceChildren(...labels.heads.map((name) => {
    const head = document.createElement("th");
    head.textContent = name;
    return head;
  }));
}

// A DLedger member: its peers as rows. Only the leader knows their replication (match index,
// lag, dispatcher); a follower's peers show "-" and the badge names the leader it follows.
// Returns the peers with a known lag, shaped as slaves for the chart's history.
function showDLedger(view) {
  setLabels(DLEDGER_LABELS);
  const leads = view.role === "LEADER";
  setText("role", leads ? `LEADER ${view.self_id}`
    : `${view.role} ${view.self_id} (leader ${view.leader_id ?? "unknown"})`);
  setText("epoch", view.term);
  setText("connections", view.peers.filter((p) => p.last_contact_ms_ago !== null &&
                                                  p.last_contact_ms_ago <= CONTACT_MS).length);
  const inSync = (p) => p.match_index !== null && p.match_index >= view.committed_index;
  const needed = Math.floor((view.peers.length + 1) / 2); // the quorum less the leader
  setText("in-sync", leads ? `${view.peers.filter(inSync).length} / ${needed} needed` : "-");
  const known = (value) => value ?? "-";
  fillTable("slaves", view.peers.map((p) => [
    p.peer_id === view.leader_id ? `${p.peer_id} (leader)` : p.peer_id,
    p.dledger_address || p.http_address, known(p.dispatcher_state), known(p.match_index),
    known(p.lag_bytes), leads ? inSync(p) : "-"]), "No peer.");
  return view.peers.filter((p) => p.lag_bytes !== null)
    .map((p) => ({ slave_id: p.peer_id, diff_bytes: p.lag_bytes }));
}

function showHa(ha) {
  if (ha.dledger) return showDLedger(ha.dledger);
  setLabels(CLASSIC_LABELS);
  setText("role", ha.role);
  const master = ha.master;
  if (master) {
    setText("epoch", master.epoch);
    setText("connections", master.connection_count);
    setText("in-sync", `${master.in_sync_slave_count} / ${master.slaves_needed} needed`);
    fillTable("slaves", master.slaves.map((s) => [s.slave_id, s.address, s.state, s.ack_offset,
                                                  s.diff_bytes, s.in_sync]),
              "No slave connected.");
    return [...master.slaves];
  }
  const slave = ha.slave;
  setText("epoch", slave ? slave.master_epoch : "-");
  setText("connections", slave && slave.connected ? 1 : 0);
  setText("in-sync", "-");
  const self = slave ? [{ slave_id: "this slave", address: slave.master_address,
                          state: slave.connected ? "connected" : "down",
                          ack_offset: slave.local_max_offset, diff_bytes: slave.diff_bytes,
                          in_sync: slave.connected }] : [];
  fillTable("slaves", self.map((s) => [s.slave_id, s.address, s.state, s.ack_offset,
                                       s.diff_bytes, s.in_sync]), "No link to a master.");
  return self;
}

async function poll() {
  const now = Date.now();
  try {
    const [ha, metrics, store, ready] = await Promise.all([
      get("/admin/ha"), get("/metrics", true), get("/admin/store"), readiness()]);
    record(now, showHa(ha));
    showMetrics(now, parseMetrics(metrics));
    showStore(store);
    showReadiness(ready);
    drawChart(now);
    document.getElementById("error").hidden = true;
    state.polls += 1;
  } catch (error) {
    state.errors += 1;
    const box = document.getElementById("error");
    box.textContent = String(error.message || error);
    box.hidden = false;
  } finally {
    setTimeout(poll, intervalMs);
  }
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("twinlog-token", document.getElementById("token").value);
});
setText("interval", intervalMs);
poll();
