// The seckill admin page: signs in with an admin token, polls the admin
// JSON API and draws what it answers. Plain browser JavaScript, no build
// step and no library: the page must work offline, from the binary alone.
//
// Every number shown sits in an element with a stable id or data-field
// attribute and carries its raw value in data-value, for people's scripts
// and for the browser test (http/adminpage_test.go).
"use strict";

(() => {
  const POLL_MS = 1500;
  const TOKEN_KEY = "seckill.adminToken";
  // Admission results, bottom of the chart's stack first.
  const RESULTS = [
    ["admitted", "admitted"],
    ["sold_out", "sold out"],
    ["duplicate_order", "duplicate"],
    ["not_started", "not started"],
    ["ended", "ended"],
    ["paused", "paused"],
    ["rate_limited", "rate limited"],
    ["unavailable", "unavailable"],
    ["other", "other"], // any result the page does not know; shown when seen
  ];
  const SVG = "http://www.w3.org/2000/svg";

  const $ = (sel) => document.querySelector(sel);
  let token = sessionStorage.getItem(TOKEN_KEY) || "";
  let generation = 0; // bumped at sign-out: late answers are dropped
  let timer = null;
  let polling = false;
  let pollAgain = false;
  let lastStats = null;
  let hoverX = null;
  let span = 300; // seconds of admissions the chart shows

  // ---- API -------------------------------------------------------------

  class APIError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(method, path, body, headers) {
    const gen = generation;
    let res;
    try {
      const h = { Authorization: "Bearer " + token, Accept: "application/json", ...(headers || {}) };
      if (body !== undefined) h["Content-Type"] = "application/json";
      res = await fetch(path, {
        method,
        headers: h,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
      });
    } catch (e) {
      throw new APIError(0, "network", "the server cannot be reached");
    }
    let answer = null;
    try {
      answer = await res.json();
    } catch (e) {
      answer = null;
    }
    if (!res.ok) {
      const code = (answer && answer.code) || "http_" + res.status;
      const message = (answer && answer.message) || res.statusText || "request failed";
      if (res.status === 401 && gen === generation && token) {
        signOut("The server refused the token (" + message + "): sign in again.");
      }
      throw new APIError(res.status, code, message);
    }
    return answer;
  }

  // ---- signing in and out ------------------------------------------------

  function showSignIn(message) {
    $("#dashboard").hidden = true;
    $("#sign-out").hidden = true;
    $("#sign-in-view").hidden = false;
    $("#status").textContent = "";
    $("#sign-in-error").textContent = message || "";
    $("#token").value = "";
    $("#token").focus();
  }

  function showDashboard() {
    $("#sign-in-view").hidden = true;
    $("#dashboard").hidden = false;
    $("#sign-out").hidden = false;
  }

  function signOut(message) {
    generation++;
    clearTimeout(timer);
    timer = null;
    token = "";
    lastStats = null;
    sessionStorage.removeItem(TOKEN_KEY);
    // Leave nothing of the sale on screen.
    for (const tb of document.querySelectorAll("#dashboard tbody")) tb.replaceChildren();
    $("#chart").replaceChildren();
    $("#legend").replaceChildren();
    for (const el of document.querySelectorAll("#reconcile-result, #control-result, #create-result, #dlq-outcome, #refresh-error")) el.hidden = true;
    showSignIn(message);
  }

  async function signIn(ev) {
    ev.preventDefault();
    const candidate = $("#token").value.trim().replace(/^Bearer\s+/i, "");
    if (!candidate) return;
    const button = $("#sign-in-button");
    button.disabled = true;
    $("#sign-in-error").textContent = "";
    token = candidate;
    try {
      await api("GET", "/api/admin/stats");
    } catch (e) {
      if (e.status === 401 || e.status === 403 || e.status === 0) {
        token = "";
        button.disabled = false;
        $("#sign-in-error").textContent =
          e.status === 403 ? "This token is not an admin's." :
          e.status === 401 ? "The server refused this token: " + e.message + "." :
          "The server cannot be reached.";
        return;
      }
      // Any other error: the token may be good; the dashboard shows the error.
    }
    button.disabled = false;
    sessionStorage.setItem(TOKEN_KEY, token);
    start();
  }

  function start() {
    generation++;
    pollAgain = false;
    showDashboard();
    poll();
  }

  // ---- polling ---------------------------------------------------------

  async function poll() {
    if (polling) {
      pollAgain = true;
      return;
    }
    polling = true;
    clearTimeout(timer);
    const gen = generation;
    const [stats, dlq, refunds, refused] = await Promise.allSettled([api("GET", "/api/admin/stats"), api("GET", "/api/admin/dlq"),
      api("GET", "/api/admin/refunds"), api("GET", "/api/admin/payments/refused")]);
    polling = false;
    if (gen !== generation) {
      // Signed out meanwhile; a new sign-in may be waiting for this poll.
      if (pollAgain && token) {
        pollAgain = false;
        poll();
      }
      return;
    }
    const errors = [];
    if (stats.status === "fulfilled") {
      lastStats = stats.value;
      renderStats(stats.value);
    } else {
      errors.push("stats: " + describe(stats.reason));
    }
    if (dlq.status === "fulfilled") {
      renderDeadLetters(dlq.value.deadLetters || []);
    } else {
      errors.push("dead letters: " + describe(dlq.reason));
    }
    if (refunds.status === "fulfilled") {
      $("#refunds-card").hidden = false;
      renderRefunds(refunds.value);
    } else if (refunds.reason instanceof APIError && refunds.reason.status === 503 && refunds.reason.code === "unavailable") {
      $("#refunds-card").hidden = true; // a server whose provider gives no refunds
    } else {
      errors.push("refunds: " + describe(refunds.reason));
    }
    if (refused.status === "fulfilled") {
      $("#refused-card").hidden = false;
      renderRefused(refused.value.refused || []);
    } else if (refused.reason instanceof APIError && refused.reason.status === 503 && refused.reason.code === "unavailable") {
      $("#refused-card").hidden = true; // a server without payments
    } else {
      errors.push("refused payments: " + describe(refused.reason));
    }
    const banner = $("#refresh-error");
    banner.hidden = errors.length === 0;
    banner.textContent = errors.length ? "Could not refresh " + errors.join("; ") + ". Retrying." : "";
    $("#status").classList.toggle("stale", errors.length > 0);
    if (pollAgain) {
      pollAgain = false;
      poll();
      return;
    }
    timer = setTimeout(poll, POLL_MS);
  }

  function describe(err) {
    if (!(err instanceof APIError)) return String(err);
    return err.status ? err.message + " (" + err.status + " " + err.code + ")" : err.message;
  }

  // ---- formatting ------------------------------------------------------

  const nf = new Intl.NumberFormat("en-US");
  const fmt = (v) => (v === null || v === undefined ? "–" : nf.format(v));
  const clock = (d) => d.toLocaleTimeString("en-GB", { hour12: false });
  const hhmm = (d) => d.toLocaleTimeString("en-GB", { hour12: false, hour: "2-digit", minute: "2-digit" });

  function age(seconds) {
    if (seconds === null || seconds === undefined) return "–";
    const s = Math.round(seconds);
    if (seconds < 10) return seconds.toFixed(1) + " s";
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " m " + (s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " m";
  }

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("data-")) e.dataset[camel(k.slice(5))] = v;
      else e.setAttribute(k, v);
    }
    e.append(...children);
    return e;
  }

  const camel = (s) => s.replace(/-([a-z])/g, (_, c) => c.toUpperCase());

  // setNum shows v in e and keeps the raw value in data-value ("" for null).
  function setNum(e, v, text) {
    const raw = v === null || v === undefined ? "" : String(v);
    if (e.dataset.value !== raw || e.textContent !== (text ?? fmt(v))) {
      e.dataset.value = raw;
      e.textContent = text ?? fmt(v);
    }
  }

  // syncRows makes tbody's rows match items, in order, keeping the row of
  // each key so that focus and a pending confirmation survive a refresh.
  function syncRows(tbody, items, keyAttr, keyOf, create, update) {
    const prop = camel(keyAttr.replace(/^data-/, ""));
    const old = new Map();
    for (const tr of tbody.rows) old.set(tr.dataset[prop], tr);
    let prev = null;
    for (const item of items) {
      const key = keyOf(item);
      let tr = old.get(key);
      if (tr) old.delete(key);
      else {
        tr = create(item, key);
        tr.dataset[prop] = key;
      }
      update(tr, item);
      const want = prev ? prev.nextSibling : tbody.firstChild;
      if (tr !== want) tbody.insertBefore(tr, want);
      prev = tr;
    }
    for (const tr of old.values()) tr.remove();
  }

  // field returns the cell of tr with data-field name.
  const field = (tr, name) => tr.querySelector('[data-field="' + name + '"]');

  // ---- stats -----------------------------------------------------------

  function renderStats(s) {
    const now = new Date(s.time);
    const st = $("#status");
    st.replaceChildren("Updated ", el("time", { id: "stats-time", datetime: s.time, "data-value": s.time }, clock(now)));
    renderVouchers(s.vouchers || [], now);
    renderStreams(s.vouchers || []);
    renderShards(s.vouchers || []);
    renderWorkers(s.workers || {});
    renderChart();
  }

  function titleCell(v, key) {
    return el("td", { class: "title" },
      el("span", { "data-voucher": key, "data-field": "title" }),
      el("span", { class: "id muted", "data-voucher": key, "data-field": "id" }, "#" + key));
  }

  function renderVouchers(vouchers, now) {
    $("#vouchers-empty").hidden = vouchers.length > 0;
    const numbers = ["initialStock", "stock", "remaining", "pending", "created", "failed", "awaitingPayment", "paid", "cancelled", "returned", "drift"];
    syncRows($("#vouchers tbody"), vouchers, "data-voucher", (v) => v.id, (v, key) => {
      const tr = el("tr", {}, titleCell(v, key), el("td", { "data-voucher": key, "data-field": "window" }),
        el("td", { class: "num", "data-voucher": key, "data-field": "price" }),
        el("td", { class: "num", "data-voucher": key, "data-field": "revenue" }));
      for (const n of numbers) tr.append(el("td", { class: "num", "data-voucher": key, "data-field": n }));
      const reconcile = el("button", { type: "button", class: "small", "data-action": "reconcile", "data-voucher": key }, "Reconcile");
      const repair = el("button", { type: "button", class: "small quiet", "data-action": "repair", "data-voucher": key }, "Repair");
      reconcile.addEventListener("click", () => reconcileVoucher(key, false, reconcile));
      repair.addEventListener("click", () => confirmThen(repair, "Confirm repair", () => reconcileVoucher(key, true, repair)));
      // The live controls: pause or resume, end now, add units.
      const pause = el("button", { type: "button", class: "small quiet", "data-action": "pause", "data-voucher": key }, "Pause");
      pause.addEventListener("click", () => controlVoucher(key, pause.dataset.action, pause));
      const end = el("button", { type: "button", class: "small quiet danger", "data-action": "end", "data-voucher": key }, "End now");
      end.addEventListener("click", () => confirmThen(end, "Confirm end", () => controlVoucher(key, "end", end)));
      const units = el("input", { type: "number", class: "units", min: "1", max: "10000000", step: "1", value: "10",
        "data-voucher": key, "data-field": "addUnits", "aria-label": "Units to add to voucher " + key });
      const add = el("button", { type: "button", class: "small quiet", "data-action": "add-stock", "data-voucher": key }, "Add");
      add.addEventListener("click", () => addStock(key, units, add));
      tr.append(el("td", { class: "actions" }, reconcile, " ", repair,
        el("div", { class: "controls", role: "group", "aria-label": "Live controls of voucher " + key }, pause, end, units, add)));
      return tr;
    }, (tr, v) => {
      const key = v.id;
      field(tr, "title").textContent = v.title;
      const begin = new Date(v.beginTime), end = new Date(v.endTime);
      const w = field(tr, "window");
      w.textContent = (v.paused ? "paused · " : "") +
        (now < begin ? "starts " + hhmm(begin) : now >= end ? "ended " + hhmm(end) : "on sale, ends " + hhmm(end));
      w.title = v.beginTime + " – " + v.endTime;
      w.dataset.paused = String(!!v.paused);
      tr.classList.toggle("paused", !!v.paused);
      const price = field(tr, "price");
      price.textContent = v.priceText;
      price.dataset.value = String(v.price);
      price.dataset.currency = v.currency;
      const revenue = field(tr, "revenue");
      revenue.textContent = v.revenueText;
      revenue.dataset.value = String(v.revenue);
      const pause = tr.querySelector('button[data-action="pause"], button[data-action="resume"]');
      if (!pause.disabled) {
        pause.dataset.action = v.paused ? "resume" : "pause";
        pause.textContent = v.paused ? "Resume" : "Pause";
        pause.setAttribute("aria-label", (v.paused ? "Resume" : "Pause") + " voucher " + key);
      }
      for (const n of numbers) setNum(field(tr, n), v[n] ?? null);
      const rem = field(tr, "remaining"), unloaded = v.remaining === null || v.remaining === undefined;
      if (unloaded) setNum(rem, null, "not loaded");
      rem.classList.toggle("warn", unloaded);
      const drift = field(tr, "drift");
      drift.classList.toggle("alert", v.drift !== 0);
      setNum(drift, v.drift, (v.drift > 0 ? "+" : "") + fmt(v.drift));
      drift.title = v.drift === 0 ? "Redis and the database agree" : "Redis and the database disagree: reconcile";
      field(tr, "failed").classList.toggle("warn", v.failed > 0);
      tr.classList.toggle("drifting", v.drift !== 0);
      if (lastReconcile && lastReconcile.voucherId === key) updateReconcileTitle(v.title);
    });
  }

  function renderStreams(vouchers) {
    $("#streams-empty").hidden = vouchers.length > 0;
    const numbers = ["length", "pending", "lag", "oldestPendingSeconds", "consumers", "deadLetters"];
    syncRows($("#streams tbody"), vouchers, "data-voucher", (v) => v.id, (v, key) => {
      const tr = el("tr", {}, titleCell(v, key));
      for (const n of numbers) tr.append(el("td", { class: "num", "data-voucher": key, "data-field": "stream." + n }));
      tr.append(el("td", { "data-voucher": key, "data-field": "redisNode" }));
      return tr;
    }, (tr, v) => {
      const s = v.stream || {};
      field(tr, "title").textContent = v.title;
      for (const n of numbers) setNum(field(tr, "stream." + n), s[n] ?? null);
      setNum(field(tr, "stream.oldestPendingSeconds"), s.oldestPendingSeconds ?? null, s.pending ? age(s.oldestPendingSeconds) : "–");
      field(tr, "stream.oldestPendingSeconds").classList.toggle("warn", s.oldestPendingSeconds >= 30);
      field(tr, "stream.deadLetters").classList.toggle("warn", s.deadLetters > 0);
      field(tr, "stream.consumers").classList.toggle("warn", s.consumers === 0 && s.length > 0);
      if (s.lag === null || s.lag === undefined) field(tr, "stream.lag").title = "Redis cannot tell";
      const shards = (v.shardStats || []).length;
      field(tr, "redisNode").textContent = shards ? shards + " shards (below)" : v.redisNode || "–";
    });
  }

  // renderShards lists the shards of the sharded vouchers, one row each;
  // the section is hidden while there are none.
  function renderShards(vouchers) {
    const rows = vouchers.flatMap((v) => (v.shardStats || []).map((sh) => ({ v, sh })));
    $("#shards-card").hidden = rows.length === 0;
    const numbers = ["remaining", "buyers", "length", "pending", "lag", "deadLetters"];
    syncRows($("#shards tbody"), rows, "data-shard", (r) => r.v.id + "/" + r.sh.index, (r, key) => {
      const tr = el("tr", {},
        el("td", { class: "title" }, el("span", { "data-field": "shard.title" }), el("span", { class: "id muted" }, "#" + r.v.id)),
        el("td", { class: "num", "data-shard": key, "data-field": "shard.index" }, String(r.sh.index)),
        el("td", { class: "mono", "data-shard": key, "data-field": "shard.tag" }));
      for (const n of numbers) tr.append(el("td", { class: "num", "data-shard": key, "data-field": "shard." + n }));
      tr.append(el("td", { class: "num", "data-shard": key, "data-field": "shard.transfersOut" }));
      tr.append(el("td", { "data-shard": key, "data-field": "shard.redisNode" }));
      return tr;
    }, (tr, r) => {
      const sh = r.sh;
      field(tr, "shard.title").textContent = r.v.title;
      field(tr, "shard.tag").textContent = sh.tag;
      for (const n of numbers) setNum(field(tr, "shard." + n), sh[n] ?? null);
      const rem = field(tr, "shard.remaining"), unloaded = sh.remaining === null || sh.remaining === undefined;
      if (unloaded) setNum(rem, null, "not loaded");
      rem.classList.toggle("warn", unloaded);
      field(tr, "shard.deadLetters").classList.toggle("warn", sh.deadLetters > 0);
      field(tr, "shard.lag").title = sh.lag === null || sh.lag === undefined ? "Redis cannot tell" : "";
      const out = field(tr, "shard.transfersOut");
      setNum(out, sh.transfersOut ?? null, sh.transfersOut ? fmt(sh.transfersOut) + " (" + fmt(sh.transferredOut) + " units)" : "0");
      field(tr, "shard.redisNode").textContent = sh.redisNode || "–";
    });
  }

  function renderWorkers(w) {
    setNum($("#workers-busy"), w.busy ?? null);
    setNum($("#workers-allowed"), w.allowed ?? null);
    const b = $("#workers-breaker");
    b.textContent = w.breaker || "–";
    b.dataset.value = w.breaker || "";
    b.className = "badge " + ({ closed: "ok", open: "bad", "half-open": "warn" }[w.breaker] || "");
    b.title = { closed: "the database answers", open: "the database is failing: workers wait", "half-open": "trying the database again" }[w.breaker] || "";
    $("#workers-mode").textContent = w.mode || "–";
    $("#workers-mode").dataset.value = w.mode || "";
    $("#workers-consumer").textContent = w.consumer || "–";
    $("#workers-consumer").dataset.value = w.consumer || "";
  }

  // ---- the admissions chart ---------------------------------------------

  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }

  // niceStep is a round step that splits max into about n intervals.
  function niceStep(max, n) {
    const raw = max / n;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * mag >= raw) return Math.max(1, m * mag);
    return Math.max(1, 10 * mag);
  }

  // countsOf returns a second's counts by the chart's results, with the
  // results the page does not know under "other".
  function countsOf(sec) {
    const out = {};
    for (const [k, n] of Object.entries(sec.counts || {})) {
      const key = RESULTS.some(([r]) => r === k) ? k : "other";
      out[key] = (out[key] || 0) + n;
    }
    return out;
  }

  function renderChart() {
    const box = $("#chart");
    const adm = ((lastStats && lastStats.admissions) || []).slice(-span).map((sec) => ({ time: sec.time, counts: countsOf(sec) }));
    const totals = Object.fromEntries(RESULTS.map(([k]) => [k, 0]));
    const stacked = adm.map((sec) => {
      let sum = 0;
      for (const [k] of RESULTS) {
        const c = sec.counts[k] || 0;
        totals[k] += c;
        sum += c;
      }
      return sum;
    });
    renderLegend(totals);
    const peak = stacked.length ? Math.max(...stacked) : 0;
    const minutes = Math.max(1, Math.round(span / 60));
    setNum($("#admissions-span"), span, minutes + " minute" + (minutes === 1 ? "" : "s"));
    setNum($("#admissions-peak"), peak);

    const W = Math.max(320, box.clientWidth || 800), H = 210;
    const m = { l: 44, r: 8, t: 8, b: 22 };
    const pw = W - m.l - m.r, ph = H - m.t - m.b;
    const root = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img", "aria-labelledby": "admissions-h chart-desc" });
    const desc = svg("desc", { id: "chart-desc" });
    desc.textContent = "Per second over the last " + minutes + " minutes. Totals: " +
      RESULTS.map(([k, label]) => label + " " + totals[k]).join(", ") + ".";
    root.append(desc);

    const step = niceStep(Math.max(peak, 1), 4);
    const top = Math.max(step, Math.ceil(Math.max(peak, 1) / step) * step);
    const y = (v) => m.t + ph - (v / top) * ph;
    for (let v = 0; v <= top; v += step) {
      root.append(svg("line", { class: v === 0 ? "axis" : "gridline", x1: m.l, x2: m.l + pw, y1: y(v), y2: y(v) }));
      const t = svg("text", { class: "tick", x: m.l - 6, y: y(v) + 4, "text-anchor": "end" });
      t.textContent = nf.format(v);
      root.append(t);
    }
    if (!adm.length) {
      const t = svg("text", { class: "empty-chart", x: m.l + pw / 2, y: m.t + ph / 2, "text-anchor": "middle" });
      t.textContent = "No admissions yet";
      root.append(t);
      box.replaceChildren(root);
      return;
    }
    const bw = pw / adm.length;
    const base = new Array(adm.length).fill(0);
    for (const [k] of RESULTS) {
      let d = "";
      adm.forEach((sec, i) => {
        const c = sec.counts[k] || 0;
        if (!c) return;
        const y0 = y(base[i]), y1 = y(base[i] + c);
        base[i] += c;
        d += "M" + (m.l + i * bw).toFixed(2) + " " + y0.toFixed(2) + "V" + y1.toFixed(2) +
          "h" + Math.max(bw - (bw > 3 ? 0.5 : 0), 0.8).toFixed(2) + "V" + y0.toFixed(2) + "z";
      });
      if (d) root.append(svg("path", { class: "series s-" + k, d }));
    }
    // A label at each whole minute, or quarter minute on a short span.
    const every = adm.length > 120 ? 60 : 15;
    adm.forEach((sec, i) => {
      const t = new Date(sec.time);
      if (t.getSeconds() % every !== 0) return;
      const x = m.l + i * bw;
      root.append(svg("line", { class: "tickmark", x1: x, x2: x, y1: m.t + ph, y2: m.t + ph + 4 }));
      const label = svg("text", { class: "tick", x, y: H - 6, "text-anchor": "middle" });
      label.textContent = every === 60 ? hhmm(t) : clock(t);
      root.append(label);
    });
    const cursor = svg("line", { class: "cursor", x1: 0, x2: 0, y1: m.t, y2: m.t + ph, visibility: "hidden" });
    const hit = svg("rect", { class: "hit", x: m.l, y: m.t, width: pw, height: ph });
    root.append(cursor, hit);
    const readout = (x) => {
      const i = Math.floor((x - m.l) / bw);
      if (x === null || i < 0 || i >= adm.length) {
        cursor.setAttribute("visibility", "hidden");
        $("#chart-readout").textContent = "\u00a0";
        return;
      }
      const cx = m.l + (i + 0.5) * bw;
      cursor.setAttribute("x1", cx);
      cursor.setAttribute("x2", cx);
      cursor.setAttribute("visibility", "visible");
      const sec = adm[i];
      const parts = RESULTS.filter(([k]) => sec.counts[k]).map(([k, label]) => label + " " + fmt(sec.counts[k]));
      $("#chart-readout").textContent = clock(new Date(sec.time)) + ": " + (parts.length ? parts.join(", ") : "none");
    };
    hit.addEventListener("mousemove", (ev) => {
      hoverX = ev.clientX - root.getBoundingClientRect().left;
      readout(hoverX);
    });
    hit.addEventListener("mouseleave", () => {
      hoverX = null;
      readout(null);
    });
    readout(hoverX);
    box.replaceChildren(root);
  }

  function renderLegend(totals) {
    const ul = $("#legend");
    if (!ul.children.length) {
      for (const [k, label] of RESULTS) {
        ul.append(el("li", { class: "s-" + k },
          el("span", { class: "swatch", "aria-hidden": "true" }), label + " ",
          el("span", { class: "total", "data-result": k, "data-field": "total" })));
      }
    }
    for (const [k] of RESULTS) setNum(ul.querySelector('[data-result="' + k + '"]'), totals[k]);
    ul.querySelector('[data-result="other"]').parentElement.hidden = totals.other === 0;
  }

  function setSpan(seconds) {
    span = seconds;
    for (const b of document.querySelectorAll("[data-span]")) b.setAttribute("aria-pressed", String(Number(b.dataset.span) === span));
    renderChart();
  }

  // ---- dead letters ----------------------------------------------------

  function voucherTitle(id) {
    const v = lastStats && (lastStats.vouchers || []).find((v) => v.id === id);
    return v ? v.title : "";
  }

  function renderDeadLetters(list) {
    setNum($("#dlq-count"), list.length);
    $("#dlq-empty").hidden = list.length > 0;
    $("#dead-letters").hidden = list.length === 0;
    syncRows($("#dead-letters tbody"), list, "data-dead-letter", (d) => d.id, (d, key) => {
      const cells = ["orderId", "voucherId", "userId", "reason", "at", "stockReturned"].map((f) =>
        el("td", { "data-dead-letter": key, "data-field": f, class: f === "reason" ? "reason" : f === "orderId" ? "mono" : "" }));
      const retry = el("button", { type: "button", class: "small", "data-action": "retry", "data-dead-letter": key, "aria-label": "Retry " + key }, "Retry");
      const discard = el("button", { type: "button", class: "small quiet danger", "data-action": "discard", "data-dead-letter": key, "aria-label": "Discard " + key }, "Discard");
      retry.addEventListener("click", () => settle(key, "retry", retry));
      discard.addEventListener("click", () => confirmThen(discard, "Confirm discard", () => settle(key, "discard", discard)));
      return el("tr", {}, ...cells, el("td", { class: "actions" }, retry, " ", discard));
    }, (tr, d) => {
      const order = field(tr, "orderId");
      order.dataset.value = d.orderId || "";
      order.textContent = d.orderId && d.orderId !== "0" ? d.orderId : d.id;
      const v = field(tr, "voucherId");
      v.dataset.value = d.voucherId;
      v.textContent = voucherTitle(d.voucherId) || "#" + d.voucherId;
      v.title = "voucher " + d.voucherId;
      const u = field(tr, "userId");
      u.dataset.value = d.userId || "";
      u.textContent = d.userId && d.userId !== "0" ? "user " + d.userId : "–";
      const r = field(tr, "reason");
      r.dataset.value = d.reason;
      r.textContent = d.reason;
      const at = field(tr, "at");
      at.dataset.value = d.at;
      at.textContent = clock(new Date(d.at));
      at.title = d.at;
      const sr = field(tr, "stockReturned");
      sr.dataset.value = String(!!d.stockReturned);
      sr.textContent = d.stockReturned ? "given back" : "not given back";
      sr.classList.toggle("warn", !d.stockReturned);
    });
  }

  // ---- refunds waiting -------------------------------------------------

  function renderRefunds(body) {
    const list = body.refunds || [];
    setNum($("#refunds-count"), body.waiting);
    $("#refunds-count").classList.toggle("warn", body.waiting > 0);
    $("#refunds-empty").hidden = list.length > 0;
    $("#refunds").hidden = list.length === 0;
    syncRows($("#refunds tbody"), list, "data-refund", (r) => r.orderId, (r, key) =>
      el("tr", {}, ...["orderId", "voucherId", "userId", "paidAt", "attempts", "nextAt", "lastError", "acceptedAt"].map((f) =>
        el("td", { "data-refund": key, "data-field": f, class: f === "orderId" ? "mono" : f === "attempts" ? "num" : f === "lastError" ? "reason" : "" }))),
    (tr, r) => {
      field(tr, "orderId").textContent = r.orderId;
      const v = field(tr, "voucherId");
      v.dataset.value = r.voucherId;
      v.textContent = voucherTitle(r.voucherId) || "#" + r.voucherId;
      v.title = "voucher " + r.voucherId;
      field(tr, "userId").textContent = "user " + r.userId;
      for (const f of ["paidAt", "nextAt", "acceptedAt"]) {
        const c = field(tr, f);
        c.dataset.value = r[f] || "";
        c.textContent = r[f] ? clock(new Date(r[f])) : "–";
        c.title = r[f] || "";
      }
      const paid = field(tr, "paidAt");
      if (r.paidAt) paid.textContent += " (" + age((Date.now() - Date.parse(r.paidAt)) / 1000) + " ago)";
      setNum(field(tr, "attempts"), r.attempts);
      const e = field(tr, "lastError");
      e.textContent = r.lastError || "–";
      e.classList.toggle("warn", !!r.lastError);
    });
  }

  // Why a payment event was refused, in words.
  const REFUSED = {
    amount_mismatch: "another amount",
    currency_mismatch: "another currency",
    amount_missing: "amount not said",
  };

  function renderRefused(list) {
    setNum($("#refused-count"), list.length);
    $("#refused-count").classList.toggle("alert", list.length > 0);
    $("#refused-empty").hidden = list.length > 0;
    $("#refused").hidden = list.length === 0;
    syncRows($("#refused tbody"), list, "data-refused", (r) => r.eventId, (r, key) =>
      el("tr", {}, ...["orderId", "expected", "received", "reason", "eventId", "at"].map((f) =>
        el("td", { "data-refused": key, "data-field": f, class: f === "orderId" || f === "eventId" ? "mono" : f === "expected" || f === "received" ? "num" : "" }))),
    (tr, r) => {
      field(tr, "orderId").textContent = r.orderId;
      field(tr, "expected").textContent = r.expected;
      const got = field(tr, "received");
      got.textContent = r.received || "not said";
      got.classList.add("warn");
      const why = field(tr, "reason");
      why.textContent = REFUSED[r.reason] || r.reason;
      why.dataset.value = r.reason;
      field(tr, "eventId").textContent = r.eventId;
      const at = field(tr, "at");
      at.dataset.value = r.at;
      at.textContent = clock(new Date(r.at));
      at.title = r.at;
    });
  }

  // Why a retry was refused, and what became of the order.
  const REFUSALS = {
    sold_out: "sold out: the order stays failed",
    duplicate_order: "the buyer already has an order for this voucher: this one stays failed",
    ended: "the sale has ended: the order stays failed",
    paused: "the sale is paused: the dead letter stays; retry once it is resumed",
    not_started: "the sale has not started: the order stays failed",
    dead_letter_not_found: "no such dead letter: already settled",
    voucher_not_found: "the voucher is gone: the order stays failed",
    unavailable: "Redis or the database is unavailable: try again",
  };

  async function settle(id, action, button) {
    const out = $("#dlq-outcome");
    button.disabled = true;
    button.setAttribute("aria-busy", "true");
    try {
      const body = await api("POST", "/api/admin/dlq/" + encodeURIComponent(id) + "/" + action);
      showOutcome(out, "ok", action, id, action === "retry"
        ? "Order " + (body.orderId || id) + " admitted again: " + (body.status || "pending") + "."
        : "Order " + id + " discarded: it stays failed.");
    } catch (e) {
      const why = REFUSALS[e.code] || describe(e);
      showOutcome(out, "error", action, id, (action === "retry" ? "Retry of " : "Discard of ") + id + " refused: " + why + ".");
    } finally {
      button.disabled = false;
      button.removeAttribute("aria-busy");
    }
    poll();
  }

  function showOutcome(out, kind, action, id, text) {
    out.hidden = false;
    out.dataset.outcome = kind;
    out.dataset.action = action;
    out.dataset.deadLetter = id;
    out.className = "result " + kind;
    out.replaceChildren(el("span", { class: "at" }, clock(new Date())), " ", text);
  }

  // confirmThen asks for a second click within a few seconds before doing a
  // change that cannot be undone.
  function confirmThen(button, question, act) {
    if (button.dataset.confirm === "1") {
      clearTimeout(button._confirmTimer);
      button.dataset.confirm = "";
      button.textContent = button._label;
      button.classList.remove("confirm");
      act();
      return;
    }
    button._label = button.textContent;
    button.dataset.confirm = "1";
    button.textContent = question;
    button.classList.add("confirm");
    button._confirmTimer = setTimeout(() => {
      button.dataset.confirm = "";
      button.textContent = button._label;
      button.classList.remove("confirm");
    }, 4000);
  }

  // ---- creating a voucher, and its live controls -------------------------

  // isoOf reads a datetime-local input (the browser's local time) as an
  // RFC 3339 time.
  function isoOf(input) {
    const d = new Date(input.value);
    return isNaN(d) ? input.value : d.toISOString();
  }

  async function createVoucher(ev) {
    ev.preventDefault();
    const out = $("#create-result");
    const button = $("#create-button");
    const num = (id) => Number($(id).value);
    const body = {
      title: $("#cv-title").value,
      stock: num("#cv-stock"),
      beginTime: isoOf($("#cv-begin")),
      endTime: isoOf($("#cv-end")),
      shards: num("#cv-shards"),
      payWithinSeconds: num("#cv-pay"),
      rebuyAfterCancel: $("#cv-rebuy").checked,
      price: num("#cv-price"),
      value: num("#cv-value"),
      subtitle: $("#cv-subtitle").value,
      rules: $("#cv-rules").value,
      imageUrl: $("#cv-image").value,
    };
    // Empty: the server's default currency.
    if ($("#cv-currency").value) body.currency = $("#cv-currency").value;
    // The challenge's options go with a challenge only: without one, the
    // API's defaults (no challenge, a lead of 60 s) are what the form says.
    if ($("#cv-challenge").checked) {
      body.challenge = true;
      body.challengeLeadSeconds = num("#cv-lead");
    }
    button.disabled = true;
    try {
      const v = await api("POST", "/api/admin/vouchers", body);
      out.hidden = false;
      out.className = "result ok";
      out.dataset.outcome = "ok";
      out.dataset.voucher = v.id;
      out.replaceChildren(el("span", { class: "at" }, clock(new Date())), " Created ",
        el("strong", { "data-field": "created.title" }, v.title), " ",
        el("span", { class: "id muted", "data-field": "created.id", "data-value": v.id }, "#" + v.id),
        ": " + fmt(v.stock) + " units, " + new Date(v.beginTime).toLocaleString("en-GB") + " – " + new Date(v.endTime).toLocaleString("en-GB") + ".");
      $("#create-voucher").reset();
    } catch (e) {
      out.hidden = false;
      out.className = "result error";
      out.dataset.outcome = "error";
      delete out.dataset.voucher;
      out.replaceChildren("Not created: " + describe(e) + ".");
    } finally {
      button.disabled = false;
    }
    poll();
  }

  // A control's words, by action.
  const CONTROLS = {
    pause: ["Paused", "paused: buys are answered 409 paused, nothing is admitted"],
    resume: ["Resumed", "on sale again"],
    end: ["Ended", "ended now: buys are answered 409 ended"],
    "add-stock": ["Added", "stock added"],
  };

  async function controlVoucher(id, action, button, body, headers) {
    const out = $("#control-result");
    button.disabled = true;
    button.setAttribute("aria-busy", "true");
    const path = "/api/admin/vouchers/" + encodeURIComponent(id) + "/" + (action === "add-stock" ? "stock" : action);
    let ok = false;
    try {
      const v = await api("POST", path, body, headers);
      ok = true;
      showControl(out, "ok", action, id, v);
    } catch (e) {
      out.hidden = false;
      out.className = "result error";
      out.dataset.outcome = "error";
      out.dataset.action = action;
      out.dataset.voucher = id;
      out.replaceChildren(el("span", { class: "at" }, clock(new Date())), " " +
        CONTROLS[action][0] + " refused for voucher #" + id + ": " + describe(e) +
        (action === "add-stock" ? ". Adding again adds once: the same request is sent." : "."));
    } finally {
      button.disabled = false;
      button.removeAttribute("aria-busy");
    }
    poll();
    return ok;
  }

  function showControl(out, kind, action, id, v) {
    out.hidden = false;
    out.className = "result " + kind;
    out.dataset.outcome = kind;
    out.dataset.action = action;
    out.dataset.voucher = id;
    const f = (name, value, text) => el("span", { "data-field": "control." + name, "data-value": String(value) }, text);
    out.replaceChildren(el("span", { class: "at" }, clock(new Date())), " ",
      el("strong", {}, v.title), " #" + id + " " + CONTROLS[action][1] + ". ",
      f("paused", !!v.paused, v.paused ? "Paused" : "Not paused"), "; stock ",
      f("stock", v.stock, fmt(v.stock)), ", remaining ",
      f("remaining", v.remaining ?? "", v.remaining === null || v.remaining === undefined ? "not loaded" : fmt(v.remaining)),
      "; ends ", f("endTime", v.endTime, new Date(v.endTime).toLocaleString("en-GB")), ".");
  }

  // randomKey makes an Idempotency-Key; crypto.getRandomValues works on a
  // page served over plain HTTP too.
  function randomKey() {
    const b = new Uint8Array(16);
    crypto.getRandomValues(b);
    return "admin-" + Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  }

  // addStock adds the units once: the click's Idempotency-Key is kept until
  // the server answers, so that pressing again after a failure (a lost
  // answer, a 503) sends the same request and adds nothing twice.
  async function addStock(id, input, button) {
    const units = Number(input.value);
    if (!Number.isInteger(units) || units < 1) {
      input.focus();
      return;
    }
    if (!button._key || button._units !== units) {
      button._key = randomKey();
      button._units = units;
    }
    button.dataset.key = button._key;
    if (await controlVoucher(id, "add-stock", button, { add: units }, { "Idempotency-Key": button._key })) {
      button._key = null;
    }
  }

  // ---- reconcile -------------------------------------------------------

  let lastReconcile = null;

  function updateReconcileTitle(title) {
    const h = $("#reconcile-result [data-field=voucherTitle]");
    if (h) h.textContent = title;
  }

  async function reconcileVoucher(id, repair, button) {
    const out = $("#reconcile-result");
    button.disabled = true;
    button.setAttribute("aria-busy", "true");
    try {
      const r = await api("POST", "/api/admin/vouchers/" + encodeURIComponent(id) + "/reconcile" + (repair ? "?repair=true" : ""));
      lastReconcile = r;
      renderReconcile(out, r, repair);
    } catch (e) {
      out.hidden = false;
      out.className = "result error";
      out.dataset.voucher = id;
      out.dataset.outcome = "error";
      out.replaceChildren((repair ? "Repair" : "Reconcile") + " of voucher #" + id + " failed: " + describe(e) + ".");
    } finally {
      button.disabled = false;
      button.removeAttribute("aria-busy");
    }
    poll();
  }

  function renderReconcile(out, r, repair) {
    out.hidden = false;
    out.className = "result " + (r.ok ? "ok" : "error");
    out.dataset.voucher = r.voucherId;
    out.dataset.outcome = r.ok ? "ok" : "drift";
    const verdict = r.ok
      ? (r.repaired ? "repaired: Redis and the database agree now." : "Redis and the database agree.")
      : "Redis and the database disagree" + (repair ? " even after the repair" : ": repair rebuilds Redis from the database") + ".";
    const rows = [
      ["initialStock", "initial stock"], ["dbStock", "database stock"], ["dbOrders", "database orders"],
      ["loaded", "loaded in Redis"], ["remaining", "Redis remaining"], ["buyers", "Redis buyers"],
      ["pending", "pending"], ["deadLetters", "dead letters"], ["drift", "drift"], ["buyerDrift", "buyer drift"],
    ];
    const dl = el("dl", { class: "recon" });
    for (const [k, label] of rows) {
      const dd = el("dd", { "data-voucher": r.voucherId, "data-field": "reconcile." + k });
      if (typeof r[k] === "boolean") {
        dd.dataset.value = String(r[k]);
        dd.textContent = r[k] ? "yes" : "no";
      } else setNum(dd, r[k] ?? null);
      if ((k === "drift" || k === "buyerDrift") && r[k]) dd.classList.add("alert");
      dl.append(el("div", {}, el("dt", {}, label), dd));
    }
    const close = el("button", { type: "button", class: "small quiet", "aria-label": "Close the reconciliation" }, "Close");
    close.addEventListener("click", () => {
      out.hidden = true;
      lastReconcile = null;
    });
    out.replaceChildren(
      el("div", { class: "result-head" },
        el("p", {},
          el("span", { class: "at" }, clock(new Date())), " ",
          el("strong", { "data-field": "voucherTitle" }, voucherTitle(r.voucherId) || "#" + r.voucherId),
          " ",
          el("span", { "data-field": "reconcile.ok", "data-value": String(!!r.ok) }, verdict)),
        close),
      dl);
  }

  // ---- start -----------------------------------------------------------

  let resizeFrame = 0;
  window.addEventListener("resize", () => {
    cancelAnimationFrame(resizeFrame);
    resizeFrame = requestAnimationFrame(() => lastStats && renderChart());
  });
  document.addEventListener("DOMContentLoaded", () => {
    $("#sign-in").addEventListener("submit", signIn);
    $("#create-voucher").addEventListener("submit", createVoucher);
    $("#sign-out").addEventListener("click", () => signOut(""));
    for (const b of document.querySelectorAll("[data-span]")) b.addEventListener("click", () => setSpan(Number(b.dataset.span)));
    if (token) start();
    else showSignIn("");
  });
})();
