// Package storetest is the conformance suite of [seckill.Store]: every
// backend (mysql, postgres, sqlite) runs it from its own tests, so that the
// three databases keep one behaviour, including under concurrent callers.
//
// A backend's test hands [Run] a [NewDatabase] function that makes an empty
// database (a database, a schema, a file) for one test; the suite opens and
// migrates stores on it itself, so that it can also race several stores
// migrating one database.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	seckill "github.com/seckill/seckill"
	"github.com/seckill/seckill/internal/retry"
)

// OpenFunc opens a store on one database without migrating it. The store
// is closed when tb ends.
type OpenFunc func(tb testing.TB) seckill.Store

// NewDatabase makes an empty database for one test, isolated from every
// other test and removed when tb ends, and returns the function that opens
// stores on it. It skips or fails tb when the database server is not there.
type NewDatabase func(tb testing.TB) OpenFunc

// Versioner is implemented by stores that report the migration versions
// recorded in their database, in order. The suite requires it, to check that
// racing migrations record each version once.
type Versioner interface {
	Versions(ctx context.Context) ([]int, error)
}

// Run runs the conformance suite against the backend whose databases
// newDB makes. Subtests run in parallel, each on a database of its own.
func Run(t *testing.T, newDB NewDatabase) {
	s := suite{newDB: newDB}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Migrate/Twice", s.testMigrateTwice},
		{"Migrate/Concurrent", s.testMigrateConcurrent},
		{"Migrate/VersionsBeforeMigrate", s.testVersionsBeforeMigrate},
		{"Ping/AfterClose", s.testPingAfterClose},
		{"Writable", s.testWritable},
		{"Voucher/RoundTrip", s.testVoucherRoundTrip},
		{"Voucher/LongUnicodeTitle", s.testVoucherLongUnicodeTitle},
		{"Voucher/NotFound", s.testVoucherNotFound},
		{"Voucher/NegativeStock", s.testVoucherNegativeStock},
		{"Voucher/Shards", s.testVoucherShards},
		{"Voucher/Payment", s.testVoucherPayment},
		{"Voucher/Sale", s.testVoucherSale},
		{"Voucher/Challenge", s.testVoucherChallenge},
		{"Vouchers/OrderAndLimit", s.testVouchersOrderAndLimit},
		{"Vouchers/DefaultLimit", s.testVouchersDefaultLimit},
		{"UnendedVouchers", s.testUnendedVouchers},
		{"Control/Pause", s.testPauseVoucher},
		{"Control/PauseRacesPlaceOrder", s.testPauseRacesPlaceOrder},
		{"Control/End", s.testEndVoucher},
		{"Control/AddStock", s.testAddStock},
		{"Control/AddStockConcurrent", s.testAddStockConcurrent},
		{"EnsureUser/CreateThenGet", s.testEnsureUser},
		{"EnsureUser/Concurrent", s.testEnsureUserConcurrent},
		{"EnsureUser/Legacy", s.testEnsureUserLegacy},
		{"EnsureUser/LegacyConcurrent", s.testEnsureUserLegacyConcurrent},
		{"User/NotFound", s.testUserNotFound},
		{"SaveOrders/Empty", s.testSaveOrdersEmpty},
		{"SaveOrders/Outcomes", s.testSaveOrdersOutcomes},
		{"SaveOrders/CreatedAt", s.testSaveOrdersCreatedAt},
		{"SaveOrders/CollisionsInBatch", s.testSaveOrdersCollisionsInBatch},
		{"SaveOrders/StockArithmetic", s.testSaveOrdersStockArithmetic},
		{"SaveOrders/DuplicatesDoNotCountAgainstStock", s.testSaveOrdersDuplicatesDoNotCount},
		{"SaveOrders/SoldOutRollsBack", s.testSaveOrdersSoldOut},
		{"SaveOrders/NewSoldOutRollsBack", s.testSaveOrdersNewSoldOut},
		{"SaveOrders/UnknownVoucherRollsBack", s.testSaveOrdersUnknownVoucher},
		{"SaveOrders/LargeBatch", s.testSaveOrdersLargeBatch},
		{"SaveOrders/ConcurrentSameBatch", s.testSaveOrdersConcurrentSameBatch},
		{"SaveOrders/ConcurrentOverlappingBatches", s.testSaveOrdersConcurrentOverlapping},
		{"SaveOrders/ConcurrentIDClash", s.testSaveOrdersConcurrentIDClash},
		{"SaveOrders/ConcurrentNoOversell", s.testSaveOrdersConcurrentNoOversell},
		{"PlaceOrder/Placed", s.testPlaceOrder},
		{"PlaceOrder/CreatedAt", s.testPlaceOrderCreatedAt},
		{"PlaceOrder/Window", s.testPlaceOrderWindow},
		{"PlaceOrder/Refusals", s.testPlaceOrderRefusals},
		{"PlaceOrder/SoldOut", s.testPlaceOrderSoldOut},
		{"PlaceOrder/Duplicate", s.testPlaceOrderDuplicate},
		{"PlaceOrder/AfterFailedOrder", s.testPlaceOrderAfterFailed},
		{"PlaceOrder/IDTaken", s.testPlaceOrderIDTaken},
		{"PlaceOrder/Invalid", s.testPlaceOrderInvalid},
		{"PlaceOrder/Concurrent", s.testPlaceOrderConcurrent},
		{"PlaceOrder/ConcurrentSameBuyer", s.testPlaceOrderConcurrentSameBuyer},
		{"Order/NotFound", s.testOrderNotFound},
		{"UserOrders/OrderAndLimit", s.testUserOrders},
		{"UserOrders/CreatedAndFailed", s.testUserOrdersWithFailed},
		{"CountOrders", s.testCountOrders},
		{"CountFailedOrders", s.testCountFailedOrders},
		{"FailOrder/ThenOrder", s.testFailOrder},
		{"FailOrder/TwiceKeepsFirst", s.testFailOrderTwice},
		{"FailOrder/CreatedUnchanged", s.testFailOrderCreated},
		{"FailOrder/Concurrent", s.testFailOrderConcurrent},
		{"FailOrder/RacingSaveOrders", s.testFailOrderRacingSave},
		{"FailOrder/FreesBuyerAndStock", s.testFailOrderFreesBuyer},
		{"FailOrder/LongUnicodeReason", s.testFailOrderLongReason},
		{"FailOrder/Invalid", s.testFailOrderInvalid},
		{"FailOrder/ThenSaved", s.testFailedThenSaved},
		{"VoucherOrders/Pages", s.testVoucherOrders},
		{"VoucherOrders/DefaultLimit", s.testVoucherOrdersDefaultLimit},
		{"VoucherOrders/EveryStatus", s.testVoucherOrdersEveryStatus},
		{"OrderStatuses/Mixed", s.testOrderStatuses},
		{"OrderStatuses/EmptyNeedsNoQuery", s.testOrderStatusesEmpty},
		{"OrderStatuses/Large", s.testOrderStatusesLarge},
		{"Lifecycle/Pay", s.testLifecyclePay},
		{"Lifecycle/Cancel", s.testLifecycleCancel},
		{"Lifecycle/NotFound", s.testLifecycleNotFound},
		{"Lifecycle/PayBy", s.testLifecyclePayBy},
		{"Lifecycle/PayByFromWrite", s.testPayByFromWrite},
		{"Lifecycle/CountOrders", s.testLifecycleCountOrders},
		{"Lifecycle/NoRebuy", s.testLifecycleNoRebuy},
		{"Lifecycle/Rebuy", s.testLifecycleRebuy},
		{"Lifecycle/PayCancelRace", s.testPayCancelRace},
		{"Lifecycle/DeadlineVouchersOpen", s.testDeadlineVouchersOpen},
		{"Lifecycle/StartPayment", s.testStartPayment},
		{"Lifecycle/CancelUnpaid", s.testCancelUnpaid},
		{"CancelDue/Limit", s.testCancelDue},
		{"CancelDue/PaymentStarted", s.testCancelDueStarted},
		{"CancelDue/Concurrent", s.testCancelDueConcurrent},
		{"Unreturned", s.testUnreturned},
		{"RecordPaymentEvent", s.testPaymentEvents},
		{"RefusedPayments", s.testRefusedPayments},
		{"PaymentEventSeen", s.testPaymentEventSeen},
		{"Order/Amount", s.testOrderAmount},
		{"RefundRequests", s.testRefundRequests},
		{"RefundRequests/Concurrent", s.testClaimRefundsConcurrent},
		{"RefundRequests/LeftByOldBinary", s.testRefundLeftByOldBinary},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

// RunRaces runs the suite's races alone: the cases where transactions
// of several callers meet on the same rows. A backend runs them again
// with its database farther away (faults.FarURL), where each statement
// takes a network round trip and the transactions overlap for
// milliseconds, not the microseconds of loopback.
func RunRaces(t *testing.T, newDB NewDatabase) {
	s := suite{newDB: newDB}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"PlaceOrder/Concurrent", s.testPlaceOrderConcurrent},
		{"PlaceOrder/ConcurrentSameBuyer", s.testPlaceOrderConcurrentSameBuyer},
		{"SaveOrders/ConcurrentNoOversell", s.testSaveOrdersConcurrentNoOversell},
		{"SaveOrders/ConcurrentOverlappingBatches", s.testSaveOrdersConcurrentOverlapping},
		{"Control/PauseRacesPlaceOrder", s.testPauseRacesPlaceOrder},
		{"Lifecycle/PayCancelRace", s.testPayCancelRace},
		{"CancelDue/Concurrent", s.testCancelDueConcurrent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type suite struct {
	newDB NewDatabase
}

// store returns a migrated, empty store on a database of its own.
func (s suite) store(tb testing.TB) seckill.Store {
	tb.Helper()
	st := s.newDB(tb)(tb)
	if err := st.Migrate(tb.Context()); err != nil {
		tb.Fatalf("Migrate: %v", err)
	}
	return st
}

// base is a fixed instant with nanoseconds and a zone other than UTC, so
// that the suite sees stores truncate to microseconds and convert to UTC.
var base = time.Date(2031, 3, 14, 15, 9, 26, 535897932, time.FixedZone("UTC+8", 8*3600))

// micro is how a store gives t back: in UTC, to the microsecond.
func micro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// checkUTC fails tb for each time not in UTC.
func checkUTC(tb testing.TB, what string, ts ...time.Time) {
	tb.Helper()
	for _, t := range ts {
		if t.Location() != time.UTC {
			tb.Errorf("%s: time %v is in %v; want UTC", what, t, t.Location())
		}
	}
}

// checkNow fails tb unless t is a time the store took while the test ran,
// between before and after (allowing for the clock of the database host,
// which is this host, and for truncation).
func checkNow(tb testing.TB, what string, t, before, after time.Time) {
	tb.Helper()
	if t.Before(before.Add(-time.Second)) || t.After(after.Add(time.Second)) {
		tb.Errorf("%s = %v; want a time between %v and %v", what, t, before, after)
	}
}

// newVoucher creates a voucher with the stock and a sale window around base.
func newVoucher(tb testing.TB, st seckill.Store, stock int64) *seckill.Voucher {
	tb.Helper()
	v := &seckill.Voucher{
		Title:        fmt.Sprintf("voucher of %d", stock),
		Stock:        stock,
		InitialStock: stock,
		BeginTime:    base,
		EndTime:      base.Add(time.Hour),
	}
	if err := st.CreateVoucher(tb.Context(), v); err != nil {
		tb.Fatalf("CreateVoucher: %v", err)
	}
	return v
}

// stock returns the voucher's stock in the database.
func stock(tb testing.TB, st seckill.Store, id int64) int64 {
	tb.Helper()
	v, err := st.Voucher(tb.Context(), id)
	if err != nil {
		tb.Fatalf("Voucher(%d): %v", id, err)
	}
	return v.Stock
}

// countOrders returns how many orders of the voucher the database holds.
func countOrders(tb testing.TB, st seckill.Store, voucherID int64) int64 {
	tb.Helper()
	n, err := st.CountOrders(tb.Context(), voucherID)
	if err != nil {
		tb.Fatalf("CountOrders(%d): %v", voucherID, err)
	}
	return n
}

// ids hands out order ids that grow with each call, like the service's
// time-ordered ids; they start high so that they never look like the
// database's own auto-increment ids.
var ids atomic.Int64

func init() { ids.Store(1 << 40) }

func nextID() int64 { return ids.Add(1) }

// order returns a new order of the user for the voucher with a fresh id.
func order(userID, voucherID int64) *seckill.Order {
	return &seckill.Order{ID: nextID(), UserID: userID, VoucherID: voucherID, Status: seckill.OrderPending, CreatedAt: base}
}

// orders returns n orders of the voucher by users first, first+1, ….
func orders(n int, first, voucherID int64) []*seckill.Order {
	os := make([]*seckill.Order, n)
	for i := range os {
		os[i] = order(first+int64(i), voucherID)
	}
	return os
}

// save saves orders and fails tb on an error.
func save(tb testing.TB, st seckill.Store, os ...*seckill.Order) []seckill.SaveOutcome {
	tb.Helper()
	got, err := st.SaveOrders(tb.Context(), os)
	if err != nil {
		tb.Fatalf("SaveOrders: %v", err)
	}
	if len(got) != len(os) {
		tb.Fatalf("SaveOrders returned %d outcomes for %d orders", len(got), len(os))
	}
	return got
}

// callerRetry is how the suite calls a store again as a stream worker or
// the sync mode's service does: as it was, while the store reports a
// transient failure, a few milliseconds apart so that the colliding
// callers do not collide again.
var callerRetry = retry.Policy{
	Attempts:  50,
	Retryable: func(err error) bool { return errors.Is(err, seckill.ErrTransient) },
	Wait:      func(int) time.Duration { return time.Duration(rand.IntN(10)+1) * time.Millisecond },
}

// saveRetrying saves orders as a stream worker does, as callerRetry says.
func saveRetrying(ctx context.Context, st seckill.Store, os []*seckill.Order) ([]seckill.SaveOutcome, error) {
	var got []seckill.SaveOutcome
	err := retry.Do(ctx, callerRetry, func() (err error) {
		got, err = st.SaveOrders(ctx, os)
		return err
	})
	return got, err
}

// repeat returns n copies of o.
func repeat(o seckill.SaveOutcome, n int) []seckill.SaveOutcome {
	os := make([]seckill.SaveOutcome, n)
	for i := range os {
		os[i] = o
	}
	return os
}
