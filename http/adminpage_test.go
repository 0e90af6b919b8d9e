package http_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/seckill/seckill/auth"
)

// chromiumPath is Debian's Chromium, which the browser test drives.
const chromiumPath = "/usr/bin/chromium"

// screenshotEnv names a file the browser test writes its screenshot to, as
// well as to its temporary directory: `SECKILL_SCREENSHOT=docs/admin.png`
// (relative to the module's root) makes the picture in docs/operations.md. It also runs
// a longer sale first, so that the chart has something to show.
const screenshotEnv = "SECKILL_SCREENSHOT"

// TestAdminPageInBrowser runs a small sale with one dead letter on newEnv's
// service (this machine's Redis and MariaDB, or the embedded backend),
// opens the admin page in headless Chromium, signs in, and checks the
// numbers the page shows against the admin API; then it retries the dead
// letter from the page and reconciles the voucher.
func TestAdminPageInBrowser(t *testing.T) {
	t.Parallel()
	needChromium(t)
	e := newEnv(t)

	// The sale: 20 buyers, 5 of whom ask twice.
	voucher := e.createVoucher(map[string]any{
		"title":     "Flash sale: 50 yuan voucher",
		"stock":     30,
		"price":     1250,
		"currency":  "CNY",
		"beginTime": e.now.Add(-time.Minute).Format(time.RFC3339),
		"endTime":   e.now.Add(time.Hour).Format(time.RFC3339),
	})
	vid := voucher["id"].(string)
	for u := range int64(20) {
		token := e.mint(auth.Identity{UserID: 100 + u}, time.Hour)
		if res := e.do("POST", "/api/vouchers/"+vid+"/seckill", token, nil); res.status != 200 {
			t.Fatalf("buyer %d: %d %s", 100+u, res.status, res.raw)
		}
		if u%4 == 0 {
			e.wantError(e.do("POST", "/api/vouchers/"+vid+"/seckill", token, nil), 409, "duplicate_order")
		}
	}
	// And one admission whose stream message is malformed: the workers
	// dead-letter it, give its stock back and record its order failed.
	const badUser = 999
	badID := e.injectMalformed(vid, badUser)

	var stats map[string]any
	e.eventually(30*time.Second, "20 orders created, nothing pending, one dead letter", func() bool {
		stats = e.adminJSON("GET", "/api/admin/stats")
		v := statsVoucher(stats, vid)
		dl, _ := e.adminJSON("GET", "/api/admin/dlq")["deadLetters"].([]any)
		return v != nil && v["created"] == 20.0 && v["pending"] == 0.0 && len(dl) == 1
	})
	dl := e.adminJSON("GET", "/api/admin/dlq")["deadLetters"].([]any)[0].(map[string]any)
	if dl["id"] != badID || dl["stockReturned"] != true {
		t.Fatalf("dead letter %v, want order %s with its stock returned", dl, badID)
	}

	ctx := newBrowser(t)
	step, eval := browserSteps(t, ctx)

	if err := chromedp.Do(ctx, chromedp.Navigate(e.url+"/admin/")); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	// A buyer's token is refused, on the sign-in form.
	step("sign in as a buyer",
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), e.buyer),
		chromedp.Click(chromedp.ID("sign-in-button")),
		chromedp.Poll[chromedp.Void](`document.querySelector("#sign-in-error").textContent.includes("not an admin")`),
	)
	step("sign in as the admin",
		run(`document.querySelector("#token").value = ""`),
		chromedp.SendKeys(chromedp.ID("token"), e.admin),
		chromedp.Click(chromedp.ID("sign-in-button")),
		chromedp.WaitVisible(chromedp.ID("dashboard")),
		present(fmt.Sprintf(`tr[data-dead-letter=%q]`, badID)),
		present(fmt.Sprintf(`[data-voucher=%q][data-field="remaining"][data-value]`, vid)),
	)

	// The page shows what the API answers.
	stats = e.adminJSON("GET", "/api/admin/stats")
	want := map[string]string{}
	v := statsVoucher(stats, vid)
	for _, f := range []string{"remaining", "created", "pending", "failed", "drift", "stock", "initialStock", "price", "revenue"} {
		want[f] = jsonNumber(v[f])
	}
	want["priceText"] = "12.50 CNY"
	stream := v["stream"].(map[string]any)
	for _, f := range []string{"length", "pending", "consumers", "deadLetters"} {
		want["stream."+f] = jsonNumber(stream[f])
	}
	want["admitted"] = jsonNumber(admissionTotal(stats, "admitted"))
	want["duplicate_order"] = jsonNumber(admissionTotal(stats, "duplicate_order"))
	want["reason"] = dl["reason"].(string)
	want["redisNode"] = v["redisNode"].(string)
	want["breaker"] = stats["workers"].(map[string]any)["breaker"].(string)
	// No late payment: no refund waits, and the page says so.
	want["refunds"] = jsonNumber(e.adminJSON("GET", "/api/admin/refunds")["waiting"])
	want["refundsEmpty"] = "true"
	// No payment refused: the page says so.
	want["refused"], want["refusedEmpty"] = "0", "true"
	if want["admitted"] != "20" || want["duplicate_order"] != "5" || want["remaining"] != "10" {
		t.Errorf("API: %s admitted, %s duplicate, %s remaining; want 20, 5 and 10 (30 − 20 sold)", want["admitted"], want["duplicate_order"], want["remaining"])
	}
	got := eval(fmt.Sprintf(`(() => {
		const out = {};
		const val = (sel) => { const e = document.querySelector(sel); return e ? e.dataset.value : "(missing)"; };
		for (const f of %s) out[f] = val('#vouchers [data-voucher=%q][data-field="' + f + '"]');
		for (const f of ["length", "pending", "consumers", "deadLetters"]) out["stream." + f] = val('#streams [data-voucher=%q][data-field="stream.' + f + '"]');
		out.admitted = val('[data-result="admitted"]');
		out.duplicate_order = val('[data-result="duplicate_order"]');
		out.reason = val('tr[data-dead-letter=%q] [data-field="reason"]');
		out.busy = val("#workers-busy");
		const node = document.querySelector('#streams [data-voucher=%q][data-field="redisNode"]');
		out.redisNode = node ? node.textContent : "(missing)";
		out.breaker = val("#workers-breaker");
		out.refunds = val("#refunds-count");
		out.refundsEmpty = String(!document.querySelector("#refunds-empty").hidden);
		const price = document.querySelector('#vouchers [data-voucher=%q][data-field="price"]');
		out.priceText = price ? price.textContent : "(missing)";
		out.refused = val("#refused-count");
		out.refusedEmpty = String(!document.querySelector("#refused-empty").hidden);
		return out;
	})()`, jsArray("remaining", "created", "pending", "failed", "drift", "stock", "initialStock", "price", "revenue"), vid, vid, badID, vid, vid))
	// The workers' busy count moves between the API's answer and the
	// page's: a number is all that can be asked of it.
	if _, err := strconv.Atoi(got["busy"]); err != nil {
		t.Errorf("page shows busy = %q, want a number", got["busy"])
	}
	if want["redisNode"] == "" {
		t.Errorf("the API names no Redis master for voucher %s", vid)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("page shows %s = %q, API says %q", k, got[k], w)
		}
	}

	// Retry the dead letter from the page: it leaves the list, and its
	// order is admitted again, then written.
	step("retry the dead letter",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`button[data-action="retry"][data-dead-letter=%q]`, badID))),
		absent(fmt.Sprintf(`tr[data-dead-letter=%q]`, badID)),
		chromedp.WaitVisible(chromedp.CSS(`#dlq-outcome[data-outcome="ok"]`)),
	)
	outcome := eval(`({text: document.querySelector("#dlq-outcome").textContent, empty: String(!document.querySelector("#dlq-empty").hidden)})`)
	if !strings.Contains(outcome["text"], "admitted again") || outcome["empty"] != "true" {
		t.Errorf("after retry the page says %q (empty list shown: %s)", outcome["text"], outcome["empty"])
	}
	if dl, _ := e.adminJSON("GET", "/api/admin/dlq")["deadLetters"].([]any); len(dl) != 0 {
		t.Errorf("dead letters after retry: %v", dl)
	}
	badToken := e.mint(auth.Identity{UserID: badUser}, time.Hour)
	e.eventually(30*time.Second, "the retried order created", func() bool {
		res := e.do("GET", "/api/orders/"+badID, badToken, nil)
		return res.status == 200 && res.body["status"] == "created"
	})
	step("the page shows 21 created",
		chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.querySelector('#vouchers [data-voucher=%q][data-field="created"]').dataset.value === "21"`, vid),
			chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second)),
	)

	// Reconcile from the page: Redis and the database agree.
	step("reconcile the voucher",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`button[data-action="reconcile"][data-voucher=%q]`, vid))),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`#reconcile-result[data-voucher=%q][data-outcome]`, vid))),
	)
	rec := eval(`(() => { const r = document.querySelector("#reconcile-result"); const f = (n) => r.querySelector('[data-field="reconcile.' + n + '"]').dataset.value;
		return {outcome: r.dataset.outcome, drift: f("drift"), orders: f("dbOrders"), remaining: f("remaining")}; })()`)
	if want := map[string]string{"outcome": "ok", "drift": "0", "orders": "21", "remaining": "9"}; !maps.Equal(rec, want) {
		t.Errorf("reconciliation on the page = %v, want %v", rec, want)
	}

	if os.Getenv(screenshotEnv) != "" {
		second := e.screenshotSale(vid)
		step("show the later sale",
			present(`#dead-letters tbody tr`),
			chromedp.Click(chromedp.CSS(`button[data-span="60"]`)),
			chromedp.Click(chromedp.CSS(fmt.Sprintf(`button[data-action="reconcile"][data-voucher=%q]`, second))),
			present(fmt.Sprintf(`#reconcile-result[data-voucher=%q][data-outcome]`, second)),
			chromedp.Sleep(2*time.Second), // a refresh or two: the numbers settle
		)
	}
	shot := screenshot(t, ctx)
	path := filepath.Join(t.TempDir(), "admin.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(shot))
	if out := os.Getenv(screenshotEnv); out != "" {
		if !filepath.IsAbs(out) {
			out = filepath.Join("..", out) // the test runs in http/
		}
		if err := os.WriteFile(out, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", out)
	}

	// Signing out forgets the token.
	step("sign out",
		chromedp.Click(chromedp.ID("sign-out")),
		chromedp.WaitVisible(chromedp.ID("sign-in-view")),
		chromedp.Poll[chromedp.Void](`sessionStorage.length === 0 && document.querySelectorAll("#vouchers tbody tr").length === 0`),
	)
	// A token the server refuses (here: its signature is wrong) sends the
	// page back to the sign-in form, saying why.
	forged := e.admin[:len(e.admin)-6] + "AAAAAA"
	step("a refused token",
		run(fmt.Sprintf(`sessionStorage.setItem("seckill.adminToken", %q)`, forged)),
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.ID("sign-in-view")),
		chromedp.Poll[chromedp.Void](`document.querySelector("#sign-in-error").textContent.includes("refused") && sessionStorage.length === 0`),
	)
}

