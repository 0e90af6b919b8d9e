// Package redisledger is the Redis ledger: the owner of everything Redis
// does for a sale (seckill.Ledger). It admits buyers with one script per
// admission, with the recoveries an admission may need (a server not
// checked since it started, a voucher the cache lost, an answer lost on
// the way back, a sharded voucher's stock on other shards), answers the
// buyers of a voucher it knows sold out from its sold-out memory, and
// hands each order admitted to where it waits for the database: the
// voucher's Redis Stream (the stream mode) or this process's queue (the
// queue mode).
//
// It also runs the group commit of admissions that wait for replicas
// (GroupCommit). Package redis does the raw I/O (keys, scripts, the
// client) and starts no goroutine; the loops that drive it live here, on
// internal/startstop (docs/design/ledger.md).
package redisledger
