package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// TestErrorBodyAsEncodingJSON: the error answers written by hand are the
// bytes encoding/json writes, for messages of every kind of character.
func TestErrorBodyAsEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, msg := range []string{
		"", "voucher 7 is sold out", `quote " and backslash \`, "<script>&", "tab\tnewline\ncr\r", "\x00\x1f\x7f",
		"é ü 秒杀", "bad utf-8 \xff\xfe", "line sep \u2028 para sep \u2029",
	} {
		for _, orderID := range []int64{0, 1, -5, 1<<63 - 1} {
			body := errorBody{Code: "sold_out", Message: msg, OrderID: orderID}
			var want bytes.Buffer
			if err := json.NewEncoder(&want).Encode(body); err != nil {
				t.Fatal(err)
			}
			if got := appendErrorBody(nil, &body); !bytes.Equal(got, want.Bytes()) {
				t.Errorf("appendErrorBody(%q, %d) = %s, encoding/json %s", msg, orderID, got, want.Bytes())
			}
		}
	}
}

// FuzzJSONString: appendJSONString writes any string as encoding/json does.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", `"\<>&`, "\n\x00", "é\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("appendJSONString(%q) = %s, encoding/json %s", s, got, want)
		}
	})
}

// TestLookupErrorFastPath: an *seckill.Error answers the entry of its kind,
// as the table's first match would, and anything else goes by the table.
func TestLookupErrorFastPath(t *testing.T) {
	t.Parallel()
	slow := func(err error) *errorCode {
		for i := range errorCodes {
			if errors.Is(err, errorCodes[i].err) {
				return &errorCodes[i]
			}
		}
		return internalError
	}
	var errs []error
	for _, e := range errorCodes {
		errs = append(errs, e.err, seckill.Errorf(e.err, "x"), fmt.Errorf("wrapped: %w", seckill.Errorf(e.err, "x")),
			&seckill.Error{Kind: fmt.Errorf("kind wraps %w", e.err)})
	}
	errs = append(errs, errors.New("other"), &seckill.Error{Kind: errors.New("unknown kind")}, seckill.ErrVoucherNotLoaded)
	for _, err := range errs {
		if got, want := lookupError(err), slow(err); got != want {
			t.Errorf("lookupError(%v) = %v, the table says %v", err, got.code, want.code)
		}
	}
}

// TestWriteErrorRetryAfter: Retry-After in whole seconds, rounded up, and
// 1 on every 503 that gives none.
func TestWriteErrorRetryAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&seckill.Error{Kind: seckill.ErrRateLimited, RetryAfter: 200 * time.Millisecond}, "1"},
		{&seckill.Error{Kind: seckill.ErrRateLimited, RetryAfter: time.Second}, "1"},
		{&seckill.Error{Kind: seckill.ErrRateLimited, RetryAfter: 1001 * time.Millisecond}, "2"},
		{&seckill.Error{Kind: seckill.ErrUnavailable, RetryAfter: 5 * time.Minute}, "300"},
		{seckill.ErrUnavailable, "1"},
		{seckill.ErrSoldOut, ""},
	} {
		w := httptest.NewRecorder()
		writeError(w, tc.err)
		if got := w.Header().Get("Retry-After"); got != tc.want {
			t.Errorf("%v: Retry-After %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestExpectedUnavailableNotLogged: a 503 the service marks expected (a
// sharded voucher's last units moving between shards) is answered as any
// 503 but not logged, as sold_out is not; a 503 that is a failure still is,
// at ERROR.
func TestExpectedUnavailableNotLogged(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	s := &Server{logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), sampler: newLogSampler(10)}
	r := httptest.NewRequest("POST", "/api/vouchers/7/seckill", nil)
	for _, tc := range []struct {
		name   string
		err    error
		status int
		logged string // the line's level, "" for none
	}{
		{"sold out", seckill.Errorf(seckill.ErrSoldOut, "voucher 7 is sold out"), 409, ""},
		{"last units moving", &seckill.Error{Kind: seckill.ErrUnavailable, Message: "the last units are moving", RetryAfter: time.Second, Expected: true}, 503, ""},
		{"last units moving, wrapped", fmt.Errorf("buy: %w", &seckill.Error{Kind: seckill.ErrUnavailable, Message: "moving", Expected: true}), 503, ""},
		{"redis down", &seckill.Error{Kind: seckill.ErrUnavailable, Message: "the sale is being restored; try again", RetryAfter: time.Second}, 503, "level=ERROR"},
		{"internal", errors.New("boom"), 500, "level=ERROR"},
	} {
		logs.Reset()
		w := httptest.NewRecorder()
		s.error(w, r, tc.err)
		if w.Code != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, w.Code, tc.status)
		}
		got := logs.String()
		switch {
		case tc.logged == "" && got != "":
			t.Errorf("%s: logged %q, want nothing", tc.name, got)
		case tc.logged != "" && (!strings.Contains(got, tc.logged) || !strings.Contains(got, "request failed")):
			t.Errorf("%s: logged %q, want a %s line", tc.name, got, tc.logged)
		}
	}
}
