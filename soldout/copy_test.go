package soldout

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The tests of this file run in a synctest bubble over fakeRedis: the
// copies' clock, tickers and the fake's latency are the bubble's, so each
// timing rule is checked to the nanosecond, and a poller left running
// fails the test (the bubble does not end).

// soldOutFake returns a fake voucher sold out to users 1 to 3 (orders 101
// to 103), each read taking latency, and copies over it that answer from
// a copy already made; they are closed when the test ends.
func soldOutFake(t *testing.T, latency time.Duration) (*fakeRedis, *Copies) {
	t.Helper()
	f := newFakeRedis(map[int64]int64{1: 101, 2: 102, 3: 103})
	f.latency = latency
	s := New(f, Config{}, nil)
	t.Cleanup(s.Close)
	if got := ask(t, s, 2); got != 102 { // from the slot; starts the copy
		t.Fatalf("buyer 2: order %d, want 102", got)
	}
	for range 100 {
		time.Sleep(copyPoll)
		synctest.Wait()
		if cp := s.get(1); cp != nil && s.mono() < cp.trusted.Load() {
			return f, s
		}
	}
	t.Fatal("no trusted copy 100 polls after the first answer")
	return nil, nil
}

// ask returns the user's order of voucher 1.
func ask(t *testing.T, s *Copies, userID int64) int64 {
	t.Helper()
	order, err := s.SoldOutBuyerOrder(context.Background(), userID, 1)
	if err != nil {
		t.Fatalf("SoldOutBuyerOrder(user %d): %v", userID, err)
	}
	return order
}

// TestCopyAnswersWhilePollsConfirm: while the polls find the voucher sold
// out, every answer comes from the copy, with no read of its own, even
// when each read takes most of Trust.
func TestCopyAnswersWhilePollsConfirm(t *testing.T) {
	for _, latency := range []time.Duration{0, time.Millisecond, Trust - copyPoll - time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			f, s := soldOutFake(t, latency)
			// Behind the scripts' back (no version change): Redis says
			// 999, the copy 102; an answer of 999 is a read of its own.
			f.do(func() { f.buyers[2] = 999 })
			slots, _, _ := f.reads()
			for range 1000 {
				time.Sleep(7 * time.Millisecond)
				if got := ask(t, s, 2); got != 102 {
					t.Fatalf("latency %v: buyer 2 answered %d at %v, want 102 from the copy", latency, got, time.Duration(s.mono()))
				}
			}
			if now, _, _ := f.reads(); now != slots {
				t.Errorf("latency %v: %d reads of a slot while the polls confirmed the copy", latency, now-slots)
			}
		})
	}
}

// TestCopyTrustLapsesWithoutAPoll: a copy answers alone until Trust after
// the last read that found it true was sent, and not a nanosecond more:
// then, its polls unheard, an answer waits for copyWaits polls and reads
// the slot.
func TestCopyTrustLapsesWithoutAPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, s := soldOutFake(t, time.Millisecond)
		f.do(func() { f.buyers[2] = 999; f.pollsFail = true })
		synctest.Wait()
		cp := s.get(1)
		sent, until := cp.confirmed.Load(), cp.trusted.Load()
		if until != sent+int64(Trust) {
			t.Fatalf("trusted until %v, the last confirming read sent at %v: want Trust after it", time.Duration(until), time.Duration(sent))
		}
		time.Sleep(time.Duration(until-s.mono()) - time.Nanosecond)
		slots, _, _ := f.reads()
		if got := ask(t, s, 2); got != 102 {
			t.Errorf("a nanosecond before the trust lapses: order %d, want 102 from the copy", got)
		}
		time.Sleep(time.Nanosecond)
		asked := s.mono()
		if got := ask(t, s, 2); got != 999 {
			t.Errorf("as the trust lapses, polls unheard: order %d, want 999 read from the slot", got)
		}
		if now, _, _ := f.reads(); now != slots+1 {
			t.Errorf("%d reads of the slot, want 1", now-slots)
		}
		if waited := time.Duration(s.mono() - asked); waited > copyWaits*copyPoll+f.latency {
			t.Errorf("the answer waited %v for polls, more than %d of them", waited, copyWaits)
		}
		// Heard again: the copy answers alone again.
		f.do(func() { f.pollsFail = false })
		time.Sleep(copyPoll)
		if got := ask(t, s, 2); got != 102 {
			t.Errorf("polls heard again: order %d, want 102 from the copy", got)
		}
	})
}

