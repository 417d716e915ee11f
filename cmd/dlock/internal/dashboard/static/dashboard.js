// dlock dashboard: live locks and activity from /v1/events (server-sent
// events, read with fetch so that a bearer token can be sent). No
// dependencies, no build step. Lock names, owners and their data are user
// input: they are only ever set as textContent.
"use strict";

(function () {
  const N = 300; // seconds of history in the charts
  const $ = (id) => document.getElementById(id);
  const series = { acquired: zeros(), locked: zeros(), lost: zeros(), held: nulls() };
  const locks = new Map(); // name -> {row, cells, deadline, ttlMax, fence, holdersKey, ages}
  const MAX_HOLDERS = 4; // holders listed per lock; more are counted
  let totals = null;
  let token = sessionStorage.getItem("dlock.token") || "";
  let backoff = 500;
  let refreshTimer = 0;
  let controller = null;
  let rendered = false; // rows of the first render are not highlighted as new

  function zeros() { return new Array(N).fill(0); }
  function nulls() { return new Array(N).fill(null); } // no data yet
  function push(arr, v) { arr.push(v); if (arr.length > N) arr.shift(); }
  function sum(arr, n) { let s = 0; for (let i = Math.max(0, arr.length - n); i < arr.length; i++) s += arr[i]; return s; }
  function headers() { return token ? { Authorization: "Bearer " + token } : {}; }
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fmtTTL(ms) {
    if (ms <= 0) return "0.0s";
    if (ms < 60000) return (ms / 1000).toFixed(1) + "s";
    if (ms < 3600000) return Math.floor(ms / 60000) + "m " + String(Math.floor(ms / 1000) % 60).padStart(2, "0") + "s";
    return Math.floor(ms / 3600000) + "h " + String(Math.floor(ms / 60000) % 60).padStart(2, "0") + "m";
  }
  // How long a hold has been held: 12s, 4m 05s, 2h 03m, 3d 04h.
  function fmtAge(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    const two = (n) => String(n).padStart(2, "0");
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + two(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + two(Math.floor(s / 60) % 60) + "m";
    return Math.floor(s / 86400) + "d " + two(Math.floor(s / 3600) % 24) + "h";
  }
  function fmtDur(ms) {
    if (ms < 1) return "<1ms";
    if (ms < 1000) return ms + "ms";
    return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + "s";
  }
  function clock(t) {
    const d = new Date(t);
    return [d.getHours(), d.getMinutes(), d.getSeconds()].map((x) => String(x).padStart(2, "0")).join(":");
  }
  function setConn(state, text) {
    const c = $("conn");
    c.classList.toggle("live", state === "live");
    c.classList.toggle("down", state === "down");
    $("conn-text").textContent = text;
  }

  // ---- the event stream ----------------------------------------------------

  async function connect() {
    controller = new AbortController();
    setConn("", "connecting");
    let resp;
    try {
      resp = await fetch("/v1/events", { headers: headers(), cache: "no-store", signal: controller.signal });
    } catch (e) {
      return retry();
    }
    if (resp.status === 401) {
      setConn("down", "needs token");
      $("auth").classList.remove("hidden");
      return;
    }
    if (!resp.ok || !resp.body) return retry();
    $("auth").classList.add("hidden");
    backoff = 500;
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          dispatch(block);
        }
      }
    } catch (e) { /* dropped: reconnect */ }
    retry();
  }

  function retry() {
    setConn("down", "reconnecting");
    setTimeout(connect, backoff);
    backoff = Math.min(backoff * 2, 10000);
  }

  function dispatch(block) {
    let event = "message", data = "";
    for (const line of block.split("\n")) {
      if (line.startsWith("event: ")) event = line.slice(7);
      else if (line.startsWith("data: ")) data += line.slice(6);
    }
    if (!data) return;
    let msg;
    try { msg = JSON.parse(data); } catch (e) { return; }
    switch (event) {
      case "snapshot": onSnapshot(msg); break;
      case "acquire": case "release": case "lost": case "renew": case "forced": onEvent(msg); break;
      case "shutdown": setConn("down", "server stopping"); break;
    }
  }

  // ---- snapshots: the table, the counters, the charts -------------------------

  function onSnapshot(s) {
    setConn("live", "live");
    $("store").textContent = "store · " + s.store + (s.replicas > 1 ? " · " + s.replicas + " replicas" : "");
    $("store").title = s.replicas > 1 ? "events and charts of every replica on the store; this one is " + s.replica : "store";
    if (s.history) {
      series.acquired = s.history.map((h) => h.acquired);
      series.locked = s.history.map((h) => h.locked);
      series.lost = s.history.map((h) => h.lost);
      series.held = nulls();
    } else if (totals) {
      push(series.acquired, Math.max(0, s.totals.acquired - totals.acquired));
      push(series.locked, Math.max(0, s.totals.locked - totals.locked));
      push(series.lost, Math.max(0, s.totals.lost - totals.lost));
    }
    totals = s.totals;
    const held = s.locks.filter((l) => l.holders > 0);
    if (s.history) series.held[N - 1] = held.length; else push(series.held, held.length);
    renderLocks(held, s);
    renderCounters(held);
    drawAll();
  }

  function renderCounters(held) {
    const holders = held.reduce((a, l) => a + l.holders, 0);
    $("kpi-held").textContent = held.length;
    $("kpi-holders").textContent = holders !== held.length ? holders + " holders" : "";
    $("kpi-acq").textContent = sum(series.acquired, 60);
    $("kpi-cont").textContent = sum(series.locked, 60);
    const lost60 = sum(series.lost, 60);
    $("kpi-lost").textContent = lost60;
    if (totals) {
      $("kpi-acq-total").textContent = totals.acquired + " total";
      $("kpi-cont-total").textContent = totals.locked + " total";
      $("kpi-lost-total").textContent = totals.lost + " total";
    }
    $("card-lost").classList.toggle("bad", lost60 > 0);
  }

  function renderLocks(list, s) {
    const now = performance.now();
    const seen = new Set();
    const body = $("locks");
    list.sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
    let prev = null;
    for (const l of list) {
      seen.add(l.name);
      let e = locks.get(l.name);
      if (!e) {
        e = makeRow(l.name);
        locks.set(l.name, e);
        if (rendered) {
          e.row.classList.add("fresh");
          setTimeout(() => e.row.classList.remove("fresh"), 1200);
        }
      }
      if (e.fence !== l.fence || l.ttlMs > e.ttlMax) e.ttlMax = Math.max(l.ttlMs, 1);
      e.fence = l.fence;
      e.deadline = now + l.ttlMs;
      e.cells.mode.textContent = l.mode;
      e.cells.mode.className = "mode " + l.mode;
      e.cells.holders.textContent = l.limit ? l.holders + " / " + l.limit : String(l.holders);
      e.cells.queue.textContent = l.queue;
      e.cells.queue.className = "num" + (l.queue ? "" : " queue0");
      // An election's fence is its leader's term.
      e.cells.fence.textContent = l.mode === "election" && l.held ? "term " + l.fence : l.fence;
      renderHolders(e, Array.isArray(l.owners) ? l.owners : []);
      const want = prev ? prev.nextSibling : body.firstChild;
      if (want !== e.row) body.insertBefore(e.row, want);
      prev = e.row;
    }
    for (const [name, e] of locks) {
      if (!seen.has(name)) { e.row.remove(); locks.delete(name); }
    }
    rendered = true;
    $("lock-count").textContent = list.length;
    $("empty").classList.toggle("hidden", list.length > 0);
    $("locks-note").textContent = !s.inspect ? "this store cannot list its locks" : s.error ? "store error: " + s.error : s.truncated ? "first 1000 shown" : "";
    tickTTL();
  }

  function makeRow(name) {
    const row = el("tr");
    row.dataset.name = name;
    const n = el("td", "name", name);
    n.title = name;
    const mode = el("span", "mode");
    const modeTd = el("td"); modeTd.appendChild(mode);
    const holders = el("td", "num");
    const ttlTd = el("td", "ttl");
    const box = el("div", "ttlbox");
    const bar = el("div", "ttlbar");
    const fill = el("i");
    bar.appendChild(fill);
    const text = el("span", "ttltext");
    box.append(bar, text);
    ttlTd.appendChild(box);
    const queue = el("td", "num");
    const fence = el("td", "num fence");
    const owners = el("td", "owners");
    row.append(n, modeTd, holders, owners, ttlTd, queue, fence);
    return { row, cells: { mode, holders, owners, fill, text, queue, fence }, deadline: 0, ttlMax: 1, fence: -1, holdersKey: "", ages: [] };
  }

  // renderHolders lists who holds the lock of row e, oldest hold first: one
  // line per hold (each reader and semaphore permit its own) with its owner,
  // its data and its age. The lines are rebuilt only when the holds change.
  function renderHolders(e, owners) {
    const list = owners.slice().sort((a, b) => (a.since || Infinity) - (b.since || Infinity) ||
      (a.owner < b.owner ? -1 : a.owner > b.owner ? 1 : 0) || (a.fence || 0) - (b.fence || 0));
    const shown = list.slice(0, MAX_HOLDERS);
    const key = JSON.stringify(shown.map((o) => [o.owner, o.since || 0, o.data || "", o.fence || 0])) + list.length;
    if (key !== e.holdersKey) {
      e.holdersKey = key;
      e.ages = [];
      const cell = e.cells.owners;
      cell.replaceChildren();
      for (const o of shown) {
        const line = el("div", "holder");
        line.appendChild(el("span", o.owner ? "owner" : "owner unknown", o.owner || "unknown"));
        if (o.data) line.appendChild(el("span", "data", o.data));
        const age = el("span", "age");
        line.appendChild(age);
        line.title = (o.owner || "owner unknown") + (o.data ? " · " + o.data : "") +
          (o.since ? " · held since " + clock(o.since) : "") + (o.fence ? " · fence " + o.fence : "");
        cell.appendChild(line);
        e.ages.push(age);
      }
      if (list.length > MAX_HOLDERS) cell.appendChild(el("div", "more", "+" + (list.length - MAX_HOLDERS) + " more"));
    }
    // The server's ageMs, refreshed by every snapshot (each second): as
    // fine as the age is shown.
    shown.forEach((o, i) => { e.ages[i].textContent = o.since ? fmtAge(o.ageMs || 0) : ""; });
  }

  function tickTTL() {
    const now = performance.now();
    for (const e of locks.values()) {
      const left = Math.max(0, e.deadline - now);
      e.cells.text.textContent = fmtTTL(left);
      const f = Math.min(1, left / e.ttlMax);
      e.cells.fill.style.width = (f * 100).toFixed(1) + "%";
      e.cells.fill.className = left < 2000 || f < 0.1 ? "crit" : f < 0.3 ? "low" : "";
    }
  }
  function ttlLoop() { tickTTL(); setTimeout(() => requestAnimationFrame(ttlLoop), 100); }

  // ---- events: the activity feed and a quick table refresh ------------------------

  function onEvent(ev) {
    if (ev.type === "renew" && ev.result === "ok") return;
    let cls = ev.type, verb = ev.type, detail = "";
    if (ev.type === "acquire") {
      if (ev.result === "acquired") { verb = "acquired"; detail = "fence " + ev.fence; }
      else if (ev.result === "locked") { cls = "locked"; verb = "refused"; detail = ev.waited ? "after " + fmtDur(ev.durationMs) : "held"; }
      else if (ev.result === "canceled") { cls = "release"; verb = "gave up"; detail = fmtDur(ev.durationMs); }
      else { cls = "error"; verb = "error"; }
    } else if (ev.type === "release") { verb = "released"; detail = "held " + fmtDur(ev.durationMs); }
    else if (ev.type === "lost") { verb = "LOST"; detail = "held " + fmtDur(ev.durationMs); }
    else if (ev.type === "forced") {
      verb = "force-released"; detail = "by " + ev.by;
      if (ev.owners && ev.owners.length) detail += " · held by " + ev.owners.map((o) => o || "unknown").join(", ");
    }
    else if (ev.type === "renew") { cls = "error"; verb = "renew " + ev.result; }
    const li = el("li", cls);
    li.append(el("span", "t", clock(ev.time)), el("span", "i"), el("span", "n", ev.name), el("span", "d", verb + (detail ? " · " + detail : "")));
    li.title = ev.name + " · " + ev.mode + " · " + verb + (detail ? " · " + detail : "");
    const list = $("events");
    const none = list.querySelector(".none");
    if (none) none.remove();
    list.insertBefore(li, list.firstChild);
    while (list.children.length > 80) list.lastChild.remove();
    if (ev.type !== "renew") scheduleRefresh();
  }

  // An event means the table changed: fetch it now rather than wait for the
  // next snapshot.
  function scheduleRefresh() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(async () => {
      refreshTimer = 0;
      try {
        const r = await fetch("/v1/locks", { headers: headers(), cache: "no-store" });
        if (!r.ok) return;
        const body = await r.json();
        const held = body.locks.filter((l) => l.holders > 0);
        renderLocks(held, { inspect: true, truncated: body.truncated });
        renderCounters(held);
      } catch (e) { /* the next snapshot corrects it */ }
    }, 120);
  }

  // ---- charts ----------------------------------------------------------------

  function css(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }

  function prepare(canvas) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    return { ctx, w, h };
  }

  function spark(id, all, color) {
    const { ctx, w, h } = prepare($(id));
    let first = all.findIndex((v) => v !== null);
    if (first < 0) return;
    const data = all.slice(first);
    if (data.length === 1) data.unshift(data[0]), first--;
    const maxV = Math.max(1, ...data);
    const step = w / (all.length - 1);
    const x0 = first * step;
    const y = (v) => h - 2 - (v / maxV) * (h - 6);
    ctx.beginPath();
    ctx.moveTo(x0, y(data[0]));
    for (let i = 1; i < data.length; i++) ctx.lineTo(x0 + i * step, y(data[i]));
    ctx.lineTo(w, h); ctx.lineTo(x0, h); ctx.closePath();
    const g = ctx.createLinearGradient(0, 0, 0, h);
    g.addColorStop(0, color + "55"); g.addColorStop(1, color + "00");
    ctx.fillStyle = g; ctx.fill();
    ctx.beginPath();
    ctx.moveTo(x0, y(data[0]));
    for (let i = 1; i < data.length; i++) ctx.lineTo(x0 + i * step, y(data[i]));
    ctx.strokeStyle = color; ctx.lineWidth = 1.5; ctx.lineJoin = "round"; ctx.stroke();
  }

  function chart() {
    const { ctx, w, h } = prepare($("chart"));
    const pad = { l: 28, r: 4, t: 6, b: 16 };
    const cw = w - pad.l - pad.r, ch = h - pad.t - pad.b;
    const maxV = Math.max(4, ...series.acquired, ...series.locked, ...series.lost);
    const top = niceCeil(maxV);
    ctx.font = "10.5px " + css("--mono");
    ctx.fillStyle = css("--faint");
    ctx.strokeStyle = css("--line");
    ctx.lineWidth = 1;
    for (const f of [0, 0.5, 1]) {
      const yy = Math.round(pad.t + ch - f * ch) + 0.5;
      ctx.beginPath(); ctx.moveTo(pad.l, yy); ctx.lineTo(w - pad.r, yy); ctx.stroke();
      ctx.textAlign = "right"; ctx.textBaseline = "middle";
      if (Number.isInteger(top * f)) ctx.fillText(String(top * f), pad.l - 6, yy);
    }
    ctx.textAlign = "left"; ctx.textBaseline = "alphabetic";
    ctx.fillText("-5m", pad.l, h - 3);
    ctx.textAlign = "right"; ctx.fillText("now", w - pad.r, h - 3);
    const x = (i) => pad.l + (i / (N - 1)) * cw;
    const y = (v) => pad.t + ch - (v / top) * ch;
    const line = (data, color, fill) => {
      ctx.beginPath(); ctx.moveTo(x(0), y(data[0]));
      for (let i = 1; i < data.length; i++) ctx.lineTo(x(i), y(data[i]));
      if (fill) {
        ctx.lineTo(x(data.length - 1), y(0)); ctx.lineTo(x(0), y(0)); ctx.closePath();
        const g = ctx.createLinearGradient(0, pad.t, 0, pad.t + ch);
        g.addColorStop(0, color + "40"); g.addColorStop(1, color + "05");
        ctx.fillStyle = g; ctx.fill();
        ctx.beginPath(); ctx.moveTo(x(0), y(data[0]));
        for (let i = 1; i < data.length; i++) ctx.lineTo(x(i), y(data[i]));
      }
      ctx.strokeStyle = color; ctx.lineWidth = 1.5; ctx.lineJoin = "round"; ctx.stroke();
    };
    line(series.acquired, hex(css("--acq")), true);
    line(series.locked, hex(css("--cont")), false);
    // Losses are rare and matter: draw them as marks.
    ctx.fillStyle = css("--lost");
    for (let i = 0; i < series.lost.length; i++) {
      if (series.lost[i] > 0) { ctx.beginPath(); ctx.arc(x(i), y(series.lost[i]), 3, 0, 2 * Math.PI); ctx.fill(); }
    }
  }

  function niceCeil(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 4, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }
  function hex(c) { return /^#[0-9a-f]{6}$/i.test(c) ? c : "#4f9dff"; }

  function drawAll() {
    spark("spark-held", series.held, hex(css("--ok")));
    spark("spark-acq", series.acquired, hex(css("--acq")));
    spark("spark-cont", series.locked, hex(css("--cont")));
    spark("spark-lost", series.lost, hex(css("--lost")));
    chart();
  }

  // ---- start -----------------------------------------------------------------

  $("auth-form").addEventListener("submit", (e) => {
    e.preventDefault();
    token = $("auth-token").value.trim();
    sessionStorage.setItem("dlock.token", token);
    if (controller) controller.abort();
    connect();
  });
  window.addEventListener("resize", drawAll);
  window.matchMedia("(prefers-color-scheme: light)").addEventListener("change", drawAll);
  $("events").appendChild(el("li", "none", "Waiting for lock activity…"));
  $("try").textContent = "curl -X POST " + location.origin + "/api/locks/simple/resource1";
  drawAll();
  ttlLoop();
  connect();
})();
