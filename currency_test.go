package seckill_test

import (
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/seckill/seckill"
)

func TestFormatMoney(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		amount   int64
		currency string
		want     string
	}{
		{1250, "CNY", "12.50 CNY"},
		{5, "USD", "0.05 USD"},
		{0, "EUR", "0.00 EUR"},
		{100, "GBP", "1.00 GBP"},
		{-1250, "CNY", "-12.50 CNY"},
		{1200, "JPY", "1200 JPY"},
		{0, "KRW", "0 KRW"},
		{seckill.MaxAmount, "HKD", "10000000000.00 HKD"},
		{math.MinInt64, "USD", "-92233720368547758.08 USD"},
		{1250, "XYZ", "1250 (minor units) XYZ"},
	} {
		if got := seckill.FormatMoney(tc.amount, tc.currency); got != tc.want {
			t.Errorf("FormatMoney(%d, %q) = %q; want %q", tc.amount, tc.currency, got, tc.want)
		}
	}
}

func TestCheckCurrency(t *testing.T) {
	t.Parallel()
	code := regexp.MustCompile(`^[A-Z]{3}$`)
	for _, c := range seckill.Currencies() {
		if !code.MatchString(c) {
			t.Errorf("the table holds %q, not an ISO 4217 alphabetic code", c)
		}
		if err := seckill.CheckCurrency("currency", c); err != nil {
			t.Errorf("CheckCurrency(%q) = %v", c, err)
		}
	}
	for code, exp := range map[string]int{"CNY": 2, "USD": 2, "EUR": 2, "JPY": 0, "KRW": 0, "GBP": 2, "HKD": 2} {
		if got, ok := seckill.CurrencyExponent(code); !ok || got != exp {
			t.Errorf("CurrencyExponent(%q) = %d, %v; want %d", code, got, ok, exp)
		}
	}
	for _, c := range []string{"", "cny", "CN", "CNYY", "XYZ", "¥"} {
		err := seckill.CheckCurrency("currency", c)
		if !errors.Is(err, seckill.ErrInvalidArgument) || !strings.Contains(err.Error(), "currency: ") || !strings.Contains(err.Error(), "CNY, EUR") {
			t.Errorf("CheckCurrency(%q) = %v; want ErrInvalidArgument naming the field and the known codes", c, err)
		}
	}
}
