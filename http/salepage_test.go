package http_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/seckill/seckill/auth"
)

// saleScreenshotEnv names a file the sale page's browser test writes its
// screenshot to, as well as to its temporary directory:
// `SECKILL_SALE_SCREENSHOT=docs/salepage.png` (relative to the module's
// root) makes the picture in the README.
const saleScreenshotEnv = "SECKILL_SALE_SCREENSHOT"

// browserSkew is how far ahead of the real time the browser's clock runs
// in the test: the page must count down on the server's clock, not on it.
const browserSkew = 30 * time.Second

// TestSalePageInBrowser opens the sale page in headless Chromium whose
// clock runs 30 s fast, logs a buyer in with a phone code, waits for a
// sale to start, buys and sees the order created; pays one order and
// cancels another; and sees the sold-out and ended states. The service is
// newEnv's (this machine's Redis and MariaDB, or the embedded backend), in
// the stream mode with its workers.
func TestSalePageInBrowser(t *testing.T) {
	t.Parallel()
	needChromium(t)
	e := newEnv(t)

	// The page and its assets, as a CDN would see them.
	res := e.do("GET", "/", "", nil)
	if res.status != 200 || res.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET / = %d %q, want 200 text/html", res.status, res.header.Get("Content-Type"))
	}
	if cc := res.header.Get("Cache-Control"); cc != "no-cache" || res.header.Get("ETag") == "" {
		t.Errorf("GET /: Cache-Control %q, ETag %q; want no-cache and an ETag", cc, res.header.Get("ETag"))
	}
	app := regexp.MustCompile(`/sale/app\.js\?v=[0-9a-f]+`).Find(res.raw)
	if app == nil {
		t.Fatalf("the page names no versioned app.js:\n%s", res.raw)
	}
	if res := e.do("GET", string(app), "", nil); res.status != 200 || res.header.Get("Cache-Control") != "public, max-age=31536000, immutable" {
		t.Errorf("GET %s = %d, Cache-Control %q; want 200, immutable", app, res.status, res.header.Get("Cache-Control"))
	}

	onSale := func(title string, stock int, payWithin int) string {
		return e.createVoucher(map[string]any{
			"title":            title,
			"stock":            stock,
			"beginTime":        time.Now().Add(-time.Minute).Format(time.RFC3339),
			"endTime":          time.Now().Add(time.Hour).Format(time.RFC3339),
			"payWithinSeconds": payWithin,
		})["id"].(string)
	}
	// Sold out before the page opens: someone else took the one unit.
	gone := onSale("Sold out: one lucky buyer", 1, 0)
	if res := e.do("POST", "/api/vouchers/"+gone+"/seckill", e.buyer, nil); res.status != 200 {
		t.Fatalf("buy the last unit: %d %s", res.status, res.raw)
	}
	payable := onSale("Concert tickets, pay within 2 minutes", 5, 120)
	cancellable := onSale("Noodles, 2 for 1", 5, 120)
	later := e.createVoucher(map[string]any{
		"title":     "Tomorrow: 100 yuan off",
		"stock":     500,
		"beginTime": time.Now().Add(26 * time.Hour).Format(time.RFC3339),
		"endTime":   time.Now().Add(27 * time.Hour).Format(time.RFC3339),
	})["id"].(string)
	ending := e.createVoucher(map[string]any{
		"title":     "Last call",
		"stock":     5,
		"beginTime": time.Now().Add(-time.Minute).Format(time.RFC3339),
		"endTime":   time.Now().Add(4 * time.Second).Format(time.RFC3339Nano),
	})["id"].(string)

	ctx := newBrowser(t)
	step, eval := browserSteps(t, ctx)
	voucherSel := func(id, sel string) string { return fmt.Sprintf(`[data-voucher=%q] %s`, id, sel) }

	// The browser's clock runs fast: performance.now, which the page reads
	// its time from, is ahead by browserSkew.
	if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: fmt.Sprintf(`(() => { const now = performance.now.bind(performance); performance.now = () => now() + %d; })();`, browserSkew.Milliseconds()),
	}); err != nil {
		t.Fatal(err)
	}
	step("open the page",
		chromedp.Navigate(e.url+"/"),
		chromedp.Poll[chromedp.Void](`document.body.dataset.ready === "true"`),
		chromedp.WaitVisible(chromedp.ID("login")),
		present(voucherSel(payable, `[data-action="buy"]`)),
	)
	clock := eval(`({offset: document.querySelector("#clock").dataset.offset, text: document.querySelector("#clock-time").textContent})`)
	if !strings.HasPrefix(clock["text"], "Server time ") {
		t.Errorf("the page's clock reads %q", clock["text"])
	}
	if off, err := strconv.Atoi(clock["offset"]); err != nil || math.Abs(float64(off)+float64(browserSkew.Milliseconds())) > 1000 {
		t.Errorf("the page measured its clock's offset as %q ms, want about −%d", clock["offset"], browserSkew.Milliseconds())
	}
	// Sold out and coming up, before anyone logs in.
	step("sold out and coming up shown",
		present(voucherSel(gone, `[data-field="remaining"][data-value="0"]`)),
		present(fmt.Sprintf(`[data-voucher=%q][data-state="sold-out"]`, gone)),
		present(fmt.Sprintf(`[data-voucher=%q][data-state="upcoming"]`, later)),
	)
	got := eval(fmt.Sprintf(`(() => {
		const v = (id) => document.querySelector('[data-voucher="' + id + '"]');
		const b = (id) => v(id).querySelector('[data-action="buy"]');
		const f = (id, name) => v(id).querySelector('[data-field="' + name + '"]').textContent;
		return {goneButton: b(%[1]q).textContent, goneDisabled: String(b(%[1]q).disabled), goneBadge: v(%[1]q).querySelector('[data-field="state"]').textContent,
			laterDisabled: String(b(%[2]q).disabled), laterCountdown: v(%[2]q).querySelector('[data-field="countdown"]').dataset.value,
			laterRemaining: v(%[2]q).querySelector('[data-field="remaining"]').dataset.value};
	})()`, gone, later))
	if got["goneButton"] != "Sold out" || got["goneDisabled"] != "true" || got["goneBadge"] != "Sold out" {
		t.Errorf("the sold-out voucher shows button %q (disabled %s), badge %q", got["goneButton"], got["goneDisabled"], got["goneBadge"])
	}
	if s, _ := strconv.Atoi(got["laterCountdown"]); got["laterDisabled"] != "true" || s < 25*3600 || s > 26*3600 {
		t.Errorf("the voucher starting in 26 h: button disabled %s, countdown %q s; want disabled, about %d s", got["laterDisabled"], got["laterCountdown"], 26*3600)
	}
	if got["laterRemaining"] != "500" {
		t.Errorf("the voucher starting in 26 h shows %q remaining, want 500", got["laterRemaining"])
	}

	// Log in with the phone code the server sends (to the log, on the
	// embedded default; here, to the test).
	const phone = "+8613800138000"
	step("ask for a code",
		chromedp.SendKeys(chromedp.ID("phone"), phone),
		chromedp.Click(chromedp.ID("send-code")),
		chromedp.WaitVisible(chromedp.ID("code")),
	)
	code := e.codes.last(phone)
	if code == "" {
		t.Fatal("no code was sent")
	}
	step("log in",
		chromedp.SendKeys(chromedp.ID("code"), code),
		chromedp.Click(chromedp.ID("log-in")),
		chromedp.WaitVisible(chromedp.ID("account")),
		chromedp.WaitNotVisible(chromedp.ID("login")),
	)
	buyer := eval(`({token: localStorage.getItem("seckill.buyerToken")})`)["token"]
	if _, err := e.tokens.Verify(buyer); err != nil {
		t.Fatalf("the page keeps a token that does not verify: %v", err)
	}

	// The list's refresh (every 3 s) leaves the keyboard's focus where it
	// was.
	focusBuy := voucherSel(payable, `[data-action="buy"]`)
	step("the focus survives a refresh",
		run(fmt.Sprintf(`document.querySelector(%q).focus(); window.refreshedBefore = document.querySelector("#refreshed").textContent;`, focusBuy)),
		chromedp.Poll[chromedp.Void](`document.querySelector("#refreshed").textContent !== window.refreshedBefore`),
	)
	if focused := eval(fmt.Sprintf(`({same: String(document.activeElement === document.querySelector(%q))})`, focusBuy)); focused["same"] != "true" {
		t.Errorf("a refresh of the list moved the focus off the buy button")
	}

	// A sale that starts in 10 s: the button enables at the start on the
	// server's clock (the browser's would enable it 30 s early).
	begin := time.Now().Add(10 * time.Second).Truncate(time.Millisecond)
	soon := e.createVoucher(map[string]any{
		"title":     "Flash sale: 50 yuan voucher",
		"stock":     20,
		"beginTime": begin.Format(time.RFC3339Nano),
		"endTime":   begin.Add(time.Hour).Format(time.RFC3339Nano),
	})
	sid := soon["id"].(string)
	step("the sale listed", present(fmt.Sprintf(`[data-voucher=%q][data-state]`, sid)))
	// Record, in real time, when the button enables.
	seen := eval(fmt.Sprintf(`(() => {
		const b = document.querySelector('[data-voucher=%q] [data-action="buy"]');
		const v = b.closest("li");
		const out = {disabled: String(b.disabled), state: v.dataset.state, countdown: v.querySelector('[data-field="countdown"]').dataset.value, at: String(Date.now())};
		new MutationObserver(() => { if (!b.disabled && !b.dataset.enabledAt) b.dataset.enabledAt = String(Date.now()); })
			.observe(b, {attributes: true, attributeFilter: ["disabled"]});
		return out;
	})()`, sid))
	at, _ := strconv.ParseInt(seen["at"], 10, 64)
	if at >= begin.UnixMilli() {
		t.Fatalf("the page listed the sale only %d ms after its start: it refreshes every 3 s", at-begin.UnixMilli())
	}
	if cd, _ := strconv.Atoi(seen["countdown"]); seen["disabled"] != "true" || seen["state"] != "upcoming" || cd < 1 || cd > 11 {
		t.Errorf("before the start: button disabled %s, state %s, countdown %q s; want disabled, upcoming, 1–10", seen["disabled"], seen["state"], seen["countdown"])
	}
	step("the start",
		present(voucherSel(sid, `[data-action="buy"][data-enabled-at]`)),
	)
	enabled, _ := strconv.ParseInt(eval(fmt.Sprintf(`({at: document.querySelector('[data-voucher=%q] [data-action="buy"]').dataset.enabledAt})`, sid))["at"], 10, 64)
	// The offset is the fastest round trip's midpoint: off by at most half
	// of that trip, a few ms here.
	if early := begin.UnixMilli() - enabled; early > 50 || early < -1000 {
		t.Errorf("the buy button enabled %d ms before the start; want within 50 ms before and 1 s after", early)
	}
	step("buy",
		chromedp.Click(chromedp.CSS(voucherSel(sid, `[data-action="buy"]`))),
		present(voucherSel(sid, `[data-field="order"][data-status="created"]`)),
	)
	orderID := eval(fmt.Sprintf(`({id: document.querySelector('[data-voucher=%q] [data-field="order"]').dataset.order})`, sid))["id"]
	if res := e.do("GET", "/api/orders/"+orderID, buyer, nil); res.status != 200 || res.body["status"] != "created" || res.body["voucherId"] != sid {
		t.Errorf("the API says of the page's order %s: %d %s", orderID, res.status, res.raw)
	}
	if text := eval(fmt.Sprintf(`({t: document.querySelector('[data-voucher=%q] [data-action="buy"]').textContent})`, sid))["t"]; text != "Bought" {
		t.Errorf("after the buy the button reads %q, want Bought", text)
	}

	// Pay one order, cancel another.
	for _, tc := range []struct{ voucher, action, status string }{
		{payable, "pay", "paid"},
		{cancellable, "cancel", "cancelled"},
	} {
		step("buy to "+tc.action,
			chromedp.Click(chromedp.CSS(voucherSel(tc.voucher, `[data-action="buy"]`))),
			present(voucherSel(tc.voucher, `[data-field="order"][data-status="created"]`)),
			chromedp.WaitVisible(chromedp.CSS(voucherSel(tc.voucher, `[data-action="`+tc.action+`"]`))),
		)
		note := eval(fmt.Sprintf(`({t: document.querySelector('[data-voucher=%q] [data-field="order-note"]').textContent})`, tc.voucher))["t"]
		if !regexp.MustCompile(`^Pay within (01:[0-5]\d|02:00) or it is cancelled\.$`).MatchString(note) {
			t.Errorf("a created order with 120 s to pay says %q", note)
		}
		step(tc.action,
			chromedp.Click(chromedp.CSS(voucherSel(tc.voucher, `[data-action="`+tc.action+`"]`))),
			present(voucherSel(tc.voucher, fmt.Sprintf(`[data-field="order"][data-status=%q]`, tc.status))),
			chromedp.WaitNotVisible(chromedp.CSS(voucherSel(tc.voucher, `[data-action="`+tc.action+`"]`))),
		)
		id := eval(fmt.Sprintf(`({id: document.querySelector('[data-voucher=%q] [data-field="order"]').dataset.order})`, tc.voucher))["id"]
		if res := e.do("GET", "/api/orders/"+id, buyer, nil); res.status != 200 || res.body["status"] != tc.status {
			t.Errorf("after %s the API says of order %s: %d %s", tc.action, id, res.status, res.raw)
		}
	}
	// An order not paid in time: the page follows it to cancelled.
	late := onSale("Pay in 3 seconds", 5, 3)
	step("not paid in time",
		present(fmt.Sprintf(`[data-voucher=%q][data-state="on-sale"]`, late)),
		chromedp.Click(chromedp.CSS(voucherSel(late, `[data-action="buy"]`))),
		present(voucherSel(late, `[data-field="order"][data-status="cancelled"]`)),
		chromedp.WaitNotVisible(chromedp.CSS(voucherSel(late, `[data-action="pay"]`))),
	)
	lateID := eval(fmt.Sprintf(`({id: document.querySelector('[data-voucher=%q] [data-field="order"]').dataset.order})`, late))["id"]
	res = e.do("GET", "/api/orders/"+lateID, buyer, nil)
	note := eval(fmt.Sprintf(`({t: document.querySelector('[data-voucher=%q] [data-field="order-note"]').textContent})`, late))["t"]
	if res.status != 200 || res.body["status"] != "cancelled" || note == "" || note != res.body["reason"] {
		t.Errorf("the order not paid in time: the page says %q, the API %d %s", note, res.status, res.raw)
	}

	// The cancelled unit is on sale again, and the page shows it.
	step("the cancelled unit back", present(voucherSel(cancellable, `[data-field="remaining"][data-value="5"]`)))

	// The sale that ended while the page was open.
	step("ended", present(fmt.Sprintf(`[data-voucher=%q][data-state="ended"]`, ending)))
	if b := eval(fmt.Sprintf(`(() => { const b = document.querySelector('[data-voucher=%q] [data-action="buy"]'); return {t: b.textContent, d: String(b.disabled)}; })()`, ending)); b["t"] != "Ended" || b["d"] != "true" {
		t.Errorf("the ended sale's button reads %q, disabled %s", b["t"], b["d"])
	}

	// A reload keeps the buyer logged in and shows their orders.
	step("reload",
		chromedp.Reload(),
		chromedp.Poll[chromedp.Void](`document.body.dataset.ready === "true"`),
		chromedp.WaitVisible(chromedp.ID("account")),
		present(voucherSel(sid, fmt.Sprintf(`[data-field="order"][data-order=%q][data-status="created"]`, orderID))),
		present(voucherSel(payable, `[data-field="order"][data-status="paid"]`)),
	)

	t.Run("challenge", func(t *testing.T) {
		if _, ok := soon["challenge"]; !ok {
			t.Skip("the voucher JSON has no challenge field: the challenge route is not built on this branch yet")
		}
		begin := time.Now().Add(8 * time.Second).Truncate(time.Millisecond)
		v := e.createVoucher(map[string]any{
			"title":                "Flash sale with a check",
			"stock":                20,
			"beginTime":            begin.Format(time.RFC3339Nano),
			"endTime":              begin.Add(time.Hour).Format(time.RFC3339Nano),
			"challenge":            true,
			"challengeLeadSeconds": 60,
		})
		id := v["id"].(string)
		// A buy without a solution is refused: it is a challenge voucher.
		other := e.mint(auth.Identity{UserID: 77}, time.Hour)
		for time.Now().Before(begin) {
			time.Sleep(time.Until(begin) + 10*time.Millisecond)
		}
		e.wantError(e.do("POST", "/api/vouchers/"+id+"/seckill", other, nil), 403, "challenge_required")
		// The first buy's solution is spoiled on its way (its number off
		// by one): refused, the page solves a new challenge and buys again.
		step("buy with a solution",
			chromedp.Poll[chromedp.Void](fmt.Sprintf(`!document.querySelector('[data-voucher=%q] [data-action="buy"]').disabled`, id)),
			run(`(() => {
				window.buys = [];
				const f = window.fetch;
				window.fetch = (url, init) => {
					const h = init && init.headers && init.headers["X-Altcha"];
					if (String(url).endsWith("/seckill")) {
						window.buys.push(h || "");
						if (window.buys.length === 1 && h) {
							const sol = JSON.parse(atob(h));
							sol.number++;
							init.headers["X-Altcha"] = btoa(JSON.stringify(sol));
						}
					}
					return f(url, init);
				};
			})()`),
			chromedp.Click(chromedp.CSS(voucherSel(id, `[data-action="buy"]`))),
			present(voucherSel(id, `[data-field="order"][data-status="created"]`)),
		)
		buys := eval(`({n: String(window.buys.length), distinct: String(window.buys[0] !== window.buys[1] && window.buys.every((h) => h !== ""))})`)
		if buys["n"] != "2" || buys["distinct"] != "true" {
			t.Errorf("the page bought %s times (each with a solution of its own: %s); want 2: the spoiled one, then a fresh one", buys["n"], buys["distinct"])
		}
		if solved := eval(fmt.Sprintf(`({ms: document.querySelector('[data-voucher=%q]').dataset.solvedMs || ""})`, id))["ms"]; solved == "" {
			t.Errorf("the page bought a challenge voucher without saying it solved a challenge")
		} else {
			t.Logf("the page solved the challenge in %s ms", solved)
		}
	})

	t.Run("paused", func(t *testing.T) {
		if _, ok := soon["paused"]; !ok {
			t.Skip("the voucher JSON has no paused field: the operator's controls are not built on this branch yet")
		}
		id := onSale("Paused for a moment", 5, 0)
		buy := voucherSel(id, `[data-action="buy"]`)
		step("on sale", present(fmt.Sprintf(`[data-voucher=%q][data-state="on-sale"]`, id)))
		if res := e.do("POST", "/api/admin/vouchers/"+id+"/pause", e.admin, nil); res.status != 200 || res.body["paused"] != true {
			t.Fatalf("pause: %d %s", res.status, res.raw)
		}
		step("paused shown", present(fmt.Sprintf(`[data-voucher=%q][data-state="paused"]`, id)))
		if b := eval(fmt.Sprintf(`(() => { const b = document.querySelector(%q); return {t: b.textContent, d: String(b.disabled)}; })()`, buy)); b["t"] != "Paused" || b["d"] != "true" {
			t.Errorf("a paused sale's button reads %q, disabled %s; want Paused, disabled", b["t"], b["d"])
		}
		if res := e.do("POST", "/api/admin/vouchers/"+id+"/resume", e.admin, nil); res.status != 200 || res.body["paused"] != false {
			t.Fatalf("resume: %d %s", res.status, res.raw)
		}
		step("resumed",
			present(fmt.Sprintf(`[data-voucher=%q][data-state="on-sale"]`, id)),
			chromedp.Click(chromedp.CSS(buy)),
			present(voucherSel(id, `[data-field="order"][data-status="created"]`)),
		)
	})

	// On the narrowest phones nothing is wider than the screen, and the
	// buttons are thumb-sized.
	step("a small phone's screen", chromedp.EmulateViewport(320, 640))
	small := eval(fmt.Sprintf(`(() => { const b = document.querySelector(%q).getBoundingClientRect();
		return {scroll: String(document.documentElement.scrollWidth), height: String(Math.round(b.height)), width: String(Math.round(b.width))}; })()`,
		voucherSel(sid, `[data-action="buy"]`)))
	if w, _ := strconv.Atoi(small["scroll"]); w > 320 {
		t.Errorf("at 320 px the page is %d px wide", w)
	}
	if h, _ := strconv.Atoi(small["height"]); h < 44 {
		t.Errorf("at 320 px the buy button is %s px tall, want at least 44", small["height"])
	}

	// The screenshot: a phone's width.
	step("a phone's screen", chromedp.EmulateViewport(412, 915), run(`window.scrollTo(0, 0)`))
	shot := screenshot(t, ctx)
	path := filepath.Join(t.TempDir(), "salepage.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(shot))
	if out := os.Getenv(saleScreenshotEnv); out != "" {
		if !filepath.IsAbs(out) {
			out = filepath.Join("..", out) // the test runs in http/
		}
		if err := os.WriteFile(out, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", out)
	}

	// Logging out forgets the token.
	step("log out",
		chromedp.Click(chromedp.ID("log-out")),
		chromedp.WaitVisible(chromedp.ID("login")),
		chromedp.Poll[chromedp.Void](`localStorage.getItem("seckill.buyerToken") === null && document.querySelector('[data-field="order"]:not([hidden])') === null`),
	)
}