// needChromium skips t, or fails it when CI is set, without Chromium.
func needChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set and Chromium is missing (%v): apt-get install chromium", err)
		}
		t.Skipf("Chromium is not installed at %s (apt-get install chromium): the admin page's browser test needs it", chromiumPath)
	}
}

// TestAdminPageShards: the admin page lists a sharded voucher's shards, as
// the admin API shows them, and its stream's row points to them; the shards'
// section stays hidden while no voucher is sharded.
func TestAdminPageShards(t *testing.T) {
	t.Parallel()
	needChromium(t)
	e := newEnv(t)
	plain := e.createVoucher(e.validVoucher())["id"].(string)
	ctx := newBrowser(t)
	step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	step("sign in",
		chromedp.Navigate(e.url+"/admin/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), e.admin),
		chromedp.Click(chromedp.ID("sign-in-button")),
		chromedp.WaitVisible(chromedp.ID("dashboard")),
		present(fmt.Sprintf(`#streams [data-voucher=%q][data-field="redisNode"]`, plain)),
	)
	if hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector("#shards-card").hidden`)); err != nil || !hidden {
		t.Errorf("the shards' section without a sharded voucher: hidden %v, %v; want hidden", hidden, err)
	}

	body := e.validVoucher()
	body["shards"] = 3
	vid := e.createVoucher(body)["id"].(string)
	step("the shards listed", present(fmt.Sprintf(`tr[data-shard="%s/2"]`, vid)))
	var shards []any
	e.eventually(10*time.Second, "the API lists the voucher's shards", func() bool {
		shards, _ = statsVoucher(e.adminJSON("GET", "/api/admin/stats"), vid)["shardStats"].([]any)
		return len(shards) == 3
	})
	var want []map[string]string
	for _, sh := range shards {
		m := sh.(map[string]any)
		want = append(want, map[string]string{"index": jsonNumber(m["index"]), "tag": m["tag"].(string), "remaining": jsonNumber(m["remaining"]),
			"buyers": jsonNumber(m["buyers"]), "length": jsonNumber(m["length"]), "redisNode": m["redisNode"].(string)})
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	got, err := chromedp.Run(sctx, chromedp.Evaluate[[]map[string]string](fmt.Sprintf(`[...document.querySelectorAll('#shards tr[data-shard^="%s/"]')].map((tr) => {
		const f = (n) => tr.querySelector('[data-field="shard.' + n + '"]');
		return {index: f("index").textContent, tag: f("tag").textContent, remaining: f("remaining").dataset.value,
			buyers: f("buyers").dataset.value, length: f("length").dataset.value, redisNode: f("redisNode").textContent};
	})`, vid)))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the page's shards (-API +page):\n%s", diff)
	}
	for _, w := range want {
		if w["redisNode"] == "" || w["tag"] == "" {
			t.Errorf("the API names no tag or master for shard %s: %v", w["index"], w)
		}
	}
	node, err := chromedp.Run(sctx, chromedp.Evaluate[string](fmt.Sprintf(`document.querySelector('#streams [data-voucher=%q][data-field="redisNode"]').textContent`, vid)))
	if err != nil || node != "3 shards (below)" {
		t.Errorf("the stream's row names the master %q, %v; want \"3 shards (below)\"", node, err)
	}
}

// injectMalformed takes a unit of the voucher's stock and a buyer slot as
// admit.lua does, with a stream message whose admission time is garbage,
// and returns the order id.
func (e *env) injectMalformed(voucherID string, user int64) string {
	e.t.Helper()
	id, err := e.app.Orders.IDs.Next()
	if err != nil {
		e.t.Fatal(err)
	}
	key := func(name string) string { return e.redisPrefix + ":{v" + voucherID + "}:" + name }
	r := e.rawRedis
	for _, cmd := range []rueidis.Completed{
		r.B().Decr().Key(key("stock")).Build(),
		r.B().Hset().Key(key("buyers")).FieldValue().FieldValue(fmt.Sprint(user), fmt.Sprint(id)).Build(),
		r.B().Xadd().Key(key("orders")).Id("*").FieldValue().FieldValue("id", fmt.Sprint(id)).FieldValue("user", fmt.Sprint(user)).
			FieldValue("voucher", voucherID).FieldValue("at", "yesterday").Build(),
	} {
		if err := r.Do(context.Background(), cmd).Error(); err != nil {
			e.t.Fatal(err)
		}
	}
	return fmt.Sprint(id)
}

// screenshotSale runs, for the screenshot in docs/operations.md, a second voucher's sale
// over some twenty seconds, a wave of buyers that sells it out, and leaves
// a dead letter. It returns the voucher's id.
func (e *env) screenshotSale(firstVoucher string) (voucherID string) {
	e.t.Helper()
	v := e.createVoucher(map[string]any{
		"title":     "Noodles, 2 for 1",
		"stock":     150,
		"beginTime": e.now.Add(-time.Minute).Format(time.RFC3339),
		"endTime":   e.now.Add(2 * time.Hour).Format(time.RFC3339),
	})
	id := v["id"].(string)
	user := int64(10_000)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for s := range 24 {
		n := int(6 + 10*math.Sin(float64(s)/24*math.Pi))
		for range n {
			user++
			token := e.mint(auth.Identity{UserID: user}, time.Hour)
			e.do("POST", "/api/vouchers/"+id+"/seckill", token, nil)
			if user%5 == 0 {
				e.do("POST", "/api/vouchers/"+id+"/seckill", token, nil)
			}
			if user%9 == 0 {
				e.do("POST", "/api/vouchers/"+firstVoucher+"/seckill", token, nil)
			}
		}
		if s == 5 {
			e.injectMalformed(id, 424242)
		}
		<-tick.C
	}
	return id
}

// newBrowser starts headless Chromium for the test, with a profile of its
// own, stopped when the test ends. Uncaught exceptions and Content Security
// Policy violations on its pages fail the test.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	var (
		mu       sync.Mutex
		problems []string
		done     = make(chan struct{})
	)
	messages := chromedp.Console(ctx) // starts the browser
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || strings.Contains(m.Text, "Content Security Policy") {
				mu.Lock()
				problems = append(problems, m.String())
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
		if err := chromedp.Cancel(tctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("stop Chromium: %v", err)
		}
		tcancel()
		cancel()
		cancelAlloc()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, p := range problems {
			t.Errorf("the page's console: %s", p)
		}
	})
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	return ctx
}

// present waits until an element matches the CSS selector.
func present(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.querySelector(%q) !== null`, sel),
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(0))
}