// TestHeldStockNeverHidesABuyer: a unit given back to a sold-out voucher is
// held (redis.Hold, 250 ms) before it is admitted again. Any hold longer
// than Trust keeps every answer given after the new buyer's admission
// true; without one, the copy trusted from a read before the unit was
// given back tells that buyer "none".
func TestHeldStockNeverHidesABuyer(t *testing.T) {
	const hold = 250 * time.Millisecond // redis.Hold
	for _, tc := range []struct {
		hold  time.Duration
		hides bool
	}{{hold, false}, {Trust + time.Nanosecond, false}, {Trust / 2, true}, {0, true}} {
		synctest.Test(t, func(t *testing.T) {
			f, s := soldOutFake(t, time.Millisecond)
			// Given back at some instant between two polls.
			time.Sleep(copyPoll/2 + 3*time.Millisecond)
			f.release(1, tc.hold)
			var admitted atomic.Bool
			go func() { // the new buyer, admitted as soon as the hold lets them
				for !f.admit(4, 104) {
					time.Sleep(time.Millisecond)
				}
				admitted.Store(true)
			}()
			hidden, after := 0, 0
			for range 400 {
				time.Sleep(time.Millisecond)
				was := admitted.Load()
				got := ask(t, s, 4)
				if was {
					after++
					if got != 104 {
						hidden++
					}
				}
			}
			if after == 0 {
				t.Fatalf("hold %v: the new buyer was not admitted in 400 ms", tc.hold)
			}
			if (hidden > 0) != tc.hides {
				t.Errorf("hold %v: %d of %d answers given after the admission told the new buyer none; want hidden: %v", tc.hold, hidden, after, tc.hides)
			}
		})
	}
}

// TestUnsoldStockGivesNoTrust: while a unit given back is not sold again,
// the polls find the copy true but give it no trust; every answer waits
// for a poll sent after it came (asked for at once, at most every
// copyWoken after the last) and answers from it, with no read of its own.
func TestUnsoldStockGivesNoTrust(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, s := soldOutFake(t, time.Millisecond)
		f.release(1, time.Hour)
		time.Sleep(Trust + copyPoll)
		cp := s.get(1)
		slots, polls, _ := f.reads()
		began := s.mono()
		for range 100 {
			time.Sleep(time.Millisecond)
			came := s.mono()
			if came < cp.trusted.Load() {
				t.Fatal("the copy is trusted while a unit given back is not sold again")
			}
			if got := ask(t, s, 1); got != 0 {
				t.Fatalf("buyer 1, released: order %d, want none", got)
			}
			if sent := cp.confirmed.Load(); sent < came {
				t.Fatalf("answered from a poll sent %v before the question came", time.Duration(came-sent))
			}
			if waited := time.Duration(s.mono() - came); waited > copyWoken+f.latency {
				t.Fatalf("the answer waited %v, more than copyWoken and a read", waited)
			}
		}
		now, pollsNow, _ := f.reads()
		if now != slots {
			t.Errorf("%d reads of a slot; want every answer from a poll", now-slots)
		}
		// Asked for, polls come at most every copyWoken, besides the
		// ticker's: not back to back, as 100 answers would ask.
		elapsed := time.Duration(s.mono() - began)
		if n, most := pollsNow-polls, int(elapsed/copyWoken+elapsed/copyPoll)+1; n > most {
			t.Errorf("%d polls in %v: want them spaced by %v besides the ticker's, at most %d", n, elapsed, copyWoken, most)
		}
	})
}

// TestIdleCopyDropped: a copy nobody asks for is polled for copyIdle, then
// dropped, its poller ended.
func TestIdleCopyDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, s := soldOutFake(t, 0)
		cp := s.get(1)
		time.Sleep(time.Duration(cp.used.Load()+int64(copyIdle)-s.mono()) - copyPoll)
		synctest.Wait()
		if s.get(1) != cp || cp.ended.Load() {
			t.Fatal("the copy went before copyIdle")
		}
		time.Sleep(2 * copyPoll)
		synctest.Wait()
		if s.get(1) != nil || !cp.ended.Load() {
			t.Fatal("the copy is kept past copyIdle without a question")
		}
		_, polls, _ := f.reads()
		time.Sleep(time.Second)
		if _, now, _ := f.reads(); now != polls {
			t.Errorf("%d polls after the copy was dropped", now-polls)
		}
	})
}

