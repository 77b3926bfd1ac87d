// The WALQueue dashboard page: reads the JSON API every few seconds and fills the page.
// Every value is set with textContent (never innerHTML), so a payload or an error
// message is always shown as text, whatever it holds.
"use strict";

(function () {
  const REFRESH_MS = 2000;
  const SERIES = ["puts", "acks", "releases", "deaths"];
  const SVG = "http://www.w3.org/2000/svg";
  const actionsOn = meta("walqueue-actions") === "on";
  const token = meta("walqueue-action-token");
  const state = { leasesAfter: null, leasesNext: null, deadAfter: null, deadNext: null, group: null };

  function meta(name) {
    const node = document.querySelector('meta[name="' + name + '"]');
    return node ? node.getAttribute("content") : "";
  }

  function $(id) { return document.getElementById(id); }

  function text(id, value) { $(id).textContent = value; }

  function el(tag, value, cls) {
    const node = document.createElement(tag);
    if (value !== undefined && value !== null) node.textContent = String(value);
    if (cls) node.className = cls;
    return node;
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    const sign = seconds < 0 ? "-" : "";
    let s = Math.abs(Math.round(seconds));
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    const parts = [];
    if (d) parts.push(d + "d");
    if (h) parts.push(h + "h");
    if (m && !d) parts.push(m + "m");
    if (!d && !h) parts.push(s + "s");
    return sign + parts.join(" ");
  }

  function bytes(n) {
    if (n === null || n === undefined) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return (i ? n.toFixed(1) : String(n)) + " " + units[i];
  }

  // The store's clock unit (units per second): every time and age the API gives is in it.
  let unitsPerSecond = 1000;

  function seconds(units) {
    return units === null || units === undefined ? units : units / unitsPerSecond;
  }

  // A stored time as a date; one that is no date in the store's unit is said to be so, never shown as one.
  function when(epoch, now) {
    if (epoch === null || epoch === undefined) return "–";
    const date = new Date(epoch * 1000 / unitsPerSecond);
    if (isNaN(date.getTime()) || date.getUTCFullYear() > 9999) {
      return epoch + " (not a time in this store's unit, " + unitsPerSecond + " per second)";
    }
    const iso = date.toISOString().replace(/\.\d+Z$/, "Z");
    if (now === undefined) return iso;
    const delta = seconds(epoch - now);
    return iso + " (" + (delta > 0 ? "in " + duration(delta) : duration(-delta) + " ago") + ")";
  }

  // A quantile's upper bound from a histogram reading {bounds, counts, sum, count}.
  function quantile(h, q) {
    if (!h || !h.count) return null;
    const target = q * h.count;
    let seen = 0;
    for (let i = 0; i < h.counts.length; i += 1) {
      seen += h.counts[i];
      if (seen >= target) return i < h.bounds.length ? h.bounds[i] : Infinity;
    }
    return Infinity;
  }

  function ms(seconds) {
    if (seconds === null) return "–";
    if (seconds === Infinity) return "> 1 s";
    return (seconds * 1000).toFixed(seconds < 0.001 ? 2 : 1) + " ms";
  }

  async function getJSON(url) {
    const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
    const body = await response.json();
    if (!response.ok) throw new Error(body.error || response.statusText);
    return body;
  }

  async function post(action, fields) {
    const body = new URLSearchParams(fields);
    const response = await fetch("api/actions/" + action, {
      method: "POST",
      credentials: "same-origin",
      headers: { "X-WALQueue-Token": token, "Content-Type": "application/x-www-form-urlencoded" },
      body: body.toString(),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    return answer;
  }

  // Where an unfinished group action resumes, by action and group; rounds of one click at most.
  const resume = new Map();
  const MAX_ROUNDS = 50;

  function actionButton(label, action, fields) {
    const button = el("button", label, "act");
    button.type = "button";
    button.dataset.action = action;
    button.addEventListener("click", async function () {
      button.disabled = true;
      try {
        // A group action goes on from its answer's cursor while more is left (bounded rounds per click);
        // a click after that resumes where the last round stopped.
        const key = action + ":" + (fields.group || "");
        const sent = Object.assign({}, fields);
        if (fields.group !== undefined && resume.has(key)) sent.after = resume.get(key);
        let answer, done = 0, skipped = 0, rounds = 0;
        do {
          answer = await post(action, sent);
          done += answer.done;
          skipped += answer.skipped;
          rounds += 1;
          if (answer.after) sent.after = answer.after;
        } while (answer.more && fields.group !== undefined && rounds < MAX_ROUNDS);
        if (answer.more && answer.after) resume.set(key, answer.after); else resume.delete(key);
        text("action-result", action + ": " + done + " done, " + skipped + " skipped" +
          (answer.more ? " (more left: repeat)" : ""));
      } catch (error) {
        text("action-result", action + " failed: " + error.message);
      }
      button.disabled = false;
      refresh();
    });
    return button;
  }

  function renderOverview(o) {
    unitsPerSecond = o.units_per_second || unitsPerSecond;
    for (const status of ["ready", "leased", "completed", "dead"]) {
      text("count-" + status, String(o.counts[status]));
    }
    const undated = o.undated_ready ? " (" + o.undated_ready + " undated: no put time)" : "";
    text("oldest-age", (o.oldest_ready_age === null ? "none due" : duration(seconds(o.oldest_ready_age))) + undated);
    text("next-due", when(o.next_available_at, o.now));
    text("next-deadline", when(o.next_deadline, o.now));
    text("wal-bytes", bytes(o.wal_bytes) + " in " + o.segments + " segment" + (o.segments === 1 ? "" : "s"));
    text("last-seq", String(o.last_seq));
    const behind = o.last_seq - o.snapshot_seq;
    const changed = o.moments.snapshot_changed_at;
    text("snapshot", o.snapshot_seq ? "seq " + o.snapshot_seq + ", " + behind + " transactions behind" +
      (changed ? ", published " + duration(seconds(o.now) - changed) + " ago" : "") : "none yet");
    const compactions = o.counters.compactions;
    const seen = o.moments.compaction_seen_at;
    text("compaction", compactions === undefined ? "–" :
      compactions + " since the queue opened" + (seen ? ", last " + duration(seconds(o.now) - seen) + " ago" : ""));
    const r = o.replica;
    text("replica", !r ? "no replica" : r.state + ": " + r.url + ", " + r.lag_transactions +
      " transactions behind" + (r.lag_seconds ? " (" + duration(Math.round(r.lag_seconds)) + ")" : "") +
      (r.last_success ? ", last upload " + duration(Math.max(0, Math.round(seconds(o.now) - r.last_success))) + " ago" : "") +
      (r.failures ? ", " + r.failures + " failures" : "") + (r.last_error ? " – " + r.last_error : ""));
    const fsync = o.fsync_seconds;
    text("fsyncs", o.counters.fsyncs === undefined ? "–" : String(o.counters.fsyncs));
    text("fsync-latency", fsync && fsync.count ? "mean " + ms(fsync.sum / fsync.count) + ", p50 ≤ " +
      ms(quantile(fsync, 0.5)) + ", p99 ≤ " + ms(quantile(fsync, 0.99)) : "no fsync yet");
    const group = o.commit_group_size;
    text("group-size", group && group.count ? "mean " + (group.sum / group.count).toFixed(1) + ", p99 ≤ " +
      quantile(group, 0.99) : "–");
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const name in attrs) node.setAttribute(name, String(attrs[name]));
    return node;
  }

  function renderChart(t) {
    const chart = $("chart");
    while (chart.firstChild) chart.removeChild(chart.firstChild);
    const W = 720, H = 180, left = 40, bottom = 20, top = 10;
    const n = t.minutes.length;
    let max = 1;
    for (const name of SERIES) for (const v of t.series[name]) if (v !== null && v > max) max = v;
    const x = (i) => left + (i * (W - left - 10)) / Math.max(1, n - 1);
    const y = (v) => top + (H - top - bottom) * (1 - v / max);
    chart.appendChild(svg("line", { x1: left, y1: y(0), x2: W - 10, y2: y(0), class: "axis" }));
    chart.appendChild(svg("line", { x1: left, y1: top, x2: left, y2: y(0), class: "axis" }));
    const label = (value, attrs) => { const node = svg("text", attrs); node.textContent = value; chart.appendChild(node); };
    label(String(max), { x: left - 4, y: top + 8, "text-anchor": "end" });
    label("0", { x: left - 4, y: y(0), "text-anchor": "end" });
    label("-60 min", { x: left, y: H - 4 });
    label("now", { x: W - 10, y: H - 4, "text-anchor": "end" });
    for (const name of SERIES) {
      let d = "";
      let pen = false;
      t.series[name].forEach(function (v, i) {
        if (v === null) { pen = false; return; }
        d += (pen ? " L" : " M") + x(i).toFixed(1) + " " + y(v).toFixed(1);
        pen = true;
      });
      const path = svg("path", { d: d.trim() || "M0 0", fill: "none", stroke: "currentColor", "stroke-width": 2,
        class: "series s-" + name });
      path.dataset.series = name;
      const points = t.series[name].filter((v) => v !== null);
      path.dataset.total = String(points.reduce((a, b) => a + b, 0));
      chart.appendChild(path);
    }
    chart.dataset.rendered = "yes";
  }

  function renderLegend() {
    const legend = $("legend");
    for (const name of SERIES) legend.appendChild(el("span", name, "s-" + name));
  }

  function emptyRow(body, message, columns) {
    const cell = el("td", message, "muted");
    cell.colSpan = columns;
    body.appendChild(el("tr")).appendChild(cell);
  }

  // One loop for every table the page refreshes: clear it, a row per item, a note when empty.
  function fillTable(id, items, empty, columns, fill) {
    const body = document.querySelector("#" + id + " tbody");
    body.replaceChildren();
    for (const item of items) {
      const row = el("tr");
      fill(row, item);
      body.appendChild(row);
    }
    if (!items.length) emptyRow(body, empty, columns);
  }

  // A task's row: its cells, then one action on it when actions are enabled.
  function taskRow(row, task, cells, label, action) {
    row.dataset.task = task.task_id;
    row.append(...cells);
    const cell = el("td");
    if (actionsOn) cell.appendChild(actionButton(label, action, { task_id: task.task_id }));
    row.appendChild(cell);
  }

  function renderLeases(page, now) {
    unitsPerSecond = page.units_per_second || unitsPerSecond;
    fillTable("leases", page.tasks, "no leases", 6, function (row, task) {
      taskRow(row, task, [el("td", task.task_id), el("td", task.worker), el("td", when(task.deadline)),
        el("td", duration(seconds(task.time_left))), el("td", task.attempts + " / " + task.max_attempts)],
        "cancel", "cancel");
    });
    state.leasesNext = page.next_after;
    $("leases-next").disabled = !page.next_after;
  }

  function limits(q) {
    const parts = [];
    if (q.concurrency !== null) parts.push("at most " + q.concurrency + " at once");
    if (q.rate !== null) parts.push(q.rate[0] + " per " + q.rate[1]);
    return parts.join(", ") || "none";
  }

  function renderQueues(page) {
    fillTable("queues", page.queues, "no queues", 9, function (row, q) {
      row.dataset.queue = q.name;
      row.append(el("td", q.name), el("td", String(q.counts.ready)), el("td", String(q.counts.leased)),
        el("td", String(q.counts.completed)), el("td", String(q.counts.dead)),
        el("td", q.oldest_ready_age === null ? "–" : duration(seconds(q.oldest_ready_age))), el("td", limits(q)),
        el("td", q.paused ? "paused" : "running"));
      const cell = el("td");
      if (actionsOn) cell.appendChild(actionButton(q.paused ? "resume" : "pause", q.paused ? "resume" : "pause",
        { queue: q.name }));
      row.appendChild(cell);
    });
  }

  function errorText(error) {
    if (!error) return "(no error recorded)";
    return (error.type || "") + ": " + (error.message || "") + (error.attempt ? " (attempt " + error.attempt + ")" : "");
  }

  // The last error, and its traceback (when the worker recorded one) folded under it, as text.
  function errorCell(error) {
    const cell = el("td", errorText(error), "message");
    if (error && error.traceback) {
      const details = el("details");
      details.append(el("summary", "traceback"), el("pre", error.traceback, "traceback"));
      cell.appendChild(details);
    }
    return cell;
  }

  function renderGroups(g) {
    fillTable("groups", g.groups, "no dead letters", 4, function (row, group) {
      row.dataset.group = group.group;
      row.append(el("td", group.type || "(none)"), el("td", group.message, "message"), el("td", String(group.count)));
      const cell = el("td");
      const show = el("button", "show");
      show.type = "button";
      show.addEventListener("click", function () { state.group = group.group; state.deadAfter = null; refresh(); });
      cell.appendChild(show);
      if (actionsOn) {
        cell.appendChild(actionButton("redrive all", "redrive", { group: group.group }));
        cell.appendChild(actionButton("cancel retrying", "cancel", { group: group.group }));
      }
      row.appendChild(cell);
    });
    text("groups-note", g.truncated ? "grouped over the first " + g.scanned + " dead letters" : "");
  }

  function renderDead(page) {
    fillTable("dead", page.tasks, "no dead letters", 5, function (row, task) {
      taskRow(row, task, [el("td", task.task_id), el("td", task.payload_excerpt, "payload"),
        errorCell(task.last_error), el("td", task.attempts + " / " + task.max_attempts)],
        "redrive", "redrive");
    });
    state.deadNext = page.next_after;
    $("dead-next").disabled = !page.next_after;
    text("dead-filter", state.group ? "(one error group)" : "");
  }

  function query(params) {
    const q = new URLSearchParams();
    for (const name in params) if (params[name] !== null && params[name] !== undefined) q.set(name, params[name]);
    const s = q.toString();
    return s ? "?" + s : "";
  }

  let busy = false;
  async function refresh() {
    if (busy) return;
    busy = true;
    try {
      const overview = await getJSON("api/overview");
      renderOverview(overview);
      renderChart(await getJSON("api/throughput"));
      renderQueues(await getJSON("api/queues"));
      renderLeases(await getJSON("api/leases" + query({ after: state.leasesAfter, limit: 20 })), overview.now);
      renderGroups(await getJSON("api/dead/groups"));
      renderDead(await getJSON("api/dead" + query({ after: state.deadAfter, group: state.group, limit: 20 })));
      text("updated", "updated " + new Date().toISOString().replace(/\.\d+Z$/, "Z"));
      $("error").hidden = true;
    } catch (error) {
      $("error").hidden = false;
      text("error", "cannot read the queue: " + error.message);
    } finally {
      busy = false;
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    text("actions-state", actionsOn ? "actions enabled" : "read-only");
    renderLegend();
    $("leases-first").addEventListener("click", function () { state.leasesAfter = null; refresh(); });
    $("leases-next").addEventListener("click", function () { state.leasesAfter = state.leasesNext; refresh(); });
    $("dead-first").addEventListener("click", function () { state.deadAfter = null; refresh(); });
    $("dead-next").addEventListener("click", function () { state.deadAfter = state.deadNext; refresh(); });
    $("dead-all").addEventListener("click", function () { state.group = null; state.deadAfter = null; refresh(); });
    refresh();
    setInterval(refresh, REFRESH_MS);
  });
})();
