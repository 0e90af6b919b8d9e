package seckill

import "context"

// Ledger owns a sale's stock and its buyers: it decides who may take a
// unit. The services speak to it and to the Store only. Which Ledger is
// plugged in is the mode: the Redis ledger (package redisledger) admits
// in Redis and hands the order to a stream or to this process's queue;
// the SQL ledger (package sqlledger) admits in the database, in the
// request (docs/design/ledger.md).
type Ledger interface {
	VoucherLedger
	UnitReturner
	// Admit takes one unit of o's voucher for o's buyer, under o's id, at
	// most once per buyer, and says where the order is then: on its way to
	// the database (OrderPending), or written there already
	// (OrderCreated). Otherwise an error of kind ErrDuplicateOrder (with
	// the order the buyer holds), ErrSoldOut, ErrNotStarted, ErrEnded,
	// ErrPaused, ErrVoucherNotFound, or ErrUnavailable with RetryAfter. o
	// is a value: most buys of a flash sale are answered sold out, and
	// allocate no order.
	Admit(ctx context.Context, o Order) (OrderStatus, error)
	// HeldOrder returns the order the buyer holds of the voucher as the
	// ledger records it: zero when none, or when the ledger keeps no
	// buyers apart from the database.
	HeldOrder(ctx context.Context, userID, voucherID int64) (Held, error)
	// HeldOrders returns the buyer's order id in each of the vouchers
	// where the ledger records one.
	HeldOrders(ctx context.Context, userID int64, voucherIDs ...int64) (map[int64]int64, error)
}

// Held is the order a buyer holds of a voucher, as a ledger records it
// (Ledger.HeldOrder).
type Held struct {
	// OrderID is the buyer's order; 0 if none.
	OrderID int64
	// Unconfirmed says the ledger confirms each admission before it
	// answers it (with Redis replicas), and the order was read without
	// that: only an admission may tell the buyer of it.
	Unconfirmed bool
}

// SoldOutAnswers is the part of a ledger that answers the buyers of a
// voucher it knows sold out without an admission: a challenge voucher's
// buyers are answered before they solve anything. The SQL ledger keeps no
// such memory: every buy asks the database.
type SoldOutAnswers interface {
	// AnswerSoldOut answers a buyer of v as a buy would if v is known sold
	// out: ErrSoldOut, or the buyer's order (ErrDuplicateOrder) when a
	// plain read may vouch for it; nil when it does not know, or cannot
	// vouch (an admission then answers). probe lets it renew a lapsed
	// memory from the voucher's stock.
	AnswerSoldOut(ctx context.Context, v *Voucher, userID int64, probe bool) error
}

// VoucherLedger is the part of a Ledger that holds the vouchers' sales:
// what VoucherService asks of it.
type VoucherLedger interface {
	// Load puts a voucher just created on sale: its stock, window and
	// generation. Loading a voucher the ledger holds already (rebuilt by
	// a buyer first) keeps what it holds.
	Load(ctx context.Context, v *Voucher) error
	// Remaining returns the units left to sell of each of vs that the
	// ledger holds; a voucher it does not hold now (lost, to be rebuilt)
	// is absent from the map. A nil map says the rows are the sale (the
	// ledger is the database): what remains is each row's stock, and the
	// caller reads rows it kept afresh.
	Remaining(ctx context.Context, vs ...*Voucher) (map[int64]int64, error)
	// Control applies an operator's control of the voucher id: write
	// makes it in the database and returns the voucher as it then is, and
	// the ledger then makes what admission reads hold it, and reads what
	// remains, before it returns: the controls of one voucher take turns,
	// on every instance, and the answer is the voucher as its control
	// left it. A control the database took and the ledger did not is
	// ErrUnavailable: the caller asks again.
	Control(ctx context.Context, id int64, c Control, write func(context.Context) (*Voucher, error)) (*VoucherView, error)
	// Restore makes the ledger ready to sell at start: the vouchers on
	// sale that it lost are put back from the database.
	Restore(ctx context.Context) error
	// MaxShards is how many shards a voucher may have in this ledger, and
	// why no more.
	MaxShards() (int, string)
}
