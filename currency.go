package seckill

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// DefaultCurrency is the currency of a voucher created without one, unless
// the service is configured with another (--currency).
const DefaultCurrency = "CNY"

// MaxAmount bounds a voucher's Price and Value, in minor units: far above
// any voucher, and well within the integers a JSON number carries exactly
// (2^53), so that no client rounds a price.
const MaxAmount = 1_000_000_000_000

// currencyExponents are the ISO 4217 currencies the service takes, with
// their minor unit's exponent: a price of 1250 is 12.50 CNY but 1250 JPY.
// A code missing here is refused rather than guessed: its exponent would
// be wrong by a factor of a hundred. Add a row to take another, where
// browsers agree on its decimals (TestSalePageInBrowser checks): IDR is
// not here, as ISO gives it two and browsers show none.
var currencyExponents = map[string]int{
	"AUD": 2,
	"CAD": 2,
	"CHF": 2,
	"CNY": 2,
	"EUR": 2,
	"GBP": 2,
	"HKD": 2,
	"INR": 2,
	"JPY": 0,
	"KRW": 0,
	"MOP": 2,
	"MYR": 2,
	"NZD": 2,
	"PHP": 2,
	"SGD": 2,
	"THB": 2,
	"TWD": 2,
	"USD": 2,
	"VND": 0,
}

// Currencies returns the codes of the currencies the service takes,
// sorted.
func Currencies() []string {
	return slices.Sorted(maps.Keys(currencyExponents))
}

// CurrencyExponent returns the exponent of the currency's minor unit (2
// for CNY: 100 fen to the yuan; 0 for JPY), and whether the service knows
// the currency.
func CurrencyExponent(code string) (int, bool) {
	e, ok := currencyExponents[code]
	return e, ok
}

// CheckCurrency returns an ErrInvalidArgument error naming field unless
// code is a currency the service takes: three upper-case letters, in its
// table.
func CheckCurrency(field, code string) error {
	if _, ok := currencyExponents[code]; ok {
		return nil
	}
	return Errorf(ErrInvalidArgument, "%s: must be an ISO 4217 code this service knows (%s), got %q", field, strings.Join(Currencies(), ", "), truncate(code, 10))
}

// FormatMoney writes amount, in the currency's minor units, in its major
// units followed by the code: 1250 CNY is "12.50 CNY", 1200 JPY "1200 JPY",
// -5 USD "-0.05 USD". A currency the service does not know is written in
// minor units, as "1250 (minor units) XXX": never a wrong decimal point.
func FormatMoney(amount int64, currency string) string {
	exp, ok := currencyExponents[currency]
	if !ok {
		return strconv.FormatInt(amount, 10) + " (minor units) " + currency
	}
	sign, abs := "", uint64(amount)
	if amount < 0 {
		sign, abs = "-", uint64(-amount) // -MinInt64 wraps to itself, as uint64 its magnitude
	}
	if exp == 0 {
		return sign + strconv.FormatUint(abs, 10) + " " + currency
	}
	unit := uint64(1)
	for range exp {
		unit *= 10
	}
	return fmt.Sprintf("%s%d.%0*d %s", sign, abs/unit, exp, abs%unit, currency)
}
