package http

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill"
)

// FuzzDecodeVoucher feeds the create-voucher decoder arbitrary bodies: it
// must never panic, must refuse with ErrInvalidArgument (or errBodyTooLarge)
// and nothing else, and whatever it accepts must have its times in UTC to
// the microsecond, and break the voucher rules, if at all, with
// ErrInvalidArgument (which VoucherService.Create answers).
func FuzzDecodeVoucher(f *testing.F) {
	for _, seed := range []string{
		`{"title":"t","stock":100,"beginTime":"2026-12-01T20:00:00+08:00","endTime":"2099-12-01T21:00:00+08:00"}`,
		`{"title":"券","stock":1,"beginTime":"2026-12-01T20:00:00.123456789Z","endTime":"2099-01-01T00:00:00Z"}`,
		`{"title":"","stock":0}`,
		`{"title":"t","stock":1e3,"beginTime":"x","endTime":"y"}`,
		`{"title":"t","stock":-9223372036854775808,"beginTime":"2026-12-01T20:00:00Z","endTime":"2099-12-01T21:00:00Z"}`,
		`{"title":null,"stock":null}`,
		`[]`, `null`, `"x"`, `{`, ``, `{"title":"a"}{"title":"b"}`,
		`{"title":"\u0000","stock":5,"beginTime":"0000-01-01T00:00:00Z","endTime":"9999-12-31T23:59:59Z"}`,
	} {
		f.Add([]byte(seed))
	}
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte) {
		v, err := decodeVoucher(strings.NewReader(string(body)))
		if err != nil {
			if !errors.Is(err, seckill.ErrInvalidArgument) && !errors.Is(err, errBodyTooLarge) {
				t.Fatalf("decodeVoucher(%q) = %v: not an invalid-argument error", body, err)
			}
			var e *seckill.Error
			if !errors.As(err, &e) || e.Message == "" {
				t.Fatalf("decodeVoucher(%q) = %v: no client message", body, err)
			}
			return
		}
		if err := v.Validate(now); err != nil && !errors.Is(err, seckill.ErrInvalidArgument) {
			t.Fatalf("decodeVoucher(%q) gave a voucher that Validate refuses with %v", body, err)
		}
		if v.BeginTime.Location() != time.UTC || v.BeginTime.Nanosecond()%1000 != 0 {
			t.Fatalf("beginTime %v is not UTC to the microsecond", v.BeginTime)
		}
	})
}
