// The seckill sale page: lists the vouchers on sale and coming up, counts
// down to their start on the server's clock, logs a buyer in with a phone
// code, solves a voucher's challenge in a Web Worker when it has one, buys,
// and follows the order. Plain browser JavaScript, no build step and no
// library: the page is the same static files for every buyer.
//
// Each voucher is a card, an <li data-voucher=ID data-state=…>: its
// picture, price, terms, countdown and buy button. The fields the browser
// test (http/salepage_test.go) reads carry data-field, and the order its
// data-order and data-status.
"use strict";

(() => {
  // The vouchers' stock is read every REFRESH_MS or so while the page is
  // visible, each page at its own phase (a random part of it), and less
  // often, up to REFRESH_MAX_MS, while the server fails to answer: every
  // read costs the database a query.
  const REFRESH_MS = 3000;
  const REFRESH_MAX_MS = 30000;
  const CLOCK_SAMPLES = 5; // GET /api/time round trips per measurement
  const CLOCK_EVERY_MS = 5 * 60 * 1000;
  const AUTO_RETRIES = 3; // 429 and 503 answers retried by themselves
  const TOKEN_KEY = "seckill.buyerToken";
  // The phone signed in with, masked (only its last digits are kept): the
  // account shows it, the token holds no phone.
  const PHONE_KEY = "seckill.buyerPhone";

  const $ = (sel, root = document) => root.querySelector(sel);
  const solverURL = document.currentScript.dataset.solver;

  // ---- the server's clock -----------------------------------------------

  // offset is server time − this browser's time, in ms: the countdowns and
  // the buy button follow the server, which is what decides not_started.
  let offset = 0;
  let clockKnown = false;
  const localNow = () => performance.timeOrigin + performance.now();
  const serverNow = () => localNow() + offset;

  // syncClock measures the offset NTP's way: of a few round trips to GET
  // /api/time, the one that took least is the one whose answer is least
  // uncertain; the server read its clock about halfway through it.
  async function syncClock() {
    let best = null;
    for (let i = 0; i < CLOCK_SAMPLES; i++) {
      try {
        const t0 = localNow();
        const res = await fetch("/api/time", { cache: "no-store" });
        const t1 = localNow();
        if (!res.ok) continue;
        const body = await res.json();
        const rtt = t1 - t0;
        if (best === null || rtt < best.rtt) best = { rtt, offset: body.unixMs - (t0 + t1) / 2 };
      } catch (e) {
        // a lost sample: the others serve
      }
    }
    if (best === null) return;
    offset = best.offset;
    clockKnown = true;
    const clock = $("#clock");
    clock.dataset.offset = String(Math.round(offset));
    clock.dataset.rtt = String(Math.round(best.rtt));
    const s = Math.abs(offset) / 1000;
    $("#clock-note").textContent = s < 0.5 ? "(your clock agrees)" :
      "(your clock is " + s.toFixed(1) + " s " + (offset > 0 ? "behind" : "ahead") + "; the page follows the server)";
    schedule();
  }

  // ---- the API ----------------------------------------------------------

  class APIError extends Error {
    constructor(status, code, message, body, retryAfter) {
      super(message);
      this.status = status;
      this.code = code;
      this.body = body;
      this.retryAfter = retryAfter; // seconds, or 0
    }
  }

  let token = "";

  async function api(method, path, { body, auth, headers } = {}) {
    const h = { Accept: "application/json" };
    if (auth) h.Authorization = "Bearer " + token;
    if (body !== undefined) h["Content-Type"] = "application/json";
    Object.assign(h, headers || {});
    let res;
    try {
      res = await fetch(path, { method, headers: h, cache: "no-store", body: body === undefined ? undefined : JSON.stringify(body) });
    } catch (e) {
      throw new APIError(0, "network", "the server cannot be reached", null, 0);
    }
    let data = null;
    try {
      data = await res.json();
    } catch (e) {
      // not JSON: the status says enough
    }
    if (res.ok) return { status: res.status, data };
    const retryAfter = parseInt(res.headers.get("Retry-After") || "0", 10) || 0;
    const code = data && data.code ? data.code : "http_" + res.status;
    const err = new APIError(res.status, code, data && data.message ? data.message : res.statusText, data, retryAfter);
    if (err.status === 401 && auth) logOut("Your session has ended: sign in again.");
    throw err;
  }

  // ---- announcements ----------------------------------------------------

  // announce says something to screen readers once (the visible text is
  // elsewhere); banner shows a problem of the whole page.
  function announce(text) {
    const s = $("#status");
    s.textContent = "";
    setTimeout(() => { s.textContent = text; }, 50);
  }

  function banner(text) {
    const b = $("#banner");
    b.textContent = text || "";
    b.hidden = !text;
  }

  // ---- login ------------------------------------------------------------

  // claims reads a JWT's payload, without checking it: the server does.
  function claims(jwt) {
    try {
      const part = jwt.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
      return JSON.parse(atob(part + "=".repeat((4 - (part.length % 4)) % 4)));
    } catch (e) {
      return null;
    }
  }

  function logIn(jwt, phone) {
    const c = claims(jwt);
    if (!c || (c.exp && c.exp * 1000 <= Date.now())) return false;
    token = jwt;
    localStorage.setItem(TOKEN_KEY, jwt);
    if (phone) localStorage.setItem(PHONE_KEY, maskPhone(phone));
    const masked = localStorage.getItem(PHONE_KEY);
    $("#account-name").textContent = "Signed in" + (masked ? " · " + masked : "");
    $("#account").hidden = false;
    $("#login").hidden = true;
    loadOrders();
    return true;
  }

  function logOut(why) {
    token = "";
    localStorage.removeItem(TOKEN_KEY);
    localStorage.removeItem(PHONE_KEY);
    pendingOrders.clear();
    $("#account").hidden = true;
    $("#login").hidden = false;
    $("#login-form").hidden = true;
    $("#code-form").hidden = false;
    $("#login-status").textContent = "";
    $("#login-error").textContent = why || "";
    for (const v of vouchers.values()) {
      v.solution = null;
      v.preparing = null;
      v.order = null;
      stopOrderPoll(v);
      draw(v);
    }
  }

  // maskPhone keeps a phone number's last 4 digits: enough for its owner to
  // know it, little for someone looking over their shoulder.
  function maskPhone(phone) {
    const digits = phone.replace(/\D/g, "");
    return digits.length < 4 ? "" : "•••• " + digits.slice(-4);
  }

  // loginError says what a login route's refusal means to the buyer.
  function loginError(err) {
    switch (err.code) {
      case "invalid_argument":
        return "That is not a phone number we can send to: give it with its country code, such as +86 138 0013 8000.";
      case "unauthorized":
        return "That code is wrong, used or expired. Check it, or ask for a new one.";
      case "rate_limited":
        return "Too many tries: wait " + (err.retryAfter || 60) + " s and try again.";
      case "unavailable":
        return "Signing in is not possible right now" + (err.retryAfter ? ": try again in " + err.retryAfter + " s." : ".");
      case "network":
        return "The shop cannot be reached: check your connection and try again.";
      default:
        return err.message;
    }
  }

  $("#code-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const phone = $("#phone").value.replace(/[\s()-]/g, "");
    $("#login-error").textContent = "";
    if (!phone) {
      $("#login-error").textContent = "Enter your phone number.";
      $("#phone").focus();
      return;
    }
    $("#send-code").disabled = true;
    try {
      const { data } = await api("POST", "/api/auth/code", { body: { phone } });
      $("#code-form").hidden = true;
      $("#login-form").hidden = false;
      // A server that writes codes to its log (its trial setup) says so;
      // only then is the log worth a word.
      const status = $("#login-status");
      status.textContent = "";
      if (data && data.delivery === "log") {
        status.append("This shop is set up for trying out: it writes the code to its server's log instead of texting it. Look for the line ");
        const line = document.createElement("code");
        line.textContent = "login code phone=" + phone + " code=…";
        status.append(line, ".");
        status.dataset.delivery = "log";
      } else {
        status.textContent = "We sent a code to " + phone + ".";
        status.dataset.delivery = "phone";
      }
      $("#code").focus();
    } catch (err) {
      $("#login-error").textContent = loginError(err);
    } finally {
      $("#send-code").disabled = false;
    }
  });

  $("#login-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const phone = $("#phone").value.replace(/[\s()-]/g, "");
    const code = $("#code").value.trim();
    $("#login-error").textContent = "";
    $("#log-in").disabled = true;
    try {
      const { data } = await api("POST", "/api/auth/login", { body: { phone, code } });
      $("#code").value = "";
      logIn(data.token, phone);
      announce("Signed in.");
      $("#sale").focus();
    } catch (err) {
      $("#login-error").textContent = loginError(err);
      $("#code").focus();
    } finally {
      $("#log-in").disabled = false;
    }
  });

  $("#change-phone").addEventListener("click", () => {
    $("#login-form").hidden = true;
    $("#code-form").hidden = false;
    $("#login-status").textContent = "";
    $("#phone").focus();
  });

  $("#log-out").addEventListener("click", () => {
    logOut("");
    announce("Signed out.");
    $("#phone").focus();
  });

  // ---- vouchers ---------------------------------------------------------

  // vouchers holds each voucher shown: the API's JSON (data), its element,
  // and the page's own state: the buyer's order, a challenge being solved
  // or solved, a buy in flight.
  const vouchers = new Map();
  let refreshing = false;

  // refresh reads the vouchers and redraws them; it reports whether the
  // server answered.
  async function refresh() {
    if (refreshing) return true;
    refreshing = true;
    try {
      const { data } = await api("GET", "/api/vouchers");
      const seen = new Set();
      // An ended sale is gone, unless the buyer has an order on it shown
      // already (it stays while the page is open, not to vanish as they
      // pay), or one that still asks something of them: to pay, or being
      // confirmed.
      const list = data.vouchers.filter((d) => {
        const v = vouchers.get(d.id);
        return stateOf(d) !== "ended" || (v !== undefined && v.order !== null) || waitingOrder(pendingOrders.get(d.id));
      });
      // On sale first, ending soonest first; then coming up, starting
      // soonest first; then sold out; an ended sale kept for its order last.
      list.sort((a, b) => rank(a) - rank(b) ||
        (rank(a) === 0 ? Date.parse(a.endTime) - Date.parse(b.endTime) : Date.parse(a.beginTime) - Date.parse(b.beginTime)) ||
        (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
      const ul = $("#vouchers");
      const focused = document.activeElement;
      list.forEach((d, i) => {
        seen.add(d.id);
        let v = vouchers.get(d.id);
        if (!v) {
          v = newVoucher(d);
          vouchers.set(d.id, v);
        }
        v.data = d;
        // An order read before its voucher was listed.
        const o = pendingOrders.get(d.id);
        if (o) {
          pendingOrders.delete(d.id);
          if (!v.order) track(v, o);
        }
        draw(v);
        // Moved only when the order changes: a moved node loses the focus,
        // which is given back.
        if (ul.children[i] !== v.el) {
          ul.insertBefore(v.el, ul.children[i] || null);
          if (focused && v.el.contains(focused)) focused.focus();
        }
      });
      for (const [id, v] of vouchers) {
        if (!seen.has(id)) {
          v.el.remove();
          stopOrderPoll(v);
          vouchers.delete(id);
        }
      }
      $("#vouchers-empty").hidden = vouchers.size > 0;
      $("#refreshed").textContent = "Updated " + new Date(serverNow()).toLocaleTimeString();
      banner("");
      schedule();
      return true;
    } catch (err) {
      banner(err.code === "network" ? "The server cannot be reached: the stock shown may be out of date." : "The sales could not be loaded: " + err.message);
      return false;
    } finally {
      refreshing = false;
    }
  }

  const RANK = { "on-sale": 0, "paused": 0, "upcoming": 1, "sold-out": 2, "ended": 3 };
  function rank(d) {
    return RANK[stateOf(d)];
  }

  // waitingOrder reports whether an order still asks something of its
  // buyer: it is being confirmed, or to pay.
  function waitingOrder(o) {
    return !!o && (o.status === "pending" || o.status === "" || (o.status === "created" && !!o.payBy && Date.parse(o.payBy) > serverNow()));
  }

  function newVoucher(d) {
    const el = $("#voucher-template").content.firstElementChild.cloneNode(true);
    el.dataset.voucher = d.id;
    drawPicture(el, d);
    // peak is the most stock seen: the voucher JSON's stock is what the
    // database holds now, not what the sale began with.
    const v = { id: d.id, data: d, el, peak: 0, order: null, orderTimer: null, solution: null, preparing: null, busy: false };
    const buy = $('[data-action="buy"]', el);
    buy.dataset.voucher = d.id;
    buy.addEventListener("click", () => buyVoucher(v));
    $('[data-action="pay"]', el).addEventListener("click", () => orderAction(v, "pay"));
    $('[data-action="cancel"]', el).addEventListener("click", () => orderAction(v, "cancel"));
    return v;
  }

  // state is what a voucher is now, on the server's clock.
  function state(v) {
    return stateOf(v.data);
  }

  function stateOf(d) {
    const now = serverNow();
    if (Date.parse(d.endTime) <= now) return "ended";
    if (d.remaining === 0) return "sold-out";
    if (Date.parse(d.beginTime) > now) return "upcoming";
    if (d.paused) return "paused";
    return "on-sale";
  }

  const STATE_TEXT = { "upcoming": "Coming up", "on-sale": "On sale", "sold-out": "Sold out", "ended": "Ended", "paused": "Paused" };

  // draw brings a voucher's element up to date: called every second and
  // on every change, it writes only what differs.
  function draw(v) {
    const d = v.data;
    const el = v.el;
    const st = state(v);
    const was = el.dataset.state;
    el.dataset.state = st;
    set($('[data-field="title"]', el), d.title);
    set($('[data-field="state"]', el), STATE_TEXT[st]);
    drawPrice(v);
    if (el.dataset.imageUrl !== (d.imageUrl || "")) drawPicture(el, d);
    const sub = $('[data-field="subtitle"]', el);
    set(sub, d.subtitle || "");
    sub.hidden = !d.subtitle;
    set($('[data-field="rules"]', el), d.rules || "");
    $('[data-field="rules-box"]', el).hidden = !d.rules;
    const now = serverNow();
    let label = "";
    let count = "";
    if (st === "upcoming") {
      label = "Starts in";
      count = duration(Date.parse(d.beginTime) - now);
    } else if (st === "on-sale" || st === "paused") {
      label = "Ends in";
      count = duration(Date.parse(d.endTime) - now);
    } else if (st === "sold-out") {
      label = "All sold";
    } else {
      label = "Ended " + new Date(Date.parse(d.endTime)).toLocaleString();
    }
    set($('[data-field="countdown-label"]', el), label);
    const cd = $('[data-field="countdown"]', el);
    set(cd, count);
    cd.dataset.value = st === "upcoming" ? String(Math.max(0, Math.ceil((Date.parse(d.beginTime) - now) / 1000))) : "";
    const rem = $('[data-field="remaining"]', el);
    rem.dataset.value = d.remaining === null ? "" : String(d.remaining);
    set(rem, d.remaining === null ? "Stock not counted yet" : d.remaining === 0 ? "None left" : d.remaining + " left");
    v.peak = Math.max(v.peak, d.stock, d.remaining || 0);
    const frac = d.remaining === null ? 1 : Math.max(0, Math.min(1, d.remaining / Math.max(v.peak, 1)));
    $(".meter-fill", el).style.width = (frac * 100).toFixed(1) + "%";
    $(".stock", el).hidden = st === "ended";
    $('[data-field="challenge-note"]', el).hidden = !d.challenge || st === "ended" || st === "sold-out";

    const buy = $('[data-action="buy"]', el);
    // One order per buyer: a cancelled one still counts, unless the
    // voucher lets its buyers buy again; a failed one does not.
    const o = v.order;
    const owned = o && o.status !== "failed" && !(d.rebuyAfterCancel && o.status === "cancelled");
    // While a buy is in flight the button keeps the focus (a disabled one
    // would drop it) and says so; clicks are ignored.
    buy.disabled = st !== "on-sale" || owned;
    buy.setAttribute("aria-disabled", String(v.busy));
    let text = "Buy";
    if (st === "upcoming") {
      const at = new Date(Date.parse(d.beginTime) - offset); // on this device's clock
      text = "Buy at " + (at - localNow() < 12 * 3600 * 1000 ? at.toLocaleTimeString() : at.toLocaleString());
    }
    else if (st === "sold-out") text = "Sold out";
    else if (st === "ended") text = "Ended";
    else if (st === "paused") text = "Paused";
    else if (owned) text = o.status === "cancelled" ? "One per buyer" : "Bought";
    else if (v.busy) text = "Buying…";
    set(buy, text);
    if (was && was !== st) {
      if (st === "on-sale") announce(d.title + ": on sale now.");
      else if (st === "sold-out") announce(d.title + ": sold out.");
      else if (st === "ended") announce(d.title + ": the sale has ended.");
    }
    drawOrder(v);
  }

  function set(el, text) {
    if (el.textContent !== text) el.textContent = text;
  }

  // ---- money and pictures -----------------------------------------------

  // money writes an amount in minor units (fen, cents; yen are their own
  // minor unit) in its currency, in the buyer's language: 990 CNY is
  // "CN¥9.90" in English, "¥9.90" in Chinese. Intl knows each currency's
  // decimals. A currency it does not know is written as its code.
  const formats = new Map();
  function money(amount, currency) {
    if (amount === 0) return "Free";
    let f = formats.get(currency);
    if (f === undefined) {
      try {
        f = new Intl.NumberFormat(undefined, { style: "currency", currency });
      } catch (e) {
        f = null; // no currency, or not one Intl knows
      }
      formats.set(currency, f);
    }
    if (f === null) return (amount / 100).toFixed(2) + (currency ? " " + currency : "");
    return f.format(amount / 10 ** f.resolvedOptions().maximumFractionDigits);
  }

  // drawPrice shows the voucher's price, and its value struck through when
  // it is above the price, with the saving.
  function drawPrice(v) {
    const d = v.data;
    const el = v.el;
    const price = typeof d.price === "number" ? d.price : null;
    const row = $(".price-row", el);
    row.hidden = price === null;
    if (price === null) return;
    const p = $('[data-field="price"]', el);
    set(p, money(price, d.currency));
    p.dataset.value = String(price);
    const value = typeof d.value === "number" ? d.value : 0;
    const above = value > price;
    $('[data-field="value-box"]', el).hidden = !above;
    set($('[data-field="value"]', el), above ? money(value, d.currency) : "");
    const off = above && price > 0 ? Math.floor((1 - price / value) * 100) : 0;
    $('[data-field="saving"]', el).hidden = off < 1;
    set($('[data-field="saving"]', el), off >= 1 ? "−" + off + "%" : "");
  }

  const HUES = [4, 24, 152, 172, 196, 218, 258, 290, 330];

  // drawPicture shows the voucher's picture: its imageUrl when it is https
  // (the page's policy, saleCSP in http/salepage.go, loads no other),
  // otherwise, or while or when it fails to load, a gradient of a colour
  // of the title's with its first letter.
  function drawPicture(el, d) {
    const box = $('[data-field="picture"]', el);
    const url = d.imageUrl || "";
    el.dataset.imageUrl = url;
    const old = $("img", box);
    if (old) old.remove();
    // FNV-1a of the title picks one of a few hues: the same title, the
    // same colour, on every visit.
    let h = 2166136261;
    for (const ch of d.title || "") h = Math.imul(h ^ ch.codePointAt(0), 16777619) >>> 0;
    box.style.setProperty("--hue", String(HUES[h % HUES.length]));
    $('[data-field="initial"]', box).textContent = Array.from((d.title || "?").trim())[0] || "?";
    box.dataset.picture = "placeholder";
    let https = false;
    try {
      https = new URL(url).protocol === "https:";
    } catch (e) {
      // none, or not a URL: the placeholder stays
    }
    if (!https) return;
    const img = document.createElement("img");
    img.alt = "";
    img.decoding = "async";
    img.loading = "lazy";
    img.referrerPolicy = "no-referrer";
    img.addEventListener("load", () => { box.dataset.picture = "image"; });
    img.addEventListener("error", () => {
      img.remove();
      box.dataset.picture = "placeholder";
    });
    img.src = url;
    box.prepend(img);
  }

  // duration writes ms as "2 d 03:04:05", "03:04:05" or "04:05", rounded
  // up: it reads 00:01 until the very start.
  function duration(ms) {
    let s = Math.max(0, Math.ceil(ms / 1000));
    const days = Math.floor(s / 86400);
    s -= days * 86400;
    const h = Math.floor(s / 3600);
    const m = Math.floor((s % 3600) / 60);
    const sec = s % 60;
    const p = (n) => String(n).padStart(2, "0");
    const hms = (h > 0 || days > 0 ? p(h) + ":" : "") + p(m) + ":" + p(sec);
    return days > 0 ? days + " d " + hms : hms;
  }

  // ---- the clock's tick -------------------------------------------------

  // schedule redraws every voucher on the next second of the server's
  // clock, or sooner at a sale's exact start or end, so that a buy
  // button enables at the start and not up to a second late.
  let tickTimer = null;
  function schedule() {
    clearTimeout(tickTimer);
    const now = serverNow();
    let wait = 1000 - (now % 1000) + 1; // just past the second: it shows
    for (const v of vouchers.values()) {
      for (const at of [Date.parse(v.data.beginTime), Date.parse(v.data.endTime)]) {
        if (at > now && at - now < wait) wait = at - now;
      }
    }
    tickTimer = setTimeout(tick, Math.max(wait, 5));
  }

  function tick() {
    set($("#clock-time"), "Server time " + new Date(serverNow()).toLocaleTimeString());
    for (const v of vouchers.values()) {
      draw(v);
      maybePrepare(v);
    }
    schedule();
  }

  // ---- the challenge ----------------------------------------------------

  // maybePrepare fetches and solves a challenge voucher's challenge as soon
  // as the server issues it (its lead time before the start), so that the
  // buy at the start carries a solution at once.
  function maybePrepare(v) {
    const d = v.data;
    // A prepared solution left unused until its challenge expires is
    // replaced, so that the buy still carries a good one.
    if (v.solution && v.solution.expires <= serverNow() + 5000) v.solution = null;
    if (!d.challenge || !token || v.solution || v.preparing || v.busy || v.order || v.prepareAfter > serverNow()) return;
    const st = state(v);
    if (st === "ended" || st === "sold-out") return;
    const lead = (d.challengeLeadSeconds === undefined ? 60 : d.challengeLeadSeconds) * 1000;
    if (serverNow() < Date.parse(d.beginTime) - lead) return;
    v.preparing = solveChallenge(v).then((sol) => {
      v.solution = sol;
    }, (err) => {
      // Not issued yet (not_started), or a passing failure: try again
      // later; buying fetches one itself anyway.
      v.prepareAfter = serverNow() + Math.max(err.retryAfter || 0, 2) * 1000;
      if (err.code === "challenge_not_needed") d.challenge = false;
      else if (err.code === "sold_out") d.remaining = 0; // shown as sold out at the next draw
      else if (err.code !== "not_started" && err.code !== "rate_limited" && err.code !== "unavailable") {
        outcome(v, "wait", "The check could not be prepared: " + err.message + ". Buying will try again.");
      }
    }).finally(() => {
      v.preparing = null;
    });
  }

  // takeSolution returns a solution for the voucher, single use: the
  // prepared one, or one fetched and solved now.
  async function takeSolution(v) {
    if (v.preparing) await v.preparing;
    let sol = v.solution;
    v.solution = null;
    // A solution whose challenge has expired would be refused: solve anew.
    if (!sol || sol.expires <= serverNow() + 1000) sol = await solveChallenge(v);
    return sol.header;
  }

  // solveChallenge gets the buyer's challenge for the voucher and solves
  // it in the worker, showing progress; it resolves to the X-Altcha value
  // (header) and when the challenge expires (expires, server ms).
  async function solveChallenge(v) {
    const { data: ch } = await api("GET", "/api/vouchers/" + v.id + "/challenge", { auth: true });
    const box = $('[data-field="solving"]', v.el);
    const bar = $("progress", box);
    bar.value = 0;
    box.hidden = false;
    try {
      const number = await new Promise((resolve, reject) => {
        const w = new Worker(solverURL);
        w.onmessage = (e) => {
          const m = e.data;
          if (m.progress !== undefined) {
            bar.value = Math.round(m.progress * 100);
            return;
          }
          w.terminate();
          if (m.error) reject(new APIError(0, "solver", m.error, null, 0));
          else {
            v.el.dataset.solvedMs = String(m.tookMs);
            resolve(m.number);
          }
        };
        w.onerror = (e) => {
          w.terminate();
          reject(new APIError(0, "solver", "the check could not run: " + (e.message || "worker error"), null, 0));
        };
        w.postMessage({ algorithm: ch.algorithm, challenge: ch.challenge, maxnumber: ch.maxnumber, salt: ch.salt });
      });
      bar.value = 100;
      // The salt says when the challenge expires (ALTCHA's ?expires=, in
      // seconds); without it, assume a minute.
      const exp = /[?&]expires=(\d+)/.exec(ch.salt);
      return {
        header: btoa(JSON.stringify({ algorithm: ch.algorithm, challenge: ch.challenge, number, salt: ch.salt, signature: ch.signature })),
        expires: exp ? parseInt(exp[1], 10) * 1000 : serverNow() + 60000,
      };
    } finally {
      box.hidden = true;
    }
  }

  // ---- buying -----------------------------------------------------------

  function outcome(v, kind, text) {
    const p = $('[data-field="outcome"]', v.el);
    p.dataset.kind = kind;
    p.dataset.code = "";
    set(p, text);
  }

  async function buyVoucher(v) {
    if (!token) {
      outcome(v, "bad", "Sign in first: your phone number, then the code we send.");
      $("#login").hidden = false;
      $("#phone").focus();
      return;
    }
    if (v.busy) return;
    v.busy = true;
    draw(v);
    try {
      await buyOnce(v, { fresh: false, retries: 0 });
    } finally {
      v.busy = false;
      draw(v);
    }
  }

  // buyOnce asks for the voucher: with a solution when it has a challenge.
  // A refused solution (challenge_required, challenge_invalid) is replaced
  // by a new one once; 429 and 503 are asked again after Retry-After, a
  // few times: asking again never buys twice.
  async function buyOnce(v, { fresh, retries }) {
    const headers = {};
    if (v.data.challenge) {
      outcome(v, "wait", "Checking your browser…");
      try {
        headers["X-Altcha"] = await takeSolution(v);
      } catch (err) {
        return bought(v, err, fresh, retries);
      }
    }
    outcome(v, "wait", "Buying…");
    try {
      const { data } = await api("POST", "/api/vouchers/" + v.id + "/seckill", { auth: true, headers });
      track(v, { orderId: data.orderId, voucherId: v.id, status: data.status });
      outcome(v, "ok", "You got it!");
      focusOrder(v);
    } catch (err) {
      return bought(v, err, fresh, retries);
    }
  }

  // bought acts on a refused buy (or a challenge that could not be had).
  async function bought(v, err, fresh, retries) {
    const p = $('[data-field="outcome"]', v.el);
    // The outcome is a live region of its own: said once, where the
    // buyer pressed.
    const say = (kind, text) => {
      outcome(v, kind, text);
      p.dataset.code = err.code;
    };
    switch (err.code) {
      case "challenge_required":
      case "challenge_invalid":
        if (!fresh) {
          v.solution = null;
          return buyOnce(v, { fresh: true, retries });
        }
        return say("bad", "The browser check was not accepted. Try again.");
      case "challenge_not_needed":
        // The voucher asks for no check after all: buy without one.
        v.data.challenge = false;
        return buyOnce(v, { fresh, retries });
      case "sold_out":
        v.data.remaining = 0;
        draw(v);
        return say("bad", "Sold out: every unit is taken.");
      case "duplicate_order":
        if (err.body && err.body.orderId) track(v, { orderId: err.body.orderId, voucherId: v.id, status: "" });
        say("ok", "You already have an order for this sale: one per buyer.");
        return focusOrder(v);
      case "not_started":
        // Our clock said it had: measure it again.
        syncClock();
        return say("wait", "Not started yet on the server's clock. The button enables at the start.");
      case "ended":
        v.data.endTime = new Date(Math.min(Date.parse(v.data.endTime), serverNow())).toISOString();
        draw(v);
        return say("bad", "This sale has ended.");
      case "paused":
        v.data.paused = true;
        draw(v);
        return say("wait", "Sales are paused for a moment by the shop. Try again when it resumes.");
      case "voucher_not_found":
        return say("bad", "This sale no longer exists.");
      case "unauthorized":
        return say("bad", "Sign in again to buy.");
      case "rate_limited":
      case "unavailable": {
        const wait = Math.max(err.retryAfter || 1, 1);
        if (retries < AUTO_RETRIES) {
          say("wait", (err.code === "rate_limited" ? "Too many tries" : "The shop is busy") + ": trying again in " + wait + " s…");
          await new Promise((r) => setTimeout(r, wait * 1000));
          if (!token) return;
          return buyOnce(v, { fresh, retries: retries + 1 });
        }
        return say("bad", (err.code === "rate_limited" ? "Too many tries" : "The shop is busy") + ". Try again in " + wait + " s.");
      }
      case "network":
        return say("bad", "The server cannot be reached. Trying again is safe: you never buy twice.");
      default:
        return say("bad", "Not bought: " + err.message);
    }
  }

  // ---- orders -----------------------------------------------------------

  // The reasons the server gives a cancelled order (seckill.Reason*), in
  // the buyer's words.
  const CANCEL_REASON = {
    "cancelled by the buyer": "you cancelled it",
    "not paid by the deadline": "not paid in time",
  };
  const FINAL = ["paid", "cancelled", "refunded", "failed"];

  // loadOrders puts the buyer's recent orders on their vouchers: after a
  // reload, the page shows what was bought.
  async function loadOrders() {
    try {
      const { data } = await api("GET", "/api/orders?limit=50", { auth: true });
      for (const o of data.orders.slice().reverse()) {
        const v = vouchers.get(o.voucherId);
        if (v) track(v, o);
        else pendingOrders.set(o.voucherId, o);
      }
    } catch (err) {
      // the orders show when bought again; nothing to say
    }
  }
  // pendingOrders are orders of vouchers not listed yet (the list loads at
  // the same time).
  const pendingOrders = new Map();

  // track shows the order on its voucher and polls it until it settles.
  function track(v, o) {
    stopOrderPoll(v);
    v.order = Object.assign({}, v.order && v.order.orderId === o.orderId ? v.order : {}, o);
    draw(v);
    pollOrder(v);
  }

  function stopOrderPoll(v) {
    clearTimeout(v.orderTimer);
    v.orderTimer = null;
  }

  async function pollOrder(v) {
    const o = v.order;
    if (!o || !token) return;
    if (o.status !== "" && FINAL.includes(o.status)) return;
    if (o.status === "created" && !o.payBy) return; // no deadline: settled
    if (document.visibilityState !== "visible" && o.status !== "pending" && o.status !== "") {
      // Nobody looks: ask again later, not now.
      v.orderTimer = setTimeout(() => pollOrder(v), 5000);
      return;
    }
    try {
      const { data } = await api("GET", "/api/orders/" + o.orderId, { auth: true });
      if (v.order !== o) return;
      v.order = data;
      draw(v);
    } catch (err) {
      if (err.status === 401) return;
    }
    if (v.order !== null && v.order.orderId === o.orderId) {
      // Pending turns created within a moment; a created order with a
      // deadline is watched (less often) for the sweeper's cancel.
      const every = v.order.status === "pending" || v.order.status === "" ? 700 : 5000;
      if (!FINAL.includes(v.order.status) && !(v.order.status === "created" && !v.order.payBy)) {
        v.orderTimer = setTimeout(() => pollOrder(v), every);
      }
    }
  }

  // focusOrder moves the focus to the voucher's order, where the buyer's
  // next step is, when the button they pressed is disabled or gone.
  function focusOrder(v) {
    draw(v);
    $('[data-field="order"]', v.el).focus();
  }

  function drawOrder(v) {
    const box = $('[data-field="order"]', v.el);
    const o = v.order;
    box.hidden = !o;
    if (!o) return;
    box.dataset.order = o.orderId;
    box.dataset.status = o.status;
    set($('[data-field="order-id"]', box), o.orderId);
    const left = o.payBy ? Date.parse(o.payBy) - serverNow() : 0;
    // Past payBy the order is cancelled (the sweeper says so within
    // moments): paying would be refused.
    const payable = o.status === "created" && o.payBy && left > 0;
    const why = CANCEL_REASON[o.reason] ? " (" + CANCEL_REASON[o.reason] + ")" : "";
    let text = "";
    let note = "";
    switch (o.status) {
      case "pending":
        text = "Confirming your order…";
        break;
      case "": // not known yet: being asked
        text = "Checking your order…";
        break;
      case "created":
        if (o.payBy) {
          const at = new Date(Date.parse(o.payBy) - offset).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
          text = "Ordered — pay by " + at;
          note = left > 0 ? "Pay within " + duration(left) + " or it is cancelled." : "The time to pay is up.";
        } else {
          text = "Ordered";
        }
        break;
      case "paid":
        text = "Paid";
        note = "It is yours. Enjoy!";
        break;
      case "cancelled":
        text = "Cancelled" + why;
        break;
      case "refunding":
        text = "Cancelled" + why;
        note = "Your payment came after the order was cancelled: it is being refunded.";
        break;
      case "refunded":
        text = "Cancelled" + why;
        note = "Your payment has been refunded.";
        break;
      case "failed":
        text = "Not completed";
        note = "The shop could not confirm this order, and nothing was charged. You may try again.";
        break;
      default:
        text = o.status;
    }
    set($('[data-field="order-status"]', box), text);
    const amount = typeof o.amount === "number" ? money(o.amount, o.currency) : "";
    set($('[data-field="order-amount"]', box), amount);
    set($('[data-field="order-note"]', box), note);
    $(".order-actions", box).hidden = !payable;
  }

  async function orderAction(v, what) {
    const o = v.order;
    if (!o) return;
    const buttons = v.el.querySelectorAll(".order-actions button");
    buttons.forEach((b) => { b.disabled = true; });
    try {
      const { status, data } = await api("POST", "/api/orders/" + o.orderId + "/" + what, { auth: true });
      v.order = data;
      if (status === 202 && data.payUrl) {
        outcome(v, "wait", "Finish paying with the payment provider; this page shows it once they confirm.");
        const a = document.createElement("a");
        a.href = data.payUrl;
        a.textContent = " Continue to payment";
        a.rel = "noopener noreferrer";
        $('[data-field="outcome"]', v.el).appendChild(a);
      } else {
        outcome(v, "ok", what === "pay" ? "Paid." : "Cancelled: the unit is back on sale.");
      }
      draw(v);
      focusOrder(v); // the button pressed is gone
      stopOrderPoll(v);
      pollOrder(v);
    } catch (err) {
      if (err.code === "order_pending") outcome(v, "wait", "Your order is still being confirmed: try again in a moment.");
      else if (err.code === "order_cancelled") outcome(v, "bad", "This order is cancelled (the time to pay is up).");
      else if (err.code === "order_paid") outcome(v, "ok", "This order is paid already.");
      else outcome(v, "bad", "Could not " + what + ": " + err.message);
      stopOrderPoll(v);
      v.order = Object.assign({}, o, { status: o.status === "created" ? "" : o.status });
      pollOrder(v); // learn the order's real state
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
      draw(v);
    }
  }

  // ---- start ------------------------------------------------------------

  let refreshTimer = null;
  let refreshEvery = REFRESH_MS;
  function startRefresh() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(async () => {
      if (document.visibilityState === "visible") {
        const ok = await refresh();
        refreshEvery = ok ? REFRESH_MS : Math.min(refreshEvery * 2, REFRESH_MAX_MS);
      }
      startRefresh();
    }, refreshEvery * (0.8 + 0.4 * Math.random()));
  }

  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") {
      syncClock();
      refresh();
    }
  });

  async function start() {
    const saved = localStorage.getItem(TOKEN_KEY);
    if (!saved || !logIn(saved, "")) logOut("");
    await syncClock();
    if (!clockKnown) banner("The server's clock could not be read: countdowns follow this device's clock.");
    await refresh();
    tick();
    startRefresh();
    setInterval(syncClock, CLOCK_EVERY_MS);
    document.body.dataset.ready = "true";
  }

  start();
})();
