package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/seckill/seckill"
	"github.com/seckill/seckill/auth"
)

// demoPayWithin is the deadline of the demo's second sale: short, so that
// the demo shows the deadline pass.
const demoPayWithin = 5

// demoPrice is the second sale's price, in yuan's minor units (fen): its
// payments are for an amount, which the demo adds up.
const demoPrice = 1250

// demoLifecycle is the demo's second act: a sale whose buyers must pay
// within demoPayWithin seconds. Of stock buyers, some pay, some cancel and
// the rest let the deadline pass; the units of the cancelled orders go back
// on sale and as many new buyers get them. It tells what happened, and
// returns an error if the numbers are not the ones the service promises.
func demoLifecycle(ctx context.Context, svc *service, stock int, stdout io.Writer) error {
	pay, cancel := stock*3/10, stock/5
	timeout := stock - pay - cancel
	fmt.Fprintf(stdout, "\nAct two: %d vouchers for %s whose buyers must pay within %ds. %d buyers pay, %d cancel, %d let the deadline pass.\n",
		stock, seckill.FormatMoney(demoPrice, "CNY"), demoPayWithin, pay, cancel, timeout)
	c := &demoClient{url: svc.url, http: &http.Client{Timeout: 10 * time.Second}, tokens: svc.tokens}
	defer c.http.CloseIdleConnections()
	now := time.Now().UTC()
	var v struct {
		ID string `json:"id"`
	}
	if err := c.call(ctx, "POST", "/api/admin/vouchers", 1, true, fmt.Sprintf(`{"title":"pay within %ds","stock":%d,"beginTime":%q,"endTime":%q,"payWithinSeconds":%d,"price":%d,"currency":"CNY"}`,
		demoPayWithin, stock, now.Add(-time.Second).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339), demoPayWithin, demoPrice), http.StatusCreated, &v); err != nil {
		return err
	}
	const firstBuyer = 500_001
	orders := make([]string, stock)
	if err := c.each(stock, func(i int) error {
		var o struct{ OrderID string }
		err := c.call(ctx, "POST", "/api/vouchers/"+v.ID+"/seckill", firstBuyer+int64(i), false, "", http.StatusOK, &o)
		orders[i] = o.OrderID
		return err
	}); err != nil {
		return err
	}
	// Paid and cancelled once the workers wrote the orders: a pending
	// order answers 409 order_pending, and the buyer tries again. The paid
	// orders' amounts are added up: each owes the price.
	var (
		takenMu sync.Mutex
		taken   int64
	)
	if err := c.each(pay+cancel, func(i int) error {
		verb, want := "pay", "paid"
		if i >= pay {
			verb, want = "cancel", "cancelled"
		}
		for {
			var o struct {
				Status, Code, Currency string
				Amount                 int64
			}
			err := c.call(ctx, "POST", "/api/orders/"+orders[i]+"/"+verb, firstBuyer+int64(i), false, "", http.StatusOK, &o)
			switch {
			case err == nil && o.Status != want:
				err = fmt.Errorf("%s order %s: %s, want %s", verb, orders[i], o.Status, want)
			case err == nil && (o.Amount != demoPrice || o.Currency != "CNY"):
				err = fmt.Errorf("%s order %s: it owes %s, want %s", verb, orders[i], seckill.FormatMoney(o.Amount, o.Currency), seckill.FormatMoney(demoPrice, "CNY"))
			case err == nil && verb == "pay":
				takenMu.Lock()
				taken += o.Amount
				takenMu.Unlock()
			}
			if err == nil || !strings.Contains(err.Error(), "order_pending") {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}); err != nil {
		return err
	}
	left, err := c.remaining(ctx, v.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  %d paid %s each, %s taken; %d cancelled, and their units are on sale again at once: %d remaining.\n",
		pay, seckill.FormatMoney(demoPrice, "CNY"), seckill.FormatMoney(taken, "CNY"), cancel, left)
	start := time.Now()
	for left < int64(cancel+timeout) && left >= 0 {
		if time.Since(start) > time.Minute {
			return fmt.Errorf("the deadline passed a minute ago and %d units are back of %d", left, cancel+timeout)
		}
		time.Sleep(200 * time.Millisecond)
		if left, err = c.remaining(ctx, v.ID); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "  The deadline passed: the sweeper cancelled the %d unpaid orders, %d units remaining.\n", timeout, left)
	// The units go to new buyers; those whose orders were cancelled are
	// told of their order, and get nothing.
	var mu sync.Mutex
	answers := map[string]int{}
	rebought := 0
	again := stock
	if err := c.each(again+cancel+timeout, func(i int) error {
		user, cancelled := int64(firstBuyer+stock+i), i >= again
		if cancelled {
			user = firstBuyer + int64(pay) + int64(i-again)
		}
		var o struct{ Code string }
		err := c.call(ctx, "POST", "/api/vouchers/"+v.ID+"/seckill", user, false, "", 0, &o)
		for err == nil && o.Code == "unavailable" {
			// A unit given back to a sold-out voucher is held a moment
			// (docs/design/soldout.md, Sold-out copies): the buyer clicks again.
			time.Sleep(100 * time.Millisecond)
			o.Code = ""
			err = c.call(ctx, "POST", "/api/vouchers/"+v.ID+"/seckill", user, false, "", 0, &o)
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			return err
		case o.Code == "" && cancelled:
			rebought++
		case o.Code == "":
			answers["admitted"]++
		default:
			answers[o.Code]++
		}
		return nil
	}); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  %d new buyers and the %d whose orders were cancelled clicked again: %d new buyers got the %d units back on sale, and none of the cancelled buyers got one.\n",
		again, cancel+timeout, answers["admitted"], cancel+timeout)
	if answers["admitted"] != cancel+timeout || rebought != 0 {
		return fmt.Errorf("the units back on sale went to %d new buyers, want %d, and to %d buyers whose orders were cancelled, want none", answers["admitted"], cancel+timeout, rebought)
	}
	return nil
}

// demoClient calls the service's API as the demo's buyers and admin.
type demoClient struct {
	url    string
	http   *http.Client
	tokens *auth.Tokens
}

// call sends a request as the user (0: anonymous) and decodes the answer into out; an
// answer other than want (0: any) is an error naming its code.
func (c *demoClient) call(ctx context.Context, method, path string, user int64, admin bool, body string, want int, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	if user != 0 {
		token, err := c.tokens.Mint(auth.Identity{UserID: user, Admin: admin}, time.Hour)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return err
	}
	if want != 0 && res.StatusCode != want {
		return fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}

// remaining reads the voucher's remaining stock.
func (c *demoClient) remaining(ctx context.Context, id string) (int64, error) {
	var v struct{ Remaining *int64 }
	if err := c.call(ctx, "GET", "/api/vouchers/"+id, 0, false, "", http.StatusOK, &v); err != nil || v.Remaining == nil {
		return -1, err
	}
	return *v.Remaining, nil
}

// each runs fn for 0 to n-1, 16 at a time, and returns the first error.
func (c *demoClient) each(n int, fn func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		slots = make(chan struct{}, 16)
	)
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := fn(i); err != nil {
				mu.Lock()
				first = cmpErr(first, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
