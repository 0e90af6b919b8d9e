package soldout

// What the tests of package soldout_test, against real Redis, read of the
// copies.

import "github.com/seckill/seckill"

// Poll and Idle are copyPoll and copyIdle.
const (
	Poll = copyPoll
	Idle = copyIdle
)

// Copy is one voucher's copy.
type Copy = buyersCopy

// Mono is the copies' monotonic clock.
func (s *Copies) Mono() int64 { return s.mono() }

// get returns the copy of the unsharded voucher, or nil.
func (s *Copies) get(voucherID int64) *buyersCopy {
	return s.copyOf(seckill.Shard{VoucherID: voucherID}, false)
}

// CopyOf returns the copy of the shard of a sharded voucher, or nil.
func (s *Copies) CopyOf(sh seckill.Shard) *Copy { return s.copyOf(sh, true) }

// CopiedShard reports whether the shard's buyers are answered from its
// copy alone now.
func (s *Copies) CopiedShard(sh seckill.Shard) bool {
	cp := s.copyOf(sh, true)
	return cp != nil && s.mono() < cp.trusted.Load()
}

// Copy returns the voucher's copy, or nil.
func (s *Copies) Copy(voucherID int64) *Copy { return s.get(voucherID) }

// Made counts the whole copies made.
func (s *Copies) Made() int64 { return s.copies.Load() }

// Copied reports whether the voucher's buyers are answered from its copy
// alone now.
func (s *Copies) Copied(voucherID int64) bool {
	cp := s.get(voucherID)
	return cp != nil && s.mono() < cp.trusted.Load()
}

// Trusted is until when (mono) the copy answers alone.
func (cp *buyersCopy) Trusted() int64 { return cp.trusted.Load() }

// Confirmed is when (mono) the last read that found the copy true was sent.
func (cp *buyersCopy) Confirmed() int64 { return cp.confirmed.Load() }

// Live reports a copy made, not failed, and not waiting to be made again.
func (cp *buyersCopy) Live() bool { return cp.retry == 0 && !cp.stale.Load() }

// Size is how many buyers the copy holds.
func (cp *buyersCopy) Size() int64 { return cp.view.Load().size }

// Order is the order the copy holds for the user, or 0.
func (cp *buyersCopy) Order(userID int64) int64 { return cp.view.Load().order(userID) }