// absent waits until no element matches the CSS selector.
func absent(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.querySelector(%q) === null`, sel),
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(0))
}

// run runs JavaScript in the page, for its effect.
func run(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[any](expr)(ctx, t)
		return err
	})
}

// screenshot takes the whole page as a PNG.
func screenshot(t *testing.T, ctx context.Context) []byte {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	return png
}

// adminJSON calls the admin API and returns its JSON answer, failing on an
// error.
func (e *env) adminJSON(method, path string) map[string]any {
	e.t.Helper()
	res := e.do(method, path, e.admin, nil)
	if res.status != 200 {
		e.t.Fatalf("%s %s = %d %s", method, path, res.status, res.raw)
	}
	return res.body
}

// eventually polls cond every 50ms until it holds, failing after d.
func (e *env) eventually(d time.Duration, what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func statsVoucher(stats map[string]any, id string) map[string]any {
	vs, _ := stats["vouchers"].([]any)
	for _, v := range vs {
		if m, _ := v.(map[string]any); m["id"] == id {
			return m
		}
	}
	return nil
}

func admissionTotal(stats map[string]any, result string) float64 {
	var n float64
	secs, _ := stats["admissions"].([]any)
	for _, s := range secs {
		counts, _ := s.(map[string]any)["counts"].(map[string]any)
		c, _ := counts[result].(float64)
		n += c
	}
	return n
}

// jsonNumber writes a decoded JSON number as the page keeps it in
// data-value; null is "".
func jsonNumber(v any) string {
	switch n := v.(type) {
	case nil:
		return ""
	case float64:
		return fmt.Sprint(n)
	default:
		return fmt.Sprintf("(%T %v)", v, v)
	}
}

func jsArray(s ...string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestAdminPageControls drives the operator's controls from the admin
// page: it creates a voucher with its options from the form, then pauses
// it (a buy answers 409 paused), resumes it (a buy is admitted), adds
// units (remaining shows them at once) and ends it now (a buy answers 409
// ended), each checked against the API.
func TestAdminPageControls(t *testing.T) {
	t.Parallel()
	needChromium(t)
	e := newEnv(t)
	ctx := newBrowser(t)
	step, eval := browserSteps(t, ctx)
	step("sign in",
		chromedp.Navigate(e.url+"/admin/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), e.admin),
		chromedp.Click(chromedp.ID("sign-in-button")),
		chromedp.WaitVisible(chromedp.ID("dashboard")),
	)

	// Create, with options other than the defaults.
	step("create a voucher from the form",
		chromedp.SendKeys(chromedp.ID("cv-title"), "Door test: 40 units"),
		chromedp.SendKeys(chromedp.ID("cv-stock"), "40"),
		run(`(() => {
			const local = (d) => new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
			document.querySelector("#cv-begin").value = local(new Date(Date.now() - 60000));
			document.querySelector("#cv-end").value = local(new Date(Date.now() + 3600000));
			document.querySelector("#cv-pay").value = "120";
		})()`),
		chromedp.Click(chromedp.ID("cv-rebuy")),
		chromedp.Click(chromedp.ID("create-button")),
		present(`#create-result[data-outcome="ok"][data-voucher]`),
	)
	vid := eval(`({id: document.querySelector("#create-result").dataset.voucher})`)["id"]
	v := e.adminJSON("GET", "/api/vouchers/"+vid)
	if v["title"] != "Door test: 40 units" || v["stock"] != 40.0 || v["payWithinSeconds"] != 120.0 || v["rebuyAfterCancel"] != true || v["paused"] != false {
		t.Fatalf("the voucher created from the page: %v", v)
	}
	buy := func(user int64) response {
		t.Helper()
		return e.do("POST", "/api/vouchers/"+vid+"/seckill", e.mint(auth.Identity{UserID: user}, time.Hour), nil)
	}
	if res := buy(1); res.status != 200 {
		t.Fatalf("a buy: %d %s", res.status, res.raw)
	}
	control := func() map[string]string {
		return eval(`(() => { const r = document.querySelector("#control-result"); const f = (n) => r.querySelector('[data-field="control.' + n + '"]');
			return {outcome: r.dataset.outcome, action: r.dataset.action, voucher: r.dataset.voucher, paused: f("paused").dataset.value,
				remaining: f("remaining").dataset.value, endTime: f("endTime").dataset.value}; })()`)
	}

	step("pause",
		present(fmt.Sprintf(`button[data-action="pause"][data-voucher=%q]`, vid)),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`button[data-action="pause"][data-voucher=%q]`, vid))),
		present(fmt.Sprintf(`#control-result[data-action="pause"][data-voucher=%q]`, vid)),
	)
	if got := control(); got["outcome"] != "ok" || got["paused"] != "true" {
		t.Fatalf("the page after pause: %v", got)
	}
	e.wantError(buy(2), 409, "paused")
	step("the row shows the pause, and offers resume",
		present(fmt.Sprintf(`#vouchers [data-voucher=%q][data-field="window"][data-paused="true"]`, vid)),
		present(fmt.Sprintf(`button[data-action="resume"][data-voucher=%q]`, vid)),
	)

	step("resume",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`button[data-action="resume"][data-voucher=%q]`, vid))),
		present(fmt.Sprintf(`#control-result[data-action="resume"][data-voucher=%q]`, vid)),
	)
	if got := control(); got["outcome"] != "ok" || got["paused"] != "false" {
		t.Fatalf("the page after resume: %v", got)
	}
	if res := buy(2); res.status != 200 {
		t.Fatalf("a buy once resumed: %d %s", res.status, res.raw)
	}

	step("add 15 units",
		run(fmt.Sprintf(`document.querySelector('input[data-field="addUnits"][data-voucher=%q]').value = "15"`, vid)),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`button[data-action="add-stock"][data-voucher=%q]`, vid))),
		present(fmt.Sprintf(`#control-result[data-action="add-stock"][data-voucher=%q]`, vid)),
	)
	// 40 − 2 sold + 15: in the answer, and in what the API says at once.
	if got := control(); got["outcome"] != "ok" || got["remaining"] != "53" {
		t.Fatalf("the page after adding 15: %v", got)
	}
	if v := e.adminJSON("GET", "/api/vouchers/"+vid); v["remaining"] != 53.0 {
		t.Errorf("remaining after adding 15 = %v, want 53", v["remaining"])
	}
	e.eventually(10*time.Second, "the stats show 55 units in all", func() bool {
		return statsVoucher(e.adminJSON("GET", "/api/admin/stats"), vid)["initialStock"] == 55.0
	})

	asked := time.Now()
	step("end now",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`button[data-action="end"][data-voucher=%q]`, vid))),
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`button[data-action="end"][data-voucher=%q][data-confirm="1"]`, vid))),
		present(fmt.Sprintf(`#control-result[data-action="end"][data-voucher=%q]`, vid)),
	)
	got := control()
	end, err := time.Parse(time.RFC3339Nano, got["endTime"])
	if got["outcome"] != "ok" || err != nil || end.Before(asked.Add(-time.Second)) || end.After(time.Now().Add(time.Second)) {
		t.Fatalf("the page after end now: %v (%v), want an endTime about %v", got, err, asked)
	}
	e.wantError(buy(3), 409, "ended")
	if res := buy(1); res.status != 409 || res.body["code"] != "duplicate_order" {
		t.Errorf("a buyer with an order after the end: %d %s, want their order (duplicate_order)", res.status, res.raw)
	}
}

// browserSteps returns the browser tests' two verbs on the browser ctx:
// step runs actions (each step within 30 s) and fails the test with the
// page's text when they fail; eval evaluates an expression to a map of
// strings, or fails the test.
func browserSteps(t *testing.T, ctx context.Context) (step func(what string, actions ...chromedp.Action[chromedp.Void]), eval func(expr string) map[string]string) {
	step = func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			text, _ := chromedp.Run(dctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("%s: %v\nthe page shows:\n%s", what, err, text)
		}
	}
	eval = func(expr string) map[string]string {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		v, err := chromedp.Run(sctx, chromedp.Evaluate[map[string]string](expr))
		if err != nil {
			t.Fatalf("evaluate %s: %v", expr, err)
		}
		return v
	}
	return step, eval
}
