// The broker's dashboard: polls /admin/ha and /metrics with the token given (a read-only
// monitor token is enough) and draws the master/slave diff per slave over the last minutes
// (in DLedger mode: the leader's lag per peer, keyed and charted the same way).
// No library and no network beyond the broker itself. State is kept in `window.twinlogDashboard`
// so that a test (or a curious operator) can read what the page drew.
"use strict";

const HISTORY_MS = 5 * 60 * 1000;
const SAMPLES_MAX = 2000; // per slave: a bound even with a short interval
const params = new URLSearchParams(location.search);
const intervalMs = Math.max(100, Number(params.get("interval_ms")) || 2000);
const colors = ["#3b6fd4", "#d9822b", "#147a3d", "#b42318", "#7a3bd4", "#2b9ad9"];

const state = {
  history: {},   // slave id -> [{t, diff}]
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

function fillTable(id, rows) {
  const body = document.querySelector(`#${id} tbody`);
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

function record(now, slaves) {
  for (const slave of slaves) {
    const series = (state.history[slave.slave_id] ||= []);
    series.push({ t: now, diff: slave.diff_bytes });
    while (series.length > SAMPLES_MAX || (series.length && series[0].t < now - HISTORY_MS)) {
      series.shift();
    }
  }
}

function drawChart(now) {
  const svg = document.getElementById("diff-chart");
  const width = 800, height = 240, pad = 4;
  const all = Object.values(state.history).flat();
  const top = Math.max(1, ...all.map((p) => p.diff));
  // The window is the last five minutes, or since the first sample when the page is younger.
  const first = all.length ? Math.min(...all.map((p) => p.t)) : now;
  const spanMs = Math.max(1000, now - Math.max(now - HISTORY_MS, first));
  const x = (t) => pad + (width - 2 * pad) * (1 - (now - t) / spanMs);
  const y = (d) => height - pad - (height - 2 * pad) * (d / top);
  const parts = [`<text x="6" y="14" font-size="12" fill="#6b7280">max ${top} bytes</text>`];
  Object.entries(state.history).forEach(([id, series], index) => {
    const points = series.map((p) => `${x(p.t).toFixed(1)},${y(p.diff).toFixed(1)}`).join(" ");
    const color = colors[index % colors.length];
    parts.push(`<polyline data-slave="${escapeXml(id)}" fill="none" stroke="${color}" stroke-width="2" ` +
               `points="${points}"/>`);
    parts.push(`<text x="6" y="${30 + 14 * index}" font-size="12" fill="${color}">${escapeXml(id)}</text>`);
  });
  svg.innerHTML = parts.join("");
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
                             .map((s) => [s.labels.topic, s.value]));
  fillTable("lag", samples.filter((s) => s.name === "twinlog_consumer_lag_messages")
                          .map((s) => [s.labels.group, s.labels.topic, s.value]));
  fillTable("timers", timerRows(samples));
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
    known(p.lag_bytes), leads ? inSync(p) : "-"]));
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
                                                  s.diff_bytes, s.in_sync]));
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
                                       s.diff_bytes, s.in_sync]));
  return self;
}

async function poll() {
  const now = Date.now();
  try {
    const [ha, metrics] = await Promise.all([get("/admin/ha"), get("/metrics", true)]);
    record(now, showHa(ha));
    showMetrics(now, parseMetrics(metrics));
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
