package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	seckill "github.com/seckill/seckill"
)

func (s suite) testEnsureUser(t *testing.T) {
	st := s.store(t)
	before := time.Now()
	u, created, err := st.EnsureUser(t.Context(), "+8613800138000")
	after := time.Now()
	if err != nil {
		t.Fatalf("EnsureUser: %v", err)
	}
	if !created {
		t.Error("EnsureUser of a new phone reported created = false")
	}
	if u.ID <= 0 || u.Phone != "+8613800138000" {
		t.Errorf("EnsureUser = %+v; want a positive id and the phone", u)
	}
	checkNow(t, "new user's CreatedAt", u.CreatedAt, before, after)
	checkUTC(t, "new user's CreatedAt", u.CreatedAt)

	again, created, err := st.EnsureUser(t.Context(), "+8613800138000")
	if err != nil {
		t.Fatalf("EnsureUser again: %v", err)
	}
	if created {
		t.Error("EnsureUser of a known phone reported created = true")
	}
	if diff := cmp.Diff(u, again); diff != "" {
		t.Errorf("EnsureUser of a known phone (-first +again):\n%s", diff)
	}

	other, created, err := st.EnsureUser(t.Context(), "+8613900139000")
	if err != nil {
		t.Fatalf("EnsureUser of another phone: %v", err)
	}
	if !created || other.ID == u.ID {
		t.Errorf("EnsureUser of another phone = %+v, created %v; want a new user", other, created)
	}

	got, err := st.User(t.Context(), u.ID)
	if err != nil {
		t.Fatalf("User(%d): %v", u.ID, err)
	}
	if diff := cmp.Diff(u, got); diff != "" {
		t.Errorf("User(%d) (-ensured +got):\n%s", u.ID, diff)
	}
	checkUTC(t, "User", got.CreatedAt)
}

func (s suite) testEnsureUserConcurrent(t *testing.T) {
	st := s.store(t)
	const n = 50
	type result struct {
		u       *seckill.User
		created bool
		err     error
	}
	results := make([]result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			<-start
			u, created, err := st.EnsureUser(t.Context(), "13700000000")
			results[i] = result{u, created, err}
		})
	}
	close(start)
	wg.Wait()

	var id int64
	createdBy := 0
	for i, r := range results {
		if r.err != nil {
			t.Errorf("EnsureUser call %d: %v", i, r.err)
			continue
		}
		if id == 0 {
			id = r.u.ID
		}
		if r.u.ID != id {
			t.Errorf("EnsureUser call %d returned user %d; another call returned %d", i, r.u.ID, id)
		}
		if r.created {
			createdBy++
		}
	}
	if createdBy != 1 {
		t.Errorf("%d of %d concurrent EnsureUser calls for one phone reported created; want exactly 1", createdBy, n)
	}
}

func (s suite) testUserNotFound(t *testing.T) {
	st := s.store(t)
	u, _, err := st.EnsureUser(t.Context(), "13600000000")
	if err != nil {
		t.Fatalf("EnsureUser: %v", err)
	}
	for _, id := range []int64{u.ID + 1, 0, -1} {
		got, err := st.User(t.Context(), id)
		if !errors.Is(err, seckill.ErrUserNotFound) {
			t.Errorf("User(%d) = %+v, %v; want ErrUserNotFound", id, got, err)
		}
	}
}