// TestFailedCopyRetriedAfterRetry: a voucher that is not sold out is not
// copied, and no copy is tried again for copyRetry; then an answer tries
// one.
func TestFailedCopyRetriedAfterRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeRedis(map[int64]int64{1: 101})
		f.stock = 1
		s := New(f, Config{}, nil)
		defer s.Close()
		ask(t, s, 1)
		synctest.Wait()
		cp := s.get(1)
		if cp == nil || cp.retry == 0 {
			t.Fatal("no failed copy kept for a voucher with a unit left")
		}
		_, polls, _ := f.reads()
		for s.mono() < cp.retry-int64(time.Millisecond) {
			time.Sleep(time.Millisecond)
			if got := ask(t, s, 1); got != 101 {
				t.Fatalf("buyer 1: order %d, want 101 from the slot", got)
			}
		}
		synctest.Wait()
		if _, now, _ := f.reads(); now != polls {
			t.Fatalf("%d reads of the voucher within copyRetry of a failed copy", now-polls)
		}
		time.Sleep(time.Millisecond)
		ask(t, s, 1)
		synctest.Wait()
		if _, now, _ := f.reads(); now != polls+1 {
			t.Errorf("%d reads of the voucher once copyRetry passed, want 1", now-polls)
		}
	})
}

// TestCloseStopsPollers: Close ends every poller (the bubble would not end
// otherwise) and is safe twice; once the copy's trust lapses, the answers
// read the slots.
func TestCloseStopsPollers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, s := soldOutFake(t, time.Millisecond)
		f.do(func() { f.buyers[2] = 999 })
		s.Close()
		s.Close()
		// The copy's trust from its last read lapses; no poll renews it,
		// none is started again.
		time.Sleep(Trust)
		for range 3 {
			if got := ask(t, s, 2); got != 999 {
				t.Errorf("after Close: order %d, want 999 read from the slot", got)
			}
			time.Sleep(copyRetry)
		}
	})
}

// TestAwaitPollTakesNoOlderPoll: an answer that waits for a poll is not
// given from one sent before it came, even one that ends after: that read
// may predate an admission the buyer was answered before asking. It is
// given from the next, and not at all once the copy ended.
func TestAwaitPollTakesNoOlderPoll(t *testing.T) {
	t.Parallel()
	type result struct {
		order int64
		ok    bool
	}
	const came = int64(time.Hour)
	for _, ends := range []bool{false, true} {
		cp := newBuyersCopy()
		cp.view.Store(&copyView{base: map[int64]int64{2: 102}, size: 1})
		cp.confirmed.Store(came - 1) // the last poll was sent just before
		got := make(chan result, 1)
		go func() {
			order, ok := cp.awaitPoll(context.Background(), 2, came)
			got <- result{order, ok}
		}()
		for i := range 2 {
			select {
			case r := <-got:
				t.Fatalf("answered %+v from a poll sent before the question came", r)
			case <-cp.wake: // it asks for a poll
			}
			if i == 0 {
				cp.pollEnded() // one sent before it came ends
			}
		}
		if ends {
			cp.ended.Store(true)
		} else {
			cp.confirmed.Store(came) // one sent after it came
		}
		cp.pollEnded()
		want := result{102, true}
		if ends {
			want = result{}
		}
		if r := <-got; r != want {
			t.Errorf("copy ended %v: answer %+v, want %+v", ends, r, want)
		}
	}
}

// TestPanickingPollerReplaced: a panic in a poll ends that copy's poller,
// not the process, and drops the copy; the next answer reads the slot and
// starts another poller, which makes the copy again.
func TestPanickingPollerReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, s := soldOutFake(t, 0)
		cp := s.get(1)
		f.do(func() { f.pollsPanic = true })
		time.Sleep(copyPoll)
		synctest.Wait()
		if s.get(1) != nil || !cp.ended.Load() {
			t.Fatal("the copy is kept after its poller panicked")
		}
		f.do(func() { f.pollsPanic = false })
		made := s.copies.Load()
		if got := ask(t, s, 2); got != 102 {
			t.Fatalf("buyer 2: order %d, want 102 from the slot", got)
		}
		synctest.Wait()
		if s.copies.Load() != made+1 || !s.get(1).Live() {
			t.Errorf("no copy made again after the poller panicked: %d made, want %d", s.copies.Load(), made+1)
		}
	})
}
